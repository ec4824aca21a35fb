// Reads Avro records an avro sink wrote and compares them with the JSON rows the same batch
// has (what a json sink writes), column by column through the rows' shape: a test's own walk,
// independent of the encoder's. Each column is looked up by its Avro name (AvroFieldName);
// a column the row spreads over numbered members is one Avro array; a JSON null or an absent
// member is an Avro null; a timestamp is epoch milliseconds (microseconds with `micros`) or its
// RFC 3339 text; numbers must be equal to the bit.
// Targets that include this link libavro (PkgConfig::DRIFTD_AVRO) and driftd_connectors.
#pragma once

#include <avro.h>
#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "connectors/format/formats.h"
#include "engine/row_shape.h"
#include "engine/time_iso8601.h"

namespace driftd::testing {

class AvroRowReader {
 public:
  explicit AvroRowReader(std::string_view schema_text) {
    if (avro_schema_from_json_length(schema_text.data(), schema_text.size(), &schema_) != 0) {
      throw std::runtime_error(std::string("not an Avro schema: ") + avro_strerror());
    }
    iface_ = avro_generic_class_from_schema(schema_);
    avro_generic_value_new(iface_, &value_);
  }
  ~AvroRowReader() {
    avro_value_decref(&value_);
    avro_value_iface_decref(iface_);
    avro_schema_decref(schema_);
  }
  AvroRowReader(const AvroRowReader&) = delete;
  AvroRowReader& operator=(const AvroRowReader&) = delete;

  /// Timestamps as epoch microseconds (the schema says timestamp-micros). Default: millis.
  bool micros = false;

  /// Empty when `avro` (one record, nothing after it) holds exactly the values of `row` (a
  /// JSON object of `shape`); else the first difference.
  std::string Compare(const RowShape& shape, std::string_view avro, std::string_view row) {
    avro_reader_t reader = avro_reader_memory(avro.data(), static_cast<int64_t>(avro.size()));
    avro_value_reset(&value_);
    const int read = avro_value_read(reader, &value_);
    char extra = 0;
    const bool leftover = read == 0 && avro_read(reader, &extra, 1) == 0;
    avro_reader_free(reader);
    if (read != 0) return std::string("not an Avro record of the schema: ") + avro_strerror();
    if (leftover) return "bytes left after the record";
    simdjson::dom::element element;
    if (parser_.parse(row.data(), row.size()).get(element) != simdjson::SUCCESS) {
      return "the row is not JSON";
    }
    return Record(shape, element, value_, "");
  }

 private:
  static std::optional<simdjson::dom::element> Member(simdjson::dom::object object,
                                                      std::string_view name) {
    simdjson::dom::element value;
    if (object[name].get(value) != simdjson::SUCCESS) return std::nullopt;
    return value;
  }

  std::string Record(const ShapeType& shape, simdjson::dom::element json, avro_value_t& record,
                     const std::string& path) {
    simdjson::dom::object object;
    if (json.get(object) != simdjson::SUCCESS) return path + ": not an object";
    size_t accounted = 0;
    for (const ShapeField& field : shape.fields) {
      const std::string column = path.empty() ? field.name : path + "." + field.name;
      avro_value_t child;
      const std::string avro_name = AvroFieldName(field.name);
      if (avro_value_get_by_name(&record, avro_name.c_str(), &child, nullptr) != 0) {
        return fmt::format("{}: no Avro field {}", column, avro_name);
      }
      if (field.elements) {
        avro_value_t array = Unwrap(child);
        size_t size = 0;
        avro_value_get_size(&array, &size);
        size_t i = 0;
        for (;; ++i) {
          auto value = Member(object, fmt::format("{}{}{}", field.elements->prefix, i,
                                                  field.elements->suffix));
          if (!value) break;
          ++accounted;
          if (i >= size) return fmt::format("{}: element {} missing in Avro", column, i);
          avro_value_t item;
          avro_value_get_by_index(&array, i, &item, nullptr);
          if (std::string d = Value(field.type.items(), &*value, item, column); !d.empty()) {
            return d;
          }
        }
        if (i != size) return fmt::format("{}: {} elements in Avro, {} in JSON", column, size, i);
        continue;
      }
      auto value = Member(object, field.name);
      if (value) ++accounted;
      if (std::string d = Value(field.type, value ? &*value : nullptr, child, column);
          !d.empty()) {
        return d;
      }
    }
    // A member repeated in the row counts once in the shape.
    std::set<std::string_view> names;
    for (auto [key, value] : object) names.insert(key);
    if (accounted != names.size()) {
      return fmt::format("{}: the row has {} members, the shape covers {}", path, names.size(),
                         accounted);
    }
    return {};
  }

