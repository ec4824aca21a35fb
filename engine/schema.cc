#include "engine/schema.h"

#include <array>
#include <utility>

namespace driftd {
namespace {

constexpr std::array<std::pair<FieldType, std::string_view>, 7> kNames = {{
    {FieldType::kTimestamp, "timestamp"},
    {FieldType::kString, "string"},
    {FieldType::kDouble, "double"},
    {FieldType::kLong, "long"},
    {FieldType::kInt, "int"},
    {FieldType::kBoolean, "boolean"},
    {FieldType::kDoubleArray, "array<double>"},
}};

}  // namespace

std::string_view FieldTypeName(FieldType type) {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "unknown";
}

std::optional<FieldType> ParseFieldType(std::string_view name) {
  for (const auto& [t, spelled] : kNames) {
    if (spelled == name) return t;
  }
  return std::nullopt;
}

const std::vector<std::string_view>& FieldTypeNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& entry : kNames) out.push_back(entry.second);
    return out;
  }();
  return names;
}

}  // namespace driftd
