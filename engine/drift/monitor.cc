#include "engine/drift/monitor.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "engine/drift/codec.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

// Version 2 adds the open event-time windows; version 1 (no such windows) is still read.
constexpr uint8_t kSeriesEncodingVersion = 2;
constexpr uint8_t kRollupEncodingVersion = 1;
constexpr int kTopBins = 3;
constexpr std::string_view kRollupSeries = "*";
constexpr std::string_view kRollupDetector = "rollup";

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

AlertLevel LevelOf(double statistic, double warn, double alert) {
  if (statistic >= alert) return AlertLevel::kAlert;
  if (statistic >= warn) return AlertLevel::kWarn;
  return AlertLevel::kOk;
}

/// Severity for choosing the detector that decided an evaluation: level first, then how far
/// past its threshold the statistic is.
double Severity(AlertLevel level, double statistic, double warn, double alert) {
  const double threshold = level == AlertLevel::kAlert ? alert : warn;
  const double ratio = threshold > 0 ? statistic / threshold : statistic;
  return static_cast<double>(level) * 1e6 + std::min(ratio, 1e5);
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

}  // namespace

struct DriftMonitor::DetectorConfig {
  DetectorKind kind = DetectorKind::kMeanShift;
  std::string_view name;  // canonical, static storage
  std::string spec_name;  // as written in the pipeline, for overrides
  double warn = 0;
  double alert = 0;
  double min_effect = 0;  // mean_shift
  double delta = 0;       // page_hinkley
  double threshold = 0;   // error_rate
};

namespace {

struct Thresholds {
  double warn = 0;
  double alert = 0;
};

struct WindowSummary {
  Moments moments;
  std::vector<int64_t> counts;
};

/// An event-time window of a series still waiting for the watermark.
struct OpenWindow {
  int64_t start_us = 0;
  int64_t first_index = 0;  // value index of its first value
  Moments moments;
  std::vector<int64_t> counts;
  int64_t min_us = INT64_MIN;
  int64_t max_us = INT64_MIN;
};

}  // namespace

struct DriftMonitor::SeriesState {
  bool frozen = false;
  /// Values (or labeled records, for the error series) accepted so far: the next value's index.
  int64_t seen = 0;
  int64_t first_event_us = INT64_MIN;
  /// Warmup values for the histogram edges; released when the baseline freezes.
  std::vector<double> warmup;
  Moments baseline;
  BinEdges edges;
  std::vector<int64_t> ref_counts;
  /// Trailing baseline: ring of the last K window summaries (the warmup is the first).
  std::vector<WindowSummary> trailing;
  uint32_t trailing_next = 0;
  Moments window;
  std::vector<int64_t> window_counts;
  int64_t window_start = 0;
  int64_t window_min_us = INT64_MIN;
  int64_t window_max_us = INT64_MIN;
  PageHinkley ph;
  AlertStateMachine alert;
  uint64_t incident = 0;
  ErrorSummary err_baseline;
  ErrorSummary err_window;
  /// Event-time windows not closed yet, by start (usually one; more with late data).
  std::vector<OpenWindow> open;
  bool dirty = false;
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
    d.delta = DetectorParam(ds, "delta");
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
  } else {
    state = std::make_unique<ModelState>();
    state->name = model_name;
    state->series.resize(series_names_.size() + 1);
  }
  // Thresholds are resolved once per model: overrides apply from the least specific
  // (detector only) to the most specific (model and series).
  const size_t num_series = series_names_.size() + 1;
  state->thresholds.resize(num_series * detectors_.size());
  for (size_t s = 0; s < num_series; ++s) {
    const std::string_view series_name =
        s < series_names_.size() ? std::string_view(series_names_[s]) : kErrorSeries;
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
          if (!ov.model.empty() && ov.model != model_name) continue;
          if (!ov.series.empty() && ov.series != series_name &&
              !(series_name.size() > ov.series.size() && series_name.starts_with(ov.series) &&
                series_name[ov.series.size()] == '[')) {
            continue;
          }
          if (ov.warn) t.warn = *ov.warn;
          if (ov.alert) t.alert = *ov.alert;
        }
      }
      state->thresholds[s * detectors_.size() + d] = t;
    }
  }
  state->dirty.reserve(num_series);
  models_[model] = std::move(state);
  return *models_[model];
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

