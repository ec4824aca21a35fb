// Internal to config/: PipelineParser, which reads a pipeline file's YAML into a PipelineSpec
// one section after another and then checks the rules across sections, and the helpers its
// files share. ParsePipeline (loader.cc) runs it. Its methods are defined by section:
//   loader.cc          construction, the order of the sections, the rules across sections
//   loader_schema.cc   name, schema, the metadata columns
//   loader_source.cc   source, inputs, value formats, malformed records; sinks
//   loader_labels.cc   labels, performance
//   loader_query.cc    query, and its expressions (select, where, aggregates)
//   loader_drift.cc    drift: series, segments, baselines, detectors, overrides
//   loader_runtime.cc  trigger, checkpointLocation, scaleOut, threads
// A parser reads one file, on one thread.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/detectors.h"
#include "config/loader.h"
#include "config/yaml_reader.h"
#include "engine/aggregates.h"
#include "engine/expr/expr.h"

namespace driftd::loader_detail {

using config_detail::Describe;
using config_detail::MapReader;
using config_detail::Problems;
using config_detail::Reader;
using config_detail::Scalar;
using config_detail::Show;

/// A pipeline name: letters, digits, '.', '_' and '-' (loader.cc).
bool IsValidName(std::string_view name);

// "." and ".." name directories that are not the pipeline's own: the default checkpoint
// "$STATE_DIRECTORY/<name>" would be the state directory itself, or its parent.
inline bool IsDirectoryAlias(std::string_view name) { return name == "." || name == ".."; }

/// "a, b, c" (loader.cc).
std::string Join(const std::vector<std::string_view>& words);

/// Appends what is left of `in` to `text` in blocks, to at most a block past `max_bytes`, so that
/// memory follows the file and not the limit, and a file that grows while it is read is bounded
/// too. False on a read error (errno says which). The text may end longer than max_bytes: the
/// caller refuses it in its own words (loader.cc).
bool ReadUpTo(std::istream& in, size_t max_bytes, std::string& text);

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

/// The spellings of a stream, a malformed policy and an output mode (loader_source.cc, beside
/// their tables).
std::string StreamName(StreamKind stream);
std::string PolicyName(MalformedPolicy policy);
std::string ModeName(OutputMode mode);

// Where a column reference is and what kinds of column it accepts.
enum class ColumnUse {
  kAny,
  kGroupKey,     // string, long, int, boolean
  kNumericLike,  // double, long, int, array<double>
  kTimestamp,
  kLabel,  // prediction / label for error rate: numeric or boolean
  kSeries,  // drift series: numeric, array<double>, maps, and categorical string or boolean
};

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
  PipelineParser(const LoadOptions& options, Problems& problems, std::string_view text);
  PipelineSpec Parse(const YAML::Node& root, std::string_view file_name);

 private:
  // ---- name, schema: loader_schema.cc -------------------------------------------------------

  void ParseName(const MapReader& top);
  void ParseSchema(const MapReader& top);
  std::optional<TypeSpec> ParseType(const Scalar& text);
  bool CheckColumn(const Scalar& column, ColumnUse use, std::string_view role);

  // ---- metadata columns: loader_schema.cc ---------------------------------------------------

  // The source's records are whole messages with metadata (SourceTraits::whole_messages).
  bool MessageSource() const { return spec_.source.traits.whole_messages; }

  std::string SourcesWith(bool SourceTraits::*trait) const;
  void OfferMetadataColumns();
  void KeepReadMetadataColumns();
  bool ReadsColumn(const std::string& name, const std::string& path, SourceMark mark,
                   std::string_view what);
  bool NotAMetadataSource(const std::string& name, const std::string& path, SourceMark mark,
                          const std::string& what);
  bool ReadsColumns(const expr::Expression& expression, const Scalar& scalar,
                    std::string_view what);
  std::optional<FieldType> ColumnType(std::string_view name) const;

  // ---- source: loader_source.cc -------------------------------------------------------------

