// DriftMonitor: per-model drift detection that the executor drives record by record. It keeps a
// baseline and a current window per (model, series), evaluates the configured detectors when a
// window closes, runs the alert state machines, and hands back alert events as JSON-ready
// structs. Its state is bounded (no raw records beyond a baseline's warmup values) and
// persists as key/value pairs. Pure code: no I/O, no logging, deterministic.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/drift/alert_state.h"
#include "engine/drift/categories.h"
#include "engine/drift/detector_states.h"
#include "engine/drift/detectors.h"
#include "engine/drift/higher_moments.h"
#include "engine/drift/histogram.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/state_value.h"
#include "engine/row_shape.h"
#include "engine/stats.h"

namespace driftd {

/// A histogram bin whose share changed most (by PSI term).
struct BinChange {
  int bin = 0;
  double lower = 0;  // -inf for the first bin
  double upper = 0;  // +inf for the last bin
  double baseline_share = 0;
  double window_share = 0;
  double psi_term = 0;
};

/// A category whose share changed most (by |PSI term|), for categorical series. The rest of the
/// categories (seen in the baseline but not tracked, or never seen) count as one, named
/// kOtherCategory.
struct CategoryChange {
  std::string category;
  double baseline_share = 0;
  double window_share = 0;
  double psi_term = 0;
};

/// A category the baseline never saw, with its share of the window (categorical series).
struct NewCategory {
  std::string category;
  double window_share = 0;
};

/// A state change of a (model, series) alert, or of a model's roll-up. See engine/drift/README.md
/// for the JSON payload.
struct AlertEvent {
  /// 16 hex digits: FNV-1a of model, series, detector, level and window start record. The same
  /// input stream yields the same ids, whatever the batch boundaries or restarts.
  std::string alert_id;
  /// alert_id of the ALERT (or WARN) that opened the episode this event belongs to.
  std::string incident_id;
  AlertLevel level = AlertLevel::kOk;
  AlertLevel previous_level = AlertLevel::kOk;
  std::string model;
  /// The model's segment ("region=eu,channel=app") when drift is per segment (the drift
  /// stage's segmentBy), else empty.
  std::string segment;
  std::string series;    // "*" for a model-level roll-up
  /// What the series holds: missing-value and malformed-record series are data quality (the
  /// payload's "kind" says "data_quality"), the others drift.
  SeriesKind series_kind = SeriesKind::kNumeric;
  /// The detector that raised the incident ("rollup" for a roll-up): for WARN and ALERT the one
  /// furthest past its level, for RESOLVED and OK the one that raised what now clears.
  std::string detector;
  /// That detector's statistic at this evaluation, and the statistic its level needs at this
  /// evaluation's sample sizes (alert level for ALERT, warn level otherwise).
  double statistic = 0;
  double threshold = 0;
  /// Its calibrated score (the z-equivalent of the false-alarm probability).
  double score = 0;
  /// Window: series value index range [start_record, end_record) and the event-time span
  /// [start, end) of its values (INT64_MIN when unknown). For event-time windows these are the
  /// window's bounds; for record windows the end is 1 ms after the last value's millisecond.
  int64_t window_start_record = 0;
  int64_t window_end_record = 0;
  int64_t window_start_us = INT64_MIN;
  int64_t window_end_us = INT64_MIN;
  BaselineKind baseline_kind = BaselineKind::kWarmup;
  int64_t baseline_n = 0;
  double baseline_mean = 0;
  double baseline_stddev = 0;
  int64_t window_n = 0;
  double window_mean = 0;
  double window_stddev = 0;
  std::vector<DetectorReading> detectors;
  /// Up to three bins with the largest |PSI term| (series with histogram detectors).
  std::vector<BinChange> top_bins;
  /// Categorical series: up to three categories (the rest counted as one) with the largest
  /// |PSI term|, and the most frequent categories of the window that the baseline never saw.
  std::vector<CategoryChange> top_categories;
  std::vector<NewCategory> new_categories;
  /// Roll-up events: the model's series in ALERT, and the series whose change of state raised
  /// or cleared the roll-up (the window fields are that series' window).
  std::vector<std::string> alerting_series;
  std::string trigger_series;
  int64_t batch_id = -1;

