// The name and schema sections of a pipeline file, and the metadata columns a query may read
// (PipelineParser, config/loader_parser.h).
#include "config/loader_parser.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "config/suggest.h"
#include "engine/expr/expr.h"

namespace driftd::loader_detail {

namespace {

// Spellings from other systems that users type for driftd's field types.
const std::vector<std::pair<std::string_view, std::string_view>> kTypeAliases = {
    {"float", "double"},        {"float64", "double"},
    {"number", "double"},       {"integer", "int"},
    {"int32", "int"},           {"bigint", "long"},
    {"int64", "long"},          {"bool", "boolean"},
    {"str", "string"},          {"text", "string"},
    {"datetime", "timestamp"},  {"array<float>", "array<double>"},
    {"array", "array<double>"}, {"list<double>", "array<double>"},
};

bool Accepts(ColumnUse use, FieldType type) {
  switch (use) {
    case ColumnUse::kAny:
      return true;
    case ColumnUse::kGroupKey:
      return type == FieldType::kString || type == FieldType::kLong || type == FieldType::kInt ||
             type == FieldType::kBoolean;
    case ColumnUse::kNumericLike:
      return IsNumeric(type) || type == FieldType::kDoubleArray;
    case ColumnUse::kTimestamp:
      return type == FieldType::kTimestamp;
    case ColumnUse::kLabel:
      return IsNumeric(type) || type == FieldType::kBoolean;
    case ColumnUse::kSeries:
      return IsNumeric(type) || type == FieldType::kDoubleArray || IsMap(type) ||
             type == FieldType::kString || type == FieldType::kStringArray ||
             type == FieldType::kBoolean;
  }
  return false;
}

std::string_view Expected(ColumnUse use) {
  switch (use) {
    case ColumnUse::kAny:
      return "any column";
    case ColumnUse::kGroupKey:
      return "a string, long, int or boolean column";
    case ColumnUse::kNumericLike:
      return "a numeric (double, long, int) or array<double> column";
    case ColumnUse::kTimestamp:
      return "a timestamp column";
    case ColumnUse::kLabel:
      return "a numeric or boolean column";
    case ColumnUse::kSeries:
      return "a numeric (double, long, int), array<double> or map<string,double> column, or a "
             "categorical string, boolean, array<string> or map<string,string> column";
  }
  return "";
}

}  // namespace

// ---- name, schema -------------------------------------------------------------------------

void PipelineParser::ParseName(const MapReader& top) {
  auto name = top.String("name", /*required=*/true);
  if (!name) return;
  if (!IsValidName(name->value)) {
    problems_.Error(name->path, name->mark,
                    fmt::format("pipeline name {} may contain only letters, digits, '.', '_' "
                                "and '-' (it names the checkpoint and the Kafka "
                                "transactional.id)",
                                Show(*name)));
    return;
  }
  if (IsDirectoryAlias(name->value)) {
    problems_.Error(name->path, name->mark,
                    fmt::format("pipeline name {} is not allowed: it names a directory that "
                                "is not the pipeline's own (its default checkpoint would be "
                                "the state directory or its parent)",
                                Show(*name)));
    return;
  }
  spec_.name = name->value;
}

void PipelineParser::ParseSchema(const MapReader& top) {
  const MapReader::Entry* entry = top.Find("schema");
  if (entry == nullptr || entry->value.IsNull()) {
    top.ReportMissing("schema", " (a list of fields, e.g. - {name: model_id, type: string})");
    return;
  }
  auto items = reader_.ReadList(entry->value, "schema",
                                " of fields, e.g. - {name: model_id, type: string}");
  if (!items) return;
  if (items->empty()) {
    problems_.Error("schema", entry->key_mark, "the schema needs at least one field");
    return;
  }
  schema_names_complete_ = true;
  std::map<std::string, int> first_line;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string path = fmt::format("schema[{}]", i);
    MapReader field(reader_, (*items)[i], path, {},
                    std::vector<std::string_view>{"name", "type", "nullable"},
                    " with name, type and nullable");
    if (!field.valid()) {
      schema_names_complete_ = false;
      continue;
    }
    auto name = field.String("name", true);
    std::optional<TypeSpec> type;
    if (auto type_text = field.String("type", true)) type = ParseType(*type_text);
    auto nullable = field.Bool("nullable");
    if (!name) {
      schema_names_complete_ = false;
      continue;
    }
    if (name->value.empty()) {
      problems_.Error(name->path, name->mark, "a field name cannot be empty");
      schema_names_complete_ = false;
      continue;
    }
    if (auto it = first_line.find(name->value); it != first_line.end()) {
      problems_.Error(
          name->path, name->mark,
          fmt::format("duplicate field {} (first declared at line {})", Show(*name), it->second));
      continue;
    }
    first_line.emplace(name->value, name->mark.line);
    schema_lines_.emplace(name->value, name->mark.line);
    if (!type) {
      columns_.emplace(name->value, std::nullopt);
      column_names_.push_back(name->value);
      continue;
    }
    // A struct's columns are its leaves, by dotted path; a leaf's name must not be taken.
    Schema added;
    AddDeclaredField(added, name->value, *type, nullable.value_or(true));
    for (const Field& column : added.fields) {
      if (column.path.empty()) continue;
      if (auto it = first_line.find(column.name); it != first_line.end()) {
        problems_.Error(
            name->path, name->mark,
            fmt::format("struct field {} has a member '{}' whose column name '{}' is already "
                        "the field declared at line {}",
                        Show(*name), column.name.substr(name->value.size() + 1), column.name,
                        it->second));
        schema_names_complete_ = false;
        type.reset();
        break;
      }
    }
    if (!type) continue;
    if (!type->is_struct) {
      columns_.emplace(name->value, type->type);
      column_names_.push_back(name->value);
    }
    for (const Field& column : added.fields) {
      if (column.path.empty()) continue;
      first_line.emplace(column.name, name->mark.line);
      schema_lines_.emplace(column.name, name->mark.line);
      columns_.emplace(column.name, column.type);
      column_names_.push_back(column.name);
    }
    for (Field& column : added.fields) spec_.schema.fields.push_back(std::move(column));
    for (StructField& declared : added.structs) {
      spec_.schema.structs.push_back(std::move(declared));
    }
  }
}

