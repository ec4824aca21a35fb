// The `avro` value format: Avro binary records decoded with libavro (Avro C).
//
// Writer schemas come from one .avsc file (schemaFile: every record is plain Avro binary of that
// schema) or from a Confluent-compatible Schema Registry (schemaRegistryUrl: every record is
// framed as magic byte 0, a 4-byte big-endian schema id, then the Avro binary). Registry schemas
// are fetched the first time an id is seen and kept for the decoder's life, unknown ids too.
//
// Resolution: with readerSchemaFile, each writer schema is resolved against that reader schema
// by libavro's resolver (Avro's rules: fields matched by name, the writer's extra fields
// skipped, int -> long -> float -> double promotion; libavro 1.11 does not fill a reader field
// the writer lacks from its default, so such a writer schema does not resolve); a writer schema
// that does not resolve makes its records unknown_schema. Without
// it, the pipeline's schema is the reader: fields are matched by name, a writer's extra fields
// are skipped, a field the writer lacks is null.
//
// Value mapping (Avro -> column), unions with null taken as nullable:
//   double <- int, long, float, double (finite);  long <- int, long;  int <- int, long in range;
//   boolean <- boolean;  string <- string (UTF-8), enum (its symbol);
//   timestamp <- long or int: epoch milliseconds, or microseconds when the field's logicalType
//   is timestamp-micros; string: RFC 3339;  array<double> <- array of int, long, float, double.
#include <avro.h>
#include <simdjson.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "connectors/format/avro_common.h"
#include "connectors/format/formats.h"
#include "connectors/format/schema_registry.h"
#include "engine/row_decoder.h"
#include "engine/time_iso8601.h"

namespace driftd {
namespace {

using avro::IfacePtr;
using avro::ReaderPtr;
using avro::SchemaPtr;

// An avro_value_t with an owner.
class Value {
 public:
  Value() = default;
  ~Value() {
    if (live_) avro_value_decref(&value_);
  }
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  avro_value_t* get() { return &value_; }
  void set_live() { live_ = true; }

