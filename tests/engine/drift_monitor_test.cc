#include "engine/drift/monitor.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <simdjson.h>
#include "engine/drift/codec.h"
#include "engine/drift/evaluation.h"
#include "tests/support/row_shape_check.h"
#include <catch2/catch.hpp>

namespace driftd {
namespace {

constexpr int kFeatures = 8;
constexpr int64_t kUsPerRecord = 1000;  // each model logs one record per millisecond

DriftSpec DefaultSpec() {
  DriftSpec spec;
  spec.enabled = true;
  spec.detectors = DefaultDetectorSpecs();  // what config/ fills in
  return spec;
}

std::vector<std::string> SeriesNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kFeatures; ++i) names.push_back("feature_vector[" + std::to_string(i) + "]");
  names.push_back("prediction");
  return names;
}

constexpr size_t kPrediction = kFeatures;

/// Stationary baseline of each series: feature f ~ N(0.5 f, 1 + 0.1 f), prediction ~ N(0.3, 0.1).
double BaseMean(size_t series) { return series == kPrediction ? 0.3 : 0.5 * double(series); }
double BaseSd(size_t series) { return series == kPrediction ? 0.1 : 1.0 + 0.1 * double(series); }

/// Change of one series' distribution: value = mean * sd_scale-adjusted draw + shift * sd.
struct Change {
  int model = -1;
  size_t series = 0;
  int64_t from = 0;  // first record index affected
  int64_t to = 0;    // first record index back to normal
  double shift_sd = 0;
  double sd_scale = 1;
  /// Linear drift: shift grows by this many sd per 100k records from `from` on.
  double slope_sd_per_100k = 0;
};

