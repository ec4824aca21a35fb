// The `avro` value format's encoder: a sink's output rows (JSON objects, engine/value_encoder.h)
// written as Avro binary with libavro, optionally Confluent-framed for a Schema Registry.
//
// The writer schema is a given .avsc (schemaFile) or derived from the rows' shape
// (engine/row_shape.h): one field per column, named by AvroFieldName (`mean(prediction)` ->
// `mean_prediction`, the column's own name in the field's doc), nullable columns as
// ["null", T] unions with default null, timestamps as long timestamp-millis, the window and the
// drift payloads' objects as records, and an aggregate over an array<double> column (numbered
// members `mean(feature_vector[0])`, ... in the rows) as one array field.
//
// Either way the rows' shape is compiled against the schema once, when the encoder is made, so
// a schema that does not cover the rows is a configuration problem at validate: every column
// needs a field of its Avro name whose type holds the column's values (string <- string, enum;
// long <- long, float, double; int <- int, long, float, double; double <- double; boolean;
// timestamp <- long (epoch milliseconds, or microseconds with logicalType timestamp-micros) or
// string (RFC 3339 as written); records field by field; arrays item by item), a column that
// may be null needs a union with null, and a field no column fills must allow null (it is
// written null). At run time a row is then only checked for what the shape cannot promise (a
// value out of an int's range, a string that is no symbol of an enum, an unexpected member);
// such a row is a kConfig error naming the column, the field and the types.
//
// Determinism: a row's bytes depend only on the row (libavro writes an array as one block),
// and the schema id a registry gives a schema it has already is the same at every start, so a
// batch delivered again carries identical bytes.
#include <avro.h>
#include <simdjson.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "connectors/format/avro_common.h"
#include "connectors/format/formats.h"
#include "connectors/format/schema_registry.h"
#include "engine/json_writer.h"
#include "engine/time_iso8601.h"

namespace driftd {
namespace {

using avro::IfacePtr;
using avro::SchemaPtr;
using avro::WriterPtr;

// ---- the derived writer schema --------------------------------------------------------------

// Appends `text` pretty-printed: a JSON document written compactly, re-indented with two
// spaces, one field per line (the shipped .avsc files are read by people).
void AppendIndented(std::string& out, std::string_view compact) {
  int depth = 0;
  bool in_string = false;
  auto newline = [&] {
    out.push_back('\n');
    out.append(static_cast<size_t>(2 * depth), ' ');
  };
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < compact.size()) {
        out.push_back(compact[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        out.push_back(c);
        break;
      case '{':
      case '[': {
        // Short objects and arrays ({"type": "array", "items": "double"}) stay on one line.
        size_t close = i + 1;
        int nesting = 1;
        bool quoted = false;
        for (; close < compact.size() && nesting > 0; ++close) {
          const char d = compact[close];
          if (quoted) {
            if (d == '\\') ++close;
            else if (d == '"') quoted = false;
          } else if (d == '"') {
            quoted = true;
          } else if (d == '{' || d == '[') {
            ++nesting;
          } else if (d == '}' || d == ']') {
            --nesting;
          }
        }
        const std::string_view inner = compact.substr(i, close - i);
        if (inner.size() <= 72 && inner.find("\"fields\"") == std::string_view::npos &&
            inner.find('{', 1) == std::string_view::npos) {
          for (size_t k = 0; k < inner.size(); ++k) {
            out.push_back(inner[k]);
            if ((inner[k] == ',' || inner[k] == ':') && !quoted) out.push_back(' ');
            if (inner[k] == '"') quoted = !quoted;
          }
          i = close - 1;
          break;
        }
        out.push_back(c);
        ++depth;
        newline();
        break;
      }
      case '}':
      case ']':
        --depth;
        newline();
        out.push_back(c);
        break;
      case ',':
        out.push_back(c);
        newline();
        break;
      case ':':
        out += ": ";
        break;
      default:
        out.push_back(c);
    }
  }
}

class SchemaWriter {
 public:
  // The writer schema of rows of `shape`, or a problem (two columns of one record with the
  // same Avro name).
  tl::expected<std::string, std::string> Write(const RowShape& shape) {
    std::string compact;
    if (std::string problem = Type(shape, compact, /*top=*/true); !problem.empty()) {
      return tl::unexpected(problem);
    }
    std::string out;
    AppendIndented(out, compact);
    out.push_back('\n');
    return out;
  }

