#include "engine/drift/monitor.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "engine/drift/codec.h"
#include "engine/drift/value_sample.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

// Version 3: winsorized moments, fences, the CUSUM, look-back windows, incident evidence and
// seasonal phases; version 4 the value sample of each open event-time window of a warmup;
// version 5 keeps the frozen baseline in a key of its own ("<series>/base", kBaseEncodingVersion)
// and the warmup values in blocks ("<series>/w<k>"), the record only their count. Versions 1
// and 2 (no such fields; 2 adds the open event-time windows) are still read: their baselines
// are taken as unwinsorized and normal-shaped. Versions 1 to 4 hold everything in one record.
constexpr uint8_t kSeriesEncodingVersion = 5;
constexpr uint8_t kBaseEncodingVersion = 1;
constexpr uint8_t kBaseApart = 4;  // series flag: the frozen baseline is in "<series>/base"
constexpr uint8_t kRollupEncodingVersion = 1;
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

}  // namespace

struct DriftMonitor::SeriesState {
  // ---- what every value touches, first (a few cache lines) ----
  bool frozen = false;
  bool dirty = false;
  /// Derived from the baseline (Prepare), not persisted.
  bool prepared = false;
  AlertLevel cusum_seen = AlertLevel::kOk;
  /// Values (or labeled records, for the error series) accepted so far: the next value's index.
  int64_t seen = 0;
  /// The current record window: raw values and winsorized values (clamped to [clip_lo,
  /// clip_hi], Tukey's outer fences of the first warmup values), as power sums around the
  /// baseline's mean (no division per value).
  PowerSums window_raw;
  PowerSums window_sums;
  double clip_lo = -kInf;
  double clip_hi = kInf;
  std::vector<int64_t> window_counts;
  BinEdges edges;
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
  // ---- the rest ----
  int64_t first_event_us = INT64_MIN;
  /// First warmup values, for the bin edges and the fences; released once these are fixed.
  std::vector<double> warmup;
  bool edges_ready = false;
  Moments baseline;
  /// Baseline of winsorized values: what the mean, spread and CUSUM tests compare with.
  HigherMoments baseline_c;
  std::vector<int64_t> ref_counts;
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
  /// The last window's own (winsorized) sd: values are standardized by the larger of it and the
  /// baseline's, so that a change of spread alone does not read as a change of location.
  double cusum_sd = 0;
  calibration::CusumModel cusum_model;
  AlertStateMachine alert;
  uint64_t incident = 0;
  Incident inc;
  ErrorSummary err_baseline;
  ErrorSummary err_window;
  /// Event-time windows not closed yet, by start (usually one; more with late data).
  std::vector<OpenWindow> open;

  // ---- persistence bookkeeping (not persisted) ----
  /// Warmup values already in block keys, and block keys in the checkpoint (0..blocks-1).
  uint32_t warmup_saved = 0;
  uint32_t warmup_blocks = 0;
  /// Hash of the frozen baseline's record as last written (0: none written).
  uint64_t base_hash = 0;
  bool base_in_store = false;
  /// Pieces of the series read by Restore until the record and what it refers to are there.
  struct RestorePieces {
    bool done = false;        // put together (later pieces are left-overs)
    bool record = false;      // the series record was read
    bool base_apart = false;  // it keeps the frozen baseline in the base key
    bool base = false;        // the base key was read
    uint32_t warmup = 0;      // warmup values the record counts
    std::vector<std::vector<double>> blocks;
    std::vector<bool> have_block;
  };
  std::unique_ptr<RestorePieces> restoring;

  double Clip(double v) const { return v < clip_lo ? clip_lo : (v > clip_hi ? clip_hi : v); }
};

struct DriftMonitor::Thresholds {
  double warn = 0;
  double alert = 0;
};

struct DriftMonitor::ModelState {
  std::string name;
  /// Value series in series_names order, then the error series.
  std::vector<SeriesState> series;
  /// [series * detectors + detector]
  std::vector<Thresholds> thresholds;
  AlertStateMachine rollup;
  uint64_t rollup_incident = 0;
  bool rollup_dirty = false;
  std::vector<uint32_t> dirty;
};

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
};