/// Drives a DriftMonitor the way the executor does: records of several models interleaved,
/// Evaluate() and CollectDirty() at every batch end.
class Harness {
 public:
  Harness(DriftMonitor& monitor, int models, uint64_t seed, int64_t batch_records = 10'000)
      : monitor_(monitor), rng_(seed), batch_records_(batch_records) {
    for (int m = 0; m < models; ++m) names_.push_back("model-" + std::to_string(m));
    next_.assign(static_cast<size_t>(models), 0);
  }

  std::vector<Change> changes;
  std::vector<AlertEvent> events;
  /// With keep_evaluations, each batch's evaluations (the monitor must collect them).
  bool keep_evaluations = false;
  std::vector<Evaluation> evaluations;
  std::map<std::string, std::string> store;  // what RocksDB would hold
  bool labels = false;
  double base_error_rate = 0.1;
  std::function<double(int model, int64_t record)> error_rate;  // overrides base_error_rate
  /// Dense ids as the executor interns them; a restarted executor may number models anew.
  std::vector<uint32_t> ids;

  /// Feeds `records` more records to every model.
  void Run(int64_t records) {
    const size_t series_count = monitor_.series_names().size();
    if (ids.empty()) {
      for (size_t m = 0; m < names_.size(); ++m) ids.push_back(static_cast<uint32_t>(m));
    }
    for (int64_t r = 0; r < records; ++r) {
      for (size_t m = 0; m < names_.size(); ++m) {
        const int64_t rec = next_[m]++;
        const int64_t t = 1'700'000'000'000'000 + rec * kUsPerRecord;
        for (size_t s = 0; s < series_count; ++s) {
          double mean = BaseMean(s), sd = BaseSd(s);
          for (const Change& c : changes) {
            if (c.model == static_cast<int>(m) && c.series == s && rec >= c.from && rec < c.to) {
              mean += c.shift_sd * BaseSd(s) +
                      c.slope_sd_per_100k * BaseSd(s) * double(rec - c.from) / 100'000.0;
              sd *= c.sd_scale;
            }
          }
          monitor_.Observe(ids[m], names_[m], s, mean + sd * normal_(rng_), t);
        }
        if (labels) {
          const double p = error_rate ? error_rate(static_cast<int>(m), rec) : base_error_rate;
          const double label = unit_(rng_) < 0.5 ? 1.0 : 0.0;
          const double prediction = unit_(rng_) < p ? 1.0 - label : label;
          monitor_.ObserveLabel(ids[m], prediction, label, t);
        }
      }
      if (++in_batch_ == batch_records_) EndBatch();
    }
  }

  void EndBatch() {
    in_batch_ = 0;
    const int64_t batch = batch_++;
    if (keep_evaluations) {
      monitor_.Evaluate(batch, 1'800'000'000'000 + batch, events, &evaluations);
    } else {
      monitor_.Evaluate(batch, 1'800'000'000'000 + batch, events);
    }
    StatePuts puts;
    std::vector<std::string> deletes;
    monitor_.CollectDirty(puts, deletes);
    for (auto& [k, v] : puts) store[k] = v;
    for (const std::string& k : deletes) store.erase(k);
  }

  std::vector<AlertEvent> Filter(AlertLevel level) const {
    std::vector<AlertEvent> out;
    for (const AlertEvent& e : events) {
      if (e.level == level) out.push_back(e);
    }
    return out;
  }

  int64_t batch() const { return batch_; }
  void SkipTo(int64_t record) { next_.assign(next_.size(), record); }
  void set_batch(int64_t b) { batch_ = b; }
  std::mt19937_64& rng() { return rng_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  DriftMonitor& monitor_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  std::vector<std::string> names_;
  std::vector<int64_t> next_;
  int64_t batch_records_;
  int64_t in_batch_ = 0;
  int64_t batch_ = 0;
};

std::string Describe(const std::vector<AlertEvent>& events) {
  std::string out;
  for (const AlertEvent& e : events) out += e.ToJson() + "\n";
  return out;
}

TEST_CASE("stationary streams of 8 models x 8 features x 1M records raise no alert",
          "[drift][monitor]") {
  DriftSpec spec = DefaultSpec();
  std::vector<std::string> names;
  for (int i = 0; i < kFeatures; ++i) names.push_back("feature_vector[" + std::to_string(i) + "]");
  DriftMonitor monitor(spec, names);
  Harness h(monitor, 8, 42, 100'000);
  h.Run(1'000'000);
  h.EndBatch();
  INFO(Describe(h.events));
  CHECK(h.Filter(AlertLevel::kAlert).empty());
  // Not even a warning: WARN events would be noise on the alert stream too.
  CHECK(h.events.empty());
  const DriftMonitorStats st = monitor.stats();
  CHECK(st.models == 8);
  CHECK(st.windows_evaluated == 8 * 8 * 995);  // 5000 warmup values, then 995 windows
  CHECK(st.series_in_alert == 0);
}

TEST_CASE("a 0.5 sigma mean shift on one feature alerts once for that series and resolves",
          "[drift][monitor]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 8, 7);
  // Shift from record 50'000 to 120'000 of model-5's feature 3.
  h.changes.push_back({.model = 5, .series = 3, .from = 50'000, .to = 120'000, .shift_sd = 0.5});
  h.Run(200'000);
  h.EndBatch();
  INFO(Describe(h.events));

  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  const AlertEvent& a = alerts[0];
  CHECK(a.model == "model-5");
  CHECK(a.series == "feature_vector[3]");
  // The CUSUM runs per value: it raises the ALERT between window ends.
  CHECK(a.detector == "cusum");
  // Stated bound (engine/drift/README.md): a 0.5 sigma shift is ALERTed within 500 values.
  CHECK(a.window_end_record > 50'000);
  CHECK(a.window_end_record <= 50'500);
  CHECK(a.statistic >= a.threshold);
  CHECK(a.score >= 5.5);
  REQUIRE(a.detectors.size() == 1);
  CHECK(a.threshold == a.detectors[0].alert_threshold);

  // One incident: a WARN may open it just before the ALERT; the RESOLVED closes it.
  const auto resolved = h.Filter(AlertLevel::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].model == "model-5");
  CHECK(resolved[0].series == "feature_vector[3]");
  CHECK(resolved[0].incident_id == a.incident_id);
  // It names the detector that raised the incident, with its statistic now.
  CHECK(resolved[0].detector == "cusum");
  // Stated bound: a 0.5 sigma change that reverts resolves with the first window after it.
  CHECK(resolved[0].window_end_record > 120'000);
  CHECK(resolved[0].window_end_record <= 122'000);
  for (const AlertEvent& e : h.events) {
    CHECK(e.incident_id == a.incident_id);
    CHECK((e.level == AlertLevel::kWarn || e.level == AlertLevel::kAlert ||
           e.level == AlertLevel::kResolved));
  }

  // Nothing anywhere else, not even a warning.
  for (const AlertEvent& e : h.events) {
    CHECK(e.model == "model-5");
    CHECK(e.series == "feature_vector[3]");
  }
}

TEST_CASE("a variance-only change is caught by spread detectors and not by mean shift",
          "[drift][monitor]") {
  Change change{.model = 1, .series = 2, .from = 30'000, .to = 1'000'000, .sd_scale = 1.6};

  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 4, 99);
  h.changes.push_back(change);
  h.Run(80'000);
  h.EndBatch();
  INFO(Describe(h.events));
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  CHECK(alerts[0].model == "model-1");
  CHECK(alerts[0].series == "feature_vector[2]");
  CHECK(alerts[0].window_end_record <= 33'000);
  const std::string& lead = alerts[0].detector;
  CHECK((lead == "stddev_ratio" || lead == "psi" || lead == "ks" || lead == "js"));
  for (const DetectorReading& r : alerts[0].detectors) {
    if (r.detector == "mean_shift") CHECK(r.level == AlertLevel::kOk);
    if (r.detector == "stddev_ratio") CHECK(r.level == AlertLevel::kAlert);
  }

  // A monitor with mean_shift alone sees nothing at all in the same stream.
  DriftSpec mean_only = DefaultSpec();
  mean_only.detectors = {DefaultDetectorSpec(DetectorKind::kMeanShift)};
  DriftMonitor mean_monitor(mean_only, SeriesNames());
  Harness hm(mean_monitor, 4, 99);
  hm.changes.push_back(change);
  hm.Run(80'000);
  hm.EndBatch();
  INFO(Describe(hm.events));
  CHECK(hm.events.empty());
}

TEST_CASE("prediction drift alerts on the prediction series", "[drift][monitor]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 3, 5);
  h.changes.push_back(
      {.model = 2, .series = kPrediction, .from = 20'000, .to = 1'000'000, .shift_sd = 1.0});
  h.Run(40'000);
  h.EndBatch();
  INFO(Describe(h.events));
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  CHECK(alerts[0].model == "model-2");
  CHECK(alerts[0].series == "prediction");
  CHECK(alerts[0].window_end_record <= 20'500);
  CHECK(alerts[0].baseline_mean == Approx(0.3).margin(0.02));
  // The window so far (the CUSUM alarms between window ends).
  CHECK(alerts[0].window_mean == Approx(0.4).margin(0.04));
}

TEST_CASE("a rise in the error rate alerts on the error series when labels arrive",
          "[drift][monitor][labels]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 3, 21);
  h.labels = true;
  // model-0's error rate goes from 10% to 25% at record 30'000.
  h.error_rate = [](int model, int64_t rec) { return model == 0 && rec >= 30'000 ? 0.25 : 0.10; };
  h.Run(60'000);
  h.EndBatch();
  INFO(Describe(h.events));
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  CHECK(alerts[0].model == "model-0");
  CHECK(alerts[0].series == "error");
  CHECK(alerts[0].detector == "error_rate");
  CHECK(alerts[0].statistic == Approx(0.15).margin(0.04));
  CHECK(alerts[0].window_end_record <= 33'000);
  REQUIRE(alerts[0].detectors.size() == 1);
  const auto& extras = alerts[0].detectors[0].extras;
  auto extra = [&](std::string_view name) {
    for (const auto& [k, v] : extras) {
      if (k == name) return v;
    }
    return -1.0;
  };
  CHECK(extra("baseline_error_rate") == Approx(0.10).margin(0.03));
  CHECK(extra("window_error_rate") == Approx(0.25).margin(0.04));
}

TEST_CASE("without labels the error series is never evaluated", "[drift][monitor][labels]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 2, 3);
  h.Run(20'000);
  h.EndBatch();
  CHECK(h.events.empty());
  CHECK(h.store.count("drift/model-0/error") == 0);
  // Each of 9 series per model: 5000 warmup values, then 15 windows; the error series none.
  CHECK(monitor.stats().windows_evaluated == 2 * 9 * 15);
  // A label for a model never observed is counted, not guessed at.
  monitor.ObserveLabel(77, 1.0, 0.0);
  CHECK(monitor.stats().skipped_labels == 1);
}

TEST_CASE("many drifting series of one model raise one model-level alert", "[drift][monitor]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 2, 17);
  for (size_t s : {0u, 4u, 6u}) {
    h.changes.push_back({.model = 1, .series = s, .from = 10'000, .to = 30'000, .shift_sd = 1.0});
  }
  h.Run(50'000);
  h.EndBatch();
  INFO(Describe(h.events));
  int series_alerts = 0;
  std::vector<AlertEvent> rollups;
  for (const AlertEvent& e : h.events) {
    CHECK(e.model == "model-1");
    if (e.series == "*") {
      rollups.push_back(e);
    } else if (e.level == AlertLevel::kAlert) {
      ++series_alerts;
    }
  }
  CHECK(series_alerts == 3);
  REQUIRE(rollups.size() == 2);
  CHECK(rollups[0].level == AlertLevel::kAlert);
  CHECK(rollups[0].detector == "rollup");
  CHECK(rollups[0].alerting_series.size() == 3);
  CHECK(rollups[1].level == AlertLevel::kResolved);
  CHECK(rollups[1].incident_id == rollups[0].alert_id);
  // Each carries the window and times of the series whose change raised or cleared it.
  for (const AlertEvent& r : rollups) {
    CHECK_FALSE(r.trigger_series.empty());
    CHECK(r.window_end_record > r.window_start_record);
    CHECK(r.window_n == r.window_end_record - r.window_start_record);
    CHECK(r.window_start_us != INT64_MIN);
    CHECK(r.window_end_us > r.window_start_us);
  }
}

TEST_CASE("per-model and per-series overrides change the thresholds that apply",
          "[drift][monitor]") {
  DriftSpec spec = DefaultSpec();
  spec.detectors = {DefaultDetectorSpec(DetectorKind::kMeanShift)};
  // model-1: feature_vector (all elements) may move a lot before it alerts.
  spec.overrides.push_back({.model = "model-1",
                            .series = "feature_vector",
                            .detector = "mean_shift",
                            .warn = 1e6,
                            .alert = 1e9,
                            .mark = {}});
  DriftMonitor monitor(spec, SeriesNames());
  Harness h(monitor, 2, 8);
  for (int m : {0, 1}) {
    h.changes.push_back({.model = m, .series = 1, .from = 5'000, .to = 1'000'000, .shift_sd = 1});
  }
  h.Run(10'000);
  h.EndBatch();
  INFO(Describe(h.events));
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  CHECK(alerts[0].model == "model-0");
}

TEST_CASE("a series that drifts again soon after RESOLVED re-alerts only after the cooldown",
          "[drift][monitor]") {
  DriftSpec spec = DefaultSpec();
  spec.cooldown_ms = 20'000;  // 20'000 records at one record per millisecond
  DriftMonitor monitor(spec, SeriesNames());
  Harness h(monitor, 1, 77);
  h.changes.push_back({.model = 0, .series = 6, .from = 10'000, .to = 15'000, .shift_sd = 1});
  h.changes.push_back({.model = 0, .series = 6, .from = 20'000, .to = 1'000'000, .shift_sd = 1});
  h.Run(45'000);
  h.EndBatch();
  INFO(Describe(h.events));
  std::vector<std::string> levels;
  for (const AlertEvent& e : h.events) {
    // The CUSUM crosses its WARN level a few values before its ALERT level: that WARN opens the
    // same incident.
    if (levels.empty() && e.level == AlertLevel::kWarn) continue;
    levels.emplace_back(ToString(e.level));
  }
  // ALERT, RESOLVED (16'000, cooldown until 36'000), the second drift shows as WARN while
  // cooling down, and its ALERT follows once the cooldown is over.
  CHECK(levels == std::vector<std::string>{"ALERT", "RESOLVED", "WARN", "ALERT"});
  REQUIRE(h.events.size() >= 4);
  const AlertEvent& second_alert = h.events.back();
  const AlertEvent& resolved = h.events[h.events.size() - 3];
  const AlertEvent& cooling = h.events[h.events.size() - 2];
  CHECK(resolved.window_end_record <= 16'000);
  CHECK(cooling.window_end_record <= 20'500);
  CHECK(second_alert.window_end_record >= resolved.window_end_record + 20'000);
  CHECK(second_alert.window_end_record <= resolved.window_end_record + 21'000);
  CHECK(second_alert.incident_id == cooling.alert_id);
}

TEST_CASE("a trailing baseline absorbs a persistent step and resolves its alert",
          "[drift][monitor][baseline]") {
  DriftSpec spec = DefaultSpec();
  spec.detectors = {DefaultDetectorSpec(DetectorKind::kMeanShift)};
  spec.baseline.kind = BaselineKind::kTrailing;
  spec.baseline.windows = 3;
  DriftMonitor monitor(spec, SeriesNames());
  Harness h(monitor, 1, 64);
  h.changes.push_back({.model = 0, .series = 0, .from = 20'000, .to = 1'000'000, .shift_sd = 1});
  h.Run(40'000);
  h.EndBatch();
  INFO(Describe(h.events));
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  CHECK(alerts[0].window_end_record <= 23'000);
  CHECK(alerts[0].baseline_kind == BaselineKind::kTrailing);
  CHECK(alerts[0].baseline_n == 3'000);
  const auto resolved = h.Filter(AlertLevel::kResolved);
  REQUIRE(resolved.size() == 1);
  // Three windows after the step the baseline is all new level: two clean windows later the
  // alert resolves, although the level never went back.
  CHECK(resolved[0].window_end_record <= 26'000);
  CHECK(h.events.size() == 2);
}

TEST_CASE("a warmup measured in event time takes the values of its first duration",
          "[drift][monitor][baseline]") {
  DriftSpec spec = DefaultSpec();
  spec.detectors = {DefaultDetectorSpec(DetectorKind::kMeanShift)};
  spec.baseline.duration_ms = 2'500;  // 2500 records at one record per millisecond
  DriftMonitor monitor(spec, SeriesNames());
  Harness h(monitor, 1, 65);
  h.changes.push_back({.model = 0, .series = 2, .from = 6'500, .to = 1'000'000, .shift_sd = 1});
  h.Run(10'000);
  h.EndBatch();
  INFO(Describe(h.events));
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  CHECK(alerts[0].baseline_n == 2'500);
  // Windows start after the warmup: [2500, 3500), ..., [6500, 7500), [7500, 8500).
  CHECK(alerts[0].window_start_record == 7'500);
}

TEST_CASE("alerts do not depend on where batches end", "[drift][monitor]") {
  auto run = [](int64_t batch_records) {
    DriftMonitor monitor(DefaultSpec(), SeriesNames());
    Harness h(monitor, 2, 1234, batch_records);
    h.changes.push_back({.model = 0, .series = 5, .from = 8'000, .to = 15'000, .shift_sd = 0.7});
    h.Run(20'000);
    h.EndBatch();
    std::vector<std::string> ids;
    for (const AlertEvent& e : h.events)
      ids.push_back(e.alert_id + " " + std::string(ToString(e.level)));
    return ids;
  };
  const auto a = run(777);
  const auto b = run(5'000);
  CHECK(a.size() >= 2);
  CHECK(a == b);
}

TEST_CASE("state restored from CollectDirty gives identical subsequent alerts",
          "[drift][monitor][state]") {
  const auto spec = DefaultSpec();
  std::vector<Change> changes = {
      {.model = 0, .series = 1, .from = 12'000, .to = 30'000, .shift_sd = 0.6},
      {.model = 2, .series = 7, .from = 4'000, .to = 40'000, .sd_scale = 1.7},
      {.model = 1, .series = kPrediction, .from = 16'500, .to = 40'000, .shift_sd = -1.0},
  };
  DriftMonitor original(spec, SeriesNames());
  Harness a(original, 3, 555, 3'333);
  a.changes = changes;
  a.labels = true;
  a.error_rate = [](int model, int64_t rec) { return model == 1 && rec > 18'000 ? 0.3 : 0.1; };
  a.Run(15'500);  // mid-window for every series
  a.EndBatch();

  // A restarted process: a new monitor restored from the store, models interned in another
  // order, the same input from here on.
  DriftMonitor restored(spec, SeriesNames());
  for (const auto& [key, value] : a.store) {
    INFO(key);
    REQUIRE(restored.Restore(key, value));
  }
  Harness b(restored, 3, 0, 3'333);
  b.changes = changes;
  b.labels = true;
  b.error_rate = a.error_rate;
  b.ids = {2, 0, 1};
  b.rng() = a.rng();  // the same random stream from here on
  b.set_batch(a.batch());
  b.SkipTo(15'500);

  const size_t before = a.events.size();
  a.Run(24'500);
  a.EndBatch();
  b.Run(24'500);
  b.EndBatch();
  std::vector<std::string> expected;
  for (size_t i = before; i < a.events.size(); ++i) expected.push_back(a.events[i].ToJson());
  std::vector<std::string> actual;
  for (const AlertEvent& e : b.events) actual.push_back(e.ToJson());
  CHECK(expected.size() >= 3);  // model-0 resolves, model-1's prediction and error alert
  CHECK(actual == expected);
  // And the state each wrote from then on agrees too.
  for (const auto& [key, value] : b.store) {
    INFO(key);
    const std::string& theirs = a.store.at(key);
    size_t diff = 0;
    while (diff < value.size() && diff < theirs.size() && value[diff] == theirs[diff]) ++diff;
    INFO("first difference at byte " << diff << " of " << value.size());
    CHECK(theirs == value);
  }
}

/// A series' state as the previous layout (version 2, before calibration) wrote it: a frozen
/// warmup of N(0, 1) values, an empty window, Page-Hinkley's state, and `level`.
std::string LegacySeriesState(AlertLevel level) {
  std::string out;
  drift::ByteWriter w(out);
  w.U8(2);
  w.U8(1);         // frozen
  w.I64(1000);     // values seen
  w.I64(INT64_MIN);
  w.U32(0);        // no warmup values left
  Moments::FromParts(1000, 0.0, 999.0, -3, 3, 0).Encode(out);
  const std::vector<double> deciles = {-1.2816, -0.8416, -0.5244, -0.2533, 0,
                                       0.2533,  0.5244,  0.8416,  1.2816};
  w.U32(static_cast<uint32_t>(deciles.size()));
  for (double e : deciles) w.F64(e);
  w.U32(10);
  for (int i = 0; i < 10; ++i) w.I64(100);  // reference counts
  w.U32(0);                                 // no trailing windows
  w.U32(0);
  Moments().Encode(out);  // the window
  w.U32(10);
  for (int i = 0; i < 10; ++i) w.I64(0);
  w.I64(1000);  // window start
  w.I64(INT64_MIN);
  w.I64(INT64_MIN);
  std::string ph(1, '\x01');  // Page-Hinkley, version 1: n and six doubles
  ph.append(8 * 7, '\0');
  w.Str(ph);
  AlertStateMachine alert;
  if (level == AlertLevel::kAlert) {
    AlertPolicy policy;
    alert.Step(AlertLevel::kAlert, true, false, 0, policy);
  }
  alert.Encode(out);
  w.U64(level == AlertLevel::kAlert ? 0x1234 : 0);  // incident
  w.I64(0);
  Moments().Encode(out);  // error baseline
  w.I64(0);
  Moments().Encode(out);  // error window
  w.U32(0);               // no open event-time windows
  return out;
}

TEST_CASE("state written before calibration (version 2) is still read and watched",
          "[drift][monitor][state]") {
  DriftSpec spec = DefaultSpec();
  DriftMonitor monitor(spec, {"x"});
  REQUIRE(monitor.Restore("drift/m/x", LegacySeriesState(AlertLevel::kOk)));
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0, 1);
  std::vector<AlertEvent> events;
  for (int i = 0; i < 20'000; ++i) monitor.Observe(0, "m", 0, normal(rng), 1'000'000 + i * 1000);
  monitor.Evaluate(0, 0, events);
  INFO(Describe(events));
  CHECK(events.empty());  // the old baseline (unwinsorized, normal-shaped) keeps quiet ...
  for (int i = 0; i < 3'000; ++i) {
    monitor.Observe(0, "m", 0, normal(rng) + 0.5, 30'000'000 + i * 1000);
  }
  monitor.Evaluate(1, 0, events);
  INFO(Describe(events));
  // ... and a shift after the upgrade is found (by the CUSUM, which starts afresh).
  CHECK(std::count_if(events.begin(), events.end(),
                      [](const AlertEvent& e) { return e.level == AlertLevel::kAlert; }) == 1);

  // An incident open in old state resolves on evidence once the series is back.
  DriftMonitor open(spec, {"x"});
  REQUIRE(open.Restore("drift/m/x", LegacySeriesState(AlertLevel::kAlert)));
  events.clear();
  for (int i = 0; i < 5'000; ++i) open.Observe(0, "m", 0, normal(rng), 1'000'000 + i * 1000);
  open.Evaluate(0, 0, events);
  INFO(Describe(events));
  REQUIRE(events.size() == 1);
  CHECK(events[0].level == AlertLevel::kResolved);
  CHECK(events[0].incident_id == "0000000000001234");
}

TEST_CASE("restore rejects corrupt state with an error instead of guessing",
          "[drift][monitor][state]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 1, 4);
  h.Run(6'500);  // frozen, a window closed: the series has a record of its own
  h.EndBatch();
  // The model record (what values change of each series) and a series' own record.
  for (const std::string key : {"drift/model-0", "drift/model-0/feature_vector[0]"}) {
    INFO(key);
    REQUIRE(h.store.count(key) == 1);
    std::string value = h.store[key];

    DriftMonitor fresh(DefaultSpec(), SeriesNames());
    auto truncated = fresh.Restore(key, std::string_view(value).substr(0, value.size() / 2));
    REQUIRE_FALSE(truncated);
    CHECK(truncated.error().code() == ErrorCode::kCorruption);
    CHECK_FALSE(fresh.Restore("other/key", value));
    // A series that is no longer configured is skipped quietly.
    CHECK(fresh.Restore("drift/model-0/retired_feature", value));
    CHECK(fresh.Restore(key, value));
  }
}

TEST_CASE("model names with slashes make distinct, reversible state keys",
          "[drift][monitor][state]") {
  DriftSpec spec = DefaultSpec();
  DriftMonitor monitor(spec, {"x"});
  const std::string odd = "team/a%b";
  monitor.Observe(0, odd, 0, 1.0, 0);
  StatePuts puts;
  monitor.CollectDirty(puts);
  // The series table, the model record and the segment of its first warmup values.
  REQUIRE(puts.size() == 3);
  std::map<std::string, std::string> written(puts.begin(), puts.end());
  REQUIRE(written.count("drift/%series") == 1);
  REQUIRE(written.count("drift/team%2Fa%25b") == 1);
  REQUIRE(written.count("drift/team%2Fa%25b/%w0") == 1);
  DriftMonitor restored(spec, {"x"});
  for (const auto& [key, value] : written) REQUIRE(restored.Restore(key, value));
  REQUIRE(restored.FinishRestore());
  restored.Observe(3, odd, 0, 2.0, 0);
  StatePuts again;
  restored.CollectDirty(again);
  REQUIRE(again.size() == 2);
  std::map<std::string, std::string> rewritten(again.begin(), again.end());
  CHECK(rewritten.count("drift/team%2Fa%25b") == 1);
  // It continued from the restored warmup: the second value in a segment of its own.
  CHECK(rewritten.count("drift/team%2Fa%25b/%w1") == 1);
  CHECK(rewritten.at("drift/team%2Fa%25b") != written.at("drift/team%2Fa%25b"));
  // Clean state is not written again.
  again.clear();
  restored.CollectDirty(again);
  CHECK(again.empty());
}

TEST_CASE("NaN and infinite values are skipped and counted", "[drift][monitor]") {
  DriftMonitor monitor(DefaultSpec(), {"x"});
  monitor.Observe(0, "m", 0, std::nan(""), 0);
  monitor.Observe(0, "m", 0, INFINITY, 0);
  CHECK(monitor.stats().skipped_values == 2);
  CHECK(monitor.stats().models == 0);
}

TEST_CASE("the alert JSON payload carries what an on-call engineer needs", "[drift][monitor]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 1, 31);
  // A spread change: the window detectors decide, so every reading and the bins come along.
  h.changes.push_back({.model = 0, .series = 4, .from = 10'000, .to = 1'000'000, .sd_scale = 2});
  h.Run(16'000);
  h.EndBatch();
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  const std::string json = alerts[0].ToJson();
  INFO(json);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  REQUIRE(parser.parse(json).get(doc) == simdjson::SUCCESS);
  CHECK(std::string_view(doc["alert_id"]).size() == 16);
  CHECK(std::string_view(doc["level"]) == "ALERT");
  CHECK(std::string_view(doc["model"]) == "model-0");
  CHECK(std::string_view(doc["series"]) == "feature_vector[4]");
  // Several detectors fire on a doubled spread; the event names the one furthest past its level,
  // and the others' readings come along.
  const std::string_view lead = doc["detector"];
  CHECK((lead == "stddev_ratio" || lead == "psi" || lead == "js" || lead == "ks"));
  CHECK(double(doc["statistic"]) >= double(doc["threshold"]));
  CHECK(double(doc["score"]) >= 5.5);
  CHECK(int64_t(doc["window"]["end_record"]) - int64_t(doc["window"]["start_record"]) == 1000);
  CHECK(int64_t(doc["window"]["n"]) == 1000);
  CHECK(std::string_view(doc["window"]["start_time"]).starts_with("2023-11-14T"));
  // end_time is exclusive, as end_record: 1 ms after the last value's millisecond.
  CHECK(alerts[0].window_end_us - alerts[0].window_start_us == 1000 * kUsPerRecord);
  CHECK(std::string_view(doc["baseline"]["type"]) == "warmup");
  CHECK(int64_t(doc["baseline"]["n"]) == 5000);
  CHECK(double(doc["baseline"]["mean"]) == Approx(2.0).margin(0.1));
  CHECK(double(doc["baseline"]["stddev"]) == Approx(1.4).margin(0.1));
  simdjson::dom::array readings = doc["detectors"];
  CHECK(readings.size() == 6);
  for (simdjson::dom::element r : readings) {
    // Every reading states its calibrated score, its levels and the statistic they need now.
    CHECK(r["score"].is_double());
    CHECK(double(r["warn"]) == 5);
    CHECK(double(r["alert"]) == 5.5);
    CHECK(double(r["alert_threshold"]) >= double(r["warn_threshold"]));
    CHECK(r["min_effect"].is_double());
  }
  simdjson::dom::array bins = doc["top_bins"];
  CHECK(bins.size() == 3);
  // A doubled spread crowds the open outer bins.
  bool outer_bin_seen = false;
  for (simdjson::dom::element b : bins) {
    if (b["upper"].is_null() || b["lower"].is_null()) outer_bin_seen = true;
  }
  CHECK(outer_bin_seen);
  CHECK(int64_t(doc["batch_id"]) == alerts[0].batch_id);
}

TEST_CASE("an ALERT the CUSUM raises between window ends names it and the window so far",
          "[drift][monitor]") {
  DriftMonitor monitor(DefaultSpec(), SeriesNames());
  Harness h(monitor, 1, 32);
  h.changes.push_back({.model = 0, .series = 4, .from = 10'000, .to = 1'000'000, .shift_sd = 2});
  h.Run(12'000);
  h.EndBatch();
  const auto alerts = h.Filter(AlertLevel::kAlert);
  REQUIRE(alerts.size() == 1);
  const AlertEvent& a = alerts[0];
  INFO(a.ToJson());
  CHECK(a.detector == "cusum");
  CHECK(a.window_start_record == 10'000);
  CHECK(a.window_end_record < 10'100);  // a 2 sigma shift: within a hundred values
  CHECK(a.window_n == a.window_end_record - a.window_start_record);
  REQUIRE(a.detectors.size() == 1);
  CHECK(a.detectors[0].level == AlertLevel::kAlert);
  CHECK(a.statistic == a.detectors[0].statistic);
  CHECK(a.threshold == a.detectors[0].alert_threshold);
}

TEST_CASE("a significant change below the effect floor is held down and says so",
          "[drift][monitor]") {
  DriftSpec spec = DefaultSpec();
  spec.detectors = {DefaultDetectorSpec(DetectorKind::kMeanShift)};
  spec.detectors[0].params["minEffect"] = 0.5;
  spec.hysteresis = 1;
  DriftMonitor monitor(spec, SeriesNames());
  monitor.CollectEvaluations(true);
  Harness h(monitor, 1, 33);
  // 0.3 sigma over windows of 1000: z ~ 8, far past the level, but under the floor of 0.5.
  h.changes.push_back({.model = 0, .series = 0, .from = 5'000, .to = 1'000'000, .shift_sd = 0.3});
  h.Run(10'000);
  std::vector<AlertEvent> events;
  std::vector<Evaluation> evaluations;
  monitor.Evaluate(h.batch(), 0, events, &evaluations);
  CHECK(events.empty());
  CHECK(h.events.empty());
  int held = 0;
  for (const Evaluation& e : evaluations) {
    if (e.series != "feature_vector[0]" || !e.evaluated) continue;
    REQUIRE(e.detectors.size() == 1);
    const DetectorReading& r = e.detectors[0];
    if (r.held_from == AlertLevel::kAlert) {
      ++held;
      CHECK(r.level == AlertLevel::kOk);
      CHECK(r.effect < 0.5);
      CHECK(r.score >= r.alert);
    }
  }
  CHECK(held >= 4);
}

TEST_CASE("alert and evaluation rows of every kind have the shape their Avro schemas are "
          "derived from, and each detector writes the extras its table entry lists",
          "[drift][monitor][row_shape]") {
  // Every registered detector, those that are not among the defaults too.
  DriftSpec spec = DefaultSpec();
  spec.detectors.clear();
  for (const DetectorDefaults& d : DetectorDefaultsTable()) {
    spec.detectors.push_back(DefaultDetectorSpec(d.kind));
  }
  DriftMonitor monitor(spec, SeriesNames());
  monitor.CollectEvaluations(true);
  Harness h(monitor, 2, 17);
  h.keep_evaluations = true;
  h.labels = true;
  // model-1: three series shift for a while (their alerts, a roll-up, then RESOLVED);
  // model-0: its error rate rises.
  for (size_t s : {0u, 4u, 6u}) {
    h.changes.push_back({.model = 1, .series = s, .from = 10'000, .to = 30'000, .shift_sd = 1.0});
  }
  h.error_rate = [](int model, int64_t rec) { return model == 0 && rec >= 20'000 ? 0.3 : 0.1; };
  h.Run(50'000);
  h.EndBatch();

  const RowShape alert_shape = AlertRowShape();
  std::set<std::string> seen;  // what the rows exercised
  for (const AlertEvent& event : h.events) {
    const std::string row = event.ToJson();
    INFO(row);
    CHECK(testing::ShapeMismatch(alert_shape, row).empty());
    seen.insert(std::string(ToString(event.level)));
    if (event.series == "*") seen.insert("rollup");
    if (!event.top_bins.empty()) seen.insert("top_bins");
    if (event.series == "error") seen.insert("error");
  }
  CHECK(seen == std::set<std::string>{"ALERT", "WARN", "RESOLVED", "rollup", "top_bins",
                                      "error"});

  const RowShape evaluation_shape = EvaluationRowShape();
  std::set<std::string> detectors;
  for (const Evaluation& evaluation : h.evaluations) {
    const std::string row = EvaluationToJson(evaluation);
    INFO(row);
    REQUIRE(testing::ShapeMismatch(evaluation_shape, row).empty());
    for (const DetectorReading& reading : evaluation.detectors) {
      detectors.insert(std::string(reading.detector));
      auto kind = ParseDetectorKind(reading.detector);
      REQUIRE(kind);
      std::vector<std::string_view> extras;
      for (const auto& [name, value] : reading.extras) extras.push_back(name);
      INFO(reading.detector);
      REQUIRE(extras == DefaultsFor(*kind).extras);
    }
  }
  // Every detector of numeric series and the error series (the categorical and rate series'
  // detectors: drift_categorical_test.cc).
  const auto numeric = std::count_if(
      DetectorDefaultsTable().begin(), DetectorDefaultsTable().end(),
      [](const DetectorDefaults& d) { return d.error_series || d.Watches(SeriesKind::kNumeric); });
  CHECK(static_cast<std::ptrdiff_t>(detectors.size()) == numeric);
}

}  // namespace
}  // namespace driftd
