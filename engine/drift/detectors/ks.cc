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

void Evaluate(const EvaluationInput& in, const DetectorConfig& config, double warn, double alert,
              DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return;
  thread_local std::vector<double> r;
  thread_local std::vector<double> c;
  Shares(in.ref_counts, r);
  Shares(in.win_counts, c);
  out.statistic = KsFromBins(r, c);
  out.effect = out.statistic;
  out.score = ScoreOfTail(calibration::KsUpperTail(out.statistic, h.n_w, h.n_r));
  FinishShape(calibration::KsCritical(h.n_w, h.n_r, TailOfScore(warn)),
              calibration::KsCritical(h.n_w, h.n_r, TailOfScore(alert)), warn, alert, out);
}

}  // namespace

DetectorDefaults KsDetector() {
  return {.name = "ks",
          .family = DetectorFamily::kShape,
          .statistic = "Kolmogorov-Smirnov D at the bin edges; level from the two-sample "
                       "Kolmogorov distribution",
          .params = {{"minEffect", 0.05, 0, 1, false, "smallest D that may raise a level"},
                     kBinsParam},
          .evaluate = Evaluate};
}

}  // namespace driftd::detectors
