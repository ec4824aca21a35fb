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
    WidenSpan(ev.window_min_us, ev.window_max_us, event_time_us);
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
  // Half the baseline, so that the other half measures the share of values whose category the
  // first part did not see: the unseen share's own reference.
  if (WarmupRule::Of(spec_).by_duration) return CategoricalState::kMaxFirstPart;
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
    const std::optional<int64_t> start =
        EventWindowOf(event_time_us, late_before_us, watermark_us_, et_size_us_,
                      values_without_time_, late_values_);
    if (!start) return;
    CategoryWindow& window = OpenWindowAt(c.open, *start, [&] {
      CategoryWindow w;
      if (s.frozen) w.cells.assign(c.set.cells(), 0);
      return w;
    });
    if (!s.frozen) {
      window.sample.Add(hash, category);
    } else {
      const size_t cell = c.set.CellOf(hash);
      ++window.cells[cell];
      if (cell == c.set.unseen()) window.unseen.Add(hash, category);
    }
    WidenSpan(window.min_us, window.max_us, event_time_us);
    return;
  }
  if (!s.frozen) {
    const WarmupRule warmup = WarmupRule::Of(spec_);
    if (warmup.FreezesBefore(s.first_event_us, event_time_us, c.baseline_n())) {
      FreezeCategorical(s);  // this value is the first of the first window
    } else {
      ++s.seen;
      c.AddToBaseline(hash, &category, 1, FirstPart(), max_categories_);
      if (warmup.FullAfter(c.baseline_n())) FreezeCategorical(s);
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
  WidenSpan(ev.window_min_us, ev.window_max_us, event_time_us);
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
    if (!WarmupRule::Of(spec_).CompleteAfterWindow(s.first_event_us, w.start_us + et_size_us_,
                                                   c.baseline_n())) {
      return;
    }
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
    const Incident& inc = *ev.inc;
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

}  // namespace driftd
