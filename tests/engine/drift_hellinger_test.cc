// The hellinger detector (engine/drift/detectors/hellinger.cc): its distance and level against
// numbers computed by hand, its floor, its false-alarm promise on simulated streams that do not
// change, and a shifted stream that it reports through the monitor.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors.h"
#include "engine/drift/monitor.h"

namespace driftd {
namespace {

DetectorKind Hellinger() {
  const auto kind = ParseDetectorKind("hellinger");
  REQUIRE(kind);
  return *kind;
}

DetectorReading Read(std::vector<int64_t> window, std::vector<int64_t> reference) {
  EvaluationInput in;
  in.win_counts = window;
  in.ref_counts = reference;
  const DetectorConfig config = ResolveDetector(DefaultDetectorSpec(Hellinger()));
  DetectorReading reading;
  DefaultsFor(config.kind).evaluate(in, config, 5, 5.5, reading);
  return reading;
}

TEST_CASE("hellinger is registered once, with its parameters, off by default",
          "[drift][hellinger]") {
  const DetectorDefaults& d = DefaultsFor(Hellinger());
  CHECK(d.name == "hellinger");
  CHECK(d.family == DetectorFamily::kShape);
  CHECK(d.Declares("bins"));
  CHECK(DetectorParam(DefaultDetectorSpec(Hellinger()), "minEffect") == 0.04);
  CHECK(d.Watches(SeriesKind::kNumeric));
  CHECK(d.Watches(SeriesKind::kCategorical));
  CHECK_FALSE(d.Watches(SeriesKind::kMissing));
  // Not among the defaults: pipelines without a detectors list keep their alerts and state.
  for (const DetectorSpec& spec : DefaultDetectorSpecs()) CHECK(spec.kind != Hellinger());
}

TEST_CASE("hellinger's distance, statistic and levels match the numbers computed by hand",
          "[drift][hellinger]") {
  // DESIGN.md's shares: reference [.25, .25, .25, .25], window [.10, .20, .30, .40], here as
  // 1000 reference values and 400 window values.
  //   sum sqrt(p q) = .5 (sqrt .1 + sqrt .2 + sqrt .3 + sqrt .4) = .5 * 1.943619 = 0.971810
  //   H^2 = 1 - 0.971810 = 0.028190, H = 0.167900
  //   Pearson's chi-square of the 2 x 4 table (pooled shares 290/1400, 330/1400, 370/1400,
  //   410/1400): 58.7187 on 3 degrees of freedom, P(chi2_3 >= 58.7187) = 1.1039e-12: score
  //   7.0207 (the z of that upper tail)
  //   n_eff = 400 * 1000 / 1400 = 285.714, and 8 n_eff H^2 is Pearson's to first order:
  //   level 5 (tail 2.8665e-7): chi2_3 critical 33.2398, H = sqrt(33.2398 / (8 n_eff)) = 0.120592
  //   level 5.5 (tail 1.8990e-8): critical 38.8157, H = 0.130314
  const DetectorReading r = Read({40, 80, 120, 160}, {250, 250, 250, 250});
  CHECK(r.detector == "hellinger");
  CHECK(r.statistic == Approx(0.167900).margin(1e-6));
  CHECK(r.effect == r.statistic);
  CHECK(r.score == Approx(7.0207).margin(1e-3));
  CHECK(r.warn_threshold == Approx(0.120592).margin(1e-5));
  CHECK(r.alert_threshold == Approx(0.130314).margin(1e-5));
  CHECK(r.level == AlertLevel::kAlert);
  CHECK(r.window_level == AlertLevel::kAlert);
  REQUIRE(r.extras.size() == 2);
  CHECK(r.extras[0].first == "chi_square");
  CHECK(r.extras[0].second == Approx(58.7187).margin(1e-3));
  CHECK(r.extras[1].first == "df");
  CHECK(r.extras[1].second == 3);

  // The same shares, 1000 values each: the same distance; Pearson's chi-square 109.002.
  const DetectorReading same_n = Read({100, 200, 300, 400}, {250, 250, 250, 250});
  CHECK(same_n.statistic == Approx(0.167900).margin(1e-6));
  CHECK(same_n.score == Approx(calibration::ScoreOfTail(
                                   calibration::ChiSquareUpperTail(109.002, 3)))
                            .margin(1e-3));

  // Identical shares: distance 0, no level. An empty cell in both does not count as a degree
  // of freedom.
  const DetectorReading none = Read({100, 100, 0, 100}, {300, 300, 0, 300});
  CHECK(none.statistic == Approx(0).margin(1e-9));
  CHECK(none.level == AlertLevel::kOk);
  CHECK(none.extras.at(1).second == 2);
}

TEST_CASE("a significant but small hellinger distance is held down by minEffect",
          "[drift][hellinger]") {
  // A million values each, shares .24/.26 instead of .25/.25 in two of four cells:
  //   sum sqrt(p q) = .5 (sqrt .24 + sqrt .26 + 1) = 0.999900, H = 0.0100 (below 0.04)
  //   Pearson's chi-square 400.2 on 3 degrees of freedom: far past both levels.
  const DetectorReading r =
      Read({240'000, 260'000, 250'000, 250'000}, {250'000, 250'000, 250'000, 250'000});
  CHECK(r.statistic == Approx(0.0100).margin(1e-4));
  CHECK(r.score > 5.5);
  CHECK(r.level == AlertLevel::kOk);
  CHECK(r.held_from == AlertLevel::kAlert);
  CHECK(r.warn_threshold == 0.04);
}

// As tests/engine/drift_calibration_test.cc: streams that do not change, a fresh baseline per
// trial, the share of evaluations whose score reaches a level of 2.054 (a promised false-alarm
// probability of 2e-2) within 3 binomial standard deviations of the promise.
TEST_CASE("hellinger's level is its false-alarm rate over the frozen bins",
          "[drift][hellinger][calibration]") {
  constexpr double kLevel = 2.054;
  DriftSpec spec;
  spec.enabled = true;
  DetectorSpec detector = DefaultDetectorSpec(Hellinger());
  detector.warn = kLevel;
  detector.alert = kLevel;
  detector.params["minEffect"] = 0;
  spec.detectors = {detector};
  spec.baseline.records = 500;
  spec.window_records = 200;
  spec.min_samples = 100;
  spec.hysteresis = 1;
  spec.model_alert_series = 0;
  std::mt19937_64 rng(21);
  std::normal_distribution<double> normal(0, 1);
  constexpr int kTrials = 2000;
  int hits = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    DriftMonitor monitor(spec, {"x"});
    monitor.CollectEvaluations(true);
    for (int64_t i = 0; i < 700; ++i) monitor.Observe(0, "m", 0, normal(rng), i);
    std::vector<AlertEvent> events;
    std::vector<Evaluation> evaluations;
    monitor.Evaluate(0, 0, events, &evaluations);
    REQUIRE(evaluations.size() == 1);
    hits += evaluations[0].detectors.at(0).score >= kLevel ? 1 : 0;
  }
  const double p = calibration::TailOfScore(kLevel);
  const double bound = 3 * std::sqrt(kTrials * p * (1 - p));
  INFO("observed " << hits << " of " << kTrials << ", promised " << kTrials * p);
  CHECK(hits <= kTrials * p + bound);
  CHECK(hits >= 0.5 * kTrials * p - bound);
}

TEST_CASE("a monitor with hellinger reports a feature whose spread doubled",
          "[drift][hellinger]") {
  DriftSpec spec;
  spec.enabled = true;
  spec.detectors = {DefaultDetectorSpec(Hellinger())};
  spec.window_records = 500;
  spec.baseline.records = 2000;
  DriftMonitor monitor(spec, {"x"});
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0, 1);
  int64_t t = 0;
  for (int i = 0; i < 2000 + 500; ++i) monitor.Observe(0, "m", 0, normal(rng), ++t);
  std::vector<AlertEvent> events;
  monitor.Evaluate(0, 0, events);
  CHECK(events.empty());
  // The shares over the frozen bins move to the outer bins; two windows (hysteresis 2).
  for (int i = 0; i < 2 * 500; ++i) monitor.Observe(0, "m", 0, 2 * normal(rng), ++t);
  monitor.Evaluate(1, 0, events);
  REQUIRE_FALSE(events.empty());
  CHECK(events.back().detector == "hellinger");
  CHECK(events.back().level >= AlertLevel::kWarn);
  REQUIRE_FALSE(events.back().detectors.empty());
  CHECK(events.back().detectors[0].statistic > events.back().detectors[0].warn_threshold);
}

}  // namespace
}  // namespace driftd