DriftMonitor::DriftMonitor(const DriftSpec& spec, std::vector<std::string> series_names)
    : spec_(spec), series_names_(std::move(series_names)) {
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

DriftMonitor::ModelState& DriftMonitor::ModelFor(uint32_t model, const std::string& model_name) {
  if (model < models_.size() && models_[model]) return *models_[model];
  if (model >= models_.size()) models_.resize(static_cast<size_t>(model) + 1);

  std::unique_ptr<ModelState> state;
  if (auto it = pending_.find(model_name); it != pending_.end()) {
    state = std::move(it->second);
    pending_.erase(it);
    // Normally done by FinishRestore; a series whose pieces do not fit starts afresh.
    for (size_t i = 0; i < state->series.size(); ++i) {
      if (auto done = CompleteRestore(state->series[i], i, true); !done) {
        SeriesState fresh;
        fresh.warmup_blocks = state->series[i].warmup_blocks;
        fresh.base_in_store = state->series[i].base_in_store;
        state->series[i] = std::move(fresh);
      }
    }
  } else {
    state = std::make_unique<ModelState>();
    state->name = model_name;
    state->series.resize(series_names_.size() + 1);
  }
  // Thresholds are resolved once per model.
  const size_t num_series = series_names_.size() + 1;
  state->thresholds.resize(num_series * detectors_.size());
  for (size_t s = 0; s < num_series; ++s) {
    ResolveThresholds(model_name, s, &state->thresholds[s * detectors_.size()]);
  }
  state->dirty.reserve(num_series);
  models_[model] = std::move(state);
  return *models_[model];
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

void DriftMonitor::InsertSeries(size_t index, std::string name) {
  index = std::min(index, series_names_.size());
  series_names_.insert(series_names_.begin() + static_cast<ptrdiff_t>(index), std::move(name));
  const size_t detectors = detectors_.size();
  auto grow = [&](ModelState& m) {
    m.series.insert(m.series.begin() + static_cast<ptrdiff_t>(index), SeriesState{});
    for (uint32_t& dirty : m.dirty) {
      if (dirty >= index) ++dirty;
    }
    // Models not seen yet (restored) get their thresholds in ModelFor.
    if (m.thresholds.empty()) return;
    std::vector<Thresholds> added(detectors);
    ResolveThresholds(m.name, index, added.data());
    m.thresholds.insert(m.thresholds.begin() + static_cast<ptrdiff_t>(index * detectors),
                        added.begin(), added.end());
  };
  for (auto& m : models_) {
    if (m) grow(*m);
  }
  for (auto& [model_name, m] : pending_) grow(*m);
}

void DriftMonitor::MarkDirty(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  if (!s.dirty) {
    s.dirty = true;
    m.dirty.push_back(static_cast<uint32_t>(series));
  }
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
  ModelState& m = ModelFor(model, model_name);
  if (ValidTime(event_time_us) && event_time_us > max_event_us_) max_event_us_ = event_time_us;
  AddValue(m, series, value, event_time_us, late_before_us);
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
      w.raw.Reset(s.baseline_c.mean());
      w.sums.Reset(s.baseline_c.mean());
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
      }
      if (next == INT64_MAX) break;
      for (size_t series = 0; series < series_names_.size(); ++series) {
        SeriesState& s = m.series[series];
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
                          s.baseline.count() >= std::max<int64_t>(1, spec_.min_samples)
                    : s.baseline.count() >= spec_.baseline.records;
    if (!enough) return;
    FreezeBaseline(s);
    // Windows still open were sampled: their sums and counts, now that the baseline is known.
    for (size_t i = 1; i < s.open.size(); ++i) {
      OpenWindow& later = s.open[i];
      later.raw.Reset(s.baseline_c.mean());
      later.sums.Reset(s.baseline_c.mean());
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
  s.window_raw = w.raw;
  s.window_sums = w.sums;
  if (has_histogram_) s.window_counts = w.counts;
  s.window_start = w.first_index;
  s.window_min_us = w.start_us;
  s.window_max_us = w.start_us + et_size_us_;
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
  s.baseline.Add(value);
  if (!s.edges_ready) {
    s.warmup.push_back(value);
    if (s.warmup.size() >= EdgeValues()) FixEdges(s);
    return;
  }
  s.baseline_c.Add(s.Clip(value));
  if (has_histogram_ && !s.ref_counts.empty()) ++s.ref_counts[s.edges.BinOf(value)];
}

void DriftMonitor::AddValue(ModelState& m, size_t series, double value, int64_t event_time_us,
                            int64_t late_before_us) {
  SeriesState& s = m.series[series];
  MarkDirty(m, series);
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
                     s.baseline.count() >= std::max<int64_t>(1, spec_.min_samples);
      } else {
        // No clock to measure the duration by: fall back to the record count.
        freeze_now = s.baseline.count() >= spec_.baseline.records;
      }
    }
    if (freeze_now) {
      FreezeBaseline(s);
      // This value is the first of the first window.
    } else {
      ++s.seen;
      AddBaselineValue(s, value);
      if (!by_duration && s.baseline.count() >= spec_.baseline.records) FreezeBaseline(s);
      return;
    }
  }
  if (s.window_raw.count() == 0) {
    s.window_start = s.seen;
    s.window_min_us = INT64_MIN;
    s.window_max_us = INT64_MIN;
    s.window_raw.Reset(s.baseline_c.mean());
    s.window_sums.Reset(s.baseline_c.mean());
    s.cusum_seen = AlertLevel::kOk;
  }
  ++s.seen;
  s.window_raw.Add(value);
  const double clipped = s.Clip(value);
  s.window_sums.Add(clipped);
  if (has_histogram_) ++s.window_counts[s.edges.BinOf(value)];
  if (ValidTime(event_time_us)) {
    if (!ValidTime(s.window_min_us) || event_time_us < s.window_min_us) {
      s.window_min_us = event_time_us;
    }
    if (!ValidTime(s.window_max_us) || event_time_us > s.window_max_us) {
      s.window_max_us = event_time_us;
    }
  }
  if (PerValueCusum()) {
    if (!s.prepared) Prepare(m, series);
    const double z = (clipped - s.cusum_mean) * s.cusum_inv_sd;
    const double cap = 4 * s.cusum_alert_h;
    s.cusum_up = std::min(cap, std::max(0.0, s.cusum_up + z - s.cusum_k));
    s.cusum_down = std::min(cap, std::max(0.0, s.cusum_down - z - s.cusum_k));
    if (s.cusum_up >= s.cusum_warn_h || s.cusum_down >= s.cusum_warn_h) {
      SequentialCheck(m, series, event_time_us);
    }
  }
  if (s.window_raw.count() >= spec_.window_records) CloseWindow(m, series);
}

void DriftMonitor::FixEdges(SeriesState& s) {
  if (s.edges_ready) return;
  std::vector<double>& values = s.warmup;
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
  std::vector<double>().swap(s.warmup);
  s.edges_ready = true;
}

void DriftMonitor::FreezeBaseline(SeriesState& s) {
  FixEdges(s);
  if (has_histogram_) s.window_counts.assign(s.edges.bins(), 0);
  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    s.trailing.clear();
    s.trailing.push_back({s.baseline, s.baseline_c, s.ref_counts});
    s.trailing_next = 1 % static_cast<uint32_t>(spec_.baseline.windows);
  }
  s.frozen = true;
  s.prepared = false;
}

void DriftMonitor::SetupCusum(SeriesState& s, const HigherMoments& ref, double warn,
                              double alert, double allowance) {
  calibration::CusumModel model{allowance, static_cast<double>(ref.count()), ref.Kurtosis(),
                                ref.Skewness()};
  const double per_value = static_cast<double>(spec_.window_records);
  const double rate_alert = calibration::TailOfScore(alert) / per_value;
  const double rate_warn = calibration::TailOfScore(warn) / per_value;
  model.allowance = calibration::CusumFeasibleAllowance(model, rate_alert);
  s.cusum_model = model;
  s.cusum_k = model.allowance;
  s.cusum_warn_h = calibration::CusumThreshold(model, rate_warn);
  s.cusum_alert_h = std::max(s.cusum_warn_h, calibration::CusumThreshold(model, rate_alert));
}