void DriftMonitor::Observe(uint32_t model, const std::string& model_name, size_t series,
                           double value, int64_t event_time_us) {
  if (!std::isfinite(value)) {
    ++skipped_values_;
    return;
  }
  if (series >= series_names_.size()) return;  // caller bug; nothing sensible to record
  ModelState& m = ModelFor(model, model_name);
  if (ValidTime(event_time_us) && event_time_us > max_event_us_) max_event_us_ = event_time_us;
  AddValue(m, series, value, event_time_us);
}

void DriftMonitor::UseEventTimeWindows(int64_t size_ms, int64_t delay_ms) {
  et_size_us_ = std::max<int64_t>(1, size_ms) * 1000;
  et_delay_us_ = std::max<int64_t>(0, delay_ms) * 1000;
}

void DriftMonitor::RestoreClock(int64_t max_event_time_us, int64_t watermark_us) {
  max_event_us_ = max_event_time_us;
  watermark_us_ = watermark_us;
}

void DriftMonitor::AddToEventWindow(ModelState& m, size_t series, double value,
                                    int64_t event_time_us) {
  SeriesState& s = m.series[series];
  if (!ValidTime(event_time_us)) {
    ++values_without_time_;
    return;
  }
  // Floor division: windows before the epoch start at multiples of the size too.
  int64_t start = event_time_us / et_size_us_ * et_size_us_;
  if (start > event_time_us) start -= et_size_us_;
  if (ValidTime(watermark_us_) && start + et_size_us_ <= watermark_us_) {
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
    w.first_index = s.seen;
    if (has_histogram_) w.counts.assign(s.edges.bins(), 0);
    // Kept in start order, so closing walks from the front.
    auto at = std::find_if(s.open.begin(), s.open.end(),
                           [&](const OpenWindow& o) { return o.start_us > start; });
    window = &*s.open.insert(at, std::move(w));
  }
  ++s.seen;
  window->moments.Add(value);
  if (has_histogram_ && !window->counts.empty()) ++window->counts[s.edges.BinOf(value)];
  if (!ValidTime(window->min_us) || event_time_us < window->min_us) window->min_us = event_time_us;
  if (!ValidTime(window->max_us) || event_time_us > window->max_us) window->max_us = event_time_us;
}

void DriftMonitor::CloseEventWindows() {
  if (!ValidTime(max_event_us_)) return;
  const int64_t watermark = max_event_us_ - et_delay_us_;
  if (ValidTime(watermark_us_) && watermark <= watermark_us_) return;
  watermark_us_ = watermark;
  for (auto& mp : models_) {
    if (!mp) continue;
    ModelState& m = *mp;
    for (size_t series = 0; series < series_names_.size(); ++series) {
      SeriesState& s = m.series[series];
      size_t closed = 0;
      while (closed < s.open.size() && s.open[closed].start_us + et_size_us_ <= watermark_us_) {
        OpenWindow& w = s.open[closed];
        // The closing window becomes the series' current window for CloseWindow(); it reports
        // the window's bounds [start, end) as its times.
        s.window = w.moments;
        if (has_histogram_) s.window_counts = w.counts;
        s.window_start = w.first_index;
        s.window_min_us = w.start_us;
        s.window_max_us = w.start_us + et_size_us_;
        MarkDirty(m, series);
        CloseWindow(m, series);
        ++closed;
      }
      if (closed > 0) s.open.erase(s.open.begin(), s.open.begin() + static_cast<long>(closed));
    }
  }
}