 private:
  std::string Type(const ShapeType& type, std::string& out, bool top = false) {
    std::string value;
    switch (type.kind) {
      case ShapeType::Kind::kString: value = "\"string\""; break;
      case ShapeType::Kind::kLong: value = "\"long\""; break;
      case ShapeType::Kind::kInt: value = "\"int\""; break;
      case ShapeType::Kind::kDouble: value = "\"double\""; break;
      case ShapeType::Kind::kBoolean: value = "\"boolean\""; break;
      case ShapeType::Kind::kTimestamp:
        value = R"({"type":"long","logicalType":"timestamp-millis"})";
        break;
      case ShapeType::Kind::kArray: {
        std::string items;
        if (std::string problem = Type(type.items(), items); !problem.empty()) return problem;
        value = R"({"type":"array","items":)" + items + "}";
        break;
      }
      case ShapeType::Kind::kRecord: {
        if (!records_.insert(type.record_name).second) {
          // A record type defined once may be named again (not needed by driftd's shapes).
          value = "\"" + type.record_name + "\"";
          break;
        }
        value = R"({"type":"record","name":)";
        AppendJsonString(value, type.record_name);
        if (top) value += R"(,"namespace":"driftd")";
        value += R"(,"fields":[)";
        std::map<std::string, std::string> names;  // Avro name -> column
        for (size_t i = 0; i < type.fields.size(); ++i) {
          const ShapeField& field = type.fields[i];
          const std::string name = AvroFieldName(field.name);
          if (auto [it, inserted] = names.emplace(name, field.name); !inserted) {
            return fmt::format("columns '{}' and '{}' both become the Avro field '{}'; rename "
                               "one (a derived column's AS name), or give a schemaFile",
                               it->second, field.name, name);
          }
          if (i > 0) value.push_back(',');
          value += R"({"name":)";
          AppendJsonString(value, name);
          value += R"(,"type":)";
          if (std::string problem = Type(field.type, value); !problem.empty()) return problem;
          if (field.type.nullable) value += R"(,"default":null)";
          if (field.elements) {
            // The rows' numbered members it gathers.
            value += R"(,"doc":)";
            AppendJsonString(value, fmt::format("{0}0{1}, {0}1{1}, ...", field.elements->prefix,
                                                field.elements->suffix));
          } else if (name != field.name) {
            value += R"(,"doc":)";
            AppendJsonString(value, field.name);
          }
          value.push_back('}');
        }
        value += "]}";
        break;
      }
    }
    if (type.nullable) {
      out += "[\"null\"," + value + "]";
    } else {
      out += value;
    }
    return {};
  }

  std::set<std::string> records_;
};

// ---- compiling the rows' shape against a writer schema --------------------------------------

// The JSON of each record type of a schema, by short name: where the logical types are (libavro
// keeps none).
class SchemaJson {
 public:
  bool Parse(const std::string& text) {
    if (parser_.parse(text).get(root_) != simdjson::SUCCESS) return false;
    Index(root_);
    return true;
  }
  const simdjson::dom::element* Root() const { return &root_; }
  std::optional<simdjson::dom::element> FieldType(std::string_view record, size_t index) const {
    auto it = fields_.find(std::string(record));
    if (it == fields_.end()) return std::nullopt;
    simdjson::dom::element field;
    simdjson::dom::element type;
    if (it->second.at(index).get(field) != simdjson::SUCCESS ||
        field["type"].get(type) != simdjson::SUCCESS) {
      return std::nullopt;
    }
    return type;
  }

 private:
  void Index(simdjson::dom::element element) {
    if (element.is_array()) {
      for (simdjson::dom::element child : element.get_array()) Index(child);
      return;
    }
    if (!element.is_object()) return;
    std::string_view type;
    std::string_view name;
    simdjson::dom::array fields;
    if (element["type"].get(type) == simdjson::SUCCESS && type == "record" &&
        element["name"].get(name) == simdjson::SUCCESS &&
        element["fields"].get(fields) == simdjson::SUCCESS) {
      const size_t dot = name.rfind('.');
      fields_.emplace(std::string(dot == std::string_view::npos ? name : name.substr(dot + 1)),
                      fields);
      for (simdjson::dom::element field : fields) {
        simdjson::dom::element child;
        if (field["type"].get(child) == simdjson::SUCCESS) Index(child);
      }
      return;
    }
    simdjson::dom::element child;
    if (element["items"].get(child) == simdjson::SUCCESS) Index(child);
    if (element["values"].get(child) == simdjson::SUCCESS) Index(child);
    if (element["type"].get(child) == simdjson::SUCCESS && !child.is_string()) Index(child);
  }

  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
  std::map<std::string, simdjson::dom::array> fields_;
};

// How one value of the rows is written.
struct Plan;

struct FieldPlan {
  /// The column (JSON member) that fills the Avro field; empty: none, the field is null.
  std::string member;
  std::optional<ElementMembers> elements;
  int avro_index = 0;
  std::string avro_name;
  std::unique_ptr<Plan> plan;
};

struct Plan {
  ShapeType::Kind kind = ShapeType::Kind::kString;
  /// The non-union schema values are written as, and its type.
  avro_schema_t schema = nullptr;
  avro_type_t type = AVRO_NULL;
  /// >= 0: the Avro type is a union; non-null values take this branch, nulls null_branch.
  int value_branch = -1;
  int null_branch = -1;
  /// kTimestamp written as a long: microseconds (timestamp-micros), else milliseconds.
  bool micros = false;
  /// The column's path in rows, for messages: "window.start", "detectors[].z".
  std::string column;
  /// The Avro type as written in the schema, for messages.
  std::string avro_type;
  std::vector<FieldPlan> fields;  // kRecord, in the Avro record's order
  std::unique_ptr<Plan> items;    // kArray
  /// kRecord, per row: which fields were set.
  mutable std::vector<uint8_t> seen;
};

bool TimestampMicros(const std::optional<simdjson::dom::element>& json) {
  if (!json || !json->is_object()) return false;
  std::string_view logical;
  if ((*json)["logicalType"].get(logical) != simdjson::SUCCESS) return false;
  return logical == "timestamp-micros" || logical == "local-timestamp-micros";
}

class Compiler {
 public:
  explicit Compiler(const SchemaJson& json) : json_(json) {}

