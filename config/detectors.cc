#include "config/detectors.h"

namespace driftd::config_detail {

const std::vector<DetectorInfo>& Detectors() {
  // Defaults follow common practice: z >= 3 is the usual "unusual" line for a mean shift, with
  // an effect-size gate so that large samples do not flag trivial shifts; PSI 0.1 / 0.25 is the
  // credit-scoring convention; Page-Hinkley's delta is the tolerated drift per observation.
  static const std::vector<DetectorInfo> detectors = {
      {DetectorKind::kMeanShift, "mean_shift", 3, 5, std::numeric_limits<double>::max(),
       {{"minEffect", "min_effect", 0.2, 0, 1e6, false}}},
      {DetectorKind::kStddevRatio, "stddev_ratio", 1.3, 1.5, std::numeric_limits<double>::max(),
       {}},
      {DetectorKind::kPsi, "psi", 0.1, 0.25, std::numeric_limits<double>::max(),
       {{"bins", "bins", 10, 2, 1000, true}}},
      {DetectorKind::kJensenShannon, "js", 0.1, 0.2, 1, {{"bins", "bins", 10, 2, 1000, true}}},
      {DetectorKind::kKs, "ks", 0.1, 0.2, 1, {{"bins", "bins", 10, 2, 1000, true}}},
      {DetectorKind::kPageHinkley, "page_hinkley", 25, 50, std::numeric_limits<double>::max(),
       {{"delta", "delta", 0.005, 0, 1e12, false}}},
      {DetectorKind::kErrorRate, "error_rate", 0.05, 0.1, 1, {}},
  };
  return detectors;
}

const std::vector<std::string_view>& DetectorNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const DetectorInfo& info : Detectors()) out.push_back(info.name);
    return out;
  }();
  return names;
}

const DetectorInfo* FindDetector(std::string_view name) {
  for (const DetectorInfo& info : Detectors()) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

const DetectorInfo& DetectorFor(DetectorKind kind) {
  for (const DetectorInfo& info : Detectors()) {
    if (info.kind == kind) return info;
  }
  return Detectors().front();
}

DetectorSpec DefaultDetector(DetectorKind kind) {
  const DetectorInfo& info = DetectorFor(kind);
  DetectorSpec spec;
  spec.kind = kind;
  spec.name = std::string(info.name);
  spec.warn = info.warn;
  spec.alert = info.alert;
  for (const DetectorParamInfo& param : info.params) {
    spec.params[std::string(param.key)] = param.default_value;
  }
  return spec;
}

}  // namespace driftd::config_detail
