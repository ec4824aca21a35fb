// The record schema declared in a pipeline file (like Spark's StructType) and the typed values
// the decoder produces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace driftd {

enum class FieldType : uint8_t {
  kTimestamp,    // stored as microseconds since the Unix epoch (int64)
  kString,
  kDouble,
  kLong,         // int64
  kInt,          // int32, stored widened to int64
  kBoolean,
  kDoubleArray,  // array<double>
};

/// The spelling used in pipeline files: "timestamp", "string", "double", "long", "int",
/// "boolean", "array<double>".
std::string_view FieldTypeName(FieldType type);
std::optional<FieldType> ParseFieldType(std::string_view name);
/// All accepted spellings, for "expected one of ..." messages.
const std::vector<std::string_view>& FieldTypeNames();

inline bool IsNumeric(FieldType type) {
  return type == FieldType::kDouble || type == FieldType::kLong || type == FieldType::kInt;
}

struct Field {
  std::string name;
  FieldType type = FieldType::kString;
  /// A nullable field may be null or missing; a non-nullable one makes such a record malformed.
  /// Default: true.
  bool nullable = true;
};

struct Schema {
  std::vector<Field> fields;

  /// Index of the field named `name`, or -1.
  int IndexOf(std::string_view name) const {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].name == name) return static_cast<int>(i);
    }
    return -1;
  }
};

}  // namespace driftd