void DriftMonitor::AddValue(ModelState& m, size_t series, double value, int64_t event_time_us) {
  SeriesState& s = m.series[series];
  MarkDirty(m, series);
  if (!s.frozen) {
    bool freeze_now = false;
    if (spec_.baseline.kind == BaselineKind::kWarmup && spec_.baseline.duration_ms > 0) {
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
      s.baseline.Add(value);
      if (s.warmup.size() < kMaxWarmupValues) {
        if (s.warmup.capacity() == 0) {
          s.warmup.reserve(static_cast<size_t>(std::min<int64_t>(
              spec_.baseline.duration_ms > 0 ? static_cast<int64_t>(kMaxWarmupValues)
                                             : spec_.baseline.records,
              static_cast<int64_t>(kMaxWarmupValues))));
        }
        s.warmup.push_back(value);
      }
      const bool by_records =
          spec_.baseline.kind != BaselineKind::kWarmup || spec_.baseline.duration_ms == 0;
      if (by_records && s.baseline.count() >= spec_.baseline.records) FreezeBaseline(s);
      return;
    }
  }
  if (et_size_us_ > 0) {
    AddToEventWindow(m, series, value, event_time_us);
    return;
  }
  if (s.window.count() == 0) {
    s.window_start = s.seen;
    s.window_min_us = INT64_MIN;
    s.window_max_us = INT64_MIN;
  }
  ++s.seen;
  s.window.Add(value);
  if (has_histogram_) ++s.window_counts[s.edges.BinOf(value)];
  if (ValidTime(event_time_us)) {
    if (!ValidTime(s.window_min_us) || event_time_us < s.window_min_us) {
      s.window_min_us = event_time_us;
    }
    if (!ValidTime(s.window_max_us) || event_time_us > s.window_max_us) {
      s.window_max_us = event_time_us;
    }
  }
  if (s.window.count() >= spec_.window_records) CloseWindow(m, series);
}

void DriftMonitor::FreezeBaseline(SeriesState& s) {
  if (has_histogram_) {
    s.edges = BinEdges::FromQuantiles(s.warmup, histogram_bins_);
    s.ref_counts.assign(s.edges.bins(), 0);
    for (double v : s.warmup) ++s.ref_counts[s.edges.BinOf(v)];
    s.window_counts.assign(s.edges.bins(), 0);
  }
  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    s.trailing.clear();
    s.trailing.push_back({s.baseline, s.ref_counts});
    s.trailing_next = 1 % static_cast<uint32_t>(spec_.baseline.windows);
  }
  std::vector<double>().swap(s.warmup);
  s.frozen = true;
}