 private:
  avro_value_t value_{};
  bool live_ = false;
};

bool IsNumber(avro_type_t type) {
  return type == AVRO_INT32 || type == AVRO_INT64 || type == AVRO_FLOAT || type == AVRO_DOUBLE;
}

// Whether an Avro (non-union) type can fill a column of `type`.
bool Fits(FieldType type, avro_schema_t schema) {
  const avro_type_t t = avro_typeof(schema);
  switch (type) {
    case FieldType::kDouble: return IsNumber(t);
    case FieldType::kLong:
    case FieldType::kInt: return t == AVRO_INT32 || t == AVRO_INT64;
    case FieldType::kBoolean: return t == AVRO_BOOLEAN;
    case FieldType::kString: return t == AVRO_STRING || t == AVRO_ENUM;
    case FieldType::kTimestamp: return t == AVRO_INT32 || t == AVRO_INT64 || t == AVRO_STRING;
    case FieldType::kDoubleArray:
      return t == AVRO_ARRAY && IsNumber(avro_typeof(avro_schema_array_items(schema)));
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap:
      return false;  // refused before (RefuseNestedFields)
  }
  return false;
}

// "fits" when some branch of a union fits (a null branch aside).
bool FitsAny(FieldType type, avro_schema_t schema, bool* has_null) {
  *has_null = false;
  if (avro_typeof(schema) != AVRO_UNION) return Fits(type, schema);
  bool fits = false;
  for (size_t b = 0; b < avro_schema_union_size(schema); ++b) {
    avro_schema_t branch = avro_schema_union_branch(schema, static_cast<int>(b));
    if (avro_typeof(branch) == AVRO_NULL) {
      *has_null = true;
    } else if (Fits(type, branch)) {
      fits = true;
    }
  }
  return fits;
}

std::string Describe(avro_schema_t schema) {
  return avro_typeof(schema) == AVRO_UNION ? "union " + avro::TypeName(schema)
                                           : avro::TypeName(schema);
}

// The logicalType of each top-level field of a record schema's JSON (libavro keeps none).
std::map<std::string, std::string, std::less<>> FieldLogicalTypes(std::string_view json) {
  std::map<std::string, std::string, std::less<>> types;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS) return types;
  simdjson::dom::array fields;
  if (root["fields"].get(fields) != simdjson::SUCCESS) return types;
  for (simdjson::dom::element field : fields) {
    std::string_view name;
    if (field["name"].get(name) != simdjson::SUCCESS) continue;
    auto logical_of = [](simdjson::dom::element type) -> std::string_view {
      std::string_view logical;
      if (type.is_object() && type["logicalType"].get(logical) == simdjson::SUCCESS) {
        return logical;
      }
      return {};
    };
    simdjson::dom::element type;
    if (field["type"].get(type) != simdjson::SUCCESS) continue;
    std::string_view logical = logical_of(type);
    if (logical.empty() && type.is_array()) {
      for (simdjson::dom::element branch : type.get_array()) {
        logical = logical_of(branch);
        if (!logical.empty()) break;
      }
    }
    if (!logical.empty()) types.emplace(std::string(name), std::string(logical));
  }
  return types;
}

// Walks Avro binary of `schema` from `p` without decoding it; returns the end of the datum, or
// nullptr when the bytes end inside it or break its encoding (a varint of more than 10 bytes, a
// negative length, a union index out of range). libavro's reader leaks the buffer of a string
// or bytes value that the record ends inside of (4 bytes and more per such record in 1.11), so
// the decoder hands it only records this walk accepts; the walk also gives the datum's size,
// which the memory reader does not tell.
class AvroBounds {
 public:
  static const char* Skip(avro_schema_t schema, const char* p, const char* end, int depth = 0) {
    if (p == nullptr || depth > 64) return nullptr;
    switch (avro_typeof(schema)) {
      case AVRO_NULL: return p;
      case AVRO_BOOLEAN: return end - p >= 1 ? p + 1 : nullptr;
      case AVRO_INT32:
      case AVRO_INT64:
      case AVRO_ENUM: {
        int64_t ignored = 0;
        return Varint(p, end, &ignored);
      }
      case AVRO_FLOAT: return end - p >= 4 ? p + 4 : nullptr;
      case AVRO_DOUBLE: return end - p >= 8 ? p + 8 : nullptr;
      case AVRO_STRING:
      case AVRO_BYTES: {
        int64_t length = 0;
        p = Varint(p, end, &length);
        if (p == nullptr || length < 0 || length > end - p) return nullptr;
        return p + length;
      }
      case AVRO_FIXED: {
        const int64_t size = avro_schema_fixed_size(schema);
        return size >= 0 && size <= end - p ? p + size : nullptr;
      }
      case AVRO_RECORD:
        for (size_t i = 0; i < avro_schema_record_size(schema) && p != nullptr; ++i) {
          p = Skip(avro_schema_record_field_get_by_index(schema, static_cast<int>(i)), p, end,
                   depth + 1);
        }
        return p;
      case AVRO_UNION: {
        int64_t branch = 0;
        p = Varint(p, end, &branch);
        if (p == nullptr || branch < 0 ||
            static_cast<size_t>(branch) >= avro_schema_union_size(schema)) {
          return nullptr;
        }
        return Skip(avro_schema_union_branch(schema, static_cast<int>(branch)), p, end, depth + 1);
      }
      case AVRO_ARRAY:
      case AVRO_MAP: {
        const bool map = avro_typeof(schema) == AVRO_MAP;
        avro_schema_t items = map ? avro_schema_map_values(schema) : avro_schema_array_items(schema);
        for (;;) {
          int64_t count = 0;
          p = Varint(p, end, &count);
          if (p == nullptr) return nullptr;
          if (count == 0) return p;
          if (count < 0) {  // a block with its byte size
            int64_t ignored = 0;
            p = Varint(p, end, &ignored);
            if (p == nullptr || count == INT64_MIN) return nullptr;
            count = -count;
          }
          // Each item takes at least one byte unless it is null; bound the loop by the bytes.
          if (count > end - p && avro_typeof(items) != AVRO_NULL) return nullptr;
          for (int64_t i = 0; i < count && p != nullptr; ++i) {
            if (map) p = Skip(Text(), p, end, depth + 1);
            p = Skip(items, p, end, depth + 1);
          }
          if (p == nullptr) return nullptr;
        }
      }
      case AVRO_LINK: return Skip(avro_schema_link_target(schema), p, end, depth + 1);
    }
    return nullptr;
  }

