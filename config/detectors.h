// The drift detectors a pipeline file may name, with their default thresholds and parameters.
// config/README.md documents the same table; the drift engine reads the resulting DetectorSpec.
#pragma once

#include <limits>
#include <string_view>
#include <vector>

#include "engine/pipeline_spec.h"

namespace driftd::config_detail {

struct DetectorParamInfo {
  std::string_view yaml_name;  // as written in the file: minEffect
  std::string_view key;        // key in DetectorSpec::params: min_effect
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

/// Every detector, in documentation order.
const std::vector<DetectorInfo>& Detectors();
const std::vector<std::string_view>& DetectorNames();
const DetectorInfo* FindDetector(std::string_view name);
const DetectorInfo& DetectorFor(DetectorKind kind);

/// A DetectorSpec with the detector's default thresholds and parameters.
DetectorSpec DefaultDetector(DetectorKind kind);

}  // namespace driftd::config_detail