  /// One JSON object, no trailing newline.
  std::string ToJson() const;
};

/// The shape of AlertEvent::ToJson's rows, the alerts stream's (engine/row_shape.h): a
/// roll-up has no `score` and `baseline` and has `alerting_series` and `trigger_series`;
/// `detectors` and `top_bins` are left out when empty.
RowShape AlertRowShape();

/// One cell of the two distributions a window's histogram or categorical detectors compared:
/// a histogram bin [lower, upper) (infinite at the ends; its lower edge is the previous bin's
/// upper one, Evaluation::lower), or a category (named in Evaluation::categories), with the
/// baseline's and the window's value counts. 24 bytes: at 10,000 models (up to 10 cells a
/// series) the gauges and a batch's evaluations held ~0.9 million of them at the peak of
/// tests/bench's drift run.
struct DistributionCell {
  double upper = 0;
  int64_t baseline = 0;
  int64_t window = 0;
};

/// One closed window of a (model, series), whether or not it changed the alert level, or a
/// detector fed per value crossing a level between window ends: the window and baseline statistics
/// and every detector's reading (statistic, score, levels, thresholds, effect). The evaluations
/// stream and the per-series drift gauges are made of these. See engine/drift/README.md.
struct Evaluation {
  std::string model;
  std::string segment;  // as AlertEvent::segment
  std::string series;
  SeriesKind series_kind = SeriesKind::kNumeric;
  /// False when the window or the baseline held fewer than minSamples values (no readings).
  bool evaluated = false;
  /// The series' alert state before and after this evaluation.
  AlertLevel previous_level = AlertLevel::kOk;
  AlertLevel level = AlertLevel::kOk;
  int64_t window_start_record = 0;
  int64_t window_end_record = 0;
  int64_t window_start_us = INT64_MIN;
  int64_t window_end_us = INT64_MIN;
  int64_t window_n = 0;
  double window_mean = 0;
  double window_stddev = 0;
  BaselineKind baseline_kind = BaselineKind::kWarmup;
  int64_t baseline_n = 0;
  double baseline_mean = 0;
  double baseline_stddev = 0;
  std::vector<DetectorReading> detectors;
  int64_t batch_id = -1;
  /// What the histogram or categorical detectors compared (empty for other series and for a
  /// window not evaluated), for the status page and `driftd report`.
  std::vector<DistributionCell> distribution;
  /// A histogram's first lower edge (-inf for the bins a monitor makes).
  double distribution_lower = 0;
  /// A categorical series' categories, one per cell of `distribution` (kOtherCategory for the
  /// untracked and new ones together); empty for a histogram.
  std::vector<std::string> categories;

  /// The category of distribution cell `cell` (empty for a histogram bin).
  std::string_view category(size_t cell) const {
    return cell < categories.size() ? std::string_view(categories[cell]) : std::string_view();
  }
  /// The lower edge of histogram bin `cell`: the bins are contiguous.
  double lower(size_t cell) const {
    return cell == 0 ? distribution_lower : distribution[cell - 1].upper;
  }
};

/// Evaluations are shared once made, not copied: a series' history points, the performance
/// stage's windows, what a reader unpacked. What is kept for every series is packed
/// (PackedEvaluation, below).
using SharedEvaluation = std::shared_ptr<const Evaluation>;

/// An evaluation kept to be read later (each series' latest: the checkpoint's copy, the gauges):
/// its bytes as EncodeEvaluation writes them (~0.6 KB at the default detectors), with its names
/// and what choosing among many series needs (level, highest score) read once, when packed, in
/// one block of ~0.7 KB. The object, with its readings' and distribution's vectors, takes
/// ~1.7 KB: at 10,000 models x 13 series the objects took ~220 MB. The rest is decoded by
/// Unpack. Copies share the block. Implemented in evaluation.cc.
class PackedEvaluation {
 public:
  PackedEvaluation() = default;
  explicit PackedEvaluation(const Evaluation& evaluation);
  /// From EncodeEvaluation's bytes (a checkpoint's); kCorruption as DecodeEvaluation. The
  /// model and segment the bytes name are replaced by `model` and `segment`.
  static Result<PackedEvaluation> FromBytes(std::string bytes, std::string_view model,
                                            std::string_view segment);

  explicit operator bool() const { return data_ != nullptr; }
  /// The evaluation again, as it was packed (a default one when empty).
  SharedEvaluation Unpack() const;
  /// EncodeEvaluation's bytes (with the distribution).
  std::string_view bytes() const;
  /// What keeps bytes() alive, shared with this evaluation's copies (null when empty): a
  /// batch hands the checkpoint the bytes with it, so that saving an evaluation does not copy
  /// it. SetBatchId must not be called after.
  std::shared_ptr<const void> owner() const { return data_; }
  std::string_view model() const { return Part(1); }
  std::string_view segment() const { return Part(2); }
  std::string_view series() const { return Part(3); }
  AlertLevel level() const { return data_ ? header().level : AlertLevel::kOk; }
  bool evaluated() const { return data_ && header().evaluated; }
  /// The highest score of any reading (NaN scores left out); -inf without one.
  double max_score() const;
  /// Sets the batch id the bytes hold. Only before the first copy is made (the drift monitor
  /// packs a window's evaluation when it closes, and learns the batch's id at its end).
  void SetBatchId(int64_t batch_id);