  // The plan of values of `shape` written as `schema` (whose JSON is `json`, when known), or
  // why they cannot be.
  tl::expected<std::unique_ptr<Plan>, std::string> Compile(
      avro_schema_t schema, std::optional<simdjson::dom::element> json, const ShapeType& shape,
      const std::string& column, const std::string& field) {
    while (avro_typeof(schema) == AVRO_LINK) schema = avro_schema_link_target(schema);
    auto plan = std::make_unique<Plan>();
    plan->kind = shape.kind;
    plan->column = column;
    plan->avro_type = avro::TypeName(schema);
    if (avro_typeof(schema) == AVRO_UNION) {
      std::string first_problem;
      for (size_t b = 0; b < avro_schema_union_size(schema); ++b) {
        avro_schema_t branch = avro_schema_union_branch(schema, static_cast<int>(b));
        if (avro_typeof(branch) == AVRO_NULL) {
          if (plan->null_branch < 0) plan->null_branch = static_cast<int>(b);
          continue;
        }
        if (plan->value_branch >= 0) continue;
        std::optional<simdjson::dom::element> branch_json;
        if (json && json->is_array()) {
          simdjson::dom::element element;
          if (json->at(b).get(element) == simdjson::SUCCESS) branch_json = element;
        }
        std::string problem = CompileValue(*plan, branch, branch_json, shape, column, field);
        if (problem.empty()) {
          plan->value_branch = static_cast<int>(b);
        } else if (first_problem.empty()) {
          first_problem = std::move(problem);
        }
      }
      if (plan->value_branch < 0) {
        return tl::unexpected(first_problem.empty()
                                  ? Mismatch(column, field, shape, schema)
                                  : first_problem);
      }
    } else if (std::string problem = CompileValue(*plan, schema, json, shape, column, field);
               !problem.empty()) {
      return tl::unexpected(problem);
    }
    if (shape.nullable && plan->null_branch < 0) {
      return tl::unexpected(fmt::format(
          "field '{}' is {} in the writer schema, which does not allow null; column '{}' may "
          "be null: make it a union with null ([\"null\", ...])",
          field, plan->avro_type, column));
    }
    return plan;
  }

 private:
  static std::string Mismatch(const std::string& column, const std::string& field,
                              const ShapeType& shape, avro_schema_t schema) {
    return fmt::format("field '{}' is {} in the writer schema; column '{}' holds {} values",
                       field, avro::TypeName(schema), column, DescribeShape(shape));
  }

  // Fills plan.schema/type and the children for a non-union `schema`; a problem, or empty
  // (then `plan` is unchanged).
  std::string CompileValue(Plan& plan, avro_schema_t schema,
                           std::optional<simdjson::dom::element> json, const ShapeType& shape,
                           const std::string& column, const std::string& field) {
    Plan attempt;
    attempt.column = plan.column;
    attempt.avro_type = plan.avro_type;
    std::string problem = CompileInto(attempt, schema, json, shape, column, field);
    if (!problem.empty()) return problem;
    plan.schema = attempt.schema;
    plan.type = attempt.type;
    plan.micros = attempt.micros;
    plan.fields = std::move(attempt.fields);
    plan.items = std::move(attempt.items);
    plan.seen = std::move(attempt.seen);
    return {};
  }

