// missing_rate: a data-quality detector, the rise of the share of records whose value is null or
// absent (a series' missing-value series).
#include "engine/drift/detectors/common.h"

namespace driftd::detectors {

DetectorDefaults MissingRateDetector() {
  return {.name = "missing_rate",
          .family = DetectorFamily::kError,
          .statistic = "rise of the share of records without a value (null or absent) of the "
                       "last 1, 2, 4, 8 or 16 windows over the baseline's (two-proportion test); "
                       "a data-quality alert",
          .params = {{"minEffect", 0.02, 0, 1, false,
                      "smallest rise of the missing share that may raise a level"}},
          .evaluate = detector_common::EvaluateRateRise,
          .extras = {"baseline_rate", "window_rate", "z", "lookback_windows"},
          .series = SeriesBit(SeriesKind::kMissing),
          .in_fingerprint = false};
}

}  // namespace driftd::detectors