// A field's type as written: a column type or a struct<...>; nullopt when it does not parse
// (reported, at the offending character when the text allows).
std::optional<TypeSpec> PipelineParser::ParseType(const Scalar& text) {
  auto parsed = ParseTypeSpec(text.value);
  if (parsed) return *parsed;
  // A struct's leaves (or a map's keys) are unknown now: references to them are not
  // reported again as unknown columns.
  if (text.value.starts_with("struct") || text.value.starts_with("map")) {
    schema_names_complete_ = false;
  }
  TypeError error = parsed.error();
  std::string suggestion;
  if (Lookup(kTypeAliases, text.value)) error.unknown = text.value;  // array<float>, ...
  if (!error.unknown.empty()) {
    if (auto alias = Lookup(kTypeAliases, error.unknown)) {
      suggestion = fmt::format("; did you mean '{}'?", *alias);
    } else {
      suggestion = DidYouMean(error.unknown, FieldTypeNames());
    }
  }
  const bool whole = error.unknown == text.value;
  if (whole) {
    problems_.Error(text.path, text.mark,
                    fmt::format("unknown type {}; expected one of {}, or struct<name:type, "
                                "...>{}",
                                Show(text), Join(FieldTypeNames()), suggestion));
  } else {
    problems_.Error(text.path, MarkWithin(text, error.offset),
                    fmt::format("type {}: {}{}{}", Show(text), error.message,
                                error.unknown.empty()
                                    ? std::string()
                                    : fmt::format("; expected one of {}",
                                                  Join(FieldTypeNames())),
                                suggestion));
  }
  return std::nullopt;
}

// Checks a column reference; false when it is unknown or of the wrong type (reported).
bool PipelineParser::CheckColumn(const Scalar& column, ColumnUse use, std::string_view role) {
  if (!ReadsColumn(column.value, column.path, column.mark, role)) return false;
  auto it = columns_.find(column.value);
  if (it == columns_.end()) {
    if (NotAMetadataSource(column.value, column.path, column.mark,
                           fmt::format("{} {}", role, Show(column)))) {
      return false;
    }
    if (schema_names_complete_ && failed_derived_.count(column.value) == 0) {
      std::vector<std::string_view> names(column_names_.begin(), column_names_.end());
      std::string suggestion = DidYouMean(column.value, names);
      problems_.Error(column.path, column.mark,
                      fmt::format("{} {} is not a schema column{}", role, Show(column),
                                  suggestion.empty() ? fmt::format(" (columns: {})", Join(names))
                                                     : suggestion));
    }
    return false;
  }
  if (it->second && !Accepts(use, *it->second)) {
    problems_.Error(column.path, column.mark,
                    fmt::format("{} {} is of type {}; expected {}", role, Show(column),
                                FieldTypeName(*it->second), Expected(use)));
    return false;
  }
  return true;
}

