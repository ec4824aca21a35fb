#include "config/loader.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <sys/stat.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "config/connector_options.h"
#include "config/detectors.h"
#include "config/suggest.h"
#include "config/yaml_precheck.h"
#include "config/yaml_reader.h"
#include "engine/aggregates.h"
#include "engine/drift/detectors.h"
#include "engine/drift/monitor.h"
#include "engine/expr/expr.h"
#include "engine/quantile_sketch.h"
#include "engine/redact.h"
#include "engine/row_shape.h"

namespace driftd {
namespace {

/// A file baseline's reference is read whole: reference statistics are a few KB per model, and
/// reference records beyond this are better given as statistics (`driftd baseline build`).
constexpr size_t kMaxReferenceBytes = 256u << 20;

/// The reference file of a file baseline, read in bounded time and memory: not a FIFO or device
/// (opening one may block, reading it need not end), and no larger than kMaxReferenceBytes.
Result<std::string> ReadReferenceFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return MakeError(ErrorCode::kConfig, "cannot read the file: not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
  // In blocks, to at most a block past the limit: memory follows the file, not the limit.
  std::string text;
  char block[64 * 1024];
  while (text.size() <= kMaxReferenceBytes && in.read(block, sizeof block).gcount() > 0) {
    text.append(block, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
  }
  if (text.size() > kMaxReferenceBytes) {
    return MakeError(ErrorCode::kConfig,
                     "the file is larger than {} bytes; give reference statistics (a few KB "
                     "per model) rather than that many reference records",
                     kMaxReferenceBytes);
  }
  return text;
}

using config_detail::Describe;
using config_detail::MapReader;
using config_detail::Problems;
using config_detail::Reader;
using config_detail::Scalar;
using config_detail::Show;

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

bool IsValidName(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// "." and ".." name directories that are not the pipeline's own: the default checkpoint
// "$STATE_DIRECTORY/<name>" would be the state directory itself, or its parent.
bool IsDirectoryAlias(std::string_view name) { return name == "." || name == ".."; }

// Absolute and lexically normal, with symbolic links resolved as far as the path exists, and
// without a trailing separator ("out/" is "out").
std::filesystem::path NormalPath(const std::string& text) {
  std::error_code error;
  std::filesystem::path path = std::filesystem::absolute(text, error);
  if (error) path = text;
  std::filesystem::path resolved = std::filesystem::weakly_canonical(path, error);
  if (!error) path = resolved;
  path = path.lexically_normal();
  if (!path.has_filename() && path.has_parent_path() && path != path.root_path()) {
    path = path.parent_path();
  }
  return path;
}

// Whether `inner` is `outer` or lies below it.
bool IsWithin(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  auto a = inner.begin();
  for (auto b = outer.begin(); b != outer.end(); ++b, ++a) {
    if (a == inner.end() || *a != *b) return false;
  }
  return true;
}

std::string Join(const std::vector<std::string_view>& words) {
  std::string out;
  for (std::string_view word : words) {
    if (!out.empty()) out += ", ";
    out += word;
  }
  return out;
}

template <typename E>
std::optional<E> Lookup(const std::vector<std::pair<std::string_view, E>>& table,
                        std::string_view name) {
  for (const auto& [spelled, value] : table) {
    if (spelled == name) return value;
  }
  return std::nullopt;
}

template <typename E>
std::vector<std::string_view> Names(const std::vector<std::pair<std::string_view, E>>& table) {
  std::vector<std::string_view> names;
  for (const auto& entry : table) names.push_back(entry.first);
  return names;
}

const std::vector<std::pair<std::string_view, MalformedPolicy>> kPolicies = {
    {"permissive", MalformedPolicy::kPermissive},
    {"drop", MalformedPolicy::kDrop},
    {"fail", MalformedPolicy::kFail},
    {"dead_letter", MalformedPolicy::kDeadLetter},
};

// The aggregates' names and aliases (engine/aggregates.h), in the table's order.
const std::vector<std::pair<std::string_view, AggregateFn>> kAggregates = [] {
  std::vector<std::pair<std::string_view, AggregateFn>> names;
  for (const AggregateDecl& kind : AggregateKinds()) {
    names.emplace_back(kind.name, kind.fn);
    for (std::string_view alias : kind.aliases) names.emplace_back(alias, kind.fn);
  }
  return names;
}();

const std::vector<std::pair<std::string_view, OutputMode>> kOutputModes = {
    {"append", OutputMode::kAppend},
    {"update", OutputMode::kUpdate},
    {"complete", OutputMode::kComplete},
};

const std::vector<std::pair<std::string_view, StreamKind>> kStreams = {
    {"stats", StreamKind::kStats},
    {"alerts", StreamKind::kAlerts},
    {"dead_letter", StreamKind::kDeadLetter},
    {"evaluations", StreamKind::kEvaluations},
    {"performance", StreamKind::kPerformance},
};

const std::vector<std::pair<std::string_view, BaselineKind>> kBaselines = {
    {"warmup", BaselineKind::kWarmup},
    {"file", BaselineKind::kFile},
    {"trailing", BaselineKind::kTrailing},
    {"seasonal", BaselineKind::kSeasonal},
};

// Column names that say "this is the model's prediction" or "this is the ground truth": with
// one of each in the schema, drift watches the error rate without being told.
const std::vector<std::string_view> kPredictionNames = {"prediction", "predicted", "y_pred",
                                                        "score"};
const std::vector<std::string_view> kLabelNames = {"label", "ground_truth", "target", "actual",
                                                   "y_true"};

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

std::string StreamName(StreamKind stream) {
  for (const auto& [name, value] : kStreams) {
    if (value == stream) return std::string(name);
  }
  return "stats";
}

std::string PolicyName(MalformedPolicy policy) {
  for (const auto& [name, value] : kPolicies) {
    if (value == policy) return std::string(name);
  }
  return "permissive";
}

std::string ModeName(OutputMode mode) {
  for (const auto& [name, value] : kOutputModes) {
    if (value == mode) return std::string(name);
  }
  return "append";
}

// Where a column reference is and what kinds of column it accepts.
enum class ColumnUse {
  kAny,
  kGroupKey,     // string, long, int, boolean
  kNumericLike,  // double, long, int, array<double>
  kTimestamp,
  kLabel,  // prediction / label for error rate: numeric or boolean
  kSeries,  // drift series: numeric, array<double>, maps, and categorical string or boolean
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

// What the sinks said, beyond the SinkSpec: which fields parsed and whether outputMode was given.
struct SinkInfo {
  bool stream_ok = false;
  bool mode_given = false;
  bool mode_ok = false;
  SourceMark stream_mark;
  SourceMark mode_mark;
  /// The sink's value format when it names one that sinks can write (checked once the whole
  /// file is read: CheckSinkValueFormats).
  const ValueFormatDecl* value_format = nullptr;
};

class PipelineParser {
 public:
  PipelineParser(const LoadOptions& options, Problems& problems, std::string_view text)
      : options_(options), reader_{problems, options.env}, problems_(problems) {
    size_t begin = 0;
    while (begin <= text.size()) {
      size_t end = text.find('\n', begin);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(begin, end - begin);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lines_.push_back(line);
      begin = end + 1;
    }
  }

  PipelineSpec Parse(const YAML::Node& root, std::string_view file_name) {
    spec_.file = std::string(file_name);
    MapReader top(reader_, root, "", {1, 1},
                  std::vector<std::string_view>{"name", "schema", "source", "inputs", "labels",
                                                "query", "drift", "performance", "sinks",
                                                "trigger", "checkpointLocation", "scaleOut",
                                                "threads"},
                  " (a pipeline: name, schema, source, inputs, labels, query, drift, "
                  "performance, sinks, trigger, checkpointLocation, scaleOut, threads)");
    if (!top.valid()) return spec_;
    ParseName(top);
    ParseSchema(top);
    ParseSource(top);
    ParseInputs(top);
    OfferMetadataColumns();
    ParseQuery(top);
    ParseDrift(top);
    ParseLabels(top);
    KeepReadMetadataColumns();
    ParseSinks(top);
    ParseTrigger(top);
    ParseCheckpoint(top);
    ParseScaleOut(top);
    ParseThreads(top);
    CheckLabels();
    CheckOutputModes();
    CheckOrderDependence();
    CheckDeadLetter();
    CheckValueFormat();
    CheckSinkValueFormats();
    CheckStreams();
    CheckPaths();
    BindSources();
    return spec_;
  }

 private:
  // ---- name, schema -------------------------------------------------------------------------

  void ParseName(const MapReader& top) {
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

  void ParseSchema(const MapReader& top) {
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
  std::optional<TypeSpec> ParseType(const Scalar& text) {
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
  bool CheckColumn(const Scalar& column, ColumnUse use, std::string_view role) {
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

  // The source's records are whole messages with metadata (SourceTraits::whole_messages).
  bool MessageSource() const { return spec_.source.traits.whole_messages; }

  // The names of the source kinds of the catalog with a trait, for messages ("kafka").
  std::string SourcesWith(bool SourceTraits::*trait) const {
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
  void OfferMetadataColumns() {
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
  void KeepReadMetadataColumns() {
    std::vector<MetadataColumn> kept;
    for (MetadataColumn column : spec_.query.metadata) {
      if (metadata_read_.count(column) > 0) kept.push_back(column);
    }
    spec_.query.metadata = std::move(kept);
  }

  // Notes that the query reads column `name`; false (reported) when the name is ambiguous: a
  // schema field that a Kafka record's metadata column of the same name collides with.
  bool ReadsColumn(const std::string& name, const std::string& path, SourceMark mark,
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
  bool NotAMetadataSource(const std::string& name, const std::string& path, SourceMark mark,
                          const std::string& what) {
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
  bool ReadsColumns(const expr::Expression& expression, const Scalar& scalar,
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

  std::optional<FieldType> ColumnType(std::string_view name) const {
    auto it = columns_.find(std::string(name));
    return it == columns_.end() ? std::nullopt : it->second;
  }

  // ---- source -------------------------------------------------------------------------------

  void ParseSource(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("source");
    if (entry == nullptr || entry->value.IsNull()) {
      top.ReportMissing("source", " (e.g. source: {format: kafka, options: {...}})");
      return;
    }
    MapReader source(reader_, entry->value, "source", entry->key_mark,
                     std::vector<std::string_view>{"format", "options", "malformed",
                                                   "valueFormat", "valueOptions"},
                     " with format, options, malformed, valueFormat and valueOptions");
    spec_.source.mark = entry->key_mark;
    if (!source.valid()) return;
    ParseSourceFields(source, "source", spec_.source, /*main=*/true);
  }

  // `inputs`: more inputs of the query's schema, read with the source as one stream.
  void ParseInputs(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("inputs");
    if (entry == nullptr) return;
    auto items = reader_.ReadList(entry->value, "inputs",
                                  " of inputs, e.g. - {name: eu, format: kafka, options: {...}}");
    if (!items) return;
    std::set<std::string> names;
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string path = fmt::format("inputs[{}]", i);
      const YAML::Node& node = (*items)[i];
      MapReader input(reader_, node, path, config_detail::MarkOf(node),
                      std::vector<std::string_view>{"name", "format", "options", "malformed",
                                                    "valueFormat", "valueOptions"},
                      " with name, format, options, malformed, valueFormat and valueOptions");
      if (!input.valid()) continue;
      InputSpec spec;
      spec.source.mark = config_detail::MarkOf(node);
      if (auto name = input.String("name", true)) {
        if (!IsValidName(name->value)) {
          problems_.Error(name->path, name->mark,
                          fmt::format("input name {} may contain only letters, digits, '.', '_' "
                                      "and '-' (it prefixes the input's offsets)",
                                      Show(*name)));
        } else if (!names.insert(name->value).second || name->value == "main") {
          problems_.Error(name->path, name->mark,
                          fmt::format("input name {} is used twice (\"main\" is the source's)",
                                      Show(*name)));
        }
        spec.name = name->value;
      }
      ParseSourceFields(input, path, spec.source, /*main=*/false);
      spec_.inputs.push_back(std::move(spec));
    }
  }

  // format, options, malformed, valueFormat and valueOptions of an input, at `path`.
  void ParseSourceFields(const MapReader& source, const std::string& path, SourceSpec& target,
                         bool main) {
    const ConnectorDecl* decl = nullptr;
    bool format_ok = false;
    if (auto format = source.String("format", true)) {
      target.format = format->value;
      format_ok = CheckFormat(*format, ConnectorRole::kSource, &decl);
    }
    if (decl) {
      target.traits = decl->traits;
      for (const OptionDecl& option : decl->options) {
        if (option.identity) target.identity_options.push_back(option.name);
      }
    }
    if (format_ok || !options_.catalog) {
      target.options =
          config_detail::ReadConnectorOptions(reader_, source, decl,
                                              fmt::format("{} source", target.format),
                                              &target.option_marks);
    }
    ParseMalformed(source, path, target, main);
    ParseValueFormat(source, path, target, main);
  }

  void ParseValueFormat(const MapReader& source, const std::string& path, SourceSpec& spec,
                        bool main) {
    (void)path;
    const ValueFormatDecl* found = nullptr;
    bool ok = ParseValueFormatOf(source, spec, found);
    if (main) {
      value_format_ok_ = ok;
      value_format_decl_ = found;
    } else if (ok) {
      CheckInputValueFormat(path, spec, found);
    }
  }

  // The checks CheckValueFormat makes for the source, made at once for another input.
  void CheckInputValueFormat(const std::string& path, const SourceSpec& source,
                             const ValueFormatDecl* decl) {
    if (decl == nullptr) return;
    if (decl->binary && !source.format.empty() && !source.traits.whole_messages) {
      problems_.Error(path + ".valueFormat", source.value_format_mark,
                      fmt::format("value format {} is binary and needs a source whose records "
                                  "come whole, one per message ({}); the {} source splits "
                                  "its input into lines",
                                  decl->name, SourcesWith(&SourceTraits::whole_messages),
                                  source.format));
    }
  }

  bool ParseValueFormatOf(const MapReader& source, SourceSpec& spec,
                          const ValueFormatDecl*& value_format_decl) {
    value_format_decl = nullptr;
    if (auto format = source.String("valueFormat")) {
      spec.value_format = format->value;
      spec.value_format_mark = format->mark;
      std::vector<std::string_view> names;
      if (options_.value_formats) {
        for (const ValueFormatDecl& decl : *options_.value_formats) names.push_back(decl.name);
        value_format_decl = FindValueFormat(*options_.value_formats, format->value);
      } else {
        names.push_back("json");
      }
      if (value_format_decl == nullptr && !(options_.value_formats == nullptr &&
                                             format->value == "json")) {
        problems_.Error(format->path, format->mark,
                        fmt::format("unknown value format {} (known value formats: {}){}",
                                    Show(*format), Join(names),
                                    format->secret ? "" : DidYouMean(format->value, names)));
        return false;
      }
    } else if (source.Has("valueFormat")) {
      return false;  // reported by String()
    } else if (options_.value_formats) {
      value_format_decl = FindValueFormat(*options_.value_formats, spec.value_format);
    }
    if (value_format_decl != nullptr) {
      ConnectorDecl decl;
      decl.format = value_format_decl->name;
      decl.options = value_format_decl->options;
      spec.value_options = config_detail::ReadConnectorOptions(
          reader_, source, &decl, fmt::format("{} value format", decl.format),
          &spec.value_option_marks, "valueOptions");
    } else {
      spec.value_options = config_detail::ReadConnectorOptions(
          reader_, source, nullptr, "json value format", &spec.value_option_marks,
          "valueOptions");
    }
    return true;
  }

  // The value format's own checks (its files, the schema they must fit), once the schema and
  // the source are read, reported at the option at fault.
  void CheckValueFormat() {
    const SourceSpec& source = spec_.source;
    if (!value_format_ok_ || value_format_decl_ == nullptr) return;
    if (value_format_decl_->binary && !source.format.empty() && !source.traits.whole_messages) {
      problems_.Error("source.valueFormat", source.value_format_mark,
                      fmt::format("value format {} is binary and needs a source whose records "
                                  "come whole, one per message ({}); the {} source splits "
                                  "its input into lines",
                                  value_format_decl_->name,
                                  SourcesWith(&SourceTraits::whole_messages), source.format));
      return;
    }
    if (!problems_.errors().empty()) return;  // the schema or options may be incomplete
    auto decoder = value_format_decl_->create(spec_.schema, source.malformed, source.value_options);
    if (decoder) return;
    const ValueFormatProblem& problem = decoder.error();
    if (problem.option.empty()) {
      problems_.Error("source.valueFormat", source.value_format_mark, problem.message);
      return;
    }
    auto mark = source.value_option_marks.find(problem.option);
    problems_.Error(fmt::format("source.valueOptions.{}", problem.option),
                    mark != source.value_option_marks.end() ? mark->second : source.mark,
                    problem.message);
  }

  bool CheckFormat(const Scalar& format, ConnectorRole role, const ConnectorDecl** decl) {
    if (!options_.catalog) return true;
    *decl = FindConnector(*options_.catalog, format.value, role);
    if (*decl) return true;
    const char* role_name = role == ConnectorRole::kSource ? "source" : "sink";
    auto formats = config_detail::ConnectorFormats(*options_.catalog, role);
    std::string message = fmt::format("unknown {} format {} (known {} formats: {}){}", role_name,
                                      Show(format), role_name, Join(formats),
                                      format.secret ? "" : DidYouMean(format.value, formats));
    const ConnectorRole other =
        role == ConnectorRole::kSource ? ConnectorRole::kSink : ConnectorRole::kSource;
    if (FindConnector(*options_.catalog, format.value, other)) {
      message += fmt::format(" ('{}' is a {} format)", format.value,
                             role == ConnectorRole::kSource ? "sink" : "source");
    }
    problems_.Error(format.path, format.mark, std::move(message));
    return false;
  }

  void ParseMalformed(const MapReader& source, const std::string& path, SourceSpec& target,
                      bool main) {
    const MapReader::Entry* entry = source.Find("malformed");
    if (entry == nullptr) {
      if (main) policy_ok_ = true;
      return;
    }
    MapReader malformed(
        reader_, entry->value, path + ".malformed", entry->key_mark,
        std::vector<std::string_view>{"policy", "maxRecordBytes", "maxDepth", "maxArrayLength",
                                      "maxKeyBytes"},
        " with policy, maxRecordBytes, maxDepth, maxArrayLength and maxKeyBytes");
    if (!malformed.valid()) return;
    MalformedSpec& spec = target.malformed;
    bool policy_ok = false;
    if (auto policy = malformed.Choice("policy", Names(kPolicies))) {
      spec.policy = *Lookup(kPolicies, *policy);
      policy_ok = true;
    } else {
      policy_ok = !malformed.Has("policy");
    }
    if (main) {
      policy_ok_ = policy_ok;
      policy_mark_ = malformed.MarkOf("policy");
    } else if (policy_ok && spec.policy == MalformedPolicy::kDeadLetter) {
      input_dead_letter_marks_.emplace_back(path + ".malformed.policy", malformed.MarkOf("policy"));
    }
    if (auto bytes = malformed.Bytes("maxRecordBytes", 1)) {
      spec.max_record_bytes = *bytes;
    }
    if (auto depth = malformed.Int("maxDepth", 1, 100'000)) {
      spec.max_depth = static_cast<int>(*depth);
    }
    if (auto length = malformed.Int("maxArrayLength", 1, 1'000'000)) {
      spec.max_array_length = *length;
    }
    if (auto bytes = malformed.Bytes("maxKeyBytes", 1)) {
      spec.max_key_bytes = *bytes;
    }
  }

  // ---- labels and performance ---------------------------------------------------------------

  // `labels` (an input of ground truth with its own schema, joined to the predictions by a key)
  // and `performance` (what is judged of the joined predictions).
  void ParseLabels(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("labels");
    const MapReader::Entry* performance_entry = top.Find("performance");
    if (entry == nullptr) {
      if (performance_entry != nullptr) {
        problems_.Error("performance", performance_entry->key_mark,
                        "performance is judged from labels: add a labels section (an input of "
                        "ground truth joined to the predictions by a key)");
      }
      return;
    }
    MapReader labels(reader_, entry->value, "labels", entry->key_mark,
                     std::vector<std::string_view>{"source", "schema", "key", "predictionKey",
                                                   "label", "eventTime", "within"},
                     " with source, schema, key, predictionKey, label, eventTime and within");
    if (!labels.valid()) return;
    LabelsSpec& spec = spec_.labels;
    spec.enabled = true;
    spec.mark = entry->key_mark;
    if (const MapReader::Entry* source_entry = labels.Find("source")) {
      MapReader source(reader_, source_entry->value, "labels.source", source_entry->key_mark,
                       std::vector<std::string_view>{"format", "options", "malformed",
                                                     "valueFormat", "valueOptions"},
                       " with format, options, malformed, valueFormat and valueOptions");
      spec.source.mark = source_entry->key_mark;
      if (source.valid()) ParseSourceFields(source, "labels.source", spec.source, false);
    } else {
      labels.ReportMissing("source", " (e.g. source: {format: kafka, options: {...}})");
    }
    // The labels' own schema: top-level scalar fields.
    std::map<std::string, FieldType> types;
    if (const MapReader::Entry* schema_entry = labels.Find("schema")) {
      auto items = reader_.ReadList(schema_entry->value, "labels.schema",
                                    " of fields, e.g. - {name: request_id, type: string}");
      for (size_t i = 0; items && i < items->size(); ++i) {
        const std::string path = fmt::format("labels.schema[{}]", i);
        MapReader field(reader_, (*items)[i], path, {},
                        std::vector<std::string_view>{"name", "type", "nullable"},
                        " with name, type and nullable");
        if (!field.valid()) continue;
        auto name = field.String("name", true);
        auto type_text = field.String("type", true);
        auto nullable = field.Bool("nullable");
        if (!name || !type_text) continue;
        auto parsed = ParseTypeSpec(type_text->value);
        if (!parsed || parsed->is_struct || !(parsed->type == FieldType::kString ||
                                              parsed->type == FieldType::kDouble ||
                                              parsed->type == FieldType::kLong ||
                                              parsed->type == FieldType::kInt ||
                                              parsed->type == FieldType::kBoolean ||
                                              parsed->type == FieldType::kTimestamp)) {
          problems_.Error(type_text->path, type_text->mark,
                          fmt::format("a labels field is a timestamp, string, double, long, int "
                                      "or boolean, not {}",
                                      Show(*type_text)));
          continue;
        }
        if (!types.emplace(name->value, parsed->type).second) {
          problems_.Error(name->path, name->mark,
                          fmt::format("duplicate field {}", Show(*name)));
          continue;
        }
        spec.schema.fields.emplace_back(name->value, parsed->type, nullable.value_or(true));
      }
    } else {
      labels.ReportMissing("schema", " (e.g. - {name: request_id, type: string})");
    }
    auto column_of = [&](std::string_view key, bool required,
                         const std::vector<FieldType>& allowed,
                         const char* what) -> std::optional<std::string> {
      auto value = labels.String(key, required);
      if (!value) return std::nullopt;
      auto it = types.find(value->value);
      if (it == types.end()) {
        problems_.Error(value->path, value->mark,
                        fmt::format("{} {} is not a field of labels.schema", what, Show(*value)));
        return std::nullopt;
      }
      if (std::find(allowed.begin(), allowed.end(), it->second) == allowed.end()) {
        problems_.Error(value->path, value->mark,
                        fmt::format("{} {} is a {}", what, Show(*value),
                                    FieldTypeName(it->second)));
        return std::nullopt;
      }
      return value->value;
    };
    if (auto key = column_of("key", true, {FieldType::kString}, "the join key")) {
      spec.key = *key;
      spec.prediction_key = *key;
    }
    if (auto key = labels.String("predictionKey")) spec.prediction_key = key->value;
    if (!spec.prediction_key.empty()) {
      auto it = columns_.find(spec.prediction_key);
      if (it == columns_.end() || (it->second && *it->second != FieldType::kString)) {
        problems_.Error(labels.Has("predictionKey") ? "labels.predictionKey" : "labels.key",
                        labels.MarkOf(labels.Has("predictionKey") ? "predictionKey" : "key"),
                        fmt::format("the predictions' join key '{}' is not a string column of "
                                    "the schema",
                                    spec.prediction_key));
      }
    }
    if (auto label = column_of("label", true,
                               {FieldType::kDouble, FieldType::kLong, FieldType::kInt,
                                FieldType::kBoolean},
                               "the label column")) {
      spec.label = *label;
    }
    if (labels.Has("eventTime")) {
      if (auto time = column_of("eventTime", true, {FieldType::kTimestamp}, "eventTime")) {
        spec.event_time = *time;
      }
    } else {
      for (const Field& field : spec.schema.fields) {
        if (field.type == FieldType::kTimestamp) {
          spec.event_time = field.name;
          break;
        }
      }
      if (spec.event_time.empty() && !spec.schema.fields.empty()) {
        problems_.Error("labels.schema", labels.MarkOf("schema"),
                        "the labels need an event time: a timestamp field (or name one with "
                        "eventTime)");
      }
    }
    if (auto within = labels.DurationMs("within", 1)) spec.within_ms = *within;
    ParsePerformance(performance_entry);
  }

  void ParsePerformance(const MapReader::Entry* entry) {
    PerformanceSpec& spec = spec_.performance;
    if (entry != nullptr) {
      MapReader performance(reader_, entry->value, "performance", entry->key_mark,
                            std::vector<std::string_view>{"task", "prediction", "threshold",
                                                          "window", "minCoverage",
                                                          "baselineWindows", "minDrop", "warn",
                                                          "alert", "bins"},
                            " with task, prediction, threshold, window, minCoverage, "
                            "baselineWindows, minDrop, warn, alert and bins");
      if (!performance.valid()) return;
      if (auto task = performance.Choice("task", {"classification", "regression"})) {
        spec.task = *task == "regression" ? PerformanceTask::kRegression
                                          : PerformanceTask::kClassification;
      }
      if (auto column = performance.String("prediction")) {
        auto it = columns_.find(column->value);
        if (it == columns_.end()) {
          problems_.Error(column->path, column->mark,
                          fmt::format("prediction column {} is not a column of the schema",
                                      Show(*column)));
        } else if (it->second && *it->second != FieldType::kDouble &&
                   *it->second != FieldType::kLong && *it->second != FieldType::kInt) {
          problems_.Error(column->path, column->mark,
                          fmt::format("prediction column {} is a {}, not a number", Show(*column),
                                      FieldTypeName(*it->second)));
        }
        spec.prediction = column->value;
      }
      auto bounded = [&](std::string_view key, double low, double high) -> std::optional<double> {
        auto value = performance.Double(key);
        if (value && !(*value >= low && *value <= high)) {
          problems_.Error(performance.PathOf(key), performance.MarkOf(key),
                          fmt::format("{} must be in [{}, {}]", key, low, high));
          return std::nullopt;
        }
        return value;
      };
      if (auto threshold = bounded("threshold", 0, 1)) spec.threshold = *threshold;
      if (auto window = performance.DurationMs("window", 1)) spec.window_ms = *window;
      if (auto coverage = bounded("minCoverage", 0, 1)) spec.min_coverage = *coverage;
      if (auto windows = performance.Int("baselineWindows", 1, 1000)) {
        spec.baseline_windows = static_cast<int>(*windows);
      }
      if (auto drop = bounded("minDrop", 0, 1e9)) spec.min_drop = *drop;
      if (auto warn = bounded("warn", 0, 37)) spec.warn = *warn;
      if (auto alert = bounded("alert", 0, 37)) spec.alert = *alert;
      if (auto bins = performance.Int("bins", 2, 1000)) spec.bins = static_cast<int>(*bins);
      if (spec.alert < spec.warn) {
        problems_.Error("performance.alert", performance.MarkOf("alert"),
                        "the alert level must not be below the warn level");
      }
    }
    if (spec.prediction.empty()) {
      spec.prediction = !spec_.drift.prediction_column.empty() ? spec_.drift.prediction_column
                                                                : std::string("prediction");
      if (!columns_.count(spec.prediction)) {
        problems_.Error(entry ? "performance" : "labels",
                        entry ? entry->key_mark : spec_.labels.mark,
                        fmt::format("no prediction column: name it with performance.prediction "
                                    "(the schema has no '{}')",
                                    spec.prediction));
      }
    }
  }

  // What labels need of the rest of the pipeline.
  void CheckLabels() {
    if (!spec_.labels.enabled) return;
    if (!spec_.query.watermark) {
      problems_.Error("labels", spec_.labels.mark,
                      "labels need query.watermark: the event-time clock bounds how long a "
                      "prediction waits for its label (labels.within) and says when a window's "
                      "labels are in");
    }
    const bool has_model = spec_.drift.enabled ? !spec_.drift.model_column.empty() ||
                                                     !spec_.query.group_by.empty()
                                               : !spec_.query.group_by.empty();
    if (!has_model) {
      problems_.Error("labels", spec_.labels.mark,
                      "labels judge each model's performance: the query needs groupBy (the "
                      "model column first) or drift.modelColumn");
    }
    if (spec_.scale_out.enabled) {
      problems_.Error("labels", spec_.labels.mark,
                      "a query with labels runs in one process (scaleOut would need both "
                      "inputs routed by the join key)");
    }
  }

  // ---- query --------------------------------------------------------------------------------

  void ParseQuery(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("query");
    if (entry == nullptr) return;
    MapReader query(
        reader_, entry->value, "query", entry->key_mark,
        std::vector<std::string_view>{"where", "select", "groupBy", "aggregates", "window",
                                      "watermark", "maxModels", "modelOverflow"},
        " with where, select, groupBy, aggregates, window, watermark, maxModels or "
        "modelOverflow");
    if (!query.valid()) {
      query_ok_ = false;
      group_by_ok_ = false;
      return;
    }
    QuerySpec& spec = spec_.query;
    const size_t errors_before = problems_.error_count();

    // Derived columns first: groupBy, aggregates, drift and where may use them.
    std::vector<Scalar> plain_select;
    if (query.Has("select")) {
      auto items = query.StringList(
          "select", ", e.g. [model_id, prediction, abs(prediction - ground_truth) AS abs_error]");
      for (const Scalar& item : items.value_or(std::vector<Scalar>{})) {
        if (ParseSelectItem(item)) plain_select.push_back(item);
      }
    }
    if (auto where = query.String("where")) ParseWhere(*where);

    if (query.Has("groupBy")) {
      auto columns = query.StringList("groupBy", ", e.g. [model_id]");
      group_by_ok_ = columns.has_value();
      std::set<std::string> seen;
      for (const Scalar& column : columns.value_or(std::vector<Scalar>{})) {
        if (!seen.insert(column.value).second) {
          problems_.Error(column.path, column.mark,
                          fmt::format("column {} is listed twice in groupBy", Show(column)));
          group_by_ok_ = false;
          continue;
        }
        if (!CheckColumn(column, ColumnUse::kGroupKey, "groupBy column")) group_by_ok_ = false;
        spec.group_by.push_back(column.value);
      }
    }

    if (query.Has("aggregates")) {
      auto items =
          query.StringList("aggregates", ", e.g. [count, mean(prediction), stddev(prediction)]");
      if (items) {
        std::map<std::string, int> seen;
        for (const Scalar& item : *items) ParseAggregate(item, seen);
      }
    }

    if (const MapReader::Entry* window_entry = query.Find("window")) {
      MapReader window(reader_, window_entry->value, "query.window", window_entry->key_mark,
                       std::vector<std::string_view>{"column", "size", "slide"},
                       ", e.g. {column: event_time, size: 5 minutes, slide: 1 minute}");
      if (window.valid() && !window_entry->value.IsNull()) {
        WindowSpec w;
        w.mark = window_entry->key_mark;
        bool ok = true;
        if (auto column = window.String("column", true)) {
          ok = CheckColumn(*column, ColumnUse::kTimestamp, "window column") && ok;
          w.column = column->value;
        } else {
          ok = false;
        }
        auto size = window.DurationMs("size", 1, true);
        auto slide = window.DurationMs("slide", 1);
        ok = ok && size.has_value() && (slide.has_value() || !window.Has("slide"));
        if (size) {
          w.size_ms = *size;
          w.slide_ms = slide.value_or(*size);
          if (slide && *slide > *size) {
            problems_.Error(window.PathOf("slide"), window.MarkOf("slide"),
                            fmt::format("window slide ({} ms) must not exceed the window size "
                                        "({} ms): rows between windows would be skipped",
                                        *slide, *size));
            ok = false;
          }
        }
        if (ok || w.size_ms > 0) spec.window = w;
      } else if (window_entry->value.IsNull()) {
        problems_.Error("query.window", window_entry->key_mark,
                        "'window' has no value; expected e.g. {column: event_time, size: 5 "
                        "minutes}");
      }
    }

    if (const MapReader::Entry* wm_entry = query.Find("watermark")) {
      MapReader watermark(reader_, wm_entry->value, "query.watermark", wm_entry->key_mark,
                          std::vector<std::string_view>{"column", "delay", "idleTimeout"},
                          ", e.g. {column: event_time, delay: 10 minutes}");
      if (watermark.valid() && !wm_entry->value.IsNull()) {
        WatermarkSpec w;
        w.mark = wm_entry->key_mark;
        if (auto column = watermark.String("column", true)) {
          CheckColumn(*column, ColumnUse::kTimestamp, "watermark column");
          w.column = column->value;
        }
        if (auto delay = watermark.DurationMs("delay", 0, true)) w.delay_ms = *delay;
        if (watermark.Has("idleTimeout")) {
          if (auto idle = watermark.DurationMs("idleTimeout", 0, false)) w.idle_timeout_ms = *idle;
        }
        spec.watermark = w;
      } else if (wm_entry->value.IsNull()) {
        problems_.Error("query.watermark", wm_entry->key_mark,
                        "'watermark' has no value; expected e.g. {column: event_time, delay: 10 "
                        "minutes}");
      }
    }

    if (auto models = query.Int("maxModels", 1, 100'000'000)) {
      spec.max_models = *models;
      spec.max_models_mark = query.MarkOf("maxModels");
    }
    if (auto overflow = query.Choice("modelOverflow", {"drop", "other"})) {
      spec.model_overflow = *overflow == "other" ? ModelOverflow::kOther : ModelOverflow::kDrop;
    }

    if (spec.IsAggregation()) {
      for (const Scalar& column : plain_select) {
        problems_.Error(column.path, column.mark,
                        fmt::format("selecting column {} has no effect in a query with groupBy, "
                                    "aggregates or window (it outputs its keys and aggregates); "
                                    "select there only defines derived columns (expr AS name)",
                                    Show(column)));
      }
    }
    query_ok_ = problems_.error_count() == errors_before;
  }

  // ---- expressions --------------------------------------------------------------------------

  // The columns an expression may read: the schema's, then the derived ones so far.
  Schema ExpressionColumns() const { return QuerySchema(spec_); }

  // Where `offset` of a scalar's value is in the file. Exact for a plain or quoted scalar on
  // one line and for a block scalar (| or >); the scalar's start when the text was rewritten
  // (escapes, ${VAR}, folded lines) so that offsets no longer match.
  SourceMark MarkWithin(const Scalar& scalar, size_t offset) const {
    const SourceMark start = scalar.mark;
    if (start.line <= 0 || static_cast<size_t>(start.line) > lines_.size()) return start;
    const std::string_view line = lines_[static_cast<size_t>(start.line) - 1];
    const size_t column = static_cast<size_t>(start.column) - 1;
    if (column >= line.size()) return start;
    const std::string_view value = scalar.value;
    const std::string_view prefix = value.substr(0, std::min(offset, value.size()));
    const char first = line[column];
    if (first == '"' || first == '\'') {
      if (line.substr(column + 1, prefix.size()) == prefix) {
        return {start.line, start.column + 1 + static_cast<int>(offset)};
      }
      return start;
    }
    if (first == '|' || first == '>') {
      // The value's lines follow, indented as the first of them; they are joined by one
      // character.
      size_t at = 0;  // offset in the value of the current line's first character
      size_t indent = std::string_view::npos;
      for (size_t l = static_cast<size_t>(start.line); l < lines_.size(); ++l) {
        const std::string_view content = lines_[l];
        const size_t own = content.find_first_not_of(' ');
        if (own == std::string_view::npos) {
          at += 1;
          continue;
        }
        if (indent == std::string_view::npos) indent = own;
        if (own < indent) return start;  // past the block
        const std::string_view text = content.substr(indent);
        if (value.substr(at, text.size()) != text) return start;
        if (offset <= at + text.size()) {
          return {static_cast<int>(l) + 1, static_cast<int>(indent + offset - at) + 1};
        }
        at += text.size() + 1;
      }
      return start;
    }
    if (line.substr(column, prefix.size()) == prefix) {
      return {start.line, start.column + static_cast<int>(offset)};
    }
    return start;
  }

  void ExpressionError(const Scalar& scalar, const expr::ExprError& error,
                       std::string_view what) {
    // An unknown column that is a schema field with a bad type was reported already.
    if (!error.unknown_name.empty() && columns_.count(error.unknown_name) > 0) return;
    if (!error.unknown_name.empty() && error.message.rfind("unknown column", 0) == 0 &&
        NotAMetadataSource(error.unknown_name, scalar.path, MarkWithin(scalar, error.offset),
                           fmt::format("{} {}", what, Show(scalar)))) {
      return;
    }
    if ((!schema_names_complete_ || failed_derived_.count(error.unknown_name) > 0) &&
        error.message.rfind("unknown column", 0) == 0) {
      return;
    }
    std::string message = error.message;
    if (!error.unknown_name.empty()) {
      std::vector<std::string_view> candidates(error.candidates.begin(), error.candidates.end());
      const std::string suggestion = DidYouMean(error.unknown_name, candidates);
      message += suggestion.empty() ? fmt::format(" (expected one of {})", Join(candidates))
                                    : suggestion;
    }
    if (scalar.secret) message = "cannot use it (the text is secret and not shown)";
    problems_.Error(scalar.path, MarkWithin(scalar, error.offset),
                    fmt::format("{} {}: {}", what, Show(scalar), message));
  }

  // One select item; true when it is a plain column (checked, and added to select).
  bool ParseSelectItem(const Scalar& item) {
    QuerySpec& spec = spec_.query;
    auto taken = [&](const std::string& name) {
      return std::find(spec.select.begin(), spec.select.end(), name) != spec.select.end();
    };
    // A schema column as written (its name may hold '-' or '.', which read as operators).
    if (columns_.count(item.value) > 0) {
      if (!ReadsColumn(item.value, item.path, item.mark, "select column")) return false;
      if (taken(item.value)) {
        problems_.Error(item.path, item.mark,
                        fmt::format("column {} is selected twice", Show(item)));
        return false;
      }
      spec.select.push_back(item.value);
      return true;
    }
    auto compiled = expr::CompileSelectItem(item.value, ExpressionColumns());
    if (!compiled) {
      ExpressionError(item, compiled.error(), "select item");
      // Its name, if it has one, is not reported again as unknown where it is used.
      const std::string text = item.value;
      size_t as = std::string::npos;
      for (size_t i = 0; i + 4 <= text.size(); ++i) {
        if (std::isspace(static_cast<unsigned char>(text[i])) &&
            (text[i + 1] == 'A' || text[i + 1] == 'a') && (text[i + 2] == 'S' || text[i + 2] == 's') &&
            std::isspace(static_cast<unsigned char>(text[i + 3]))) {
          as = i + 4;
        }
      }
      if (as != std::string::npos) {
        std::string name = text.substr(as);
        name.erase(0, name.find_first_not_of(" \t"));
        name.erase(name.find_last_not_of(" \t") + 1);
        if (!name.empty()) failed_derived_.insert(name);
      }
      return false;
    }
    if (compiled->alias.empty()) {
      const int index = compiled->expression.column_index();
      if (index >= 0) {  // `quoted name`
        Scalar plain = item;
        plain.value = ExpressionColumns().fields[static_cast<size_t>(index)].name;
        return ParseSelectItem(plain);
      }
      problems_.Error(item.path, item.mark,
                      fmt::format("select item {} computes a value but names no column; write "
                                  "'{} AS name'",
                                  Show(item), item.secret ? "..." : item.value));
      return false;
    }
    if (!ReadsColumns(compiled->expression, item, "select item")) return false;
    const std::string& name = compiled->alias;
    const SourceMark alias_mark = MarkWithin(item, compiled->alias_offset);
    if (columns_.count(name) > 0) {
      const bool metadata = MessageSource() && ParseMetadataColumn(name) &&
                            schema_lines_.count(name) == 0 && !taken(name);
      problems_.Error(item.path, alias_mark,
                      fmt::format("derived column '{}' is already a column{}", name,
                                  taken(name)  ? " (selected twice)"
                                  : metadata ? " (a Kafka record's metadata column)"
                                             : " of the schema"));
      return false;
    }
    DerivedColumnSpec derived;
    derived.name = name;
    derived.text = item.value;
    derived.type = compiled->expression.type();
    derived.mark = item.mark;
    spec.derived.push_back(std::move(derived));
    spec.select.push_back(name);
    columns_.emplace(name, compiled->expression.type());
    column_names_.push_back(name);
    return false;
  }

  void ParseWhere(const Scalar& where) {
    auto compiled = expr::Expression::Compile(where.value, ExpressionColumns());
    if (!compiled) {
      ExpressionError(where, compiled.error(), "condition");
      return;
    }
    if (compiled->type() != FieldType::kBoolean) {
      problems_.Error(where.path, where.mark,
                      fmt::format("type mismatch: where needs a boolean condition, found {} "
                                  "(e.g. model_version != 'shadow')",
                                  FieldTypeName(compiled->type())));
      return;
    }
    if (!ReadsColumns(*compiled, where, "condition")) return;
    spec_.query.where = where.value;
    spec_.query.where_mark = where.mark;
  }

  // approx_percentile(col, p [, accuracy]) with p a fraction or array(p1, p2, ...), as Spark
  // writes it; `args` is what is between the parentheses, without white space.
  // A sketch aggregate (approx_percentile) with Spark's arguments.
  void ParsePercentile(const Scalar& item, const AggregateDecl& kind, const std::string& fn_name,
                       std::string_view args, std::map<std::string, int>& seen) {
    auto fail = [&](const std::string& why) {
      problems_.Error(item.path, item.mark,
                      fmt::format("cannot read aggregate {}: {}; expected {}(column, percentage "
                                  "[, accuracy]) with percentage a number in [0, 1] or "
                                  "array(p1, p2, ...) and accuracy an integer in [1, {}]",
                                  Show(item), why, fn_name, QuantileSketch::kMaxAccuracy));
    };
    // Split at the commas outside array(...).
    std::vector<std::string_view> parts;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i <= args.size(); ++i) {
      if (i == args.size() || (args[i] == ',' && depth == 0)) {
        parts.push_back(args.substr(start, i - start));
        start = i + 1;
      } else if (args[i] == '(') {
        ++depth;
      } else if (args[i] == ')') {
        if (--depth < 0) return fail("unbalanced parentheses");
      }
    }
    if (depth != 0) return fail("unbalanced parentheses");
    if (parts.size() < 2 || parts.size() > 3) {
      return fail(fmt::format("it takes 2 or 3 arguments, not {}", parts.size()));
    }
    AggregateSpec aggregate;
    aggregate.fn = kind.fn;
    aggregate.mark = item.mark;
    aggregate.column = std::string(parts[0]);
    if (aggregate.column.empty() || aggregate.column == "*") {
      return fail("the first argument must be a numeric column");
    }
    auto number = [](std::string_view text, double& value) {
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      return error == std::errc() && end == text.data() + text.size() && !text.empty();
    };
    std::string_view percentage = parts[1];
    std::vector<std::string_view> fractions;
    std::string lower_percentage(percentage);
    for (char& c : lower_percentage) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (lower_percentage.rfind("array(", 0) == 0 && lower_percentage.back() == ')') {
      aggregate.percentage_array = true;
      std::string_view list = percentage.substr(6, percentage.size() - 7);
      size_t from = 0;
      for (size_t i = 0; i <= list.size(); ++i) {
        if (i == list.size() || list[i] == ',') {
          fractions.push_back(list.substr(from, i - from));
          from = i + 1;
        }
      }
    } else {
      fractions.push_back(percentage);
    }
    for (std::string_view fraction : fractions) {
      double value = 0;
      if (!number(fraction, value) || !(value >= 0 && value <= 1)) {
        return fail(fmt::format("percentage '{}' is not a number in [0, 1]", fraction));
      }
      aggregate.percentages.push_back(value);
    }
    if (parts.size() == 3) {
      int64_t accuracy = 0;
      auto [end, error] =
          std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), accuracy);
      if (error != std::errc() || end != parts[2].data() + parts[2].size() || accuracy < 1 ||
          accuracy > QuantileSketch::kMaxAccuracy) {
        return fail(fmt::format("accuracy '{}' is not an integer in [1, {}]", parts[2],
                                QuantileSketch::kMaxAccuracy));
      }
      aggregate.accuracy = accuracy;
    }
    Scalar column_ref{aggregate.column, item.secret, item.path, item.mark};
    if (!CheckColumn(column_ref, ColumnUse::kNumericLike, fmt::format("{} column", fn_name))) {
      return;
    }
    // Spark's column name: approx_percentile(x, 0.5, 10000), approx_percentile(x, array(0.25,
    // 0.75), 100).
    std::vector<std::string> shown;
    for (double p : aggregate.percentages) shown.push_back(fmt::format("{}", p));
    std::string p_text = aggregate.percentage_array
                             ? fmt::format("array({})", fmt::join(shown, ", "))
                             : shown.front();
    aggregate.output_name =
        fmt::format("{}({}, {}, {})", fn_name, aggregate.column, p_text, aggregate.accuracy);
    if (auto it = seen.find(aggregate.output_name); it != seen.end()) {
      problems_.Error(
          item.path, item.mark,
          fmt::format("aggregate {} is listed twice (first at line {})", Show(item), it->second));
      return;
    }
    seen.emplace(aggregate.output_name, item.mark.line);
    spec_.query.aggregates.push_back(std::move(aggregate));
  }

  void ParseAggregate(const Scalar& item, std::map<std::string, int>& seen) {
    std::string text = item.value;
    text.erase(std::remove_if(text.begin(), text.end(),
                              [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
               text.end());
    std::string fn_name = text;
    std::string column;
    bool has_parens = false;
    if (size_t open = text.find('('); open != std::string::npos && text.back() == ')') {
      std::string lower = text.substr(0, open);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (const AggregateDecl* kind = FindAggregate(lower);
          kind != nullptr && kind->state == AggregateState::kSketch) {
        ParsePercentile(item, *kind, lower,
                        std::string_view(text).substr(open + 1, text.size() - open - 2), seen);
        return;
      }
    }
    if (size_t open = text.find('('); open != std::string::npos) {
      has_parens = true;
      std::string name = text.substr(0, open);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (const AggregateDecl* kind = FindAggregate(name);
          kind != nullptr && kind->state == AggregateState::kSketch) {
        problems_.Error(item.path, item.mark,
                        fmt::format("cannot read aggregate {}: its parentheses do not close; in "
                                    "a flow list [...] quote it, or its commas split it",
                                    Show(item)));
        return;
      }
      if (text.back() != ')' || text.find('(', open + 1) != std::string::npos) {
        problems_.Error(item.path, item.mark,
                        fmt::format("cannot read aggregate {}; expected \"count\", \"count(*)\" "
                                    "or \"fn(column)\" with fn one of {}",
                                    Show(item), Join(Names(kAggregates))));
        return;
      }
      fn_name = text.substr(0, open);
      column = text.substr(open + 1, text.size() - open - 2);
    }
    std::string lower = fn_name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto fn = Lookup(kAggregates, lower);
    if (!fn) {
      problems_.Error(
          item.path, item.mark,
          fmt::format("unknown aggregate function {}; expected one of {}{}",
                      item.secret ? std::string("<redacted>") : fmt::format("'{}'", fn_name),
                      Join(Names(kAggregates)),
                      item.secret ? "" : DidYouMean(lower, Names(kAggregates))));
      return;
    }
    AggregateSpec aggregate;
    aggregate.fn = *fn;
    aggregate.mark = item.mark;
    const bool counts_rows = KindOf(*fn).counts_rows;
    if (column == "*" || (!has_parens && counts_rows)) {
      if (!counts_rows) {
        problems_.Error(item.path, item.mark,
                        fmt::format("{}(*) is not defined; only count takes *",
                                    item.secret ? "<redacted>" : lower));
        return;
      }
      aggregate.output_name = "count";
    } else if (column.empty()) {
      problems_.Error(item.path, item.mark,
                      fmt::format("aggregate {} names no column; write {}(column)", Show(item),
                                  item.secret ? "fn" : lower));
      return;
    } else {
      Scalar column_ref{column, item.secret, item.path, item.mark};
      if (!CheckColumn(column_ref,
                       counts_rows ? ColumnUse::kAny : ColumnUse::kNumericLike,
                       fmt::format("{} column", lower))) {
        return;
      }
      aggregate.column = column;
      aggregate.output_name = fmt::format("{}({})", lower, column);
    }
    if (auto it = seen.find(aggregate.output_name); it != seen.end()) {
      problems_.Error(
          item.path, item.mark,
          fmt::format("aggregate {} is listed twice (first at line {})", Show(item), it->second));
      return;
    }
    seen.emplace(aggregate.output_name, item.mark.line);
    spec_.query.aggregates.push_back(std::move(aggregate));
  }

  // ---- drift --------------------------------------------------------------------------------

  void ParseDrift(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("drift");
    if (entry == nullptr || entry->value.IsNull()) return;
    MapReader drift(reader_, entry->value, "drift", entry->key_mark,
                    std::vector<std::string_view>{"series", "baseline", "detectors", "minSamples",
                                                  "windowRecords", "window", "hysteresis",
                                                  "cooldown",
                                                  "modelAlertSeries", "modelColumn",
                                                  "predictionColumn", "labelColumn", "overrides",
                                                  "resolveEvidence", "segmentBy",
                                                  "maxSegmentsPerModel", "maxKeysPerModel",
                                                  "maxKeys", "multivariate"},
                    " with series, baseline, detectors, ...");
    if (!drift.valid()) return;
    DriftSpec& spec = spec_.drift;
    spec.enabled = true;
    spec.mark = entry->key_mark;

    // The model column: given, or the first groupBy column.
    if (auto model = drift.String("modelColumn")) {
      spec.model_column = model->value;
      if (CheckColumn(*model, ColumnUse::kGroupKey, "modelColumn") && group_by_ok_ &&
          std::find(spec_.query.group_by.begin(), spec_.query.group_by.end(), model->value) ==
              spec_.query.group_by.end()) {
        problems_.Error(
            model->path, model->mark,
            fmt::format("modelColumn {} must be one of the query's groupBy columns "
                        "({}): drift is tracked per group",
                        Show(*model),
                        spec_.query.group_by.empty()
                            ? std::string("none given")
                            : fmt::format("{}", fmt::join(spec_.query.group_by, ", "))));
      }
    } else if (!drift.Has("modelColumn")) {
      if (!spec_.query.group_by.empty()) {
        spec.model_column = spec_.query.group_by.front();
      } else if (group_by_ok_) {
        problems_.Error("drift", entry->key_mark,
                        "drift is tracked per model, but the query has no groupBy: add "
                        "query.groupBy (e.g. [model_id]); drift.modelColumn defaults to its "
                        "first column");
      }
    }

    const MapReader::Entry* series_entry = drift.Find("series");
    if (series_entry == nullptr || series_entry->value.IsNull()) {
      drift.ReportMissing("series",
                          " (the columns to watch, e.g. [feature_vector, prediction])");
    } else if (auto series = drift.StringList("series", ", e.g. [feature_vector, prediction]")) {
      if (series->empty()) {
        problems_.Error("drift.series", series_entry->key_mark,
                        "drift.series needs at least one column");
      }
      std::set<std::string> seen;
      for (const Scalar& column : *series) {
        if (!seen.insert(column.value).second) {
          problems_.Error(column.path, column.mark,
                          fmt::format("series {} is listed twice", Show(column)));
          continue;
        }
        // A struct watches each of its leaves: series: [features] for
        // features: struct<amount:double, device:string, ...>.
        if (const std::vector<std::string> leaves = StructLeaves(column.value); !leaves.empty()) {
          for (const std::string& leaf : leaves) {
            Scalar leaf_column = column;
            leaf_column.value = leaf;
            if (CheckColumn(leaf_column, ColumnUse::kSeries, "drift series")) {
              spec.series.push_back(leaf);
              drift_series_.push_back(leaf_column);
            }
          }
          continue;
        }
        if (!spec.model_column.empty() && column.value == spec.model_column) {
          problems_.Error(column.path, column.mark,
                          fmt::format("drift series {} is the model column: drift is watched "
                                      "per model, in which it never changes",
                                      Show(column)));
          continue;
        }
        if (CheckColumn(column, ColumnUse::kSeries, "drift series")) {
          drift_series_.push_back(column);
        }
        spec.series.push_back(column.value);
      }
    }
    ParseSegments(drift);

    if (auto column = drift.String("predictionColumn")) {
      CheckColumn(*column, ColumnUse::kLabel, "predictionColumn");
      spec.prediction_column = column->value;
    }
    if (auto column = drift.String("labelColumn")) {
      CheckColumn(*column, ColumnUse::kLabel, "labelColumn");
      spec.label_column = column->value;
    }
    DefaultLabelColumns(drift, entry->key_mark);
    if (auto value = drift.Double("resolveEvidence")) {
      if (*value < 1) {
        problems_.Error(drift.PathOf("resolveEvidence"), drift.MarkOf("resolveEvidence"),
                        fmt::format("resolveEvidence is a likelihood ratio, at least 1, found {}",
                                    *value));
      } else {
        spec.resolve_evidence = *value;
      }
    }
    if (auto value = drift.Int("minSamples", 1, kMaxInt)) spec.min_samples = *value;
    if (auto value = drift.Int("hysteresis", 1, 1'000'000)) {
      spec.hysteresis = static_cast<int>(*value);
    }
    if (auto value = drift.DurationMs("cooldown", 0)) spec.cooldown_ms = *value;
    if (auto value = drift.Int("windowRecords", 1, kMaxInt)) spec.window_records = *value;
    if (drift.Has("window")) {
      if (auto value = drift.DurationMs("window", 1)) spec.window_ms = *value;
      if (!spec_.query.watermark && !spec_.query.window) {
        problems_.Error(drift.PathOf("window"), drift.MarkOf("window"),
                        "drift.window evaluates event-time windows, which close by the query's "
                        "watermark: add query.watermark (the event-time column and its delay)");
      }
    }
    if (auto value = drift.Int("modelAlertSeries", 0, 1'000'000)) {
      spec.model_alert_series = static_cast<int>(*value);
    }
    // A window or baseline smaller than minSamples could never be evaluated: no alert, ever.
    if ((drift.Has("windowRecords") || drift.Has("minSamples")) &&
        spec.window_records < spec.min_samples) {
      const char* key = drift.Has("windowRecords") ? "windowRecords" : "minSamples";
      problems_.Error(drift.PathOf(key), drift.MarkOf(key),
                      fmt::format("windowRecords ({}) is below minSamples ({}): no window could "
                                  "ever be evaluated",
                                  spec.window_records, spec.min_samples));
    }

    // With an event-time window, drift compares each closed window; windows overlap when they
    // slide, so a value would count in several of them.
    if (const auto& window = spec_.query.window;
        window && window->slide_ms != 0 && window->slide_ms != window->size_ms) {
      problems_.Error("drift", entry->key_mark,
                      fmt::format("drift evaluates tumbling event-time windows, but query.window "
                                  "(line {}) slides ({} ms every {} ms): make slide equal to "
                                  "size, or drop the window to evaluate windows of "
                                  "drift.windowRecords values",
                                  window->mark.line, window->size_ms, window->slide_ms));
    }
    if ((spec_.query.window || spec.window_ms > 0) && drift.Has("windowRecords")) {
      problems_.Warn(drift.PathOf("windowRecords"), drift.MarkOf("windowRecords"),
                     fmt::format("windowRecords is ignored: with {} drift evaluates each "
                                 "event-time window",
                                 spec.window_ms > 0
                                     ? std::string("drift.window")
                                     : fmt::format("query.window (line {})",
                                                   spec_.query.window->mark.line)));
    }

    ParseBaseline(drift);
    ParseDetectors(drift);
    ParseOverrides(drift);
    ParseMultivariate(drift);
  }

  // drift.multivariate: a PCA's reconstruction error over each model's numeric features.
  void ParseMultivariate(const MapReader& drift) {
    const MapReader::Entry* entry = drift.Find("multivariate");
    if (entry == nullptr) return;
    MultivariateSpec& spec = spec_.drift.multivariate;
    spec.mark = entry->key_mark;
    // `multivariate: true` (every default) or `false` (off), as well as a map.
    if (entry->value.IsScalar() && (entry->value.Scalar() == "false" ||
                                    entry->value.Scalar() == "true")) {
      spec.enabled = entry->value.Scalar() == "true";
    } else {
      MapReader map(reader_, entry->value, "drift.multivariate", entry->key_mark,
                    std::vector<std::string_view>{"features", "records", "explainedVariance"},
                    ", e.g. {features: [amount, age_days], explainedVariance: 0.65}");
      if (!map.valid()) return;
      spec.enabled = true;
      if (auto features = map.StringList("features", ", e.g. [amount, age_days]")) {
        for (const Scalar& column : *features) {
          if (!CheckColumn(column, ColumnUse::kNumericLike, "multivariate feature")) continue;
          if (std::find(spec.features.begin(), spec.features.end(), column.value) !=
              spec.features.end()) {
            problems_.Error(column.path, column.mark,
                            fmt::format("feature {} is listed twice", Show(column)));
            continue;
          }
          spec.features.push_back(column.value);
        }
      }
      if (auto records = map.Int("records", 2, kMaxInt)) spec.records = *records;
      if (auto share = map.Double("explainedVariance")) {
        if (*share > 0 && *share <= 1) {
          spec.explained_variance = *share;
        } else {
          problems_.Error(map.PathOf("explainedVariance"), map.MarkOf("explainedVariance"),
                          fmt::format("explainedVariance is a share of the variance in (0, 1], "
                                      "found {}",
                                      *share));
        }
      }
    }
    if (!spec.enabled) return;
    if (spec.records == 0) spec.records = std::max<int64_t>(2, spec_.drift.baseline.records);
    // The PCA is fitted on a model's first vectors in the drift stage's record order, which
    // is fixed for record-count windows; event-time windows take a window's values in any
    // order, and the baseline is not a file's statistics.
    if (spec_.query.window || spec_.drift.window_ms > 0) {
      problems_.Error("drift.multivariate", entry->key_mark,
                      "multivariate drift fits its PCA on each model's first records in record "
                      "order, which event-time windows (query.window, drift.window) do not fix: "
                      "use record-count windows (drift.windowRecords)");
    }
    if (spec_.drift.baseline.kind == BaselineKind::kFile) {
      problems_.Error("drift.multivariate", entry->key_mark,
                      "multivariate drift fits its PCA on each model's first records: it needs "
                      "a warmup baseline, not a file");
    }
  }

  // The leaves under a struct named `name` (a dotted path), in schema order; none when `name`
  // is not a struct.
  std::vector<std::string> StructLeaves(const std::string& name) const {
    std::vector<std::string> leaves;
    if (columns_.count(name) > 0) return leaves;
    for (const Field& field : spec_.schema.fields) {
      if (field.path.empty() || field.name.size() <= name.size() ||
          !field.name.starts_with(name) || field.name[name.size()] != '.') {
        continue;
      }
      leaves.push_back(field.name);
    }
    return leaves;
  }

  // Segments: drift.segmentBy, or the groupBy columns after the model column; and the caps.
  void ParseSegments(const MapReader& drift) {
    DriftSpec& spec = spec_.drift;
    if (drift.Has("segmentBy")) {
      spec.segment_by_given = true;
      if (auto columns = drift.StringList("segmentBy", ", e.g. [segment.country, channel]")) {
        std::set<std::string> seen;
        for (const Scalar& column : *columns) {
          if (!seen.insert(column.value).second) {
            problems_.Error(column.path, column.mark,
                            fmt::format("segment column {} is listed twice", Show(column)));
            continue;
          }
          if (column.value == spec.model_column) {
            problems_.Error(column.path, column.mark,
                            fmt::format("segment column {} is the model column: segments split "
                                        "a model",
                                        Show(column)));
            continue;
          }
          if (CheckColumn(column, ColumnUse::kGroupKey, "segment column")) {
            spec.segment_by.push_back(column.value);
          }
        }
      }
    } else {
      for (const std::string& column : spec_.query.group_by) {
        if (column != spec.model_column) spec.segment_by.push_back(column);
      }
    }
    if (auto value = drift.Int("maxSegmentsPerModel", 1, 1'000'000)) {
      spec.max_segments_per_model = *value;
    }
    if (auto value = drift.Int("maxKeysPerModel", 1, 1'000'000)) spec.max_keys_per_model = *value;
    if (auto value = drift.Int("maxKeys", 1, 1'000'000)) spec.max_keys = *value;
  }

  // The error rate is watched whenever prediction and label columns can be known: given, or one
  // of each of the usual names in the schema. Otherwise validate says how to turn it on.
  void DefaultLabelColumns(const MapReader& drift, const SourceMark& mark) {
    DriftSpec& spec = spec_.drift;
    auto candidates = [&](const std::vector<std::string_view>& names) {
      std::vector<std::string> found;
      for (const Field& field : spec_.schema.fields) {
        const bool usable = field.type == FieldType::kDouble || field.type == FieldType::kLong ||
                            field.type == FieldType::kInt || field.type == FieldType::kBoolean;
        if (usable && std::find(names.begin(), names.end(), field.name) != names.end()) {
          found.push_back(field.name);
        }
      }
      return found;
    };
    const bool has_prediction = !spec.prediction_column.empty();
    const bool has_label = !spec.label_column.empty();
    if (has_prediction && has_label) return;
    const std::vector<std::string> predictions = candidates(kPredictionNames);
    const std::vector<std::string> labels = candidates(kLabelNames);
    if (!drift.Has("predictionColumn") && !drift.Has("labelColumn") && predictions.size() == 1 &&
        labels.size() == 1) {
      spec.prediction_column = predictions[0];
      spec.label_column = labels[0];
      return;
    }
    // One of the two given: the other is its default, the one column of the usual names (not
    // the given one), as for each key alone.
    auto other = [](const std::vector<std::string>& found, const std::string& given) {
      std::vector<std::string> rest;
      for (const std::string& name : found) {
        if (name != given) rest.push_back(name);
      }
      return rest;
    };
    if (has_label && !has_prediction && !drift.Has("predictionColumn")) {
      const std::vector<std::string> rest = other(predictions, spec.label_column);
      if (rest.size() == 1) {
        spec.prediction_column = rest[0];
        return;
      }
    }
    if (has_prediction && !has_label && !drift.Has("labelColumn")) {
      const std::vector<std::string> rest = other(labels, spec.prediction_column);
      if (rest.size() == 1) {
        spec.label_column = rest[0];
        return;
      }
    }
    if (has_prediction != has_label) {
      problems_.Warn(
          has_prediction ? "drift.predictionColumn" : "drift.labelColumn",
          drift.MarkOf(has_prediction ? "predictionColumn" : "labelColumn"),
          fmt::format("the error rate is not watched: set drift.{} too (the {} column)",
                      has_prediction ? "labelColumn" : "predictionColumn",
                      has_prediction ? "ground truth" : "model's prediction"));
      return;
    }
    // Ground truth by a usual name, but no single pair: say how to watch it. (A prediction
    // column alone says nothing about labels.)
    if (!labels.empty()) {
      std::vector<std::string> named = labels;
      named.insert(named.end(), predictions.begin(), predictions.end());
      problems_.Warn("drift", mark,
                     fmt::format("the error rate is not watched: the schema has {} but not one "
                                 "prediction and one label column by the usual names; set "
                                 "drift.predictionColumn and drift.labelColumn",
                                 Join(std::vector<std::string_view>(named.begin(), named.end()))));
    }
  }

  void ParseBaseline(const MapReader& drift) {
    BaselineSpec& baseline = spec_.drift.baseline;
    const MapReader::Entry* entry = drift.Find("baseline");
    if (entry == nullptr) {
      baseline.mark = drift.anchor();
      CheckWarmupSize(drift, nullptr);
      return;
    }
    baseline.mark = entry->key_mark;
    MapReader map(reader_, entry->value, "drift.baseline", entry->key_mark,
                  std::vector<std::string_view>{"type", "records", "duration", "path", "windows",
                                                "period", "cycles"},
                  ", e.g. {type: warmup, records: 1000}");
    if (!map.valid()) return;
    auto type = map.Choice("type", Names(kBaselines));
    if (!type) {
      if (map.Has("type")) return;
      type = "warmup";
    }
    baseline.kind = *Lookup(kBaselines, *type);
    // Each key belongs to some baseline types; another type's key would silently do nothing.
    const std::vector<std::pair<std::string_view, std::vector<BaselineKind>>> owners = {
        {"records", {BaselineKind::kWarmup, BaselineKind::kSeasonal}},
        {"duration", {BaselineKind::kWarmup}},
        {"path", {BaselineKind::kFile}},
        {"windows", {BaselineKind::kTrailing}},
        {"period", {BaselineKind::kSeasonal}},
        {"cycles", {BaselineKind::kSeasonal}},
    };
    for (const auto& [key, kinds] : owners) {
      if (map.Has(key) && std::find(kinds.begin(), kinds.end(), baseline.kind) == kinds.end()) {
        std::vector<std::string_view> names;
        for (BaselineKind kind : kinds) names.push_back(ToString(kind));
        problems_.Error(map.PathOf(key), map.MarkOf(key),
                        fmt::format("'{}' applies to baseline type {}, not {}", key,
                                    fmt::join(names, " or "), *type));
      }
    }
    switch (baseline.kind) {
      case BaselineKind::kWarmup:
        if (map.Has("records") && map.Has("duration")) {
          problems_.Error(map.PathOf("duration"), map.MarkOf("duration"),
                          "give either records or duration for a warmup baseline, not both");
        }
        if (auto records = map.Int("records", 1, kMaxInt)) baseline.records = *records;
        if (auto duration = map.DurationMs("duration", 1)) baseline.duration_ms = *duration;
        CheckWarmupSize(drift, &map);
        break;
      case BaselineKind::kFile:
        // Reference statistics are per model: they cannot serve drift per (model, segment).
        if (!spec_.drift.segment_by.empty()) {
          problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                          fmt::format("a file baseline holds statistics per model, but drift is "
                                      "per (model, segment) ({}): use a warmup baseline, or set "
                                      "drift.segmentBy: []",
                                      fmt::join(spec_.drift.segment_by, ", ")));
        }
        if (auto path = map.String("path", true)) {
          if (path->value.empty()) {
            problems_.Error(path->path, path->mark, "the baseline path is empty");
          }
          baseline.path = path->value;
          // Read now, so that `validate` reads it as `run` does and the drift stage does no
          // file I/O (it parses what was read: engine/executor/drift_stage.cc).
          if (!path->value.empty() && options_.read_references) {
            std::filesystem::path file = path->value;
            if (file.is_relative() && !spec_.file.empty()) {
              file = std::filesystem::path(spec_.file).parent_path() / file;
            }
            auto text = ReadReferenceFile(file.string());
            if (text) {
              baseline.reference = std::make_shared<const std::string>(std::move(*text));
            } else {
              problems_.Error(path->path, path->mark,
                              fmt::format("'{}': {}", file.string(), text.error().message()));
            }
          }
        }
        break;
      case BaselineKind::kTrailing:
        if (auto windows = map.Int("windows", 1, 10'000)) {
          baseline.windows = static_cast<int>(*windows);
        }
        if (query_ok_ && !spec_.query.window) {
          problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                          "a trailing baseline compares with previous windows, but the query "
                          "has no window (add query.window)");
        }
        break;
      case BaselineKind::kSeasonal:
        if (auto records = map.Int("records", 1, kMaxInt)) baseline.records = *records;
        if (auto period = map.DurationMs("period", 1, true)) baseline.period_ms = *period;
        if (auto cycles = map.Int("cycles", 1, 1000)) baseline.cycles = static_cast<int>(*cycles);
        if (query_ok_ && !spec_.query.window) {
          problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                          "a seasonal baseline compares each event-time window with the same "
                          "phase of earlier cycles, but the query has no window (add "
                          "query.window)");
        } else if (spec_.query.window && baseline.period_ms > 0 &&
                   (baseline.period_ms < spec_.query.window->size_ms ||
                    baseline.period_ms % spec_.query.window->size_ms != 0)) {
          problems_.Error(map.PathOf("period"), map.MarkOf("period"),
                          fmt::format("the period ({} ms) must be a whole number of query "
                                      "windows ({} ms), so each window has one phase",
                                      baseline.period_ms, spec_.query.window->size_ms));
        }
        break;
    }
  }

  // A warmup of fewer records than minSamples would never be complete enough to compare with.
  void CheckWarmupSize(const MapReader& drift, const MapReader* baseline_map) {
    const DriftSpec& spec = spec_.drift;
    if (spec.baseline.duration_ms > 0 || spec.baseline.records >= spec.min_samples) return;
    const bool records_given = baseline_map && baseline_map->Has("records");
    problems_.Error(
        records_given ? baseline_map->PathOf("records") : drift.PathOf("minSamples"),
        records_given ? baseline_map->MarkOf("records") : drift.MarkOf("minSamples"),
        fmt::format("a warmup baseline of {} records is below minSamples ({}): it would never "
                    "hold enough records to compare with",
                    spec.baseline.records, spec.min_samples));
  }

  void ParseDetectors(const MapReader& drift) {
    const MapReader::Entry* entry = drift.Find("detectors");
    if (entry == nullptr) {
      // Documented default: every detector registered as a default, with its default
      // parameters; those of the error series only when there are prediction and label columns
      // to compare.
      const bool labelled =
          !spec_.drift.prediction_column.empty() && !spec_.drift.label_column.empty();
      for (const config_detail::DetectorInfo& info : config_detail::Detectors()) {
        if (!info.by_default || (info.error_series && !labelled)) continue;
        DetectorSpec detector = config_detail::DefaultDetector(info.kind);
        detector.mark = drift.anchor();
        spec_.drift.detectors.push_back(std::move(detector));
      }
      return;
    }
    auto items = reader_.ReadList(entry->value, "drift.detectors",
                                  ", e.g. - {type: psi, warn: 0.1, alert: 0.25}");
    if (!items) return;
    if (items->empty()) {
      problems_.Error("drift.detectors", entry->key_mark,
                      "drift.detectors is empty; list at least one detector (or remove the key "
                      "for the defaults: every detector)");
      return;
    }
    std::map<std::string, int> seen;
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string path = fmt::format("drift.detectors[{}]", i);
      const YAML::Node& node = (*items)[i];
      // A detector is a map with `type`; its other valid keys depend on the type.
      if (!node.IsMap()) {
        problems_.Error(path, config_detail::MarkOf(node),
                        fmt::format("expected a map such as {{type: psi, warn: 0.1, alert: "
                                    "0.25}}, found {}",
                                    Describe(node, false)));
        continue;
      }
      // The type decides which other keys are valid, so it is read first.
      YAML::Node type_node;
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == "type") type_node = it->second;
      }
      if (!type_node.IsDefined()) {
        problems_.Error(
            path + ".type", config_detail::MarkOf(node),
            fmt::format("'type' is required (one of {})", Join(config_detail::DetectorNames())));
        continue;
      }
      auto type_scalar = reader_.ReadScalar(type_node, path + ".type", false);
      if (!type_scalar) continue;
      if (type_scalar->value == "page_hinkley") {
        problems_.Error(type_scalar->path, type_scalar->mark,
                        "page_hinkley was replaced by cusum, a CUSUM per value whose levels are "
                        "calibrated false-alarm rates (baseline error included) and which stays "
                        "in alarm while a shift lasts: write {type: cusum}");
        continue;
      }
      auto type = reader_.ToChoice(*type_scalar, config_detail::DetectorNames());
      if (!type) continue;
      const config_detail::DetectorInfo& info = *config_detail::FindDetector(*type);
      std::vector<std::string_view> keys = {"type", "warn", "alert"};
      for (const auto& param : info.params) keys.push_back(param.name);
      // Unknown parameters of this detector type are reported with did-you-mean.
      MapReader map(reader_, node, path, {}, keys);
      DetectorSpec detector = config_detail::DefaultDetector(info.kind);
      detector.mark = config_detail::MarkOf(node);
      bool ok = true;
      for (std::string_view threshold : {"warn", "alert"}) {
        auto value = map.Double(threshold);
        if (!value) {
          ok = ok && !map.Has(threshold);
          continue;
        }
        if (std::string error = LevelError(*value, info); !error.empty()) {
          problems_.Error(map.PathOf(threshold), map.MarkOf(threshold), error);
          ok = false;
          continue;
        }
        (threshold == "warn" ? detector.warn : detector.alert) = *value;
      }
      if (ok && detector.warn > detector.alert) {
        problems_.Error(map.PathOf(map.Has("warn") ? "warn" : "alert"),
                        map.MarkOf(map.Has("warn") ? "warn" : "alert"),
                        fmt::format("the warn level ({}) must not exceed the alert level ({})",
                                    detector.warn, detector.alert));
      }
      for (const auto& param : info.params) {
        if (!map.Has(param.name)) continue;
        auto scalar = map.String(param.name);
        if (!scalar) continue;
        std::optional<double> value;
        if (param.integer) {
          auto as_int = reader_.ToInt(*scalar, static_cast<int64_t>(param.min),
                                      static_cast<int64_t>(param.max));
          if (as_int) value = static_cast<double>(*as_int);
        } else {
          value = reader_.ToDouble(*scalar);
          if (value && (*value < param.min || *value > param.max)) {
            problems_.Error(scalar->path, scalar->mark,
                            fmt::format("{} must be between {} and {}, found {}", param.name,
                                        param.min, param.max, *value));
            value.reset();
          }
        }
        if (value) detector.params[std::string(param.name)] = *value;
      }
      if (auto it = seen.find(detector.name); it != seen.end()) {
        problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                        fmt::format("detector {} is listed twice (first at line {}); use "
                                    "overrides for per-model thresholds",
                                    detector.name, it->second));
        continue;
      }
      seen.emplace(detector.name, detector.mark.line);
      if (info.error_series) {
        if (spec_.drift.prediction_column.empty() || spec_.drift.label_column.empty()) {
          problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                          fmt::format("the {} detector needs drift.predictionColumn and "
                                      "drift.labelColumn",
                                      info.name));
        }
      }
      spec_.drift.detectors.push_back(std::move(detector));
    }
    const bool labelled =
        !spec_.drift.prediction_column.empty() && !spec_.drift.label_column.empty();
    if (labelled && seen.find("error_rate") == seen.end()) {
      problems_.Warn("drift.detectors", entry->key_mark,
                     fmt::format("the error rate is not watched although labels are known "
                                 "({} against {}): add {{type: error_rate}} to drift.detectors",
                                 spec_.drift.prediction_column, spec_.drift.label_column));
    }
    // A string series (string, array<string>, map<string,string>) or a boolean one is watched
    // by its categories: some detector must read them.
    bool categorical = false;
    for (const DetectorSpec& d : spec_.drift.detectors) {
      categorical = categorical || DefaultsFor(d.kind).Watches(SeriesKind::kCategorical);
    }
    for (const Scalar& column : drift_series_) {
      const FieldType type = ColumnType(column.value).value_or(FieldType::kDouble);
      if (categorical || (type != FieldType::kString && type != FieldType::kStringArray &&
                          type != FieldType::kStringMap && type != FieldType::kBoolean)) {
        continue;
      }
      std::vector<std::string_view> names;
      for (const auto& d : DetectorDefaultsTable()) {
        if (d.Watches(SeriesKind::kCategorical)) names.push_back(d.name);
      }
      problems_.Error(column.path, column.mark,
                      fmt::format("drift series {} is a {} column, watched by its categories, "
                                  "but none of drift.detectors reads categories: add one of {}",
                                  Show(column), FieldTypeName(type), Join(names)));
      break;
    }
  }

  void ParseOverrides(const MapReader& drift) {
    const MapReader::Entry* entry = drift.Find("overrides");
    if (entry == nullptr) return;
    auto items = reader_.ReadList(entry->value, "drift.overrides",
                                  ", e.g. - {model: model-3, detector: psi, alert: 0.4}");
    if (!items) return;
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string path = fmt::format("drift.overrides[{}]", i);
      MapReader map(reader_, (*items)[i], path, {},
                    std::vector<std::string_view>{"model", "series", "detector", "warn", "alert"},
                    ", e.g. {model: model-3, detector: psi, alert: 0.4}");
      if (!map.valid()) continue;
      ThresholdOverride override_spec;
      override_spec.mark = config_detail::MarkOf((*items)[i]);
      if (auto model = map.String("model")) override_spec.model = model->value;
      if (auto series = map.String("series")) {
        override_spec.series = series->value;
        CheckOverrideSeries(*series);
      }
      const DetectorSpec* detector = nullptr;
      if (auto name = map.String("detector", true)) {
        override_spec.detector = name->value;
        std::vector<std::string_view> configured;
        for (const DetectorSpec& d : spec_.drift.detectors) {
          configured.push_back(d.name);
          if (d.name == name->value) detector = &d;
        }
        if (detector == nullptr) {
          problems_.Error(
              name->path, name->mark,
              fmt::format("detector {} is not among drift.detectors ({}){}", Show(*name),
                          Join(configured), DidYouMean(name->value, configured)));
        }
      }
      override_spec.warn = map.Double("warn");
      override_spec.alert = map.Double("alert");
      for (std::string_view key : {"warn", "alert"}) {
        const std::optional<double>& level = key == "warn" ? override_spec.warn : override_spec.alert;
        const config_detail::DetectorInfo* info =
            detector ? config_detail::FindDetector(ToString(detector->kind)) : nullptr;
        if (!level || info == nullptr) continue;
        if (std::string error = LevelError(*level, *info); !error.empty()) {
          problems_.Error(map.PathOf(key), map.MarkOf(key), error);
        }
      }
      if (!map.Has("warn") && !map.Has("alert")) {
        problems_.Error(path, override_spec.mark,
                        "an override needs warn, alert or both (it changes thresholds only)");
      }
      if (detector) {
        double warn = override_spec.warn.value_or(detector->warn);
        double alert = override_spec.alert.value_or(detector->alert);
        if (warn > alert) {
          problems_.Error(path, override_spec.mark,
                          fmt::format("with this override the warn threshold ({}) exceeds the "
                                      "alert threshold ({})",
                                      warn, alert));
        }
      }
      spec_.drift.overrides.push_back(std::move(override_spec));
    }
  }

  // Levels are calibrated scores; a value below the range is most likely a threshold on the
  // statistic from before calibration (psi 0.25), which is now the detector's minEffect.
  static std::string LevelError(double value, const config_detail::DetectorInfo& info) {
    if (value >= info.min_level && value <= info.max_level) return {};
    std::string error = fmt::format(
        "levels are calibrated scores (the z whose upper normal tail is the false-alarm "
        "probability per evaluation: 5 = 2.9e-7, 5.5 = 1.9e-8) between {} and {}, found {}",
        info.min_level, info.max_level, value);
    if (value < info.min_level) {
      bool has_floor = false;
      for (const auto& param : info.params) has_floor = has_floor || param.name == "minEffect";
      if (has_floor) {
        error += fmt::format("; a floor on {}'s own statistic is minEffect", info.name);
      }
    }
    return error;
  }

  // An override names a drift series, one element of an array<double> series ("col[3]"), a
  // series' missing-value series ("col:missing") or the malformed-record series.
  void CheckOverrideSeries(const Scalar& series) {
    if (series.value == DriftMonitor::kMalformedSeries) return;
    std::string base = series.value;
    const std::string_view suffix = DriftMonitor::kMissingSuffix;
    if (base.size() > suffix.size() && base.ends_with(suffix)) {
      base.resize(base.size() - suffix.size());
      const auto& watched = spec_.drift.series;
      if (std::find(watched.begin(), watched.end(), base) != watched.end()) return;
    }
    bool indexed = false;
    if (size_t open = base.find('['); open != std::string::npos && base.back() == ']') {
      std::string index = base.substr(open + 1, base.size() - open - 2);
      bool digits = !index.empty() && std::all_of(index.begin(), index.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      });
      if (!digits) {
        problems_.Error(
            series.path, series.mark,
            fmt::format("cannot read series {}; expected a column or column[index]", Show(series)));
        return;
      }
      base = base.substr(0, open);
      indexed = true;
    }
    const auto& watched = spec_.drift.series;
    // One key of a map series: "features.amount" (keys are found as records arrive).
    for (size_t dot = base.rfind('.'); !indexed && dot != std::string::npos && dot > 0;
         dot = base.rfind('.', dot - 1)) {
      const std::string map = base.substr(0, dot);
      if (std::find(watched.begin(), watched.end(), map) != watched.end() && ColumnType(map) &&
          IsMap(*ColumnType(map))) {
        return;
      }
    }
    if (std::find(watched.begin(), watched.end(), base) == watched.end()) {
      std::vector<std::string_view> names(watched.begin(), watched.end());
      problems_.Error(series.path, series.mark,
                      fmt::format("series {} is not among drift.series ({}){}", Show(series),
                                  Join(names), DidYouMean(base, names)));
      return;
    }
    if (indexed && ColumnType(base) && *ColumnType(base) != FieldType::kDoubleArray) {
      problems_.Error(series.path, series.mark,
                      fmt::format("series {} has an index, but its column is not an "
                                  "array<double>",
                                  Show(series)));
    }
  }

  // ---- sinks --------------------------------------------------------------------------------

  void ParseSinks(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("sinks");
    if (entry == nullptr || entry->value.IsNull()) {
      top.ReportMissing("sinks", " (a list, e.g. - {format: console})");
      sinks_ok_ = false;
      return;
    }
    auto items = reader_.ReadList(entry->value, "sinks", ", e.g. - {format: console}");
    if (!items) {
      sinks_ok_ = false;
      return;
    }
    if (items->empty()) {
      problems_.Error("sinks", entry->key_mark, "a pipeline needs at least one sink");
      return;
    }
    std::map<std::string, int> names;
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string path = fmt::format("sinks[{}]", i);
      MapReader map(
          reader_, (*items)[i], path, {},
          std::vector<std::string_view>{"name", "format", "stream", "outputMode", "options",
                                        "valueFormat", "valueOptions"},
          " with name, format, stream, outputMode, options, valueFormat and valueOptions");
      if (!map.valid()) {
        sinks_ok_ = false;
        continue;
      }
      SinkSpec sink;
      SinkInfo info;
      sink.mark = config_detail::MarkOf((*items)[i]);
      const ConnectorDecl* decl = nullptr;
      bool format_ok = false;
      if (auto format = map.String("format", true)) {
        sink.format = format->value;
        format_ok = CheckFormat(*format, ConnectorRole::kSink, &decl);
      }
      if (auto name = map.String("name")) {
        if (!IsValidName(name->value)) {
          problems_.Error(name->path, name->mark,
                          fmt::format("sink name {} may contain only letters, digits, '.', '_' "
                                      "and '-'",
                                      Show(*name)));
        } else if (IsDirectoryAlias(name->value)) {
          problems_.Error(name->path, name->mark,
                          fmt::format("sink name {} is not allowed (it names a directory)",
                                      Show(*name)));
        }
        sink.name = name->value;
      } else if (!map.Has("name")) {
        sink.name = fmt::format("{}-{}", sink.format.empty() ? "sink" : sink.format, i);
      }
      if (!sink.name.empty()) {
        SourceMark name_mark = map.Has("name") ? map.MarkOf("name") : sink.mark;
        if (auto it = names.find(sink.name); it != names.end()) {
          problems_.Error(map.Has("name") ? map.PathOf("name") : path, name_mark,
                          fmt::format("sink name '{}' is already used by the sink at line {}; "
                                      "sink names must be unique",
                                      sink.name, it->second));
        } else {
          names.emplace(sink.name, sink.mark.line);
        }
      }
      info.stream_mark = map.MarkOf("stream");
      if (auto stream = map.Choice("stream", Names(kStreams))) {
        sink.stream = *Lookup(kStreams, *stream);
        info.stream_ok = true;
      } else {
        info.stream_ok = !map.Has("stream");
      }
      info.mode_given = map.Has("outputMode");
      info.mode_mark = map.MarkOf("outputMode");
      if (auto mode = map.Choice("outputMode", Names(kOutputModes))) {
        sink.output_mode = *Lookup(kOutputModes, *mode);
        info.mode_ok = true;
      }
      if (format_ok || !options_.catalog) {
        sink.options = config_detail::ReadConnectorOptions(
            reader_, map, decl, fmt::format("{} sink", sink.format), &sink.option_marks);
      }
      ParseSinkValueFormat(map, decl, sink, info);
      spec_.sinks.push_back(std::move(sink));
      sink_info_.push_back(info);
    }
  }

  // valueFormat and valueOptions of a sink that writes one message per row (kafka): how each
  // row becomes the message's bytes (engine/value_encoder.h).
  void ParseSinkValueFormat(const MapReader& map, const ConnectorDecl* decl, SinkSpec& sink,
                            SinkInfo& info) {
    if (!map.Has("valueFormat") && !map.Has("valueOptions")) return;
    if (decl != nullptr && !decl->value_formats) {
      const std::string_view key = map.Has("valueFormat") ? "valueFormat" : "valueOptions";
      problems_.Error(map.PathOf(key), map.MarkOf(key),
                      fmt::format("the {} sink writes rows as JSON; valueFormat and "
                                  "valueOptions apply to sinks that write one message per row "
                                  "(kafka)",
                                  sink.format));
      return;
    }
    if (auto format = map.String("valueFormat")) {
      sink.value_format = format->value;
      sink.value_format_mark = format->mark;
      std::vector<std::string_view> writable;
      const ValueFormatDecl* found = nullptr;
      if (options_.value_formats) {
        for (const ValueFormatDecl& entry : *options_.value_formats) {
          if (entry.create_encoder) writable.push_back(entry.name);
        }
        found = FindValueFormat(*options_.value_formats, format->value);
      } else {
        writable.push_back("json");
      }
      if (found != nullptr && !found->create_encoder) {
        problems_.Error(format->path, format->mark,
                        fmt::format("value format {} can be read by a source but not written "
                                    "by a sink (sink value formats: {})",
                                    Show(*format), Join(writable)));
        return;
      }
      if (found == nullptr && !(options_.value_formats == nullptr && format->value == "json")) {
        problems_.Error(format->path, format->mark,
                        fmt::format("unknown value format {} (sink value formats: {}){}",
                                    Show(*format), Join(writable),
                                    format->secret ? "" : DidYouMean(format->value, writable)));
        return;
      }
      info.value_format = found;
    } else if (map.Has("valueFormat")) {
      return;  // reported by String()
    } else if (options_.value_formats) {
      info.value_format = FindValueFormat(*options_.value_formats, sink.value_format);
    }
    ConnectorDecl options_decl;
    if (info.value_format != nullptr) {
      options_decl.format = info.value_format->name;
      options_decl.options = info.value_format->sink_options;
    }
    sink.value_options = config_detail::ReadConnectorOptions(
        reader_, map, info.value_format != nullptr ? &options_decl : nullptr,
        fmt::format("{} value format of a sink", sink.value_format), &sink.value_option_marks,
        "valueOptions");
  }

  // Each sink value format's own checks (its schema file, the rows it must cover), once
  // everything is read, reported at the option at fault: validate refuses what the sink's
  // first delivery would.
  void CheckSinkValueFormats() {
    if (!problems_.errors().empty()) return;  // the query or the options may be incomplete
    for (size_t i = 0; i < spec_.sinks.size() && i < sink_info_.size(); ++i) {
      const SinkSpec& sink = spec_.sinks[i];
      const ValueFormatDecl* decl = sink_info_[i].value_format;
      if (decl == nullptr || !decl->create_encoder) continue;
      auto rows = StreamRowShape(spec_, sink.stream);
      if (!rows) {
        // The query itself passed its checks: its rows are what this format cannot write.
        problems_.Error(fmt::format("sinks[{}].valueFormat", i),
                        sink.value_format_mark.line > 0 ? sink.value_format_mark : sink.mark,
                        fmt::format("sink '{}' ({} stream): {}", sink.name,
                                    StreamName(sink.stream), rows.error().message()));
        continue;
      }
      ValueEncoderContext context;
      context.rows = std::move(*rows);
      context.default_subject = sink.options.GetString("topic") + "-value";
      auto encoder = decl->create_encoder(context, sink.value_options);
      if (encoder) continue;
      const ValueFormatProblem& problem = encoder.error();
      const std::string message = fmt::format("sink '{}' ({} stream): {}", sink.name,
                                              StreamName(sink.stream), problem.message);
      auto mark = sink.value_option_marks.find(problem.option);
      if (problem.option.empty() || mark == sink.value_option_marks.end()) {
        problems_.Error(fmt::format("sinks[{}].valueFormat", i),
                        sink.value_format_mark.line > 0 ? sink.value_format_mark : sink.mark,
                        message);
        continue;
      }
      problems_.Error(fmt::format("sinks[{}].valueOptions.{}", i, problem.option), mark->second,
                      message);
    }
  }

  // ---- trigger, checkpoint ------------------------------------------------------------------

  void ParseTrigger(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("trigger");
    if (entry == nullptr) return;
    TriggerSpec& trigger = spec_.trigger;
    trigger.mark = entry->key_mark;
    constexpr std::string_view kHint =
        ": one of {processingTime: 10 seconds}, {once: true}, {availableNow: true}, "
        "{continuous: 1 second}";
    if (entry->value.IsScalar()) {
      // `trigger: once` is a natural slip; say how to write it.
      problems_.Error(
          "trigger", config_detail::MarkOf(entry->value),
          fmt::format("expected a map{}, found {}", kHint, Describe(entry->value, false)));
      return;
    }
    MapReader map(
        reader_, entry->value, "trigger", entry->key_mark,
        std::vector<std::string_view>{"processingTime", "once", "availableNow", "continuous"},
        std::string(kHint));
    if (!map.valid()) return;
    if (map.entries().empty()) {
      problems_.Error("trigger", entry->key_mark,
                      fmt::format("the trigger is empty; expected exactly one kind{}", kHint));
      return;
    }
    if (map.entries().size() > 1) {
      const MapReader::Entry& second = map.entries()[1];
      problems_.Error(map.PathOf(second.key), second.key_mark,
                      fmt::format("a trigger has exactly one kind, found '{}' and '{}'",
                                  map.entries()[0].key, second.key));
      return;
    }
    const std::string& kind = map.entries()[0].key;
    if (kind == "processingTime") {
      trigger.kind = TriggerKind::kProcessingTime;
      if (auto interval = map.DurationMs(kind, 0)) trigger.interval_ms = *interval;
    } else if (kind == "continuous") {
      trigger.kind = TriggerKind::kContinuous;
      if (auto interval = map.DurationMs(kind, 1)) trigger.interval_ms = *interval;
    } else {
      trigger.kind = kind == "once" ? TriggerKind::kOnce : TriggerKind::kAvailableNow;
      if (auto flag = map.Bool(kind); flag && !*flag) {
        problems_.Error(map.PathOf(kind), map.MarkOf(kind),
                        fmt::format("'{}: false' is not a trigger; write '{}: true', or remove "
                                    "the trigger for the default (processingTime 0)",
                                    kind, kind));
      }
    }
  }

  void ParseCheckpoint(const MapReader& top) {
    if (auto location = top.String("checkpointLocation")) {
      if (location->value.empty()) {
        problems_.Error(location->path, location->mark, "checkpointLocation is empty");
      }
      spec_.checkpoint_location = location->value;
      CheckPathComponents(location->path, location->mark, location->value);
    } else if (!top.Has("checkpointLocation") && !spec_.name.empty()) {
      spec_.checkpoint_location = DefaultCheckpointLocation(spec_.name, options_.env);
      CheckPathComponents("name", top.MarkOf("name"), spec_.checkpoint_location);
    }
  }

  // A path whose parts a file system cannot hold (255 bytes a name on Linux) fails at start,
  // not at validate, unless validate says so.
  void CheckPathComponents(const std::string& path, SourceMark mark, const std::string& value) {
    constexpr size_t kMaxName = 255;
    for (const auto& part : std::filesystem::path(value)) {
      if (part.string().size() <= kMaxName) continue;
      problems_.Error(path, mark,
                      fmt::format("the checkpoint directory {} has a part of {} bytes, more than "
                                  "a file name may have ({}){}",
                                  value.size() > 80 ? value.substr(0, 80) + "..." : value,
                                  part.string().size(), kMaxName,
                                  path == "name" ? "; shorten the name or set checkpointLocation"
                                                 : ""));
      return;
    }
  }

  // scaleOut: {enabled: true, instance: NAME}. Several processes running the pipeline share
  // its Kafka source through a consumer group (engine/group.h); each keeps its local
  // checkpoint in <checkpointLocation>/<instance>.
  void ParseScaleOut(const MapReader& top) {
    const MapReader::Entry* entry = top.Find("scaleOut");
    if (entry == nullptr) return;
    MapReader map(reader_, entry->value, "scaleOut", entry->key_mark,
                  std::vector<std::string_view>{"enabled", "instance"},
                  ", e.g. {enabled: true, instance: \"${HOSTNAME}\"}");
    if (!map.valid()) return;
    ScaleOutSpec& scale = spec_.scale_out;
    scale.mark = entry->key_mark;
    if (auto enabled = map.Bool("enabled")) scale.enabled = *enabled;
    if (!scale.enabled) return;
    if (auto instance = map.String("instance")) {
      if (!IsValidName(instance->value)) {
        problems_.Error(instance->path, instance->mark,
                        fmt::format("scaleOut.instance {} may contain only letters, digits, "
                                    "'.', '_' and '-' (it names the process's transactional.id "
                                    "and its checkpoint directory)",
                                    Show(*instance)));
        return;
      }
      scale.instance = instance->value;
    } else {
      scale.instance = DefaultInstanceName(options_.env);
    }
    if (!spec_.inputs.empty()) {
      problems_.Error("scaleOut.enabled", map.MarkOf("enabled"),
                      "scaleOut shares one Kafka source among processes; a query with inputs "
                      "runs in one process (list the topics in the source's subscribe instead "
                      "when they share the schema and the cluster)");
    } else if (!spec_.source.traits.group_shared) {
      problems_.Error("scaleOut.enabled", map.MarkOf("enabled"),
                      fmt::format("scaleOut shares a source among processes through a consumer "
                                  "group ({}); this pipeline's source is '{}'",
                                  SourcesWith(&SourceTraits::group_shared), spec_.source.format));
    }
    // Which options of the source a group can share is the connector's to say (its bind).
    for (size_t i = 0; i < spec_.sinks.size(); ++i) {
      const SinkSpec& sink = spec_.sinks[i];
      const ConnectorDecl* decl =
          options_.catalog ? FindConnector(*options_.catalog, sink.format, ConnectorRole::kSink)
                           : nullptr;
      if (decl == nullptr || decl->shared_by_processes) continue;
      problems_.Error(fmt::format("sinks[{}].format", i), sink.mark,
                      fmt::format("sink '{}' ({}) cannot be shared by the processes of a "
                                  "scaled-out pipeline: each would write its own part of the "
                                  "output with batch ids of its own. Write to Kafka (exactly "
                                  "once), or console",
                                  sink.name, sink.format));
    }
    if (spec_.trigger.kind == TriggerKind::kOnce ||
        spec_.trigger.kind == TriggerKind::kAvailableNow) {
      problems_.Warn("trigger", spec_.trigger.mark,
                     "a scaled-out process with trigger once or availableNow stops after what "
                     "it owns at the start; the group moves the rest to the others as it "
                     "leaves");
    }
    if (!spec_.checkpoint_location.empty()) {
      spec_.checkpoint_location += "/" + scale.instance;
    }
  }

  // threads: N. Results do not depend on it, so it is not part of the fingerprint.
  void ParseThreads(const MapReader& top) {
    if (auto threads = top.Int("threads", 1, kMaxThreads)) spec_.threads = static_cast<int>(*threads);
  }
  static constexpr int64_t kMaxThreads = 256;

  // Results must not depend on batching: say where a Kafka pipeline's would.
  // Drift's record-count windows over Kafka partitions take their values in event-time order
  // (DriftOrdersByEventTime), in one process or scaled out; that needs an event time.
  void CheckOrderDependence() {
    if (!spec_.source.traits.unordered_partitions || !spec_.drift.enabled || spec_.query.window ||
        spec_.drift.window_ms > 0 || DriftOrdersByEventTime(spec_)) {
      return;
    }
    problems_.Warn(
        "drift.windowRecords", spec_.drift.mark,
        "the schema has no timestamp column, so drift takes its windows of "
        "drift.windowRecords values in the order records arrive: with a Kafka source that "
        "order is fixed only within a partition, so the alerts are the same whatever the "
        "batching (or the number of processes) only if producers key records by model. Add an "
        "event time (a timestamp field), and drift takes each model's values in event-time "
        "order");
  }

  // ---- rules across sections (Spark's) -----------------------------------------------------

  void CheckOutputModes() {
    if (!query_ok_) return;
    const QuerySpec& query = spec_.query;
    const bool aggregation = query.IsAggregation();
    const bool final_rows_known =
        query.window && query.watermark && query.watermark->column == query.window->column;
    for (size_t i = 0; i < spec_.sinks.size(); ++i) {
      SinkSpec& sink = spec_.sinks[i];
      const SinkInfo& info = sink_info_[i];
      if (!info.stream_ok) continue;
      const std::string mode_path = fmt::format("sinks[{}].outputMode", i);
      if (sink.stream != StreamKind::kStats) {
        if (info.mode_ok && sink.output_mode != OutputMode::kAppend) {
          problems_.Error(
              mode_path, info.mode_mark,
              fmt::format("the {} stream supports only outputMode append, found "
                          "'{}' ({} are emitted once and never updated)",
                          StreamName(sink.stream), ModeName(sink.output_mode),
                          sink.stream == StreamKind::kAlerts ? "alerts"
                          : sink.stream == StreamKind::kPerformance ? "window results"
                                                                     : "dead letters"));
        }
        if (!info.mode_given) sink.output_mode = OutputMode::kAppend;
        continue;
      }
      if (!info.mode_given) {
        sink.output_mode =
            !aggregation || final_rows_known ? OutputMode::kAppend : OutputMode::kUpdate;
        continue;
      }
      if (!info.mode_ok) continue;
      if (sink.output_mode == OutputMode::kComplete && !aggregation) {
        problems_.Error(mode_path, info.mode_mark,
                        "outputMode complete requires an aggregation query (groupBy, "
                        "aggregates or window); use append or update");
      } else if (sink.output_mode == OutputMode::kAppend && aggregation && !final_rows_known) {
        problems_.Error(
            mode_path, info.mode_mark,
            query.window && query.watermark
                ? fmt::format("outputMode append on an aggregation query requires the "
                              "watermark on the window's column '{}' (it is on '{}')",
                              query.window->column, query.watermark->column)
                : std::string("outputMode append on an aggregation query requires "
                              "query.window and query.watermark on the window's column (a "
                              "row is final only when the watermark passes its window); use "
                              "update or complete"));
      } else if (sink.output_mode == OutputMode::kComplete && query.window) {
        problems_.Warn(mode_path, info.mode_mark,
                       "outputMode complete on a windowed query re-emits every window ever "
                       "seen each batch, and its state grows without bound; consider update "
                       "or append");
      }
    }
  }

  void CheckDeadLetter() {
    if (!policy_ok_ || !sinks_ok_) return;
    bool has_dead_letter_sink = false;
    const bool policy_is_dead_letter =
        spec_.source.malformed.policy == MalformedPolicy::kDeadLetter;
    for (size_t i = 0; i < spec_.sinks.size(); ++i) {
      if (!sink_info_[i].stream_ok || spec_.sinks[i].stream != StreamKind::kDeadLetter) continue;
      has_dead_letter_sink = true;
      if (!policy_is_dead_letter && input_dead_letter_marks_.empty()) {
        problems_.Error(fmt::format("sinks[{}].stream", i), sink_info_[i].stream_mark,
                        fmt::format("a dead_letter sink receives records only with "
                                    "source.malformed.policy dead_letter (the policy is {})",
                                    PolicyName(spec_.source.malformed.policy)));
      }
    }
    if (policy_is_dead_letter && !has_dead_letter_sink) {
      problems_.Error("source.malformed.policy", policy_mark_,
                      "policy dead_letter needs a sink with stream: dead_letter, or malformed "
                      "records would be lost");
    }
    for (const auto& [path, mark] : input_dead_letter_marks_) {
      if (!has_dead_letter_sink) {
        problems_.Error(path, mark,
                        "policy dead_letter needs a sink with stream: dead_letter, or malformed "
                        "records would be lost");
      }
    }
  }

  // Each source's options parsed once by its connector (ConnectorDecl::bind), now that the
  // whole pipeline is known; what run creates the source from. A problem is reported at the
  // option it names, with the line the parser recorded.
  void BindSources() {
    if (!options_.catalog || !problems_.errors().empty()) return;
    auto bind = [&](const PipelineSpec& pipeline, SourceSpec& source, const std::string& prefix) {
      const ConnectorDecl* decl =
          FindConnector(*options_.catalog, source.format, ConnectorRole::kSource);
      if (decl == nullptr || !decl->bind) return;
      BindResult bound = decl->bind(pipeline, pipeline.source);
      if (bound) {
        source.bound = std::move(*bound);
        return;
      }
      const OptionProblem& problem = bound.error();
      if (problem.option.empty()) {
        problems_.Error(prefix + ".options", source.mark, problem.message);
        return;
      }
      auto mark = source.option_marks.find(problem.option);
      problems_.Error(fmt::format("{}.options.{}", prefix, problem.option),
                      mark != source.option_marks.end() ? mark->second : source.mark,
                      problem.message);
    };
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      // An input's connector sees the pipeline the executor runs it as: with its source.
      PipelineSpec input = spec_;
      input.source = spec_.inputs[i].source;
      bind(input, spec_.inputs[i].source, fmt::format("inputs[{}]", i));
    }
    // Last: the copies above must not carry the main source's bound options.
    bind(spec_, spec_.source, "source");
    if (spec_.labels.enabled) {
      // The labels' connector sees the pipeline the executor runs them as (LabelsPipeline,
      // engine/executor/performance_stage.h): their schema, no query and no sinks.
      PipelineSpec labels;
      labels.name = spec_.name;
      labels.file = spec_.file;
      labels.schema = spec_.labels.schema;
      labels.source = spec_.labels.source;
      labels.checkpoint_location = spec_.checkpoint_location;
      labels.secrets = spec_.secrets;
      bind(labels, spec_.labels.source, "labels.source");
    }
  }

  // A sink writing where the source reads would read its own output back, again and again;
  // two sinks writing into one directory would mix their files and manifests. Paths are
  // compared as absolute, with symbolic links of existing parts resolved.
  void CheckPaths() {
    if (!options_.catalog) return;
    struct PathOption {
      PathUse use;
      std::filesystem::path path;
      std::string yaml_path;
      SourceMark mark;
      std::string what;  // "the file source", "file sink 'out'"
    };
    std::vector<PathOption> paths;
    auto collect = [&](const std::string& format, ConnectorRole role, const Options& options,
                       const std::map<std::string, SourceMark>& marks, const std::string& prefix,
                       const std::string& what) {
      const ConnectorDecl* decl = FindConnector(*options_.catalog, format, role);
      if (decl == nullptr) return;
      for (const OptionDecl& option : decl->options) {
        if (option.path_use == PathUse::kNone || !options.Has(option.name)) continue;
        const std::string value = options.GetString(option.name);
        if (value.empty()) continue;
        auto mark = marks.find(option.name);
        paths.push_back({option.path_use, NormalPath(value), prefix + option.name,
                         mark == marks.end() ? SourceMark{} : mark->second, what});
      }
    };
    collect(spec_.source.format, ConnectorRole::kSource, spec_.source.options,
            spec_.source.option_marks, "source.options.",
            fmt::format("the {} source", spec_.source.format));
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      const SourceSpec& input = spec_.inputs[i].source;
      collect(input.format, ConnectorRole::kSource, input.options, input.option_marks,
              fmt::format("inputs[{}].options.", i),
              fmt::format("input '{}' ({})", spec_.inputs[i].name, input.format));
    }
    for (size_t i = 0; i < spec_.sinks.size(); ++i) {
      const SinkSpec& sink = spec_.sinks[i];
      collect(sink.format, ConnectorRole::kSink, sink.options, sink.option_marks,
              fmt::format("sinks[{}].options.", i),
              fmt::format("{} sink '{}'", sink.format, sink.name));
    }
    for (size_t i = 0; i < paths.size(); ++i) {
      const PathOption& writer = paths[i];
      if (writer.use != PathUse::kWritesDirectory) continue;
      for (size_t j = 0; j < paths.size(); ++j) {
        const PathOption& other = paths[j];
        if (i == j || (other.use == PathUse::kWritesDirectory && j > i)) continue;
        const bool inside = IsWithin(writer.path, other.path);
        const bool around =
            other.use == PathUse::kWritesDirectory && IsWithin(other.path, writer.path);
        if (!inside && !around) continue;
        const std::string where =
            other.mark.line > 0 ? fmt::format("{}, line {}", other.yaml_path, other.mark.line)
                                : other.yaml_path;
        problems_.Error(
            writer.yaml_path, writer.mark,
            other.use == PathUse::kReadsDirectory
                ? fmt::format("{} writes into {}, which is {}the directory {} reads ({}): "
                              "it would read its own output back; give the sink a directory "
                              "outside the source's",
                              writer.what, writer.path.string(),
                              writer.path == other.path ? "" : "inside ", other.what, where)
                : fmt::format("{} writes into {}, {} where {} writes ({}); each sink needs a "
                              "directory of its own, apart from the others",
                              writer.what, writer.path.string(),
                              writer.path == other.path ? "the same directory"
                              : inside                  ? "inside the directory"
                                                        : "around the directory",
                              other.what, where));
        break;
      }
    }
  }