 private:
  static const char* Varint(const char* p, const char* end, int64_t* out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70 && p < end; shift += 7) {
      const auto byte = static_cast<unsigned char>(*p++);
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) {
        *out = static_cast<int64_t>((value >> 1) ^ (~(value & 1) + 1));  // zig-zag
        return p;
      }
    }
    return nullptr;
  }
  static avro_schema_t Text() {
    static avro_schema_t string = avro_schema_string();
    return string;
  }
};

struct ParsedSchema {
  SchemaPtr schema;
  std::string json;
};

tl::expected<ParsedSchema, std::string> ParseSchema(std::string json) {
  avro_schema_t schema = nullptr;
  if (avro_schema_from_json_length(json.data(), json.size(), &schema) != 0) {
    return tl::unexpected("not an Avro schema: " + avro::LastError());
  }
  SchemaPtr owned(schema);
  if (avro_typeof(schema) != AVRO_RECORD) {
    return tl::unexpected(fmt::format("the schema is a {}; its top level must be a record",
                                      avro::TypeName(avro_typeof(schema))));
  }
  return ParsedSchema{std::move(owned), std::move(json)};
}

tl::expected<ParsedSchema, std::string> ReadSchemaFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return tl::unexpected(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = ParseSchema(text.str());
  if (!parsed) return tl::unexpected(fmt::format("'{}': {}", path, parsed.error()));
  return parsed;
}

// The pipeline's fields against the record schema the decoder reads them from: a non-nullable
// field absent, or a field of no fitting type, is a configuration problem.
std::string CheckFields(const Schema& pipeline, avro_schema_t record, std::string_view what) {
  for (const Field& field : pipeline.fields) {
    // (avro_schema_record_field_get crashes on a name the record lacks.)
    const int index = avro_schema_record_field_get_index(record, field.name.c_str());
    avro_schema_t type = index < 0 ? nullptr : avro_schema_record_field_get_by_index(record, index);
    if (type == nullptr) {
      if (field.nullable) continue;
      return fmt::format("{} has no field '{}', which the pipeline's schema requires "
                         "(nullable: false)",
                         what, field.name);
    }
    bool has_null = false;
    if (!FitsAny(field.type, type, &has_null)) {
      return fmt::format("field '{}' is {} in {}; the pipeline's schema says {}", field.name,
                         Describe(type), what, FieldTypeName(field.type));
    }
  }
  return {};
}

// One writer schema ready to decode: what records are read into and where each pipeline field
// is in the record read.
struct WriterEntry {
  std::string unusable;  // non-empty: its records are unknown_schema, for this reason
  SchemaPtr writer;
  IfacePtr value_class;     // generic class of the record read (the reader schema's, or writer's)
  IfacePtr resolved_class;  // resolved writer (writer -> reader), with a reader schema
  Value value;              // the record read
  Value resolved;           // what is read into when resolving; wraps `value`
  std::vector<int> index;   // pipeline field -> field index in `value`, or -1
  std::vector<uint8_t> micros;  // timestamp field: longs are microseconds
};

class AvroDecoder final : public RowDecoder {
 public:
  struct Config {
    std::optional<ParsedSchema> writer;  // schemaFile
    std::optional<ParsedSchema> reader;  // readerSchemaFile
    std::unique_ptr<SchemaRegistryClient> registry;
  };

  AvroDecoder(const Schema& schema, const MalformedSpec& spec, Config config)
      : RowDecoder(schema, spec),
        reader_schema_(std::move(config.reader)),
        registry_(std::move(config.registry)),
        input_(avro_reader_memory(nullptr, 0)) {
    if (config.writer) {
      fixed_ = Prepare(std::move(*config.writer));
    }
  }

