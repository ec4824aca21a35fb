// hellinger: the Hellinger distance between the window's and the baseline's shares over the
// frozen bins (or a categorical series' cells):
//   H = sqrt(1 - sum_i sqrt(p_i q_i))    (p, q the window's and the baseline's shares)
// a true metric in [0, 1] that needs no smoothing of empty bins (unlike PSI) and weighs a change
// of a rare bin less than PSI does. Its level is Pearson's chi-square test of the two count
// vectors (as psi's: calibrated at every n, tests/engine/drift_calibration_test.cc), and its
// thresholds are the distances that test needs, from 8 n_eff H^2 (n_eff = n_w n_r / (n_w + n_r)),
// which is Pearson's statistic to first order (the Freeman-Tukey form; used as the level itself
// it is liberal with the 20 to 50 values per bin of usual windows).
// Its state is the series' frozen bins and window counts, which the monitor keeps for every
// detector that declares `bins`.
#include <algorithm>
#include <cmath>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;
using calibration::ScoreOfTail;
using calibration::TailOfScore;

void EvaluateHellinger(const EvaluationInput& in, const DetectorConfig& config, double warn,
                       double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return;
  double affinity = 0;  // the Bhattacharyya coefficient sum sqrt(p q)
  const size_t k = std::min(in.win_counts.size(), in.ref_counts.size());
  for (size_t i = 0; i < k; ++i) {
    affinity += std::sqrt(static_cast<double>(in.win_counts[i]) / h.n_w *
                          static_cast<double>(in.ref_counts[i]) / h.n_r);
  }
  const double h2 = std::clamp(1 - affinity, 0.0, 1.0);
  const double n_eff = h.n_w * h.n_r / (h.n_w + h.n_r);
  out.statistic = std::sqrt(h2);
  out.effect = out.statistic;
  out.score = ScoreOfTail(calibration::ChiSquareUpperTail(h.pearson, h.df));
  auto needed = [&](double level) {
    return std::sqrt(calibration::ChiSquareCritical(h.df, TailOfScore(level)) / (8 * n_eff));
  };
  FinishShape(needed(warn), needed(alert), warn, alert, out);
  out.extras = {{"chi_square", h.pearson}, {"df", h.df}};
}

}  // namespace

DetectorDefaults HellingerDetector() {
  return {.name = "hellinger",
          .family = DetectorFamily::kShape,
          .statistic = "Hellinger distance between the window's and the baseline's shares over "
                       "the frozen bins, at most 1; level from Pearson's chi-square test",
          .params = {{"minEffect", 0.04, 0, 1, false,
                      "smallest distance that may raise a level (0.04 is about the change js's "
                      "0.05 is)"},
                     kBinsParam},
          .evaluate = EvaluateHellinger,
          .extras = {"chi_square", "df"},
          .series = kNumericOrCategorical,
          .by_default = false};
}

}  // namespace driftd::detectors
