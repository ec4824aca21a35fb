// error_rate: the rise of the error rate of the last 1, 2, 4, 8 or 16 label windows over the
// baseline's (two-proportion test on the arcsine scale). It watches the error series, fed by
// labels.
#include <limits>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;

void EvaluateErrorRate(const EvaluationInput& in, const DetectorConfig& config, double warn,
                       double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const ErrorSummary& ref = in.error_reference;
  const size_t tests = in.error_lookbacks.size();
  if (tests == 0 || ref.count() <= 0) return;
  size_t best = 0;
  double best_z = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < tests; ++j) {
    const ErrorLookback& lb = in.error_lookbacks[j];
    if (lb.n <= 0) continue;
    const double z = ErrorRiseZ(ref.errors, ref.count(), lb.errors, lb.n);
    if (z > best_z) {
      best_z = z;
      best = j;
    }
  }
  const ErrorLookback& lb = in.error_lookbacks[best];
  const double ref_rate = ref.ErrorRate();
  const double rate = lb.n > 0 ? static_cast<double>(lb.errors) / static_cast<double>(lb.n) : 0;
  out.statistic = rate - ref_rate;
  out.effect = out.statistic;
  out.score = BonferroniScore(calibration::NormalUpperTail(best_z), tests);
  // The rise at which a level is reached, on the same arcsine scale.
  auto critical = [&](double level) {
    return RiseThreshold(level, tests, ref.errors, ref.count(), lb.n);
  };
  out.warn_threshold = std::max(critical(warn), out.min_effect);
  out.alert_threshold = std::max(critical(alert), out.min_effect);
  Judge(warn, alert, out);
  const ErrorLookback& now = in.error_lookbacks[0];
  DetectorReading current = out;
  current.score = BonferroniScore(
      calibration::NormalUpperTail(ErrorRiseZ(ref.errors, ref.count(), now.errors, now.n)),
      tests);
  current.effect = now.n > 0 ? static_cast<double>(now.errors) / static_cast<double>(now.n) - ref_rate
                             : 0;
  Judge(warn, alert, current);
  out.window_level = current.level;
  out.extras = {{"baseline_error_rate", ref_rate},
                {"window_error_rate", rate},
                {"baseline_mae", ref.abs_error.count() > 0 ? ref.abs_error.mean() : 0.0},
                {"window_mae", in.error_window.count() > 0 ? in.error_window.abs_error.mean() : 0.0},
                {"error_threshold", in.error_threshold},
                {"z", best_z},
                {"lookback_windows", static_cast<double>(lb.windows)}};
}

}  // namespace

DetectorDefaults ErrorRateDetector() {
  return {.name = "error_rate",
          .family = DetectorFamily::kError,
          .statistic = "rise of the error rate of the last 1, 2, 4, 8 or 16 label windows over "
                       "the baseline's (two-proportion test)",
          .params = {{"minEffect", 0.02, 0, 1, false, "smallest rise that may raise a level"},
                     {"threshold", 0.5, 0, 1e300, false,
                      "an error is |prediction - label| > threshold"}},
          .error_series = true,
          .evaluate = EvaluateErrorRate,
          .extras = {"baseline_error_rate", "window_error_rate", "baseline_mae", "window_mae",
                     "error_threshold", "z", "lookback_windows"}};
}

}  // namespace driftd::detectors
