// What a pipeline file may say about each drift detector: its type name, its levels and its
// parameters with their valid ranges. Everything comes from the drift engine's table
// (engine/drift/detectors.h), so that the file format and the detectors never disagree;
// config/README.md documents them.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "engine/pipeline_spec.h"

namespace driftd::config_detail {

/// Levels are calibrated scores (z-equivalents of a false-alarm probability): below 1.5 a
/// "level" would fire on most evaluations; above 37 the probability is not representable.
inline constexpr double kMinLevel = 1.5;
inline constexpr double kMaxLevel = 37;

struct DetectorParamInfo {
  std::string_view name;  // as written in the file and stored in DetectorSpec::params: minEffect
  double default_value = 0;
  double min = 0;
  double max = std::numeric_limits<double>::max();
  bool integer = false;
};

struct DetectorInfo {
  DetectorKind kind;
  std::string_view name;  // the registered name: mean_shift, psi, ...
  double warn = 0;
  double alert = 0;
  /// Valid range of warn and alert.
  double min_level = kMinLevel;
  double max_level = kMaxLevel;
  std::vector<DetectorParamInfo> params;
  /// Watches the error series: needs prediction and label columns.
  bool error_series = false;
  /// Among the detectors a drift section without a `detectors:` list gets.
  bool by_default = true;
};

/// Every registered detector, in registration order.
const std::vector<DetectorInfo>& Detectors();
const std::vector<std::string_view>& DetectorNames();
const DetectorInfo* FindDetector(std::string_view name);

/// A DetectorSpec with the detector's default levels and parameters.
DetectorSpec DefaultDetector(DetectorKind kind);

/// The detector reference (Markdown, one table), from the registry: what `driftd reference`
/// prints and config/README.md carries between its GENERATED DETECTORS markers.
std::string DetectorReferenceMarkdown();

}  // namespace driftd::config_detail