  void CheckStreams() {
    if (!sinks_ok_) return;
    bool has_alert_sink = false;
    for (size_t i = 0; i < spec_.sinks.size(); ++i) {
      if (!sink_info_[i].stream_ok || spec_.sinks[i].stream != StreamKind::kAlerts) continue;
      has_alert_sink = true;
      if (!spec_.drift.enabled) {
        problems_.Warn(fmt::format("sinks[{}].stream", i), sink_info_[i].stream_mark,
                       "this sink takes the alerts stream, but the pipeline has no drift "
                       "section, so there will be no alerts");
      }
    }
    if (spec_.drift.enabled && !has_alert_sink) {
      problems_.Warn("drift", spec_.drift.mark,
                     "drift is evaluated, but no sink takes the alerts stream (add a sink with "
                     "stream: alerts)");
    }
  }

 public:
  const std::vector<std::string>& secrets() const { return reader_.secrets; }

 private:
  const LoadOptions& options_;
  Reader reader_;
  Problems& problems_;
  PipelineSpec spec_;

  // What parsed cleanly, so that cross-section rules do not pile onto earlier problems.
  std::map<std::string, std::optional<FieldType>> columns_;
  /// Derived columns whose expression did not compile (reported once, not again where used).
  std::set<std::string> failed_derived_;
  /// The file's lines, to place a problem inside an expression.
  std::vector<std::string_view> lines_;
  std::vector<std::string> column_names_;
  /// The schema's field names and their lines.
  std::map<std::string, int> schema_lines_;
  /// drift.series entries whose column exists with a type drift accepts.
  std::vector<Scalar> drift_series_;
  /// The metadata columns the query reads, and names reported as ambiguous.
  std::set<MetadataColumn> metadata_read_;
  std::set<std::string> reported_ambiguous_;
  bool schema_names_complete_ = false;
  bool query_ok_ = true;
  bool group_by_ok_ = true;
  bool policy_ok_ = true;
  SourceMark policy_mark_;
  /// Inputs (other than the source) whose malformed policy is dead_letter: path and mark.
  std::vector<std::pair<std::string, SourceMark>> input_dead_letter_marks_;
  bool value_format_ok_ = false;
  const ValueFormatDecl* value_format_decl_ = nullptr;
  bool sinks_ok_ = true;
  std::vector<SinkInfo> sink_info_;
};

// Replaces every occurrence of a secret value in the messages.
void Scrub(const std::vector<std::string>& secrets, Problems& problems) {
  for (auto* list : {&problems.errors(), &problems.warnings()}) {
    for (ConfigProblem& problem : *list) problem.message = RedactWith(problem.message, secrets);
  }
}

bool ByPosition(const ConfigProblem& a, const ConfigProblem& b) {
  // Problems without a line go last.
  auto key = [](const ConfigProblem& p) {
    return std::pair(p.mark.line == 0 ? std::numeric_limits<int>::max() : p.mark.line,
                     p.mark.column);
  };
  return key(a) < key(b);
}

}  // namespace