  std::string CompileInto(Plan& plan, avro_schema_t schema,
                          std::optional<simdjson::dom::element> json, const ShapeType& shape,
                          const std::string& column, const std::string& field) {
    while (avro_typeof(schema) == AVRO_LINK) schema = avro_schema_link_target(schema);
    const avro_type_t type = avro_typeof(schema);
    bool fits = false;
    switch (shape.kind) {
      case ShapeType::Kind::kString: fits = type == AVRO_STRING || type == AVRO_ENUM; break;
      case ShapeType::Kind::kLong:
        fits = type == AVRO_INT64 || type == AVRO_FLOAT || type == AVRO_DOUBLE;
        break;
      case ShapeType::Kind::kInt:
        fits = type == AVRO_INT32 || type == AVRO_INT64 || type == AVRO_FLOAT ||
               type == AVRO_DOUBLE;
        break;
      case ShapeType::Kind::kDouble: fits = type == AVRO_DOUBLE; break;
      case ShapeType::Kind::kBoolean: fits = type == AVRO_BOOLEAN; break;
      case ShapeType::Kind::kTimestamp: fits = type == AVRO_INT64 || type == AVRO_STRING; break;
      case ShapeType::Kind::kRecord: fits = type == AVRO_RECORD; break;
      case ShapeType::Kind::kArray: fits = type == AVRO_ARRAY; break;
    }
    if (!fits) return Mismatch(column, field, shape, schema);
    plan.schema = schema;
    plan.type = type;
    plan.micros = shape.kind == ShapeType::Kind::kTimestamp && TimestampMicros(json);
    if (type == AVRO_ARRAY) {
      std::optional<simdjson::dom::element> items_json;
      simdjson::dom::element element;
      if (json && json->is_object() && (*json)["items"].get(element) == simdjson::SUCCESS) {
        items_json = element;
      }
      auto items = Compile(avro_schema_array_items(schema), items_json, shape.items(),
                           column + "[]", field + "[]");
      if (!items) return items.error();
      plan.items = std::move(*items);
    }
    if (type == AVRO_RECORD) return CompileRecord(plan, schema, shape, column);
    return {};
  }

  std::string CompileRecord(Plan& plan, avro_schema_t record, const ShapeType& shape,
                            const std::string& column) {
    const std::string prefix = column.empty() ? "" : column + ".";
    const size_t size = avro_schema_record_size(record);
    std::vector<const ShapeField*> by_avro(size, nullptr);
    std::map<std::string, std::string> taken;  // Avro name -> column
    for (const ShapeField& field : shape.fields) {
      const std::string name = AvroFieldName(field.name);
      if (auto [it, inserted] = taken.emplace(name, field.name); !inserted) {
        return fmt::format("columns '{}{}' and '{}{}' both become the Avro field '{}'", prefix,
                           it->second, prefix, field.name, name);
      }
      // (avro_schema_record_field_get crashes on a name the record lacks.)
      const int index = avro_schema_record_field_get_index(record, name.c_str());
      if (index < 0) {
        return fmt::format("the writer schema's record {} has no field '{}' for column '{}{}' "
                           "({})",
                           avro_schema_name(record), name, prefix, field.name,
                           DescribeShape(field.type));
      }
      by_avro[static_cast<size_t>(index)] = &field;
    }
    for (size_t i = 0; i < size; ++i) {
      FieldPlan field_plan;
      field_plan.avro_index = static_cast<int>(i);
      field_plan.avro_name = avro_schema_record_field_name(record, static_cast<int>(i));
      avro_schema_t field_schema =
          avro_schema_record_field_get_by_index(record, static_cast<int>(i));
      const std::optional<simdjson::dom::element> json =
          json_.FieldType(avro_schema_name(record), i);
      const ShapeField* column_field = by_avro[i];
      if (column_field == nullptr) {
        // No column fills it: it is written null, which the schema must allow.
        auto compiled = std::make_unique<Plan>();
        compiled->column = prefix + field_plan.avro_name;
        compiled->avro_type = avro::TypeName(field_schema);
        if (avro_typeof(field_schema) == AVRO_UNION) {
          for (size_t b = 0; b < avro_schema_union_size(field_schema); ++b) {
            if (avro_typeof(avro_schema_union_branch(field_schema, static_cast<int>(b))) ==
                AVRO_NULL) {
              compiled->null_branch = static_cast<int>(b);
              break;
            }
          }
        }
        if (compiled->null_branch < 0) {
          return fmt::format(
              "the writer schema's field '{}{}' ({}) is not a column of these rows and does "
              "not allow null, so no row could fill it; remove it or make it a union with null",
              prefix, field_plan.avro_name, compiled->avro_type);
        }
        field_plan.plan = std::move(compiled);
      } else {
        field_plan.member = column_field->name;
        field_plan.elements = column_field->elements;
        auto compiled = Compile(field_schema, json, column_field->type,
                                prefix + column_field->name, prefix + field_plan.avro_name);
        if (!compiled) return compiled.error();
        field_plan.plan = std::move(*compiled);
      }
      plan.fields.push_back(std::move(field_plan));
    }
    plan.seen.assign(size, 0);
    return {};
  }