void DriftMonitor::CloseWindow(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  ++windows_evaluated_;

  // The reference: the frozen warmup, or the merge of the previous K windows.
  const Moments* ref = &s.baseline;
  const std::vector<int64_t>* ref_counts = &s.ref_counts;
  Moments trailing_ref;
  bool ready = true;
  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    ready = s.trailing.size() >= static_cast<size_t>(spec_.baseline.windows);
    if (ready) {
      if (ref_counts_.size() < s.edges.bins()) ref_counts_.resize(s.edges.bins());
      std::fill(ref_counts_.begin(), ref_counts_.end(), 0);
      for (const WindowSummary& w : s.trailing) {
        trailing_ref.Merge(w.moments);
        for (size_t b = 0; b < w.counts.size() && b < ref_counts_.size(); ++b) {
          ref_counts_[b] += w.counts[b];
        }
      }
      ref = &trailing_ref;
      ref_counts = &ref_counts_;
    }
  }
  ready = ready && s.window.count() >= spec_.min_samples && ref->count() >= spec_.min_samples;
  if (!ready && collect_evaluations_) {
    RecordEvaluation(m, series, ref, false, s.alert.state(), {});
  }

  if (ready) {
    const MeanShiftResult ms = MeanShift(*ref, s.window);
    const double ratio = StddevRatio(ref->Stddev(), s.window.Stddev());
    double psi = 0, js = 0, ks = 0;
    const size_t bins = s.edges.bins();
    int64_t ref_total = 0;
    if (has_histogram_ && ref_counts->size() >= bins && s.window_counts.size() >= bins) {
      for (size_t b = 0; b < bins; ++b) ref_total += (*ref_counts)[b];
    }
    // A baseline restored from a configuration without histograms has no reference shares:
    // the histogram detectors then stay silent rather than compare against nothing.
    const bool histogram = ref_total > 0;
    if (histogram) {
      if (ref_shares_.size() < bins) {  // bins from restored state may exceed today's setting
        ref_shares_.resize(bins);
        cur_shares_.resize(bins);
        terms_.resize(bins);
      }
      const std::span<const int64_t> rc(ref_counts->data(), bins);
      SharesOf(rc, std::span<double>(ref_shares_.data(), bins));
      SharesOf(std::span<const int64_t>(s.window_counts.data(), bins),
               std::span<double>(cur_shares_.data(), bins));
      const std::span<const double> r(ref_shares_.data(), bins);
      const std::span<const double> c(cur_shares_.data(), bins);
      psi = Psi(r, c, std::span<double>(terms_.data(), bins));
      js = JensenShannonDistance(r, c);
      ks = KsFromBins(r, c);
    }

    // Statistics and levels of every detector, without allocating.
    constexpr size_t kMaxDetectors = 32;
    std::array<double, kMaxDetectors> stat{};
    std::array<AlertLevel, kMaxDetectors> level{};
    AlertLevel observed = AlertLevel::kOk;
    bool immediate = false;
    bool ph_fired = false;
    int lead = -1;
    double lead_severity = -1;
    const size_t nd = std::min(detectors_.size(), kMaxDetectors);
    for (size_t d = 0; d < nd; ++d) {
      const DetectorConfig& det = detectors_[d];
      const Thresholds& t = m.thresholds[series * detectors_.size() + d];
      double x = 0;
      switch (det.kind) {
        case DetectorKind::kMeanShift:
          x = std::abs(ms.z);
          break;
        case DetectorKind::kStddevRatio:
          x = ratio;
          break;
        case DetectorKind::kPsi:
          x = psi;
          break;
        case DetectorKind::kJensenShannon:
          x = js;
          break;
        case DetectorKind::kKs:
          x = ks;
          break;
        case DetectorKind::kPageHinkley:
          s.ph.Add(ms.z, det.delta);
          x = s.ph.Statistic();
          break;
        case DetectorKind::kErrorRate:
          continue;  // the error series only
      }
      AlertLevel lv = LevelOf(x, t.warn, t.alert);
      if (det.kind == DetectorKind::kMeanShift && ms.effect < det.min_effect) {
        lv = AlertLevel::kOk;  // significant but too small to matter
      }
      if (det.kind == DetectorKind::kPageHinkley && lv == AlertLevel::kAlert) {
        // Page-Hinkley integrates evidence already: its alarm needs no hysteresis, and it
        // restarts to measure from the new level.
        immediate = true;
        ph_fired = true;
      }
      stat[d] = x;
      level[d] = lv;
      observed = std::max(observed, lv);
      const double sev = Severity(lv, x, t.warn, t.alert);
      if (sev > lead_severity) {
        lead_severity = sev;
        lead = static_cast<int>(d);
      }
    }
    const AlertLevel before = s.alert.state();
    const int64_t now_ms = WindowClockMs(s.window_max_us);
    const auto changed =
        s.alert.Step(observed, immediate && observed == AlertLevel::kAlert, now_ms, policy_);
    // Page-Hinkley restarts after it fires and while its series is in ALERT: it looks for the
    // next change, and its memory of this one must not hold the alert open after a recovery.
    if (ph_fired || s.alert.state() == AlertLevel::kAlert) s.ph.Reset();
    auto readings = [&] {
      std::vector<DetectorReading> out;
      for (size_t d = 0; d < nd; ++d) {
        const DetectorConfig& det = detectors_[d];
        if (det.kind == DetectorKind::kErrorRate) continue;
        const Thresholds& t = m.thresholds[series * detectors_.size() + d];
        DetectorReading reading;
        reading.detector = det.name;
        reading.statistic = stat[d];
        reading.warn = t.warn;
        reading.alert = t.alert;
        reading.level = level[d];
        if (det.kind == DetectorKind::kMeanShift) {
          reading.extras = {{"z", ms.z}, {"welch_t", ms.welch_t}, {"effect", ms.effect}};
        }
        out.push_back(std::move(reading));
      }
      return out;
    };
    if (collect_evaluations_) RecordEvaluation(m, series, ref, true, before, readings());
    if (changed && lead >= 0) {
      const size_t ld = static_cast<size_t>(lead);
      const Thresholds& lt = m.thresholds[series * detectors_.size() + ld];
      AlertEvent e;
      e.level = *changed;
      e.previous_level = before;
      e.model = m.name;
      e.series = series_names_[series];
      // Clearing events name the detector that was worst at the evaluation.
      e.detector = std::string(detectors_[ld].name);
      e.statistic = stat[ld];
      e.threshold = *changed == AlertLevel::kAlert ? lt.alert : lt.warn;
      e.window_start_record = s.window_start;
      e.window_end_record = s.window_start + s.window.count();
      e.window_start_us = s.window_min_us;
      e.window_end_us = s.window_max_us;
      e.baseline_kind = spec_.baseline.kind;
      e.baseline_n = ref->count();
      e.baseline_mean = ref->mean();
      e.baseline_stddev = ref->Stddev();
      e.window_n = s.window.count();
      e.window_mean = s.window.mean();
      e.window_stddev = s.window.Stddev();
      e.detectors = readings();
      if (histogram) {
        std::vector<int> order(bins);
        for (size_t b = 0; b < bins; ++b) order[b] = static_cast<int>(b);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
          return std::abs(terms_[static_cast<size_t>(a)]) >
                 std::abs(terms_[static_cast<size_t>(b)]);
        });
        for (size_t i = 0; i < order.size() && i < static_cast<size_t>(kTopBins); ++i) {
          const size_t b = static_cast<size_t>(order[i]);
          e.top_bins.push_back({order[i], s.edges.Lower(b), s.edges.Upper(b), ref_shares_[b],
                                cur_shares_[b], terms_[b]});
        }
      }
      Transition(m, series, before, *changed, std::move(e));
    }
  }

  if (spec_.baseline.kind == BaselineKind::kTrailing) {
    const size_t k = static_cast<size_t>(spec_.baseline.windows);
    if (s.trailing.size() < k) {
      s.trailing.push_back({s.window, s.window_counts});
    } else {
      WindowSummary& slot = s.trailing[s.trailing_next];
      slot.moments = s.window;
      slot.counts = s.window_counts;  // same size: copies without allocating
    }
    s.trailing_next = static_cast<uint32_t>((s.trailing_next + 1) % k);
  }
  s.window.Clear();
  std::fill(s.window_counts.begin(), s.window_counts.end(), 0);
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
  const bool ready =
      s.err_window.count() >= spec_.min_samples && s.err_baseline.count() >= spec_.min_samples;
  if (!ready && collect_evaluations_) {
    RecordEvaluation(m, series, nullptr, false, s.alert.state(), {});
  }
  if (ready) {
    for (size_t d = 0; d < detectors_.size(); ++d) {
      const DetectorConfig& det = detectors_[d];
      if (det.kind != DetectorKind::kErrorRate) continue;
      const Thresholds& t = m.thresholds[series * detectors_.size() + d];
      const double rise = ErrorRateRise(s.err_baseline, s.err_window);
      const AlertLevel lv = LevelOf(rise, t.warn, t.alert);
      const AlertLevel before = s.alert.state();
      const auto changed = s.alert.Step(lv, false, WindowClockMs(s.window_max_us), policy_);
      DetectorReading reading;
      reading.detector = det.name;
      reading.statistic = rise;
      reading.warn = t.warn;
      reading.alert = t.alert;
      reading.level = lv;
      reading.extras = {{"baseline_error_rate", s.err_baseline.ErrorRate()},
                        {"window_error_rate", s.err_window.ErrorRate()},
                        {"baseline_mae", s.err_baseline.abs_error.mean()},
                        {"window_mae", s.err_window.abs_error.mean()},
                        {"error_threshold", det.threshold}};
      if (collect_evaluations_) RecordEvaluation(m, series, nullptr, true, before, {reading});
      if (!changed) break;
      AlertEvent e;
      e.level = *changed;
      e.previous_level = before;
      e.model = m.name;
      e.series = std::string(kErrorSeries);
      e.detector = std::string(det.name);
      e.statistic = rise;
      e.threshold = *changed == AlertLevel::kAlert ? t.alert : t.warn;
      e.window_start_record = s.window_start;
      e.window_end_record = s.window_start + s.err_window.count();
      e.window_start_us = s.window_min_us;
      e.window_end_us = s.window_max_us;
      e.baseline_kind = BaselineKind::kWarmup;
      e.baseline_n = s.err_baseline.count();
      e.baseline_mean = s.err_baseline.abs_error.mean();
      e.baseline_stddev = s.err_baseline.abs_error.Stddev();
      e.window_n = s.err_window.count();
      e.window_mean = s.err_window.abs_error.mean();
      e.window_stddev = s.err_window.abs_error.Stddev();
      e.detectors.push_back(std::move(reading));
      Transition(m, series, before, *changed, std::move(e));
      break;  // one error_rate detector drives the error series
    }
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
  const int64_t window_start = event.window_start_record;
  events_.push_back(std::move(event));
  if (level == AlertLevel::kAlert || previous == AlertLevel::kAlert) {
    UpdateRollup(m, now_ms, window_start);
  }
}