PipelineResult ParsePipeline(std::string_view yaml, std::string_view file_name,
                             const LoadOptions& options) {
  Problems problems;
  PipelineSpec spec;
  // libyaml reads the text first: yaml-cpp sees only a well-formed stream of bounded size, depth
  // and node count (see config/yaml_precheck.h for why).
  auto precheck = config_detail::PrecheckYaml(yaml);
  if (!precheck) {
    problems.Error("", precheck.error().mark, std::move(precheck.error().message));
  } else if (precheck->documents == 0) {
    problems.Error("", {}, "the file holds no pipeline (it is empty)");
  } else {
    try {
      // One document only: YAML::Load stops after the first; the precheck counted the rest.
      YAML::Node document = YAML::Load(std::string(yaml));
      if (precheck->documents > 1) {
        problems.Error("", precheck->second_document,
                       "the file holds several YAML documents ('---'); a pipeline file holds "
                       "one pipeline");
      }
      if (!document.IsDefined() || document.IsNull()) {
        problems.Error("", {}, "the file holds no pipeline (it is empty)");
      } else {
        PipelineParser parser(options, problems, yaml);
        spec = parser.Parse(document, file_name);
        Scrub(parser.secrets(), problems);
        for (const std::string& secret : parser.secrets()) {
          if (secret.size() >= kMinRedactedSize &&
              std::find(spec.secrets.begin(), spec.secrets.end(), secret) == spec.secrets.end()) {
            spec.secrets.push_back(secret);
          }
        }
      }
    } catch (const YAML::Exception& e) {
      // Syntax errors: the parser's own words (e.msg never echoes the document's values) and
      // place.
      problems.Error("", config_detail::ToSourceMark(e.mark),
                     fmt::format("YAML syntax error: {}", e.msg));
    } catch (const std::bad_alloc&) {
      // Not expected within the precheck's limits; a backstop so that nothing leaves config/.
      problems.Error("", {}, "out of memory while reading the file");
    }
  }
  std::stable_sort(problems.errors().begin(), problems.errors().end(), ByPosition);
  std::stable_sort(problems.warnings().begin(), problems.warnings().end(), ByPosition);
  if (problems.error_count() > 0) {
    std::vector<ConfigProblem> all = std::move(problems.errors());
    all.insert(all.end(), problems.warnings().begin(), problems.warnings().end());
    return tl::unexpected(std::move(all));
  }
  if (options.warnings) {
    options.warnings->insert(options.warnings->end(), problems.warnings().begin(),
                             problems.warnings().end());
  }
  return spec;
}