  const SchemaJson& json_;
};

// ---- the encoder ----------------------------------------------------------------------------

class AvroEncoder final : public ValueEncoder {
 public:
  struct Config {
    std::string schema_text;
    SchemaPtr schema;
    std::unique_ptr<Plan> plan;
    std::unique_ptr<SchemaRegistryClient> registry;
    std::string subject;
  };

  static ValueEncoderResult Create(Config config) {
    std::unique_ptr<AvroEncoder> encoder(new AvroEncoder(std::move(config)));
    encoder->iface_.reset(avro_generic_class_from_schema(encoder->config_.schema.get()));
    if (!encoder->iface_ ||
        avro_generic_value_new(encoder->iface_.get(), &encoder->value_) != 0) {
      return tl::unexpected(ValueFormatProblem{
          "", "cannot allocate a value of the writer schema: " + avro::LastError()});
    }
    encoder->value_live_ = true;
    encoder->writer_.reset(avro_writer_memory(nullptr, 0));
    return std::unique_ptr<ValueEncoder>(std::move(encoder));
  }

  ~AvroEncoder() override {
    if (value_live_) avro_value_decref(&value_);
  }

  Status Open() override {
    if (!config_.registry || framed_) return Ok();
    auto id = config_.registry->Register(config_.subject, config_.schema_text);
    if (!id) return tl::unexpected(id.error());
    header_.assign(1, '\0');
    for (int shift = 24; shift >= 0; shift -= 8) {
      header_.push_back(static_cast<char>((*id >> shift) & 0xffu));
    }
    framed_ = true;
    return Ok();
  }

  Status Encode(std::string_view row, std::string& out) override {
    if (config_.registry && !framed_) {
      return MakeError(ErrorCode::kInternal, "avro encoder used before Open");
    }
    simdjson::dom::element element;
    if (parser_.parse(row.data(), row.size()).get(element) != simdjson::SUCCESS ||
        !element.is_object()) {
      return MakeError(ErrorCode::kInternal, "avro encoder: a row that is not a JSON object");
    }
    avro_value_reset(&value_);
    std::string problem = WriteRecord(*config_.plan, element, value_);
    if (!problem.empty()) {
      return MakeError(ErrorCode::kConfig, "the row does not fit the Avro writer schema: {}",
                       problem);
    }
    // Written straight into `out`, grown when the record does not fit (cheaper than a first
    // pass of avro_value_sizeof over every value).
    out.assign(header_);
    for (;;) {
      out.resize(header_.size() + capacity_);
      avro_writer_memory_set_dest(writer_.get(), out.data() + header_.size(),
                                  static_cast<int64_t>(capacity_));
      const int written = avro_value_write(writer_.get(), &value_);
      if (written == 0) break;
      if (written != ENOSPC || capacity_ >= kMaxRecordBytes) {
        return MakeError(ErrorCode::kInternal, "avro encoder: {}", avro::LastError());
      }
      capacity_ *= 2;
    }
    out.resize(header_.size() + static_cast<size_t>(avro_writer_tell(writer_.get())));
    return Ok();
  }

  const std::string& schema_text() const override { return config_.schema_text; }

 private:
  explicit AvroEncoder(Config config) : config_(std::move(config)) {}

  static std::string Shown(simdjson::dom::element value) {
    std::string text = simdjson::minify(value);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
  }

  static std::string Found(const Plan& plan, simdjson::dom::element value, const char* expected) {
    return fmt::format("column '{}': expected {} (Avro {}), found {}", plan.column, expected,
                       plan.avro_type, Shown(value));
  }

  // Writes `value` (nullptr: the member is absent) into `dst` as `plan` says; a problem or
  // empty.
  std::string Write(const Plan& plan, const simdjson::dom::element* value, avro_value_t& dst) {
    const bool null = value == nullptr || value->is_null();
    if (null) {
      if (plan.null_branch < 0) {
        return fmt::format("column '{}' is {}, and the writer schema's type {} does not allow "
                           "null",
                           plan.column, value == nullptr ? "missing" : "null", plan.avro_type);
      }
      avro_value_t branch;
      if (avro_value_set_branch(&dst, plan.null_branch, &branch) != 0 ||
          avro_value_set_null(&branch) != 0) {
        return fmt::format("column '{}': {}", plan.column, avro::LastError());
      }
      return {};
    }
    if (plan.value_branch < 0) return WriteValue(plan, *value, dst);
    avro_value_t branch;
    if (avro_value_set_branch(&dst, plan.value_branch, &branch) != 0) {
      return fmt::format("column '{}': {}", plan.column, avro::LastError());
    }
    return WriteValue(plan, *value, branch);
  }

