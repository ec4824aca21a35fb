// Every calibrated level against simulated null distributions: streams that do not change, a
// fresh baseline per trial (so the baseline's own error is part of what is simulated), the
// detector alone in a DriftMonitor, and the share of evaluations whose score reaches a level
// compared with the false-alarm probability the level promises. Levels are set where the
// promise is measurable in a second (1e-2); the defaults sit further out in the same tails.
// Seeded and deterministic.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/calibration.h"
#include "engine/drift/monitor.h"

namespace driftd {
namespace {

using calibration::TailOfScore;

constexpr double kLevel = 2.054;  // a promised false-alarm probability of 2e-2 per evaluation

using Draw = std::function<double(std::mt19937_64&)>;

// Distribution objects live as long as the test (a normal draw comes in pairs).
double Normal(std::mt19937_64& rng) {
  static std::normal_distribution<double> n(0, 1);
  return n(rng);
}
double StudentT3(std::mt19937_64& rng) {
  static std::student_t_distribution<double> t(3);
  return t(rng);
}
double Bimodal(std::mt19937_64& rng) { return (rng() & 1 ? 1.0 : -1.0) + 0.45 * Normal(rng); }
double LogNormal(std::mt19937_64& rng) { return std::exp(0.6 * Normal(rng)); }

struct Setup {
  DetectorKind kind = DetectorKind::kMeanShift;
  int64_t baseline = 1000;
  int64_t window = 200;
  /// Windows per trial; the evaluation of the last one is counted (it sees every look-back).
  int windows = 1;
  int trials = 2000;
  Draw draw = Normal;
};

/// Share of trials whose counted evaluation scores at least kLevel, and the trials.
std::pair<int, int> NullExceedances(const Setup& setup, uint64_t seed) {
  DriftSpec spec;
  spec.enabled = true;
  DetectorSpec detector = DefaultDetectorSpec(setup.kind);
  detector.warn = kLevel;
  detector.alert = kLevel;
  // The floors are not part of the null distribution: they only hold levels down.
  detector.params["minEffect"] = setup.kind == DetectorKind::kStddevRatio ? 1 : 0;
  spec.detectors = {detector};
  spec.baseline.records = setup.baseline;
  spec.window_records = setup.window;
  spec.min_samples = std::min<int64_t>(setup.window, 100);
  spec.hysteresis = 1;
  spec.model_alert_series = 0;
  std::mt19937_64 rng(seed);
  int hits = 0;
  for (int trial = 0; trial < setup.trials; ++trial) {
    DriftMonitor monitor(spec, {"x"});
    monitor.CollectEvaluations(true);
    const int64_t values = setup.baseline + setup.window * setup.windows;
    for (int64_t i = 0; i < values; ++i) monitor.Observe(0, "m", 0, setup.draw(rng), i);
    std::vector<AlertEvent> events;
    std::vector<Evaluation> evaluations;
    monitor.Evaluate(0, 0, events, &evaluations);
    REQUIRE(evaluations.size() == static_cast<size_t>(setup.windows));
    const DetectorReading& r = evaluations.back().detectors.at(0);
    hits += r.score >= kLevel ? 1 : 0;
  }
  return {hits, setup.trials};
}

/// The promise holds: the observed count is within the binomial confidence bound (3 standard
/// deviations; the seeds are fixed, so a check cannot fail by chance from run to run) of the
/// promised probability; `at_least` also bounds it from below, for tests that are exact rather
/// than conservative.
void CheckPromise(std::pair<int, int> observed, double at_least) {
  const double p = TailOfScore(kLevel);
  const double n = observed.second;
  const double expected = n * p;
  const double bound = 3 * std::sqrt(n * p * (1 - p));
  INFO("observed " << observed.first << " of " << observed.second << ", promised " << expected
                   << " +- " << bound);
  CHECK(observed.first <= expected + bound);
  CHECK(observed.first >= at_least * expected - bound);
}

TEST_CASE("mean_shift's level is its false-alarm rate for any window and baseline size",
          "[drift][calibration]") {
  // Small window, small baseline: the baseline's error is half the variance of the difference.
  CheckPromise(NullExceedances({.kind = DetectorKind::kMeanShift, .baseline = 300, .window = 300}, 1), 0.7);
  CheckPromise(NullExceedances({.kind = DetectorKind::kMeanShift, .baseline = 1000, .window = 100}, 2), 0.7);
  // Heavy tails: the winsorized mean keeps the promise.
  CheckPromise(NullExceedances({.kind = DetectorKind::kMeanShift, .baseline = 500,
                                .window = 200, .draw = StudentT3}, 3), 0.5);
}

TEST_CASE("mean_shift over 16 look-back windows keeps its promise (Bonferroni)",
          "[drift][calibration]") {
  // The last window's evaluation tries 1, 2, 4, 8 and 16 windows; their common baseline makes
  // the longest look-backs nearly the same test, so the correction is conservative.
  CheckPromise(NullExceedances({.kind = DetectorKind::kMeanShift, .baseline = 300, .window = 100,
                                .windows = 16, .trials = 1500}, 4), 0.3);
}

TEST_CASE("stddev_ratio's level holds for normal, heavy-tailed, bimodal and skewed features",
          "[drift][calibration]") {
  CheckPromise(NullExceedances({.kind = DetectorKind::kStddevRatio, .baseline = 500, .window = 200}, 5), 0.5);
  CheckPromise(NullExceedances({.kind = DetectorKind::kStddevRatio, .baseline = 1000,
                                .window = 300, .draw = StudentT3}, 6), 0.3);
  CheckPromise(NullExceedances({.kind = DetectorKind::kStddevRatio, .baseline = 500,
                                .window = 300, .draw = Bimodal}, 7), 0.3);
  CheckPromise(NullExceedances({.kind = DetectorKind::kStddevRatio, .baseline = 500,
                                .window = 300, .draw = LogNormal}, 8), 0.3);
}

TEST_CASE("psi and js levels follow the chi-square and G tests of the frozen bins",
          "[drift][calibration]") {
  CheckPromise(NullExceedances({.kind = DetectorKind::kPsi, .baseline = 500, .window = 200}, 9), 0.5);
  CheckPromise(NullExceedances({.kind = DetectorKind::kPsi, .baseline = 1000, .window = 500,
                                .draw = StudentT3}, 10), 0.5);
  CheckPromise(NullExceedances({.kind = DetectorKind::kJensenShannon, .baseline = 500, .window = 200}, 11), 0.5);
  CheckPromise(NullExceedances({.kind = DetectorKind::kJensenShannon, .baseline = 500,
                                .window = 500, .draw = Bimodal}, 12), 0.5);
}

TEST_CASE("ks's level is conservative: the binned D never exceeds the raw D",
          "[drift][calibration]") {
  CheckPromise(NullExceedances({.kind = DetectorKind::kKs, .baseline = 500, .window = 200}, 13), 0);
  CheckPromise(NullExceedances({.kind = DetectorKind::kKs, .baseline = 1000, .window = 500,
                                .draw = LogNormal}, 14), 0);
}

/// Share of trials whose CUSUM raises a level within `values` values after the baseline, for a
/// level promising `rate` per value: about values * rate.
std::pair<int, double> CusumFirstAlarms(int64_t baseline, int64_t values, int trials,
                                        const Draw& draw, uint64_t seed) {
  DriftSpec spec;
  spec.enabled = true;
  DetectorSpec detector = DefaultDetectorSpec(DetectorKind::kCusum);
  detector.warn = kLevel;
  detector.alert = kLevel;
  spec.detectors = {detector};
  spec.baseline.records = baseline;
  spec.window_records = 1000;  // levels are per 1000 values: a rate of 1e-5 per value
  spec.model_alert_series = 0;
  std::mt19937_64 rng(seed);
  int alarms = 0;
  std::vector<AlertEvent> events;
  for (int trial = 0; trial < trials; ++trial) {
    DriftMonitor monitor(spec, {"x"});
    for (int64_t i = 0; i < baseline + values; ++i) monitor.Observe(0, "m", 0, draw(rng), i);
    events.clear();
    monitor.Evaluate(0, 0, events);
    alarms += events.empty() ? 0 : 1;
  }
  const double rate = TailOfScore(kLevel) / 1000;
  return {alarms, 1 - std::exp(-static_cast<double>(values) * rate)};
}

void CheckCusum(std::pair<int, double> observed, int trials, double at_least) {
  const double expected = trials * observed.second;
  const double bound = 3 * std::sqrt(trials * observed.second * (1 - observed.second));
  INFO("alarms " << observed.first << " of " << trials << ", promised " << expected << " +- "
                 << bound);
  CHECK(observed.first <= expected + bound);
  CHECK(observed.first >= at_least * expected - bound);
}

TEST_CASE("the CUSUM's per-value rate includes its baseline's error", "[drift][calibration]") {
  // 3000 values at 2e-5 per value: about 6% of the streams alarm, whatever the baseline size
  // (the allowance is raised for the short one) and the shape of the feature.
  CheckCusum(CusumFirstAlarms(2000, 3000, 1000, Normal, 21), 1000, 0.5);
  CheckCusum(CusumFirstAlarms(500, 3000, 1000, Normal, 22), 1000, 0.5);
  CheckCusum(CusumFirstAlarms(1000, 3000, 1000, StudentT3, 23), 1000, 0.4);
  CheckCusum(CusumFirstAlarms(1000, 3000, 1000, LogNormal, 24), 1000, 0.4);
}

/// Error-rate null: labels with a constant error probability, the last of `windows` windows.
std::pair<int, int> ErrorExceedances(double p, int64_t baseline, int64_t window, int windows,
                                     int trials, uint64_t seed) {
  DriftSpec spec;
  spec.enabled = true;
  DetectorSpec detector = DefaultDetectorSpec(DetectorKind::kErrorRate);
  detector.warn = kLevel;
  detector.alert = kLevel;
  detector.params["minEffect"] = 0;
  spec.detectors = {detector};
  spec.baseline.records = baseline;
  spec.window_records = window;
  spec.min_samples = std::min<int64_t>(window, 100);
  spec.hysteresis = 1;
  spec.model_alert_series = 0;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  int hits = 0;
  for (int trial = 0; trial < trials; ++trial) {
    DriftMonitor monitor(spec, {"x"});
    monitor.CollectEvaluations(true);
    monitor.Observe(0, "m", 0, 0.0, 0);
    for (int64_t i = 0; i < baseline + window * windows; ++i) {
      monitor.ObserveLabel(0, unit(rng) < p ? 1.0 : 0.0, 0.0, i);
    }
    std::vector<AlertEvent> events;
    std::vector<Evaluation> evaluations;
    monitor.Evaluate(0, 0, events, &evaluations);
    REQUIRE(evaluations.size() == static_cast<size_t>(windows));
    hits += evaluations.back().detectors.at(0).score >= kLevel ? 1 : 0;
  }
  return {hits, trials};
}

TEST_CASE("error_rate's two-proportion level includes the baseline's own error",
          "[drift][calibration]") {
  // A warm-up rate measured on few labels is off by chance; the test accounts for it.
  CheckPromise(ErrorExceedances(0.4, 500, 300, 1, 2000, 31), 0.5);
  CheckPromise(ErrorExceedances(0.1, 1000, 200, 1, 2000, 32), 0.5);
  CheckPromise(ErrorExceedances(0.05, 500, 200, 16, 1000, 33), 0.2);
}

TEST_CASE("calibration functions match published values", "[drift][calibration]") {
  CHECK(calibration::TailOfScore(5) == Approx(2.8665e-7).epsilon(1e-4));
  CHECK(calibration::ScoreOfTail(2.8665157e-7) == Approx(5).margin(1e-6));
  CHECK(calibration::ScoreOfTail(0.5) == Approx(0).margin(1e-12));
  CHECK(calibration::ScoreOfTail(1e-200) == Approx(30.2).margin(0.1));
  CHECK(calibration::ScoreOfTail(0) == calibration::kMaxScore);
  // Chi-square with 9 degrees of freedom: P(X >= 16.919) = 0.05.
  CHECK(calibration::ChiSquareUpperTail(16.919, 9) == Approx(0.05).epsilon(1e-3));
  CHECK(calibration::ChiSquareCritical(9, 0.05) == Approx(16.919).epsilon(1e-4));
  // Kolmogorov: P(sqrt(n) D >= 1.358) = 0.05 asymptotically.
  CHECK(calibration::KsUpperTail(1.358 / std::sqrt(1e8), 2e8, 2e8) == Approx(0.05).epsilon(2e-2));
  // CUSUM: Siegmund's run length (exp(-2 mu b) - 1 + 2 mu b) / (2 mu^2), b = h + 1.166.
  CHECK(calibration::CusumAverageRunLength(0.25, 10, 0.5) == Approx(36.694).epsilon(1e-4));
  // A longer baseline allows a lower threshold for the same rate.
  calibration::CusumModel short_baseline{0.25, 1000, 3, 0};
  calibration::CusumModel long_baseline{0.25, 100000, 3, 0};
  CHECK(calibration::CusumThreshold(long_baseline, 1e-9) <
        calibration::CusumThreshold(short_baseline, 1e-9));
  // And a baseline too short for the allowance raises it.
  calibration::CusumModel tiny{0.15, 300, 3, 0};
  CHECK(calibration::CusumFeasibleAllowance(tiny, 1e-10) > 0.3);
}

}  // namespace
}  // namespace driftd