Result<std::string> ReadPipelineText(const std::string& path) {
  const size_t max_bytes = config_detail::YamlLimits{}.max_bytes;
  // Not a FIFO or a device: opening one could block, and reading it need not end.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return MakeError(ErrorCode::kIo, "cannot read the pipeline file: {}", std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) {
    return MakeError(ErrorCode::kIo, "cannot read the pipeline file: it is a directory");
  }
  if (!S_ISREG(info.st_mode)) {
    return MakeError(ErrorCode::kIo, "cannot read the pipeline file: not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return MakeError(ErrorCode::kIo, "cannot read the pipeline file: {}", std::strerror(errno));
  }
  // In blocks, to at most a block past the limit, so that a file growing while read is bounded
  // too.
  std::string text;
  char block[64 * 1024];
  while (text.size() <= max_bytes && in.read(block, sizeof block).gcount() > 0) {
    text.append(block, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    return MakeError(ErrorCode::kIo, "cannot read the pipeline file: {}", std::strerror(errno));
  }
  if (text.size() > max_bytes) {
    return MakeError(ErrorCode::kConfig,
                     "the file is larger than {} bytes, the most a pipeline file may hold",
                     max_bytes);
  }
  return text;
}

PipelineResult LoadPipelineFile(const std::string& path, const LoadOptions& options) {
  auto text = ReadPipelineText(path);
  if (!text) return tl::unexpected(std::vector<ConfigProblem>{{"", {}, text.error().message()}});
  return ParsePipeline(*text, path, options);
}

std::string FormatProblems(std::string_view file, const std::vector<ConfigProblem>& problems) {
  std::string out;
  for (const ConfigProblem& problem : problems) {
    out += file;
    if (problem.mark.line > 0) out += fmt::format(":{}:{}", problem.mark.line, problem.mark.column);
    out += ": ";
    if (!problem.path.empty()) out += fmt::format("{}: ", problem.path);
    if (problem.severity == ProblemSeverity::kWarning) out += "warning: ";
    out += problem.message;
    out += '\n';
  }
  return out;
}

std::string DefaultInstanceName(const EnvLookup& env) {
  std::optional<std::string> host = env ? env("HOSTNAME") : std::nullopt;
  std::string name = host.value_or("");
  if (name.empty()) {
    char buffer[256] = {};
    if (gethostname(buffer, sizeof buffer - 1) == 0) name = buffer;
  }
  for (char& c : name) {
    const bool legal = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (!legal) c = '_';
  }
  return name.empty() ? std::string("driftd") : name;
}

std::string DefaultCheckpointLocation(std::string_view pipeline_name, const EnvLookup& env) {
  std::optional<std::string> state_directory = env ? env("STATE_DIRECTORY") : std::nullopt;
  std::string base = "/var/lib/driftd";
  if (state_directory && !state_directory->empty()) {
    // systemd passes one path per StateDirectory= entry, separated by ':'.
    base = state_directory->substr(0, state_directory->find(':'));
  }
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return fmt::format("{}/{}", base, pipeline_name);
}

}  // namespace driftd
