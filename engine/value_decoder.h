// Value formats: how the bytes of a source's records become the typed columns of a RecordBatch.
// A format (json, avro, protobuf, ...) is one ValueFormatDecl: its name, its options, how they
// bind into its typed options and a factory for its ValueDecoder (and, for a format sinks
// write, the same for its encoder). config/ checks `source.valueFormat` and
// `source.valueOptions` against the declarations and binds the options once, at load; the
// executor asks the factory for a decoder of the bound options at start. Whatever the
// format, the malformed policies, the counts by MalformedReason and the dead letters behave the
// same: RowDecoder (engine/row_decoder.h) implements them once for formats that decode a record
// at a time, the JSON decoder keeps its own tuned loop with the same rules.
//
// Thread-safety: a ValueDecoder is used by one thread at a time; give each decoding thread its
// own. Declarations are immutable.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/options.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/row_shape.h"
#include "engine/schema.h"
#include "engine/value_encoder.h"

namespace driftd {

/// Why a record was malformed. The spelling of ToString() is the metric / progress label.
/// New reasons go at the end (the numbering is an index of MalformedCounts).
enum class MalformedReason : uint8_t {
  kNotJson,           // "not_json": not valid JSON (bad token, trailing content, bad escape)
  kTruncated,         // "truncated": the record ends inside an object, array or string (JSON),
                      // or before its last field (Avro, Protobuf)
  kWrongType,         // "wrong_type": a field's value does not fit its schema type
  kMissingField,      // "missing_field": a non-nullable field is absent or null
  kInvalidUtf8,       // "invalid_utf8": the record's bytes (or a string's) are not valid UTF-8
  kTooDeep,           // "too_deep": nesting deeper than MalformedSpec::max_depth
  kTooLarge,          // "too_large": longer than MalformedSpec::max_record_bytes (not parsed),
                      // or an array<double> longer than MalformedSpec::max_array_length
  kNumberOutOfRange,  // "number_out_of_range": 1e400, an int beyond int32 / int64, ...
  kNotObject,         // "not_object": valid-looking JSON whose top level is not an object
  kEmpty,             // "empty": a record of zero bytes or only whitespace
  kDuplicateField,    // "duplicate_field": a schema field appears twice in one record
  kUndecodable,       // "undecodable": not a record of a binary format (bad Avro or Protobuf
                      // bytes, a record without the Confluent framing the source expects)
  kUnknownSchema,     // "unknown_schema": the record names a writer schema the registry does
                      // not have, or one that cannot be resolved against the reader schema
};
inline constexpr size_t kMalformedReasonCount = 13;

std::string_view ToString(MalformedReason reason);
std::optional<MalformedReason> ParseMalformedReason(std::string_view name);

/// Malformed records counted by reason; each record counts once, under its first reason.
struct MalformedCounts {
  std::array<int64_t, kMalformedReasonCount> by_reason{};

  int64_t operator[](MalformedReason reason) const {
    return by_reason[static_cast<size_t>(reason)];
  }
  int64_t total() const;
  void Add(const MalformedCounts& other);
};

/// A record rejected under the dead_letter policy, for the dead-letter stream.
struct DeadLetter {
  /// The record's bytes exactly as received; for a record the source cut (truncated), its
  /// first bytes only.
  std::string raw;
  MalformedReason reason = MalformedReason::kNotJson;
  std::string detail;  // e.g. "field 'prediction': expected double, got string"
  RecordPosition position;
  /// The record was longer than `raw`: the source kept only its first maxRecordBytes + 1
  /// bytes (InputChunk::Record::cut).
  bool truncated = false;
};

/// The dead-letter stream's row of `dead`, found at `position` (Source::DescribePosition): its
/// position, reason and detail, the bytes as a JSON string `raw` when they are UTF-8, else in
/// base64 (`rawBase64`, `raw` null) so that no byte is replaced, `rawBytes` and `truncated`.
std::string DeadLetterToJson(const DeadLetter& dead, std::string_view position);
/// The shape of DeadLetterToJson's rows (engine/row_shape.h).
RowShape DeadLetterRowShape();

/// Turns a record's position into words for the fail policy's message ("topic t partition 3
/// offset 42").
using DescribePosition = std::function<std::string(const RecordPosition&)>;

/// Decodes the records of an InputChunk into the columns of a Schema.
///
/// Malformed policies (the same for every format):
///  - permissive: a bad value in a nullable field becomes null and the row is kept; a record
///    that cannot yield a row without breaking the schema (not decodable, truncated, a bad
///    non-nullable field, ...) is dropped. Either way the record is counted.
///  - drop: the row is skipped and counted.
///  - dead_letter: the row is skipped, counted, and a DeadLetter is appended to
///    `dead_letters` (if it is null the record is only counted).
///  - fail: Decode stops and returns Error(kMalformedRecord) naming the record's position.
/// A record of max_record_bytes or fewer is never rejected for its size.
class ValueDecoder {
 public:
  virtual ~ValueDecoder() = default;