void DriftMonitor::Prepare(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  s.prepared = true;
  if (cusum_detector_ < 0) return;
  const Thresholds& t =
      m.thresholds[series * detectors_.size() + static_cast<size_t>(cusum_detector_)];
  s.cusum_mean = s.baseline_c.mean();
  s.cusum_inv_sd =
      1 / std::max(FlooredSigma(s.baseline_c.Stddev(), s.baseline_c.mean()), s.cusum_sd);
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
  const double sum = std::max(s.cusum_up, s.cusum_down);
  const AlertLevel level = sum >= s.cusum_alert_h  ? AlertLevel::kAlert
                           : sum >= s.cusum_warn_h ? AlertLevel::kWarn
                                                   : AlertLevel::kOk;
  if (level <= s.cusum_seen) return;
  s.cusum_seen = level;
  const AlertLevel before = s.alert.state();
  if (before == AlertLevel::kAlert || (before == AlertLevel::kWarn && level == AlertLevel::kWarn)) {
    return;
  }
  const size_t d = static_cast<size_t>(cusum_detector_);
  const Thresholds& t = m.thresholds[series * detectors_.size() + d];
  EvaluationInput in;
  in.cusum = sum;
  in.cusum_up = s.cusum_up;
  in.cusum_down = s.cusum_down;
  in.cusum_allowance = s.cusum_k;
  in.cusum_warn_h = s.cusum_warn_h;
  in.cusum_alert_h = s.cusum_alert_h;
  in.cusum_model = s.cusum_model;
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
  v.window_start_record = s.window_start;
  v.window_end_record = s.seen;
  v.window_start_us = s.window_min_us;
  v.window_end_us = ExclusiveEndUs(s.window_max_us);
  const HigherMoments raw = s.window_raw.ToMoments();
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
  ++windows_evaluated_;
  const HigherMoments window_c = s.window_sums.ToMoments();
  const Moments window = RawMoments(s.window_raw);
  auto clear_window = [&] {
    s.window_raw.Reset(s.baseline_c.mean());
    s.window_sums.Reset(s.baseline_c.mean());
    std::fill(s.window_counts.begin(), s.window_counts.end(), 0);
    s.cusum_seen = AlertLevel::kOk;
  };

  // Seasonal warm-up: the first `cycles` periods of windows become the phases' baselines.
  const bool seasonal = spec_.baseline.kind == BaselineKind::kSeasonal && et_size_us_ > 0;
  size_t phase = 0;
  if (seasonal) {
    const int64_t phases = std::max<int64_t>(1, spec_.baseline.period_ms * 1000 / et_size_us_);
    if (s.phases.size() != static_cast<size_t>(phases)) s.phases.resize(static_cast<size_t>(phases));
    if (!ValidTime(s.season_end_us)) {
      s.season_end_us = s.window_min_us + spec_.baseline.cycles * spec_.baseline.period_ms * 1000;
    }
    phase = PhaseOf(s.window_min_us);
    if (s.window_min_us < s.season_end_us) {
      WindowSummary& p = s.phases[phase];
      p.moments.Merge(window);
      p.clipped.Merge(window_c);
      if (p.counts.size() != s.window_counts.size()) p.counts.assign(s.window_counts.size(), 0);
      for (size_t b = 0; b < s.window_counts.size(); ++b) p.counts[b] += s.window_counts[b];
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
    ready = s.trailing.size() >= static_cast<size_t>(spec_.baseline.windows);
    if (ready) {
      if (ref_counts_.size() < s.edges.bins()) ref_counts_.resize(s.edges.bins());
      std::fill(ref_counts_.begin(), ref_counts_.end(), 0);
      ref_c.Clear();
      for (const WindowSummary& w : s.trailing) {
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
    const WindowSummary& p = s.phases[phase];
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
      Remember(s.recent, s.recent_next, current, kLookbackWindows);
      BuildLookbacks(s.recent, s.recent_next, lookbacks);
    } else {
      std::vector<RecentWindow> one = {current};
      BuildLookbacks(one, 0, lookbacks);
    }
    const double sigma = FlooredSigma(ref_c.Stddev(), ref_c.mean());
    const double u = (window_c.mean() - ref_c.mean()) / sigma;
    if (has_cusum_) {
      if (PerValueCusum()) {
        if (!s.prepared) Prepare(m, series);
        // The next window's values are standardized by this window's spread if it is wider.
        s.cusum_sd = window_c.Stddev();
        s.cusum_inv_sd = 1 / std::max(sigma, s.cusum_sd);
      } else {
        // Fed per window: event-time windows (values may arrive in any order within a window),
        // and references that move (trailing, seasonal).
        const size_t d = static_cast<size_t>(cusum_detector_);
        const Thresholds& t = m.thresholds[series * detectors_.size() + d];
        SetupCusum(s, ref_c, t.warn, t.alert, detectors_[d].allowance);
        const double n = static_cast<double>(window_c.count());
        const double uc = (window_c.mean() - ref_c.mean()) / std::max(sigma, window_c.Stddev());
        const double cap = 4 * s.cusum_alert_h;
        s.cusum_up = std::min(cap, std::max(0.0, s.cusum_up + n * (uc - s.cusum_k)));
        s.cusum_down = std::min(cap, std::max(0.0, s.cusum_down + n * (-uc - s.cusum_k)));
      }
    }
    const int64_t bins = static_cast<int64_t>(s.edges.bins());
    int64_t ref_total = 0;
    if (has_histogram_ && static_cast<int64_t>(ref_counts->size()) >= bins &&
        static_cast<int64_t>(s.window_counts.size()) >= bins) {
      for (int64_t b = 0; b < bins; ++b) ref_total += (*ref_counts)[static_cast<size_t>(b)];
    }
    // A baseline restored from a configuration without histograms has no reference shares:
    // the histogram detectors then stay silent rather than compare against nothing.
    const bool histogram = ref_total > 0;

    EvaluationInput in;
    in.reference = ref_c;
    in.lookbacks = lookbacks;
    if (histogram) {
      in.ref_counts = std::span<const int64_t>(ref_counts->data(), static_cast<size_t>(bins));
      in.win_counts = std::span<const int64_t>(s.window_counts.data(), static_cast<size_t>(bins));
    }
    in.cusum = std::max(s.cusum_up, s.cusum_down);
    in.cusum_up = s.cusum_up;
    in.cusum_down = s.cusum_down;
    in.cusum_allowance = s.cusum_k;
    in.cusum_warn_h = s.cusum_warn_h;
    in.cusum_alert_h = s.cusum_alert_h;
    in.cusum_model = s.cusum_model;
    in.cusum_values_per_evaluation = static_cast<double>(spec_.window_records);

    Verdict v;
    v.readings = &readings_;
    readings_.clear();
    for (size_t d = 0; d < detectors_.size(); ++d) {
      const DetectorConfig& det = detectors_[d];
      const DetectorDefaults& kind = DefaultsFor(det.kind);
      if (kind.error_series) continue;
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
    const Incident& inc = s.inc;
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
    v.loc_n = n_w;
    v.loc_u = u;
    v.spread_dof = dof_w;
    v.spread_log_ratio = log_ratio;
    v.win_counts = in.win_counts;
    v.ref_counts = in.ref_counts;
    v.histogram = histogram;
    v.now_ms = WindowClockMs(s.window_max_us);
    v.window_start_record = s.window_start;
    v.window_end_record = s.window_start + window.count();
    v.window_start_us = s.window_min_us;
    v.window_end_us = et_size_us_ > 0 ? s.window_max_us : ExclusiveEndUs(s.window_max_us);
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
    if (s.trailing.size() < k) {
      s.trailing.push_back({window, window_c, s.window_counts});
    } else {
      WindowSummary& slot = s.trailing[s.trailing_next];
      slot.moments = window;
      slot.clipped = window_c;
      slot.counts = s.window_counts;  // same size: copies without allocating
    }
    s.trailing_next = static_cast<uint32_t>((s.trailing_next + 1) % k);
  }
  clear_window();
}

void DriftMonitor::Decide(ModelState& m, size_t series, Verdict& v) {
  SeriesState& s = m.series[series];
  std::vector<DetectorReading>& readings = *v.readings;
  const AlertLevel before = s.alert.state();
  const bool in_incident = before == AlertLevel::kWarn || before == AlertLevel::kAlert;
  bool back = false;
  if (!v.sequential && in_incident) {
    for (int f = 0; f < kDetectorFamilies; ++f) {
      if ((s.inc.families & (1u << f)) && std::isfinite(v.llr[static_cast<size_t>(f)])) {
        s.inc.evidence[static_cast<size_t>(f)] =
            std::max(0.0, s.inc.evidence[static_cast<size_t>(f)] + v.llr[static_cast<size_t>(f)]);
      }
    }
    // A family that starts reading WARN during the incident joins it and must clear too.
    for (int f = 0; f < kDetectorFamilies && s.inc.families != 0; ++f) {
      if ((v.families_now & (1u << f)) && !(s.inc.families & (1u << f))) {
        s.inc.families = static_cast<uint8_t>(s.inc.families | (1u << f));
        s.inc.evidence[static_cast<size_t>(f)] = 0;
      }
    }
    if (s.inc.families == 0) {
      // An incident from state written before calibration knows nothing of its change: it
      // clears when a window reads below WARN on every detector.
      back = v.observed < AlertLevel::kWarn;
    } else {
      back = v.window_level < AlertLevel::kWarn;
      for (int f = 0; f < kDetectorFamilies && back; ++f) {
        if (s.inc.families & (1u << f)) {
          back = s.inc.evidence[static_cast<size_t>(f)] >= resolve_log_evidence_;
        }
      }
    }
  }
  const auto changed = s.alert.Step(v.observed, v.immediate, back, v.now_ms, policy_);
  const AlertLevel after = s.alert.state();
  const bool opens = changed && (before == AlertLevel::kOk || before == AlertLevel::kResolved) &&
                     (after == AlertLevel::kWarn || after == AlertLevel::kAlert);
  const bool leaves = changed && (after == AlertLevel::kOk || after == AlertLevel::kResolved);
  const int32_t incident_lead = s.inc.lead;
  const int lead_family =
      v.lead >= 0 ? static_cast<int>(
                        DefaultsFor(detectors_[v.detector_of[static_cast<size_t>(v.lead)]].kind)
                            .family)
                  : 0;
  if (opens) {
    s.inc = Incident();
    s.inc.families = v.families_now != 0 ? v.families_now
                                         : static_cast<uint8_t>(1u << lead_family);
    s.inc.lead = static_cast<int32_t>(v.detector_of[static_cast<size_t>(v.lead)]);
  } else if (changed && after == AlertLevel::kAlert && v.lead >= 0) {
    s.inc.lead = static_cast<int32_t>(v.detector_of[static_cast<size_t>(v.lead)]);
    s.inc.families = static_cast<uint8_t>(s.inc.families | v.families_now);
  }
  if (!v.sequential && (after == AlertLevel::kWarn || after == AlertLevel::kAlert)) {
    AddToIncident(s.inc, v.loc_n, v.loc_u, v.spread_dof, v.spread_log_ratio, v.win_counts,
                  v.ref_counts, v.error_n, v.error_errors);
  }
  if (leaves) {
    // The evidence the sequential and look-back tests held was the incident's: they start
    // afresh with the series back at its baseline.
    s.inc = Incident();
    s.cusum_up = 0;
    s.cusum_down = 0;
    s.recent.clear();
    s.recent_next = 0;
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
  MarkDirty(m, series);
  const double threshold = error_threshold_;
  if (!s.frozen) {
    ++s.seen;
    s.err_baseline.Add(prediction, label, threshold);
    if (s.err_baseline.count() >= spec_.baseline.records) s.frozen = true;
    return;
  }
  if (s.err_window.count() == 0) {
    s.window_start = s.seen;
    s.window_min_us = INT64_MIN;
    s.window_max_us = INT64_MIN;
  }
  ++s.seen;
  s.err_window.Add(prediction, label, threshold);
  if (ValidTime(event_time_us)) {
    if (!ValidTime(s.window_min_us) || event_time_us < s.window_min_us) {
      s.window_min_us = event_time_us;
    }
    if (!ValidTime(s.window_max_us) || event_time_us > s.window_max_us) {
      s.window_max_us = event_time_us;
    }
  }
  if (s.err_window.count() >= spec_.window_records) CloseErrorWindow(m);
}

void DriftMonitor::CloseErrorWindow(ModelState& m) {
  const size_t series = series_names_.size();
  SeriesState& s = m.series[series];
  ++windows_evaluated_;
  size_t d = detectors_.size();
  for (size_t i = 0; i < detectors_.size(); ++i) {
    if (detectors_[i].kind == DetectorKind::kErrorRate) {
      d = i;  // one error_rate detector drives the error series
      break;
    }
  }
  const bool ready = d < detectors_.size() && s.err_window.count() >= spec_.min_samples &&
                     s.err_baseline.count() >= spec_.min_samples;
  if (!ready && d < detectors_.size() && collect_evaluations_) {
    RecordEvaluation(m, series, false, s.alert.state(), nullptr);
  }
  if (ready) {
    Remember(s.recent, s.recent_next,
             {s.err_window.count(), static_cast<double>(s.err_window.errors), 0},
             kLookbackWindows);
    std::vector<ErrorLookback> lookbacks;
    BuildErrorLookbacks(s.recent, s.recent_next, lookbacks);
    EvaluationInput in;
    in.error_reference = s.err_baseline;
    in.error_window = s.err_window;
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
    if (s.inc.error_n > 0) {
      v.llr[static_cast<int>(DetectorFamily::kError)] = ErrorBackEvidence(
          s.err_window.count(), s.err_window.errors, s.err_baseline.ErrorRate(),
          static_cast<double>(s.inc.error_errors) / static_cast<double>(s.inc.error_n));
    }
    v.error_n = s.err_window.count();
    v.error_errors = s.err_window.errors;
    v.now_ms = WindowClockMs(s.window_max_us);
    v.window_start_record = s.window_start;
    v.window_end_record = s.window_start + s.err_window.count();
    v.window_start_us = s.window_min_us;
    v.window_end_us = ExclusiveEndUs(s.window_max_us);
    v.window_n = s.err_window.count();
    v.window_mean = s.err_window.abs_error.mean();
    v.window_stddev = s.err_window.abs_error.Stddev();
    v.baseline_n = s.err_baseline.count();
    v.baseline_mean = s.err_baseline.abs_error.mean();
    v.baseline_stddev = s.err_baseline.abs_error.Stddev();
    Decide(m, series, v);
  }
  s.err_window.Clear();
}

void DriftMonitor::Transition(ModelState& m, size_t series, AlertLevel previous, AlertLevel level,
                              AlertEvent event) {
  SeriesState& s = m.series[series];
  const uint64_t id =
      AlertId(event.model, event.series, event.detector, level, event.window_start_record);
  const bool opens = (previous == AlertLevel::kOk || previous == AlertLevel::kResolved) &&
                     (level == AlertLevel::kWarn || level == AlertLevel::kAlert);
  if (opens || s.incident == 0) s.incident = id;
  event.alert_id = HexId(id);
  event.incident_id = HexId(s.incident);
  const int64_t now_ms = WindowClockMs(event.window_end_us);
  const bool rollup = level == AlertLevel::kAlert || previous == AlertLevel::kAlert;
  events_.push_back(std::move(event));
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
}

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out) {
  last_now_ms_ = now_ms;
  if (et_size_us_ > 0) CloseEventWindows();
  for (AlertEvent& e : events_) {
    e.batch_id = batch_id;
    out.push_back(std::move(e));
  }
  events_.clear();
}

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out,
                            std::vector<Evaluation>* evaluations) {
  Evaluate(batch_id, now_ms, out);
  if (evaluations != nullptr) {
    for (Evaluation& e : evaluations_) {
      e.batch_id = batch_id;
      evaluations->push_back(std::move(e));
    }
  }
  evaluations_.clear();
}

void DriftMonitor::RecordEvaluation(const ModelState& m, size_t series, bool evaluated,
                                    AlertLevel previous, const Verdict* v) {
  const SeriesState& s = m.series[series];
  const bool is_error = series == series_names_.size();
  Evaluation e;
  e.model = m.name;
  e.series = is_error ? std::string(kErrorSeries) : series_names_[series];
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
    e.window_start_record = s.window_start;
    e.window_n = s.err_window.count();
    e.window_end_record = e.window_start_record + e.window_n;
    e.window_start_us = s.window_min_us;
    e.window_end_us = ExclusiveEndUs(s.window_max_us);
    e.window_mean = s.err_window.abs_error.mean();
    e.window_stddev = s.err_window.abs_error.Stddev();
    e.baseline_n = s.err_baseline.count();
    e.baseline_mean = s.err_baseline.abs_error.mean();
    e.baseline_stddev = s.err_baseline.abs_error.Stddev();
  } else {
    const HigherMoments raw = s.window_raw.ToMoments();
    e.window_start_record = s.window_start;
    e.window_n = raw.count();
    e.window_end_record = e.window_start_record + e.window_n;
    e.window_start_us = s.window_min_us;
    e.window_end_us = et_size_us_ > 0 ? s.window_max_us : ExclusiveEndUs(s.window_max_us);
    e.window_mean = raw.mean();
    e.window_stddev = raw.Stddev();
    e.baseline_n = s.baseline.count();
    e.baseline_mean = s.baseline.mean();
    e.baseline_stddev = s.baseline.Stddev();
  }
  evaluations_.push_back(std::move(e));
}

namespace {

void EncodeSeries(const DriftMonitor::SeriesState& s, std::string& out);
void EncodeBase(const DriftMonitor::SeriesState& s, std::string& out);
Status DecodeSeries(std::string_view bytes, DriftMonitor::SeriesState& s, size_t bins_limit,
                    bool& base_apart, uint32_t& warmup_count);
Status DecodeBase(std::string_view bytes, DriftMonitor::SeriesState& s, size_t bins_limit);
Status CheckHistograms(const DriftMonitor::SeriesState& s, std::string_view key);

constexpr std::string_view kBaseSuffix = "/base";
constexpr std::string_view kWarmupSuffix = "/w";

uint64_t HashBytes(std::string_view bytes) {
  uint64_t h = std::hash<std::string_view>{}(bytes);
  return h == 0 ? 1 : h;
}

}  // namespace

void DriftMonitor::CollectDirty(std::vector<std::pair<std::string, std::string>>& puts) {
  std::vector<std::string> deletes;
  CollectDirty(puts, deletes);
}

void DriftMonitor::CollectDirty(std::vector<std::pair<std::string, std::string>>& puts,
                                std::vector<std::string>& deletes) {
  last_write_ = {};
  const size_t first_put = puts.size();
  for (auto& mp : models_) {
    if (!mp) continue;
    ModelState& m = *mp;
    if (m.dirty.empty() && !m.rollup_dirty) continue;
    const std::string model_key = std::string(kStateKeyPrefix) + EscapeName(m.name);
    for (uint32_t series : m.dirty) {
      SeriesState& s = m.series[series];
      s.dirty = false;
      const std::string_view name =
          series < series_names_.size() ? std::string_view(series_names_[series]) : kErrorSeries;
      std::string key = model_key + "/" + EscapeName(name);
      ++last_write_.dirty_series;
      // The frozen baseline: written when it changes, which is once, when it freezes.
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
      // Warmup values: the blocks holding values added since the last write.
      const uint32_t kept = s.edges_ready ? 0 : static_cast<uint32_t>(s.warmup.size());
      const uint32_t blocks =
          static_cast<uint32_t>((kept + kWarmupBlockValues - 1) / kWarmupBlockValues);
      if (kept < s.warmup_saved) s.warmup_saved = 0;  // started over
      if (kept > s.warmup_saved) {
        last_write_.dirty_bytes += 8 * static_cast<int64_t>(kept - s.warmup_saved);
        for (uint32_t b = s.warmup_saved / kWarmupBlockValues; b < blocks; ++b) {
          const size_t from = static_cast<size_t>(b) * kWarmupBlockValues;
          const size_t to = std::min<size_t>(kept, from + kWarmupBlockValues);
          std::string value;
          drift::ByteWriter w(value);
          for (size_t i = from; i < to; ++i) w.F64(s.warmup[i]);
          puts.emplace_back(fmt::format("{}{}{}", key, kWarmupSuffix, b), std::move(value));
        }
      }
      for (uint32_t b = blocks; b < s.warmup_blocks; ++b) {
        deletes.push_back(fmt::format("{}{}{}", key, kWarmupSuffix, b));
      }
      s.warmup_saved = kept;
      s.warmup_blocks = blocks;
      std::string value;
      EncodeSeries(s, value);
      last_write_.dirty_bytes += static_cast<int64_t>(value.size());
      puts.emplace_back(std::move(key), std::move(value));
    }
    m.dirty.clear();
    if (m.rollup_dirty) {
      m.rollup_dirty = false;
      std::string value;
      drift::ByteWriter w(value);
      w.U8(kRollupEncodingVersion);
      m.rollup.Encode(value);
      w.U64(m.rollup_incident);
      last_write_.dirty_bytes += static_cast<int64_t>(value.size());
      puts.emplace_back(model_key, std::move(value));
    }
  }
  for (size_t i = first_put; i < puts.size(); ++i) {
    last_write_.put_bytes += static_cast<int64_t>(puts[i].first.size() + puts[i].second.size());
  }
}

namespace {

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

void EncodeSummary(drift::ByteWriter& w, std::string& out, const WindowSummary& t) {
  t.moments.Encode(out);
  t.clipped.Encode(w);
  EncodeCounts(w, t.counts);
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
  w.I64(s.err_baseline.errors);
  s.err_baseline.abs_error.Encode(out);
}

/// The series record. The warmup values are in block keys (CollectDirty), a frozen baseline in
/// the base key.
void EncodeSeries(const DriftMonitor::SeriesState& s, std::string& out) {
  drift::ByteWriter w(out);
  const bool apart = s.frozen;
  w.U8(kSeriesEncodingVersion);
  w.U8(static_cast<uint8_t>((s.frozen ? 1 : 0) | (s.edges_ready ? 2 : 0) | (apart ? kBaseApart : 0)));
  w.I64(s.seen);
  w.I64(s.first_event_us);
  w.U32(static_cast<uint32_t>(s.edges_ready ? 0 : s.warmup.size()));
  if (!apart) EncodeBaseFields(w, out, s);
  w.U32(static_cast<uint32_t>(s.trailing.size()));
  w.U32(s.trailing_next);
  for (const WindowSummary& t : s.trailing) EncodeSummary(w, out, t);
  w.U32(static_cast<uint32_t>(s.phases.size()));
  w.I64(s.season_end_us);
  for (const WindowSummary& p : s.phases) EncodeSummary(w, out, p);
  s.window_raw.Encode(w);
  s.window_sums.Encode(w);
  EncodeCounts(w, s.window_counts);
  w.I64(s.window_start);
  w.I64(s.window_min_us);
  w.I64(s.window_max_us);
  w.U32(static_cast<uint32_t>(s.recent.size()));
  w.U32(s.recent_next);
  for (const RecentWindow& r : s.recent) {
    w.I64(r.n);
    w.F64(r.sum);
    w.F64(r.m2);
  }
  w.F64(s.cusum_up);
  w.F64(s.cusum_down);
  w.F64(s.cusum_sd);
  s.alert.Encode(out);
  w.U64(s.incident);
  const Incident& inc = s.inc;
  w.U8(inc.families);
  w.U32(static_cast<uint32_t>(inc.lead));
  for (double e : inc.evidence) w.F64(e);
  w.I64(inc.loc_n);
  w.F64(inc.loc_sum);
  w.I64(inc.spread_dof);
  w.F64(inc.spread_sum);
  w.I64(inc.shape_n);
  w.U32(static_cast<uint32_t>(inc.shape_delta.size()));
  for (double d : inc.shape_delta) w.F64(d);
  w.I64(inc.error_n);
  w.I64(inc.error_errors);
  if (!apart) {
    w.I64(s.err_baseline.errors);
    s.err_baseline.abs_error.Encode(out);
  }
  w.I64(s.err_window.errors);
  s.err_window.abs_error.Encode(out);
  w.U32(static_cast<uint32_t>(s.open.size()));
  for (const OpenWindow& o : s.open) {
    w.I64(o.start_us);
    w.I64(o.first_index);
    o.raw.Encode(w);
    o.sums.Encode(w);
    EncodeCounts(w, o.counts);
    w.I64(o.min_us);
    w.I64(o.max_us);
  }
  std::string sample;
  for (const OpenWindow& o : s.open) {
    sample.clear();
    o.sample.Encode(sample);
    w.Str(sample);
  }
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
  s.warmup.clear();
  s.warmup.reserve(warmup);
  for (uint32_t i = 0; i < warmup; ++i) s.warmup.push_back(r.F64());
  if (!ReadMoments(r, s.baseline)) return corrupt("bad baseline moments");
  const uint32_t edges = r.U32();
  if (edges > r.remaining() / 8 || edges + 1 > bins_limit) return corrupt("bad bin edges");
  std::vector<double> inner(edges);
  for (auto& e : inner) e = r.F64();
  s.edges = BinEdges(std::move(inner));
  if (s.edges.inner().size() != edges) return corrupt("bin edges not increasing");
  if (!DecodeCounts(r, s.ref_counts)) return corrupt("bad reference counts");
  const uint32_t trailing = r.U32();
  s.trailing_next = r.U32();
  if (trailing > 10'000 || r.failed()) return corrupt("bad trailing windows");
  s.trailing.assign(trailing, {});
  for (WindowSummary& t : s.trailing) {
    if (!ReadMoments(r, t.moments) || !DecodeCounts(r, t.counts)) {
      return corrupt("bad trailing window");
    }
    t.clipped = NormalShaped(t.moments);
  }
  Moments window;
  if (!ReadMoments(r, window)) return corrupt("bad window moments");
  if (!DecodeCounts(r, s.window_counts)) return corrupt("bad window counts");
  s.window_raw = PowerSums::FromMoments(NormalShaped(window));
  s.window_sums = s.window_raw;
  s.window_start = r.I64();
  s.window_min_us = r.I64();
  s.window_max_us = r.I64();
  (void)r.Str();  // Page-Hinkley's state: the CUSUM starts afresh
  std::string buf;
  if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) return corrupt("truncated alert");
  auto alert = AlertStateMachine::Decode(buf);
  if (!alert) return tl::unexpected(alert.error());
  s.alert = *alert;
  s.incident = r.U64();
  s.err_baseline.errors = r.I64();
  if (!ReadMoments(r, s.err_baseline.abs_error)) return corrupt("bad error baseline");
  s.err_window.errors = r.I64();
  if (!ReadMoments(r, s.err_window.abs_error)) return corrupt("bad error window");
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
  s.err_baseline.errors = r.I64();
  if (!ReadMoments(r, s.err_baseline.abs_error)) return corrupt("bad error baseline");
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
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
      (s.ref_counts.size() != bins || s.window_counts.size() != bins)) {
    return MakeError(ErrorCode::kCorruption, "{}: drift series state: histogram sizes disagree",
                     key);
  }
  return Ok();
}

/// `warmup_count`: for version 5, the warmup values the record counts (they are in block keys).
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
  } else if (version >= 3 && version <= kSeriesEncodingVersion) {
    const uint8_t flags = r.U8();
    s.frozen = (flags & 1) != 0;
    s.edges_ready = (flags & 2) != 0;
    base_apart = version >= 5 && (flags & kBaseApart) != 0;
    if (base_apart && !s.frozen) return corrupt("bad flags");
    s.seen = r.I64();
    s.first_event_us = r.I64();
    const uint32_t warmup = r.U32();
    s.warmup.clear();
    if (version >= 5) {
      if (warmup > DriftMonitor::kMaxWarmupValues || (warmup > 0 && s.edges_ready)) {
        return corrupt("bad warmup count");
      }
      warmup_count = warmup;
    } else {
      if (warmup > r.remaining() / 8) return corrupt("truncated warmup values");
      s.warmup.reserve(warmup);
      for (uint32_t i = 0; i < warmup; ++i) s.warmup.push_back(r.F64());
    }
    if (!base_apart) DRIFTD_TRY(DecodeBaseFields(r, s, bins_limit, corrupt));
    const uint32_t trailing = r.U32();
    s.trailing_next = r.U32();
    if (trailing > 10'000 || r.failed()) return corrupt("bad trailing windows");
    s.trailing.assign(trailing, {});
    for (WindowSummary& t : s.trailing) {
      if (!DecodeSummary(r, t)) return corrupt("bad trailing window");
    }
    const uint32_t phases = r.U32();
    s.season_end_us = r.I64();
    if (phases > 100'000 || r.failed()) return corrupt("bad seasonal phases");
    s.phases.assign(phases, {});
    for (WindowSummary& p : s.phases) {
      if (!DecodeSummary(r, p)) return corrupt("bad seasonal phase");
    }
    if (!s.window_raw.Decode(r) || !s.window_sums.Decode(r)) {
      return corrupt("bad window moments");
    }
    if (!DecodeCounts(r, s.window_counts)) return corrupt("bad window counts");
    s.window_start = r.I64();
    s.window_min_us = r.I64();
    s.window_max_us = r.I64();
    const uint32_t recent = r.U32();
    s.recent_next = r.U32();
    if (recent > DriftMonitor::kLookbackWindows || s.recent_next > recent ||
        recent > r.remaining() / 24) {
      return corrupt("bad look-back windows");
    }
    s.recent.resize(recent);
    for (RecentWindow& w : s.recent) {
      w.n = r.I64();
      w.sum = r.F64();
      w.m2 = r.F64();
    }
    s.cusum_up = r.F64();
    s.cusum_down = r.F64();
    s.cusum_sd = r.F64();
    if (!(s.cusum_up >= 0) || !(s.cusum_down >= 0) || !(s.cusum_sd >= 0)) {
      return corrupt("bad cusum");
    }
    std::string buf;
    if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) return corrupt("truncated alert");
    auto alert = AlertStateMachine::Decode(buf);
    if (!alert) return tl::unexpected(alert.error());
    s.alert = *alert;
    s.incident = r.U64();
    Incident& inc = s.inc;
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
      s.err_baseline.errors = r.I64();
      if (!ReadMoments(r, s.err_baseline.abs_error)) return corrupt("bad error baseline");
    }
    s.err_window.errors = r.I64();
    if (!ReadMoments(r, s.err_window.abs_error)) return corrupt("bad error window");
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
  if (s.trailing_next >= std::max<size_t>(1, s.trailing.size() + 1)) {
    return corrupt("bad trailing position");
  }
  s.prepared = false;
  return Ok();
}

}  // namespace

