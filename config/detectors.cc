#include "config/detectors.h"

#include "engine/drift/detectors.h"

namespace driftd::config_detail {
namespace {

// Valid ranges of the engine's detector parameters. A parameter the engine adds later without
// an entry here is accepted as any non-negative number.
DetectorParamInfo ParamInfo(std::string_view name, double default_value) {
  DetectorParamInfo info{name, default_value};
  if (name == "bins") {
    info.min = 2;
    info.max = 1000;
    info.integer = true;
  }
  return info;
}

double MaxThreshold(DetectorKind kind) {
  switch (kind) {
    case DetectorKind::kJensenShannon:  // a distance in [0, 1] (base 2)
    case DetectorKind::kKs:             // a difference of two CDFs
    case DetectorKind::kErrorRate:      // a rise of a rate
      return 1;
    default:
      return std::numeric_limits<double>::max();
  }
}

}  // namespace

const std::vector<DetectorInfo>& Detectors() {
  static const std::vector<DetectorInfo> detectors = [] {
    std::vector<DetectorInfo> out;
    for (const DetectorDefaults& defaults : DetectorDefaultsTable()) {
      DetectorInfo info{defaults.kind,
                        defaults.name,
                        defaults.warn,
                        defaults.alert,
                        MaxThreshold(defaults.kind),
                        {}};
      for (const auto& [name, value] : defaults.params) {
        info.params.push_back(ParamInfo(name, value));
      }
      out.push_back(std::move(info));
    }
    return out;
  }();
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

DetectorSpec DefaultDetector(DetectorKind kind) { return DefaultDetectorSpec(kind); }

}  // namespace driftd::config_detail
