// The drift monitor's own parts (not its public surface, engine/drift/monitor.h): the state of a
// model and of each of its series, what an evaluation decides with, and the helpers the monitor's
// files share. Included only by engine/drift/monitor*.cc and alert_rows.cc:
//   monitor.cc             construction, thresholds, feeding values (Observe*), event-time
//                          windows, warmup and baselines, the batch's end (Evaluate), reference
//                          baselines, statistics
//   monitor_windows.cc     a closed window's evaluation: detectors, verdicts, incidents, alert
//                          transitions, the error series, the model roll-up
//   monitor_categorical.cc categorical and rate series: category cells, their windows and
//                          evaluation
//   monitor_layout.cc/.h   the persisted layout: every record version (1 to 6) read, version 6
//                          written
//   monitor_persist.cc     what a batch writes (CollectDirty) and reading a checkpoint back
//                          (Restore, FinishRestore)
//   alert_rows.cc          AlertEvent as the alerts stream's JSON rows and their shape
// Not thread-safe, as the monitor.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "engine/codec.h"
#include "engine/drift/codec.h"
#include "engine/drift/detector_states.h"
#include "engine/drift/monitor.h"
#include "engine/drift/value_sample.h"

namespace driftd {

namespace monitor_detail {

// Version 3: winsorized moments, fences, detector state (kOneRecordStateBytes), look-back
// windows, incident evidence and seasonal phases; version 4 the value sample of each open
// event-time window of a warmup; version 5 keeps the frozen baseline in a key of its own
// ("<series>/base", kBaseEncodingVersion) and the warmup values in blocks ("<series>/w<k>"), the
// record only their count. Version 6 splits a series between the model's record (what every
// value changes: counts, the current window, detector states' part that values change;
// kModelEncodingVersion) and its own record (what changes when a window closes or an alert
// moves), writes only the sections that differ from a new series', and keeps warmup values in
// per-model segments ("<model>/%w<seq>") in a compact decimal form. Versions 1 and 2 (no such
// fields; 2 adds the open event-time windows) are still read: their baselines are taken as
// unwinsorized and normal-shaped. Versions 1 to 4 hold everything in one record. Every older
// version is rewritten in version 6 when its model is next written.
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

inline bool ValidTime(int64_t us) { return us != INT64_MIN; }

inline uint64_t Fnv1a(std::initializer_list<std::string_view> parts) {
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

inline std::string HexId(uint64_t id) { return fmt::format("{:016x}", id); }

inline uint64_t AlertId(std::string_view model, std::string_view series, std::string_view detector,
                 AlertLevel level, int64_t window_start) {
  const std::string start = std::to_string(window_start);
  return Fnv1a({model, series, detector, ToString(level), start});
}

// Model and series names in state keys: engine/codec.h's key-path escaping.
using codec::EscapeKeyPart;
using codec::UnescapeKeyPart;

/// Order of readings for choosing the detector that decided an evaluation: level first, then
/// score, then how far past its threshold the statistic is.
inline double Severity(const DetectorReading& r) {
  const double threshold = r.level == AlertLevel::kAlert ? r.alert_threshold : r.warn_threshold;
  const double ratio = threshold > 0 ? r.statistic / threshold : r.statistic;
  return static_cast<double>(r.level) * 1e9 + r.score * 1e4 + std::clamp(ratio, 0.0, 1e3);
}

inline void EncodeCounts(drift::ByteWriter& w, const std::vector<int64_t>& counts) {
  w.U32(static_cast<uint32_t>(counts.size()));
  for (int64_t c : counts) w.I64(c);
}

inline bool DecodeCounts(drift::ByteReader& r, std::vector<int64_t>& counts) {
  const uint32_t n = r.U32();
  if (n > r.remaining() / 8) return false;
  counts.resize(n);
  for (auto& c : counts) c = r.I64();
  return !r.failed();
}

/// Exclusive end of a record window's time span at the payload's millisecond resolution.
inline int64_t ExclusiveEndUs(int64_t last_us) {
  if (!ValidTime(last_us)) return INT64_MIN;
  const int64_t ms = last_us >= 0 ? last_us / 1000 : -((-last_us + 999) / 1000);
  return (ms + 1) * 1000;
}

/// A window's raw values as Moments (its count, mean and M2; min and max are not kept).
inline Moments RawMoments(const PowerSums& sums) {
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

/// A part of a series' state that most series never use (an incident's evidence, the error
/// series' summaries), held behind a pointer: made on the first write, read as its default
/// until then. A copy is deep. At 130,000 series the parts held inline took ~30 MB.
template <typename T>
class Boxed {
 public:
  Boxed() = default;
  Boxed(const Boxed& other) : value_(other.value_ ? std::make_unique<T>(*other.value_) : nullptr) {}
  Boxed& operator=(const Boxed& other) {
    if (this != &other) value_ = other.value_ ? std::make_unique<T>(*other.value_) : nullptr;
    return *this;
  }
  Boxed(Boxed&&) noexcept = default;
  Boxed& operator=(Boxed&&) noexcept = default;

  const T& operator*() const { return value_ ? *value_ : Default(); }
  const T* operator->() const { return &**this; }
  /// The part to write, made (as T's default) if there was none.
  T& mut() {
    if (!value_) value_ = std::make_unique<T>();
    return *value_;
  }
  /// Back to the default, releasing the memory.
  void reset() { value_.reset(); }

 private:
  static const T& Default() {
    static const T kDefault{};
    return kDefault;
  }
  std::unique_ptr<T> value_;
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

// ---- Window logic, written once for every kind of series -----------------------------------
// Numeric, rate and categorical series differ in what a value adds to a window (power sums and
// bin counts, or category cells) and what the detectors read; where a value goes, when a
// window's event-time span grows, and when a warmup baseline is complete are the same for all
// and decided here (monitor.cc and monitor_categorical.cc call these in their per-value paths;
// everything is inline, no call per value goes through a pointer).

/// Where a value goes with event-time windows: the start of its window [start, start + size_us)
/// (floor division: windows before the epoch start at multiples of the size too), or nothing
/// for a value without an event time (counted in `without_time`) or whose window is at or behind
/// the watermark it is judged by, its partition's just before it or the query's (counted in
/// `late`).
inline std::optional<int64_t> EventWindowOf(int64_t event_time_us, int64_t late_before_us,
                                            int64_t watermark_us, int64_t size_us,
                                            int64_t& without_time, int64_t& late) {
  if (!ValidTime(event_time_us)) {
    ++without_time;
    return std::nullopt;
  }
  int64_t start = event_time_us / size_us * size_us;
  if (start > event_time_us) start -= size_us;
  const int64_t closed_before = std::max(late_before_us, watermark_us);
  if (ValidTime(closed_before) && start + size_us <= closed_before) {
    ++late;
    return std::nullopt;
  }
  return start;
}

/// The open event-time window of `open` (kept in start order, so closing walks from the front)
/// that starts at `start`; `make()` makes it, empty, when there is none.
template <typename Window, typename Make>
Window& OpenWindowAt(std::vector<Window>& open, int64_t start, const Make& make) {
  for (Window& w : open) {
    if (w.start_us == start) return w;
  }
  Window w = make();
  w.start_us = start;
  auto at = std::find_if(open.begin(), open.end(),
                         [&](const Window& o) { return o.start_us > start; });
  return *open.insert(at, std::move(w));
}

/// Widens the event-time span [min_us, max_us] of a window's values (INT64_MIN: none yet) by a
/// value's time; a value without one leaves it.
inline void WidenSpan(int64_t& min_us, int64_t& max_us, int64_t event_time_us) {
  if (!ValidTime(event_time_us)) return;
  if (!ValidTime(min_us) || event_time_us < min_us) min_us = event_time_us;
  if (!ValidTime(max_us) || event_time_us > max_us) max_us = event_time_us;
}

/// When a warmup baseline is complete, whatever the series holds: after baseline.records
/// values, or with a duration, once event time has run that long past the series' first value
/// and at least minSamples values came.
struct WarmupRule {
  bool by_duration = false;
  int64_t duration_us = 0;
  int64_t records = 0;
  int64_t min_samples = 1;

  static WarmupRule Of(const DriftSpec& spec) {
    WarmupRule rule;
    rule.by_duration = spec.baseline.kind == BaselineKind::kWarmup && spec.baseline.duration_ms > 0;
    rule.duration_us = spec.baseline.duration_ms * 1000;
    rule.records = spec.baseline.records;
    rule.min_samples = std::max<int64_t>(1, spec.min_samples);
    return rule;
  }
  /// Record windows, before a value at `event_time_us` joins a baseline of `count` values:
  /// whether the baseline freezes first (by duration; the value is then the first of the first
  /// window). The duration's clock starts at the series' first value (`first_event_us`); without
  /// an event time there is no clock to measure it by, and the record count decides.
  bool FreezesBefore(int64_t& first_event_us, int64_t event_time_us, int64_t count) const {
    if (!by_duration) return false;
    if (!ValidTime(event_time_us)) return count >= records;
    if (!ValidTime(first_event_us)) first_event_us = event_time_us;
    return event_time_us >= first_event_us + duration_us && count >= min_samples;
  }
  /// Record windows, after a value joined a baseline of `count` values: whether it is full.
  bool FullAfter(int64_t count) const { return !by_duration && count >= records; }
  /// Event-time windows: whether the baseline is complete once the warmup window ending at
  /// `window_end_us` closed with it holding `count` values.
  bool CompleteAfterWindow(int64_t first_event_us, int64_t window_end_us, int64_t count) const {
    return by_duration ? window_end_us - first_event_us >= duration_us && count >= min_samples
                       : count >= records;
  }
};

}  // namespace monitor_detail

// The monitor's files read these helpers and types unqualified.
using namespace monitor_detail;  // NOLINT(google-build-using-namespace)

struct DriftMonitor::Thresholds {
  double warn = 0;
  double alert = 0;
};

struct DriftMonitor::SeriesState {
  /// What a series has once it is evaluated (its windows, detector state, winsorized baseline,
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
    /// The states of the configured detectors that keep one (DetectorSlots).
    DetectorStates detector_states;
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
    uint64_t incident = 0;
    Boxed<Incident> inc;
    Boxed<ErrorSummary> err_baseline;  // the error series' only
    Boxed<ErrorSummary> err_window;
  };

  // ---- what every value touches, first (a few cache lines) ----
  bool frozen = false;
  bool dirty = false;
  /// The detector states are set up from the frozen baseline (Prepare): derived, not persisted.
  bool prepared = false;
  bool edges_ready = false;
  /// While the edges are not fixed, `baseline` is not kept up to date: it is the moments of
  /// `warmup`'s values added in order, computed when the edges are fixed (BaselineOf), so a
  /// warmup value costs an append. False only for state restored from a layout whose baseline
  /// did not match its values (then `baseline` is kept).
  bool baseline_from_warmup = true;
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
  /// Releases the parts of `evaluation` that hold their defaults (what older layouts, which
  /// wrote every part, restore for every series). In monitor_layout.cc.
  void ReleaseDefaultParts();
  // ---- the rest ----
  int64_t first_event_us = INT64_MIN;
  Moments baseline;
  /// Baseline of winsorized values: what the mean and spread tests and detector states compare
  /// with.
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

namespace monitor_detail {
inline const DriftMonitor::SeriesState::Evaluation kNoEvaluation;
}  // namespace monitor_detail

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

namespace monitor_detail {

/// Values in the series' baseline so far.
inline int64_t BaselineCount(const DriftMonitor::SeriesState& s) {
  return !s.edges_ready && s.baseline_from_warmup ? static_cast<int64_t>(s.warmup.size())
                                                  : s.baseline.count();
}

}  // namespace monitor_detail

/// One evaluation's outcome before the state machine: readings, the worst level, the lead.
struct DriftMonitor::Verdict {
  std::vector<DetectorReading>* readings = nullptr;
  std::vector<size_t> detector_of;  // detector index of each reading
  AlertLevel observed = AlertLevel::kOk;
  AlertLevel window_level = AlertLevel::kOk;
  int lead = -1;  // index into readings
  bool immediate = false;
  /// A detector fed per value crossing a level between window ends: no window to weigh as
  /// evidence.
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

}  // namespace driftd