Status DriftMonitor::Restore(std::string_view key, std::string_view value) {
  if (!key.starts_with(kStateKeyPrefix)) {
    return MakeError(ErrorCode::kInvalidArgument, "drift: not a drift state key: '{}'", key);
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

  if (slash == std::string_view::npos) {
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

  // "<series>", "<series>/base" or "<series>/w<block>" (series names are escaped: no '/').
  std::string_view series_part = rest.substr(slash + 1);
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

  if (piece == kBaseSuffix) {
    target.base_in_store = true;
    // A base key beside a record that holds its own baseline is left over: ignored, deleted at
    // the next write.
    if (pieces.record && !pieces.base_apart) return Ok();
    if (auto st = DecodeBase(value, target, 1'000'001); !st) {
      return tl::unexpected(st.error().Wrap(std::string(key)));
    }
    pieces.base = true;
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
    drift::ByteReader r(value);
    std::vector<double>& values = pieces.blocks[block];
    values.resize(value.size() / 8);
    for (double& v : values) v = r.F64();
    pieces.have_block[block] = true;
  } else if (piece.empty()) {
    SeriesState decoded;
    bool base_apart = false;
    uint32_t warmup = 0;
    if (auto st = DecodeSeries(value, decoded, 1'000'001, base_apart, warmup); !st) {
      return tl::unexpected(st.error().Wrap(std::string(key)));
    }
    if (base_apart && pieces.base) {
      decoded.baseline = target.baseline;
      decoded.baseline_c = target.baseline_c;
      decoded.clip_lo = target.clip_lo;
      decoded.clip_hi = target.clip_hi;
      decoded.edges = std::move(target.edges);
      decoded.ref_counts = std::move(target.ref_counts);
      decoded.err_baseline = target.err_baseline;
    }
    decoded.warmup_blocks = target.warmup_blocks;
    decoded.base_in_store = target.base_in_store;
    decoded.restoring = std::move(target.restoring);
    target = std::move(decoded);
    target.restoring->record = true;
    target.restoring->base_apart = base_apart;
    target.restoring->warmup = warmup;
    // Records of earlier layouts hold their warmup values themselves: none is in a block key
    // yet, so the next write puts them there.
    target.warmup_saved = 0;
  } else {
    return MakeError(ErrorCode::kCorruption, "drift: unknown state key '{}'", key);
  }
  target.dirty = false;
  if (auto done = CompleteRestore(target, index, false); !done) {
    return tl::unexpected(done.error().Wrap(std::string(key)));
  }
  return Ok();
}

Result<bool> DriftMonitor::CompleteRestore(SeriesState& s, size_t index, bool final) {
  if (!s.restoring) return true;
  SeriesState::RestorePieces& pieces = *s.restoring;
  if (pieces.done) {
    if (final) s.restoring.reset();
    return true;
  }
  const auto incomplete = [&](std::string_view what) -> Result<bool> {
    if (!final) return false;
    return MakeError(ErrorCode::kCorruption, "drift series state: {}", what);
  };
  if (!pieces.record) {
    if (!final) return false;
    // Left-over pieces of a series without a record: a fresh series, whose first write
    // deletes them.
    SeriesState fresh;
    fresh.warmup_blocks = s.warmup_blocks;
    fresh.base_in_store = s.base_in_store;
    s = std::move(fresh);
    return true;
  }
  if (pieces.base_apart && !pieces.base) return incomplete("the frozen baseline is missing");
  if (!s.edges_ready && pieces.warmup > 0) {
    const uint32_t blocks =
        static_cast<uint32_t>((pieces.warmup + kWarmupBlockValues - 1) / kWarmupBlockValues);
    for (uint32_t b = 0; b < blocks; ++b) {
      const size_t need = std::min<size_t>(kWarmupBlockValues,
                                           pieces.warmup - static_cast<size_t>(b) * kWarmupBlockValues);
      if (b >= pieces.blocks.size() || !pieces.have_block[b] || pieces.blocks[b].size() < need) {
        return incomplete("warmup values are missing");
      }
    }
    s.warmup.clear();
    s.warmup.reserve(pieces.warmup);
    for (uint32_t b = 0; b < blocks; ++b) {
      const size_t need = std::min<size_t>(kWarmupBlockValues,
                                           pieces.warmup - static_cast<size_t>(b) * kWarmupBlockValues);
      s.warmup.insert(s.warmup.end(), pieces.blocks[b].begin(), pieces.blocks[b].begin() + need);
    }
    s.warmup_saved = pieces.warmup;
  }
  if (pieces.base_apart) {
    scratch_.clear();
    EncodeBase(s, scratch_);
    s.base_hash = HashBytes(scratch_);
  }
  pieces.done = true;
  pieces.blocks.clear();
  pieces.have_block.clear();
  if (final) s.restoring.reset();
  DRIFTD_TRY(CheckHistograms(s, index < series_names_.size() ? series_names_[index] : kErrorSeries));
  // A histogram that the current configuration does not use is dropped; one it needs but the
  // state lacks is rebuilt empty (the baseline then has no reference shares).
  if (has_histogram_ && index < series_names_.size() && s.frozen &&
      s.window_counts.size() != s.edges.bins()) {
    s.window_counts.assign(s.edges.bins(), 0);
    s.ref_counts.assign(s.edges.bins(), 0);
  }
  return true;
}

Status DriftMonitor::FinishRestore() {
  auto finish = [&](ModelState& m) -> Status {
    for (size_t i = 0; i < m.series.size(); ++i) {
      auto done = CompleteRestore(m.series[i], i, true);
      if (!done) {
        return tl::unexpected(done.error().Wrap(fmt::format(
            "model '{}' series '{}'", m.name,
            i < series_names_.size() ? std::string_view(series_names_[i]) : kErrorSeries)));
      }
    }
    return Ok();
  };
  for (auto& [name, m] : pending_) DRIFTD_TRY(finish(*m));
  for (auto& m : models_) {
    if (m) DRIFTD_TRY(finish(*m));
  }
  return Ok();
}

void DriftMonitor::ObserveReference(uint32_t model, const std::string& model_name, size_t series,
                                    double value) {
  if (!std::isfinite(value)) {
    ++skipped_values_;
    return;
  }
  if (series >= series_names_.size()) return;
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
  s.err_baseline.Add(prediction, label, error_threshold_);
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
  if (has_histogram_ && (counts.empty() || total == 0)) {
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
  s.window_counts.assign(s.edges.bins(), 0);
  std::vector<double>().swap(s.warmup);
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
  s.err_baseline = summary;
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
      const int64_t n = is_error ? s.err_baseline.count() : s.baseline.count();
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
        if (s.err_baseline.count() == 0) continue;
        e.series = std::string(kErrorSeries);
        e.moments = s.err_baseline.abs_error;
        e.errors = s.err_baseline.errors;
      } else {
        e.series = series_names_[i];
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
    fresh.incident = s.incident;
    // The keys it wrote, for the next write to replace or delete.
    fresh.warmup_blocks = s.warmup_blocks;
    fresh.base_in_store = s.base_in_store;
    s = std::move(fresh);
    s.dirty = false;
    MarkDirty(*m, i);
  }
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
    if (window_n > 0) {
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
    base.Number("mean", baseline_mean);
    base.Number("stddev", baseline_stddev);
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
  if (!top_bins.empty()) {
    std::string arr = "[";
    for (size_t i = 0; i < top_bins.size(); ++i) {
      if (i > 0) arr.push_back(',');
      const BinChange& b = top_bins[i];
      JsonObject d(arr);
      d.Int("bin", b.bin);
      d.Number("lower", b.lower);
      d.Number("upper", b.upper);
      d.Number("baseline_share", b.baseline_share);
      d.Number("window_share", b.window_share);
      d.Number("psi_term", b.psi_term);
      d.Close();
    }
    arr.push_back(']');
    obj.Raw("top_bins", arr);
  }
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

}  // namespace driftd
