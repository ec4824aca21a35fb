#include "engine/drift/monitor.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <set>

#include <fmt/format.h>

#include "engine/drift/codec.h"
#include "engine/drift/evaluation.h"
#include "engine/drift/value_sample.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

// Version 3: winsorized moments, fences, the CUSUM, look-back windows, incident evidence and
// seasonal phases; version 4 the value sample of each open event-time window of a warmup;
// version 5 keeps the frozen baseline in a key of its own ("<series>/base", kBaseEncodingVersion)
// and the warmup values in blocks ("<series>/w<k>"), the record only their count. Version 6
// splits a series between the model's record (what every value changes: counts, the current
// window, the CUSUM; kModelEncodingVersion) and its own record (what changes when a window
// closes or an alert moves), writes only the sections that differ from a new series', and
// keeps warmup values in per-model segments ("<model>/%w<seq>") in a compact decimal form.
// Versions 1 and 2 (no such fields; 2 adds the open event-time windows) are still read: their
// baselines are taken as unwinsorized and normal-shaped. Versions 1 to 4 hold everything in one
// record. Every older version is rewritten in version 6 when its model is next written.
constexpr uint8_t kSeriesEncodingVersion = 6;
constexpr uint8_t kBaseEncodingVersion = 1;
constexpr uint8_t kBaseApart = 4;  // series flag: the frozen baseline is in "<series>/base"
constexpr uint8_t kRollupEncodingVersion = 1;
// Categorical series write records of their own, told apart from the numeric ones by their first
// byte: 0x81 is version 1 of the categorical series record and of its baseline key (numeric
// records count their versions from 1).
constexpr uint8_t kCategoricalEncodingVersion = 0x81;
// A categorical window's cells merge into "other" when their expected count is below this: the
// chi-square's tail, which the levels are read from, holds for cells this large.
constexpr double kMinExpectedCount = 10;
constexpr int kTopBins = 3;
constexpr std::string_view kRollupSeries = "*";
constexpr std::string_view kRollupDetector = "rollup";
constexpr double kInf = std::numeric_limits<double>::infinity();

bool ValidTime(int64_t us) { return us != INT64_MIN; }

uint64_t Fnv1a(std::initializer_list<std::string_view> parts) {
  uint64_t h = 1469598103934665603ull;
  for (std::string_view part : parts) {
    for (char c : part) {
      h ^= static_cast<uint8_t>(c);
      h *= 1099511628211ull;
    }
    h ^= 0x1f;  // separator, so ("ab","c") and ("a","bc") differ
    h *= 1099511628211ull;
  }
  return h;
}

std::string HexId(uint64_t id) { return fmt::format("{:016x}", id); }

uint64_t AlertId(std::string_view model, std::string_view series, std::string_view detector,
                 AlertLevel level, int64_t window_start) {
  const std::string start = std::to_string(window_start);
  return Fnv1a({model, series, detector, ToString(level), start});
}

std::string EscapeName(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<std::string> UnescapeName(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '%') {
      out.push_back(name[i]);
      continue;
    }
    const std::string_view code = name.substr(i + 1, 2);
    if (code == "25") {
      out.push_back('%');
    } else if (code == "2F") {
      out.push_back('/');
    } else {
      return MakeError(ErrorCode::kCorruption, "drift state key: bad escape in '{}'", name);
    }
    i += 2;
  }
  return out;
}

/// Order of readings for choosing the detector that decided an evaluation: level first, then
/// score, then how far past its threshold the statistic is.
double Severity(const DetectorReading& r) {
  const double threshold = r.level == AlertLevel::kAlert ? r.alert_threshold : r.warn_threshold;
  const double ratio = threshold > 0 ? r.statistic / threshold : r.statistic;
  return static_cast<double>(r.level) * 1e9 + r.score * 1e4 + std::clamp(ratio, 0.0, 1e3);
}

void EncodeCounts(drift::ByteWriter& w, const std::vector<int64_t>& counts) {
  w.U32(static_cast<uint32_t>(counts.size()));
  for (int64_t c : counts) w.I64(c);
}

bool DecodeCounts(drift::ByteReader& r, std::vector<int64_t>& counts) {
  const uint32_t n = r.U32();
  if (n > r.remaining() / 8) return false;
  counts.resize(n);
  for (auto& c : counts) c = r.I64();
  return !r.failed();
}

/// Exclusive end of a record window's time span at the payload's millisecond resolution.
int64_t ExclusiveEndUs(int64_t last_us) {
  if (!ValidTime(last_us)) return INT64_MIN;
  const int64_t ms = last_us >= 0 ? last_us / 1000 : -((-last_us + 999) / 1000);
  return (ms + 1) * 1000;
}

/// A window's raw values as Moments (its count, mean and M2; min and max are not kept).
Moments RawMoments(const PowerSums& sums) {
  const HigherMoments h = sums.ToMoments();
  return Moments::FromParts(h.count(), h.mean(), h.m2(), h.mean(), h.mean(),
                            h.mean() * static_cast<double>(h.count()));
}

/// A closed window's summary: the trailing baseline's memory and a seasonal phase's baseline.
struct WindowSummary {
  Moments moments;
  HigherMoments clipped;
  std::vector<int64_t> counts;
};

/// An event-time window of a series still waiting for the watermark.
struct OpenWindow {
  int64_t start_us = 0;
  int64_t first_index = 0;  // set when it closes: values of the series' earlier windows
  PowerSums raw;
  PowerSums sums;  // winsorized values
  std::vector<int64_t> counts;
  /// While the series' baseline is not frozen: the window's values (raw, sums and counts stay
  /// empty), for the warmup or, once it freezes, for those three.
  ValueSample sample;
  int64_t min_us = INT64_MIN;
  int64_t max_us = INT64_MIN;
};

/// One evaluated window as the look-back tests remember it: winsorized count, sum and M2 (for
/// the error series: labeled records and errors).
struct RecentWindow {
  int64_t n = 0;
  double sum = 0;
  double m2 = 0;
};

/// What an open incident (WARN or ALERT) knows about the change, for the evidence that the
/// series is back. Shifts are accumulated relative to each window's own reference, so the rule
/// holds for warmup, trailing and seasonal baselines alike.
struct Incident {
  /// Families (bit per DetectorFamily) that read WARN or worse during the incident.
  uint8_t families = 0;
  /// Detector index that raised the incident's current level (-1: unknown).
  int32_t lead = -1;
  /// Log-likelihood ratio "back" over "still changed" per family, accumulated (>= 0).
  std::array<double, kDetectorFamilies> evidence{};
  /// Location: sum of n * u (u = standardized shift of a window) over the incident's windows.
  int64_t loc_n = 0;
  double loc_sum = 0;
  /// Spread: sum of dof * ln(var_w / var_ref).
  int64_t spread_dof = 0;
  double spread_sum = 0;
  /// Shape: sum of n * (window share - reference share) per bin.
  int64_t shape_n = 0;
  std::vector<double> shape_delta;
  /// Error series: labeled records and errors of the incident's windows.
  int64_t error_n = 0;
  int64_t error_errors = 0;
};

/// A series' first warmup values, kept until they fix the bin edges and fences, in the compact
/// decimal form of drift/codec.h (the values of inference logs are short decimals: 2 to 4 bytes
/// each instead of 8). Exact: Values() gives back the same doubles in the same order. The bytes
/// are also what the checkpoint's warmup segments hold, so the values a batch added are written
/// as they are.
class WarmupValues {
 public:
  WarmupValues() = default;
  WarmupValues(WarmupValues&& other) noexcept { *this = std::move(other); }
  WarmupValues& operator=(WarmupValues&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
    std::swap(count_, other.count_);
    std::swap(digits_, other.digits_);
    return *this;
  }
  ~WarmupValues() { std::free(data_); }

  void Add(double v) {
    if (capacity_ - size_ < drift::kMaxDecimalBytes) Reserve(drift::kMaxDecimalBytes);
    size_ += static_cast<uint32_t>(drift::PutDecimal(v, digits_, data_ + size_));
    ++count_;
  }
  /// Appends `count` values encoded as Add() encodes them (from a checkpoint); false when the
  /// bytes do not hold exactly that many.
  bool Append(std::string_view encoded, uint32_t count) {
    drift::ByteReader r(encoded);
    for (uint32_t i = 0; i < count; ++i) (void)r.Decimal();
    if (r.failed() || !r.at_end()) return false;
    Reserve(encoded.size());
    std::memcpy(data_ + size_, encoded.data(), encoded.size());
    size_ += static_cast<uint32_t>(encoded.size());
    count_ += count;
    return true;
  }
  void Clear() {
    std::free(data_);
    data_ = nullptr;
    size_ = capacity_ = count_ = 0;
  }
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::string_view bytes() const { return {data_, size_}; }
  /// The values, in the order they were added, into `out` (replaced).
  void Values(std::vector<double>& out) const {
    out.clear();
    out.reserve(count_);
    drift::ByteReader r(bytes());
    for (uint32_t i = 0; i < count_; ++i) out.push_back(r.Decimal());
  }

 private:
  /// Room for `more` bytes. A series in warmup takes min(baseline.records, 2000) values of
  /// ~3 bytes unless its model stops, so the first buffer holds ~120 of them: starting from 32
  /// bytes took six copies to reach 100 values, ~10% of a run of 10,000 models that stayed in
  /// warmup, and a model that stops early wastes at most this first buffer. Then growth by
  /// half (not doubling): at 130,000 series the slack of doubling was ~10 MB.
  static constexpr size_t kFirstBytes = 384;
  void Reserve(size_t more) {
    if (capacity_ - size_ >= more) return;
    const size_t wanted = std::max<size_t>({size_ + more, capacity_ + capacity_ / 2, kFirstBytes});
    void* grown = std::realloc(data_, wanted);
    if (grown == nullptr) throw std::bad_alloc();
    data_ = static_cast<char*>(grown);
    capacity_ = static_cast<uint32_t>(wanted);
  }

  // The encoded values: malloc'd, so that growing may extend the block in place (realloc).
  char* data_ = nullptr;
  uint32_t size_ = 0;
  uint32_t capacity_ = 0;
  uint32_t count_ = 0;
  int digits_ = 0;  // ToDecimal's hint: the digits of the last value that needed a search
};

}  // namespace

struct DriftMonitor::Thresholds {
  double warn = 0;
  double alert = 0;
};

struct DriftMonitor::SeriesState {
  /// What a series has once it is evaluated (its windows, CUSUM, winsorized baseline,
  /// trailing and seasonal memory, incident), or once a value, a label or the checkpoint
  /// writes any of it. Kept apart so that a series in warmup costs about a quarter of one
  /// being evaluated: at 10,000 models of 13 series that is ~90 MB.
  struct Evaluation {
    /// The current record window: raw values and winsorized values (clamped to [clip_lo,
    /// clip_hi], Tukey's outer fences of the first warmup values), as power sums around the
    /// baseline's mean (no division per value).
    PowerSums window_raw;
    PowerSums window_sums;
    std::vector<int64_t> window_counts;
    int64_t window_start = 0;
    int64_t window_min_us = INT64_MIN;
    int64_t window_max_us = INT64_MIN;
    /// CUSUM sums (baseline sds) of the upper and lower side; the standardization (derived:
    /// Prepare) and the thresholds of this series' levels.
    double cusum_up = 0;
    double cusum_down = 0;
    double cusum_mean = 0;
    double cusum_inv_sd = 1;
    double cusum_k = 0;
    double cusum_warn_h = kInf;
    double cusum_alert_h = kInf;
    /// Trailing baseline: ring of the last K window summaries (the warmup is the first).
    std::vector<WindowSummary> trailing;
    uint32_t trailing_next = 0;
    /// Seasonal baseline: one summary per phase; windows starting before season_end_us are
    /// absorbed into their phase instead of being compared.
    std::vector<WindowSummary> phases;
    int64_t season_end_us = INT64_MIN;
    /// Evaluated windows the look-back tests remember (ring, oldest overwritten).
    std::vector<RecentWindow> recent;
    uint32_t recent_next = 0;
    /// The last window's own (winsorized) sd: values are standardized by the larger of it and
    /// the baseline's, so that a change of spread alone does not read as a change of location.
    double cusum_sd = 0;
    calibration::CusumModel cusum_model;
    uint64_t incident = 0;
    Incident inc;
    ErrorSummary err_baseline;
    ErrorSummary err_window;
  };

  // ---- what every value touches, first (a few cache lines) ----
  bool frozen = false;
  bool dirty = false;
  /// Derived from the baseline (Prepare), not persisted.
  bool prepared = false;
  bool edges_ready = false;
  /// While the edges are not fixed, `baseline` is not kept up to date: it is the moments of
  /// `warmup`'s values added in order, computed when the edges are fixed (BaselineOf), so a
  /// warmup value costs an append. False only for state restored from a layout whose baseline
  /// did not match its values (then `baseline` is kept).
  bool baseline_from_warmup = true;
  AlertLevel cusum_seen = AlertLevel::kOk;
  /// Values (or labeled records, for the error series) accepted so far: the next value's index.
  int64_t seen = 0;
  /// First warmup values, for the bin edges and the fences; released once these are fixed.
  WarmupValues warmup;
  double clip_lo = -kInf;
  double clip_hi = kInf;
  BinEdges edges;
  /// Reads of the evaluation state: the defaults while there is none.
  const Evaluation& eval() const;
  /// Writes: made on first use.
  Evaluation& mut_eval() {
    if (!evaluation) evaluation = std::make_unique<Evaluation>();
    return *evaluation;
  }
  std::unique_ptr<Evaluation> evaluation;
  // ---- the rest ----
  int64_t first_event_us = INT64_MIN;
  Moments baseline;
  /// Baseline of winsorized values: what the mean, spread and CUSUM tests compare with.
  HigherMoments baseline_c;
  std::vector<int64_t> ref_counts;
  AlertStateMachine alert;
  /// Event-time windows not closed yet, by start (usually one; more with late data).
  std::vector<OpenWindow> open;
  /// Categorical series: the categories (engine/drift/categories.h); null for other kinds.
  std::unique_ptr<CategoricalState> cat;

  // ---- persistence bookkeeping (not persisted) ----
  /// Something of the series record ("cold" state: what changes when a window closes, an alert
  /// moves or the baseline freezes, not with every value) may have changed since it was last
  /// written. Set by MarkDirty; values that only touch the model record's part (MarkHot) do
  /// not set it.
  bool cold_dirty = false;
  /// The series record in the checkpoint (absent while all its sections are defaults), and the
  /// hash of its bytes as last written (0: none).
  bool cold_in_store = false;
  uint64_t cold_hash = 0;
  /// Warmup values already in the model's warmup segments (and their encoded bytes).
  uint32_t warmup_saved = 0;
  uint32_t warmup_saved_bytes = 0;
  /// Warmup blocks of the version-5 layout in the checkpoint (0..blocks-1), deleted at the
  /// series' next write.
  uint32_t warmup_blocks = 0;
  /// Hash of the frozen baseline's record as last written (0: none written).
  uint64_t base_hash = 0;
  bool base_in_store = false;
  /// Keys of the series read by Restore, put together once every key was read.
  struct RestorePieces {
    std::string record;  // "<series>": the series record, any version
    std::string base;    // "<series>/base"
    std::vector<std::string> blocks;  // "<series>/w<k>" (version 5)
    std::vector<bool> have_block;
    bool has_record = false;
    bool has_base = false;
  };
  std::unique_ptr<RestorePieces> restoring;

  double Clip(double v) const { return v < clip_lo ? clip_lo : (v > clip_hi ? clip_hi : v); }
};

namespace {
const DriftMonitor::SeriesState::Evaluation kNoEvaluation;
}  // namespace

inline const DriftMonitor::SeriesState::Evaluation& DriftMonitor::SeriesState::eval() const {
  return evaluation ? *evaluation : kNoEvaluation;
}

struct DriftMonitor::ModelState {
  std::string name;
  /// Value series in series_names order, then the error series.
  std::vector<SeriesState> series;
  /// [series * detectors + detector]: the monitor's shared table, or own_thresholds when an
  /// override names this model.
  const Thresholds* thresholds = nullptr;
  std::vector<Thresholds> own_thresholds;
  AlertStateMachine rollup;
  uint64_t rollup_incident = 0;
  bool rollup_dirty = false;
  std::vector<uint32_t> dirty;
  // ---- persistence bookkeeping ----
  /// Warmup segments "<model>/%w<seq>" in the checkpoint: seq in [seg_first, seg_next), and
  /// the values they hold (live or not).
  uint32_t seg_first = 0;
  uint32_t seg_next = 0;
  int64_t seg_values = 0;
  /// The next write rewrites the live warmup values into one segment (a series started over).
  bool consolidate = false;
  /// Segment keys outside [seg_first, seg_next) found by Restore, deleted at the next write.
  std::vector<uint32_t> stale_segments;
  /// The model record is in the checkpoint (version 2, or the roll-up of version 1).
  bool record_in_store = false;
  /// Keys read by Restore for the model as a whole, put together once every key was read.
  struct RestorePieces {
    std::string record;  // version 2 model record
    std::map<uint32_t, std::string> segments;
  };
  std::unique_ptr<RestorePieces> restoring;
};

namespace {

/// Values in the series' baseline so far.
int64_t BaselineCount(const DriftMonitor::SeriesState& s) {
  return !s.edges_ready && s.baseline_from_warmup ? static_cast<int64_t>(s.warmup.size())
                                                  : s.baseline.count();
}

}  // namespace

/// One evaluation's outcome before the state machine: readings, the worst level, the lead.
struct DriftMonitor::Verdict {
  std::vector<DetectorReading>* readings = nullptr;
  std::vector<size_t> detector_of;  // detector index of each reading
  AlertLevel observed = AlertLevel::kOk;
  AlertLevel window_level = AlertLevel::kOk;
  int lead = -1;  // index into readings
  bool immediate = false;
  /// The CUSUM crossing a level between window ends: no window to weigh as evidence.
  bool sequential = false;
  uint8_t families_now = 0;
  /// This window's log-likelihood ratio "back" per family (NaN: no evidence).
  std::array<double, kDetectorFamilies> llr{};
  int64_t now_ms = 0;
  // Window facts for the event payload.
  int64_t window_start_record = 0;
  int64_t window_end_record = 0;
  int64_t window_start_us = INT64_MIN;
  int64_t window_end_us = INT64_MIN;
  int64_t window_n = 0;
  double window_mean = 0;
  double window_stddev = 0;
  int64_t baseline_n = 0;
  double baseline_mean = 0;
  double baseline_stddev = 0;
  // Incident update with this window (applied while in WARN or ALERT).
  int64_t loc_n = 0;
  double loc_u = 0;
  int64_t spread_dof = 0;
  double spread_log_ratio = 0;
  std::span<const int64_t> win_counts;
  std::span<const int64_t> ref_counts;
  int64_t error_n = 0;
  int64_t error_errors = 0;
  bool histogram = false;
  // Categorical series: the categories that moved most, and new ones.
  std::vector<CategoryChange> top_categories;
  std::vector<NewCategory> new_categories;
};

namespace {

std::vector<SeriesDef> NumericSeries(std::vector<std::string> names) {
  std::vector<SeriesDef> out;
  out.reserve(names.size());
  for (std::string& name : names) out.push_back({std::move(name), SeriesKind::kNumeric});
  return out;
}

}  // namespace

std::string DriftMonitor::MissingSeriesName(std::string_view series) {
  return std::string(series) + std::string(kMissingSuffix);
}

DriftMonitor::DriftMonitor(const DriftSpec& spec, std::vector<std::string> series_names)
    : DriftMonitor(spec, NumericSeries(std::move(series_names))) {}

DriftMonitor::DriftMonitor(const DriftSpec& spec, std::span<const SeriesDef> series)
    : spec_(spec) {
  for (const SeriesDef& def : series) {
    series_names_.push_back(def.name);
    series_kinds_.push_back(def.kind);
  }
  bool has_categories = false;
  std::vector<DetectorSpec> specs =
      spec.detectors.empty() ? DefaultDetectorSpecs() : spec.detectors;
  for (const DetectorSpec& ds : specs) {
    const DetectorDefaults& defaults = DefaultsFor(ds.kind);
    DetectorConfig d;
    d.kind = ds.kind;
    d.name = defaults.name;
    d.spec_name = ds.name.empty() ? std::string(defaults.name) : ds.name;
    const bool unset = ds.warn == 0 && ds.alert == 0;
    d.warn = unset ? defaults.warn : ds.warn;
    d.alert = unset ? defaults.alert : ds.alert;
    d.min_effect = DetectorParam(ds, "minEffect");
    d.allowance = DetectorParam(ds, "allowance");
    d.threshold = DetectorParam(ds, "threshold");
    switch (ds.kind) {
      case DetectorKind::kPsi:
      case DetectorKind::kJensenShannon:
      case DetectorKind::kKs:
        if (!has_histogram_) histogram_bins_ = static_cast<int>(DetectorParam(ds, "bins", 10));
        has_histogram_ = true;
        break;
      case DetectorKind::kErrorRate:
        if (!has_error_rate_) error_threshold_ = d.threshold;
        has_error_rate_ = true;
        break;
      case DetectorKind::kCusum:
        if (!has_cusum_) cusum_detector_ = static_cast<int>(detectors_.size());
        has_cusum_ = true;
        break;
      case DetectorKind::kChiSquare:
      case DetectorKind::kUnseenCategories:
        if (!has_categories) {
          max_categories_ = static_cast<size_t>(
              std::clamp(DetectorParam(ds, "categories", 30), 2.0, 1000.0));
        }
        has_categories = true;
        break;
      default:
        break;
    }
    detectors_.push_back(std::move(d));
  }
  histogram_bins_ = std::clamp(histogram_bins_, 2, 1000);
  policy_.hysteresis = std::max(1, spec.hysteresis);
  policy_.cooldown_ms = spec.cooldown_ms;
  spec_.window_records = std::max<int64_t>(1, spec.window_records);
  spec_.baseline.records = std::max<int64_t>(1, spec.baseline.records);
  spec_.baseline.windows = std::max(1, spec.baseline.windows);
  spec_.baseline.cycles = std::max(1, spec.baseline.cycles);
  resolve_log_evidence_ = std::log(std::max(1.0, spec.resolve_evidence));
  ref_counts_.resize(static_cast<size_t>(histogram_bins_));
  ref_shares_.resize(static_cast<size_t>(histogram_bins_));
  cur_shares_.resize(static_cast<size_t>(histogram_bins_));
  terms_.resize(static_cast<size_t>(histogram_bins_));
}

DriftMonitor::~DriftMonitor() = default;

Result<std::unique_ptr<DriftMonitor>> DriftMonitor::Create(const DriftSpec& spec,
                                                           std::vector<std::string> series_names) {
  if (spec.window_records < 1) {
    return MakeError(ErrorCode::kConfig, "drift: windowRecords must be at least 1, got {}",
                     spec.window_records);
  }
  if (spec.window_records < spec.min_samples) {
    return MakeError(ErrorCode::kConfig,
                     "drift: windowRecords ({}) is below minSamples ({}): no window could ever "
                     "be evaluated",
                     spec.window_records, spec.min_samples);
  }
  if (spec.baseline.kind == BaselineKind::kWarmup && spec.baseline.duration_ms == 0 &&
      spec.baseline.records < spec.min_samples) {
    return MakeError(ErrorCode::kConfig, "drift: baseline records ({}) is below minSamples ({})",
                     spec.baseline.records, spec.min_samples);
  }
  if (spec.baseline.kind == BaselineKind::kSeasonal && spec.baseline.period_ms <= 0) {
    return MakeError(ErrorCode::kConfig, "drift: a seasonal baseline needs a period");
  }
  for (const DetectorSpec& d : spec.detectors) {
    if (d.warn > d.alert && !(d.warn == 0 && d.alert == 0)) {
      return MakeError(ErrorCode::kConfig, "drift: detector {}: warn ({}) is above alert ({})",
                       d.name, d.warn, d.alert);
    }
  }
  return std::make_unique<DriftMonitor>(spec, std::move(series_names));
}

Result<std::unique_ptr<DriftMonitor>> DriftMonitor::Create(const DriftSpec& spec,
                                                           std::span<const SeriesDef> series) {
  for (const SeriesDef& def : series) {
    if (static_cast<int>(def.kind) >= kSeriesKinds) {
      return MakeError(ErrorCode::kInvalidArgument, "drift: series '{}' of unknown kind",
                       def.name);
    }
  }
  std::vector<std::string> names;
  for (const SeriesDef& def : series) names.push_back(def.name);
  auto checked = Create(spec, std::move(names));
  if (!checked) return tl::unexpected(checked.error());
  return std::make_unique<DriftMonitor>(spec, series);
}

