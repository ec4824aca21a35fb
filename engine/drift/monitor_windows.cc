// A closed window of a numeric or rate series, and of the error series: the detectors' readings,
// the verdict, the incident's evidence, alert transitions and the model roll-up (monitor_state.h).
#include "engine/drift/monitor_state.h"

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

namespace driftd {

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
    StartWindow(s);
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
    // The detectors' states of the series learn of the window before the detectors read it:
    // fed per value, they had its values; otherwise this is their one update.
    const uint8_t kind_bit = SeriesBit(series_kind);
    std::byte* states = nullptr;
    if ((detector_slots_.series & kind_bit) != 0) {
      const bool per_value = FedPerValue();
      if (per_value && (detector_slots_.per_value_series & kind_bit) != 0 && !s.prepared) {
        Prepare(m, series);
      }
      states = ev.detector_states.Make(detector_slots_);
      for (const DetectorSlot& slot : detector_slots_.slots) {
        if ((slot.series & kind_bit) == 0) continue;
        slot.ops->close_window(states + slot.offset, ReferenceFor(m, series, slot, ref_c),
                               {window_c, per_value && slot.ops->add_value != nullptr});
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
    in.values_per_evaluation = static_cast<double>(spec_.window_records);
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
      const int slot = detector_slots_.of_detector[d];
      in.state = slot >= 0 && states != nullptr
                     ? states + detector_slots_.slots[static_cast<size_t>(slot)].offset
                     : nullptr;
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
    const Incident& inc = *ev.inc;
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
      if (ev.inc->error_n > 0) {
        v.llr[static_cast<int>(DetectorFamily::kError)] = ErrorBackEvidence(
            n_w, flagged, static_cast<double>(in.rate_ref_k) / static_cast<double>(in.rate_ref_n),
            static_cast<double>(ev.inc->error_errors) / static_cast<double>(ev.inc->error_n));
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
    Incident& inc = ev.inc.mut();
    for (int f = 0; f < kDetectorFamilies; ++f) {
      if ((inc.families & (1u << f)) && std::isfinite(v.llr[static_cast<size_t>(f)])) {
        inc.evidence[static_cast<size_t>(f)] =
            std::max(0.0, inc.evidence[static_cast<size_t>(f)] + v.llr[static_cast<size_t>(f)]);
      }
    }
    // A family that starts reading WARN during the incident joins it and must clear too.
    for (int f = 0; f < kDetectorFamilies && inc.families != 0; ++f) {
      if ((v.families_now & (1u << f)) && !(inc.families & (1u << f))) {
        inc.families = static_cast<uint8_t>(inc.families | (1u << f));
        inc.evidence[static_cast<size_t>(f)] = 0;
      }
    }
    if (inc.families == 0) {
      // An incident from state written before calibration knows nothing of its change: it
      // clears when a window reads below WARN on every detector.
      back = v.observed < AlertLevel::kWarn;
    } else {
      back = v.window_level < AlertLevel::kWarn;
      for (int f = 0; f < kDetectorFamilies && back; ++f) {
        if (inc.families & (1u << f)) {
          back = inc.evidence[static_cast<size_t>(f)] >= resolve_log_evidence_;
        }
      }
    }
  }
  const auto changed = s.alert.Step(v.observed, v.immediate, back, v.now_ms, policy_);
  const AlertLevel after = s.alert.state();
  const bool opens = changed && (before == AlertLevel::kOk || before == AlertLevel::kResolved) &&
                     (after == AlertLevel::kWarn || after == AlertLevel::kAlert);
  const bool leaves = changed && (after == AlertLevel::kOk || after == AlertLevel::kResolved);
  const int32_t incident_lead = ev.inc->lead;
  const int lead_family =
      v.lead >= 0 ? static_cast<int>(
                        DefaultsFor(detectors_[v.detector_of[static_cast<size_t>(v.lead)]].kind)
                            .family)
                  : 0;
  if (opens) {
    Incident& inc = ev.inc.mut();
    inc = Incident();
    inc.families = v.families_now != 0 ? v.families_now : static_cast<uint8_t>(1u << lead_family);
    inc.lead = static_cast<int32_t>(v.detector_of[static_cast<size_t>(v.lead)]);
  } else if (changed && after == AlertLevel::kAlert && v.lead >= 0) {
    Incident& inc = ev.inc.mut();
    inc.lead = static_cast<int32_t>(v.detector_of[static_cast<size_t>(v.lead)]);
    inc.families = static_cast<uint8_t>(inc.families | v.families_now);
  }
  if (!v.sequential && (after == AlertLevel::kWarn || after == AlertLevel::kAlert)) {
    AddToIncident(ev.inc.mut(), v.loc_n, v.loc_u, v.spread_dof, v.spread_log_ratio, v.win_counts,
                  v.ref_counts, v.error_n, v.error_errors);
  }
  if (leaves) {
    // The evidence the detector states and look-back tests held was the incident's: they start
    // afresh with the series back at its baseline.
    ev.inc.reset();
    if (ev.detector_states.made()) {
      for (const DetectorSlot& slot : detector_slots_.slots) {
        if (slot.ops->end_incident != nullptr) {
          slot.ops->end_incident(ev.detector_states.data() + slot.offset);
        }
      }
    }
    ev.recent.clear();
    ev.recent_next = 0;
  }
  // One evaluation per closed window (crossings of detectors fed per value between window ends
  // are alert events; the window they fall in is evaluated when it closes).
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
    ev.err_baseline.mut().Add(prediction, label, threshold);
    if (ev.err_baseline->count() >= spec_.baseline.records) {
      s.frozen = true;
      s.cold_dirty = true;  // the baseline moves to its own key
    }
    return;
  }
  if (ev.err_window->count() == 0) {
    ev.window_start = s.seen;
    ev.window_min_us = INT64_MIN;
    ev.window_max_us = INT64_MIN;
  }
  ++s.seen;
  ev.err_window.mut().Add(prediction, label, threshold);
  WidenSpan(ev.window_min_us, ev.window_max_us, event_time_us);
  if (ev.err_window->count() >= spec_.window_records) CloseErrorWindow(m);
}

void DriftMonitor::CloseErrorWindow(ModelState& m) {
  const size_t series = series_names_.size();
  SeriesState& s = m.series[series];
  SeriesState::Evaluation& ev = s.mut_eval();
  MarkDirty(m, series);
  ++windows_evaluated_;
  size_t d = detectors_.size();
  for (size_t i = 0; i < detectors_.size(); ++i) {
    if (DefaultsFor(detectors_[i].kind).error_series) {
      d = i;  // one error_rate detector drives the error series
      break;
    }
  }
  const bool ready = d < detectors_.size() && ev.err_window->count() >= spec_.min_samples &&
                     ev.err_baseline->count() >= spec_.min_samples;
  if (!ready && d < detectors_.size() && collect_evaluations_) {
    RecordEvaluation(m, series, false, s.alert.state(), nullptr);
  }
  if (ready) {
    Remember(ev.recent, ev.recent_next,
             {ev.err_window->count(), static_cast<double>(ev.err_window->errors), 0},
             kLookbackWindows);
    std::vector<ErrorLookback> lookbacks;
    BuildErrorLookbacks(ev.recent, ev.recent_next, lookbacks);
    EvaluationInput in;
    in.error_reference = *ev.err_baseline;
    in.error_window = *ev.err_window;
    in.error_lookbacks = lookbacks;
    in.error_threshold = detectors_[d].threshold;
    const Thresholds& t = m.thresholds[series * detectors_.size() + d];
    readings_.resize(1);
    DefaultsFor(detectors_[d].kind).evaluate(in, detectors_[d], t.warn, t.alert, readings_[0]);
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
    if (ev.inc->error_n > 0) {
      v.llr[static_cast<int>(DetectorFamily::kError)] = ErrorBackEvidence(
          ev.err_window->count(), ev.err_window->errors, ev.err_baseline->ErrorRate(),
          static_cast<double>(ev.inc->error_errors) / static_cast<double>(ev.inc->error_n));
    }
    v.error_n = ev.err_window->count();
    v.error_errors = ev.err_window->errors;
    v.now_ms = WindowClockMs(ev.window_max_us);
    v.window_start_record = ev.window_start;
    v.window_end_record = ev.window_start + ev.err_window->count();
    v.window_start_us = ev.window_min_us;
    v.window_end_us = ExclusiveEndUs(ev.window_max_us);
    v.window_n = ev.err_window->count();
    v.window_mean = ev.err_window->abs_error.mean();
    v.window_stddev = ev.err_window->abs_error.Stddev();
    v.baseline_n = ev.err_baseline->count();
    v.baseline_mean = ev.err_baseline->abs_error.mean();
    v.baseline_stddev = ev.err_baseline->abs_error.Stddev();
    Decide(m, series, v);
  }
  ev.err_window.mut().Clear();
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

}  // namespace driftd