 private:
  // One block (a series keeps one: 100,000 series keep 100,000): this header, then the bytes,
  // the model, the segment and the series, one after the other.
  struct Header {
    double max_score = 0;
    uint32_t batch_id_at = 0;  // where the bytes hold the batch id
    std::array<uint32_t, 4> sizes{};  // of the bytes and the three names
    AlertLevel level = AlertLevel::kOk;
    bool evaluated = false;
  };
  const Header& header() const { return *reinterpret_cast<const Header*>(data_.get()); }
  char* chars() const { return reinterpret_cast<char*>(data_.get()) + sizeof(Header); }
  std::string_view Part(int index) const;
  std::shared_ptr<uint64_t[]> data_;
};

/// Counters for progress reports.
struct DriftMonitorStats {
  int64_t models = 0;
  int64_t series_in_alert = 0;
  int64_t windows_evaluated = 0;
  /// NaN or infinite values passed to Observe (not counted in any statistic).
  int64_t skipped_values = 0;
  /// ObserveLabel calls for a model that Observe had not seen yet.
  int64_t skipped_labels = 0;
  /// Event-time windows: values whose window had closed (behind the watermark) when they
  /// arrived, and values without an event time; neither is counted in any statistic.
  int64_t late_values = 0;
  int64_t values_without_time = 0;

  void Add(const DriftMonitorStats& o) {
    models += o.models;
    series_in_alert += o.series_in_alert;
    windows_evaluated += o.windows_evaluated;
    skipped_values += o.skipped_values;
    skipped_labels += o.skipped_labels;
    late_values += o.late_values;
    values_without_time += o.values_without_time;
  }
};

/// A drift series: its name (in events and state keys) and what it holds.
struct SeriesDef {
  std::string name;
  SeriesKind kind = SeriesKind::kNumeric;
};

/// Drift detection for every model of one pipeline.
///
/// Lifecycle: construct from the DriftSpec; Restore() every persisted key (before the first
/// Observe); then per batch: Observe()/ObserveLabel() for each record, Evaluate() at the end of
/// the batch, CollectDirty() into the batch's atomic commit. Events produced by windows that
/// close during Observe are held until Evaluate(), so CollectDirty() must follow Evaluate() in
/// the same batch. Not thread-safe: one executor thread calls everything.
///
/// Windows: each (model, series) has tumbling windows of spec.window_records values (default
/// 1000), numbered by the series' value index, so results do not depend on how records are cut
/// into batches. The error series ("error", fed by ObserveLabel) has its own windows of labeled
/// records. A file baseline is given before the first Observe, through ObserveReference() /
/// SetReference() and FreezeReferences(); series it leaves out warm up as with `warmup`.
/// Detectors with a state of each series (DetectorDefaults::state) are fed per value with record
/// windows against a warmup or file baseline (they may raise a level between window ends), and
/// per window with event-time windows, trailing and seasonal baselines.
class DriftMonitor {
 public:
  /// Prefix of every key CollectDirty() produces; the executor routes such keys to Restore().
  static constexpr std::string_view kStateKeyPrefix = "drift/";
  /// The series table's key, beside the models' (a name's '%' is escaped: no model has it).
  static constexpr std::string_view kSeriesTableKey = "drift/%series";
  /// Name of the error-rate series in events and state keys.
  static constexpr std::string_view kErrorSeries = "error";
  /// Warmup values kept per series to fix the histogram edges and the winsorizing fences: the
  /// first min(baseline.records, kMaxWarmupValues) values. Later warmup values join the
  /// baseline's moments and bin counts directly.
  static constexpr size_t kMaxWarmupValues = 2'000;
  /// Windows of a series the look-back tests (mean_shift, stddev_ratio, error_rate) remember.
  static constexpr size_t kLookbackWindows = 16;
  /// Name of a model's malformed-record series (SeriesKind::kMalformed) in events and state
  /// keys.
  static constexpr std::string_view kMalformedSeries = "malformed";
  /// Suffix of a series' missing-value series: "prediction:missing" watches how often
  /// prediction is null or absent (SeriesKind::kMissing).
  static constexpr std::string_view kMissingSuffix = ":missing";
  static std::string MissingSeriesName(std::string_view series);
  /// Name shared by a categorical series' categories that are not tracked (in top_categories).
  static constexpr std::string_view kOtherCategory = "(other)";