DriftMonitor::ModelState& DriftMonitor::ModelFor(uint32_t model, const std::string& model_name) {
  if (model < models_.size() && models_[model]) return *models_[model];
  if (model >= models_.size()) models_.resize(static_cast<size_t>(model) + 1);

  std::unique_ptr<ModelState> state;
  if (auto it = pending_.find(model_name); it != pending_.end()) {
    state = std::move(it->second);
    pending_.erase(it);
    // Normally done by FinishRestore; a model whose keys do not fit starts afresh.
    IgnoreError(CompleteModel(*state, /*lenient=*/true));
  } else {
    state = std::make_unique<ModelState>();
    state->name = model_name;
    state->series.resize(series_names_.size() + 1);
  }
  // Models that no override names share one table of thresholds.
  const size_t num_series = series_names_.size() + 1;
  // A segment's model is the name before its segment values (UseSegments).
  std::string_view base_model = model_name;
  for (size_t part = 0; part < segment_parts_; ++part) {
    const size_t separator = base_model.rfind('\x1f');
    if (separator == std::string_view::npos) break;
    base_model = base_model.substr(0, separator);
  }
  const bool named = std::any_of(spec_.overrides.begin(), spec_.overrides.end(),
                                 [&](const ThresholdOverride& ov) { return ov.model == base_model; });
  if (named) {
    ResolveThresholds(model_name, state->own_thresholds);
    state->thresholds = state->own_thresholds.data();
  } else {
    if (!shared_thresholds_ready_) {
      ResolveThresholds({}, shared_thresholds_);
      shared_thresholds_ready_ = true;
    }
    state->thresholds = shared_thresholds_.data();
  }
  state->dirty.reserve(num_series);
  models_[model] = std::move(state);
  return *models_[model];
}

void DriftMonitor::ResolveThresholds(std::string_view model_name,
                                     std::vector<Thresholds>& out) const {
  // Overrides apply from the least specific (detector only) to the most specific (model and
  // series); an empty `model_name` takes none that names a model.
  const size_t num_series = series_names_.size() + 1;
  out.resize(num_series * detectors_.size());
  for (size_t s = 0; s < num_series; ++s) {
    ResolveThresholds(std::string(model_name), s, &out[s * detectors_.size()]);
  }
}

// Overrides apply from the least specific (detector only) to the most specific (model and
// series). An override of a series also covers its elements ("x" covers "x[3]") and its keys
// ("features" covers "features.amount").
void DriftMonitor::ResolveThresholds(const std::string& model_name, size_t series,
                                     Thresholds* out) const {
  const std::string_view series_name =
      series < series_names_.size() ? std::string_view(series_names_[series]) : kErrorSeries;
  std::string_view model = model_name;
  for (size_t part = 0; part < segment_parts_; ++part) {
    const size_t separator = model.rfind('\x1f');
    if (separator == std::string_view::npos) break;
    model = model.substr(0, separator);
  }
  for (size_t d = 0; d < detectors_.size(); ++d) {
    const DetectorConfig& det = detectors_[d];
    Thresholds t{det.warn, det.alert};
    for (int specificity = 0; specificity < 4; ++specificity) {
      for (const ThresholdOverride& ov : spec_.overrides) {
        const int ov_specificity = (ov.model.empty() ? 0 : 2) + (ov.series.empty() ? 0 : 1);
        if (ov_specificity != specificity) continue;
        if (!ov.detector.empty() && ov.detector != det.spec_name && ov.detector != det.name) {
          continue;
        }
        if (!ov.model.empty() && ov.model != model) continue;
        if (!ov.series.empty() && ov.series != series_name &&
            !(series_name.size() > ov.series.size() && series_name.starts_with(ov.series) &&
              (series_name[ov.series.size()] == '[' || series_name[ov.series.size()] == '.'))) {
          continue;
        }
        if (ov.warn) t.warn = *ov.warn;
        if (ov.alert) t.alert = *ov.alert;
      }
    }
    out[d] = t;
  }
}

void DriftMonitor::InsertSeries(size_t index, std::string name, SeriesKind kind) {
  index = std::min(index, series_names_.size());
  series_names_.insert(series_names_.begin() + static_cast<ptrdiff_t>(index), std::move(name));
  series_kinds_.insert(series_kinds_.begin() + static_cast<ptrdiff_t>(index), kind);
  const size_t detectors = detectors_.size();
  // The shared thresholds are made again (models that point to them are pointed anew).
  const Thresholds* old_shared = shared_thresholds_.data();
  if (shared_thresholds_ready_) ResolveThresholds({}, shared_thresholds_);
  auto grow = [&](ModelState& m) {
    m.series.insert(m.series.begin() + static_cast<ptrdiff_t>(index), SeriesState{});
    for (uint32_t& dirty : m.dirty) {
      if (dirty >= index) ++dirty;
    }
    // Models not seen yet (restored) get their thresholds in ModelFor.
    if (m.thresholds == nullptr) return;
    if (m.thresholds == old_shared) {
      m.thresholds = shared_thresholds_.data();
      return;
    }
    std::vector<Thresholds> added(detectors);
    ResolveThresholds(m.name, index, added.data());
    m.own_thresholds.insert(m.own_thresholds.begin() + static_cast<ptrdiff_t>(index * detectors),
                            added.begin(), added.end());
    m.thresholds = m.own_thresholds.data();
  };
  for (auto& m : models_) {
    if (m) grow(*m);
  }
  for (auto& [model_name, m] : pending_) grow(*m);
  // Model records and warmup segments name series by the table's positions: the new name
  // gets one at the next write (names already there keep theirs).
  table_resolved_ = false;
}

void DriftMonitor::Prefetch(uint32_t model, int step) const {
  if (model >= models_.size() || !models_[model]) return;
  const ModelState& m = *models_[model];
  if (step == 0) {
    __builtin_prefetch(&m);
    return;
  }
  if (step == 1) {
    for (const SeriesState& s : m.series) __builtin_prefetch(&s, 1);
    return;
  }
  for (const SeriesState& s : m.series) {
    if (!s.edges_ready) {
      __builtin_prefetch(s.warmup.bytes().data() + s.warmup.bytes().size(), 1);
      continue;
    }
    // Past the warmup (a rate series from its first value): the bin counts a value increments
    // and the evaluation state its window sums live in.
    if (!s.ref_counts.empty()) __builtin_prefetch(s.ref_counts.data(), 1);
    if (s.evaluation) __builtin_prefetch(s.evaluation.get(), 1);
  }
}

void DriftMonitor::MarkHot(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  if (!s.dirty) {
    s.dirty = true;
    m.dirty.push_back(static_cast<uint32_t>(series));
  }
  // A categorical series has no part in the model record: its record holds everything.
  if (series < series_kinds_.size() && series_kinds_[series] == SeriesKind::kCategorical) {
    s.cold_dirty = true;
  }
}

void DriftMonitor::MarkDirty(ModelState& m, size_t series) {
  MarkHot(m, series);
  m.series[series].cold_dirty = true;
}

double DriftMonitor::WindowShift(const SeriesState& s, size_t series) const {
  // A rate series' 0s and 1s sum exactly around 0, so its windows' rates do not depend on the
  // order their values arrive in, not even in the last bits.
  return IsDataQuality(series_kinds_[series]) ? 0.0 : s.baseline_c.mean();
}

int64_t DriftMonitor::WindowClockMs(int64_t window_end_us) const {
  if (!ValidTime(window_end_us)) return last_now_ms_;
  // Floor division, so times before the epoch still order correctly.
  return window_end_us >= 0 ? window_end_us / 1000 : -((-window_end_us + 999) / 1000);
}

bool DriftMonitor::PerValueCusum() const {
  return has_cusum_ && et_size_us_ == 0 &&
         (spec_.baseline.kind == BaselineKind::kWarmup ||
          spec_.baseline.kind == BaselineKind::kFile);
}

void DriftMonitor::Observe(uint32_t model, const std::string& model_name, size_t series,
                           double value, int64_t event_time_us, int64_t late_before_us) {
  if (!std::isfinite(value)) {
    ++skipped_values_;
    return;
  }
  if (series >= series_names_.size()) return;  // caller bug; nothing sensible to record
  if (series_kinds_[series] == SeriesKind::kCategorical) return;  // ObserveCategory's
  ModelState& m = ModelFor(model, model_name);
  if (ValidTime(event_time_us) && event_time_us > max_event_us_) max_event_us_ = event_time_us;
  AddValue(m, series, value, event_time_us, late_before_us);
}

void DriftMonitor::Observe(uint32_t model, const std::string& model_name, size_t first_series,
                           std::span<const double> values, int64_t event_time_us,
                           int64_t late_before_us) {
  if (first_series > series_names_.size() ||
      values.size() > series_names_.size() - first_series) {
    return;  // caller bug; nothing sensible to record
  }
  ModelState* m = nullptr;
  for (size_t i = 0; i < values.size(); ++i) {
    const double value = values[i];
    if (!std::isfinite(value)) {
      ++skipped_values_;
      continue;
    }
    if (m == nullptr) {
      m = &ModelFor(model, model_name);
      if (ValidTime(event_time_us) && event_time_us > max_event_us_) max_event_us_ = event_time_us;
    }
    AddValue(*m, first_series + i, value, event_time_us, late_before_us);
  }
}

void DriftMonitor::UseEventTimeWindows(int64_t size_ms, int64_t delay_ms) {
  et_size_us_ = std::max<int64_t>(1, size_ms) * 1000;
  et_delay_us_ = std::max<int64_t>(0, delay_ms) * 1000;
}

void DriftMonitor::RestoreClock(int64_t max_event_time_us, int64_t watermark_us) {
  max_event_us_ = max_event_time_us;
  AdvanceWatermark(watermark_us);
}

void DriftMonitor::AdvanceWatermark(int64_t watermark_us) {
  if (ValidTime(watermark_us) && (!ValidTime(watermark_us_) || watermark_us > watermark_us_)) {
    watermark_us_ = watermark_us;
  }
}

bool DriftMonitor::HasClosableWindows(int64_t watermark_us) const {
  if (et_size_us_ == 0 || !ValidTime(watermark_us)) return false;
  for (const auto& mp : models_) {
    if (!mp) continue;
    for (size_t series = 0; series < series_names_.size(); ++series) {
      const SeriesState& s = mp->series[series];
      if (!s.open.empty() && s.open.front().start_us + et_size_us_ <= watermark_us) return true;
      if (s.cat && !s.cat->open.empty() &&
          s.cat->open.front().start_us + et_size_us_ <= watermark_us) {
        return true;
      }
    }
  }
  return false;
}

void DriftMonitor::AddToEventWindow(ModelState& m, size_t series, double value,
                                    int64_t event_time_us, int64_t late_before_us) {
  SeriesState& s = m.series[series];
  if (!ValidTime(event_time_us)) {
    ++values_without_time_;
    return;
  }
  // Floor division: windows before the epoch start at multiples of the size too.
  int64_t start = event_time_us / et_size_us_ * et_size_us_;
  if (start > event_time_us) start -= et_size_us_;
  const int64_t closed_before = std::max(late_before_us, watermark_us_);
  if (ValidTime(closed_before) && start + et_size_us_ <= closed_before) {
    ++late_values_;
    return;
  }
  OpenWindow* window = nullptr;
  for (OpenWindow& w : s.open) {
    if (w.start_us == start) window = &w;
  }
  if (window == nullptr) {
    OpenWindow w;
    w.start_us = start;
    if (s.frozen) {
      w.raw.Reset(WindowShift(s, series));
      w.sums.Reset(WindowShift(s, series));
      if (has_histogram_) w.counts.assign(s.edges.bins(), 0);
    }
    // Kept in start order, so closing walks from the front.
    auto at = std::find_if(s.open.begin(), s.open.end(),
                           [&](const OpenWindow& o) { return o.start_us > start; });
    window = &*s.open.insert(at, std::move(w));
  }
  if (!s.frozen) {
    window->sample.Add(value);
  } else {
    window->raw.Add(value);
    window->sums.Add(s.Clip(value));
    if (has_histogram_ && !window->counts.empty()) ++window->counts[s.edges.BinOf(value)];
  }
  if (!ValidTime(window->min_us) || event_time_us < window->min_us) window->min_us = event_time_us;
  if (!ValidTime(window->max_us) || event_time_us > window->max_us) window->max_us = event_time_us;
}

void DriftMonitor::CloseEventWindows() {
  if (!ValidTime(watermark_us_)) return;
  // Models in name order and each model's windows in start order (all its series' window k
  // before any window k+1), so the events, and the roll-up's view of its series, are the same
  // however many windows one batch closes.
  std::vector<ModelState*> order;
  order.reserve(models_.size());
  for (auto& mp : models_) {
    if (mp) order.push_back(mp.get());
  }
  std::sort(order.begin(), order.end(),
            [](const ModelState* a, const ModelState* b) { return a->name < b->name; });
  for (ModelState* mp : order) {
    ModelState& m = *mp;
    for (;;) {
      int64_t next = INT64_MAX;
      for (size_t series = 0; series < series_names_.size(); ++series) {
        const SeriesState& s = m.series[series];
        if (!s.open.empty() && s.open.front().start_us + et_size_us_ <= watermark_us_) {
          next = std::min(next, s.open.front().start_us);
        }
        if (s.cat && !s.cat->open.empty() &&
            s.cat->open.front().start_us + et_size_us_ <= watermark_us_) {
          next = std::min(next, s.cat->open.front().start_us);
        }
      }
      if (next == INT64_MAX) break;
      for (size_t series = 0; series < series_names_.size(); ++series) {
        SeriesState& s = m.series[series];
        if (s.cat && !s.cat->open.empty() && s.cat->open.front().start_us == next) {
          CloseCategoryEventWindow(m, series);
          s.cat->open.erase(s.cat->open.begin());
        }
        if (s.open.empty() || s.open.front().start_us != next) continue;
        CloseEventWindow(m, series);
        s.open.erase(s.open.begin());
      }
    }
  }
}

void DriftMonitor::CloseEventWindow(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  OpenWindow& w = s.open.front();
  MarkDirty(m, series);
  // Value indexes count the values of closed windows, in window order: they depend on event
  // times only (the ids of the window's events hash its first index).
  w.first_index = s.seen;
  if (!s.frozen) {
    // A warmup window: its values join the baseline in their hash order (fixed by the values
    // alone), and the baseline freezes after the window that makes it large (or long) enough.
    if (!ValidTime(s.first_event_us)) s.first_event_us = w.start_us;
    for (const auto& [value, count] : w.sample.InHashOrder()) {
      for (int64_t i = 0; i < count; ++i) AddBaselineValue(s, value);
      s.seen += count;
    }
    const bool by_duration =
        spec_.baseline.kind == BaselineKind::kWarmup && spec_.baseline.duration_ms > 0;
    const bool enough =
        by_duration ? w.start_us + et_size_us_ - s.first_event_us >=
                              spec_.baseline.duration_ms * 1000 &&
                          BaselineCount(s) >= std::max<int64_t>(1, spec_.min_samples)
                    : BaselineCount(s) >= spec_.baseline.records;
    if (!enough) return;
    FreezeBaseline(s);
    // Windows still open were sampled: their sums and counts, now that the baseline is known.
    for (size_t i = 1; i < s.open.size(); ++i) {
      OpenWindow& later = s.open[i];
      later.raw.Reset(WindowShift(s, series));
      later.sums.Reset(WindowShift(s, series));
      if (has_histogram_) later.counts.assign(s.edges.bins(), 0);
      for (const auto& [value, count] : later.sample.Sorted()) {
        for (int64_t k = 0; k < count; ++k) {
          later.raw.Add(value);
          later.sums.Add(s.Clip(value));
          if (has_histogram_) ++later.counts[s.edges.BinOf(value)];
        }
      }
      later.sample.Clear();
    }
    return;
  }
  s.seen += w.raw.count();
  // The closing window becomes the series' current window for CloseWindow(); it reports the
  // window's bounds [start, end) as its times.
  SeriesState::Evaluation& ev = s.mut_eval();
  ev.window_raw = w.raw;
  ev.window_sums = w.sums;
  if (has_histogram_) ev.window_counts = w.counts;
  ev.window_start = w.first_index;
  ev.window_min_us = w.start_us;
  ev.window_max_us = w.start_us + et_size_us_;
  CloseWindow(m, series);
}

size_t DriftMonitor::EdgeValues() const {
  const bool by_duration =
      spec_.baseline.kind == BaselineKind::kWarmup && spec_.baseline.duration_ms > 0;
  if (by_duration || spec_.baseline.kind == BaselineKind::kFile) return kMaxWarmupValues;
  return static_cast<size_t>(
      std::min<int64_t>(spec_.baseline.records, static_cast<int64_t>(kMaxWarmupValues)));
}

void DriftMonitor::AddBaselineValue(SeriesState& s, double value) {
  if (!s.edges_ready) {
    if (!s.baseline_from_warmup) s.baseline.Add(value);
    s.warmup.Add(value);
    if (s.warmup.size() >= EdgeValues()) FixEdges(s);
    return;
  }
  s.baseline.Add(value);
  s.baseline_c.Add(s.Clip(value));
  if (has_histogram_ && !s.ref_counts.empty()) ++s.ref_counts[s.edges.BinOf(value)];
}

void DriftMonitor::AddValue(ModelState& m, size_t series, double value, int64_t event_time_us,
                            int64_t late_before_us) {
  SeriesState& s = m.series[series];
  // What a value changes is in the model record; what else it may change (a window closing,
  // the baseline freezing) marks the series record itself.
  MarkHot(m, series);
  if (et_size_us_ > 0) {
    // Warmup and evaluation windows alike are event-time windows (see UseEventTimeWindows).
    AddToEventWindow(m, series, value, event_time_us, late_before_us);
    return;
  }
  if (!s.frozen) {
    bool freeze_now = false;
    const bool by_duration =
        spec_.baseline.kind == BaselineKind::kWarmup && spec_.baseline.duration_ms > 0;
    if (by_duration) {
      // Event-time warmup: the first duration of event time, and at least min_samples values.
      if (ValidTime(event_time_us)) {
        if (!ValidTime(s.first_event_us)) s.first_event_us = event_time_us;
        freeze_now = event_time_us >= s.first_event_us + spec_.baseline.duration_ms * 1000 &&
                     BaselineCount(s) >= std::max<int64_t>(1, spec_.min_samples);
      } else {
        // No clock to measure the duration by: fall back to the record count.
        freeze_now = BaselineCount(s) >= spec_.baseline.records;
      }
    }
    if (freeze_now) {
      FreezeBaseline(s);
      // This value is the first of the first window.
    } else {
      ++s.seen;
      AddBaselineValue(s, value);
      if (!by_duration && BaselineCount(s) >= spec_.baseline.records) FreezeBaseline(s);
      return;
    }
  }
  SeriesState::Evaluation& ev = s.mut_eval();
  if (ev.window_raw.count() == 0) {
    ev.window_start = s.seen;
    ev.window_min_us = INT64_MIN;
    ev.window_max_us = INT64_MIN;
    ev.window_raw.Reset(WindowShift(s, series));
    ev.window_sums.Reset(WindowShift(s, series));
    s.cusum_seen = AlertLevel::kOk;
  }
  ++s.seen;
  ev.window_raw.Add(value);
  const double clipped = s.Clip(value);
  ev.window_sums.Add(clipped);
  if (has_histogram_) ++ev.window_counts[s.edges.BinOf(value)];
  if (ValidTime(event_time_us)) {
    if (!ValidTime(ev.window_min_us) || event_time_us < ev.window_min_us) {
      ev.window_min_us = event_time_us;
    }
    if (!ValidTime(ev.window_max_us) || event_time_us > ev.window_max_us) {
      ev.window_max_us = event_time_us;
    }
  }
  if (PerValueCusum() && series_kinds_[series] == SeriesKind::kNumeric) {
    if (!s.prepared) Prepare(m, series);
    const double z = (clipped - ev.cusum_mean) * ev.cusum_inv_sd;
    const double cap = 4 * ev.cusum_alert_h;
    ev.cusum_up = std::min(cap, std::max(0.0, ev.cusum_up + z - ev.cusum_k));
    ev.cusum_down = std::min(cap, std::max(0.0, ev.cusum_down - z - ev.cusum_k));
    if (ev.cusum_up >= ev.cusum_warn_h || ev.cusum_down >= ev.cusum_warn_h) {
      SequentialCheck(m, series, event_time_us);
    }
  }
  if (ev.window_raw.count() >= spec_.window_records) CloseWindow(m, series);
}

void DriftMonitor::FixEdges(SeriesState& s) {
  if (s.edges_ready) return;
  s.cold_dirty = true;  // the fences and edges are in the series record
  std::vector<double>& values = edge_values_;
  s.warmup.Values(values);
  if (s.baseline_from_warmup) {
    // The warmup's moments, as adding each value on arrival would have made them.
    s.baseline.Clear();
    for (double v : values) s.baseline.Add(v);
  }
  std::sort(values.begin(), values.end());
  if (has_histogram_) s.edges = BinEdges::FromQuantiles(values, histogram_bins_);
  // Winsorizing fences: Tukey's outer fences, Q1 - 3 IQR and Q3 + 3 IQR. A normal feature is
  // almost never clipped (the fences sit at 4.7 sd); a heavy tail is, so that a single extreme
  // value cannot move a mean, a variance or a CUSUM. Without spread in the middle half (few
  // distinct values) nothing is clipped.
  s.clip_lo = -kInf;
  s.clip_hi = kInf;
  if (!values.empty()) {
    const size_t n = values.size();
    const double q1 = values[n / 4];
    const double q3 = values[std::min(n - 1, (3 * n) / 4)];
    const double iqr = q3 - q1;
    if (iqr > 0 && std::isfinite(iqr)) {
      s.clip_lo = q1 - 3 * iqr;
      s.clip_hi = q3 + 3 * iqr;
    }
  }
  s.baseline_c.Clear();
  for (double v : values) s.baseline_c.Add(s.Clip(v));
  s.ref_counts.assign(has_histogram_ ? s.edges.bins() : 0, 0);
  if (has_histogram_) {
    for (double v : values) ++s.ref_counts[s.edges.BinOf(v)];
  }
  s.warmup.Clear();
  s.edges_ready = true;
}

void DriftMonitor::FreezeBaseline(SeriesState& s) {
  SeriesState::Evaluation& ev = s.mut_eval();
  FixEdges(s);
  s.cold_dirty = true;  // the baseline moves to its own key
  if (has_histogram_) ev.window_counts.assign(s.edges.bins(), 0);
  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    ev.trailing.clear();
    ev.trailing.push_back({s.baseline, s.baseline_c, s.ref_counts});
    ev.trailing_next = 1 % static_cast<uint32_t>(spec_.baseline.windows);
  }
  s.frozen = true;
  s.prepared = false;
}

void DriftMonitor::SetupCusum(SeriesState& s, const HigherMoments& ref, double warn,
                              double alert, double allowance) {
  SeriesState::Evaluation& ev = s.mut_eval();
  calibration::CusumModel model{allowance, static_cast<double>(ref.count()), ref.Kurtosis(),
                                ref.Skewness()};
  const double per_value = static_cast<double>(spec_.window_records);
  const double rate_alert = calibration::TailOfScore(alert) / per_value;
  const double rate_warn = calibration::TailOfScore(warn) / per_value;
  model.allowance = calibration::CusumFeasibleAllowance(model, rate_alert);
  ev.cusum_model = model;
  ev.cusum_k = model.allowance;
  ev.cusum_warn_h = calibration::CusumThreshold(model, rate_warn);
  ev.cusum_alert_h = std::max(ev.cusum_warn_h, calibration::CusumThreshold(model, rate_alert));
}

void DriftMonitor::Prepare(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  s.prepared = true;
  if (cusum_detector_ < 0) return;
  const Thresholds& t =
      m.thresholds[series * detectors_.size() + static_cast<size_t>(cusum_detector_)];
  ev.cusum_mean = s.baseline_c.mean();
  ev.cusum_inv_sd =
      1 / std::max(FlooredSigma(s.baseline_c.Stddev(), s.baseline_c.mean()), ev.cusum_sd);
  SetupCusum(s, s.baseline_c, t.warn, t.alert,
             detectors_[static_cast<size_t>(cusum_detector_)].allowance);
}

size_t DriftMonitor::PhaseOf(int64_t window_start_us) const {
  const int64_t phases = std::max<int64_t>(1, spec_.baseline.period_ms * 1000 / et_size_us_);
  int64_t index = window_start_us / et_size_us_;
  if (index * et_size_us_ > window_start_us) --index;
  return static_cast<size_t>(((index % phases) + phases) % phases);
}

