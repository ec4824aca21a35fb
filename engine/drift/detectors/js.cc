// js: the Jensen-Shannon distance (base 2) over the frozen bins (or category cells); its level
// from the G test of the two count vectors.
#include <cmath>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"
#include "engine/drift/histogram.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;
using calibration::ScoreOfTail;
using calibration::TailOfScore;

void EvaluateJs(const EvaluationInput& in, const DetectorConfig& config, double warn,
                double alert, DetectorReading& out) {
  const std::optional<Homogeneity> h =
      BeginShareDistance(in, config, warn, alert, JensenShannonDistance, out);
  if (!h) return;
  out.score = ScoreOfTail(calibration::ChiSquareUpperTail(h->g, h->df));
  const double scale = (1 / h->n_w + 1 / h->n_r) / (8 * std::log(2.0));
  FinishShape(std::sqrt(calibration::ChiSquareCritical(h->df, TailOfScore(warn)) * scale),
              std::sqrt(calibration::ChiSquareCritical(h->df, TailOfScore(alert)) * scale), warn,
              alert, out);
  out.extras = {{"g", h->g}, {"df", h->df}};
}

}  // namespace

DetectorDefaults JsDetector() {
  return {.name = "js",
          .family = DetectorFamily::kShape,
          .statistic = "Jensen-Shannon distance (base 2) over the frozen bins; level from the G "
                       "test",
          .params = {{"minEffect", 0.05, 0, 1, false, "smallest distance that may raise a level"},
                     kBinsParam},
          .evaluate = EvaluateJs,
          .extras = {"g", "df"},
          .series = kNumericOrCategorical};
}

}  // namespace driftd::detectors
