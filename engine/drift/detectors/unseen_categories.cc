// unseen_categories: the rise of a categorical window's share of values whose category the
// baseline never saw over the baseline's own (held-out) share.
#include <algorithm>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;

void EvaluateUnseenCategories(const EvaluationInput& in, const DetectorConfig& config, double warn,
                              double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  if (in.unseen_n <= 0 || in.ref_unseen_n <= 0) return;
  const double share = static_cast<double>(in.unseen) / static_cast<double>(in.unseen_n);
  const double ref_share =
      static_cast<double>(in.ref_unseen) / static_cast<double>(in.ref_unseen_n);
  const double z = ErrorRiseZ(in.ref_unseen, in.ref_unseen_n, in.unseen, in.unseen_n);
  out.statistic = share - ref_share;
  out.effect = out.statistic;
  out.score = BonferroniScore(calibration::NormalUpperTail(z), 1);
  out.warn_threshold = std::max(
      RiseThreshold(warn, 1, in.ref_unseen, in.ref_unseen_n, in.unseen_n), out.min_effect);
  out.alert_threshold = std::max(
      RiseThreshold(alert, 1, in.ref_unseen, in.ref_unseen_n, in.unseen_n), out.min_effect);
  Judge(warn, alert, out);
  out.window_level = out.level;
  out.extras = {{"window_share", share}, {"baseline_share", ref_share}, {"z", z}};
}

}  // namespace

DetectorDefaults UnseenCategoriesDetector() {
  return {.name = "unseen_categories",
          .family = DetectorFamily::kShape,
          .statistic = "rise of the window's share of values whose category the baseline never "
                       "saw over the baseline's own (held-out) share (two-proportion test)",
          .params = {{"minEffect", 0.02, 0, 1, false,
                      "smallest rise of the share that may raise a level"},
                     kCategoriesParam},
          .evaluate = EvaluateUnseenCategories,
          .extras = {"window_share", "baseline_share", "z"},
          .series = SeriesBit(SeriesKind::kCategorical),
          .in_fingerprint = false};
}

}  // namespace driftd::detectors