void DriftMonitor::SequentialCheck(ModelState& m, size_t series, int64_t event_time_us) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  const double sum = std::max(ev.cusum_up, ev.cusum_down);
  const AlertLevel level = sum >= ev.cusum_alert_h  ? AlertLevel::kAlert
                           : sum >= ev.cusum_warn_h ? AlertLevel::kWarn
                                                    : AlertLevel::kOk;
  if (level <= s.cusum_seen) return;
  s.cusum_seen = level;
  MarkDirty(m, series);
  const AlertLevel before = s.alert.state();
  if (before == AlertLevel::kAlert || (before == AlertLevel::kWarn && level == AlertLevel::kWarn)) {
    return;
  }
  const size_t d = static_cast<size_t>(cusum_detector_);
  const Thresholds& t = m.thresholds[series * detectors_.size() + d];
  EvaluationInput in;
  in.cusum = sum;
  in.cusum_up = ev.cusum_up;
  in.cusum_down = ev.cusum_down;
  in.cusum_allowance = ev.cusum_k;
  in.cusum_warn_h = ev.cusum_warn_h;
  in.cusum_alert_h = ev.cusum_alert_h;
  in.cusum_model = ev.cusum_model;
  in.cusum_values_per_evaluation = static_cast<double>(spec_.window_records);
  readings_.resize(1);
  DefaultsFor(DetectorKind::kCusum).evaluate(in, detectors_[d], t.warn, t.alert, readings_[0]);
  Verdict v;
  v.readings = &readings_;
  v.detector_of = {d};
  v.observed = readings_[0].level;
  v.lead = 0;
  v.immediate = true;
  v.sequential = true;
  v.families_now = 1u << static_cast<int>(DetectorFamily::kLocation);
  v.now_ms = WindowClockMs(event_time_us);
  v.window_start_record = ev.window_start;
  v.window_end_record = s.seen;
  v.window_start_us = ev.window_min_us;
  v.window_end_us = ExclusiveEndUs(ev.window_max_us);
  const HigherMoments raw = ev.window_raw.ToMoments();
  v.window_n = raw.count();
  v.window_mean = raw.mean();
  v.window_stddev = raw.Stddev();
  v.baseline_n = s.baseline.count();
  v.baseline_mean = s.baseline.mean();
  v.baseline_stddev = s.baseline.Stddev();
  Decide(m, series, v);
}

namespace {

/// Look-backs over the last 1, 2, 4, ... evaluated windows (ring `recent`, newest at
/// recent_next - 1).
void BuildLookbacks(const std::vector<RecentWindow>& recent, uint32_t next,
                    std::vector<Lookback>& out) {
  out.clear();
  const size_t size = recent.size();
  int64_t n = 0;
  double sum = 0;
  double m2 = 0;
  int64_t dof = 0;
  size_t taken = 0;
  for (size_t want = 1; want <= size; want *= 2) {
    while (taken < want) {
      const RecentWindow& w = recent[(next + size - 1 - taken) % size];
      n += w.n;
      sum += w.sum;
      m2 += w.m2;
      dof += std::max<int64_t>(0, w.n - 1);
      ++taken;
    }
    Lookback lb;
    lb.windows = static_cast<int>(taken);
    lb.n = n;
    lb.mean = n > 0 ? sum / static_cast<double>(n) : 0;
    lb.dof = dof;
    lb.pooled_variance = dof > 0 ? m2 / static_cast<double>(dof) : 0;
    out.push_back(lb);
  }
}

void BuildErrorLookbacks(const std::vector<RecentWindow>& recent, uint32_t next,
                         std::vector<ErrorLookback>& out) {
  out.clear();
  const size_t size = recent.size();
  int64_t n = 0;
  double errors = 0;
  size_t taken = 0;
  for (size_t want = 1; want <= size; want *= 2) {
    while (taken < want) {
      const RecentWindow& w = recent[(next + size - 1 - taken) % size];
      n += w.n;
      errors += w.sum;
      ++taken;
    }
    out.push_back({static_cast<int>(taken), n, static_cast<int64_t>(std::llround(errors))});
  }
}

void Remember(std::vector<RecentWindow>& recent, uint32_t& next, RecentWindow w, size_t limit) {
  if (recent.size() < limit) {
    recent.push_back(w);
    next = static_cast<uint32_t>(recent.size() % limit);
    return;
  }
  recent[next] = w;
  next = static_cast<uint32_t>((next + 1) % limit);
}

void AddToIncident(Incident& inc, int64_t loc_n, double loc_u, int64_t spread_dof,
                   double spread_log_ratio, std::span<const int64_t> win_counts,
                   std::span<const int64_t> ref_counts, int64_t error_n, int64_t error_errors) {
  inc.loc_n += loc_n;
  inc.loc_sum += static_cast<double>(loc_n) * loc_u;
  inc.spread_dof += spread_dof;
  inc.spread_sum += static_cast<double>(spread_dof) * spread_log_ratio;
  const size_t k = std::min(win_counts.size(), ref_counts.size());
  if (k > 0) {
    double n_w = 0;
    double n_r = 0;
    for (size_t i = 0; i < k; ++i) {
      n_w += static_cast<double>(win_counts[i]);
      n_r += static_cast<double>(ref_counts[i]);
    }
    if (n_w > 0 && n_r > 0) {
      if (inc.shape_delta.size() != k) inc.shape_delta.assign(k, 0);
      for (size_t i = 0; i < k; ++i) {
        inc.shape_delta[i] += static_cast<double>(win_counts[i]) -
                              n_w * static_cast<double>(ref_counts[i]) / n_r;
      }
      inc.shape_n += static_cast<int64_t>(n_w);
    }
  }
  inc.error_n += error_n;
  inc.error_errors += error_errors;
}

}  // namespace

void DriftMonitor::CloseWindow(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  MarkDirty(m, series);
  ++windows_evaluated_;
  const HigherMoments window_c = ev.window_sums.ToMoments();
  const Moments window = RawMoments(ev.window_raw);
  auto clear_window = [&] {
    ev.window_raw.Reset(WindowShift(s, series));
    ev.window_sums.Reset(WindowShift(s, series));
    std::fill(ev.window_counts.begin(), ev.window_counts.end(), 0);
    s.cusum_seen = AlertLevel::kOk;
  };

  // Seasonal warm-up: the first `cycles` periods of windows become the phases' baselines.
  const bool seasonal = spec_.baseline.kind == BaselineKind::kSeasonal && et_size_us_ > 0;
  size_t phase = 0;
  if (seasonal) {
    const int64_t phases = std::max<int64_t>(1, spec_.baseline.period_ms * 1000 / et_size_us_);
    if (ev.phases.size() != static_cast<size_t>(phases)) {
      ev.phases.resize(static_cast<size_t>(phases));
    }
    if (!ValidTime(ev.season_end_us)) {
      ev.season_end_us = ev.window_min_us + spec_.baseline.cycles * spec_.baseline.period_ms * 1000;
    }
    phase = PhaseOf(ev.window_min_us);
    if (ev.window_min_us < ev.season_end_us) {
      WindowSummary& p = ev.phases[phase];
      p.moments.Merge(window);
      p.clipped.Merge(window_c);
      if (p.counts.size() != ev.window_counts.size()) p.counts.assign(ev.window_counts.size(), 0);
      for (size_t b = 0; b < ev.window_counts.size(); ++b) p.counts[b] += ev.window_counts[b];
      clear_window();
      return;
    }
  }

  // The reference: the frozen warmup, the merge of the previous K windows, or the phase's.
  const Moments* ref = &s.baseline;
  HigherMoments ref_c = s.baseline_c;
  const std::vector<int64_t>* ref_counts = &s.ref_counts;
  Moments trailing_ref;
  bool ready = true;
  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    ready = ev.trailing.size() >= static_cast<size_t>(spec_.baseline.windows);
    if (ready) {
      if (ref_counts_.size() < s.edges.bins()) ref_counts_.resize(s.edges.bins());
      std::fill(ref_counts_.begin(), ref_counts_.end(), 0);
      ref_c.Clear();
      for (const WindowSummary& w : ev.trailing) {
        trailing_ref.Merge(w.moments);
        ref_c.Merge(w.clipped);
        for (size_t b = 0; b < w.counts.size() && b < ref_counts_.size(); ++b) {
          ref_counts_[b] += w.counts[b];
        }
      }
      ref = &trailing_ref;
      ref_counts = &ref_counts_;
    }
  } else if (seasonal) {
    const WindowSummary& p = ev.phases[phase];
    ref = &p.moments;
    ref_c = p.clipped;
    ref_counts = &p.counts;
  }
  ready = ready && window.count() >= spec_.min_samples && ref_c.count() >= spec_.min_samples;
  if (!ready && collect_evaluations_) {
    RecordEvaluation(m, series, false, s.alert.state(), nullptr);
  }

  if (ready) {
    const bool lookback_tests = spec_.baseline.kind == BaselineKind::kWarmup ||
                                spec_.baseline.kind == BaselineKind::kFile;
    const RecentWindow current{window_c.count(),
                               window_c.mean() * static_cast<double>(window_c.count()),
                               window_c.m2()};
    std::vector<Lookback> lookbacks;
    if (lookback_tests) {
      Remember(ev.recent, ev.recent_next, current, kLookbackWindows);
      BuildLookbacks(ev.recent, ev.recent_next, lookbacks);
    } else {
      std::vector<RecentWindow> one = {current};
      BuildLookbacks(one, 0, lookbacks);
    }
    const double sigma = FlooredSigma(ref_c.Stddev(), ref_c.mean());
    const double u = (window_c.mean() - ref_c.mean()) / sigma;
    const SeriesKind series_kind = series_kinds_[series];
    if (has_cusum_ && series_kind == SeriesKind::kNumeric) {
      if (PerValueCusum()) {
        if (!s.prepared) Prepare(m, series);
        // The next window's values are standardized by this window's spread if it is wider.
        ev.cusum_sd = window_c.Stddev();
        ev.cusum_inv_sd = 1 / std::max(sigma, ev.cusum_sd);
      } else {
        // Fed per window: event-time windows (values may arrive in any order within a window),
        // and references that move (trailing, seasonal).
        const size_t d = static_cast<size_t>(cusum_detector_);
        const Thresholds& t = m.thresholds[series * detectors_.size() + d];
        SetupCusum(s, ref_c, t.warn, t.alert, detectors_[d].allowance);
        const double n = static_cast<double>(window_c.count());
        const double uc = (window_c.mean() - ref_c.mean()) / std::max(sigma, window_c.Stddev());
        const double cap = 4 * ev.cusum_alert_h;
        ev.cusum_up = std::min(cap, std::max(0.0, ev.cusum_up + n * (uc - ev.cusum_k)));
        ev.cusum_down = std::min(cap, std::max(0.0, ev.cusum_down + n * (-uc - ev.cusum_k)));
      }
    }
    const int64_t bins = static_cast<int64_t>(s.edges.bins());
    int64_t ref_total = 0;
    if (has_histogram_ && static_cast<int64_t>(ref_counts->size()) >= bins &&
        static_cast<int64_t>(ev.window_counts.size()) >= bins) {
      for (int64_t b = 0; b < bins; ++b) ref_total += (*ref_counts)[static_cast<size_t>(b)];
    }
    // A baseline restored from a configuration without histograms has no reference shares:
    // the histogram detectors then stay silent rather than compare against nothing. A rate
    // series (0 or 1 per record) is judged on its rate alone.
    const bool histogram = ref_total > 0 && series_kind == SeriesKind::kNumeric;

    EvaluationInput in;
    in.reference = ref_c;
    in.lookbacks = lookbacks;
    if (histogram) {
      in.ref_counts = std::span<const int64_t>(ref_counts->data(), static_cast<size_t>(bins));
      in.win_counts = std::span<const int64_t>(ev.window_counts.data(), static_cast<size_t>(bins));
    }
    in.cusum = std::max(ev.cusum_up, ev.cusum_down);
    in.cusum_up = ev.cusum_up;
    in.cusum_down = ev.cusum_down;
    in.cusum_allowance = ev.cusum_k;
    in.cusum_warn_h = ev.cusum_warn_h;
    in.cusum_alert_h = ev.cusum_alert_h;
    in.cusum_model = ev.cusum_model;
    in.cusum_values_per_evaluation = static_cast<double>(spec_.window_records);
    // A rate series' values are 0 or 1 (never clipped): its counts are the sums.
    std::vector<ErrorLookback> rate_lookbacks;
    const bool rate = IsDataQuality(series_kind);
    if (rate) {
      in.rate_ref_n = ref_c.count();
      in.rate_ref_k = std::llround(ref_c.mean() * static_cast<double>(ref_c.count()));
      if (lookback_tests) {
        BuildErrorLookbacks(ev.recent, ev.recent_next, rate_lookbacks);
      } else {
        std::vector<RecentWindow> one = {current};
        BuildErrorLookbacks(one, 0, rate_lookbacks);
      }
      in.rate_lookbacks = rate_lookbacks;
    }

    Verdict v;
    v.readings = &readings_;
    readings_.clear();
    for (size_t d = 0; d < detectors_.size(); ++d) {
      const DetectorConfig& det = detectors_[d];
      const DetectorDefaults& kind = DefaultsFor(det.kind);
      if (!kind.Watches(series_kind)) continue;
      if (kind.family == DetectorFamily::kShape && !histogram) continue;
      const Thresholds& t = m.thresholds[series * detectors_.size() + d];
      readings_.emplace_back();
      kind.evaluate(in, det, t.warn, t.alert, readings_.back());
      v.detector_of.push_back(d);
    }
    double lead_severity = -1;
    for (size_t i = 0; i < readings_.size(); ++i) {
      const DetectorReading& r = readings_[i];
      const DetectorDefaults& kind = DefaultsFor(detectors_[v.detector_of[i]].kind);
      v.observed = std::max(v.observed, r.level);
      v.window_level = std::max(v.window_level, r.window_level);
      if (r.level >= AlertLevel::kWarn) v.families_now |= 1u << static_cast<int>(kind.family);
      const double sev = Severity(r);
      if (sev > lead_severity) {
        lead_severity = sev;
        v.lead = static_cast<int>(i);
      }
    }
    for (size_t i = 0; i < readings_.size(); ++i) {
      if (DefaultsFor(detectors_[v.detector_of[i]].kind).immediate &&
          readings_[i].level == v.observed && v.observed != AlertLevel::kOk) {
        v.immediate = true;
      }
    }

    // Evidence that the series is back, per family, from this window.
    v.llr.fill(std::numeric_limits<double>::quiet_NaN());
    const Incident& inc = ev.inc;
    const int64_t n_w = window_c.count();
    if (inc.loc_n > 0) {
      v.llr[static_cast<int>(DetectorFamily::kLocation)] =
          LocationBackEvidence(n_w, u, inc.loc_sum / static_cast<double>(inc.loc_n));
    }
    const double kurtosis = std::max(ref_c.Kurtosis(), 1.2);
    const int64_t dof_w = std::max<int64_t>(1, n_w - 1);
    const double floor = FlooredSigma(0, ref_c.mean());
    const double log_ratio = std::log(std::max(window_c.Variance(), floor * floor) /
                                      std::max(ref_c.Variance(), floor * floor));
    if (inc.spread_dof > 0) {
      v.llr[static_cast<int>(DetectorFamily::kSpread)] =
          SpreadBackEvidence(log_ratio, (kurtosis - 1) / static_cast<double>(dof_w),
                             inc.spread_sum / static_cast<double>(inc.spread_dof));
    }
    if (histogram && inc.shape_n > 0 && inc.shape_delta.size() == static_cast<size_t>(bins)) {
      std::vector<double> delta(inc.shape_delta.size());
      for (size_t b = 0; b < delta.size(); ++b) {
        delta[b] = inc.shape_delta[b] / static_cast<double>(inc.shape_n);
      }
      v.llr[static_cast<int>(DetectorFamily::kShape)] =
          ShapeBackEvidence(in.win_counts, in.ref_counts, delta);
    }
    if (rate) {
      // As the error series: the binomial evidence of the window's rate.
      const int64_t flagged = std::llround(window_c.mean() * static_cast<double>(n_w));
      if (ev.inc.error_n > 0) {
        v.llr[static_cast<int>(DetectorFamily::kError)] = ErrorBackEvidence(
            n_w, flagged, static_cast<double>(in.rate_ref_k) / static_cast<double>(in.rate_ref_n),
            static_cast<double>(ev.inc.error_errors) / static_cast<double>(ev.inc.error_n));
      }
      v.error_n = n_w;
      v.error_errors = flagged;
    }
    v.loc_n = n_w;
    v.loc_u = u;
    v.spread_dof = dof_w;
    v.spread_log_ratio = log_ratio;
    v.win_counts = in.win_counts;
    v.ref_counts = in.ref_counts;
    v.histogram = histogram;
    v.now_ms = WindowClockMs(ev.window_max_us);
    v.window_start_record = ev.window_start;
    v.window_end_record = ev.window_start + window.count();
    v.window_start_us = ev.window_min_us;
    v.window_end_us = et_size_us_ > 0 ? ev.window_max_us : ExclusiveEndUs(ev.window_max_us);
    v.window_n = window.count();
    v.window_mean = window.mean();
    v.window_stddev = window.Stddev();
    v.baseline_n = ref->count();
    v.baseline_mean = ref->mean();
    v.baseline_stddev = ref->Stddev();
    Decide(m, series, v);
  }

  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    const size_t k = static_cast<size_t>(spec_.baseline.windows);
    if (ev.trailing.size() < k) {
      ev.trailing.push_back({window, window_c, ev.window_counts});
    } else {
      WindowSummary& slot = ev.trailing[ev.trailing_next];
      slot.moments = window;
      slot.clipped = window_c;
      slot.counts = ev.window_counts;  // same size: copies without allocating
    }
    ev.trailing_next = static_cast<uint32_t>((ev.trailing_next + 1) % k);
  }
  clear_window();
}

void DriftMonitor::Decide(ModelState& m, size_t series, Verdict& v) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  std::vector<DetectorReading>& readings = *v.readings;
  const AlertLevel before = s.alert.state();
  const bool in_incident = before == AlertLevel::kWarn || before == AlertLevel::kAlert;
  bool back = false;
  if (!v.sequential && in_incident) {
    for (int f = 0; f < kDetectorFamilies; ++f) {
      if ((ev.inc.families & (1u << f)) && std::isfinite(v.llr[static_cast<size_t>(f)])) {
        ev.inc.evidence[static_cast<size_t>(f)] =
            std::max(0.0, ev.inc.evidence[static_cast<size_t>(f)] + v.llr[static_cast<size_t>(f)]);
      }
    }
    // A family that starts reading WARN during the incident joins it and must clear too.
    for (int f = 0; f < kDetectorFamilies && ev.inc.families != 0; ++f) {
      if ((v.families_now & (1u << f)) && !(ev.inc.families & (1u << f))) {
        ev.inc.families = static_cast<uint8_t>(ev.inc.families | (1u << f));
        ev.inc.evidence[static_cast<size_t>(f)] = 0;
      }
    }
    if (ev.inc.families == 0) {
      // An incident from state written before calibration knows nothing of its change: it
      // clears when a window reads below WARN on every detector.
      back = v.observed < AlertLevel::kWarn;
    } else {
      back = v.window_level < AlertLevel::kWarn;
      for (int f = 0; f < kDetectorFamilies && back; ++f) {
        if (ev.inc.families & (1u << f)) {
          back = ev.inc.evidence[static_cast<size_t>(f)] >= resolve_log_evidence_;
        }
      }
    }
  }
  const auto changed = s.alert.Step(v.observed, v.immediate, back, v.now_ms, policy_);
  const AlertLevel after = s.alert.state();
  const bool opens = changed && (before == AlertLevel::kOk || before == AlertLevel::kResolved) &&
                     (after == AlertLevel::kWarn || after == AlertLevel::kAlert);
  const bool leaves = changed && (after == AlertLevel::kOk || after == AlertLevel::kResolved);
  const int32_t incident_lead = ev.inc.lead;
  const int lead_family =
      v.lead >= 0 ? static_cast<int>(
                        DefaultsFor(detectors_[v.detector_of[static_cast<size_t>(v.lead)]].kind)
                            .family)
                  : 0;
  if (opens) {
    ev.inc = Incident();
    ev.inc.families =
        v.families_now != 0 ? v.families_now : static_cast<uint8_t>(1u << lead_family);
    ev.inc.lead = static_cast<int32_t>(v.detector_of[static_cast<size_t>(v.lead)]);
  } else if (changed && after == AlertLevel::kAlert && v.lead >= 0) {
    ev.inc.lead = static_cast<int32_t>(v.detector_of[static_cast<size_t>(v.lead)]);
    ev.inc.families = static_cast<uint8_t>(ev.inc.families | v.families_now);
  }
  if (!v.sequential && (after == AlertLevel::kWarn || after == AlertLevel::kAlert)) {
    AddToIncident(ev.inc, v.loc_n, v.loc_u, v.spread_dof, v.spread_log_ratio, v.win_counts,
                  v.ref_counts, v.error_n, v.error_errors);
  }
  if (leaves) {
    // The evidence the sequential and look-back tests held was the incident's: they start
    // afresh with the series back at its baseline.
    ev.inc = Incident();
    ev.cusum_up = 0;
    ev.cusum_down = 0;
    ev.recent.clear();
    ev.recent_next = 0;
  }
  // One evaluation per closed window (the CUSUM's crossings between window ends are alert
  // events; the window they fall in is evaluated when it closes).
  if (collect_evaluations_ && !v.sequential) RecordEvaluation(m, series, true, before, &v);
  if (!changed || readings.empty()) return;

  // The detector the event names: the one furthest past its level, or for a clearing event the
  // one that raised the incident (its current reading).
  size_t lead = v.lead >= 0 ? static_cast<size_t>(v.lead) : 0;
  if (leaves && incident_lead >= 0) {
    for (size_t i = 0; i < readings.size(); ++i) {
      if (v.detector_of[i] == static_cast<size_t>(incident_lead)) lead = i;
    }
  }
  const DetectorReading& r = readings[lead];
  AlertEvent e;
  e.level = *changed;
  e.previous_level = before;
  e.model = m.name;
  e.series = series < series_names_.size() ? series_names_[series] : std::string(kErrorSeries);
  e.detector = std::string(r.detector);
  e.statistic = r.statistic;
  e.threshold = *changed == AlertLevel::kAlert ? r.alert_threshold : r.warn_threshold;
  e.score = r.score;
  e.window_start_record = v.window_start_record;
  e.window_end_record = v.window_end_record;
  e.window_start_us = v.window_start_us;
  e.window_end_us = v.window_end_us;
  e.baseline_kind = series < series_names_.size()
                        ? spec_.baseline.kind
                        : (spec_.baseline.kind == BaselineKind::kFile ? BaselineKind::kFile
                                                                      : BaselineKind::kWarmup);
  e.baseline_n = v.baseline_n;
  e.baseline_mean = v.baseline_mean;
  e.baseline_stddev = v.baseline_stddev;
  e.window_n = v.window_n;
  e.window_mean = v.window_mean;
  e.window_stddev = v.window_stddev;
  e.detectors = readings;
  e.series_kind = series < series_kinds_.size() ? series_kinds_[series] : SeriesKind::kNumeric;
  e.top_categories = std::move(v.top_categories);
  e.new_categories = std::move(v.new_categories);
  if (v.histogram && !v.win_counts.empty()) {
    const size_t bins = v.win_counts.size();
    if (ref_shares_.size() < bins) {
      ref_shares_.resize(bins);
      cur_shares_.resize(bins);
      terms_.resize(bins);
    }
    SharesOf(v.ref_counts, std::span<double>(ref_shares_.data(), bins));
    SharesOf(v.win_counts, std::span<double>(cur_shares_.data(), bins));
    Psi(std::span<const double>(ref_shares_.data(), bins),
        std::span<const double>(cur_shares_.data(), bins), std::span<double>(terms_.data(), bins));
    std::vector<int> order(bins);
    for (size_t b = 0; b < bins; ++b) order[b] = static_cast<int>(b);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return std::abs(terms_[static_cast<size_t>(a)]) > std::abs(terms_[static_cast<size_t>(b)]);
    });
    const SeriesState& st = m.series[series];
    for (size_t i = 0; i < order.size() && i < static_cast<size_t>(kTopBins); ++i) {
      const size_t b = static_cast<size_t>(order[i]);
      e.top_bins.push_back({order[i], st.edges.Lower(b), st.edges.Upper(b), ref_shares_[b],
                            cur_shares_[b], terms_[b]});
    }
  }
  Transition(m, series, before, *changed, std::move(e));
}

void DriftMonitor::ObserveLabel(uint32_t model, double prediction, double label,
                                int64_t event_time_us) {
  if (!has_error_rate_) return;
  if (!std::isfinite(prediction) || !std::isfinite(label)) {
    ++skipped_values_;
    return;
  }
  if (model >= models_.size() || !models_[model]) {
    ++skipped_labels_;
    return;
  }
  ModelState& m = *models_[model];
  const size_t series = series_names_.size();
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  MarkHot(m, series);
  const double threshold = error_threshold_;
  if (!s.frozen) {
    ++s.seen;
    ev.err_baseline.Add(prediction, label, threshold);
    if (ev.err_baseline.count() >= spec_.baseline.records) {
      s.frozen = true;
      s.cold_dirty = true;  // the baseline moves to its own key
    }
    return;
  }
  if (ev.err_window.count() == 0) {
    ev.window_start = s.seen;
    ev.window_min_us = INT64_MIN;
    ev.window_max_us = INT64_MIN;
  }
  ++s.seen;
  ev.err_window.Add(prediction, label, threshold);
  if (ValidTime(event_time_us)) {
    if (!ValidTime(ev.window_min_us) || event_time_us < ev.window_min_us) {
      ev.window_min_us = event_time_us;
    }
    if (!ValidTime(ev.window_max_us) || event_time_us > ev.window_max_us) {
      ev.window_max_us = event_time_us;
    }
  }
  if (ev.err_window.count() >= spec_.window_records) CloseErrorWindow(m);
}