  std::string WriteValue(const Plan& plan, simdjson::dom::element value, avro_value_t& dst) {
    int failed = 0;
    switch (plan.kind) {
      case ShapeType::Kind::kString: {
        std::string_view text;
        if (value.get(text) != simdjson::SUCCESS) return Found(plan, value, "a string");
        if (plan.type == AVRO_ENUM) {
          scratch_.assign(text);
          const int symbol = avro_schema_enum_get_by_name(plan.schema, scratch_.c_str());
          if (symbol < 0) {
            return fmt::format("column '{}': '{}' is not a symbol of {}", plan.column, text,
                               plan.avro_type);
          }
          failed = avro_value_set_enum(&dst, symbol);
        } else {
          failed = SetString(dst, text);
        }
        break;
      }
      case ShapeType::Kind::kLong:
      case ShapeType::Kind::kInt: {
        int64_t number = 0;
        if (value.get(number) != simdjson::SUCCESS) return Found(plan, value, "an integer");
        failed = SetNumber(plan, dst, number);
        if (failed < 0) {
          return fmt::format("column '{}': {} is out of range for Avro int", plan.column,
                             number);
        }
        break;
      }
      case ShapeType::Kind::kDouble: {
        double number = 0;
        if (value.get(number) != simdjson::SUCCESS) return Found(plan, value, "a number");
        failed = avro_value_set_double(&dst, number);
        break;
      }
      case ShapeType::Kind::kBoolean: {
        bool flag = false;
        if (value.get(flag) != simdjson::SUCCESS) return Found(plan, value, "true or false");
        failed = avro_value_set_boolean(&dst, flag ? 1 : 0);
        break;
      }
      case ShapeType::Kind::kTimestamp: {
        std::string_view text;
        std::optional<int64_t> micros;
        if (value.get(text) == simdjson::SUCCESS) micros = ParseIso8601Micros(text);
        if (!micros) return Found(plan, value, "an RFC 3339 timestamp");
        if (plan.type == AVRO_STRING) {
          failed = SetString(dst, text);
        } else if (plan.micros) {
          failed = avro_value_set_long(&dst, *micros);
        } else {
          // Milliseconds, rounded down (rows carry whole milliseconds).
          const int64_t millis = *micros / 1000 - (*micros % 1000 < 0 ? 1 : 0);
          failed = avro_value_set_long(&dst, millis);
        }
        break;
      }
      case ShapeType::Kind::kRecord: {
        if (!value.is_object()) return Found(plan, value, "an object");
        return WriteRecord(plan, value, dst);
      }
      case ShapeType::Kind::kArray: {
        simdjson::dom::array array;
        if (value.get(array) != simdjson::SUCCESS) return Found(plan, value, "an array");
        for (simdjson::dom::element item : array) {
          avro_value_t element;
          if (avro_value_append(&dst, &element, nullptr) != 0) {
            return fmt::format("column '{}': {}", plan.column, avro::LastError());
          }
          if (std::string problem = Write(*plan.items, &item, element); !problem.empty()) {
            return problem;
          }
        }
        break;
      }
    }
    if (failed != 0) return fmt::format("column '{}': {}", plan.column, avro::LastError());
    return {};
  }

  // -1: out of range for an int.
  static int SetNumber(const Plan& plan, avro_value_t& dst, int64_t number) {
    switch (plan.type) {
      case AVRO_INT32:
        if (number < std::numeric_limits<int32_t>::min() ||
            number > std::numeric_limits<int32_t>::max()) {
          return -1;
        }
        return avro_value_set_int(&dst, static_cast<int32_t>(number)) != 0 ? 1 : 0;
      case AVRO_INT64: return avro_value_set_long(&dst, number) != 0 ? 1 : 0;
      case AVRO_FLOAT:
        return avro_value_set_float(&dst, static_cast<float>(number)) != 0 ? 1 : 0;
      default: return avro_value_set_double(&dst, static_cast<double>(number)) != 0 ? 1 : 0;
    }
  }

  int SetString(avro_value_t& dst, std::string_view text) {
    scratch_.assign(text);  // libavro copies a NUL-terminated string, the NUL counted
    return avro_value_set_string_len(&dst, scratch_.c_str(), scratch_.size() + 1);
  }

