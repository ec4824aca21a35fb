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

#include "engine/drift/evaluation.h"
#include "engine/drift/monitor_layout.h"
#include "engine/drift/monitor_state.h"

namespace driftd {

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
    // What the monitor keeps for a detector follows from its definition: a histogram when
    // it reads bins, the error series' threshold, tracked categories, its state of each series
    // (DetectorSlots, below).
    const DetectorDefaults& defaults = DefaultsFor(ds.kind);
    DetectorConfig d = ResolveDetector(ds);
    if (defaults.Declares("bins")) {
      if (!has_histogram_) histogram_bins_ = static_cast<int>(DetectorParam(ds, "bins", 10));
      has_histogram_ = true;
    }
    if (defaults.error_series) {
      if (!has_error_rate_) error_threshold_ = d.threshold;
      has_error_rate_ = true;
    }
    if (defaults.Declares("categories")) {
      if (!has_categories) {
        max_categories_ = static_cast<size_t>(
            std::clamp(DetectorParam(ds, "categories", 30), 2.0, 1000.0));
      }
      has_categories = true;
    }
    detectors_.push_back(std::move(d));
  }
  detector_slots_ = DetectorSlots::Of(detectors_);
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

bool DriftMonitor::FedPerValue() const {
  return et_size_us_ == 0 && (spec_.baseline.kind == BaselineKind::kWarmup ||
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
  const std::optional<int64_t> start =
      EventWindowOf(event_time_us, late_before_us, watermark_us_, et_size_us_,
                    values_without_time_, late_values_);
  if (!start) return;
  OpenWindow& window = OpenWindowAt(s.open, *start, [&] {
    OpenWindow w;
    if (s.frozen) {
      w.raw.Reset(WindowShift(s, series));
      w.sums.Reset(WindowShift(s, series));
      if (has_histogram_) w.counts.assign(s.edges.bins(), 0);
    }
    return w;
  });
  if (!s.frozen) {
    window.sample.Add(value);
  } else {
    window.raw.Add(value);
    window.sums.Add(s.Clip(value));
    if (has_histogram_ && !window.counts.empty()) ++window.counts[s.edges.BinOf(value)];
  }
  WidenSpan(window.min_us, window.max_us, event_time_us);
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
    if (!WarmupRule::Of(spec_).CompleteAfterWindow(s.first_event_us, w.start_us + et_size_us_,
                                                   BaselineCount(s))) {
      return;
    }
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
  if (WarmupRule::Of(spec_).by_duration || spec_.baseline.kind == BaselineKind::kFile) {
    return kMaxWarmupValues;
  }
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
    const WarmupRule warmup = WarmupRule::Of(spec_);
    if (warmup.FreezesBefore(s.first_event_us, event_time_us, BaselineCount(s))) {
      FreezeBaseline(s);
      // This value is the first of the first window.
    } else {
      ++s.seen;
      AddBaselineValue(s, value);
      if (warmup.FullAfter(BaselineCount(s))) FreezeBaseline(s);
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
    StartWindow(s);
  }
  ++s.seen;
  ev.window_raw.Add(value);
  const double clipped = s.Clip(value);
  ev.window_sums.Add(clipped);
  if (has_histogram_) ++ev.window_counts[s.edges.BinOf(value)];
  WidenSpan(ev.window_min_us, ev.window_max_us, event_time_us);
  // Detectors with a state of the series that take values one by one (Prepare makes their
  // block).
  const uint8_t kind = SeriesBit(series_kinds_[series]);
  if ((detector_slots_.per_value_series & kind) != 0 && FedPerValue()) {
    if (!s.prepared) Prepare(m, series);
    std::byte* states = ev.detector_states.data();
    for (const PerValueSlot& feed : detector_slots_.per_value) {
      if ((feed.series & kind) == 0) continue;
      const AlertLevel level = feed.add_value(states + feed.offset, clipped);
      if (level != AlertLevel::kOk) [[unlikely]] {
        SequentialCheck(m, series, detector_slots_.slots[feed.slot], level, event_time_us);
      }
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
  // value cannot move a mean, a variance or a detector's state. Without spread in the middle
  // half (few distinct values) nothing is clipped.
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

StateReference DriftMonitor::ReferenceFor(const ModelState& m, size_t series,
                                          const DetectorSlot& slot,
                                          const HigherMoments& ref) const {
  const Thresholds& t = m.thresholds[series * detectors_.size() + slot.detector];
  return {ref, t.warn, t.alert, detectors_[slot.detector],
          static_cast<double>(spec_.window_records)};
}

void DriftMonitor::Prepare(ModelState& m, size_t series) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  s.prepared = true;
  if (detector_slots_.empty()) return;
  std::byte* states = ev.detector_states.Make(detector_slots_);
  const uint8_t kind = SeriesBit(series_kinds_[series]);
  for (const DetectorSlot& slot : detector_slots_.slots) {
    if (slot.ops->prepare == nullptr || (slot.series & kind) == 0) continue;
    slot.ops->prepare(states + slot.offset, ReferenceFor(m, series, slot, s.baseline_c));
  }
}

void DriftMonitor::StartWindow(SeriesState& s) {
  SeriesState::Evaluation& ev = s.mut_eval();
  if (!ev.detector_states.made()) return;
  std::byte* states = ev.detector_states.data();
  for (const DetectorSlot& slot : detector_slots_.slots) {
    if (slot.ops->start_window != nullptr) slot.ops->start_window(states + slot.offset);
  }
}

size_t DriftMonitor::PhaseOf(int64_t window_start_us) const {
  const int64_t phases = std::max<int64_t>(1, spec_.baseline.period_ms * 1000 / et_size_us_);
  int64_t index = window_start_us / et_size_us_;
  if (index * et_size_us_ > window_start_us) --index;
  return static_cast<size_t>(((index % phases) + phases) % phases);
}

void DriftMonitor::SequentialCheck(ModelState& m, size_t series, const DetectorSlot& slot,
                                   AlertLevel level, int64_t event_time_us) {
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  MarkDirty(m, series);
  const AlertLevel before = s.alert.state();
  if (before == AlertLevel::kAlert || (before == AlertLevel::kWarn && level == AlertLevel::kWarn)) {
    return;
  }
  const size_t d = slot.detector;
  const Thresholds& t = m.thresholds[series * detectors_.size() + d];
  const DetectorDefaults& kind = DefaultsFor(detectors_[d].kind);
  EvaluationInput in;
  in.state = ev.detector_states.data() + slot.offset;
  in.values_per_evaluation = static_cast<double>(spec_.window_records);
  readings_.resize(1);
  kind.evaluate(in, detectors_[d], t.warn, t.alert, readings_[0]);
  Verdict v;
  v.readings = &readings_;
  v.detector_of = {d};
  v.observed = readings_[0].level;
  v.lead = 0;
  v.immediate = kind.immediate;
  v.sequential = true;
  v.families_now = static_cast<uint8_t>(1u << static_cast<int>(kind.family));
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
  if (pack_) {
    SortByRecord(packed_, evaluation_records_);
  } else {
    SortByRecord(evaluations_, evaluation_records_);
  }
}

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out) {
  last_now_ms_ = now_ms;
  // What the batch's records raised, in record order; what closing event-time windows raises
  // comes after.
  InRecordOrder();
  record_ = kClosedWindow;
  if (et_size_us_ > 0) CloseEventWindows();
  for (AlertEvent& e : events_) {
    e.batch_id = batch_id;
    out.push_back(std::move(e));
  }
  events_.clear();
  last_event_records_.swap(event_records_);
  event_records_.clear();
  last_evaluation_records_ = evaluation_records_;
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

void DriftMonitor::Evaluate(int64_t batch_id, int64_t now_ms, std::vector<AlertEvent>& out,
                            std::vector<PackedRecord>& packed) {
  Evaluate(batch_id, now_ms, out);
  for (PackedRecord& e : packed_) e.evaluation.SetBatchId(batch_id);
  packed.clear();
  packed.swap(packed_);
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
    // The distributions compared: the histogram's bins, or the tracked categories and the rest.
    if (evaluated && !v->win_counts.empty() && v->win_counts.size() == v->ref_counts.size()) {
      const size_t cells = v->win_counts.size();
      e.distribution.resize(cells);
      if (!v->histogram && s.cat) e.categories.resize(cells);
      for (size_t b = 0; b < cells; ++b) {
        DistributionCell& cell = e.distribution[b];
        cell.baseline = v->ref_counts[b];
        cell.window = v->win_counts[b];
        if (v->histogram) {
          if (b == 0) e.distribution_lower = s.edges.Lower(0);
          cell.upper = s.edges.Upper(b);
        } else if (s.cat) {
          e.categories[b] =
              b < s.cat->set.tracked() ? s.cat->set.name(b) : std::string(kOtherCategory);
        }
      }
    }
  } else if (is_error) {
    e.window_start_record = s.eval().window_start;
    e.window_n = s.eval().err_window->count();
    e.window_end_record = e.window_start_record + e.window_n;
    e.window_start_us = s.eval().window_min_us;
    e.window_end_us = ExclusiveEndUs(s.eval().window_max_us);
    e.window_mean = s.eval().err_window->abs_error.mean();
    e.window_stddev = s.eval().err_window->abs_error.Stddev();
    e.baseline_n = s.eval().err_baseline->count();
    e.baseline_mean = s.eval().err_baseline->abs_error.mean();
    e.baseline_stddev = s.eval().err_baseline->abs_error.Stddev();
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
  if (pack_) {
    std::string model = e.model;
    packed_.push_back({std::move(model), pack_(std::move(e))});
  } else {
    evaluations_.push_back(std::move(e));
  }
  evaluation_records_.push_back(record_);
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
  s.mut_eval().err_baseline.mut().Add(prediction, label, error_threshold_);
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
  s.mut_eval().err_baseline.mut() = summary;
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
      const int64_t n = is_error ? s.eval().err_baseline->count()
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
        if (s.eval().err_baseline->count() == 0) continue;
        e.series = std::string(kErrorSeries);
        e.moments = s.eval().err_baseline->abs_error;
        e.errors = s.eval().err_baseline->errors;
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

}  // namespace driftd