void DriftMonitor::CloseErrorWindow(ModelState& m) {
  const size_t series = series_names_.size();
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  MarkDirty(m, series);
  ++windows_evaluated_;
  size_t d = detectors_.size();
  for (size_t i = 0; i < detectors_.size(); ++i) {
    if (detectors_[i].kind == DetectorKind::kErrorRate) {
      d = i;  // one error_rate detector drives the error series
      break;
    }
  }
  const bool ready = d < detectors_.size() && ev.err_window.count() >= spec_.min_samples &&
                     ev.err_baseline.count() >= spec_.min_samples;
  if (!ready && d < detectors_.size() && collect_evaluations_) {
    RecordEvaluation(m, series, false, s.alert.state(), nullptr);
  }
  if (ready) {
    Remember(ev.recent, ev.recent_next,
             {ev.err_window.count(), static_cast<double>(ev.err_window.errors), 0},
             kLookbackWindows);
    std::vector<ErrorLookback> lookbacks;
    BuildErrorLookbacks(ev.recent, ev.recent_next, lookbacks);
    EvaluationInput in;
    in.error_reference = ev.err_baseline;
    in.error_window = ev.err_window;
    in.error_lookbacks = lookbacks;
    in.error_threshold = detectors_[d].threshold;
    const Thresholds& t = m.thresholds[series * detectors_.size() + d];
    readings_.resize(1);
    DefaultsFor(DetectorKind::kErrorRate).evaluate(in, detectors_[d], t.warn, t.alert, readings_[0]);
    Verdict v;
    v.readings = &readings_;
    v.detector_of = {d};
    v.observed = readings_[0].level;
    v.window_level = readings_[0].window_level;
    v.lead = 0;
    if (v.observed >= AlertLevel::kWarn) {
      v.families_now = 1u << static_cast<int>(DetectorFamily::kError);
    }
    v.llr.fill(std::numeric_limits<double>::quiet_NaN());
    if (ev.inc.error_n > 0) {
      v.llr[static_cast<int>(DetectorFamily::kError)] = ErrorBackEvidence(
          ev.err_window.count(), ev.err_window.errors, ev.err_baseline.ErrorRate(),
          static_cast<double>(ev.inc.error_errors) / static_cast<double>(ev.inc.error_n));
    }
    v.error_n = ev.err_window.count();
    v.error_errors = ev.err_window.errors;
    v.now_ms = WindowClockMs(ev.window_max_us);
    v.window_start_record = ev.window_start;
    v.window_end_record = ev.window_start + ev.err_window.count();
    v.window_start_us = ev.window_min_us;
    v.window_end_us = ExclusiveEndUs(ev.window_max_us);
    v.window_n = ev.err_window.count();
    v.window_mean = ev.err_window.abs_error.mean();
    v.window_stddev = ev.err_window.abs_error.Stddev();
    v.baseline_n = ev.err_baseline.count();
    v.baseline_mean = ev.err_baseline.abs_error.mean();
    v.baseline_stddev = ev.err_baseline.abs_error.Stddev();
    Decide(m, series, v);
  }
  ev.err_window.Clear();
}

void DriftMonitor::Transition(ModelState& m, size_t series, AlertLevel previous, AlertLevel level,
                              AlertEvent event) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  const uint64_t id =
      AlertId(event.model, event.series, event.detector, level, event.window_start_record);
  const bool opens = (previous == AlertLevel::kOk || previous == AlertLevel::kResolved) &&
                     (level == AlertLevel::kWarn || level == AlertLevel::kAlert);
  if (opens || ev.incident == 0) ev.incident = id;
  event.alert_id = HexId(id);
  event.incident_id = HexId(ev.incident);
  const int64_t now_ms = WindowClockMs(event.window_end_us);
  const bool rollup = level == AlertLevel::kAlert || previous == AlertLevel::kAlert;
  events_.push_back(std::move(event));
  event_records_.push_back(record_);
  if (rollup) {
    const AlertEvent trigger = events_.back();  // UpdateRollup appends to events_
    UpdateRollup(m, now_ms, trigger);
  }
}

void DriftMonitor::UpdateRollup(ModelState& m, int64_t now_ms, const AlertEvent& trigger) {
  if (spec_.model_alert_series <= 0) return;
  std::vector<std::string> alerting;
  for (size_t i = 0; i < m.series.size(); ++i) {
    if (m.series[i].alert.state() == AlertLevel::kAlert) {
      alerting.push_back(i < series_names_.size() ? series_names_[i] : std::string(kErrorSeries));
    }
  }
  const int64_t count = static_cast<int64_t>(alerting.size());
  const AlertLevel observed =
      count >= spec_.model_alert_series ? AlertLevel::kAlert : AlertLevel::kOk;
  const AlertLevel before = m.rollup.state();
  const auto changed =
      m.rollup.Step(observed, true, observed == AlertLevel::kOk, now_ms, policy_);
  m.rollup_dirty = true;
  if (!changed) return;
  AlertEvent e;
  e.level = *changed;
  e.previous_level = before;
  e.model = m.name;
  e.series = std::string(kRollupSeries);
  e.detector = std::string(kRollupDetector);
  e.statistic = static_cast<double>(count);
  e.threshold = static_cast<double>(spec_.model_alert_series);
  // The window and times of the series whose change raised or cleared the roll-up.
  e.trigger_series = trigger.series;
  e.window_start_record = trigger.window_start_record;
  e.window_end_record = trigger.window_end_record;
  e.window_start_us = trigger.window_start_us;
  e.window_end_us = trigger.window_end_us;
  e.window_n = trigger.window_n;
  e.window_mean = trigger.window_mean;
  e.window_stddev = trigger.window_stddev;
  e.baseline_kind = spec_.baseline.kind;
  e.alerting_series = std::move(alerting);
  const uint64_t id =
      AlertId(e.model, e.series, e.detector, *changed, trigger.window_start_record);
  if (*changed == AlertLevel::kAlert || m.rollup_incident == 0) m.rollup_incident = id;
  e.alert_id = HexId(id);
  e.incident_id = HexId(m.rollup_incident);
  events_.push_back(std::move(e));
  event_records_.push_back(record_);
}

namespace {

// `items` reordered by `records` (each item's record; stable: items of one record keep their
// order), and `records` sorted along.
template <typename T>
void SortByRecord(std::vector<T>& items, std::vector<uint64_t>& records) {
  if (std::is_sorted(records.begin(), records.end())) return;
  std::vector<uint32_t> order(items.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return records[a] < records[b]; });
  std::vector<T> sorted;
  sorted.reserve(items.size());
  for (uint32_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
  std::sort(records.begin(), records.end());
}

}  // namespace

void DriftMonitor::InRecordOrder() {
  SortByRecord(events_, event_records_);
  SortByRecord(evaluations_, evaluation_records_);
}

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out) {
  last_now_ms_ = now_ms;
  // What the batch's records raised, in record order; what closing event-time windows raises
  // comes after.
  InRecordOrder();
  record_ = UINT64_MAX;
  if (et_size_us_ > 0) CloseEventWindows();
  for (AlertEvent& e : events_) {
    e.batch_id = batch_id;
    out.push_back(std::move(e));
  }
  events_.clear();
  event_records_.clear();
  // Evaluations kept for the other overload are in order: what comes next goes after them.
  std::fill(evaluation_records_.begin(), evaluation_records_.end(), 0);
  record_ = 0;
}

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out,
                            std::vector<Evaluation>* evaluations) {
  Evaluate(batch_id, now_ms, out);
  for (Evaluation& e : evaluations_) e.batch_id = batch_id;
  if (evaluations != nullptr && evaluations->empty()) {
    // Handed over whole: a batch may close a window of every series (130,000 at 10,000
    // models), and the monitor need not keep room for as many until the next one.
    evaluations->swap(evaluations_);
  } else if (evaluations != nullptr) {
    evaluations->reserve(evaluations->size() + evaluations_.size());
    for (Evaluation& e : evaluations_) evaluations->push_back(std::move(e));
  }
  std::vector<Evaluation>().swap(evaluations_);
  evaluation_records_.clear();
}

void DriftMonitor::RecordEvaluation(const ModelState& m, size_t series, bool evaluated,
                                    AlertLevel previous, const Verdict* v) {
  const SeriesState& s = m.series[series];
  const bool is_error = series == series_names_.size();
  Evaluation e;
  e.model = m.name;
  e.series = is_error ? std::string(kErrorSeries) : series_names_[series];
  e.series_kind = is_error ? SeriesKind::kNumeric : series_kinds_[series];
  e.evaluated = evaluated;
  e.previous_level = previous;
  e.level = s.alert.state();
  e.baseline_kind = is_error ? (spec_.baseline.kind == BaselineKind::kFile ? BaselineKind::kFile
                                                                          : BaselineKind::kWarmup)
                             : spec_.baseline.kind;
  if (v != nullptr) {
    e.window_start_record = v->window_start_record;
    e.window_end_record = v->window_end_record;
    e.window_start_us = v->window_start_us;
    e.window_end_us = v->window_end_us;
    e.window_n = v->window_n;
    e.window_mean = v->window_mean;
    e.window_stddev = v->window_stddev;
    e.baseline_n = v->baseline_n;
    e.baseline_mean = v->baseline_mean;
    e.baseline_stddev = v->baseline_stddev;
    if (v->readings != nullptr) e.detectors = *v->readings;
  } else if (is_error) {
    e.window_start_record = s.eval().window_start;
    e.window_n = s.eval().err_window.count();
    e.window_end_record = e.window_start_record + e.window_n;
    e.window_start_us = s.eval().window_min_us;
    e.window_end_us = ExclusiveEndUs(s.eval().window_max_us);
    e.window_mean = s.eval().err_window.abs_error.mean();
    e.window_stddev = s.eval().err_window.abs_error.Stddev();
    e.baseline_n = s.eval().err_baseline.count();
    e.baseline_mean = s.eval().err_baseline.abs_error.mean();
    e.baseline_stddev = s.eval().err_baseline.abs_error.Stddev();
  } else {
    const HigherMoments raw = s.eval().window_raw.ToMoments();
    e.window_start_record = s.eval().window_start;
    e.window_n = raw.count();
    e.window_end_record = e.window_start_record + e.window_n;
    e.window_start_us = s.eval().window_min_us;
    e.window_end_us =
        et_size_us_ > 0 ? s.eval().window_max_us : ExclusiveEndUs(s.eval().window_max_us);
    e.window_mean = raw.mean();
    e.window_stddev = raw.Stddev();
    e.baseline_n = s.baseline.count();
    e.baseline_mean = s.baseline.mean();
    e.baseline_stddev = s.baseline.Stddev();
  }
  evaluations_.push_back(std::move(e));
  evaluation_records_.push_back(record_);
}

// ---- Categorical series ------------------------------------------------------------------------
// A string series counts its values per category cell (engine/drift/categories.h): the
// baseline's first part fixes the tracked categories and the seen set, then the rest of the
// baseline and every window count into the cells. Windows, event-time windows, trailing and
// seasonal baselines, incidents and events work as for numeric series; what differs is what a
// value adds to and what the detectors read.

void DriftMonitor::ObserveCategory(uint32_t model, const std::string& model_name, size_t series,
                                   std::string_view category, int64_t event_time_us,
                                   int64_t late_before_us) {
  if (series >= series_names_.size() || series_kinds_[series] != SeriesKind::kCategorical) {
    return;  // caller bug; nothing sensible to record
  }
  ModelState& m = ModelFor(model, model_name);
  if (ValidTime(event_time_us) && event_time_us > max_event_us_) max_event_us_ = event_time_us;
  AddCategory(m, series, CategoryHash(category), category, event_time_us, late_before_us);
}

void DriftMonitor::ObserveFlag(uint32_t model, const std::string& model_name, size_t series,
                               bool flagged, int64_t event_time_us, int64_t late_before_us) {
  if (series >= series_names_.size() || !IsDataQuality(series_kinds_[series])) return;
  // A rate series is a series of 0s and 1s: its baseline's and windows' means are the rates.
  ModelState& m = ModelFor(model, model_name);
  SeriesState& s = m.series[series];
  if (ValidTime(event_time_us) && event_time_us > max_event_us_) max_event_us_ = event_time_us;
  const double value = flagged ? 1.0 : 0.0;
  if (et_size_us_ == 0 && s.frozen && s.eval().window_raw.count() > 0) {
    // Within a record window, what AddValue would do for a value that is never clipped and
    // has no bins (a rate series' histogram stays empty): a record adds a few instructions to
    // the model's cost, not a numeric value's.
    MarkDirty(m, series);
    SeriesState::Evaluation& ev = s.mut_eval();
    ++s.seen;
    ev.window_raw.Add(value);
    ev.window_sums.Add(value);
    if (ValidTime(event_time_us)) {
      if (!ValidTime(ev.window_min_us) || event_time_us < ev.window_min_us) {
        ev.window_min_us = event_time_us;
      }
      if (!ValidTime(ev.window_max_us) || event_time_us > ev.window_max_us) {
        ev.window_max_us = event_time_us;
      }
    }
    if (ev.window_raw.count() >= spec_.window_records) CloseWindow(m, series);
    return;
  }
  SkipEdges(s);
  AddValue(m, series, value, event_time_us, late_before_us);
}

void DriftMonitor::SkipEdges(SeriesState& s) {
  // 0s and 1s have nothing to learn bins or fences from (the fences would never clip them), so
  // a rate series keeps no warmup values: its baseline counts from the first value on.
  if (!s.edges_ready && !s.frozen) FixEdges(s);
}

int64_t DriftMonitor::FirstPart() const {
  const bool by_duration =
      spec_.baseline.kind == BaselineKind::kWarmup && spec_.baseline.duration_ms > 0;
  // Half the baseline, so that the other half measures the share of values whose category the
  // first part did not see: the unseen share's own reference.
  if (by_duration) return CategoricalState::kMaxFirstPart;
  return std::clamp<int64_t>(spec_.baseline.records / 2, 1, CategoricalState::kMaxFirstPart);
}

CategoricalState& DriftMonitor::CategoricalOf(SeriesState& s) {
  if (!s.cat) s.cat = std::make_unique<CategoricalState>();
  return *s.cat;
}

void DriftMonitor::FreezeCategorical(SeriesState& s) {
  CategoricalState& c = CategoricalOf(s);
  c.Freeze(max_categories_);
  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    c.trailing.clear();
    c.trailing.push_back(c.ref);
    c.trailing_next = 1 % static_cast<uint32_t>(spec_.baseline.windows);
  }
  s.frozen = true;
}

void DriftMonitor::AddCategory(ModelState& m, size_t series, uint64_t hash,
                               std::string_view category, int64_t event_time_us,
                               int64_t late_before_us) {
  SeriesState& s = m.series[series];
  CategoricalState& c = CategoricalOf(s);
  MarkDirty(m, series);
  if (et_size_us_ > 0) {
    if (!ValidTime(event_time_us)) {
      ++values_without_time_;
      return;
    }
    int64_t start = event_time_us / et_size_us_ * et_size_us_;
    if (start > event_time_us) start -= et_size_us_;
    const int64_t closed_before = std::max(late_before_us, watermark_us_);
    if (ValidTime(closed_before) && start + et_size_us_ <= closed_before) {
      ++late_values_;
      return;
    }
    CategoryWindow* window = nullptr;
    for (CategoryWindow& w : c.open) {
      if (w.start_us == start) window = &w;
    }
    if (window == nullptr) {
      CategoryWindow w;
      w.start_us = start;
      if (s.frozen) w.cells.assign(c.set.cells(), 0);
      auto at = std::find_if(c.open.begin(), c.open.end(),
                             [&](const CategoryWindow& o) { return o.start_us > start; });
      window = &*c.open.insert(at, std::move(w));
    }
    if (!s.frozen) {
      window->sample.Add(hash, category);
    } else {
      const size_t cell = c.set.CellOf(hash);
      ++window->cells[cell];
      if (cell == c.set.unseen()) window->unseen.Add(hash, category);
    }
    if (!ValidTime(window->min_us) || event_time_us < window->min_us) window->min_us = event_time_us;
    if (!ValidTime(window->max_us) || event_time_us > window->max_us) window->max_us = event_time_us;
    return;
  }
  if (!s.frozen) {
    bool freeze_now = false;
    const bool by_duration =
        spec_.baseline.kind == BaselineKind::kWarmup && spec_.baseline.duration_ms > 0;
    if (by_duration) {
      if (ValidTime(event_time_us)) {
        if (!ValidTime(s.first_event_us)) s.first_event_us = event_time_us;
        freeze_now = event_time_us >= s.first_event_us + spec_.baseline.duration_ms * 1000 &&
                     c.baseline_n() >= std::max<int64_t>(1, spec_.min_samples);
      } else {
        freeze_now = c.baseline_n() >= spec_.baseline.records;
      }
    }
    if (freeze_now) {
      FreezeCategorical(s);  // this value is the first of the first window
    } else {
      ++s.seen;
      c.AddToBaseline(hash, &category, 1, FirstPart(), max_categories_);
      if (!by_duration && c.baseline_n() >= spec_.baseline.records) FreezeCategorical(s);
      return;
    }
  }
  SeriesState::Evaluation& ev = s.mut_eval();
  if (c.window_n == 0) {
    ev.window_start = s.seen;
    ev.window_min_us = INT64_MIN;
    ev.window_max_us = INT64_MIN;
  }
  ++s.seen;
  ++c.window_n;
  const size_t cell = c.set.CellOf(hash);
  ++c.window[cell];
  if (cell == c.set.unseen()) c.window_unseen.Add(hash, category);
  if (ValidTime(event_time_us)) {
    if (!ValidTime(ev.window_min_us) || event_time_us < ev.window_min_us) {
      ev.window_min_us = event_time_us;
    }
    if (!ValidTime(ev.window_max_us) || event_time_us > ev.window_max_us) {
      ev.window_max_us = event_time_us;
    }
  }
  if (c.window_n >= spec_.window_records) CloseCategoryWindow(m, series, c.window, c.window_unseen);
}

void DriftMonitor::CloseCategoryEventWindow(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  CategoricalState& c = *s.cat;
  CategoryWindow& w = c.open.front();
  MarkDirty(m, series);
  const int64_t first_index = s.seen;
  if (!s.frozen) {
    // A warmup window: its categories join the baseline in hash order (fixed by the categories
    // alone), and the baseline freezes after the window that makes it large (or long) enough.
    if (!ValidTime(s.first_event_us)) s.first_event_us = w.start_us;
    for (const CategoryCounts::Entry* e : w.sample.InHashOrder()) {
      const std::string_view name = e->name;
      c.AddToBaseline(e->hash, &name, e->count, FirstPart(), max_categories_);
    }
    if (w.sample.dropped() > 0) {
      c.AddToBaseline(0, nullptr, w.sample.dropped(), FirstPart(), max_categories_);
    }
    s.seen += w.sample.total();
    const bool by_duration =
        spec_.baseline.kind == BaselineKind::kWarmup && spec_.baseline.duration_ms > 0;
    const bool enough =
        by_duration ? w.start_us + et_size_us_ - s.first_event_us >=
                              spec_.baseline.duration_ms * 1000 &&
                          c.baseline_n() >= std::max<int64_t>(1, spec_.min_samples)
                    : c.baseline_n() >= spec_.baseline.records;
    if (!enough) return;
    FreezeCategorical(s);
    // Windows still open were sampled: their cells, now that the categories are known.
    for (size_t i = 1; i < c.open.size(); ++i) {
      CategoryWindow& later = c.open[i];
      later.cells.assign(c.set.cells(), 0);
      for (const CategoryCounts::Entry* e : later.sample.InHashOrder()) {
        const size_t cell = c.set.CellOf(e->hash);
        later.cells[cell] += e->count;
        if (cell == c.set.unseen()) later.unseen.Add(e->hash, e->name, e->count);
      }
      later.cells[c.set.other()] += later.sample.dropped();
      later.sample.Clear();
    }
    return;
  }
  int64_t n = 0;
  for (int64_t count : w.cells) n += count;
  s.seen += n;
  ev.window_start = first_index;
  ev.window_min_us = w.start_us;
  ev.window_max_us = w.start_us + et_size_us_;
  c.window_n = n;
  CloseCategoryWindow(m, series, w.cells, w.unseen);
}

void DriftMonitor::CloseCategoryWindow(ModelState& m, size_t series, std::vector<int64_t>& cells,
                                       CategoryCounts& unseen) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  CategoricalState& c = *s.cat;
  ++windows_evaluated_;
  const int64_t n = c.window_n;
  auto clear_window = [&] {
    std::fill(cells.begin(), cells.end(), 0);
    unseen.Clear();
    c.window_n = 0;
  };
  const size_t width = c.set.cells();
  if (cells.size() != width) cells.resize(width, 0);

  // Seasonal warm-up: the first `cycles` periods of windows become the phases' baselines.
  const bool seasonal = spec_.baseline.kind == BaselineKind::kSeasonal && et_size_us_ > 0;
  size_t phase = 0;
  if (seasonal) {
    const int64_t phases = std::max<int64_t>(1, spec_.baseline.period_ms * 1000 / et_size_us_);
    if (c.phases.size() != static_cast<size_t>(phases)) {
      c.phases.assign(static_cast<size_t>(phases), std::vector<int64_t>(width, 0));
    }
    if (!ValidTime(ev.season_end_us)) {
      ev.season_end_us = ev.window_min_us + spec_.baseline.cycles * spec_.baseline.period_ms * 1000;
    }
    phase = PhaseOf(ev.window_min_us);
    if (ev.window_min_us < ev.season_end_us) {
      std::vector<int64_t>& p = c.phases[phase];
      p.resize(width, 0);
      for (size_t i = 0; i < width; ++i) p[i] += cells[i];
      clear_window();
      return;
    }
  }

  // The reference: the frozen baseline's cells, the merge of the previous K windows, or the
  // phase's.
  const std::vector<int64_t>* ref = &c.ref;
  std::vector<int64_t> merged;
  bool ready = true;
  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    ready = c.trailing.size() >= static_cast<size_t>(spec_.baseline.windows);
    if (ready) {
      merged.assign(width, 0);
      for (const auto& t : c.trailing) {
        for (size_t i = 0; i < width && i < t.size(); ++i) merged[i] += t[i];
      }
      ref = &merged;
    }
  } else if (seasonal) {
    ref = &c.phases[phase];
  }
  int64_t ref_n = 0;
  for (int64_t count : *ref) ref_n += count;
  ready = ready && n >= spec_.min_samples && ref_n >= spec_.min_samples && ref->size() == width;

  Verdict v;
  v.now_ms = WindowClockMs(ev.window_max_us);
  v.window_start_record = ev.window_start;
  v.window_end_record = ev.window_start + n;
  v.window_start_us = ev.window_min_us;
  v.window_end_us = et_size_us_ > 0 ? ev.window_max_us : ExclusiveEndUs(ev.window_max_us);
  v.window_n = n;
  v.baseline_n = ref_n;
  if (!ready) {
    if (collect_evaluations_) RecordEvaluation(m, series, false, s.alert.state(), &v);
  } else {
    // The tests' cells: tracked categories large enough for the chi-square, the rest together.
    MergeCategoryCells(cells, *ref, c.set.other(), kMinExpectedCount, cat_win_, cat_ref_,
                       cat_cell_of_);
    // The incident's cells: every tracked category, and the rest together (a fixed layout
    // across windows).
    const size_t tracked = c.set.tracked();
    cat_evid_win_.assign(cells.begin(), cells.begin() + static_cast<std::ptrdiff_t>(tracked));
    cat_evid_ref_.assign(ref->begin(), ref->begin() + static_cast<std::ptrdiff_t>(tracked));
    cat_evid_win_.push_back(cells[c.set.other()] + cells[c.set.unseen()]);
    cat_evid_ref_.push_back((*ref)[c.set.other()] + (*ref)[c.set.unseen()]);

    EvaluationInput in;
    in.win_counts = cat_win_;
    in.ref_counts = cat_ref_;
    in.unseen = cells[c.set.unseen()];
    in.unseen_n = n;
    in.ref_unseen = c.ref_unseen;
    in.ref_unseen_n = c.ref_unseen_n;
    v.readings = &readings_;
    readings_.clear();
    for (size_t d = 0; d < detectors_.size(); ++d) {
      const DetectorConfig& det = detectors_[d];
      const DetectorDefaults& kind = DefaultsFor(det.kind);
      if (!kind.Watches(SeriesKind::kCategorical)) continue;
      const Thresholds& t = m.thresholds[series * detectors_.size() + d];
      readings_.emplace_back();
      kind.evaluate(in, det, t.warn, t.alert, readings_.back());
      v.detector_of.push_back(d);
    }
    double lead_severity = -1;
    for (size_t i = 0; i < readings_.size(); ++i) {
      const DetectorReading& r = readings_[i];
      v.observed = std::max(v.observed, r.level);
      v.window_level = std::max(v.window_level, r.window_level);
      if (r.level >= AlertLevel::kWarn) {
        v.families_now |= 1u << static_cast<int>(DefaultsFor(detectors_[v.detector_of[i]].kind).family);
      }
      const double sev = Severity(r);
      if (sev > lead_severity) {
        lead_severity = sev;
        v.lead = static_cast<int>(i);
      }
    }
    v.llr.fill(std::numeric_limits<double>::quiet_NaN());
    const Incident& inc = ev.inc;
    if (inc.shape_n > 0 && inc.shape_delta.size() == cat_evid_win_.size()) {
      std::vector<double> delta(inc.shape_delta.size());
      for (size_t b = 0; b < delta.size(); ++b) {
        delta[b] = inc.shape_delta[b] / static_cast<double>(inc.shape_n);
      }
      v.llr[static_cast<int>(DetectorFamily::kShape)] =
          ShapeBackEvidence(cat_evid_win_, cat_evid_ref_, delta);
    }
    v.win_counts = cat_evid_win_;
    v.ref_counts = cat_evid_ref_;
    // The categories that moved most (the rest counted as one), by |PSI term|.
    const size_t k = cat_evid_win_.size();
    std::vector<double> r(k), w(k), terms(k);
    SharesOf(cat_evid_ref_, r);
    SharesOf(cat_evid_win_, w);
    Psi(r, w, terms);
    std::vector<size_t> order(k);
    for (size_t i = 0; i < k; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::abs(terms[a]) > std::abs(terms[b]);
    });
    for (size_t i = 0; i < order.size() && i < static_cast<size_t>(kTopBins); ++i) {
      const size_t cell = order[i];
      v.top_categories.push_back({cell < tracked ? c.set.name(cell) : std::string(kOtherCategory),
                                  r[cell], w[cell], terms[cell]});
    }
    for (const CategoryCounts::Entry* e : unseen.Top(static_cast<size_t>(kTopBins))) {
      v.new_categories.push_back(
          {e->name, static_cast<double>(e->count) / static_cast<double>(std::max<int64_t>(1, n))});
    }
    Decide(m, series, v);
  }

  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    const size_t keep = static_cast<size_t>(spec_.baseline.windows);
    if (c.trailing.size() < keep) {
      c.trailing.push_back(cells);
    } else {
      c.trailing[c.trailing_next] = cells;
    }
    c.trailing_next = static_cast<uint32_t>((c.trailing_next + 1) % keep);
  }
  clear_window();
}