  // A member `name` that is element i of an array field (prefix + i + suffix).
  static std::optional<size_t> ElementIndex(std::string_view name, const ElementMembers& members) {
    if (name.size() <= members.prefix.size() + members.suffix.size() ||
        !name.starts_with(members.prefix) || !name.ends_with(members.suffix)) {
      return std::nullopt;
    }
    const std::string_view digits = name.substr(
        members.prefix.size(), name.size() - members.prefix.size() - members.suffix.size());
    size_t index = 0;
    for (char c : digits) {
      if (c < '0' || c > '9' || index > (size_t{1} << 40)) return std::nullopt;
      index = index * 10 + static_cast<size_t>(c - '0');
    }
    return index;
  }

  std::string WriteRecord(const Plan& plan, simdjson::dom::element object, avro_value_t& dst) {
    std::fill(plan.seen.begin(), plan.seen.end(), 0);
    size_t next = 0;  // members usually come in the fields' order
    simdjson::dom::object members;
    if (object.get(members) != simdjson::SUCCESS) return Found(plan, object, "an object");
    for (simdjson::dom::key_value_pair member : members) {
      const size_t count = plan.fields.size();
      size_t found = count;
      std::optional<size_t> element;
      for (size_t k = 0; k < count; ++k) {
        const size_t f = (next + k) % count;
        const FieldPlan& field = plan.fields[f];
        if (field.member.empty()) continue;
        if (field.elements) {
          element = ElementIndex(member.key, *field.elements);
          if (element) {
            found = f;
            break;
          }
        } else if (field.member == member.key) {
          found = f;
          break;
        }
      }
      if (found == count) {
        return fmt::format("column '{}{}{}' has no field in the writer schema", plan.column,
                           plan.column.empty() ? "" : ".", member.key);
      }
      next = found + 1;
      const FieldPlan& field = plan.fields[found];
      avro_value_t child;
      if (avro_value_get_by_index(&dst, static_cast<size_t>(field.avro_index), &child, nullptr) !=
          0) {
        return fmt::format("column '{}': {}", field.plan->column, avro::LastError());
      }
      if (!field.elements) {
        if (plan.seen[found]) continue;  // a repeated member: the first one counts
        plan.seen[found] = 1;
        if (std::string problem = Write(*field.plan, &member.value, child); !problem.empty()) {
          return problem;
        }
        continue;
      }
      // Element i of an array spread over numbered members, appended in order.
      avro_value_t array = child;
      if (field.plan->value_branch >= 0 &&
          avro_value_set_branch(&child, field.plan->value_branch, &array) != 0) {
        return fmt::format("column '{}': {}", field.plan->column, avro::LastError());
      }
      size_t size = 0;
      avro_value_get_size(&array, &size);
      if (*element != size) {
        return fmt::format("column '{}': member '{}' out of order (element {} expected)",
                           field.plan->column, member.key, size);
      }
      plan.seen[found] = 1;
      avro_value_t item;
      if (avro_value_append(&array, &item, nullptr) != 0) {
        return fmt::format("column '{}': {}", field.plan->column, avro::LastError());
      }
      if (std::string problem = Write(*field.plan->items, &member.value, item); !problem.empty()) {
        return problem;
      }
    }
    for (size_t f = 0; f < plan.fields.size(); ++f) {
      if (plan.seen[f]) continue;
      const FieldPlan& field = plan.fields[f];
      avro_value_t child;
      if (avro_value_get_by_index(&dst, static_cast<size_t>(field.avro_index), &child, nullptr) !=
          0) {
        return fmt::format("column '{}': {}", field.plan->column, avro::LastError());
      }
      if (field.elements) {
        // No element: an empty array.
        avro_value_t array;
        if (field.plan->value_branch >= 0 &&
            avro_value_set_branch(&child, field.plan->value_branch, &array) != 0) {
          return fmt::format("column '{}': {}", field.plan->column, avro::LastError());
        }
        continue;
      }
      if (std::string problem = Write(*field.plan, nullptr, child); !problem.empty()) {
        return problem;
      }
    }
    return {};
  }