  // Builds the entry of a writer schema; an entry that cannot be used says why.
  std::unique_ptr<WriterEntry> Prepare(ParsedSchema writer) {
    auto entry = std::make_unique<WriterEntry>();
    entry->writer = std::move(writer.schema);
    avro_schema_t read_as = entry->writer.get();
    std::string_view read_json = writer.json;
    if (reader_schema_) {
      read_as = reader_schema_->schema.get();
      read_json = reader_schema_->json;
      entry->resolved_class.reset(avro_resolved_writer_new(entry->writer.get(), read_as));
      if (!entry->resolved_class) {
        entry->unusable =
            "the writer schema does not resolve against the reader schema: " + avro::LastError();
        return entry;
      }
    }
    entry->value_class.reset(avro_generic_class_from_schema(read_as));
    if (!entry->value_class || avro_generic_value_new(entry->value_class.get(),
                                                      entry->value.get()) != 0) {
      entry->unusable = "cannot allocate a value of the schema: " + avro::LastError();
      return entry;
    }
    entry->value.set_live();
    if (entry->resolved_class) {
      if (avro_resolved_writer_new_value(entry->resolved_class.get(), entry->resolved.get()) != 0) {
        entry->unusable = "cannot allocate a resolved value: " + avro::LastError();
        return entry;
      }
      entry->resolved.set_live();
      avro_resolved_writer_set_dest(entry->resolved.get(), entry->value.get());
    }
    const auto logical = FieldLogicalTypes(read_json);
    const Schema& pipeline = schema();
    entry->index.assign(pipeline.fields.size(), -1);
    entry->micros.assign(pipeline.fields.size(), 0);
    for (size_t f = 0; f < pipeline.fields.size(); ++f) {
      const std::string& name = pipeline.fields[f].name;
      entry->index[f] = avro_schema_record_field_get_index(read_as, name.c_str());
      auto it = logical.find(name);
      entry->micros[f] = it != logical.end() && it->second == "timestamp-micros";
    }
    return entry;
  }

  bool DecodeRecord(std::string_view bytes, RowWriter& row, Status& error) override {
    WriterEntry* entry = fixed_.get();
    if (registry_) {
      if (bytes.size() < 5 || bytes[0] != 0) {
        return row.Reject(MalformedReason::kUndecodable,
                          bytes[0] != 0
                              ? fmt::format("not Confluent-framed: the first byte is 0x{:02x}, "
                                            "not the magic byte 0",
                                            static_cast<unsigned char>(bytes[0]))
                              : fmt::format("not Confluent-framed: {} bytes, fewer than the 5 of "
                                            "the magic byte and the schema id",
                                            bytes.size()));
      }
      const uint32_t id = (uint32_t{static_cast<unsigned char>(bytes[1])} << 24) |
                          (uint32_t{static_cast<unsigned char>(bytes[2])} << 16) |
                          (uint32_t{static_cast<unsigned char>(bytes[3])} << 8) |
                          uint32_t{static_cast<unsigned char>(bytes[4])};
      bytes.remove_prefix(5);
      if (id != last_id_ || last_ == nullptr) {
        auto found = Lookup(id);
        if (!found) {
          error = tl::unexpected(std::move(found).error());
          return false;
        }
        last_ = *found;
        last_id_ = id;
      }
      entry = last_;
      if (!entry->unusable.empty()) {
        return row.Reject(MalformedReason::kUnknownSchema,
                          fmt::format("schema id {}: {}", id, entry->unusable));
      }
    }
    const char* datum_end =
        AvroBounds::Skip(entry->writer.get(), bytes.data(), bytes.data() + bytes.size());
    if (datum_end == nullptr) {
      return row.Reject(MalformedReason::kUndecodable,
                        "not an Avro record of the writer schema (the bytes end inside a value, "
                        "or break its encoding)");
    }
    if (datum_end != bytes.data() + bytes.size()) {
      return row.Reject(MalformedReason::kUndecodable,
                        fmt::format("{} bytes left over after an Avro record of the writer schema",
                                    bytes.data() + bytes.size() - datum_end));
    }
    avro_value_t* target = entry->resolved_class ? entry->resolved.get() : entry->value.get();
    avro_value_reset(target);
    avro_reader_memory_set_source(input_.get(), bytes.data(), static_cast<int64_t>(bytes.size()));
    if (avro_value_read(input_.get(), target) != 0) {
      return row.Reject(MalformedReason::kUndecodable,
                        "not an Avro record of the writer schema: " + avro::LastError());
    }
    const Schema& pipeline = schema();
    for (size_t f = 0; f < pipeline.fields.size(); ++f) {
      const int index = entry->index[f];
      if (index < 0) continue;  // null (RowDecoder checks nullability)
      avro_value_t child;
      if (avro_value_get_by_index(entry->value.get(), static_cast<size_t>(index), &child,
                                  nullptr) != 0) {
        continue;
      }
      if (!Convert(static_cast<int>(f), child, entry->micros[f] != 0, row)) return false;
    }
    return true;
  }