void DriftMonitor::ObserveReferenceCategory(uint32_t model, const std::string& model_name,
                                            size_t series, std::string_view category) {
  if (series >= series_names_.size() || series_kinds_[series] != SeriesKind::kCategorical) return;
  ModelState& m = ModelFor(model, model_name);
  SeriesState& s = m.series[series];
  if (s.frozen) return;  // statistics given already, or restored
  MarkDirty(m, series);
  CategoricalOf(s).AddToBaseline(CategoryHash(category), &category, 1, FirstPart(),
                                 max_categories_);
}

void DriftMonitor::ObserveReferenceFlag(uint32_t model, const std::string& model_name,
                                        size_t series, bool flagged) {
  if (series >= series_names_.size() || !IsDataQuality(series_kinds_[series])) return;
  SkipEdges(ModelFor(model, model_name).series[series]);
  ObserveReference(model, model_name, series, flagged ? 1.0 : 0.0);
}

Status DriftMonitor::SetCategoricalReference(uint32_t model, const std::string& model_name,
                                             size_t series,
                                             const CategoricalReference& reference) {
  if (series >= series_names_.size() || series_kinds_[series] != SeriesKind::kCategorical) {
    return MakeError(ErrorCode::kInvalidArgument, "drift: no categorical series {}", series);
  }
  const std::string& name = series_names_[series];
  auto bad = [&](std::string_view why) {
    return MakeError(ErrorCode::kConfig, "reference of model '{}' series '{}': {}", model_name,
                     name, why);
  };
  int64_t n = reference.other;
  if (reference.other < 0) return bad("'other' must not be negative");
  std::vector<std::pair<std::string, int64_t>> categories = reference.categories;
  std::set<std::string, std::less<>> names;
  for (const auto& [category, count] : categories) {
    if (count < 0) return bad(fmt::format("the count of category '{}' is negative", category));
    if (!names.insert(std::string(CategoryName(category))).second) {
      return bad(fmt::format("category '{}' is listed twice", category));
    }
    n += count;
  }
  if (n < std::max<int64_t>(1, spec_.min_samples)) {
    return bad(fmt::format("n = {} is below minSamples ({}): it could never be compared with", n,
                           spec_.min_samples));
  }
  if (reference.unseen < 0 || reference.unseen_n < 0 || reference.unseen > reference.unseen_n) {
    return bad("'unseen' must be a count of at most its 'n'");
  }
  // The most frequent are tracked (as a warmup's first part would choose), the others count with
  // the rest; every listed category is seen.
  std::stable_sort(categories.begin(), categories.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<std::string> tracked;
  std::vector<uint32_t> seen = reference.seen;
  int64_t other = reference.other;
  for (const auto& [category, count] : categories) {
    if (tracked.size() < max_categories_ && count > 0) {
      tracked.push_back(category);
    } else {
      seen.push_back(CategorySet::Fingerprint(CategoryHash(category)));
      other += count;
    }
  }
  ModelState& m = ModelFor(model, model_name);
  SeriesState& s = m.series[series];
  MarkDirty(m, series);
  CategoricalState fresh;
  fresh.set = CategorySet::FromParts(tracked, std::move(seen));
  fresh.ref.assign(fresh.set.cells(), 0);
  for (size_t i = 0; i < fresh.set.tracked(); ++i) fresh.ref[i] = categories[i].second;
  fresh.ref[fresh.set.other()] = other;
  fresh.baseline_values = n;
  fresh.set_ready = true;
  fresh.held_out = reference.unseen_n;
  fresh.first_total = n;
  if (reference.unseen_n > 0) {
    fresh.ref_unseen = reference.unseen;
    fresh.ref_unseen_n = reference.unseen_n;
  } else {
    fresh.ref_unseen = other;
    fresh.ref_unseen_n = n;
  }
  fresh.window.assign(fresh.set.cells(), 0);
  s.cat = std::make_unique<CategoricalState>(std::move(fresh));
  s.frozen = true;
  return Ok();
}

namespace {

void EncodeCategoricalSeries(const DriftMonitor::SeriesState& s, std::string& out);
void EncodeCategoricalBase(const DriftMonitor::SeriesState& s, std::string& out);

constexpr std::string_view kBaseSuffix = "/base";
constexpr std::string_view kWarmupSuffix = "/w";
// "<model>/%w<seq>": a warmup segment (escaped series names never start with a bare '%').
constexpr std::string_view kSegmentTag = "%w";
// The series table: every series name the model records and segments refer to by position.
// Escaped model names never start with a bare '%', so no model's key is this one.
constexpr std::string_view kTableKey = "drift/%series";
constexpr uint8_t kTableEncodingVersion = 1;
constexpr uint8_t kModelEncodingVersion = 2;  // version 1 (kRollupEncodingVersion): roll-up only
constexpr uint8_t kSegmentEncodingVersion = 1;
constexpr uint8_t kLastOneRecordVersion = 5;  // versions 1 to 5 hold a whole series in its record
// A model's warmup segments are rewritten as one when they hold more values of series that no
// longer keep them than of series that do (and at least this many): what a segment rewrite
// costs is then paid for by the dead values it drops, so warmup values are written at most
// about twice.
constexpr int64_t kMinSegmentValues = 256;
constexpr size_t kBinsLimit = 1'000'001;

uint64_t HashBytes(std::string_view bytes) {
  uint64_t h = std::hash<std::string_view>{}(bytes);
  return h == 0 ? 1 : h;
}

// Sections of a series' part of the model record: what values change. Each is written only
// when it differs from a new series' (so a series in its warmup costs a few bytes).
enum HotSection : uint32_t {
  kHotState = 1u << 0,        // frozen, edges ready; values seen
  kHotFirstEvent = 1u << 1,   // first event time (duration warmups)
  kHotWarmup = 1u << 2,       // warmup values kept (the values are in segments)
  kHotBaseline = 1u << 3,     // the baseline's moments while warming up, unless those of the
                              // warmup values kept (recomputed on restore)
  kHotClipped = 1u << 4,      // winsorized baseline and reference counts (edges fixed)
  kHotWindow = 1u << 5,       // the current window's sums and counts
  kHotSpan = 1u << 6,         // its first value index and event-time span
  kHotCusum = 1u << 7,        // the CUSUM's sums
  kHotErrBaseline = 1u << 8,  // the error series' baseline while warming up
  kHotErrWindow = 1u << 9,    // the error series' window
  kHotOpen = 1u << 10,        // open event-time windows (with their samples)
  kHotAll = (1u << 11) - 1,
};

// Sections of the series record (version 6): what changes when a window closes, an alert moves
// or the baseline freezes. Absent sections hold a new series' values; a record without any is
// not written.
enum ColdSection : uint32_t {
  kColdFences = 1u << 0,    // fences and bin edges (fixed, baseline not frozen yet)
  kColdTrailing = 1u << 1,  // trailing window summaries
  kColdPhases = 1u << 2,    // seasonal phases
  kColdRecent = 1u << 3,    // look-back windows
  kColdCusumSd = 1u << 4,   // the last window's own sd for the CUSUM
  kColdAlert = 1u << 5,     // alert state machine and incident id
  kColdIncident = 1u << 6,  // the open incident's evidence
  kColdAll = (1u << 7) - 1,
};

// Event times: 0 for none (INT64_MIN), else zigzag + 1.
void PutTime(drift::ByteWriter& w, int64_t us) {
  if (us == INT64_MIN) {
    w.Varint(0);
    return;
  }
  w.Varint(((static_cast<uint64_t>(us) << 1) ^ static_cast<uint64_t>(us >> 63)) + 1);
}

int64_t GetTime(drift::ByteReader& r) {
  const uint64_t t = r.Varint();
  if (t == 0) return INT64_MIN;
  const uint64_t z = t - 1;
  return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
}

void PutCounts(drift::ByteWriter& w, const std::vector<int64_t>& counts) {
  w.Varint(counts.size());
  for (int64_t c : counts) w.Varint(static_cast<uint64_t>(c));
}

bool GetCounts(drift::ByteReader& r, std::vector<int64_t>& counts, size_t limit) {
  const uint64_t n = r.Varint();
  if (r.failed() || n > limit || n > r.remaining()) return false;
  counts.resize(n);
  for (auto& c : counts) c = static_cast<int64_t>(r.Varint());
  return !r.failed();
}

bool IsDefault(const Incident& inc) {
  static const Incident kNone;
  return inc.families == kNone.families && inc.lead == kNone.lead &&
         inc.evidence == kNone.evidence && inc.loc_n == 0 && inc.loc_sum == 0 &&
         inc.spread_dof == 0 && inc.spread_sum == 0 && inc.shape_n == 0 &&
         inc.shape_delta.empty() && inc.error_n == 0 && inc.error_errors == 0;
}

/// A warmup's moments are those of its kept values (in order), so they need not be written.
bool BaselineFromWarmup(const DriftMonitor::SeriesState& s) {
  return !s.edges_ready && s.baseline_from_warmup;
}

Moments MomentsOf(const WarmupValues& warmup, std::vector<double>& scratch) {
  warmup.Values(scratch);
  Moments m;
  for (double v : scratch) m.Add(v);
  return m;
}

bool ReadMoments(drift::ByteReader& r, Moments& m) {
  std::array<char, Moments::kEncodedSize> buf{};
  for (auto& c : buf) c = static_cast<char>(r.U8());
  if (r.failed()) return false;
  auto decoded = Moments::Decode(std::string_view(buf.data(), buf.size()));
  if (!decoded) return false;
  m = *decoded;
  return true;
}

bool ReadFixed(drift::ByteReader& r, size_t n, std::string& buf) {
  buf.clear();
  for (size_t i = 0; i < n; ++i) buf.push_back(static_cast<char>(r.U8()));
  return !r.failed();
}

bool DecodeSummary(drift::ByteReader& r, WindowSummary& t) {
  return ReadMoments(r, t.moments) && t.clipped.Decode(r) && DecodeCounts(r, t.counts);
}

// The baseline's fields that freeze with it (in the series record until then).
void EncodeBaseFields(drift::ByteWriter& w, std::string& out, const DriftMonitor::SeriesState& s) {
  s.baseline.Encode(out);
  s.baseline_c.Encode(w);
  w.F64(s.clip_lo);
  w.F64(s.clip_hi);
  w.U32(static_cast<uint32_t>(s.edges.inner().size()));
  for (double e : s.edges.inner()) w.F64(e);
  EncodeCounts(w, s.ref_counts);
}

/// "<series>/base": a frozen baseline, written once when it freezes.
void EncodeBase(const DriftMonitor::SeriesState& s, std::string& out) {
  drift::ByteWriter w(out);
  w.U8(kBaseEncodingVersion);
  EncodeBaseFields(w, out, s);
  w.I64(s.eval().err_baseline.errors);
  s.eval().err_baseline.abs_error.Encode(out);
}

HigherMoments NormalShaped(const Moments& m) {
  return HigherMoments::Normal(m.count(), m.count() > 0 ? m.mean() : 0, m.m2());
}

/// Versions 1 and 2: no winsorizing, no higher moments, Page-Hinkley instead of the CUSUM. The
/// baseline is read as unwinsorized and normal-shaped; an open incident has no summary yet, so
/// every family must show it is back.
Status DecodeLegacySeries(drift::ByteReader& r, uint8_t version, DriftMonitor::SeriesState& s,
                          size_t bins_limit, const std::function<Status(std::string_view)>& corrupt) {
  s.frozen = r.U8() != 0;
  s.seen = r.I64();
  s.first_event_us = r.I64();
  const uint32_t warmup = r.U32();
  if (warmup > r.remaining() / 8) return corrupt("truncated warmup values");
  s.warmup.Clear();
  for (uint32_t i = 0; i < warmup; ++i) s.warmup.Add(r.F64());
  if (!ReadMoments(r, s.baseline)) return corrupt("bad baseline moments");
  const uint32_t edges = r.U32();
  if (edges > r.remaining() / 8 || edges + 1 > bins_limit) return corrupt("bad bin edges");
  std::vector<double> inner(edges);
  for (auto& e : inner) e = r.F64();
  s.edges = BinEdges(std::move(inner));
  if (s.edges.inner().size() != edges) return corrupt("bin edges not increasing");
  if (!DecodeCounts(r, s.ref_counts)) return corrupt("bad reference counts");
  const uint32_t trailing = r.U32();
  s.mut_eval().trailing_next = r.U32();
  if (trailing > 10'000 || r.failed()) return corrupt("bad trailing windows");
  s.mut_eval().trailing.assign(trailing, {});
  for (WindowSummary& t : s.mut_eval().trailing) {
    if (!ReadMoments(r, t.moments) || !DecodeCounts(r, t.counts)) {
      return corrupt("bad trailing window");
    }
    t.clipped = NormalShaped(t.moments);
  }
  Moments window;
  if (!ReadMoments(r, window)) return corrupt("bad window moments");
  if (!DecodeCounts(r, s.mut_eval().window_counts)) return corrupt("bad window counts");
  s.mut_eval().window_raw = PowerSums::FromMoments(NormalShaped(window));
  s.mut_eval().window_sums = s.mut_eval().window_raw;
  s.mut_eval().window_start = r.I64();
  s.mut_eval().window_min_us = r.I64();
  s.mut_eval().window_max_us = r.I64();
  (void)r.Str();  // Page-Hinkley's state: the CUSUM starts afresh
  std::string buf;
  if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) return corrupt("truncated alert");
  auto alert = AlertStateMachine::Decode(buf);
  if (!alert) return tl::unexpected(alert.error());
  s.alert = *alert;
  s.mut_eval().incident = r.U64();
  s.mut_eval().err_baseline.errors = r.I64();
  if (!ReadMoments(r, s.mut_eval().err_baseline.abs_error)) return corrupt("bad error baseline");
  s.mut_eval().err_window.errors = r.I64();
  if (!ReadMoments(r, s.mut_eval().err_window.abs_error)) return corrupt("bad error window");
  s.open.clear();
  if (version >= 2) {
    const uint32_t open = r.U32();
    if (open > 100'000 || open > r.remaining() / 16) return corrupt("bad open windows");
    s.open.resize(open);
    int64_t previous_start = INT64_MIN;
    for (OpenWindow& o : s.open) {
      o.start_us = r.I64();
      o.first_index = r.I64();
      Moments moments;
      if (!ReadMoments(r, moments) || !DecodeCounts(r, o.counts)) {
        return corrupt("bad open window");
      }
      o.raw = PowerSums::FromMoments(NormalShaped(moments));
      o.sums = o.raw;
      o.min_us = r.I64();
      o.max_us = r.I64();
      if (r.failed() || o.start_us <= previous_start ||
          (!o.counts.empty() && o.counts.size() != s.edges.bins())) {
        return corrupt("bad open window");
      }
      previous_start = o.start_us;
    }
  }
  // Frozen baselines of old state had no fences: nothing is clipped.
  s.edges_ready = s.frozen;
  s.baseline_c = NormalShaped(s.baseline);
  // An open incident keeps no summary of its change (families 0): it clears when a window reads
  // below WARN on every detector (Decide).
  return Ok();
}

Status DecodeBaseFields(drift::ByteReader& r, DriftMonitor::SeriesState& s, size_t bins_limit,
                        const std::function<Status(std::string_view)>& corrupt) {
  if (!ReadMoments(r, s.baseline) || !s.baseline_c.Decode(r)) {
    return corrupt("bad baseline moments");
  }
  s.clip_lo = r.F64();
  s.clip_hi = r.F64();
  if (std::isnan(s.clip_lo) || std::isnan(s.clip_hi) || s.clip_lo > s.clip_hi) {
    return corrupt("bad fences");
  }
  const uint32_t edges = r.U32();
  if (edges > r.remaining() / 8 || edges + 1 > bins_limit) return corrupt("bad bin edges");
  std::vector<double> inner(edges);
  for (auto& e : inner) e = r.F64();
  s.edges = BinEdges(std::move(inner));
  if (s.edges.inner().size() != edges) return corrupt("bin edges not increasing");
  if (!DecodeCounts(r, s.ref_counts)) return corrupt("bad reference counts");
  return Ok();
}

Status DecodeBase(std::string_view bytes, DriftMonitor::SeriesState& s, size_t bins_limit) {
  drift::ByteReader r(bytes);
  std::function<Status(std::string_view)> corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift baseline state: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kBaseEncodingVersion) return corrupt("unknown version");
  DRIFTD_TRY(DecodeBaseFields(r, s, bins_limit, corrupt));
  s.mut_eval().err_baseline.errors = r.I64();
  if (!ReadMoments(r, s.mut_eval().err_baseline.abs_error)) return corrupt("bad error baseline");
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  return Ok();
}

// ---- categorical series records ------------------------------------------------------------
// "<series>" (kCategoricalEncodingVersion):
//   u8 version, u8 flags (1 frozen, 2 category set fixed, 4 baseline in the base key),
//   i64 seen, first_event_us, window_start, window_min_us, window_max_us, season_end_us,
//   alert state, u64 incident, incident (u8 families, u32 lead, 4 x f64 evidence, i64 shape_n,
//   u32 + f64 shape deltas), i64 baseline values,
//   [not fixed] first part's counts; [fixed, not frozen] the baseline's fields (as in the base
//   key), then the window's cells, values and unseen names, open event-time windows (start,
//   min, max, cells, sample, unseen names), trailing windows' cells and their next slot,
//   seasonal phases' cells.
// "<series>/base" (kCategoricalEncodingVersion): the category set, the baseline's cells, its
//   held-out values, first part's size and singletons, and the unseen share's reference.

bool IsCategoricalRecord(std::string_view bytes) {
  return !bytes.empty() && static_cast<uint8_t>(bytes[0]) == kCategoricalEncodingVersion;
}

void EncodeCategoricalBaseFields(drift::ByteWriter& w, const CategoricalState& c) {
  c.set.Encode(w);
  EncodeCounts(w, c.ref);
  w.I64(c.held_out);
  w.I64(c.first_total);
  w.I64(c.first_singletons);
  w.I64(c.ref_unseen);
  w.I64(c.ref_unseen_n);
}

bool DecodeCategoricalBaseFields(drift::ByteReader& r, CategoricalState& c) {
  if (!c.set.Decode(r) || !DecodeCounts(r, c.ref)) return false;
  c.held_out = r.I64();
  c.first_total = r.I64();
  c.first_singletons = r.I64();
  c.ref_unseen = r.I64();
  c.ref_unseen_n = r.I64();
  c.set_ready = true;
  return !r.failed() && c.ref.size() == c.set.cells() && c.held_out >= 0 &&
         c.first_total >= 0 && c.first_singletons >= 0 && c.ref_unseen >= 0 &&
         c.ref_unseen <= std::max(c.ref_unseen_n, c.first_total);
}

void EncodeCategoricalBase(const DriftMonitor::SeriesState& s, std::string& out) {
  drift::ByteWriter w(out);
  w.U8(kCategoricalEncodingVersion);
  EncodeCategoricalBaseFields(w, *s.cat);
}

Status DecodeCategoricalBase(std::string_view bytes, CategoricalState& c) {
  drift::ByteReader r(bytes);
  if (r.U8() != kCategoricalEncodingVersion || !DecodeCategoricalBaseFields(r, c) ||
      !r.at_end()) {
    return MakeError(ErrorCode::kCorruption, "drift categorical baseline state: unreadable ({} "
                     "bytes)", bytes.size());
  }
  return Ok();
}

void EncodeCategoricalSeries(const DriftMonitor::SeriesState& s, std::string& out) {
  const CategoricalState& c = *s.cat;
  drift::ByteWriter w(out);
  w.U8(kCategoricalEncodingVersion);
  w.U8(static_cast<uint8_t>((s.frozen ? 1 : 0) | (c.set_ready ? 2 : 0) |
                            (s.frozen ? kBaseApart : 0)));
  w.I64(s.seen);
  w.I64(s.first_event_us);
  w.I64(s.eval().window_start);
  w.I64(s.eval().window_min_us);
  w.I64(s.eval().window_max_us);
  w.I64(s.eval().season_end_us);
  s.alert.Encode(out);
  w.U64(s.eval().incident);
  const Incident& inc = s.eval().inc;
  w.U8(inc.families);
  w.U32(static_cast<uint32_t>(inc.lead));
  for (double e : inc.evidence) w.F64(e);
  w.I64(inc.shape_n);
  w.U32(static_cast<uint32_t>(inc.shape_delta.size()));
  for (double d : inc.shape_delta) w.F64(d);
  w.I64(c.baseline_values);
  if (!c.set_ready) {
    c.first.Encode(w);
  } else if (!s.frozen) {
    EncodeCategoricalBaseFields(w, c);
  }
  EncodeCounts(w, c.window);
  w.I64(c.window_n);
  c.window_unseen.Encode(w);
  w.U32(static_cast<uint32_t>(c.open.size()));
  for (const CategoryWindow& o : c.open) {
    w.I64(o.start_us);
    w.I64(o.min_us);
    w.I64(o.max_us);
    EncodeCounts(w, o.cells);
    o.sample.Encode(w);
    o.unseen.Encode(w);
  }
  w.U32(static_cast<uint32_t>(c.trailing.size()));
  w.U32(c.trailing_next);
  for (const auto& t : c.trailing) EncodeCounts(w, t);
  w.U32(static_cast<uint32_t>(c.phases.size()));
  for (const auto& p : c.phases) EncodeCounts(w, p);
}

Status DecodeCategoricalSeries(std::string_view bytes, DriftMonitor::SeriesState& s,
                               bool& base_apart) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift categorical series state: {} ({} bytes)",
                     what, bytes.size());
  };
  if (r.U8() != kCategoricalEncodingVersion) return corrupt("unknown version");
  const uint8_t flags = r.U8();
  s.frozen = (flags & 1) != 0;
  base_apart = (flags & kBaseApart) != 0;
  if (base_apart != s.frozen || (s.frozen && (flags & 2) == 0)) return corrupt("bad flags");
  s.cat = std::make_unique<CategoricalState>();
  CategoricalState& c = *s.cat;
  s.seen = r.I64();
  s.first_event_us = r.I64();
  s.mut_eval().window_start = r.I64();
  s.mut_eval().window_min_us = r.I64();
  s.mut_eval().window_max_us = r.I64();
  s.mut_eval().season_end_us = r.I64();
  std::string buf;
  if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) return corrupt("truncated alert");
  auto alert = AlertStateMachine::Decode(buf);
  if (!alert) return tl::unexpected(alert.error());
  s.alert = *alert;
  s.mut_eval().incident = r.U64();
  Incident& inc = s.mut_eval().inc;
  inc.families = r.U8();
  inc.lead = static_cast<int32_t>(r.U32());
  for (double& e : inc.evidence) e = r.F64();
  inc.shape_n = r.I64();
  const uint32_t delta = r.U32();
  if (delta > r.remaining() / 8) return corrupt("bad incident");
  inc.shape_delta.resize(delta);
  for (double& d : inc.shape_delta) d = r.F64();
  if (inc.lead < -1 || inc.shape_n < 0) return corrupt("bad incident");
  c.baseline_values = r.I64();
  if ((flags & 2) == 0) {
    if (!c.first.Decode(r)) return corrupt("bad first part");
  } else if (!s.frozen) {
    if (!DecodeCategoricalBaseFields(r, c)) return corrupt("bad baseline");
  } else {
    c.set_ready = true;  // the rest is in the base key
  }
  if (!DecodeCounts(r, c.window)) return corrupt("bad window");
  c.window_n = r.I64();
  if (!c.window_unseen.Decode(r)) return corrupt("bad window's unseen categories");
  const uint32_t open = r.U32();
  if (r.failed() || open > 100'000 || open > r.remaining() / 24) return corrupt("bad open windows");
  c.open.resize(open);
  int64_t previous_start = INT64_MIN;
  for (CategoryWindow& o : c.open) {
    o.start_us = r.I64();
    o.min_us = r.I64();
    o.max_us = r.I64();
    if (!DecodeCounts(r, o.cells) || !o.sample.Decode(r) || !o.unseen.Decode(r) ||
        o.start_us <= previous_start) {
      return corrupt("bad open window");
    }
    previous_start = o.start_us;
  }
  const uint32_t trailing = r.U32();
  c.trailing_next = r.U32();
  if (r.failed() || trailing > 10'000 || c.trailing_next > trailing) {
    return corrupt("bad trailing windows");
  }
  c.trailing.resize(trailing);
  for (auto& t : c.trailing) {
    if (!DecodeCounts(r, t)) return corrupt("bad trailing window");
  }
  const uint32_t phases = r.U32();
  if (r.failed() || phases > 100'000) return corrupt("bad seasonal phases");
  c.phases.resize(phases);
  for (auto& p : c.phases) {
    if (!DecodeCounts(r, p)) return corrupt("bad seasonal phase");
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  if (s.seen < 0 || c.baseline_values < 0 || c.window_n < 0) return corrupt("bad counts");
  s.prepared = false;
  return Ok();
}

/// Checks of a categorical series that need both its record and its baseline.
Status CheckCategorical(const DriftMonitor::SeriesState& s, std::string_view key) {
  const CategoricalState& c = *s.cat;
  auto bad = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "{}: drift categorical series state: {}", key, what);
  };
  const size_t cells = c.set.cells();
  if (c.set_ready && c.ref.size() != cells) return bad("baseline cells disagree");
  if (s.frozen && c.window.size() != cells) return bad("window cells disagree");
  for (const CategoryWindow& o : c.open) {
    if (s.frozen ? o.cells.size() != cells : !o.cells.empty()) return bad("bad open window");
  }
  for (const auto& t : c.trailing) {
    if (t.size() != cells) return bad("bad trailing window");
  }
  for (const auto& p : c.phases) {
    if (p.size() != cells) return bad("bad seasonal phase");
  }
  if (!s.eval().inc.shape_delta.empty() && s.eval().inc.shape_delta.size() != c.set.tracked() + 1) {
    return bad("bad incident");
  }
  return Ok();
}