  Config config_;
  IfacePtr iface_;
  avro_value_t value_{};
  bool value_live_ = false;
  WriterPtr writer_;
  simdjson::dom::parser parser_;
  std::string scratch_;
  /// Confluent framing: magic byte 0 and the 4-byte big-endian schema id (after Open).
  std::string header_;
  bool framed_ = false;
  /// Room given to avro_value_write; doubles while a record does not fit, up to 1 GiB.
  static constexpr size_t kMaxRecordBytes = size_t{1} << 30;
  size_t capacity_ = 4096;
};

// The encoder's options as BindAvroEncoder made them (their defaults are declared in
// AddAvroEncoder only).
struct AvroEncoderOptions {
  /// Empty: the writer schema is derived from the rows.
  std::string schema_file;
  /// Set with schemaRegistryUrl: the writer schema is registered and records are framed.
  std::optional<SchemaRegistryOptions> registry;
  /// Empty: the context's default subject.
  std::string subject;
};

Bound<AvroEncoderOptions> BindAvroEncoder(const Options& options) {
  AvroEncoderOptions bound;
  bound.schema_file = options.GetString("schemaFile");
  bound.subject = options.GetString("subject");
  auto registry = BindSchemaRegistryOptions(options);
  if (!registry) return tl::unexpected(std::move(registry.error()));
  bound.registry = std::move(*registry);
  return bound;
}

ValueEncoderResult CreateAvroEncoder(const ValueEncoderContext& context,
                                     const AvroEncoderOptions& options) {
  AvroEncoder::Config config;
  const std::string& schema_file = options.schema_file;
  std::string problem_option = "schemaFile";
  if (schema_file.empty()) {
    auto derived = SchemaWriter().Write(context.rows);
    if (!derived) return tl::unexpected(ValueFormatProblem{"", derived.error()});
    config.schema_text = std::move(*derived);
    problem_option.clear();
  } else {
    std::ifstream in(schema_file, std::ios::binary);
    if (!in) {
      return tl::unexpected(ValueFormatProblem{
          "schemaFile",
          fmt::format("cannot read '{}': {}", schema_file, std::strerror(errno))});
    }
    std::stringstream text;
    text << in.rdbuf();
    config.schema_text = text.str();
  }
  const std::string where = schema_file.empty() ? "the derived writer schema"
                                                : fmt::format("'{}'", schema_file);
  avro_schema_t schema = nullptr;
  if (avro_schema_from_json_length(config.schema_text.data(), config.schema_text.size(),
                                   &schema) != 0) {
    return tl::unexpected(ValueFormatProblem{
        problem_option, fmt::format("{}: not an Avro schema: {}", where, avro::LastError())});
  }
  config.schema.reset(schema);
  if (avro_typeof(schema) != AVRO_RECORD) {
    return tl::unexpected(ValueFormatProblem{
        problem_option, fmt::format("{}: the schema is {}; its top level must be a record",
                                    where, avro::TypeName(schema))});
  }
  SchemaJson json;
  if (!json.Parse(config.schema_text)) {
    return tl::unexpected(
        ValueFormatProblem{problem_option, fmt::format("{}: not JSON", where)});
  }
  Compiler compiler(json);
  auto plan = compiler.Compile(schema, *json.Root(), context.rows, "", "");
  if (!plan) {
    return tl::unexpected(ValueFormatProblem{
        problem_option, fmt::format("{} does not cover the rows: {}", where, plan.error())});
  }
  config.plan = std::move(*plan);
  if (options.registry) {
    auto client = SchemaRegistryClient::Create(*options.registry);
    if (!client) return tl::unexpected(std::move(client.error()));
    config.registry = std::move(*client);
    config.subject = options.subject.empty() ? context.default_subject : options.subject;
  }
  return AvroEncoder::Create(std::move(config));
}

}  // namespace

std::string AvroFieldName(std::string_view column) {
  std::string name;
  bool gap = false;
  for (const char c : column) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_';
    if (!word) {
      gap = true;
      continue;
    }
    if (gap && !name.empty()) name.push_back('_');
    gap = false;
    name.push_back(c);
  }
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) name.insert(name.begin(), '_');
  return name;
}

void AddAvroEncoder(ValueFormatDecl& decl) {
  decl.sink_options = {
      {"schemaFile", OptionType::kString, "",
       "Path of the writer schema (.avsc), a record with a field for every column of the "
       "sink's rows (by Avro name: `mean(prediction)` is `mean_prediction`). Unset: driftd "
       "derives it from the rows (`driftd sink-schema` prints it)."},
      {"schemaRegistryUrl", OptionType::kString, "",
       "Base URL of a Confluent-compatible Schema Registry: the writer schema is registered "
       "when the sink opens (POST <url>/subjects/<subject>/versions) and each record is "
       "Confluent-framed (magic byte 0, the 4-byte schema id). Unset: plain Avro binary."},
      {"subject", OptionType::kString, "",
       "Registry subject of the writer schema. Unset: `<topic>-value` (TopicNameStrategy)."},
  };
  for (OptionDecl& option : SchemaRegistryOptionDecls()) decl.sink_options.push_back(option);
  DeclareEncoder<AvroEncoderOptions>(decl, &BindAvroEncoder, &CreateAvroEncoder);
}

}  // namespace driftd