  /// `series_names` already expanded: "feature_vector[0]".."feature_vector[7]", "prediction".
  /// An empty spec.detectors means DefaultDetectorSpecs(); detectors with warn == alert == 0
  /// get their kind's defaults. Every series is numeric.
  DriftMonitor(const DriftSpec& spec, std::vector<std::string> series_names);
  /// Series of every kind: each is watched by the configured detectors that watch its kind
  /// (DetectorDefaults::series); a kind no configured detector watches is kept, never
  /// evaluated.
  DriftMonitor(const DriftSpec& spec, std::span<const SeriesDef> series);
  ~DriftMonitor();
  DriftMonitor(const DriftMonitor&) = delete;
  DriftMonitor& operator=(const DriftMonitor&) = delete;

  /// Event-time windows instead of record-count windows (the query's tumbling `window`): each
  /// (model, series) is evaluated per window [k*size, (k+1)*size) of event time, closed at the
  /// first Evaluate() after the query's watermark (AdvanceWatermark) reaches its end. A value is
  /// late, dropped and counted, when its window is at or behind the watermark it is judged by
  /// (Observe's late_before_us, or the query's watermark); values without an event time are
  /// counted too. The baseline (warmup) is made of whole windows: the first windows of the
  /// series, in event-time order, until they hold baseline.records values (or span
  /// baseline.duration); a warmup window keeps an order-independent sample of its values
  /// (ValueSample) and gives them to the warmup in a fixed pseudo-random order when it closes.
  /// So every window's contents, and what is compared with what, depend only on event times,
  /// never on arrival order. Windows close in start order, and within a batch the models in
  /// name order. A trailing baseline is then the previous K event-time windows. The error
  /// series keeps record-count windows. `delay_ms` is unused (the query clock applies it).
  /// Call before the first Observe.
  void UseEventTimeWindows(int64_t size_ms, int64_t delay_ms);
  bool event_time_windows() const { return et_size_us_ > 0; }
  /// The query clock's watermark (engine/executor/event_clock.h); it never moves back. Windows
  /// whose end is at or behind it close at the next Evaluate().
  void AdvanceWatermark(int64_t watermark_us);
  /// Whether some open event-time window ends at or before `watermark_us`.
  bool HasClosableWindows(int64_t watermark_us) const;
  /// Largest event time observed and the watermark (INT64_MIN before any). Checkpoints written
  /// before the query had one clock persisted them for the drift stage; RestoreClock takes them.
  int64_t max_event_time_us() const { return max_event_us_; }
  int64_t watermark_us() const { return watermark_us_; }
  void RestoreClock(int64_t max_event_time_us, int64_t watermark_us);

  /// Adds a value series at `index` (at most series_names().size()): the series from `index`
  /// on move up by one, in every model (the error series stays last). For series found as
  /// records arrive (the keys of a map column), placed by name so that the series' order does
  /// not depend on which came first. State keys use names, so a restart that lists the same
  /// names in any order restores the same state. Call between batches or before Observe of
  /// the series; not during Evaluate.
  void InsertSeries(size_t index, std::string name, SeriesKind kind = SeriesKind::kNumeric);

  /// Model names are "<model>\x1f<segment value>..." with `parts` segment values (the drift
  /// stage's segments): threshold overrides by model match the model before them. Default: 0.
  void UseSegments(size_t parts) { segment_parts_ = parts; }

  /// Validates what the constructor would accept silently (baseline kind, window size).
  static Result<std::unique_ptr<DriftMonitor>> Create(const DriftSpec& spec,
                                                      std::vector<std::string> series_names);
  static Result<std::unique_ptr<DriftMonitor>> Create(const DriftSpec& spec,
                                                      std::span<const SeriesDef> series);

  /// One value of series `series` (index into series_names) for `model`, a dense id the
  /// executor interns; `model_name` is read only the first time a model id is seen.
  /// `event_time_us` is the record's event time (pass the batch's processing time if the
  /// record has none): it timestamps windows and drives the cooldown. With event-time windows,
  /// `late_before_us` is the watermark of the value's own input partition just before it
  /// (RowTimes::late_before): its window is closed for it when it ends at or before that.
  /// Values that are NaN or infinite are skipped and counted. No allocation once the model's
  /// baseline is frozen.
  void Observe(uint32_t model, const std::string& model_name, size_t series, double value,
               int64_t event_time_us, int64_t late_before_us = INT64_MIN);

  /// As above, for the values of consecutive series `first_series`, `first_series + 1`, ...
  /// (the elements of an array column) of one record: the model is looked up once.
  void Observe(uint32_t model, const std::string& model_name, size_t first_series,
               std::span<const double> values, int64_t event_time_us,
               int64_t late_before_us = INT64_MIN);