 private:
  Result<WriterEntry*> Lookup(uint32_t id) {
    auto it = schemas_.find(id);
    if (it != schemas_.end()) return it->second.get();
    auto text = registry_->FetchSchema(id);
    if (!text) return tl::unexpected(std::move(text).error());
    std::unique_ptr<WriterEntry> entry;
    if (!*text) {
      entry = std::make_unique<WriterEntry>();
      entry->unusable = fmt::format("the schema registry {} has no Avro schema with this id",
                                    registry_->url());
    } else if (auto parsed = ParseSchema(std::move(**text)); !parsed) {
      entry = std::make_unique<WriterEntry>();
      entry->unusable = "the registry's schema is unusable: " + parsed.error();
    } else {
      entry = Prepare(std::move(*parsed));
    }
    WriterEntry* raw = entry.get();
    schemas_.emplace(id, std::move(entry));
    return raw;
  }

  bool WrongType(int field, const char* got, RowWriter& row) {
    return row.FieldProblem(field, MalformedReason::kWrongType,
                            fmt::format("expected {}, got Avro {}",
                                        FieldTypeName(schema().fields[field].type), got));
  }

  bool Convert(int field, avro_value_t value, bool micros, RowWriter& row) {
    avro_type_t type = avro_value_get_type(&value);
    if (type == AVRO_UNION) {
      avro_value_t branch;
      if (avro_value_get_current_branch(&value, &branch) != 0) {
        return row.Reject(MalformedReason::kUndecodable, "a union without a branch");
      }
      value = branch;
      type = avro_value_get_type(&value);
    }
    const Field& declared = schema().fields[field];
    if (type == AVRO_NULL) {
      if (declared.nullable) {
        row.SetNull(field);
        return true;
      }
      return row.Reject(MalformedReason::kMissingField,
                        fmt::format("field '{}' is null", declared.name));
    }
    switch (declared.type) {
      case FieldType::kDouble: {
        double number = 0;
        if (!Number(value, type, &number)) return WrongType(field, avro::TypeName(type), row);
        if (!std::isfinite(number)) {
          return row.FieldProblem(field, MalformedReason::kNumberOutOfRange,
                                  "not a finite number");
        }
        row.SetDouble(field, number);
        return true;
      }
      case FieldType::kLong:
      case FieldType::kInt: {
        int64_t number = 0;
        if (!Integer(value, type, &number)) return WrongType(field, avro::TypeName(type), row);
        if (declared.type == FieldType::kInt &&
            (number < std::numeric_limits<int32_t>::min() ||
             number > std::numeric_limits<int32_t>::max())) {
          return row.FieldProblem(field, MalformedReason::kNumberOutOfRange,
                                  "number out of range for int");
        }
        row.SetInt(field, number);
        return true;
      }
      case FieldType::kBoolean: {
        int flag = 0;
        if (type != AVRO_BOOLEAN || avro_value_get_boolean(&value, &flag) != 0) {
          return WrongType(field, avro::TypeName(type), row);
        }
        row.SetInt(field, flag != 0 ? 1 : 0);
        return true;
      }
      case FieldType::kString: {
        std::string_view text;
        if (!Text(value, type, &text)) return WrongType(field, avro::TypeName(type), row);
        if (!simdjson::validate_utf8(text.data(), text.size())) {
          return row.FieldProblem(field, MalformedReason::kInvalidUtf8, "invalid UTF-8");
        }
        row.SetString(field, text);
        return true;
      }
      case FieldType::kTimestamp: {
        if (type == AVRO_STRING) {
          std::string_view text;
          Text(value, type, &text);
          auto parsed = ParseIso8601Micros(text);
          if (!parsed) {
            return row.FieldProblem(field, MalformedReason::kWrongType,
                                    "expected an RFC 3339 timestamp string");
          }
          row.SetInt(field, *parsed);
          return true;
        }
        int64_t number = 0;
        if (!Integer(value, type, &number)) return WrongType(field, avro::TypeName(type), row);
        if (!micros) {
          constexpr int64_t kLimit = std::numeric_limits<int64_t>::max() / 1000;
          if (number > kLimit || number < -kLimit) {
            return row.FieldProblem(field, MalformedReason::kNumberOutOfRange,
                                    "number out of range for timestamp");
          }
          number *= 1000;
        }
        row.SetInt(field, number);
        return true;
      }
      case FieldType::kDoubleArray: {
        if (type != AVRO_ARRAY) return WrongType(field, avro::TypeName(type), row);
        size_t size = 0;
        avro_value_get_size(&value, &size);
        if (static_cast<int64_t>(size) > row.max_array_length()) {
          return row.FieldProblem(field, MalformedReason::kTooLarge,
                                  fmt::format("array of {} elements exceeds maxArrayLength {}",
                                              size, row.max_array_length()));
        }
        row.BeginArray(field);
        for (size_t i = 0; i < size; ++i) {
          avro_value_t element;
          avro_value_get_by_index(&value, i, &element, nullptr);
          double number = 0;
          const avro_type_t element_type = avro_value_get_type(&element);
          if (!Number(element, element_type, &number)) {
            return WrongType(field, "array of non-numbers", row);
          }
          if (!std::isfinite(number)) {
            return row.FieldProblem(field, MalformedReason::kNumberOutOfRange,
                                    "an element is not a finite number");
          }
          row.AppendElement(field, number);
        }
        return true;
      }
      case FieldType::kStringArray:
      case FieldType::kDoubleMap:
      case FieldType::kStringMap:
        break;  // refused at start (RefuseNestedFields)
    }
    return WrongType(field, avro::TypeName(type), row);
  }

