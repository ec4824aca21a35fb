// stddev_ratio: the winsorized standard deviation of the last windows against the baseline's,
// judged on the log variance ratio with the baseline's kurtosis.
#include <algorithm>
#include <cmath>

#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;

struct SpreadTest {
  double log_ratio = 0;
  double variance = 1;
  double z = 0;
  double p = 1;
};

/// Kurtosis used for the spread test: the reference's, floored (a near-two-point distribution
/// has kurtosis near 1, and its estimate is then least reliable) and widened by its sampling
/// error so that a short or heavy-tailed baseline does not understate the spread's noise.
double SpreadKurtosis(const HigherMoments& ref) {
  const double n = std::max(4.0, static_cast<double>(ref.count()));
  return std::max(ref.Kurtosis(), 1.2) * (1 + 2 / std::sqrt(n));
}

SpreadTest TestSpread(const HigherMoments& ref, double kurtosis, const Lookback& lb) {
  SpreadTest t;
  if (lb.dof < 2 || ref.count() < 3) return t;
  const double floor = FlooredSigma(0, ref.mean());
  const double var_r = std::max(ref.Variance(), floor * floor);
  const double var_w = std::max(lb.pooled_variance, floor * floor);
  t.log_ratio = std::log(var_w / var_r);
  t.variance = (kurtosis - 1) * (1.0 / static_cast<double>(lb.dof) +
                                 1.0 / static_cast<double>(ref.count() - 1));
  t.z = t.log_ratio / std::sqrt(std::max(t.variance, 1e-300));
  t.p = TwoSidedTail(t.z);
  return t;
}

void EvaluateStddevRatio(const EvaluationInput& in, const DetectorConfig& config, double warn,
                         double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const HigherMoments& ref = in.reference;
  const size_t tests = in.lookbacks.size();
  if (tests == 0 || ref.count() < 3) return;
  const double kurtosis = SpreadKurtosis(ref);
  size_t best = 0;
  SpreadTest best_test;
  for (size_t j = 0; j < tests; ++j) {
    const SpreadTest t = TestSpread(ref, kurtosis, in.lookbacks[j]);
    if (j == 0 || std::abs(t.z) > std::abs(best_test.z)) {
      best = j;
      best_test = t;
    }
  }
  out.statistic = std::exp(std::abs(best_test.log_ratio) / 2);
  out.score = BonferroniScore(best_test.p, tests);
  out.effect = out.statistic;
  const double sd = std::sqrt(best_test.variance);
  out.warn_threshold =
      std::max(std::exp(TwoSidedCritical(warn, tests) * sd / 2), out.min_effect);
  out.alert_threshold =
      std::max(std::exp(TwoSidedCritical(alert, tests) * sd / 2), out.min_effect);
  Judge(warn, alert, out);
  const SpreadTest now = TestSpread(ref, kurtosis, in.lookbacks[0]);
  DetectorReading current = out;
  current.score = BonferroniScore(now.p, tests);
  current.effect = std::exp(std::abs(now.log_ratio) / 2);
  Judge(warn, alert, current);
  out.window_level = current.level;
  out.extras = {{"sd_ratio", std::exp(best_test.log_ratio / 2)},
                {"z", best_test.z},
                {"kurtosis", kurtosis},
                {"lookback_windows", static_cast<double>(in.lookbacks[best].windows)}};
}

}  // namespace

DetectorDefaults StddevRatioDetector() {
  return {.name = "stddev_ratio",
          .family = DetectorFamily::kSpread,
          .statistic = "max(s_w / s_ref, s_ref / s_w) of winsorized values, judged on the log "
                       "variance ratio with the baseline's kurtosis",
          .params = {{"minEffect", 1.1, 1, 1e6, false, "smallest ratio that may raise a level"}},
          .evaluate = EvaluateStddevRatio,
          .extras = {"sd_ratio", "z", "kurtosis", "lookback_windows"}};
}

}  // namespace driftd::detectors