  /// One value of a categorical series (SeriesKind::kCategorical), otherwise as Observe: the
  /// value's category is `category`'s bytes (compared whole; names are kept to
  /// kMaxCategoryNameBytes; the bytes are not kept after the call). A null value is not a
  /// category: the caller feeds the series' missing-value series instead (ObserveFlag). As
  /// for Observe, record-count windows follow the order of the series' values, and with
  /// event-time windows everything depends on the values and their event times only. A window
  /// counts its values exactly, whatever their order within it. No allocation once the
  /// baseline is frozen, except the names of up to 256 unseen categories per window. Calls for
  /// a series of another kind are ignored.
  void ObserveCategory(uint32_t model, const std::string& model_name, size_t series,
                       std::string_view category, int64_t event_time_us,
                       int64_t late_before_us = INT64_MIN);

  /// One record's flag for a rate series: for SeriesKind::kMissing, whether the watched value
  /// was null or absent in the record; for SeriesKind::kMalformed, whether the record was
  /// malformed. Call it for every record of the model (flagged or not): the share of flagged
  /// records is what is watched. Otherwise as Observe.
  void ObserveFlag(uint32_t model, const std::string& model_name, size_t series, bool flagged,
                   int64_t event_time_us, int64_t late_before_us = INT64_MIN);

  /// A labeled outcome for the error series of `model` (call after Observe saw the model).
  /// `event_time_us` as for Observe.
  void ObserveLabel(uint32_t model, double prediction, double label,
                    int64_t event_time_us = INT64_MIN);

  /// The observations that follow are of the batch's `ordinal`-th record. A caller that
  /// observes a batch's records grouped by model (each model's in order, for locality) says
  /// which record each is, and Evaluate hands the batch's events and evaluations out in record
  /// order: as if the records had been observed one after another. Models are independent, so
  /// nothing else depends on the order of different models' records.
  void AtRecord(uint64_t ordinal) { record_ = ordinal; }
  /// A hint that `model`'s records come soon: its state is fetched into cache ahead of use,
  /// in three steps a model apart, each reading what the step before fetched: 0 the model, 1
  /// its series, 2 the ends of their warmup values (past the warmup: their bin counts and
  /// evaluation state). Changes nothing.
  void Prefetch(uint32_t model, int step) const;