void DriftMonitor::UpdateRollup(ModelState& m, int64_t now_ms, int64_t window_start) {
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
  const auto changed = m.rollup.Step(observed, true, now_ms, policy_);
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
  e.window_start_record = window_start;
  e.window_end_record = window_start;
  e.baseline_kind = spec_.baseline.kind;
  e.alerting_series = std::move(alerting);
  const uint64_t id = AlertId(e.model, e.series, e.detector, *changed, window_start);
  if (*changed == AlertLevel::kAlert || m.rollup_incident == 0) m.rollup_incident = id;
  e.alert_id = HexId(id);
  e.incident_id = HexId(m.rollup_incident);
  events_.push_back(std::move(e));
}

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out) {
  Evaluate(batch_id, now_ms, out, nullptr);
}

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out,
                            std::vector<Evaluation>* evaluations) {
  last_now_ms_ = now_ms;
  if (et_size_us_ > 0) CloseEventWindows();
  for (AlertEvent& e : events_) {
    e.batch_id = batch_id;
    out.push_back(std::move(e));
  }
  events_.clear();
  if (evaluations != nullptr) {
    for (Evaluation& e : evaluations_) {
      e.batch_id = batch_id;
      evaluations->push_back(std::move(e));
    }
  }
  evaluations_.clear();
}