  void ParseSource(const MapReader& top);
  void ParseInputs(const MapReader& top);
  void ParseSourceFields(const MapReader& source, const std::string& path, SourceSpec& target,
                         bool main);
  void ParseValueFormat(const MapReader& source, const std::string& path, SourceSpec& spec,
                        bool main);
  void CheckInputValueFormat(const std::string& path, const SourceSpec& source,
                             const ValueFormatDecl* decl);
  bool ParseValueFormatOf(const MapReader& source, const std::string& path, SourceSpec& spec,
                          const ValueFormatDecl*& value_format_decl);
  void CheckValueFormat();
  void ReportValueOptionProblem(const ValueFormatProblem& problem, const std::string& prefix,
                                const std::map<std::string, SourceMark>& marks, SourceMark anchor);
  bool CheckFormat(const Scalar& format, ConnectorRole role, const ConnectorDecl** decl);
  void ParseMalformed(const MapReader& source, const std::string& path, SourceSpec& target,
                      bool main);

  // ---- labels and performance: loader_labels.cc ---------------------------------------------

  void ParseLabels(const MapReader& top);
  void ParsePerformance(const MapReader::Entry* entry);
  void CheckLabels();

  // ---- query: loader_query.cc ---------------------------------------------------------------

  void ParseQuery(const MapReader& top);

  // ---- expressions: loader_query.cc ---------------------------------------------------------

  // The columns an expression may read: the schema's, then the derived ones so far.
  Schema ExpressionColumns() const { return QuerySchema(spec_); }

  SourceMark MarkWithin(const Scalar& scalar, size_t offset) const;
  void ExpressionError(const Scalar& scalar, const expr::ExprError& error,
                       std::string_view what);
  bool ParseSelectItem(const Scalar& item);
  void ParseWhere(const Scalar& where);
  void ParsePercentile(const Scalar& item, const AggregateDecl& kind, const std::string& fn_name,
                       std::string_view args, std::map<std::string, int>& seen);
  void ParseAggregate(const Scalar& item, std::map<std::string, int>& seen);

  // ---- drift: loader_drift.cc ---------------------------------------------------------------

  void ParseDrift(const MapReader& top);
  void ParseMultivariate(const MapReader& drift);
  std::vector<std::string> StructLeaves(const std::string& name) const;
  void ParseSegments(const MapReader& drift);
  void DefaultLabelColumns(const MapReader& drift, const SourceMark& mark);
  void ParseBaseline(const MapReader& drift);
  void CheckWarmupSize(const MapReader& drift, const MapReader* baseline_map);
  void ParseDetectors(const MapReader& drift);
  void ParseOverrides(const MapReader& drift);
  static std::string LevelError(double value, const config_detail::DetectorInfo& info);
  void CheckOverrideSeries(const Scalar& series);

  // ---- sinks: loader_source.cc --------------------------------------------------------------

  void ParseSinks(const MapReader& top);
  void ParseSinkValueFormat(const MapReader& map, const ConnectorDecl* decl, SinkSpec& sink,
                            SinkInfo& info);
  void CheckSinkValueFormats();

  // ---- trigger, checkpoint: loader_runtime.cc -----------------------------------------------

  void ParseTrigger(const MapReader& top);
  void ParseCheckpoint(const MapReader& top);
  void CheckPathComponents(const std::string& path, SourceMark mark, const std::string& value);
  void ParseScaleOut(const MapReader& top);
  void ParseThreads(const MapReader& top);
  static constexpr int64_t kMaxThreads = 256;
  void CheckOrderDependence();

  // ---- rules across sections (Spark's): loader.cc ------------------------------------------

  void CheckOutputModes();
  void CheckDeadLetter();
  void BindSources();
  void BindSinks();
  /// A bind's problem at `prefix`.<option> ("sinks[1].options.topic") with the option's mark
  /// from `marks`, else at `prefix` and `anchor` (the section's own mark).
  void ReportOptionProblem(const OptionProblem& problem, const std::string& prefix,
                           const std::map<std::string, SourceMark>& marks, SourceMark anchor);
  void CheckPaths();
  void CheckStreams();

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

}  // namespace driftd::loader_detail
