// Writes Avro binary records with libavro for tests and benchmarks: a record of a schema is
// filled field by field (by name) and serialized, optionally Confluent-framed.
// Targets that include this link libavro (PkgConfig::DRIFTD_AVRO).
#pragma once

#include <avro.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace driftd::testing {

/// A field's value: null, a number (written as the field's int, long, float or double), a
/// string, a boolean or an array of doubles.
using AvroField = std::variant<std::nullptr_t, double, int64_t, std::string, bool,
                               std::vector<double>>;

class AvroRecordWriter {
 public:
  explicit AvroRecordWriter(std::string_view schema_json) {
    if (avro_schema_from_json_length(schema_json.data(), schema_json.size(), &schema_) != 0) {
      throw std::runtime_error(std::string("bad test schema: ") + avro_strerror());
    }
    iface_ = avro_generic_class_from_schema(schema_);
    avro_generic_value_new(iface_, &value_);
    buffer_.resize(1 << 16);
    writer_ = avro_writer_memory(buffer_.data(), static_cast<int64_t>(buffer_.size()));
  }
  ~AvroRecordWriter() {
    avro_writer_free(writer_);
    avro_value_decref(&value_);
    avro_value_iface_decref(iface_);
    avro_schema_decref(schema_);
  }
  AvroRecordWriter(const AvroRecordWriter&) = delete;
  AvroRecordWriter& operator=(const AvroRecordWriter&) = delete;

  /// The Avro binary of a record with `fields` (name, value) set; unnamed fields keep the
  /// generic default (0, "", the union's first branch). With `schema_id`, Confluent-framed.
  std::string Write(std::initializer_list<std::pair<const char*, AvroField>> fields,
                    std::optional<uint32_t> schema_id = std::nullopt) {
    avro_value_reset(&value_);
    // Unions start without a branch and strings without their terminating NUL: unnamed ones
    // are null (or their first branch) and "".
    avro_schema_t schema = avro_value_get_schema(&value_);
    for (size_t i = 0; i < avro_schema_record_size(schema); ++i) {
      avro_value_t child;
      avro_value_get_by_index(&value_, i, &child, nullptr);
      if (avro_value_get_type(&child) == AVRO_UNION) Set(child, nullptr);
      if (avro_value_get_type(&child) == AVRO_STRING) avro_value_set_string(&child, "");
    }
    for (const auto& [name, field] : fields) {
      avro_value_t child;
      if (avro_value_get_by_name(&value_, name, &child, nullptr) != 0) {
        throw std::runtime_error(std::string("no field ") + name);
      }
      Set(child, field);
    }
    avro_writer_memory_set_dest(writer_, buffer_.data(), static_cast<int64_t>(buffer_.size()));
    if (avro_value_write(writer_, &value_) != 0) {
      throw std::runtime_error(std::string("write: ") + avro_strerror());
    }
    std::string out;
    if (schema_id) {
      out.push_back('\0');
      for (int shift = 24; shift >= 0; shift -= 8) {
        out.push_back(static_cast<char>((*schema_id >> shift) & 0xff));
      }
    }
    out.append(buffer_.data(), static_cast<size_t>(avro_writer_tell(writer_)));
    return out;
  }

 private:
  static void Set(avro_value_t& target, const AvroField& field) {
    avro_value_t value = target;
    if (avro_value_get_type(&target) == AVRO_UNION) {
      // The first branch that takes the value: null for nullptr, else the first non-null one.
      avro_schema_t schema = avro_value_get_schema(&target);
      const bool is_null = std::holds_alternative<std::nullptr_t>(field);
      for (size_t b = 0; b < avro_schema_union_size(schema); ++b) {
        const bool null_branch =
            avro_typeof(avro_schema_union_branch(schema, static_cast<int>(b))) == AVRO_NULL;
        if (null_branch == is_null) {
          avro_value_set_branch(&target, static_cast<int>(b), &value);
          break;
        }
      }
    }
    switch (avro_value_get_type(&value)) {
      case AVRO_NULL: avro_value_set_null(&value); break;
      case AVRO_DOUBLE: avro_value_set_double(&value, Number(field)); break;
      case AVRO_FLOAT: avro_value_set_float(&value, static_cast<float>(Number(field))); break;
      case AVRO_INT32: avro_value_set_int(&value, static_cast<int32_t>(Number(field))); break;
      case AVRO_INT64:
        avro_value_set_long(&value, std::holds_alternative<int64_t>(field)
                                        ? std::get<int64_t>(field)
                                        : static_cast<int64_t>(Number(field)));
        break;
      case AVRO_BOOLEAN: avro_value_set_boolean(&value, std::get<bool>(field)); break;
      case AVRO_STRING: {
        const std::string& text = std::get<std::string>(field);
        avro_value_set_string_len(&value, text.c_str(), text.size() + 1);
        break;
      }
      case AVRO_ARRAY:
        for (double element : std::get<std::vector<double>>(field)) {
          avro_value_t item;
          avro_value_append(&value, &item, nullptr);
          if (avro_value_get_type(&item) == AVRO_FLOAT) {
            avro_value_set_float(&item, static_cast<float>(element));
          } else {
            avro_value_set_double(&item, element);
          }
        }
        break;
      default:
        throw std::runtime_error("unsupported test field type");
    }
  }

  static double Number(const AvroField& field) {
    if (std::holds_alternative<int64_t>(field)) return static_cast<double>(std::get<int64_t>(field));
    return std::get<double>(field);
  }

  avro_schema_t schema_ = nullptr;
  avro_value_iface_t* iface_ = nullptr;
  avro_value_t value_{};
  std::vector<char> buffer_;
  avro_writer_t writer_ = nullptr;
};

}  // namespace driftd::testing