/// Checks that need both the series record and its baseline.
Status CheckHistograms(const DriftMonitor::SeriesState& s, std::string_view key) {
  const size_t bins = s.edges.bins();
  for (const OpenWindow& o : s.open) {
    if (!o.counts.empty() && o.counts.size() != bins) {
      return MakeError(ErrorCode::kCorruption, "{}: drift series state: bad open window", key);
    }
  }
  if (s.frozen && !s.ref_counts.empty() &&
      (s.ref_counts.size() != bins || s.eval().window_counts.size() != bins)) {
    return MakeError(ErrorCode::kCorruption, "{}: drift series state: histogram sizes disagree",
                     key);
  }
  return Ok();
}

/// Versions 1 to 5 of the series record (one record per series). `warmup_count`: for version
/// 5, the warmup values the record counts (they are in block keys).
Status DecodeSeries(std::string_view bytes, DriftMonitor::SeriesState& s, size_t bins_limit,
                    bool& base_apart, uint32_t& warmup_count) {
  base_apart = false;
  warmup_count = 0;
  drift::ByteReader r(bytes);
  std::function<Status(std::string_view)> corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift series state: {} ({} bytes)", what,
                     bytes.size());
  };
  const uint8_t version = r.U8();
  if (version == 1 || version == 2) {
    DRIFTD_TRY(DecodeLegacySeries(r, version, s, bins_limit, corrupt));
  } else if (version >= 3 && version <= kLastOneRecordVersion) {
    const uint8_t flags = r.U8();
    s.frozen = (flags & 1) != 0;
    s.edges_ready = (flags & 2) != 0;
    base_apart = version >= 5 && (flags & kBaseApart) != 0;
    if (base_apart && !s.frozen) return corrupt("bad flags");
    s.seen = r.I64();
    s.first_event_us = r.I64();
    const uint32_t warmup = r.U32();
    s.warmup.Clear();
    if (version >= 5) {
      if (warmup > DriftMonitor::kMaxWarmupValues || (warmup > 0 && s.edges_ready)) {
        return corrupt("bad warmup count");
      }
      warmup_count = warmup;
    } else {
      if (warmup > r.remaining() / 8) return corrupt("truncated warmup values");
      for (uint32_t i = 0; i < warmup; ++i) s.warmup.Add(r.F64());
    }
    if (!base_apart) DRIFTD_TRY(DecodeBaseFields(r, s, bins_limit, corrupt));
    const uint32_t trailing = r.U32();
    s.mut_eval().trailing_next = r.U32();
    if (trailing > 10'000 || r.failed()) return corrupt("bad trailing windows");
    s.mut_eval().trailing.assign(trailing, {});
    for (WindowSummary& t : s.mut_eval().trailing) {
      if (!DecodeSummary(r, t)) return corrupt("bad trailing window");
    }
    const uint32_t phases = r.U32();
    s.mut_eval().season_end_us = r.I64();
    if (phases > 100'000 || r.failed()) return corrupt("bad seasonal phases");
    s.mut_eval().phases.assign(phases, {});
    for (WindowSummary& p : s.mut_eval().phases) {
      if (!DecodeSummary(r, p)) return corrupt("bad seasonal phase");
    }
    if (!s.mut_eval().window_raw.Decode(r) || !s.mut_eval().window_sums.Decode(r)) {
      return corrupt("bad window moments");
    }
    if (!DecodeCounts(r, s.mut_eval().window_counts)) return corrupt("bad window counts");
    s.mut_eval().window_start = r.I64();
    s.mut_eval().window_min_us = r.I64();
    s.mut_eval().window_max_us = r.I64();
    const uint32_t recent = r.U32();
    s.mut_eval().recent_next = r.U32();
    if (recent > DriftMonitor::kLookbackWindows || s.eval().recent_next > recent ||
        recent > r.remaining() / 24) {
      return corrupt("bad look-back windows");
    }
    s.mut_eval().recent.resize(recent);
    for (RecentWindow& w : s.mut_eval().recent) {
      w.n = r.I64();
      w.sum = r.F64();
      w.m2 = r.F64();
    }
    s.mut_eval().cusum_up = r.F64();
    s.mut_eval().cusum_down = r.F64();
    s.mut_eval().cusum_sd = r.F64();
    if (!(s.eval().cusum_up >= 0) || !(s.eval().cusum_down >= 0) || !(s.eval().cusum_sd >= 0)) {
      return corrupt("bad cusum");
    }
    std::string buf;
    if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) return corrupt("truncated alert");
    auto alert = AlertStateMachine::Decode(buf);
    if (!alert) return tl::unexpected(alert.error());
    s.alert = *alert;
    s.mut_eval().incident = r.U64();
    Incident& inc = s.mut_eval().inc;
    inc.families = r.U8();
    inc.lead = static_cast<int32_t>(r.U32());
    for (double& e : inc.evidence) e = r.F64();
    inc.loc_n = r.I64();
    inc.loc_sum = r.F64();
    inc.spread_dof = r.I64();
    inc.spread_sum = r.F64();
    inc.shape_n = r.I64();
    const uint32_t delta = r.U32();
    if (delta > r.remaining() / 8 || delta + 1 > bins_limit + 1) return corrupt("bad incident");
    inc.shape_delta.resize(delta);
    for (double& d : inc.shape_delta) d = r.F64();
    inc.error_n = r.I64();
    inc.error_errors = r.I64();
    if (!base_apart) {
      s.mut_eval().err_baseline.errors = r.I64();
      if (!ReadMoments(r, s.mut_eval().err_baseline.abs_error)) {
        return corrupt("bad error baseline");
      }
    }
    s.mut_eval().err_window.errors = r.I64();
    if (!ReadMoments(r, s.mut_eval().err_window.abs_error)) return corrupt("bad error window");
    const uint32_t open = r.U32();
    if (open > 100'000 || open > r.remaining() / 16) return corrupt("bad open windows");
    s.open.resize(open);
    int64_t previous_start = INT64_MIN;
    for (OpenWindow& o : s.open) {
      o.start_us = r.I64();
      o.first_index = r.I64();
      if (!o.raw.Decode(r) || !o.sums.Decode(r) || !DecodeCounts(r, o.counts)) {
        return corrupt("bad open window");
      }
      o.min_us = r.I64();
      o.max_us = r.I64();
      if (r.failed() || o.start_us <= previous_start) return corrupt("bad open window");
      previous_start = o.start_us;
    }
    if (version >= 4) {
      for (OpenWindow& o : s.open) {
        auto sample = ValueSample::Decode(r.Str());
        if (!sample) return corrupt("bad open window sample");
        o.sample = std::move(*sample);
      }
    }
    if (inc.lead < -1 || inc.loc_n < 0 || inc.spread_dof < 0 || inc.shape_n < 0 ||
        inc.error_n < 0) {
      return corrupt("bad incident");
    }
  } else {
    return corrupt("unknown version");
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  if (s.eval().trailing_next >= std::max<size_t>(1, s.eval().trailing.size() + 1)) {
    return corrupt("bad trailing position");
  }
  s.prepared = false;
  return Ok();
}


// ---- Version 6: the model record, the series record, warmup segments, the series table ----

uint32_t HotSectionsOf(const DriftMonitor::SeriesState& s) {
  if (s.cat) return 0;  // a categorical series' record holds it whole
  uint32_t bits = 0;
  if (s.frozen || s.edges_ready || s.seen != 0) bits |= kHotState;
  if (ValidTime(s.first_event_us)) bits |= kHotFirstEvent;
  if (!s.edges_ready && !s.warmup.empty()) bits |= kHotWarmup;
  if (!s.frozen && s.baseline.count() > 0 && !BaselineFromWarmup(s)) bits |= kHotBaseline;
  if (!s.frozen && s.edges_ready) bits |= kHotClipped;
  if (s.eval().window_raw.count() > 0 || s.eval().window_sums.count() > 0) bits |= kHotWindow;
  if (s.eval().window_raw.count() > 0 || s.eval().err_window.count() > 0) bits |= kHotSpan;
  if (s.eval().cusum_up != 0 || s.eval().cusum_down != 0) bits |= kHotCusum;
  if (!s.frozen && (s.eval().err_baseline.count() > 0 || s.eval().err_baseline.errors != 0)) {
    bits |= kHotErrBaseline;
  }
  if (s.eval().err_window.count() > 0 || s.eval().err_window.errors != 0) bits |= kHotErrWindow;
  if (!s.open.empty()) bits |= kHotOpen;
  return bits;
}

/// A series' entry of the model record: its sections bits, then the sections.
void EncodeHot(const DriftMonitor::SeriesState& s, uint32_t bits, std::string& out) {
  drift::ByteWriter w(out);
  w.Varint(bits);
  if (bits & kHotState) {
    w.U8(static_cast<uint8_t>((s.frozen ? 1 : 0) | (s.edges_ready ? 2 : 0)));
    w.Varint(static_cast<uint64_t>(s.seen));
  }
  if (bits & kHotFirstEvent) PutTime(w, s.first_event_us);
  if (bits & kHotWarmup) w.Varint(s.warmup.size());
  if (bits & kHotBaseline) s.baseline.Encode(out);
  if (bits & kHotClipped) {
    s.baseline_c.Encode(w);
    PutCounts(w, s.ref_counts);
  }
  if (bits & kHotWindow) {
    s.eval().window_raw.Encode(w);
    s.eval().window_sums.Encode(w);
    PutCounts(w, s.eval().window_counts);
  }
  if (bits & kHotSpan) {
    w.Zigzag(s.eval().window_start);
    PutTime(w, s.eval().window_min_us);
    PutTime(w, s.eval().window_max_us);
  }
  if (bits & kHotCusum) {
    w.F64(s.eval().cusum_up);
    w.F64(s.eval().cusum_down);
  }
  if (bits & kHotErrBaseline) {
    w.Zigzag(s.eval().err_baseline.errors);
    s.eval().err_baseline.abs_error.Encode(out);
  }
  if (bits & kHotErrWindow) {
    w.Zigzag(s.eval().err_window.errors);
    s.eval().err_window.abs_error.Encode(out);
  }
  if (bits & kHotOpen) {
    w.Varint(s.open.size());
    std::string sample;
    for (const OpenWindow& o : s.open) {
      w.Zigzag(o.start_us);
      w.Zigzag(o.first_index);
      o.raw.Encode(w);
      o.sums.Encode(w);
      PutCounts(w, o.counts);
      PutTime(w, o.min_us);
      PutTime(w, o.max_us);
      sample.clear();
      o.sample.Encode(sample);
      w.Bytes(sample);
    }
  }
}

/// Reads a series' entry of the model record into `s` (its other fields untouched).
/// `bits_out`: the sections read; `warmup`: the warmup values the segments must give.
Status DecodeHot(drift::ByteReader& r, DriftMonitor::SeriesState& s, uint32_t& bits_out,
                 uint32_t& warmup) {
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift model record: {}", what);
  };
  const uint64_t bits = r.Varint();
  if (r.failed() || (bits & ~uint64_t{kHotAll}) != 0) return corrupt("unknown sections");
  bits_out = static_cast<uint32_t>(bits);
  warmup = 0;
  if (bits & kHotState) {
    const uint8_t flags = r.U8();
    if ((flags & ~3u) != 0) return corrupt("bad flags");
    s.frozen = (flags & 1) != 0;
    s.edges_ready = (flags & 2) != 0;
    s.seen = static_cast<int64_t>(r.Varint());
    if (s.seen < 0) return corrupt("bad value count");
  }
  if (bits & kHotFirstEvent) s.first_event_us = GetTime(r);
  if (bits & kHotWarmup) {
    const uint64_t count = r.Varint();
    if (count == 0 || count > DriftMonitor::kMaxWarmupValues || s.edges_ready) {
      return corrupt("bad warmup count");
    }
    warmup = static_cast<uint32_t>(count);
  }
  if ((bits & kHotBaseline) && !ReadMoments(r, s.baseline)) return corrupt("bad baseline");
  if ((bits & kHotClipped) &&
      (!s.baseline_c.Decode(r) || !GetCounts(r, s.ref_counts, kBinsLimit))) {
    return corrupt("bad winsorized baseline");
  }
  if ((bits & kHotWindow) &&
      (!s.mut_eval().window_raw.Decode(r) || !s.mut_eval().window_sums.Decode(r) ||
       !GetCounts(r, s.mut_eval().window_counts, kBinsLimit))) {
    return corrupt("bad window");
  }
  if (bits & kHotSpan) {
    s.mut_eval().window_start = r.Zigzag();
    s.mut_eval().window_min_us = GetTime(r);
    s.mut_eval().window_max_us = GetTime(r);
  }
  if (bits & kHotCusum) {
    s.mut_eval().cusum_up = r.F64();
    s.mut_eval().cusum_down = r.F64();
    if (!(s.eval().cusum_up >= 0) || !(s.eval().cusum_down >= 0)) return corrupt("bad cusum");
  }
  if (bits & kHotErrBaseline) {
    s.mut_eval().err_baseline.errors = r.Zigzag();
    if (!ReadMoments(r, s.mut_eval().err_baseline.abs_error)) return corrupt("bad error baseline");
  }
  if (bits & kHotErrWindow) {
    s.mut_eval().err_window.errors = r.Zigzag();
    if (!ReadMoments(r, s.mut_eval().err_window.abs_error)) return corrupt("bad error window");
  }
  if (bits & kHotOpen) {
    const uint64_t open = r.Varint();
    if (open == 0 || open > 100'000 || open > r.remaining()) return corrupt("bad open windows");
    s.open.resize(open);
    int64_t previous_start = INT64_MIN;
    for (OpenWindow& o : s.open) {
      o.start_us = r.Zigzag();
      o.first_index = r.Zigzag();
      if (!o.raw.Decode(r) || !o.sums.Decode(r) || !GetCounts(r, o.counts, kBinsLimit)) {
        return corrupt("bad open window");
      }
      o.min_us = GetTime(r);
      o.max_us = GetTime(r);
      auto sample = ValueSample::Decode(r.Bytes());
      if (r.failed() || !sample || o.start_us <= previous_start) {
        return corrupt("bad open window");
      }
      o.sample = std::move(*sample);
      previous_start = o.start_us;
    }
  }
  if (r.failed()) return corrupt("truncated");
  s.prepared = false;
  return Ok();
}

void EncodeSummaryCompact(drift::ByteWriter& w, std::string& out, const WindowSummary& t) {
  t.moments.Encode(out);
  t.clipped.Encode(w);
  PutCounts(w, t.counts);
}

bool DecodeSummaryCompact(drift::ByteReader& r, WindowSummary& t) {
  return ReadMoments(r, t.moments) && t.clipped.Decode(r) && GetCounts(r, t.counts, kBinsLimit);
}

uint32_t ColdSectionsOf(const DriftMonitor::SeriesState& s) {
  static const AlertStateMachine kNoAlert;
  uint32_t bits = 0;
  if (!s.frozen && s.edges_ready) bits |= kColdFences;
  if (!s.eval().trailing.empty() || s.eval().trailing_next != 0) bits |= kColdTrailing;
  if (!s.eval().phases.empty() || ValidTime(s.eval().season_end_us)) bits |= kColdPhases;
  if (!s.eval().recent.empty() || s.eval().recent_next != 0) bits |= kColdRecent;
  if (s.eval().cusum_sd != 0) bits |= kColdCusumSd;
  if (!(s.alert == kNoAlert) || s.eval().incident != 0) bits |= kColdAlert;
  if (!IsDefault(s.eval().inc)) bits |= kColdIncident;
  return bits;
}

/// The series record (version 6): the sections that differ from a new series'; nothing at all
/// when none does (no record is kept then).
void EncodeCold(const DriftMonitor::SeriesState& s, std::string& out) {
  const uint32_t bits = ColdSectionsOf(s);
  if (bits == 0) return;
  drift::ByteWriter w(out);
  w.U8(kSeriesEncodingVersion);
  w.Varint(bits);
  if (bits & kColdFences) {
    w.F64(s.clip_lo);
    w.F64(s.clip_hi);
    w.Varint(s.edges.inner().size());
    for (double e : s.edges.inner()) w.F64(e);
  }
  if (bits & kColdTrailing) {
    w.Varint(s.eval().trailing.size());
    w.Varint(s.eval().trailing_next);
    for (const WindowSummary& t : s.eval().trailing) EncodeSummaryCompact(w, out, t);
  }
  if (bits & kColdPhases) {
    w.Varint(s.eval().phases.size());
    PutTime(w, s.eval().season_end_us);
    for (const WindowSummary& p : s.eval().phases) EncodeSummaryCompact(w, out, p);
  }
  if (bits & kColdRecent) {
    w.Varint(s.eval().recent.size());
    w.Varint(s.eval().recent_next);
    for (const RecentWindow& rw : s.eval().recent) {
      w.Zigzag(rw.n);
      w.F64(rw.sum);
      w.F64(rw.m2);
    }
  }
  if (bits & kColdCusumSd) w.F64(s.eval().cusum_sd);
  if (bits & kColdAlert) {
    s.alert.Encode(out);
    w.U64(s.eval().incident);
  }
  if (bits & kColdIncident) {
    const Incident& inc = s.eval().inc;
    w.U8(inc.families);
    w.Zigzag(inc.lead);
    for (double e : inc.evidence) w.F64(e);
    w.Zigzag(inc.loc_n);
    w.F64(inc.loc_sum);
    w.Zigzag(inc.spread_dof);
    w.F64(inc.spread_sum);
    w.Zigzag(inc.shape_n);
    w.Varint(inc.shape_delta.size());
    for (double d : inc.shape_delta) w.F64(d);
    w.Zigzag(inc.error_n);
    w.Zigzag(inc.error_errors);
  }
}

Status DecodeCold(std::string_view bytes, DriftMonitor::SeriesState& s) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift series state: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kSeriesEncodingVersion) return corrupt("unknown version");
  const uint64_t bits = r.Varint();
  if (r.failed() || bits == 0 || (bits & ~uint64_t{kColdAll}) != 0) {
    return corrupt("unknown sections");
  }
  if (bits & kColdFences) {
    s.clip_lo = r.F64();
    s.clip_hi = r.F64();
    if (std::isnan(s.clip_lo) || std::isnan(s.clip_hi) || s.clip_lo > s.clip_hi) {
      return corrupt("bad fences");
    }
    const uint64_t edges = r.Varint();
    if (edges > r.remaining() / 8 || edges + 1 > kBinsLimit) return corrupt("bad bin edges");
    std::vector<double> inner(edges);
    for (auto& e : inner) e = r.F64();
    s.edges = BinEdges(std::move(inner));
    if (s.edges.inner().size() != edges) return corrupt("bin edges not increasing");
  }
  if (bits & kColdTrailing) {
    const uint64_t trailing = r.Varint();
    s.mut_eval().trailing_next = static_cast<uint32_t>(r.Varint());
    if (trailing > 10'000 || trailing > r.remaining() || r.failed()) {
      return corrupt("bad trailing windows");
    }
    s.mut_eval().trailing.assign(trailing, {});
    for (WindowSummary& t : s.mut_eval().trailing) {
      if (!DecodeSummaryCompact(r, t)) return corrupt("bad trailing window");
    }
    if (s.eval().trailing_next >= std::max<size_t>(1, s.eval().trailing.size() + 1)) {
      return corrupt("bad trailing position");
    }
  }
  if (bits & kColdPhases) {
    const uint64_t phases = r.Varint();
    s.mut_eval().season_end_us = GetTime(r);
    if (phases > 100'000 || phases > r.remaining() || r.failed()) {
      return corrupt("bad seasonal phases");
    }
    s.mut_eval().phases.assign(phases, {});
    for (WindowSummary& p : s.mut_eval().phases) {
      if (!DecodeSummaryCompact(r, p)) return corrupt("bad seasonal phase");
    }
  }
  if (bits & kColdRecent) {
    const uint64_t recent = r.Varint();
    s.mut_eval().recent_next = static_cast<uint32_t>(r.Varint());
    if (recent > DriftMonitor::kLookbackWindows || s.eval().recent_next > recent ||
        recent > r.remaining() / 17) {
      return corrupt("bad look-back windows");
    }
    s.mut_eval().recent.resize(recent);
    for (RecentWindow& rw : s.mut_eval().recent) {
      rw.n = r.Zigzag();
      rw.sum = r.F64();
      rw.m2 = r.F64();
    }
  }
  if (bits & kColdCusumSd) {
    s.mut_eval().cusum_sd = r.F64();
    if (!(s.eval().cusum_sd >= 0)) return corrupt("bad cusum");
  }
  if (bits & kColdAlert) {
    std::string buf;
    if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) return corrupt("truncated alert");
    auto alert = AlertStateMachine::Decode(buf);
    if (!alert) return tl::unexpected(alert.error());
    s.alert = *alert;
    s.mut_eval().incident = r.U64();
  }
  if (bits & kColdIncident) {
    Incident& inc = s.mut_eval().inc;
    inc.families = r.U8();
    inc.lead = static_cast<int32_t>(r.Zigzag());
    for (double& e : inc.evidence) e = r.F64();
    inc.loc_n = r.Zigzag();
    inc.loc_sum = r.F64();
    inc.spread_dof = r.Zigzag();
    inc.spread_sum = r.F64();
    inc.shape_n = r.Zigzag();
    const uint64_t delta = r.Varint();
    if (delta > r.remaining() / 8 || delta > kBinsLimit) return corrupt("bad incident");
    inc.shape_delta.resize(delta);
    for (double& d : inc.shape_delta) d = r.F64();
    inc.error_n = r.Zigzag();
    inc.error_errors = r.Zigzag();
    if (inc.lead < -1 || inc.loc_n < 0 || inc.spread_dof < 0 || inc.shape_n < 0 ||
        inc.error_n < 0) {
      return corrupt("bad incident");
    }
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  s.prepared = false;
  return Ok();
}