  /// End of a batch: appends the events of windows closed since the last call, stamped with
  /// `batch_id` and `now_ms` (processing time, also the cooldown clock of windows without
  /// event times).
  void Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out);
  /// As above, and appends to `evaluations` every evaluation since the last call (only while
  /// CollectEvaluations(true); otherwise none are kept).
  void Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out,
                std::vector<Evaluation>* evaluations);
  /// What the packed Evaluate hands out: an evaluation and the model as this monitor names it.
  struct PackedRecord {
    std::string model;
    PackedEvaluation evaluation;
  };
  /// As above, with the evaluations packed as their windows closed (PackEvaluations).
  void Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out,
                std::vector<PackedRecord>& packed);
  /// The record (AtRecord) each event and evaluation the last Evaluate handed out arose at, in
  /// their order; kClosedWindow for those of event-time windows closed by the watermark, which
  /// come last, models in name order. With several monitors each holding some of the models
  /// (the drift stage's shards), their outputs merged by (record, model name) are the output
  /// of one monitor holding them all.
  static constexpr uint64_t kClosedWindow = UINT64_MAX;
  const std::vector<uint64_t>& last_event_records() const { return last_event_records_; }
  const std::vector<uint64_t>& last_evaluation_records() const {
    return last_evaluation_records_;
  }
  /// Keep an Evaluation per closed window for Evaluate(). Default: off
  /// (no cost).
  void CollectEvaluations(bool on) { collect_evaluations_ = on; }
  /// Packs each evaluation as its window closes, with `pack` (which may rename its model), for
  /// the packed Evaluate: a batch may close a window of every series (130,000 at 10,000
  /// models), and as objects they took ~1.7 KB each until the batch's end.
  void PackEvaluations(std::function<PackedEvaluation(Evaluation&&)> pack) {
    pack_ = std::move(pack);
  }

  /// Appends (key, value) for every model changed since the last call, and to `deletes` the
  /// keys that no longer hold anything. Keys (names with '%' and '/' percent-encoded):
  ///   "drift/<model>"                  the model record: the roll-up, and what values change of
  ///                                    each series (counts, the current window, detector
  ///                                    states; the baseline until it freezes)
  ///   "drift/<model>/<series>"         what changes when a window closes or an alert moves
  ///                                    (absent while it is a new series')
  ///   "drift/<model>/<series>/base"    the frozen baseline (moments, fences, bin edges,
  ///                                    reference counts): written once, when it freezes
  ///   "drift/<model>/%w<k>"            warmup values added by one batch, kept until the bin
  ///                                    edges are fixed
  ///   "drift/%series"                  the series names the model records refer to
  /// so a batch writes what its values changed, not the whole state of every series it saw.
  void CollectDirty(StatePuts& puts, std::vector<std::string>& deletes);
  /// As above, dropping the deletes: only for a state restored from one call's puts (tests);
  /// a checkpoint that keeps keys the monitor deleted may read back what they held.
  void CollectDirty(StatePuts& puts);
  /// Warmup values per block key of the version-5 layout (still read).
  static constexpr size_t kWarmupBlockValues = 32;
  /// What the last CollectDirty wrote: the series whose values changed, the encoded size of the
  /// changes (model records, series records and baselines written, the warmup values added
  /// since the call before), and the bytes of the puts (keys and values).
  struct WriteStats {
    int64_t dirty_series = 0;
    int64_t dirty_bytes = 0;
    int64_t put_bytes = 0;
  };
  const WriteStats& last_write() const { return last_write_; }

  /// Loads one persisted entry (a key CollectDirty produced, in any order). Call before the
  /// model's first Observe; entries for series no longer configured are ignored. Series
  /// records of earlier layouts (versions 1 to 5, one record per series) are read as they are
  /// and written in the current layout when their model next changes.
  Status Restore(std::string_view key, std::string_view value);
  /// After every entry was restored: puts each model together, and fails (kCorruption) when a
  /// record lacks the frozen baseline, warmup values, model record or series table it refers
  /// to.
  Status FinishRestore();

  // ---- File baseline (before the first Observe) ------------------------------------------
  /// A baseline's winsorized values: the fences values are clipped to (infinite when the
  /// baseline's IQR is 0) and the moments of the clipped values, which the mean and spread
  /// tests and the detector states compare with.
  struct Winsorized {
    double low = -std::numeric_limits<double>::infinity();
    double high = std::numeric_limits<double>::infinity();
    HigherMoments moments;
  };
  /// One value of a reference record for (model, series): joins the series' baseline, which
  /// freezes at FreezeReferences(). Histogram edges come from the first kMaxWarmupValues
  /// values, as for a warmup.
  void ObserveReference(uint32_t model, const std::string& model_name, size_t series,
                        double value);
  /// One value of a reference record for a categorical series, or one record's flag for a rate
  /// series (as ObserveReference).
  void ObserveReferenceCategory(uint32_t model, const std::string& model_name, size_t series,
                                std::string_view category);
  void ObserveReferenceFlag(uint32_t model, const std::string& model_name, size_t series,
                            bool flagged);
  /// Reference statistics of a categorical series (engine/drift/README.md's file format).
  struct CategoricalReference {
    /// Values per category; the most frequent (up to the `categories` parameter) are tracked,
    /// the others count with `other`.
    std::vector<std::pair<std::string, int64_t>> categories;
    /// Values of categories not listed.
    int64_t other = 0;
    /// Fingerprints of every category the baseline saw (CategorySet::Fingerprint); empty: the
    /// listed categories.
    std::vector<uint32_t> seen;
    /// The baseline's own share of values of categories it had not seen: `unseen` of
    /// `unseen_n` (a held-out part). unseen_n 0: `other` of n (every unlisted category counts
    /// as unseen).
    int64_t unseen = 0;
    int64_t unseen_n = 0;
  };
  Status SetCategoricalReference(uint32_t model, const std::string& model_name, size_t series,
                                 const CategoricalReference& reference);
  /// One labeled reference outcome for the error series of `model`.
  void ObserveReferenceLabel(uint32_t model, const std::string& model_name, double prediction,
                             double label);
  /// Reference statistics of (model, series), frozen at once. `inner_edges` and `counts`
  /// (counts.size() == inner_edges.size() + 1) give the reference histogram; both may be
  /// empty only when no histogram detector is configured. Fails (kConfig) on inconsistent
  /// input or fewer than minSamples values; the message names model and series.
  /// `winsorized`: the fences and the moments of the winsorized values, as ExportBaselines()
  /// gives them; without it nothing is clipped and the shape is taken as normal.
  Status SetReference(uint32_t model, const std::string& model_name, size_t series,
                      const Moments& moments, std::vector<double> inner_edges,
                      std::vector<int64_t> counts, const Winsorized* winsorized = nullptr);
  /// Reference statistics of the error series of `model`.
  Status SetErrorReference(uint32_t model, const std::string& model_name,
                           const ErrorSummary& summary);
  /// Freezes every series that ObserveReference*() fed. Fails (kConfig) naming the first
  /// series with fewer than minSamples reference values (it could never be compared).
  Status FreezeReferences();

  /// A frozen baseline, as reference statistics (engine/drift/README.md's file format).
  struct BaselineExport {
    std::string model;
    std::string series;  // kErrorSeries for the error series
    Moments moments;     // of the values (of the absolute errors, for the error series)
    std::vector<double> inner_edges;
    std::vector<int64_t> counts;
    int64_t errors = 0;  // error series: labeled records whose error exceeded the threshold
    Winsorized winsorized;  // not for the error series
    SeriesKind kind = SeriesKind::kNumeric;
    /// Categorical series: moments are empty; the reference as SetCategoricalReference takes
    /// it (tracked categories with their counts, the rest in `other`).
    CategoricalReference categorical;
  };
  /// Every frozen baseline (warmup, reference records or statistics), by model then series.
  std::vector<BaselineExport> ExportBaselines() const;

  /// Starts `model`'s baselines over (after a retrain): every series warms up again on its
  /// next values, as a new model would; windows in progress, trailing windows, look-backs and
  /// detector states are dropped, while value indexes and alert states continue. An open incident
  /// loses its summary of the change with the old baseline, so it clears when a window of the new
  /// baseline reads below WARN on every detector. Returns false for a model the monitor does
  /// not know.
  bool ResetBaselines(const std::string& model);

  /// Per-model drift state for metrics: series in ALERT / WARN, windows evaluated, and the
  /// worst level of any series. Cheap (a walk over the models' alert states).
  struct ModelStats {
    std::string model;
    std::string segment;  // as AlertEvent::segment
    int64_t series = 0;
    int64_t series_in_warn = 0;
    int64_t series_in_alert = 0;
    int64_t values = 0;  // stream values accepted over all series (not file reference values)
    bool rollup_alert = false;
  };
  std::vector<ModelStats> model_stats() const;

  DriftMonitorStats stats() const;
  const std::vector<std::string>& series_names() const { return series_names_; }
  SeriesKind series_kind(size_t series) const {
    return series < series_kinds_.size() ? series_kinds_[series] : SeriesKind::kNumeric;
  }


  struct SeriesState;
  struct ModelState;
  struct Thresholds;

 private:
  struct Verdict;
  ModelState& ModelFor(uint32_t model, const std::string& model_name);
  /// The thresholds of `series` (an index, or series_names().size() for the error series) for
  /// `model_name`, overrides applied, one per detector.
  void ResolveThresholds(const std::string& model_name, size_t series, Thresholds* out) const;
  size_t segment_parts_ = 0;
  void AddValue(ModelState& m, size_t series, double value, int64_t event_time_us,
                int64_t late_before_us);
  void AddBaselineValue(SeriesState& s, double value);
  size_t EdgeValues() const;
  void FixEdges(SeriesState& s);
  /// The warn and alert levels of every (series, detector) for `model_name` (empty: a model no
  /// override names), [series * detectors + detector].
  void ResolveThresholds(std::string_view model_name, std::vector<Thresholds>& out) const;
  void FreezeBaseline(SeriesState& s);
  /// The series' baseline is fixed: its detector states are set up from it for values fed one
  /// by one (again after a restore or a new baseline).
  void Prepare(ModelState& m, size_t series);
  /// `ref` with the levels of the detector of `slot` in `series`, as its state is set up from.
  StateReference ReferenceFor(const ModelState& m, size_t series,
                              const monitor_detail::DetectorSlot& slot,
                              const HigherMoments& ref) const;
  /// A new window of the series starts: its detector states are told.
  void StartWindow(SeriesState& s);
  size_t PhaseOf(int64_t window_start_us) const;
  void CloseWindow(ModelState& m, size_t series);
  void CloseEventWindow(ModelState& m, size_t series);
  void CloseErrorWindow(ModelState& m);
  /// The state of `slot`, fed a value, reached `level` (above any it reached in the window):
  /// raised at once, between window ends.
  void SequentialCheck(ModelState& m, size_t series, const monitor_detail::DetectorSlot& slot,
                       AlertLevel level, int64_t event_time_us);
  void Decide(ModelState& m, size_t series, Verdict& verdict);
  void Transition(ModelState& m, size_t series, AlertLevel previous, AlertLevel level,
                  AlertEvent event);
  void UpdateRollup(ModelState& m, int64_t now_ms, const AlertEvent& trigger);
  /// A value changed what the model record holds of the series.
  void MarkHot(ModelState& m, size_t series);
  /// Anything of the series changed, its own record included.
  void MarkDirty(ModelState& m, size_t series);
  /// Restore: puts a model's keys together once every key was read. `lenient`: a model whose
  /// keys do not fit starts afresh instead of failing.
  Status CompleteModel(ModelState& m, bool lenient);
  void WriteModel(ModelState& m, StatePuts& puts, std::vector<std::string>& deletes);
  /// The table of series names that model records and segments refer to by position: the
  /// restored one, with the series it lacks appended.
  void ResolveTable();
  std::string_view SeriesName(size_t index) const;
  int64_t WindowClockMs(int64_t window_end_us) const;
  /// What a window's power sums are centred on (PowerSums::Reset).
  double WindowShift(const SeriesState& s, size_t series) const;
  /// Whether detector states are fed value by value: record windows against a fixed baseline
  /// (warmup or file); otherwise per window.
  bool FedPerValue() const;

  DriftSpec spec_;
  std::vector<std::string> series_names_;
  /// Kind of each series (series_names_ order).
  std::vector<SeriesKind> series_kinds_;
  std::vector<DetectorConfig> detectors_;
  /// Thresholds of the models no override names (never resized once made).
  std::vector<Thresholds> shared_thresholds_;
  bool shared_thresholds_ready_ = false;
  AlertPolicy policy_;
  int histogram_bins_ = 10;
  bool has_histogram_ = false;
  bool has_error_rate_ = false;
  /// The configured detectors that keep a state of each series.
  monitor_detail::DetectorSlots detector_slots_;
  bool collect_evaluations_ = false;
  double error_threshold_ = 0.5;
  double resolve_log_evidence_ = 0;
  std::vector<Evaluation> evaluations_;
  std::function<PackedEvaluation(Evaluation&&)> pack_;
  std::vector<PackedRecord> packed_;  // instead of evaluations_ when pack_ is set
  /// The record (AtRecord) each of events_ and evaluations_ arose at.
  std::vector<uint64_t> evaluation_records_;
  std::vector<uint64_t> event_records_;
  std::vector<uint64_t> last_event_records_;
  std::vector<uint64_t> last_evaluation_records_;
  uint64_t record_ = 0;
  /// events_ and evaluations_ into record order (stable).
  void InRecordOrder();
  void RecordEvaluation(const ModelState& m, size_t series, bool evaluated, AlertLevel previous,
                        const Verdict* verdict);
  std::vector<std::unique_ptr<ModelState>> models_;
  /// Restored state of models not seen yet, by model name.
  std::map<std::string, std::unique_ptr<ModelState>, std::less<>> pending_;
  std::vector<AlertEvent> events_;
  int64_t last_now_ms_ = 0;
  int64_t windows_evaluated_ = 0;
  // Event-time windows (0: record-count windows).
  int64_t et_size_us_ = 0;
  int64_t et_delay_us_ = 0;
  int64_t max_event_us_ = INT64_MIN;
  int64_t watermark_us_ = INT64_MIN;
  int64_t late_values_ = 0;
  int64_t values_without_time_ = 0;
  void AddToEventWindow(ModelState& m, size_t series, double value, int64_t event_time_us,
                        int64_t late_before_us);
  void CloseEventWindows();
  int64_t skipped_values_ = 0;
  int64_t skipped_labels_ = 0;
  // Scratch space for evaluations, sized to the histogram once.
  std::vector<int64_t> ref_counts_;
  std::vector<double> ref_shares_;
  std::vector<double> cur_shares_;
  std::vector<double> terms_;
  std::vector<DetectorReading> readings_;
  WriteStats last_write_;
  std::string scratch_;
  std::vector<double> edge_values_;
  // The series table (ResolveTable).
  std::vector<std::string> restored_table_;
  bool table_from_store_ = false;
  bool table_resolved_ = false;
  bool table_resolved_once_ = false;  // table_ holds what is in use
  bool table_dirty_ = false;
  std::vector<std::string> table_;
  std::vector<uint32_t> series_table_index_;  // by series index (the error series last)
  std::vector<int32_t> table_series_;          // by table position: series index, or -1

  // ---- categorical series (monitor.cc, "Categorical series") ----
  /// Tracked categories at most (the first `categories` parameter of a categorical detector).
  size_t max_categories_ = 30;
  int64_t FirstPart() const;
  CategoricalState& CategoricalOf(SeriesState& s);
  void SkipEdges(SeriesState& s);
  void AddCategory(ModelState& m, size_t series, uint64_t hash, std::string_view category,
                   int64_t event_time_us, int64_t late_before_us);
  void FreezeCategorical(SeriesState& s);
  void CloseCategoryWindow(ModelState& m, size_t series, std::vector<int64_t>& cells,
                           CategoryCounts& unseen);
  void CloseCategoryEventWindow(ModelState& m, size_t series);
  // Scratch for categorical evaluations.
  std::vector<int64_t> cat_win_;
  std::vector<int64_t> cat_ref_;
  std::vector<int64_t> cat_evid_win_;
  std::vector<int64_t> cat_evid_ref_;
  std::vector<size_t> cat_cell_of_;
};

}  // namespace driftd
