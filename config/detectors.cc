#include "config/detectors.h"

#include "engine/drift/calibration.h"
#include "engine/drift/detectors.h"

namespace driftd::config_detail {

const std::vector<DetectorInfo>& Detectors() {
  static const std::vector<DetectorInfo> detectors = [] {
    std::vector<DetectorInfo> out;
    for (const DetectorDefaults& defaults : DetectorDefaultsTable()) {
      DetectorInfo info{defaults.kind, defaults.name, defaults.warn, defaults.alert,
                        kMinLevel,     kMaxLevel,     {},           defaults.error_series};
      for (const DetectorParamDef& param : defaults.params) {
        info.params.push_back(
            {param.name, param.default_value, param.min, param.max, param.integer});
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
