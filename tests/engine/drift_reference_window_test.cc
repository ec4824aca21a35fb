// DriftMonitor with a file baseline (reference records or statistics) and with event-time
// windows closed by the watermark.
#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/monitor.h"

namespace driftd {
namespace {

constexpr int64_t kT0 = 1'699'999'980'000'000;  // first value's event time, a whole minute (us)
constexpr int64_t kMinuteUs = 60'000'000;

DriftSpec Spec(BaselineKind kind) {
  DriftSpec spec;
  spec.enabled = true;
  spec.detectors = DefaultDetectorSpecs();
  spec.baseline.kind = kind;
  spec.baseline.records = 1000;  // the event-time timelines below assume a short warmup
  return spec;
}

std::vector<AlertEvent> Drain(DriftMonitor& monitor, int64_t batch) {
  std::vector<AlertEvent> events;
  monitor.Evaluate(batch, 0, events);
  return events;
}

int CountLevel(const std::vector<AlertEvent>& events, AlertLevel level) {
  int n = 0;
  for (const AlertEvent& e : events) n += e.level == level ? 1 : 0;
  return n;
}

TEST_CASE("reference records form the baseline, so drift present from the start is found",
          "[drift][monitor][baseline]") {
  auto monitor = DriftMonitor::Create(Spec(BaselineKind::kFile), {"x", "y"});
  REQUIRE(monitor);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0, 1);
  for (int i = 0; i < 5000; ++i) (*monitor)->ObserveReference(0, "m", 0, normal(rng));
  REQUIRE((*monitor)->FreezeReferences());
  // The stream of x is shifted by 0.5 sigma from its first value; y has no reference and
  // warms up on its own first 1000 values, so it stays quiet.
  std::vector<AlertEvent> events;
  for (int i = 0; i < 5000; ++i) {
    (*monitor)->Observe(0, "m", 0, normal(rng) + 0.5, kT0 + i);
    (*monitor)->Observe(0, "m", 1, normal(rng) + 3, kT0 + i);
  }
  (*monitor)->Evaluate(0, 0, events);
  REQUIRE(CountLevel(events, AlertLevel::kAlert) == 1);
  for (const AlertEvent& e : events) CHECK(e.series == "x");
  const AlertEvent& alert = *std::find_if(events.begin(), events.end(), [](const AlertEvent& e) {
    return e.level == AlertLevel::kAlert;
  });
  // Reference values take no value index: the CUSUM (per value) finds the shift within the
  // stream's first 500 values.
  CHECK(alert.detector == "cusum");
  CHECK(alert.window_end_record <= 500);
  CHECK(alert.baseline_n == 5000);
  CHECK(alert.ToJson().find(R"("baseline":{"type":"file","n":5000)") != std::string::npos);
}

TEST_CASE("reference statistics set the baseline of a series at once",
          "[drift][monitor][baseline]") {
  DriftSpec spec = Spec(BaselineKind::kFile);
  auto monitor = DriftMonitor::Create(spec, {"x"});
  REQUIRE(monitor);
  const Moments reference = Moments::FromParts(100'000, 10.0, 4.0 * 99'999, 0, 20, 1e6);
  // Edges at the deciles of N(10, 2) and equal counts.
  const std::vector<double> z = {-1.2816, -0.8416, -0.5244, -0.2533, 0,
                                 0.2533,  0.5244,  0.8416,  1.2816};
  std::vector<double> edges;
  for (double q : z) edges.push_back(10 + 2 * q);
  REQUIRE((*monitor)->SetReference(0, "m", 0, reference, edges,
                                   std::vector<int64_t>(10, 10'000)));
  std::mt19937_64 rng(11);
  std::normal_distribution<double> stationary(10, 2);
  for (int i = 0; i < 20'000; ++i) (*monitor)->Observe(0, "m", 0, stationary(rng), kT0 + i);
  CHECK(Drain(**monitor, 0).empty());
  std::normal_distribution<double> shifted(11, 2);
  for (int i = 0; i < 3000; ++i) (*monitor)->Observe(0, "m", 0, shifted(rng), kT0 + i);
  CHECK(CountLevel(Drain(**monitor, 1), AlertLevel::kAlert) == 1);
}

TEST_CASE("inconsistent reference statistics are refused with model and series named",
          "[drift][monitor][baseline]") {
  auto monitor = DriftMonitor::Create(Spec(BaselineKind::kFile), {"x"});
  REQUIRE(monitor);
  const Moments big = Moments::FromParts(1000, 0, 999, -3, 3, 0);
  // Histogram detectors are configured, so a histogram is required.
  auto no_histogram = (*monitor)->SetReference(0, "m", 0, big, {}, {});
  REQUIRE_FALSE(no_histogram);
  CHECK(no_histogram.error().message().find("model 'm' series 'x'") != std::string::npos);
  auto wrong_counts = (*monitor)->SetReference(0, "m", 0, big, {0.0}, {1, 2, 3});
  REQUIRE_FALSE(wrong_counts);
  CHECK(wrong_counts.error().message().find("1 edges make 2 bins") != std::string::npos);
  const Moments small = Moments::FromParts(50, 0, 49, -3, 3, 0);
  auto too_small = (*monitor)->SetReference(0, "m", 0, small, {0.0}, {25, 25});
  REQUIRE_FALSE(too_small);
  CHECK(too_small.error().message().find("below minSamples") != std::string::npos);

  auto records = DriftMonitor::Create(Spec(BaselineKind::kFile), {"x"});
  REQUIRE(records);
  for (int i = 0; i < 20; ++i) (*records)->ObserveReference(0, "m", 0, i);
  auto frozen = (*records)->FreezeReferences();
  REQUIRE_FALSE(frozen);
  CHECK(frozen.error().message().find("has 20 values, below minSamples") != std::string::npos);
}

/// Feeds `per_minute` values per minute of event time for `minutes` minutes from minute
/// `first`, N(mean(minute), 1), evaluating after every minute (one batch per minute) with the
/// watermark the query's clock would give: the largest event time minus `delay_us`.
struct EventTimeDriver {
  EventTimeDriver(DriftMonitor& m, int64_t delay) : monitor(m), delay_us(delay) {}
  DriftMonitor& monitor;
  int64_t delay_us = 0;
  std::mt19937_64 rng{3};
  int64_t batch = 0;
  std::vector<AlertEvent> events;

  void Minutes(int first, int minutes, int per_minute, const std::function<double(int)>& mean) {
    std::normal_distribution<double> normal(0, 1);
    for (int minute = first; minute < first + minutes; ++minute) {
      for (int i = 0; i < per_minute; ++i) {
        const int64_t t = kT0 + minute * kMinuteUs + i * (kMinuteUs / per_minute);
        monitor.Observe(0, "m", 0, mean(minute) + normal(rng), t);
      }
      monitor.AdvanceWatermark(monitor.max_event_time_us() - delay_us);
      monitor.Evaluate(batch++, 0, events);
    }
  }
};

TEST_CASE("event-time windows are evaluated when the watermark passes their end",
          "[drift][monitor][window]") {
  DriftSpec spec = Spec(BaselineKind::kWarmup);
  auto monitor = DriftMonitor::Create(spec, {"x"});
  REQUIRE(monitor);
  (*monitor)->UseEventTimeWindows(60'000, 0);
  EventTimeDriver driver{**monitor, 0};
  // The 1000-value warmup is made of whole windows: minutes 0 and 1 (1200 values). The mean
  // shifts by 1 sigma at minute 5.
  driver.Minutes(0, 10, 600, [](int minute) { return minute >= 5 ? 1.0 : 0.0; });
  REQUIRE(CountLevel(driver.events, AlertLevel::kAlert) == 1);
  const AlertEvent& alert = *std::find_if(
      driver.events.begin(), driver.events.end(),
      [](const AlertEvent& e) { return e.level == AlertLevel::kAlert; });
  // The CUSUM, fed per event-time window, needs no hysteresis: the ALERT is minute 5's window,
  // whose bounds [start, end) the event reports. It names the location detector furthest past
  // its level.
  CHECK((alert.detector == "cusum" || alert.detector == "mean_shift"));
  CHECK(alert.window_start_us == kT0 + 5 * kMinuteUs);
  CHECK(alert.window_end_us == kT0 + 6 * kMinuteUs);
  CHECK(alert.window_n == 600);
  // Minute 9 is still open: the watermark (the last event time) is inside it.
  CHECK((*monitor)->watermark_us() < kT0 + 10 * kMinuteUs);
  CHECK((*monitor)->stats().windows_evaluated == 7);  // windows 2 .. 8
}

TEST_CASE("a value behind the watermark is late: counted, not added", "[drift][monitor][window]") {
  auto monitor = DriftMonitor::Create(Spec(BaselineKind::kWarmup), {"x"});
  REQUIRE(monitor);
  (*monitor)->UseEventTimeWindows(60'000, 0);
  EventTimeDriver driver{**monitor, 10'000'000};  // 10 s of allowed lateness
  driver.Minutes(0, 3, 600, [](int) { return 0.0; });
  const int64_t watermark = (*monitor)->watermark_us();
  // Max event time ~ minute 3 - 0.1 s; watermark 10 s behind it: minute 1 has closed,
  // minute 2 has not.
  CHECK(watermark == kT0 + 3 * kMinuteUs - kMinuteUs / 600 - 10'000'000);
  (*monitor)->Observe(0, "m", 0, 0.0, kT0 + 1 * kMinuteUs + 5);  // window 1: closed
  (*monitor)->Observe(0, "m", 0, 0.0, kT0 + 2 * kMinuteUs + 5);  // window 2: open
  CHECK((*monitor)->stats().late_values == 1);
  (*monitor)->Observe(0, "m", 0, 0.0, INT64_MIN);
  CHECK((*monitor)->stats().values_without_time == 1);
}

TEST_CASE("open event-time windows survive a restore and give the same alerts",
          "[drift][monitor][window]") {
  auto mean = [](int minute) { return minute >= 6 ? 1.0 : 0.0; };
  auto make = [] {
    auto monitor = DriftMonitor::Create(Spec(BaselineKind::kTrailing), {"x"});
    REQUIRE(monitor);
    (*monitor)->UseEventTimeWindows(60'000, 0);
    return std::move(*monitor);
  };
  constexpr int64_t kDelay = 30'000'000;
  auto straight = make();
  EventTimeDriver a{*straight, kDelay};
  a.Minutes(0, 12, 500, mean);

  auto first = make();
  EventTimeDriver b{*first, kDelay};
  b.Minutes(0, 5, 500, mean);
  StatePuts puts;
  first->CollectDirty(puts);
  auto second = make();
  for (const auto& [key, value] : puts) REQUIRE(second->Restore(key, value));
  second->RestoreClock(first->max_event_time_us(), first->watermark_us());
  EventTimeDriver c{*second, kDelay};
  c.batch = b.batch;
  c.rng = b.rng;
  c.Minutes(5, 7, 500, mean);

  std::vector<std::string> expected;
  std::vector<std::string> actual;
  for (const AlertEvent& e : a.events) expected.push_back(e.ToJson());
  for (const AlertEvent& e : b.events) actual.push_back(e.ToJson());
  for (const AlertEvent& e : c.events) actual.push_back(e.ToJson());
  REQUIRE_FALSE(expected.empty());
  CHECK(actual == expected);
}

}  // namespace
}  // namespace driftd