void DriftMonitor::RecordEvaluation(const ModelState& m, size_t series, const Moments* ref,
                                    bool evaluated, AlertLevel previous,
                                    std::vector<DetectorReading> readings) {
  const SeriesState& s = m.series[series];
  const bool is_error = series == series_names_.size();
  Evaluation e;
  e.model = m.name;
  e.series = is_error ? std::string(kErrorSeries) : series_names_[series];
  e.evaluated = evaluated;
  e.previous_level = previous;
  e.level = s.alert.state();
  e.window_start_record = s.window_start;
  e.window_start_us = s.window_min_us;
  e.window_end_us = s.window_max_us;
  if (is_error) {
    e.window_n = s.err_window.count();
    e.window_mean = s.err_window.abs_error.mean();
    e.window_stddev = s.err_window.abs_error.Stddev();
    e.baseline_n = s.err_baseline.count();
    e.baseline_mean = s.err_baseline.abs_error.mean();
    e.baseline_stddev = s.err_baseline.abs_error.Stddev();
  } else {
    e.window_n = s.window.count();
    e.window_mean = s.window.mean();
    e.window_stddev = s.window.Stddev();
    e.baseline_kind = spec_.baseline.kind;
    if (ref != nullptr) {
      e.baseline_n = ref->count();
      e.baseline_mean = ref->mean();
      e.baseline_stddev = ref->Stddev();
    }
  }
  e.window_end_record = e.window_start_record + e.window_n;
  e.detectors = std::move(readings);
  evaluations_.push_back(std::move(e));
}