  /// Appends the decoded rows of `chunk` to `out` (out.Reset(schema) is the caller's job), with
  /// out.positions[row] the record's position. Rows keep the chunk's order. When `describe` is
  /// empty the fail policy's message says "partition P offset O". An error other than
  /// kMalformedRecord means the decoder could not judge the records (a schema registry that
  /// cannot be reached): nothing of the chunk should be used, and the batch may be retried.
  virtual Status Decode(const InputChunk& chunk, RecordBatch& out,
                        std::vector<DeadLetter>* dead_letters,
                        const DescribePosition& describe = {}) = 0;

  /// Projection: only the schema fields with `used[f]` true need their values (ColumnsUsed in
  /// engine/expr/projection.h). A format may then leave the others null without converting
  /// them, still checking that the record is well-formed; it must still decode a non-nullable
  /// field (a missing or null one makes the record malformed). Call before Decode. Default:
  /// every field is decoded.
  virtual void Project(const std::vector<bool>& used) { (void)used; }

  /// Malformed records seen since construction or ResetCounts().
  virtual const MalformedCounts& counts() const = 0;
  virtual void ResetCounts() = 0;

  virtual const Schema& schema() const = 0;
};

/// A configuration problem of a value format, tied to the option at fault (empty: the format
/// as a whole). config/ reports it at that option's line.
using ValueFormatProblem = OptionProblem;

using ValueDecoderResult = tl::expected<std::unique_ptr<ValueDecoder>, ValueFormatProblem>;
using ValueEncoderResult = tl::expected<std::unique_ptr<ValueEncoder>, ValueFormatProblem>;

/// For a value format that fills top-level scalar and array<double> columns only: the problem
/// with the first field it cannot fill (a struct's member, array<string>, a map), or nullopt.
std::optional<ValueFormatProblem> RefuseNestedFields(const Schema& schema,
                                                     std::string_view format);

/// What a value format is: one entry of the catalog. DeclareDecoder and DeclareEncoder fill in
/// the bind and factory pairs.
struct ValueFormatDecl {
  std::string name;  // "json", "avro", "protobuf": the spelling of source.valueFormat
  std::string doc;
  /// The options of source.valueOptions, validated by config/ like a connector's.
  std::vector<OptionDecl> options;
  /// Records are binary and must each come whole from the source (a Kafka message): such a
  /// format cannot read a line-oriented source (file, socket). Default: false.
  bool binary = false;
  /// Parses source.valueOptions (declared ranges checked, defaults filled in) into the format's
  /// typed options, with the checks across options. config/ calls it once, at load, and keeps
  /// the result in SourceSpec::value_bound.
  std::function<BindResult(const Options& options)> bind;
  /// Makes a decoder from bound options. It reads local files the options name (schemas,
  /// descriptor sets) and checks them against `schema`, so that config/ can call it at validate;
  /// it does not reach remote services (a schema registry is asked when a record needs it).
  std::function<ValueDecoderResult(const Schema& schema, const MalformedSpec& malformed,
                                   const BoundOptions& options)>
      create;
  /// The options of a sink's valueOptions (engine/value_encoder.h), validated alike.
  std::vector<OptionDecl> sink_options;
  /// Parses a sink's valueOptions as `bind` does a source's; config/ keeps the result in
  /// SinkSpec::value_bound. Null when sinks cannot write the format.
  std::function<BindResult(const Options& options)> bind_sink;
  /// Makes an encoder for a sink that writes rows of `context.rows`, from bound options; null
  /// when sinks cannot write the format. It reads local files the options name and checks the
  /// rows against them (config/ calls it at validate); it does not reach remote services
  /// (ValueEncoder::Open does).
  std::function<ValueEncoderResult(const ValueEncoderContext& context, const BoundOptions& options)>
      create_encoder;

