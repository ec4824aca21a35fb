#include "config/detectors.h"

#include <fmt/format.h>

#include "engine/drift/calibration.h"
#include "engine/drift/detectors.h"

namespace driftd::config_detail {

const std::vector<DetectorInfo>& Detectors() {
  static const std::vector<DetectorInfo> detectors = [] {
    std::vector<DetectorInfo> out;
    for (const DetectorDefaults& defaults : DetectorDefaultsTable()) {
      DetectorInfo info{defaults.kind, defaults.name,  defaults.warn,         defaults.alert,
                        kMinLevel,     kMaxLevel,      {},                    defaults.error_series,
                        defaults.by_default};
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

namespace {

std::string Watched(const DetectorDefaults& d) {
  if (d.error_series) return "the error series (labels)";
  std::string out;
  for (int k = 0; k < kSeriesKinds; ++k) {
    const auto kind = static_cast<SeriesKind>(k);
    if (!d.Watches(kind)) continue;
    if (!out.empty()) out += ", ";
    out += ToString(kind);
  }
  return out;
}

// A Markdown table cell: '|' would end it.
std::string Cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string DetectorReferenceMarkdown() {
  std::string out =
      "| type | watches | statistic | warn | alert | parameters (default, range) | by default "
      "|\n|---|---|---|---|---|---|---|\n";
  for (const DetectorDefaults& d : DetectorDefaultsTable()) {
    std::string params;
    for (const DetectorParamDef& p : d.params) {
      if (!params.empty()) params += "; ";
      params += fmt::format("`{}` ({}, {}{}..{}): {}", p.name, p.default_value,
                            p.integer ? "integer " : "", p.min, p.max, p.doc);
    }
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", d.name, Watched(d),
                       Cell(d.statistic), d.warn, d.alert, Cell(params),
                       d.by_default ? "yes" : "no");
  }
  return out;
}

}  // namespace driftd::config_detail
