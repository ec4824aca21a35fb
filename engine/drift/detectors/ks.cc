// ks: the Kolmogorov-Smirnov D at the frozen bins' edges; its level from the two-sample
// Kolmogorov distribution.
#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"
#include "engine/drift/histogram.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;
using calibration::ScoreOfTail;
using calibration::TailOfScore;

void EvaluateKs(const EvaluationInput& in, const DetectorConfig& config, double warn,
                double alert, DetectorReading& out) {
  const std::optional<Homogeneity> h = BeginShareDistance(in, config, warn, alert, KsFromBins, out);
  if (!h) return;
  out.score = ScoreOfTail(calibration::KsUpperTail(out.statistic, h->n_w, h->n_r));
  FinishShape(calibration::KsCritical(h->n_w, h->n_r, TailOfScore(warn)),
              calibration::KsCritical(h->n_w, h->n_r, TailOfScore(alert)), warn, alert, out);
}

}  // namespace

DetectorDefaults KsDetector() {
  return {.name = "ks",
          .family = DetectorFamily::kShape,
          .statistic = "Kolmogorov-Smirnov D at the bin edges; level from the two-sample "
                       "Kolmogorov distribution",
          .params = {{"minEffect", 0.05, 0, 1, false, "smallest D that may raise a level"},
                     kBinsParam},
          .evaluate = EvaluateKs};
}

}  // namespace driftd::detectors
