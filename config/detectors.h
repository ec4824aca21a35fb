// What a pipeline file may say about each drift detector: its type name, its parameters and
// their valid ranges. Defaults come from the drift engine's table (engine/drift/detectors.h), so
// that the file format and the detectors never disagree; config/README.md documents them.
#pragma once

#include <limits>
#include <string_view>
#include <vector>

#include "engine/pipeline_spec.h"

namespace driftd::config_detail {

struct DetectorParamInfo {
  std::string_view name;  // as written in the file and stored in DetectorSpec::params: minEffect
  double default_value = 0;
  double min = 0;
  double max = std::numeric_limits<double>::max();
  bool integer = false;
};

struct DetectorInfo {
  DetectorKind kind;
  std::string_view name;  // mean_shift, stddev_ratio, psi, js, ks, page_hinkley, error_rate
  double warn = 0;
  double alert = 0;
  /// Thresholds above this can never fire (distances and rates live in [0, 1]).
  double max_threshold = std::numeric_limits<double>::max();
  std::vector<DetectorParamInfo> params;
};

/// Every detector, in DetectorKind order.
const std::vector<DetectorInfo>& Detectors();
const std::vector<std::string_view>& DetectorNames();
const DetectorInfo* FindDetector(std::string_view name);

/// A DetectorSpec with the detector's default thresholds and parameters.
DetectorSpec DefaultDetector(DetectorKind kind);

}  // namespace driftd::config_detail
