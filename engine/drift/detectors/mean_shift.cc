// mean_shift: the winsorized mean of the last 1, 2, 4, 8 or 16 windows against the baseline's.
#include <algorithm>
#include <cmath>

#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;

struct LocationTest {
  double z = 0;
  double p = 1;
  double se = 1;
};

LocationTest TestLocation(const HigherMoments& ref, double sigma, const Lookback& lb) {
  LocationTest t;
  if (lb.n <= 0 || ref.count() <= 0) return t;
  // Welch's variance, with the window's own (within-window) spread floored at the reference's:
  // a wider window is not more evidence of a shift, a narrower one not more precision.
  const double var_w = std::max(lb.pooled_variance, sigma * sigma);
  t.se = std::sqrt(var_w / static_cast<double>(lb.n) +
                   sigma * sigma / static_cast<double>(ref.count()));
  t.z = (lb.mean - ref.mean()) / t.se;
  t.p = TwoSidedTail(t.z);
  return t;
}

void EvaluateMeanShift(const EvaluationInput& in, const DetectorConfig& config, double warn,
                       double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const HigherMoments& ref = in.reference;
  const double sigma = FlooredSigma(ref.Stddev(), ref.mean());
  const size_t tests = in.lookbacks.size();
  if (tests == 0 || ref.count() <= 0) return;
  size_t best = 0;
  LocationTest best_test;
  for (size_t j = 0; j < tests; ++j) {
    const LocationTest t = TestLocation(ref, sigma, in.lookbacks[j]);
    if (j == 0 || std::abs(t.z) > std::abs(best_test.z)) {
      best = j;
      best_test = t;
    }
  }
  const Lookback& lb = in.lookbacks[best];
  const double diff = lb.mean - ref.mean();
  out.statistic = std::abs(best_test.z);
  out.score = BonferroniScore(best_test.p, tests);
  out.effect = std::abs(diff) / sigma;
  const double floor_z = out.min_effect * sigma / best_test.se;  // the floor's |z| here
  out.warn_threshold = std::max(TwoSidedCritical(warn, tests), floor_z);
  out.alert_threshold = std::max(TwoSidedCritical(alert, tests), floor_z);
  Judge(warn, alert, out);
  // The current window alone decides whether an incident may leave.
  const LocationTest now = TestLocation(ref, sigma, in.lookbacks[0]);
  DetectorReading current = out;
  current.score = BonferroniScore(now.p, tests);
  current.effect = std::abs(in.lookbacks[0].mean - ref.mean()) / sigma;
  Judge(warn, alert, current);
  out.window_level = current.level;
  const double s_w = std::sqrt(std::max(0.0, lb.pooled_variance));
  const double welch = diff / std::sqrt(sigma * sigma / static_cast<double>(ref.count()) +
                                        s_w * s_w / static_cast<double>(std::max<int64_t>(1, lb.n)));
  // (The effect is the reading's own `effect`; an extra of that name would repeat the member.)
  out.extras = {{"z", best_test.z},
                {"welch_t", welch},
                {"lookback_windows", static_cast<double>(lb.windows)}};
}

}  // namespace

DetectorDefaults MeanShiftDetector() {
  return {.name = "mean_shift",
          .family = DetectorFamily::kLocation,
          .statistic = "|z| of the winsorized mean of the last 1, 2, 4, 8 or 16 windows against "
                       "the baseline's (both samples' errors in its variance)",
          .params = {{"minEffect", 0.1, 0, 1e6, false,
                      "smallest |shift| / baseline sd that may raise a level"}},
          .evaluate = EvaluateMeanShift,
          .extras = {"z", "welch_t", "lookback_windows"}};
}

}  // namespace driftd::detectors