  static bool Number(avro_value_t& value, avro_type_t type, double* out) {
    switch (type) {
      case AVRO_DOUBLE:
        return avro_value_get_double(&value, out) == 0;
      case AVRO_FLOAT: {
        float number = 0;
        if (avro_value_get_float(&value, &number) != 0) return false;
        *out = number;
        return true;
      }
      case AVRO_INT32: {
        int32_t number = 0;
        if (avro_value_get_int(&value, &number) != 0) return false;
        *out = number;
        return true;
      }
      case AVRO_INT64: {
        int64_t number = 0;
        if (avro_value_get_long(&value, &number) != 0) return false;
        *out = static_cast<double>(number);
        return true;
      }
      default:
        return false;
    }
  }

  static bool Integer(avro_value_t& value, avro_type_t type, int64_t* out) {
    if (type == AVRO_INT64) return avro_value_get_long(&value, out) == 0;
    if (type == AVRO_INT32) {
      int32_t number = 0;
      if (avro_value_get_int(&value, &number) != 0) return false;
      *out = number;
      return true;
    }
    return false;
  }

  static bool Text(avro_value_t& value, avro_type_t type, std::string_view* out) {
    if (type == AVRO_STRING) {
      const char* text = nullptr;
      size_t size = 0;  // counts the terminating NUL
      if (avro_value_get_string(&value, &text, &size) != 0) return false;
      *out = std::string_view(text, size > 0 ? size - 1 : 0);
      return true;
    }
    if (type == AVRO_ENUM) {
      int symbol = 0;
      if (avro_value_get_enum(&value, &symbol) != 0) return false;
      const char* name = avro_schema_enum_get(avro_value_get_schema(&value), symbol);
      if (name == nullptr) return false;
      *out = name;
      return true;
    }
    return false;
  }

  std::optional<ParsedSchema> reader_schema_;
  std::unique_ptr<SchemaRegistryClient> registry_;
  ReaderPtr input_;
  std::unique_ptr<WriterEntry> fixed_;  // schemaFile
  std::unordered_map<uint32_t, std::unique_ptr<WriterEntry>> schemas_;  // registry ids
  uint32_t last_id_ = 0;
  WriterEntry* last_ = nullptr;
};

// The decoder's options as BindAvroDecoder made them (their defaults are declared in
// AvroFormatDeclaration only).
struct AvroDecoderOptions {
  std::string schema_file;
  std::string reader_schema_file;
  /// Set with schemaRegistryUrl, instead of schema_file.
  std::optional<SchemaRegistryOptions> registry;
};

