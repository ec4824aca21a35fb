// chi_square: the total variation distance between a categorical series' window and baseline
// category shares; its level from Pearson's chi-square test.
#include <cmath>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;
using calibration::ScoreOfTail;
using calibration::TailOfScore;

/// The TVD a change along the window's own pattern needs for the chi-square's critical value at
/// `level` (chi-square grows with the square of a change's size, to first order); without a
/// pattern (no change at all), that of mass moving between two halves.
double TvdNeeded(const Homogeneity& h, double tvd, double level) {
  const double critical = calibration::ChiSquareCritical(h.df, TailOfScore(level));
  if (h.pearson > 0 && tvd > 0) return tvd * std::sqrt(critical / h.pearson);
  return std::sqrt(critical * (1 / h.n_w + 1 / h.n_r)) / 2;
}

void EvaluateChiSquare(const EvaluationInput& in, const DetectorConfig& config, double warn,
                       double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return;
  const double tvd = TotalVariation(in.win_counts, in.ref_counts);
  out.statistic = tvd;
  out.effect = tvd;
  out.score = ScoreOfTail(calibration::ChiSquareUpperTail(h.pearson, h.df));
  FinishShape(TvdNeeded(h, tvd, warn), TvdNeeded(h, tvd, alert), warn, alert, out);
  out.extras = {{"chi_square", h.pearson},
                {"df", h.df},
                {"cramers_v", std::sqrt(h.pearson / (h.n_w + h.n_r))}};
}

}  // namespace

DetectorDefaults ChiSquareDetector() {
  return {.name = "chi_square",
          .family = DetectorFamily::kShape,
          .statistic = "total variation distance between the window's and the baseline's "
                       "category shares (tracked categories and the rest); level from Pearson's "
                       "chi-square test",
          .params = {{"minEffect", 0.05, 0, 1, false,
                      "smallest total variation distance (share of values that changed "
                      "category) that may raise a level"},
                     kCategoriesParam},
          .evaluate = EvaluateChiSquare,
          .extras = {"chi_square", "df", "cramers_v"},
          .series = SeriesBit(SeriesKind::kCategorical),
          .in_fingerprint = false};
}

}  // namespace driftd::detectors