// ---- metadata columns ---------------------------------------------------------------------

// The names of the source kinds of the catalog with a trait, for messages ("kafka").
std::string PipelineParser::SourcesWith(bool SourceTraits::*trait) const {
  std::vector<std::string_view> names;
  if (options_.catalog) {
    for (const ConnectorDecl& decl : *options_.catalog) {
      if (decl.role == ConnectorRole::kSource && decl.traits.*trait) names.push_back(decl.format);
    }
  }
  return names.empty() ? std::string("none") : Join(names);
}

// With a Kafka source, the record's metadata columns that no schema field shadows become
// readable; which of them the query reads is settled once the query and drift are parsed.
void PipelineParser::OfferMetadataColumns() {
  if (!MessageSource()) return;
  for (const MetadataColumnDef& def : MetadataColumnDefs()) {
    const std::string name(def.name);
    if (schema_lines_.count(name) > 0 || columns_.count(name) > 0) continue;
    columns_.emplace(name, def.type);
    column_names_.push_back(name);
    spec_.query.metadata.push_back(def.column);
  }
}

// Only the metadata columns the query reads are produced.
void PipelineParser::KeepReadMetadataColumns() {
  std::vector<MetadataColumn> kept;
  for (MetadataColumn column : spec_.query.metadata) {
    if (metadata_read_.count(column) > 0) kept.push_back(column);
  }
  spec_.query.metadata = std::move(kept);
}

// Notes that the query reads column `name`; false (reported) when the name is ambiguous: a
// schema field that a Kafka record's metadata column of the same name collides with.
bool PipelineParser::ReadsColumn(const std::string& name, const std::string& path, SourceMark mark,
                                 std::string_view what) {
  auto metadata = ParseMetadataColumn(name);
  if (!metadata || !MessageSource()) return true;
  auto field = schema_lines_.find(name);
  if (field == schema_lines_.end()) {
    metadata_read_.insert(*metadata);
    return true;
  }
  if (reported_ambiguous_.insert(name).second) {
    problems_.Error(path, mark,
                    fmt::format("{} '{}' is ambiguous: the schema declares a field '{}' (line "
                                "{}) and every Kafka record has a metadata column '{}' ({}); "
                                "the metadata columns' names ({}) cannot be schema fields that "
                                "the query reads",
                                what, name, name, field->second, name, DefOf(*metadata).doc,
                                MetadataColumnList()));
  }
  return false;
}

// For an unknown column that is a metadata column's name and a source that has none: says
// so (true, reported).
bool PipelineParser::NotAMetadataSource(const std::string& name, const std::string& path,
                                        SourceMark mark, const std::string& what) {
  if (!ParseMetadataColumn(name) || MessageSource() || spec_.source.format.empty()) return false;
  problems_.Error(path, mark,
                  fmt::format("{}: '{}' is a Kafka metadata column, and the {} source has "
                              "none ({} exist only with source.format {}); declare a schema "
                              "field '{}' if the records carry one",
                              what, name, spec_.source.format, MetadataColumnList(),
                              SourcesWith(&SourceTraits::whole_messages), name));
  return true;
}

// The columns a compiled expression reads, noted (see ReadsColumn); false when one is
// ambiguous (reported).
bool PipelineParser::ReadsColumns(const expr::Expression& expression, const Scalar& scalar,
                                  std::string_view what) {
  const Schema columns = ExpressionColumns();
  bool ok = true;
  for (int index : expression.ColumnsRead()) {
    const std::string& name = columns.fields[static_cast<size_t>(index)].name;
    ok = ReadsColumn(name, scalar.path, scalar.mark,
                     fmt::format("{} {}: column", what, Show(scalar))) &&
         ok;
  }
  return ok;
}

std::optional<FieldType> PipelineParser::ColumnType(std::string_view name) const {
  auto it = columns_.find(std::string(name));
  return it == columns_.end() ? std::nullopt : it->second;
}

}  // namespace driftd::loader_detail