/// The model record (version 2): the roll-up, the warmup segments' range, and each series'
/// entry (table index, then EncodeHot). `entry` reads one entry's sections.
struct ModelRecordHead {
  AlertStateMachine rollup;
  uint64_t rollup_incident = 0;
  uint32_t seg_first = 0;
  uint32_t seg_next = 0;
};

Status DecodeModelRecord(std::string_view bytes, ModelRecordHead& head,
                         const std::function<Status(uint32_t, drift::ByteReader&)>& entry) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift model record: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kModelEncodingVersion) return corrupt("unknown version");
  const uint64_t flags = r.Varint();
  if ((flags & ~uint64_t{1}) != 0) return corrupt("bad flags");
  if (flags & 1) {
    std::string buf;
    if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) return corrupt("truncated roll-up");
    auto rollup = AlertStateMachine::Decode(buf);
    if (!rollup) return tl::unexpected(rollup.error());
    head.rollup = *rollup;
    head.rollup_incident = r.U64();
  }
  const uint64_t first = r.Varint();
  const uint64_t next = r.Varint();
  if (r.failed() || first > next || next > UINT32_MAX) return corrupt("bad segment range");
  head.seg_first = static_cast<uint32_t>(first);
  head.seg_next = static_cast<uint32_t>(next);
  const uint64_t entries = r.Varint();
  if (r.failed() || entries > r.remaining()) return corrupt("bad series count");
  for (uint64_t i = 0; i < entries; ++i) {
    const uint64_t index = r.Varint();
    if (r.failed() || index > UINT32_MAX) return corrupt("bad series index");
    DRIFTD_TRY(entry(static_cast<uint32_t>(index), r));
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  return Ok();
}

/// A warmup segment (version 1): pieces (table index, index of the first value in the
/// series' warmup, count, the values in the compact decimal form).
Status DecodeSegment(
    std::string_view bytes,
    const std::function<Status(uint32_t, uint32_t, uint32_t, std::string_view)>& piece) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift warmup segment: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kSegmentEncodingVersion) return corrupt("unknown version");
  const uint64_t pieces = r.Varint();
  if (r.failed() || pieces > r.remaining()) return corrupt("bad piece count");
  for (uint64_t i = 0; i < pieces; ++i) {
    const uint64_t index = r.Varint();
    const uint64_t first = r.Varint();
    const uint64_t count = r.Varint();
    const std::string_view values = r.Bytes();
    if (r.failed() || index > UINT32_MAX || count == 0 ||
        first + count > DriftMonitor::kMaxWarmupValues) {
      return corrupt("bad piece");
    }
    // The values must decode to exactly `count` doubles.
    drift::ByteReader v(values);
    for (uint64_t k = 0; k < count; ++k) (void)v.Decimal();
    if (v.failed() || !v.at_end()) return corrupt("bad values");
    DRIFTD_TRY(piece(static_cast<uint32_t>(index), static_cast<uint32_t>(first),
                     static_cast<uint32_t>(count), values));
  }
  if (!r.at_end()) return corrupt("trailing bytes");
  return Ok();
}

Result<std::vector<std::string>> DecodeTable(std::string_view bytes) {
  drift::ByteReader r(bytes);
  std::vector<std::string> names;
  if (r.U8() != kTableEncodingVersion) {
    return MakeError(ErrorCode::kCorruption, "drift series table: unknown version");
  }
  const uint64_t n = r.Varint();
  if (r.failed() || n > r.remaining()) {
    return MakeError(ErrorCode::kCorruption, "drift series table: bad count");
  }
  for (uint64_t i = 0; i < n; ++i) names.emplace_back(r.Bytes());
  if (r.failed() || !r.at_end()) {
    return MakeError(ErrorCode::kCorruption, "drift series table: truncated");
  }
  return names;
}

}  // namespace

std::string_view DriftMonitor::SeriesName(size_t index) const {
  return index < series_names_.size() ? std::string_view(series_names_[index]) : kErrorSeries;
}

void DriftMonitor::ResolveTable() {
  if (table_resolved_) return;
  // Positions of names already in the checkpoint (or in use, after InsertSeries) stay; new
  // series are appended.
  if (!table_resolved_once_) table_ = std::move(restored_table_);
  restored_table_.clear();
  table_resolved_ = table_resolved_once_ = true;
  const size_t n = series_names_.size() + 1;
  series_table_index_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view name = SeriesName(i);
    auto it = std::find(table_.begin(), table_.end(), name);
    if (it == table_.end()) {
      table_.emplace_back(name);
      it = table_.end() - 1;
      table_dirty_ = true;
    }
    series_table_index_[i] = static_cast<uint32_t>(it - table_.begin());
  }
  table_series_.assign(table_.size(), -1);
  for (size_t i = 0; i < n; ++i) table_series_[series_table_index_[i]] = static_cast<int32_t>(i);
}

void DriftMonitor::CollectDirty(std::vector<std::pair<std::string, std::string>>& puts) {
  std::vector<std::string> deletes;
  CollectDirty(puts, deletes);
}

void DriftMonitor::CollectDirty(std::vector<std::pair<std::string, std::string>>& puts,
                                std::vector<std::string>& deletes) {
  last_write_ = {};
  const size_t first_put = puts.size();
  ResolveTable();
  for (auto& mp : models_) {
    if (!mp) continue;
    ModelState& m = *mp;
    if (m.dirty.empty() && !m.rollup_dirty && !m.consolidate) continue;
    if (table_dirty_) {
      std::string table;
      drift::ByteWriter w(table);
      w.U8(kTableEncodingVersion);
      w.Varint(table_.size());
      for (const std::string& name : table_) w.Bytes(name);
      last_write_.dirty_bytes += static_cast<int64_t>(table.size());
      puts.emplace_back(std::string(kTableKey), std::move(table));
      table_dirty_ = false;
    }
    WriteModel(m, puts, deletes);
  }
  for (size_t i = first_put; i < puts.size(); ++i) {
    last_write_.put_bytes += static_cast<int64_t>(puts[i].first.size() + puts[i].second.size());
  }
}

void DriftMonitor::WriteModel(ModelState& m, std::vector<std::pair<std::string, std::string>>& puts,
                              std::vector<std::string>& deletes) {
  const std::string model_key = std::string(kStateKeyPrefix) + EscapeName(m.name);
  last_write_.dirty_series += static_cast<int64_t>(m.dirty.size());
  for (uint32_t series : m.dirty) m.series[series].dirty = false;
  m.dirty.clear();
  m.rollup_dirty = false;

  // Series records and frozen baselines: written when they changed, which a value alone does
  // not do (MarkHot).
  for (size_t i = 0; i < m.series.size(); ++i) {
    SeriesState& s = m.series[i];
    const bool categorical = i < series_kinds_.size() && series_kinds_[i] == SeriesKind::kCategorical;
    if (!s.cold_dirty && s.warmup_blocks == 0) {
      if (categorical) continue;
#ifndef NDEBUG
      // What changed of the series record must have been marked (MarkDirty), or a restart
      // would lose it: debug builds (the sanitizer tests) check every write.
      scratch_.clear();
      EncodeCold(s, scratch_);
      assert((scratch_.empty() ? 0 : HashBytes(scratch_)) == (s.cold_in_store ? s.cold_hash : 0) &&
             "a field of the series record changed without MarkDirty");
#endif
      continue;
    }
    const std::string key = model_key + "/" + EscapeName(SeriesName(i));
    for (uint32_t b = 0; b < s.warmup_blocks; ++b) {
      deletes.push_back(fmt::format("{}{}{}", key, kWarmupSuffix, b));
    }
    s.warmup_blocks = 0;
    if (!s.cold_dirty) continue;
    s.cold_dirty = false;
    if (categorical) {
      // A categorical series is written whole (its counts are small and bounded): the record,
      // and the frozen baseline's key when it changes, which is once.
      CategoricalOf(s);
      if (s.frozen) {
        scratch_.clear();
        EncodeCategoricalBase(s, scratch_);
        const uint64_t hash = HashBytes(scratch_);
        if (hash != s.base_hash) {
          last_write_.dirty_bytes += static_cast<int64_t>(scratch_.size());
          puts.emplace_back(key + std::string(kBaseSuffix), scratch_);
          s.base_hash = hash;
          s.base_in_store = true;
        }
      } else {
        s.base_hash = 0;
        if (s.base_in_store) {
          deletes.push_back(key + std::string(kBaseSuffix));
          s.base_in_store = false;
        }
      }
      std::string value;
      EncodeCategoricalSeries(s, value);
      last_write_.dirty_bytes += static_cast<int64_t>(value.size());
      puts.emplace_back(key, std::move(value));
      s.cold_in_store = true;
      continue;
    }
    if (s.frozen) {
      scratch_.clear();
      EncodeBase(s, scratch_);
      const uint64_t hash = HashBytes(scratch_);
      if (hash != s.base_hash) {
        last_write_.dirty_bytes += static_cast<int64_t>(scratch_.size());
        puts.emplace_back(key + std::string(kBaseSuffix), scratch_);
        s.base_hash = hash;
        s.base_in_store = true;
      }
    } else {
      s.base_hash = 0;
      if (s.base_in_store) {
        deletes.push_back(key + std::string(kBaseSuffix));
        s.base_in_store = false;
      }
    }
    scratch_.clear();
    EncodeCold(s, scratch_);
    if (scratch_.empty()) {
      if (s.cold_in_store) deletes.push_back(key);
      s.cold_in_store = false;
      s.cold_hash = 0;
      continue;
    }
    const uint64_t hash = HashBytes(scratch_);
    if (s.cold_in_store && hash == s.cold_hash) continue;
    last_write_.dirty_bytes += static_cast<int64_t>(scratch_.size());
    puts.emplace_back(key, scratch_);
    s.cold_in_store = true;
    s.cold_hash = hash;
  }

  // Warmup segments: the values each series added since the last write, in one new key. When
  // the segments hold more values of series that no longer keep them than of series that do,
  // or a series started over, the values still kept are rewritten into one segment instead.
  int64_t saved_live = 0;
  int64_t kept = 0;
  bool restart = m.consolidate;
  for (SeriesState& s : m.series) {
    if (s.edges_ready) {
      s.warmup_saved = 0;
      s.warmup_saved_bytes = 0;
      continue;
    }
    if (s.warmup.size() < s.warmup_saved) restart = true;
    saved_live += s.warmup_saved;
    kept += s.warmup.size();
  }
  m.consolidate = false;
  const int64_t dead = m.seg_values - saved_live;
  if (m.seg_first != m.seg_next &&
      (restart || kept == 0 || (dead > saved_live && m.seg_values >= kMinSegmentValues))) {
    for (uint32_t seq = m.seg_first; seq < m.seg_next; ++seq) {
      deletes.push_back(fmt::format("{}/{}{}", model_key, kSegmentTag, seq));
    }
    m.seg_first = m.seg_next;
    m.seg_values = 0;
    for (SeriesState& s : m.series) {
      // Values new since the last write count as changes; those rewritten do not.
      const uint32_t rewritten = std::min(s.warmup_saved, s.warmup.size());
      s.warmup_saved = 0;
      s.warmup_saved_bytes = 0;
      if (rewritten > 0) {
        drift::ByteReader r(s.warmup.bytes());
        for (uint32_t k = 0; k < rewritten; ++k) (void)r.Decimal();
        last_write_.dirty_bytes -= static_cast<int64_t>(s.warmup.bytes().size() - r.remaining());
      }
    }
  }
  for (uint32_t seq : m.stale_segments) {
    deletes.push_back(fmt::format("{}/{}{}", model_key, kSegmentTag, seq));
  }
  m.stale_segments.clear();
  std::string segment;
  uint32_t pieces = 0;
  size_t segment_bytes = 8;
  for (size_t i = 0; i < m.series.size(); ++i) {
    const SeriesState& s = m.series[i];
    if (!s.edges_ready && s.warmup.size() > s.warmup_saved) {
      ++pieces;
      // Four varints and the values.
      segment_bytes += 40 + s.warmup.bytes().size() - s.warmup_saved_bytes;
    }
  }
  if (pieces > 0) {
    // Sized once: at 10,000 models, segments grown by doubling held 45 MB for 30 of values.
    segment.reserve(segment_bytes);
    drift::ByteWriter w(segment);
    w.U8(kSegmentEncodingVersion);
    w.Varint(pieces);
    for (size_t i = 0; i < m.series.size(); ++i) {
      SeriesState& s = m.series[i];
      if (s.edges_ready || s.warmup.size() <= s.warmup_saved) continue;
      const std::string_view values =
          std::string_view(s.warmup.bytes()).substr(s.warmup_saved_bytes);
      w.Varint(series_table_index_[i]);
      w.Varint(s.warmup_saved);
      w.Varint(s.warmup.size() - s.warmup_saved);
      w.Bytes(values);
      last_write_.dirty_bytes += static_cast<int64_t>(values.size());
      m.seg_values += s.warmup.size() - s.warmup_saved;
      s.warmup_saved = s.warmup.size();
      s.warmup_saved_bytes = static_cast<uint32_t>(s.warmup.bytes().size());
    }
    puts.emplace_back(fmt::format("{}/{}{}", model_key, kSegmentTag, m.seg_next), std::move(segment));
    ++m.seg_next;
  }

  // The model record: the roll-up, the segments' range and what values changed of each series.
  uint32_t entries = 0;
  std::string& body = scratch_;
  body.clear();
  drift::ByteWriter b(body);
  for (size_t i = 0; i < m.series.size(); ++i) {
    const uint32_t bits = HotSectionsOf(m.series[i]);
    if (bits == 0) continue;
    ++entries;
    b.Varint(series_table_index_[i]);
    EncodeHot(m.series[i], bits, body);
  }
  std::string record;
  record.reserve(64 + body.size());
  drift::ByteWriter w(record);
  w.U8(kModelEncodingVersion);
  static const AlertStateMachine kNoRollup;
  const bool rollup = !(m.rollup == kNoRollup) || m.rollup_incident != 0;
  w.Varint(rollup ? 1 : 0);
  if (rollup) {
    m.rollup.Encode(record);
    w.U64(m.rollup_incident);
  }
  w.Varint(m.seg_first);
  w.Varint(m.seg_next);
  w.Varint(entries);
  record.append(body);
  last_write_.dirty_bytes += static_cast<int64_t>(record.size());
  puts.emplace_back(model_key, std::move(record));
  m.record_in_store = true;
}

Status DriftMonitor::Restore(std::string_view key, std::string_view value) {
  if (!key.starts_with(kStateKeyPrefix)) {
    return MakeError(ErrorCode::kInvalidArgument, "drift: not a drift state key: '{}'", key);
  }
  if (key == kTableKey) {
    auto names = DecodeTable(value);
    if (!names) return tl::unexpected(names.error().Wrap(std::string(key)));
    if (table_resolved_once_) {
      // Read after the state was first used (unusual): it must be what is in use.
      if (names->size() > table_.size() || !std::equal(names->begin(), names->end(), table_.begin())) {
        return MakeError(ErrorCode::kCorruption, "drift: the series table was read too late");
      }
      return Ok();
    }
    restored_table_ = std::move(*names);
    table_from_store_ = true;
    return Ok();
  }
  const std::string_view rest = key.substr(kStateKeyPrefix.size());
  const size_t slash = rest.find('/');
  auto model_name = UnescapeName(rest.substr(0, slash));
  if (!model_name) return tl::unexpected(model_name.error());

  // The model may already be live (a restore after the first Observe is unusual but harmless).
  ModelState* m = nullptr;
  for (auto& live : models_) {
    if (live && live->name == *model_name) m = live.get();
  }
  if (m == nullptr) {
    auto& slot = pending_[*model_name];
    if (!slot) {
      slot = std::make_unique<ModelState>();
      slot->name = *model_name;
      slot->series.resize(series_names_.size() + 1);
    }
    m = slot.get();
  }
  auto model_pieces = [&]() -> ModelState::RestorePieces& {
    if (!m->restoring) m->restoring = std::make_unique<ModelState::RestorePieces>();
    return *m->restoring;
  };

  if (slash == std::string_view::npos) {
    m->record_in_store = true;
    if (!value.empty() && static_cast<uint8_t>(value[0]) == kModelEncodingVersion) {
      // Read once the whole state is there (it refers to series by the table's positions).
      ModelRecordHead head;
      SeriesState scratch;
      uint32_t bits = 0;
      uint32_t warmup = 0;
      auto checked = DecodeModelRecord(value, head, [&](uint32_t, drift::ByteReader& r) {
        scratch = SeriesState();
        return DecodeHot(r, scratch, bits, warmup);
      });
      if (!checked) return tl::unexpected(checked.error().Wrap(std::string(key)));
      model_pieces().record.assign(value);
      return Ok();
    }
    drift::ByteReader r(value);
    std::string buf;
    if (r.U8() != kRollupEncodingVersion || !ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) {
      return MakeError(ErrorCode::kCorruption, "drift: bad roll-up state for model '{}'",
                       *model_name);
    }
    auto rollup = AlertStateMachine::Decode(buf);
    if (!rollup) return tl::unexpected(rollup.error().Wrap(key));
    const uint64_t incident = r.U64();
    if (r.failed() || !r.at_end()) {
      return MakeError(ErrorCode::kCorruption, "drift: bad roll-up state for model '{}'",
                       *model_name);
    }
    m->rollup = *rollup;
    m->rollup_incident = incident;
    return Ok();
  }

  // "<series>", "<series>/base", "<series>/w<block>" (series names are escaped: no '/') or a
  // warmup segment "%w<seq>".
  std::string_view series_part = rest.substr(slash + 1);
  if (series_part.starts_with(kSegmentTag)) {
    const std::string_view digits = series_part.substr(kSegmentTag.size());
    uint32_t seq = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
      return MakeError(ErrorCode::kCorruption, "drift: bad warmup segment key '{}'", key);
    }
    auto checked = DecodeSegment(value, [](uint32_t, uint32_t, uint32_t, std::string_view) {
      return Ok();
    });
    if (!checked) return tl::unexpected(checked.error().Wrap(std::string(key)));
    model_pieces().segments[seq].assign(value);
    return Ok();
  }
  std::string_view piece;
  if (const size_t sub = series_part.find('/'); sub != std::string_view::npos) {
    piece = series_part.substr(sub);
    series_part = series_part.substr(0, sub);
  }
  auto series_name = UnescapeName(series_part);
  if (!series_name) return tl::unexpected(series_name.error());
  size_t index = series_names_.size();
  if (*series_name != kErrorSeries) {
    auto it = std::find(series_names_.begin(), series_names_.end(), *series_name);
    if (it == series_names_.end()) return Ok();  // series no longer watched
    index = static_cast<size_t>(it - series_names_.begin());
  }
  SeriesState& target = m->series[index];
  if (!target.restoring) target.restoring = std::make_unique<SeriesState::RestorePieces>();
  SeriesState::RestorePieces& pieces = *target.restoring;

  const bool categorical = index < series_kinds_.size() &&
                           series_kinds_[index] == SeriesKind::kCategorical;
  if (piece == kBaseSuffix) {
    if (categorical != IsCategoricalRecord(value)) {
      return MakeError(ErrorCode::kCorruption, "drift: state key '{}' is not of a {} series", key,
                       categorical ? "categorical" : "numeric");
    }
    SeriesState scratch;
    if (categorical) {
      if (auto st = DecodeCategoricalBase(value, CategoricalOf(scratch)); !st) {
        return tl::unexpected(st.error().Wrap(std::string(key)));
      }
    } else if (auto st = DecodeBase(value, scratch, kBinsLimit); !st) {
      return tl::unexpected(st.error().Wrap(std::string(key)));
    }
    target.base_in_store = true;
    pieces.base.assign(value);
    pieces.has_base = true;
  } else if (piece.starts_with(kWarmupSuffix)) {
    const std::string_view digits = piece.substr(kWarmupSuffix.size());
    uint32_t block = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), block);
    const uint32_t max_blocks =
        static_cast<uint32_t>(kMaxWarmupValues / kWarmupBlockValues + 1);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
        block >= max_blocks || value.size() % 8 != 0 || value.size() > 8 * kWarmupBlockValues) {
      return MakeError(ErrorCode::kCorruption, "drift: bad warmup block '{}' ({} bytes)", key,
                       value.size());
    }
    target.warmup_blocks = std::max(target.warmup_blocks, block + 1);
    if (pieces.blocks.size() <= block) {
      pieces.blocks.resize(block + 1);
      pieces.have_block.resize(block + 1, false);
    }
    pieces.blocks[block].assign(value);
    pieces.have_block[block] = true;
  } else if (piece.empty()) {
    SeriesState scratch;
    Status checked = Ok();
    if (categorical != IsCategoricalRecord(value)) {
      return MakeError(ErrorCode::kCorruption, "drift: state key '{}' is not of a {} series", key,
                       categorical ? "categorical" : "numeric");
    }
    if (categorical) {
      bool base_apart = false;
      checked = DecodeCategoricalSeries(value, scratch, base_apart);
    } else if (!value.empty() && static_cast<uint8_t>(value[0]) == kSeriesEncodingVersion) {
      checked = DecodeCold(value, scratch);
    } else {
      bool base_apart = false;
      uint32_t warmup = 0;
      checked = DecodeSeries(value, scratch, kBinsLimit, base_apart, warmup);
    }
    if (!checked) return tl::unexpected(checked.error().Wrap(std::string(key)));
    target.cold_in_store = true;
    pieces.record.assign(value);
    pieces.has_record = true;
  } else {
    return MakeError(ErrorCode::kCorruption, "drift: unknown state key '{}'", key);
  }
  return Ok();
}