  static avro_value_t Unwrap(avro_value_t& value) {
    if (avro_value_get_type(&value) != AVRO_UNION) return value;
    avro_value_t branch;
    if (avro_value_get_current_branch(&value, &branch) != 0) return value;
    return branch;
  }

  std::string Value(const ShapeType& shape, const simdjson::dom::element* json,
                    avro_value_t& avro_in, const std::string& column) {
    avro_value_t avro = Unwrap(avro_in);
    const avro_type_t type = avro_value_get_type(&avro);
    const bool json_null = json == nullptr || json->is_null();
    if (json_null || type == AVRO_NULL) {
      if (json_null && type == AVRO_NULL) return {};
      return fmt::format("{}: JSON {}, Avro {}", column, json_null ? "null" : "a value",
                         type == AVRO_NULL ? "null" : "a value");
    }
    const std::string json_text = simdjson::minify(*json);
    switch (shape.kind) {
      case ShapeType::Kind::kString: {
        const char* text = nullptr;
        size_t size = 0;
        std::string got;
        if (type == AVRO_ENUM) {
          int symbol = 0;
          avro_value_get_enum(&avro, &symbol);
          got = avro_schema_enum_get(avro_value_get_schema(&avro), symbol);
        } else if (avro_value_get_string(&avro, &text, &size) == 0) {
          got.assign(text, size > 0 ? size - 1 : 0);
        }
        std::string_view want;
        if (json->get(want) != simdjson::SUCCESS || got != want) {
          return fmt::format("{}: JSON {}, Avro '{}'", column, json_text, got);
        }
        return {};
      }
      case ShapeType::Kind::kLong:
      case ShapeType::Kind::kInt: {
        int64_t want = 0;
        double got = 0;  // written as an int, long, float or double
        int64_t wide = 0;
        int32_t small = 0;
        float single = 0;
        if (type == AVRO_INT64 && avro_value_get_long(&avro, &wide) == 0) got = double(wide);
        if (type == AVRO_INT32 && avro_value_get_int(&avro, &small) == 0) got = small;
        if (type == AVRO_FLOAT && avro_value_get_float(&avro, &single) == 0) got = single;
        if (type == AVRO_DOUBLE) avro_value_get_double(&avro, &got);
        if (json->get(want) != simdjson::SUCCESS ||
            (type == AVRO_INT64 ? wide != want : got != static_cast<double>(want))) {
          return fmt::format("{}: JSON {}, Avro {}", column, json_text, got);
        }
        return {};
      }
      case ShapeType::Kind::kDouble: {
        double want = 0;
        double got = 0;
        avro_value_get_double(&avro, &got);
        if (json->get(want) != simdjson::SUCCESS || got != want) {
          return fmt::format("{}: JSON {}, Avro {}", column, json_text, got);
        }
        return {};
      }
      case ShapeType::Kind::kBoolean: {
        bool want = false;
        int got = 0;
        avro_value_get_boolean(&avro, &got);
        if (json->get(want) != simdjson::SUCCESS || (got != 0) != want) {
          return fmt::format("{}: JSON {}, Avro {}", column, json_text, got);
        }
        return {};
      }
      case ShapeType::Kind::kTimestamp: {
        std::string_view text;
        if (json->get(text) != simdjson::SUCCESS) return column + ": not a timestamp";
        if (type == AVRO_STRING) {
          const char* got = nullptr;
          size_t size = 0;
          avro_value_get_string(&avro, &got, &size);
          if (std::string_view(got, size - 1) != text) return column + ": timestamp text differs";
          return {};
        }
        const auto want = ParseIso8601Micros(text);
        int64_t got = 0;
        avro_value_get_long(&avro, &got);
        if (!want || (micros ? got : got * 1000) != *want) {
          return fmt::format("{}: JSON {}, Avro {}", column, json_text, got);
        }
        return {};
      }
      case ShapeType::Kind::kRecord: return Record(shape, *json, avro, column);
      case ShapeType::Kind::kArray: {
        simdjson::dom::array array;
        if (json->get(array) != simdjson::SUCCESS) return column + ": not an array";
        size_t size = 0;
        avro_value_get_size(&avro, &size);
        if (size != array.size()) {
          return fmt::format("{}: {} elements in Avro, {} in JSON", column, size, array.size());
        }
        size_t i = 0;
        for (simdjson::dom::element item : array) {
          avro_value_t element;
          avro_value_get_by_index(&avro, i, &element, nullptr);
          if (std::string d = Value(shape.items(), &item, element,
                                    fmt::format("{}[{}]", column, i));
              !d.empty()) {
            return d;
          }
          ++i;
        }
        return {};
      }
    }
    return column + ": unknown kind";
  }

  avro_schema_t schema_ = nullptr;
  avro_value_iface_t* iface_ = nullptr;
  avro_value_t value_{};
  simdjson::dom::parser parser_;
};

}  // namespace driftd::testing