namespace {

void EncodeSeries(const DriftMonitor::SeriesState& s, std::string& out);

}  // namespace

void DriftMonitor::CollectDirty(std::vector<std::pair<std::string, std::string>>& puts) {
  for (auto& mp : models_) {
    if (!mp) continue;
    ModelState& m = *mp;
    const std::string model_key = std::string(kStateKeyPrefix) + EscapeName(m.name);
    for (uint32_t series : m.dirty) {
      SeriesState& s = m.series[series];
      s.dirty = false;
      const std::string_view name =
          series < series_names_.size() ? std::string_view(series_names_[series]) : kErrorSeries;
      std::string value;
      EncodeSeries(s, value);
      puts.emplace_back(model_key + "/" + EscapeName(name), std::move(value));
    }
    m.dirty.clear();
    if (m.rollup_dirty) {
      m.rollup_dirty = false;
      std::string value;
      drift::ByteWriter w(value);
      w.U8(kRollupEncodingVersion);
      m.rollup.Encode(value);
      w.U64(m.rollup_incident);
      puts.emplace_back(model_key, std::move(value));
    }
  }
}

namespace {

void EncodeSeries(const DriftMonitor::SeriesState& s, std::string& out) {
  drift::ByteWriter w(out);
  w.U8(kSeriesEncodingVersion);
  w.U8(s.frozen ? 1 : 0);
  w.I64(s.seen);
  w.I64(s.first_event_us);
  w.U32(static_cast<uint32_t>(s.warmup.size()));
  for (double v : s.warmup) w.F64(v);
  s.baseline.Encode(out);
  w.U32(static_cast<uint32_t>(s.edges.inner().size()));
  for (double e : s.edges.inner()) w.F64(e);
  EncodeCounts(w, s.ref_counts);
  w.U32(static_cast<uint32_t>(s.trailing.size()));
  w.U32(s.trailing_next);
  for (const WindowSummary& t : s.trailing) {
    t.moments.Encode(out);
    EncodeCounts(w, t.counts);
  }
  s.window.Encode(out);
  EncodeCounts(w, s.window_counts);
  w.I64(s.window_start);
  w.I64(s.window_min_us);
  w.I64(s.window_max_us);
  std::string ph;
  s.ph.Encode(ph);
  w.Str(ph);
  s.alert.Encode(out);
  w.U64(s.incident);
  w.I64(s.err_baseline.errors);
  s.err_baseline.abs_error.Encode(out);
  w.I64(s.err_window.errors);
  s.err_window.abs_error.Encode(out);
  w.U32(static_cast<uint32_t>(s.open.size()));
  for (const OpenWindow& o : s.open) {
    w.I64(o.start_us);
    w.I64(o.first_index);
    o.moments.Encode(out);
    EncodeCounts(w, o.counts);
    w.I64(o.min_us);
    w.I64(o.max_us);
  }
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

Status DecodeSeries(std::string_view bytes, DriftMonitor::SeriesState& s, size_t bins_limit) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) {
    return MakeError(ErrorCode::kCorruption, "drift series state: {} ({} bytes)", what,
                     bytes.size());
  };
  const uint8_t version = r.U8();
  if (version != 1 && version != kSeriesEncodingVersion) return corrupt("unknown version");
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
  }
  if (!ReadMoments(r, s.window)) return corrupt("bad window moments");
  if (!DecodeCounts(r, s.window_counts)) return corrupt("bad window counts");
  s.window_start = r.I64();
  s.window_min_us = r.I64();
  s.window_max_us = r.I64();
  auto ph = PageHinkley::Decode(r.Str());
  if (!ph) return tl::unexpected(ph.error());
  s.ph = *ph;
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
      if (!ReadMoments(r, o.moments) || !DecodeCounts(r, o.counts)) {
        return corrupt("bad open window");
      }
      o.min_us = r.I64();
      o.max_us = r.I64();
      if (r.failed() || o.start_us <= previous_start ||
          (!o.counts.empty() && o.counts.size() != s.edges.bins())) {
        return corrupt("bad open window");
      }
      previous_start = o.start_us;
    }
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  const size_t bins = s.edges.bins();
  if (s.frozen && !s.ref_counts.empty() &&
      (s.ref_counts.size() != bins || s.window_counts.size() != bins)) {
    return corrupt("histogram sizes disagree");
  }
  if (s.trailing_next >= std::max<size_t>(1, s.trailing.size() + 1)) {
    return corrupt("bad trailing position");
  }
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

  auto series_name = UnescapeName(rest.substr(slash + 1));
  if (!series_name) return tl::unexpected(series_name.error());
  size_t index = series_names_.size();
  if (*series_name != kErrorSeries) {
    auto it = std::find(series_names_.begin(), series_names_.end(), *series_name);
    if (it == series_names_.end()) return Ok();  // series no longer watched
    index = static_cast<size_t>(it - series_names_.begin());
  }
  SeriesState decoded;
  if (auto st = DecodeSeries(value, decoded, 1'000'001); !st) {
    return tl::unexpected(st.error().Wrap(std::string(key)));
  }
  // A histogram that the current configuration does not use is dropped; one it needs but the
  // state lacks is rebuilt empty (the baseline then has no reference shares).
  if (has_histogram_ && index < series_names_.size() && decoded.frozen &&
      decoded.window_counts.size() != decoded.edges.bins()) {
    decoded.window_counts.assign(decoded.edges.bins(), 0);
    decoded.ref_counts.assign(decoded.edges.bins(), 0);
  }
  m->series[index] = std::move(decoded);
  m->series[index].dirty = false;
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
  s.baseline.Add(value);
  if (has_histogram_ && s.warmup.size() < kMaxWarmupValues) s.warmup.push_back(value);
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
                                  std::vector<int64_t> counts) {
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
  ModelState& m = ModelFor(model, model_name);
  SeriesState& s = m.series[series];
  MarkDirty(m, series);
  s.baseline = moments;
  s.edges = std::move(edges);
  s.ref_counts = std::move(counts);
  s.window_counts.assign(s.edges.bins(), 0);
  std::vector<double>().swap(s.warmup);
  s.frozen = true;
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
  obj.String("series", series);
  obj.String("detector", detector);
  obj.Number("statistic", statistic);
  obj.Number("threshold", threshold);
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
      d.Number("warn", r.warn);
      d.Number("alert", r.alert);
      d.String("level", ToString(r.level));
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
  obj.Int("batch_id", batch_id);
  obj.Close();
  return out;
}

}  // namespace driftd