Status DriftMonitor::CompleteModel(ModelState& m, bool lenient) {
  const bool any_series = std::any_of(m.series.begin(), m.series.end(),
                                      [](const SeriesState& s) { return s.restoring != nullptr; });
  if (!m.restoring && !any_series) return Ok();
  ResolveTable();
  std::unique_ptr<ModelState::RestorePieces> model = std::move(m.restoring);
  const size_t n = m.series.size();
  std::vector<std::unique_ptr<SeriesState::RestorePieces>> pieces(n);
  for (size_t i = 0; i < n; ++i) pieces[i] = std::move(m.series[i].restoring);

  // What each series' keys say, and the model's segments.
  struct Info {
    bool legacy = false;      // a record of versions 1 to 5 (everything in it)
    bool v6 = false;          // a series record of version 6
    bool base_apart = false;  // version 5: the frozen baseline is in the base key
    bool hot = false;         // an entry in the model record
    uint32_t hot_bits = 0;
    uint32_t warmup = 0;      // warmup values the record or the model record counts
    bool categorical = false;  // a categorical series: its record and base key hold it all
  };
  std::vector<Info> info(n);
  auto fresh_series = [](const SeriesState& old) {
    SeriesState fresh;
    fresh.warmup_blocks = old.warmup_blocks;
    fresh.base_in_store = old.base_in_store;
    fresh.cold_in_store = old.cold_in_store;
    return fresh;
  };
  auto name_of = [&](size_t i) { return std::string(SeriesName(i)); };

  auto assemble = [&]() -> Status {
    // 1. Series records (the series starts from what its record holds).
    bool any_v6 = false;
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      s = fresh_series(s);
      info[i].categorical =
          i < series_kinds_.size() && series_kinds_[i] == SeriesKind::kCategorical;
      if (!pieces[i] || !pieces[i]->has_record) continue;
      const std::string& record = pieces[i]->record;
      Status st = Ok();
      if (info[i].categorical) {
        bool base_apart = false;
        st = DecodeCategoricalSeries(record, s, base_apart);
        if (st && base_apart) {
          if (!pieces[i]->has_base) {
            return MakeError(ErrorCode::kCorruption,
                             "drift series state: the frozen baseline is missing (series '{}')",
                             name_of(i));
          }
          st = DecodeCategoricalBase(pieces[i]->base, CategoricalOf(s));
        }
      } else if (static_cast<uint8_t>(record[0]) == kSeriesEncodingVersion) {
        info[i].v6 = any_v6 = true;
        st = DecodeCold(record, s);
      } else {
        info[i].legacy = true;
        st = DecodeSeries(record, s, kBinsLimit, info[i].base_apart, info[i].warmup);
      }
      if (!st) return tl::unexpected(st.error().Wrap(fmt::format("series '{}'", name_of(i))));
    }
    // 2. The model record: the roll-up, the segments' range, each series' changing part.
    if (model && !model->record.empty()) {
      if (!table_from_store_) {
        return MakeError(ErrorCode::kCorruption, "drift: the series table is missing");
      }
      ModelRecordHead head;
      SeriesState scratch;
      DRIFTD_TRY(DecodeModelRecord(model->record, head,
                                   [&](uint32_t t, drift::ByteReader& r) -> Status {
        const int32_t i = t < table_series_.size() ? table_series_[t] : -1;
        uint32_t bits = 0;
        uint32_t warmup = 0;
        if (i < 0 || info[static_cast<size_t>(i)].legacy || info[static_cast<size_t>(i)].hot ||
            info[static_cast<size_t>(i)].categorical) {
          scratch = SeriesState();
          return DecodeHot(r, scratch, bits, warmup);
        }
        Info& in = info[static_cast<size_t>(i)];
        in.hot = true;
        return DecodeHot(r, m.series[static_cast<size_t>(i)], in.hot_bits, in.warmup);
      }));
      m.rollup = head.rollup;
      m.rollup_incident = head.rollup_incident;
      m.seg_first = head.seg_first;
      m.seg_next = head.seg_next;
    } else if (any_v6) {
      return MakeError(ErrorCode::kCorruption, "drift: the model record is missing");
    }
    // 3. Frozen baselines.
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (info[i].categorical) continue;
      const bool needs_base = s.frozen && (info[i].v6 || info[i].hot || info[i].base_apart);
      const bool has_base = pieces[i] && pieces[i]->has_base;
      if (needs_base && !has_base) {
        return MakeError(ErrorCode::kCorruption,
                         "drift series state: the frozen baseline is missing (series '{}')",
                         name_of(i));
      }
      if (needs_base) {
        if (auto st = DecodeBase(pieces[i]->base, s, kBinsLimit); !st) {
          return tl::unexpected(st.error().Wrap(fmt::format("series '{}'", name_of(i))));
        }
      }
    }
    // 4. Warmup values: version-5 blocks, or the segments of the model record's range.
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (!info[i].legacy || s.edges_ready || info[i].warmup == 0) continue;
      const uint32_t count = info[i].warmup;
      const uint32_t blocks = (count + kWarmupBlockValues - 1) / kWarmupBlockValues;
      for (uint32_t b = 0; b < blocks; ++b) {
        const size_t need = std::min<size_t>(kWarmupBlockValues, count - b * kWarmupBlockValues);
        if (b >= pieces[i]->blocks.size() || !pieces[i]->have_block[b] ||
            pieces[i]->blocks[b].size() < 8 * need) {
          return MakeError(ErrorCode::kCorruption,
                           "drift series state: warmup values are missing (series '{}')",
                           name_of(i));
        }
        drift::ByteReader r(pieces[i]->blocks[b]);
        for (size_t k = 0; k < need; ++k) s.warmup.Add(r.F64());
      }
    }
    if (model) {
      for (auto& [seq, bytes] : model->segments) {
        if (seq < m.seg_first || seq >= m.seg_next) {
          m.stale_segments.push_back(seq);
          continue;
        }
        DRIFTD_TRY(DecodeSegment(bytes, [&](uint32_t t, uint32_t first, uint32_t count,
                                            std::string_view values) -> Status {
          m.seg_values += count;
          const int32_t i = t < table_series_.size() ? table_series_[t] : -1;
          if (i < 0 || !info[static_cast<size_t>(i)].hot) return Ok();
          SeriesState& s = m.series[static_cast<size_t>(i)];
          if (s.edges_ready) return Ok();  // values of a warmup that is over
          if (first != s.warmup.size() || !s.warmup.Append(values, count)) {
            return MakeError(ErrorCode::kCorruption,
                             "drift series state: warmup values out of order (series '{}')",
                             name_of(static_cast<size_t>(i)));
          }
          return Ok();
        }));
      }
    }
    // New segments are numbered past any left-over one (a put and a delete of one key in a
    // batch would leave it deleted).
    if (!m.stale_segments.empty()) {
      const uint32_t top =
          *std::max_element(m.stale_segments.begin(), m.stale_segments.end()) + 1;
      if (top > m.seg_next) {
        if (m.seg_first == m.seg_next) m.seg_first = top;
        m.seg_next = top;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (info[i].hot && !s.edges_ready && s.warmup.size() != info[i].warmup) {
        return MakeError(ErrorCode::kCorruption,
                         "drift series state: warmup values are missing (series '{}')",
                         name_of(i));
      }
    }
    // 5. What follows from the rest, and the bookkeeping of what is in the store.
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (info[i].categorical) {
        if (s.cat) DRIFTD_TRY(CheckCategorical(s, name_of(i)));
        s.base_hash = 0;
        if (s.frozen && s.cat && pieces[i] && pieces[i]->has_base) {
          scratch_.clear();
          EncodeCategoricalBase(s, scratch_);
          s.base_hash = HashBytes(scratch_);
        }
        // The record is rewritten whole when the series next changes (cold_hash 0).
        s.cold_hash = 0;
        if (s.base_in_store && s.base_hash == 0) s.cold_dirty = true;  // a left-over base key
        if (s.warmup_blocks > 0) s.cold_dirty = true;
        s.dirty = false;
        continue;
      }
      if (!s.frozen && !s.edges_ready && !(info[i].hot && !(info[i].hot_bits & kHotBaseline))) {
        // A baseline read with the values it was made of: kept up to date from now on only if
        // it is not theirs.
        s.baseline_from_warmup = s.baseline == MomentsOf(s.warmup, edge_values_);
        if (s.baseline_from_warmup) s.baseline.Clear();
      }
      if (has_histogram_ && i < series_names_.size() && s.frozen &&
          s.eval().window_counts.empty() && !(info[i].hot_bits & kHotWindow) &&
          (info[i].v6 || info[i].hot)) {
        s.mut_eval().window_counts.assign(s.edges.bins(), 0);  // an empty window
      }
      DRIFTD_TRY(CheckHistograms(s, name_of(i)));
      // A histogram that the current configuration does not use is dropped; one it needs but
      // the state lacks is rebuilt empty (the baseline then has no reference shares).
      if (has_histogram_ && i < series_names_.size() && s.frozen &&
          s.eval().window_counts.size() != s.edges.bins()) {
        s.mut_eval().window_counts.assign(s.edges.bins(), 0);
        s.ref_counts.assign(s.edges.bins(), 0);
      }
      if (s.frozen && pieces[i] && pieces[i]->has_base &&
          (info[i].v6 || info[i].hot || info[i].base_apart)) {
        scratch_.clear();
        EncodeBase(s, scratch_);
        s.base_hash = HashBytes(scratch_);
      }
      if (info[i].legacy) {
        // Written in the current layout when the model is next written: the record, a baseline
        // key, the warmup values into a segment, the blocks deleted.
        s.cold_dirty = true;
        s.warmup_saved = 0;
        s.warmup_saved_bytes = 0;
      } else {
        scratch_.clear();
        EncodeCold(s, scratch_);
        s.cold_hash = scratch_.empty() ? 0 : HashBytes(scratch_);
        if (s.cold_in_store && !info[i].v6) s.cold_dirty = true;  // a left-over record
        s.warmup_saved = s.warmup.size();
        s.warmup_saved_bytes = static_cast<uint32_t>(s.warmup.bytes().size());
      }
      if (s.base_in_store && s.base_hash == 0) s.cold_dirty = true;  // a left-over base key
      if (s.warmup_blocks > 0 && !info[i].legacy) s.cold_dirty = true;
      s.dirty = false;
    }
    return Ok();
  };

  Status st = assemble();
  if (st) return Ok();
  if (!lenient) return tl::unexpected(st.error().Wrap(fmt::format("model '{}'", m.name)));
  // The model starts afresh; its keys go with its first write.
  for (SeriesState& s : m.series) {
    s = fresh_series(s);
    s.cold_dirty = s.cold_in_store || s.base_in_store || s.warmup_blocks > 0;
  }
  m.rollup = AlertStateMachine();
  m.rollup_incident = 0;
  m.stale_segments.clear();
  uint32_t top = 0;
  if (model) {
    for (const auto& [seq, bytes] : model->segments) {
      m.stale_segments.push_back(seq);
      top = std::max(top, seq + 1);
    }
  }
  m.seg_first = m.seg_next = std::max(top, m.seg_next);
  m.seg_values = 0;
  return Ok();
}

Status DriftMonitor::FinishRestore() {
  for (auto& [name, m] : pending_) DRIFTD_TRY(CompleteModel(*m, /*lenient=*/false));
  for (auto& m : models_) {
    if (m) DRIFTD_TRY(CompleteModel(*m, /*lenient=*/false));
  }
  return Ok();
}

void DriftMonitor::ObserveReference(uint32_t model, const std::string& model_name, size_t series,
                                    double value) {
  if (!std::isfinite(value)) {
    ++skipped_values_;
    return;
  }
  if (series >= series_names_.size() || series_kinds_[series] == SeriesKind::kCategorical) return;
  ModelState& m = ModelFor(model, model_name);
  SeriesState& s = m.series[series];
  if (s.frozen) return;  // statistics given already, or restored
  // Reference values are not part of the stream: they take no value index, so the stream's
  // windows are numbered from 0.
  MarkDirty(m, series);
  AddBaselineValue(s, value);
}

void DriftMonitor::ObserveReferenceLabel(uint32_t model, const std::string& model_name,
                                         double prediction, double label) {
  if (!has_error_rate_) return;
  if (!std::isfinite(prediction) || !std::isfinite(label)) {
    ++skipped_values_;
    return;
  }
  ModelState& m = ModelFor(model, model_name);
  const size_t series = series_names_.size();
  SeriesState& s = m.series[series];
  if (s.frozen) return;
  MarkDirty(m, series);
  s.mut_eval().err_baseline.Add(prediction, label, error_threshold_);
}

Status DriftMonitor::SetReference(uint32_t model, const std::string& model_name, size_t series,
                                  const Moments& moments, std::vector<double> inner_edges,
                                  std::vector<int64_t> counts,
                                  const Winsorized* winsorized) {
  if (series >= series_names_.size()) {
    return MakeError(ErrorCode::kInvalidArgument, "drift: no series {}", series);
  }
  const std::string& name = series_names_[series];
  auto bad = [&](std::string_view why) {
    return MakeError(ErrorCode::kConfig, "reference of model '{}' series '{}': {}", model_name,
                     name, why);
  };
  if (series_kinds_[series] == SeriesKind::kCategorical) {
    return bad("a string series' reference gives its categories (\"categories\", \"other\")");
  }
  if (moments.count() < std::max<int64_t>(1, spec_.min_samples)) {
    return bad(fmt::format("n = {} is below minSamples ({}): it could never be compared with",
                           moments.count(), spec_.min_samples));
  }
  const size_t edge_count = inner_edges.size();
  BinEdges edges(std::move(inner_edges));
  if (edges.inner().size() != edge_count) {
    return bad("edges must be finite and strictly increasing");
  }
  if (!counts.empty() && counts.size() != edges.bins()) {
    return bad(fmt::format("{} edges make {} bins, but there are {} counts", edge_count,
                           edges.bins(), counts.size()));
  }
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) return bad("counts must not be negative");
    total += c;
  }
  if (has_histogram_ && series_kinds_[series] == SeriesKind::kNumeric &&
      (counts.empty() || total == 0)) {
    return bad(
        "the psi, js and ks detectors need 'edges' and 'counts' (or remove them from "
        "drift.detectors)");
  }
  if (winsorized != nullptr) {
    const HigherMoments& w = winsorized->moments;
    if (w.count() != moments.count()) {
      return bad(fmt::format("the winsorized values' n ({}) must be n ({})", w.count(),
                             moments.count()));
    }
    if (std::isnan(winsorized->low) || std::isnan(winsorized->high) ||
        !(winsorized->low <= winsorized->high)) {
      return bad("winsorized 'low' must not be above 'high'");
    }
    if (!std::isfinite(w.mean()) || !std::isfinite(w.m2()) || !std::isfinite(w.Skewness()) ||
        !std::isfinite(w.Kurtosis()) || w.m2() < 0 || w.Kurtosis() < 0) {
      return bad("winsorized moments must be finite (stddev and kurtosis not negative)");
    }
  }
  ModelState& m = ModelFor(model, model_name);
  SeriesState& s = m.series[series];
  MarkDirty(m, series);
  s.baseline = moments;
  if (winsorized != nullptr) {
    s.baseline_c = winsorized->moments;
    s.clip_lo = winsorized->low;
    s.clip_hi = winsorized->high;
  } else {
    // Statistics without their winsorized values: nothing is clipped, the shape is taken as
    // normal.
    s.baseline_c = NormalShaped(moments);
    s.clip_lo = -kInf;
    s.clip_hi = kInf;
  }
  s.edges = std::move(edges);
  s.ref_counts = std::move(counts);
  s.mut_eval().window_counts.assign(s.edges.bins(), 0);
  s.warmup.Clear();
  s.edges_ready = true;
  s.frozen = true;
  s.prepared = false;
  return Ok();
}

Status DriftMonitor::SetErrorReference(uint32_t model, const std::string& model_name,
                                       const ErrorSummary& summary) {
  if (summary.count() < std::max<int64_t>(1, spec_.min_samples) || summary.errors < 0 ||
      summary.errors > summary.count()) {
    return MakeError(ErrorCode::kConfig,
                     "reference of model '{}' series 'error': needs n >= minSamples ({}) and an "
                     "error_rate in [0, 1]",
                     model_name, spec_.min_samples);
  }
  ModelState& m = ModelFor(model, model_name);
  const size_t series = series_names_.size();
  SeriesState& s = m.series[series];
  MarkDirty(m, series);
  s.mut_eval().err_baseline = summary;
  s.frozen = true;
  return Ok();
}

Status DriftMonitor::FreezeReferences() {
  for (auto& mp : models_) {
    if (!mp) continue;
    ModelState& m = *mp;
    for (size_t i = 0; i < m.series.size(); ++i) {
      SeriesState& s = m.series[i];
      const bool is_error = i == series_names_.size();
      const int64_t n = is_error ? s.eval().err_baseline.count()
                        : s.cat  ? s.cat->baseline_n()
                                 : BaselineCount(s);
      if (s.frozen || n == 0) continue;
      if (n < std::max<int64_t>(1, spec_.min_samples)) {
        return MakeError(ErrorCode::kConfig,
                         "reference of model '{}' series '{}' has {} values, below minSamples "
                         "({}): it could never be compared with",
                         m.name, is_error ? std::string(kErrorSeries) : series_names_[i], n,
                         spec_.min_samples);
      }
      if (is_error) {
        s.frozen = true;
      } else if (s.cat) {
        FreezeCategorical(s);
      } else {
        FreezeBaseline(s);
      }
    }
  }
  return Ok();
}

std::vector<DriftMonitor::ModelStats> DriftMonitor::model_stats() const {
  std::vector<ModelStats> out;
  // Restored models not seen since the restart count too: their state is the checkpoint's.
  std::vector<const ModelState*> all;
  for (const auto& m : models_) {
    if (m) all.push_back(m.get());
  }
  for (const auto& [name, m] : pending_) all.push_back(m.get());
  for (const ModelState* m : all) {
    ModelStats st;
    st.model = m->name;
    st.series = static_cast<int64_t>(m->series.size());
    for (const SeriesState& s : m->series) {
      st.values += s.seen;
      if (s.alert.state() == AlertLevel::kAlert) ++st.series_in_alert;
      if (s.alert.state() == AlertLevel::kWarn) ++st.series_in_warn;
    }
    st.rollup_alert = m->rollup.state() == AlertLevel::kAlert;
    out.push_back(std::move(st));
  }
  return out;
}

std::vector<DriftMonitor::BaselineExport> DriftMonitor::ExportBaselines() const {
  std::vector<BaselineExport> out;
  for (const auto& m : models_) {
    if (!m) continue;
    for (size_t i = 0; i < m->series.size(); ++i) {
      const SeriesState& s = m->series[i];
      if (!s.frozen) continue;
      BaselineExport e;
      e.model = m->name;
      if (i == series_names_.size()) {
        if (s.eval().err_baseline.count() == 0) continue;
        e.series = std::string(kErrorSeries);
        e.moments = s.eval().err_baseline.abs_error;
        e.errors = s.eval().err_baseline.errors;
      } else if (s.cat) {
        const CategoricalState& c = *s.cat;
        e.series = series_names_[i];
        e.kind = SeriesKind::kCategorical;
        for (size_t t = 0; t < c.set.tracked(); ++t) {
          e.categorical.categories.emplace_back(c.set.name(t), c.ref[t]);
        }
        e.categorical.other = c.ref[c.set.other()] + c.ref[c.set.unseen()];
        e.categorical.seen = c.set.seen();
        e.categorical.unseen = c.ref_unseen;
        e.categorical.unseen_n = c.ref_unseen_n;
      } else {
        e.series = series_names_[i];
        e.kind = series_kinds_[i];
        e.moments = s.baseline;
        e.inner_edges = s.edges.inner();
        e.counts = s.ref_counts;
        e.winsorized.low = s.clip_lo;
        e.winsorized.high = s.clip_hi;
        e.winsorized.moments = s.baseline_c;
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

bool DriftMonitor::ResetBaselines(const std::string& model) {
  ModelState* m = nullptr;
  for (auto& live : models_) {
    if (live && live->name == model) m = live.get();
  }
  if (m == nullptr) {
    auto it = pending_.find(model);
    if (it == pending_.end()) return false;
    m = it->second.get();
  }
  for (size_t i = 0; i < m->series.size(); ++i) {
    SeriesState& s = m->series[i];
    SeriesState fresh;
    fresh.seen = s.seen;
    fresh.alert = s.alert;
    // The incident id outlives the reset; a series that never had one stays without
    // evaluation state.
    if (s.eval().incident != 0) fresh.mut_eval().incident = s.eval().incident;
    // The keys it wrote, for the next write to replace or delete.
    fresh.warmup_blocks = s.warmup_blocks;
    fresh.base_in_store = s.base_in_store;
    fresh.base_hash = s.base_hash;
    fresh.cold_in_store = s.cold_in_store;
    fresh.cold_hash = s.cold_hash;
    s = std::move(fresh);
    s.dirty = false;
    MarkDirty(*m, i);
  }
  // Warmups start again at their first value: the segments' values are rewritten.
  m->consolidate = true;
  return true;
}

DriftMonitorStats DriftMonitor::stats() const {
  DriftMonitorStats st;
  for (const auto& m : models_) {
    if (!m) continue;
    ++st.models;
    for (const SeriesState& s : m->series) {
      if (s.alert.state() == AlertLevel::kAlert) ++st.series_in_alert;
    }
  }
  st.windows_evaluated = windows_evaluated_;
  st.skipped_values = skipped_values_;
  st.skipped_labels = skipped_labels_;
  st.late_values = late_values_;
  st.values_without_time = values_without_time_;
  return st;
}

namespace {

void AppendTime(JsonObject& obj, std::string_view key, int64_t us) {
  if (ValidTime(us)) {
    obj.Timestamp(key, us);
  } else {
    obj.Null(key);
  }
}

}  // namespace

namespace {

// "key": [{...}, ...], each object written by `write`; nothing when `items` is empty.
template <typename T, typename Write>
void ObjectArray(JsonObject& obj, std::string_view key, const std::vector<T>& items,
                 const Write& write) {
  if (items.empty()) return;
  std::string arr = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) arr.push_back(',');
    JsonObject d(arr);
    write(d, items[i]);
    d.Close();
  }
  arr.push_back(']');
  obj.Raw(key, arr);
}

}  // namespace

std::string AlertEvent::ToJson() const {
  std::string out;
  out.reserve(1024);
  JsonObject obj(out);
  obj.String("alert_id", alert_id);
  obj.String("incident_id", incident_id);
  obj.String("level", ToString(level));
  obj.String("previous_level", ToString(previous_level));
  obj.String("model", model);
  if (!segment.empty()) obj.String("segment", segment);
  obj.String("series", series);
  // Data quality (a feature arriving null, malformed records) or distribution drift: different
  // owners act on them.
  obj.String("kind", IsDataQuality(series_kind) ? "data_quality" : "drift");
  obj.String("detector", detector);
  obj.Number("statistic", statistic);
  obj.Number("threshold", threshold);
  if (series != kRollupSeries) obj.Number("score", score);
  {
    std::string w;
    JsonObject win(w);
    win.Int("start_record", window_start_record);
    win.Int("end_record", window_end_record);
    AppendTime(win, "start_time", window_start_us);
    AppendTime(win, "end_time", window_end_us);
    win.Int("n", window_n);
    // A categorical series has counts, not a mean; a rate series' mean is its rate.
    if (window_n > 0 && series_kind != SeriesKind::kCategorical) {
      win.Number("mean", window_mean);
      win.Number("stddev", window_stddev);
    }
    win.Close();
    obj.Raw("window", w);
  }
  if (series != kRollupSeries) {
    std::string b;
    JsonObject base(b);
    base.String("type", ToString(baseline_kind));
    base.Int("n", baseline_n);
    if (series_kind != SeriesKind::kCategorical) {
      base.Number("mean", baseline_mean);
      base.Number("stddev", baseline_stddev);
    }
    base.Close();
    obj.Raw("baseline", b);
  }
  if (!detectors.empty()) {
    std::string arr = "[";
    for (size_t i = 0; i < detectors.size(); ++i) {
      if (i > 0) arr.push_back(',');
      const DetectorReading& r = detectors[i];
      JsonObject d(arr);
      d.String("detector", r.detector);
      d.Number("statistic", r.statistic);
      d.Number("score", r.score);
      d.Number("warn", r.warn);
      d.Number("alert", r.alert);
      d.Number("warn_threshold", r.warn_threshold);
      d.Number("alert_threshold", r.alert_threshold);
      d.Number("effect", r.effect);
      d.Number("min_effect", r.min_effect);
      d.String("level", ToString(r.level));
      // The effect floor is stated when it held a significant reading down.
      if (r.held_from != AlertLevel::kOk) d.String("held_by_min_effect", ToString(r.held_from));
      for (const auto& [name, value] : r.extras) d.Number(name, value);
      d.Close();
    }
    arr.push_back(']');
    obj.Raw("detectors", arr);
  }
  ObjectArray(obj, "top_bins", top_bins, [](JsonObject& d, const BinChange& b) {
    d.Int("bin", b.bin);
    d.Number("lower", b.lower);
    d.Number("upper", b.upper);
    d.Number("baseline_share", b.baseline_share);
    d.Number("window_share", b.window_share);
    d.Number("psi_term", b.psi_term);
  });
  ObjectArray(obj, "top_categories", top_categories, [](JsonObject& d, const CategoryChange& c) {
    d.String("category", c.category);
    d.Number("baseline_share", c.baseline_share);
    d.Number("window_share", c.window_share);
    d.Number("psi_term", c.psi_term);
  });
  ObjectArray(obj, "new_categories", new_categories, [](JsonObject& d, const NewCategory& c) {
    d.String("category", c.category);
    d.Number("window_share", c.window_share);
  });
  if (!alerting_series.empty()) {
    std::string arr = "[";
    for (size_t i = 0; i < alerting_series.size(); ++i) {
      if (i > 0) arr.push_back(',');
      AppendJsonString(arr, alerting_series[i]);
    }
    arr.push_back(']');
    obj.Raw("alerting_series", arr);
  }
  if (!trigger_series.empty()) obj.String("trigger_series", trigger_series);
  obj.Int("batch_id", batch_id);
  obj.Close();
  return out;
}

// In step with ToJson above.
RowShape AlertRowShape() {
  using Kind = ShapeType::Kind;
  auto member = [](std::string name, Kind kind, bool nullable = false) {
    return ShapeField{std::move(name), ShapeType::Scalar(kind, nullable), {}};
  };
  ShapeType bin = ShapeType::Record(
      "BinChange", {member("bin", Kind::kLong), member("lower", Kind::kDouble, true),
                    member("upper", Kind::kDouble, true),
                    member("baseline_share", Kind::kDouble, true),
                    member("window_share", Kind::kDouble, true),
                    member("psi_term", Kind::kDouble, true)});
  ShapeType category = ShapeType::Record(
      "CategoryChange", {member("category", Kind::kString),
                         member("baseline_share", Kind::kDouble, true),
                         member("window_share", Kind::kDouble, true),
                         member("psi_term", Kind::kDouble, true)});
  ShapeType new_category = ShapeType::Record(
      "NewCategory",
      {member("category", Kind::kString), member("window_share", Kind::kDouble, true)});
  return ShapeType::Record(
      "Alert",
      {member("alert_id", Kind::kString), member("incident_id", Kind::kString),
       member("level", Kind::kString), member("previous_level", Kind::kString),
       member("model", Kind::kString), member("segment", Kind::kString, /*nullable=*/true),
       member("series", Kind::kString), member("kind", Kind::kString, /*nullable=*/true),  // a default for readers of older rows
       member("detector", Kind::kString), member("statistic", Kind::kDouble, true),
       member("threshold", Kind::kDouble, true), member("score", Kind::kDouble, true),
       {"window", EvaluationWindowShape(), {}},
       {"baseline", BaselineShape(/*nullable=*/true), {}},
       {"detectors", ShapeType::Array(DetectorReadingShape(), /*nullable=*/true), {}},
       {"top_bins", ShapeType::Array(std::move(bin), /*nullable=*/true), {}},
       {"top_categories", ShapeType::Array(std::move(category), /*nullable=*/true), {}},
       {"new_categories", ShapeType::Array(std::move(new_category), /*nullable=*/true), {}},
       {"alerting_series", ShapeType::Array(ShapeType::Scalar(Kind::kString), true), {}},
       member("trigger_series", Kind::kString, true), member("batch_id", Kind::kLong)});
}

}  // namespace driftd
