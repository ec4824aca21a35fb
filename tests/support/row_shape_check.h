// Checks a JSON row against the shape it is said to have (engine/row_shape.h): every member
// is a field of the shape (or one of its numbered element members), of the field's type, null
// or absent only where the shape allows it, and every field that may not be absent is there.
// The shapes are what the Avro writer schemas are derived from, so this keeps them in step
// with the rows.
#pragma once

#include <simdjson.h>

#include <set>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "engine/row_shape.h"
#include "engine/time_iso8601.h"

namespace driftd::testing {

namespace shape_detail {

inline bool ElementOf(std::string_view name, const ElementMembers& members) {
  if (name.size() <= members.prefix.size() + members.suffix.size() ||
      !name.starts_with(members.prefix) || !name.ends_with(members.suffix)) {
    return false;
  }
  const std::string_view digits = name.substr(
      members.prefix.size(), name.size() - members.prefix.size() - members.suffix.size());
  return digits.find_first_not_of("0123456789") == std::string_view::npos;
}

inline std::string Check(const ShapeType& type, simdjson::dom::element value,
                         const std::string& path);

inline std::string CheckRecord(const ShapeType& type, simdjson::dom::element value,
                               const std::string& path) {
  simdjson::dom::object object;
  if (value.get(object) != simdjson::SUCCESS) return path + ": not an object";
  const std::string prefix = path.empty() ? "" : path + ".";
  std::set<std::string> present;
  for (auto [key, member] : object) {
    const ShapeField* field = nullptr;
    for (const ShapeField& candidate : type.fields) {
      if (candidate.elements ? ElementOf(key, *candidate.elements) : candidate.name == key) {
        field = &candidate;
        break;
      }
    }
    if (field == nullptr) return fmt::format("{}{}: a member the shape does not have", prefix, key);
    present.insert(field->name);
    const ShapeType& expected = field->elements ? field->type.items() : field->type;
    if (std::string problem = Check(expected, member, prefix + std::string(key));
        !problem.empty()) {
      return problem;
    }
  }
  for (const ShapeField& field : type.fields) {
    if (!field.type.nullable && !field.elements && !present.count(field.name)) {
      return fmt::format("{}{}: missing, and the shape says it is never absent", prefix,
                         field.name);
    }
  }
  return {};
}

inline std::string Check(const ShapeType& type, simdjson::dom::element value,
                         const std::string& path) {
  if (value.is_null()) {
    return type.nullable ? "" : path + ": null, and the shape says it is never null";
  }
  const std::string text = simdjson::minify(value);
  auto wrong = [&](const char* what) {
    return fmt::format("{}: {} is not {} ({})", path, text, what, DescribeShape(type));
  };
  switch (type.kind) {
    case ShapeType::Kind::kString: return value.is_string() ? "" : wrong("a string");
    case ShapeType::Kind::kLong: return value.is_int64() ? "" : wrong("an integer");
    case ShapeType::Kind::kInt: {
      int64_t number = 0;
      return value.get(number) == simdjson::SUCCESS && number >= INT32_MIN && number <= INT32_MAX
                 ? ""
                 : wrong("an int");
    }
    case ShapeType::Kind::kDouble: return value.is_number() ? "" : wrong("a number");
    case ShapeType::Kind::kBoolean: return value.is_bool() ? "" : wrong("a boolean");
    case ShapeType::Kind::kTimestamp: {
      std::string_view timestamp;
      return value.get(timestamp) == simdjson::SUCCESS && ParseIso8601Micros(timestamp)
                 ? ""
                 : wrong("a timestamp");
    }
    case ShapeType::Kind::kRecord: return CheckRecord(type, value, path);
    case ShapeType::Kind::kArray: {
      simdjson::dom::array array;
      if (value.get(array) != simdjson::SUCCESS) return wrong("an array");
      size_t i = 0;
      for (simdjson::dom::element item : array) {
        if (std::string problem = Check(type.items(), item, fmt::format("{}[{}]", path, i++));
            !problem.empty()) {
          return problem;
        }
      }
      return {};
    }
  }
  return path + ": unknown kind";
}

}  // namespace shape_detail

/// Empty when `row` has `shape`; else what breaks it, with the member's path.
inline std::string ShapeMismatch(const RowShape& shape, std::string_view row) {
  simdjson::dom::parser parser;
  simdjson::dom::element element;
  if (parser.parse(row.data(), row.size()).get(element) != simdjson::SUCCESS) {
    return "not JSON";
  }
  return shape_detail::CheckRecord(shape, element, "");
}

}  // namespace driftd::testing