  const OptionDecl* Find(std::string_view option) const {
    for (const auto& decl : options) {
      if (decl.name == option) return &decl;
    }
    return nullptr;
  }
};

/// The typed options of a format that takes none.
struct NoValueOptions {};

/// Declares how a format's source options (decl.options, set before) bind into T and how a
/// decoder is made of T: `bind` sees the options with the declared ranges checked and the
/// declared defaults filled in (it writes no default of its own) and makes T once.
template <typename T>
void DeclareDecoder(ValueFormatDecl& decl, Bound<T> (*bind)(const Options& options),
                    ValueDecoderResult (*create)(const Schema& schema,
                                                 const MalformedSpec& malformed,
                                                 const T& options)) {
  decl.bind = [declared = decl.options, bind](const Options& options) {
    return BindDeclared<T>(declared, options, bind);
  };
  decl.create = [create](const Schema& schema, const MalformedSpec& malformed,
                         const BoundOptions& options) -> ValueDecoderResult {
    const T* typed = std::any_cast<T>(&options);
    if (typed == nullptr) {
      return tl::unexpected(ValueFormatProblem{"", "the value options were not bound"});
    }
    return create(schema, malformed, *typed);
  };
}

/// DeclareDecoder for a format's sink options (decl.sink_options, set before) and its encoder.
template <typename T>
void DeclareEncoder(ValueFormatDecl& decl, Bound<T> (*bind)(const Options& options),
                    ValueEncoderResult (*create)(const ValueEncoderContext& context,
                                                 const T& options)) {
  decl.bind_sink = [declared = decl.sink_options, bind](const Options& options) {
    return BindDeclared<T>(declared, options, bind);
  };
  decl.create_encoder = [create](const ValueEncoderContext& context,
                                 const BoundOptions& options) -> ValueEncoderResult {
    const T* typed = std::any_cast<T>(&options);
    if (typed == nullptr) {
      return tl::unexpected(ValueFormatProblem{"", "the value options were not bound"});
    }
    return create(context, *typed);
  };
}

/// Binds `options` as config/ does and makes the decoder (or the encoder) of `decl`: for a
/// format used without a pipeline file (tests, tools, benchmarks). A problem of the options is
/// the bind's, of the files the create's.
ValueDecoderResult BindAndCreateDecoder(const ValueFormatDecl& decl, const Schema& schema,
                                        const MalformedSpec& malformed, const Options& options);
ValueEncoderResult BindAndCreateEncoder(const ValueFormatDecl& decl,
                                        const ValueEncoderContext& context, const Options& options);

/// The value formats a build knows of (connectors/format/registry.h fills it for the daemon).
using ValueFormatCatalog = std::vector<ValueFormatDecl>;

/// The entry named `name`, or nullptr.
const ValueFormatDecl* FindValueFormat(const ValueFormatCatalog& catalog, std::string_view name);

/// Creates the encoder of `sink`'s value format from `catalog`, for rows of its stream, from
/// the options bound at load (SinkSpec::value_bound; bound now for a spec built without
/// config/); a problem becomes a kConfig error naming the sink and valueFormat or
/// valueOptions.<option>. `default_subject`: see ValueEncoderContext.
Result<std::unique_ptr<ValueEncoder>> CreateValueEncoder(const ValueFormatCatalog& catalog,
                                                         const PipelineSpec& spec,
                                                         const SinkSpec& sink,
                                                         std::string default_subject);

/// Creates the decoder of `spec.source`'s value format from `catalog`, from the options bound
/// at load (SourceSpec::value_bound; bound now for a spec built without config/); a problem
/// becomes a kConfig error naming source.valueFormat or source.valueOptions.<option>.
Result<std::unique_ptr<ValueDecoder>> CreateValueDecoder(const ValueFormatCatalog& catalog,
                                                         const PipelineSpec& spec);

}  // namespace driftd