Bound<AvroDecoderOptions> BindAvroDecoder(const Options& options) {
  AvroDecoderOptions bound;
  bound.schema_file = options.GetString("schemaFile");
  bound.reader_schema_file = options.GetString("readerSchemaFile");
  if (bound.schema_file.empty() == options.GetString("schemaRegistryUrl").empty()) {
    return tl::unexpected(ValueFormatProblem{
        bound.schema_file.empty() ? "" : "schemaRegistryUrl",
        bound.schema_file.empty()
            ? "the avro value format needs valueOptions.schemaFile (an .avsc: every record is "
              "Avro binary of that writer schema) or valueOptions.schemaRegistryUrl "
              "(Confluent-framed records)"
            : "give schemaFile or schemaRegistryUrl, not both"});
  }
  auto registry = BindSchemaRegistryOptions(options);
  if (!registry) return tl::unexpected(std::move(registry.error()));
  bound.registry = std::move(*registry);
  return bound;
}

ValueDecoderResult CreateAvroDecoder(const Schema& schema, const MalformedSpec& malformed,
                                     const AvroDecoderOptions& options) {
  if (auto refused = RefuseNestedFields(schema, "avro")) return tl::unexpected(*refused);
  const std::string& schema_file = options.schema_file;
  const std::string& reader_file = options.reader_schema_file;
  AvroDecoder::Config config;
  if (!reader_file.empty()) {
    auto reader = ReadSchemaFile(reader_file);
    if (!reader) return tl::unexpected(ValueFormatProblem{"readerSchemaFile", reader.error()});
    std::string problem = CheckFields(schema, reader->schema.get(), "the reader schema");
    if (!problem.empty()) return tl::unexpected(ValueFormatProblem{"readerSchemaFile", problem});
    config.reader = std::move(*reader);
  }
  if (!schema_file.empty()) {
    auto writer = ReadSchemaFile(schema_file);
    if (!writer) return tl::unexpected(ValueFormatProblem{"schemaFile", writer.error()});
    if (config.reader) {
      IfacePtr resolved(
          avro_resolved_writer_new(writer->schema.get(), config.reader->schema.get()));
      if (!resolved) {
        return tl::unexpected(ValueFormatProblem{
            "schemaFile", "the writer schema does not resolve against readerSchemaFile: " +
                              avro::LastError()});
      }
    } else {
      std::string problem = CheckFields(schema, writer->schema.get(), "the writer schema");
      if (!problem.empty()) return tl::unexpected(ValueFormatProblem{"schemaFile", problem});
    }
    config.writer = std::move(*writer);
  } else {
    auto client = SchemaRegistryClient::Create(*options.registry);
    if (!client) return tl::unexpected(std::move(client.error()));
    config.registry = std::move(*client);
  }
  return std::make_unique<AvroDecoder>(schema, malformed, std::move(config));
}

}  // namespace

ValueFormatDecl AvroFormatDeclaration() {
  ValueFormatDecl decl;
  decl.name = "avro";
  decl.doc =
      "Avro binary records (libavro). A source reads records of one writer schema (schemaFile) "
      "or Confluent-framed ones (magic byte 0, 4-byte schema id) with writer schemas from a "
      "Schema Registry (schemaRegistryUrl), resolved against readerSchemaFile or the "
      "pipeline's schema. A kafka sink writes each row as a record of a writer schema, given "
      "(schemaFile) or derived from the rows, plain or Confluent-framed with the schema "
      "registered in a Schema Registry (schemaRegistryUrl).";
  decl.binary = true;
  decl.options = {
      {"schemaFile", OptionType::kString, "",
       "Path of the writer schema (.avsc); every record is plain Avro binary of it."},
      {"schemaRegistryUrl", OptionType::kString, "",
       "Base URL of a Confluent-compatible Schema Registry; records are Confluent-framed and "
       "each schema id is fetched once (GET <url>/schemas/ids/<id>) and cached."},
      {"readerSchemaFile", OptionType::kString, "",
       "Path of a reader schema (.avsc) that writer schemas are resolved against (Avro's "
       "rules); default: the pipeline's schema, fields matched by name."},
  };
  for (OptionDecl& option : SchemaRegistryOptionDecls()) decl.options.push_back(option);
  DeclareDecoder<AvroDecoderOptions>(decl, &BindAvroDecoder, &CreateAvroDecoder);
  AddAvroEncoder(decl);
  return decl;
}

}  // namespace driftd
