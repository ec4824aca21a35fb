// psi: the population stability index over the frozen bins (or category cells); its level from
// Pearson's chi-square test of the two count vectors.
#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"
#include "engine/drift/histogram.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;
using calibration::ScoreOfTail;
using calibration::TailOfScore;

void EvaluatePsi(const EvaluationInput& in, const DetectorConfig& config, double warn,
                 double alert, DetectorReading& out) {
  const std::optional<Homogeneity> h = BeginShareDistance(
      in, config, warn, alert,
      [](std::span<const double> ref, std::span<const double> win) { return Psi(ref, win); },
      out);
  if (!h) return;
  out.score = ScoreOfTail(calibration::ChiSquareUpperTail(h->pearson, h->df));
  const double scale = 1 / h->n_w + 1 / h->n_r;
  FinishShape(calibration::ChiSquareCritical(h->df, TailOfScore(warn)) * scale,
              calibration::ChiSquareCritical(h->df, TailOfScore(alert)) * scale, warn, alert, out);
  out.extras = {{"chi_square", h->pearson}, {"df", h->df}};
}

}  // namespace

DetectorDefaults PsiDetector() {
  return {.name = "psi",
          .family = DetectorFamily::kShape,
          .statistic = "population stability index over the frozen bins; level from Pearson's "
                       "chi-square test",
          .params = {{"minEffect", 0.05, 0, 1e6, false, "smallest PSI that may raise a level"},
                     kBinsParam},
          .evaluate = EvaluatePsi,
          .extras = {"chi_square", "df"},
          .series = kNumericOrCategorical};
}

}  // namespace driftd::detectors
