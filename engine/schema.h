// The record schema declared in a pipeline file (like Spark's StructType) and the typed values
// the decoder produces.
//
// A struct field (`segment: struct<country:string, channel:string>`) is flattened into one
// column per leaf, named by its dotted path (`segment.country`), so that every stage reads a
// leaf like any other column; Field::path and Schema::structs keep the nesting for the decoder
// and the row writers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tl/expected.hpp>

namespace driftd {

enum class FieldType : uint8_t {
  kTimestamp,    // stored as microseconds since the Unix epoch (int64)
  kString,
  kDouble,
  kLong,         // int64
  kInt,          // int32, stored widened to int64
  kBoolean,
  kDoubleArray,  // array<double>
  kStringArray,  // array<string>
  kDoubleMap,    // map<string,double>: each key a named feature
  kStringMap,    // map<string,string>
};

/// The spelling used in pipeline files: "timestamp", "string", "double", "long", "int",
/// "boolean", "array<double>", "array<string>", "map<string,double>", "map<string,string>".
std::string_view FieldTypeName(FieldType type);
/// Takes the spellings above; spaces inside the angle brackets are allowed
/// ("map<string, double>").
std::optional<FieldType> ParseFieldType(std::string_view name);
/// All accepted spellings, for "expected one of ..." messages.
const std::vector<std::string_view>& FieldTypeNames();

inline bool IsNumeric(FieldType type) {
  return type == FieldType::kDouble || type == FieldType::kLong || type == FieldType::kInt;
}

/// A map column: its values are keyed entries (Column::Key).
inline bool IsMap(FieldType type) {
  return type == FieldType::kDoubleMap || type == FieldType::kStringMap;
}

/// A column whose row holds a variable number of entries: arrays and maps.
inline bool IsCollection(FieldType type) {
  return type == FieldType::kDoubleArray || type == FieldType::kStringArray || IsMap(type);
}

struct Field {
  Field() = default;
  Field(std::string name_, FieldType type_, bool nullable_ = true,
        std::vector<std::string> path_ = {})
      : name(std::move(name_)), type(type_), nullable(nullable_), path(std::move(path_)) {}

  /// The column's name; for a leaf of a struct field its dotted path ("segment.country").
  std::string name;
  FieldType type = FieldType::kString;
  /// A nullable field may be null or missing; a non-nullable one makes such a record malformed.
  /// Leaves of a struct are always nullable (the struct itself may not be). Default: true.
  bool nullable = true;
  /// A leaf of a struct field: the record's keys that lead to it, outermost first
  /// ({"segment", "country"}). Empty for a top-level field, whose key is `name`.
  std::vector<std::string> path;
};

/// A struct field as declared: the keys leading to its object (one for a top-level struct,
/// more for a nested one) and whether the object may be null or missing.
struct StructField {
  std::vector<std::string> path;
  /// Default: true. Only a top-level struct can be declared non-nullable.
  bool nullable = true;
};

struct Schema {
  std::vector<Field> fields;
  /// The struct fields whose leaves are among `fields`, outer structs before inner ones.
  std::vector<StructField> structs;

  /// Index of the field named `name`, or -1.
  int IndexOf(std::string_view name) const {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].name == name) return static_cast<int>(i);
    }
    return -1;
  }
};

/// A type as written in a pipeline file: a column type, or a struct of named members.
struct TypeSpec {
  struct Member;
  bool is_struct = false;
  FieldType type = FieldType::kString;  // when !is_struct
  std::vector<Member> members;          // when is_struct
};
struct TypeSpec::Member {
  std::string name;
  TypeSpec type;
};

/// What is wrong with a type's text, at a byte offset into it.
struct TypeError {
  size_t offset = 0;
  std::string message;
  /// An unknown type name as written (for a did-you-mean), else empty.
  std::string unknown;
};

/// Structs nest at most this deep (the record's own object not counted).
inline constexpr int kMaxStructDepth = 16;

/// Parses "double", "map<string, double>", "struct<country:string, features:map<string,
/// double>>", ... Struct member names are letters, digits and `_-$@#`, or any text without
/// '.' or '`' in backquotes; a name may appear once per struct; structs nest up to
/// kMaxStructDepth. Arrays and maps hold double or string only.
tl::expected<TypeSpec, TypeError> ParseTypeSpec(std::string_view text);

/// Appends the columns of a field declared `name` of `type` to `schema`: one field, or for a
/// struct one per leaf (named by dotted path, nullable) and a StructField per struct.
void AddDeclaredField(Schema& schema, const std::string& name, const TypeSpec& type,
                      bool nullable);

}  // namespace driftd
