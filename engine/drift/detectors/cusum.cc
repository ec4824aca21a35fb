// cusum: a two-sided CUSUM of winsorized values standardized by the baseline. Its sums are fed
// per value (record windows) or per window by the monitor, which keeps them with the series'
// state (engine/drift/monitor_state.h); this reading turns them into a calibrated level.
#include <algorithm>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;
using calibration::ScoreOfTail;

void Evaluate(const EvaluationInput& in, const DetectorConfig& config, double warn, double alert,
              DetectorReading& out) {
  Begin(config, warn, alert, out);
  out.statistic = in.cusum;
  const double rate = calibration::CusumFalseAlarmRate(in.cusum_model, in.cusum);
  out.score = ScoreOfTail(std::min(1.0, rate * in.cusum_values_per_evaluation));
  out.warn_threshold = in.cusum_warn_h;
  out.alert_threshold = in.cusum_alert_h;
  out.min_effect = 0;
  out.effect = 0;
  // The thresholds were solved from the same rate, so the level follows the sum exactly.
  out.level = in.cusum >= in.cusum_alert_h   ? AlertLevel::kAlert
              : in.cusum >= in.cusum_warn_h ? AlertLevel::kWarn
                                            : AlertLevel::kOk;
  out.score = out.level == AlertLevel::kAlert  ? std::max(out.score, alert)
              : out.level == AlertLevel::kWarn ? std::clamp(out.score, warn, alert)
                                               : std::min(out.score, warn);
  out.window_level = AlertLevel::kOk;
  out.extras = {{"upper", in.cusum_up},
                {"lower", in.cusum_down},
                {"allowance", in.cusum_allowance}};
}

}  // namespace

DetectorDefaults CusumDetector() {
  return {.name = "cusum",
          .family = DetectorFamily::kLocation,
          .statistic = "two-sided CUSUM of winsorized values standardized by the baseline, per "
                       "value; its levels are false-alarm rates per windowRecords values, "
                       "baseline error included",
          .params = {{"allowance", 0.15, 0.01, 10, false,
                      "k in baseline sds: the CUSUM is fastest for shifts of 2k (raised for "
                      "short baselines)"}},
          .immediate = true,
          .evaluate = Evaluate,
          .extras = {"upper", "lower", "allowance"},
          .sequential = true};
}

}  // namespace driftd::detectors
