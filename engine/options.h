// Declarations of the options a connector or a value format accepts. Each connector publishes a
// ConnectorDecl (a value format a ValueFormatDecl, engine/value_decoder.h); config/ validates
// pipeline files against them (unknown or mistyped options are errors), binds each connector's
// and value format's options once, at load, into the kind's typed options (BindDeclared), and
// the reference documentation is generated from them.
#pragma once

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "engine/result.h"

namespace driftd {

struct PipelineSpec;
struct SourceSpec;
struct SinkSpec;
struct ValueFormatDecl;
class Source;
class Sink;

enum class OptionType {
  kString,
  kInt,       // a whole number, e.g. 100000
  kDouble,
  kBool,      // true / false
  kDuration,  // "30 seconds", "30s", "5 minutes", "1h", "250ms"
  kEnum,      // one of OptionDecl::choices
  kJson,      // a JSON document, e.g. per-partition startingOffsets
};

std::string_view OptionTypeName(OptionType type);

/// What a path option names, for the rules between connectors' paths (a sink must not write
/// where a source reads, nor where another sink writes).
enum class PathUse {
  kNone,
  kReadsDirectory,   // a source reads the files of this directory
  kWritesDirectory,  // a sink writes files into this directory
};

struct OptionDecl {
  std::string name;
  OptionType type = OptionType::kString;
  /// Textual default; empty with required == false means "unset".
  std::string default_value;
  std::string doc;
  bool required = false;
  /// Allowed values for kEnum.
  std::vector<std::string> choices = {};
  /// Default: kNone (not a path, or a path no rule is about).
  PathUse path_use = PathUse::kNone;
  /// Smallest and largest value of a kInt or kDouble option, checked with the other declared
  /// rules when a pipeline is loaded, so the error names the option's line. Default: unbounded.
  std::optional<double> min = std::nullopt;
  std::optional<double> max = std::nullopt;
  /// The option says which data a source reads (a directory, topics): another value is another
  /// stream, whose offsets and state mean nothing to a checkpoint, so it is part of the
  /// pipeline's fingerprint (config/fingerprint.cc). Default: false.
  bool identity = false;

  /// Copies with a range or the identity mark, for declaration tables:
  /// `OptionDecl{"maxOffsetsPerTrigger", OptionType::kInt, "", "..."}.AtLeast(1)`.
  OptionDecl AtLeast(double value) const {
    OptionDecl copy = *this;
    copy.min = value;
    return copy;
  }
  OptionDecl Between(double low, double high) const {
    OptionDecl copy = *this;
    copy.min = low;
    copy.max = high;
    return copy;
  }
  OptionDecl Identity() const {
    OptionDecl copy = *this;
    copy.identity = true;
    return copy;
  }
};

/// Whether `value` (the option's text, of its declared type) is within the option's range;
/// otherwise what is wrong, e.g. "must be positive, found 0".
std::optional<std::string> OutOfRange(const OptionDecl& option, std::string_view value);

/// A problem a connector or value format finds in its options, tied to the option at fault
/// (empty: the connector or format as a whole), so that config/ reports it at that option's YAML
/// path and line.
struct OptionProblem {
  std::string option;
  std::string message;
};

/// "option: message", or the message alone for a problem of the whole connector: how a problem
/// reads where no YAML path says which option it is about (a spec built without config/).
std::string ProblemText(const OptionProblem& problem);

/// What a kind's bind makes of its options: its typed options, or the option at fault.
template <typename T>
using Bound = tl::expected<T, OptionProblem>;

/// A sink that could not be made, and which one: `sink` is the spec at fault (an element of the
/// pipeline's sinks), or null for a problem of several sinks' one Sink together (a scaled-out
/// Kafka sink without a Kafka source).
struct SinkFailure {
  Error error;
  const SinkSpec* sink = nullptr;
};

/// What config/, progress and the engine need to know of a source kind, stated by its
/// declaration so that no code compares format names. Defaults: false.
struct SourceTraits {
  /// Offsets are "<topic>-<partition>" of numbered partitions of topics (progress shows them
  /// per topic, as Spark's Kafka source does).
  bool topic_partitions = false;
  /// Records of different partitions arrive in no fixed order: record-count windows over
  /// several partitions need a canonical order (engine/executor/order_buffer.h).
  bool unordered_partitions = false;
  /// Each record is one whole message with a key, topic, partition, offset, timestamp and
  /// headers: binary value formats and the metadata columns need it.
  bool whole_messages = false;
  /// Several processes can share its partitions through a consumer group (scaleOut).
  bool group_shared = false;
};

/// A connector's or value format's options as its bind made them: its own typed struct
/// (std::any_cast).
using BoundOptions = std::any;
using BindResult = tl::expected<BoundOptions, OptionProblem>;

enum class ConnectorRole { kSource, kSink };

struct ConnectorDecl {
  std::string format;  // "kafka", "file", "rate", "socket", "console", ...
  ConnectorRole role = ConnectorRole::kSource;
  std::string doc;
  std::vector<OptionDecl> options;
  /// Options starting with this prefix pass through unchecked (e.g. "kafka." to librdkafka).
  std::string passthrough_prefix;
  /// A sink that writes each row as one message whose bytes a value format makes (kafka): it
  /// accepts `valueFormat` and `valueOptions` (engine/value_encoder.h). Default: false (rows
  /// are written as JSON).
  bool value_formats = false;
  /// Source: what it is (see SourceTraits).
  SourceTraits traits;
  /// Sink: every process of a scaled-out pipeline may write it (each batch's output goes in
  /// one transaction, or is only shown). Default: false.
  bool shared_by_processes = false;

  /// Source: parses the options (declared types, ranges and defaults applied) into the
  /// connector's typed options, with the checks across options and against the rest of the
  /// pipeline. config/ calls it once, at load, and keeps the result in SourceSpec::bound;
  /// create_source reads that, so validate and run check the same things once.
  std::function<BindResult(const PipelineSpec& pipeline, const SourceSpec& source)> bind;
  /// Source: makes the source of pipeline.source from its bound options.
  std::function<Result<std::unique_ptr<Source>>(const PipelineSpec& pipeline)> create_source;
  /// Sink: parses one sink's options (declared types, ranges and defaults applied) into the
  /// kind's typed options, with the checks across options and against the rest of the pipeline.
  /// A rule between two sinks of the kind (one producer, one directory each) is checked by the
  /// later sink's bind, against the sinks before it, so that the problem belongs to one sink.
  /// config/ calls it once per sink, at load, and keeps the result in SinkSpec::bound;
  /// create_sink and create_shared_sink read that (and bind a spec built without config/).
  std::function<BindResult(const PipelineSpec& pipeline, const SinkSpec& sink)> bind_sink;
  /// Sink: makes the sink of one spec from its bound options.
  std::function<Result<std::unique_ptr<Sink>>(const PipelineSpec& pipeline,
                                              const SinkSpec& spec)>
      create_sink;
  /// Sink, instead of create_sink: one Sink for every sink of this format (they share one
  /// transactional producer); `source` is the pipeline's source; `formats` encode the rows. A
  /// failure names the spec at fault, or none when it concerns them together.
  std::function<tl::expected<std::unique_ptr<Sink>, SinkFailure>(
      const PipelineSpec& pipeline, const std::vector<const SinkSpec*>& specs, Source* source,
      const std::vector<ValueFormatDecl>& formats)>
      create_shared_sink;
  /// Sink made with create_shared_sink: a scaled-out pipeline needs it even when no sink of
  /// this format is configured (it writes the query's internal topics). Default: false.
  bool carries_scale_out = false;

  const OptionDecl* Find(std::string_view name) const {
    for (const auto& option : options) {
      if (option.name == name) return &option;
    }
    return nullptr;
  }
};

/// The connectors a build knows of; filled by connectors/, consumed by config/.
using ConnectorCatalog = std::vector<ConnectorDecl>;

/// Parses "30 seconds", "30s", "5 minutes", "1h", "250ms", "2 days" into milliseconds.
Result<int64_t> ParseDurationMs(std::string_view text);

/// Validated connector options: every declared option with a value (explicit or default),
/// plus passthrough options. Typed getters assume validation already happened.
class Options {
 public:
  Options() = default;
  explicit Options(std::map<std::string, std::string> values) : values_(std::move(values)) {}

  bool Has(std::string_view name) const { return values_.find(std::string(name)) != values_.end(); }
  std::string GetString(std::string_view name, std::string_view fallback = "") const;
  int64_t GetInt(std::string_view name, int64_t fallback = 0) const;
  double GetDouble(std::string_view name, double fallback = 0) const;
  bool GetBool(std::string_view name, bool fallback = false) const;
  int64_t GetDurationMs(std::string_view name, int64_t fallback = 0) const;
  /// Options whose names start with `prefix`, with the prefix removed (e.g. "kafka.").
  std::map<std::string, std::string> WithPrefix(std::string_view prefix) const;

  const std::map<std::string, std::string>& values() const { return values_; }
  void Set(std::string name, std::string value) { values_[std::move(name)] = std::move(value); }

 private:
  std::map<std::string, std::string> values_;
};

/// The declaration of `format` in `role`, or nullptr.
const ConnectorDecl* FindConnector(const ConnectorCatalog& catalog, std::string_view format,
                                   ConnectorRole role);

/// `options` as the declaration `declared` admits them, with the checks that need no YAML:
/// every required option present, every value within its declared range (OutOfRange), and the
/// declared default of every option it lacks. config/ made these checks already; for options
/// that did not come through it (a spec built by hand: tests, tools) they are made here. The
/// first problem otherwise.
Bound<Options> AdmitDeclared(const std::vector<OptionDecl>& declared, Options options);

/// Binds `options` against `declared`: AdmitDeclared, then `bind` (Bound<T>(const Options&))
/// makes the kind's typed options T from the admitted options, which hold every default, so
/// that no kind writes a default of its own.
template <typename T, typename Bind>
BindResult BindDeclared(const std::vector<OptionDecl>& declared, const Options& options,
                        Bind&& bind) {
  Bound<Options> admitted = AdmitDeclared(declared, options);
  if (!admitted) return tl::unexpected(std::move(admitted.error()));
  Bound<T> bound = bind(*admitted);
  if (!bound) return tl::unexpected(std::move(bound.error()));
  return BoundOptions(std::move(*bound));
}

/// The typed options T that config/ bound (`bound`), or, for a spec built without config/
/// (`bound` empty), those `bind` (BindResult()) makes now; a problem then becomes a kConfig
/// error "<what>: <option>: <message>".
template <typename T, typename Bind>
Result<T> BoundOrBind(const BoundOptions& bound, Bind&& bind, std::string_view what) {
  if (const T* typed = std::any_cast<T>(&bound)) return *typed;
  BindResult fresh = bind();
  if (!fresh) {
    return MakeError(ErrorCode::kConfig, "{}: {}", what, ProblemText(fresh.error()));
  }
  return std::any_cast<T>(std::move(*fresh));
}

/// True for option names whose values must never be printed (password, secret, key, token...).
bool IsSecretOptionName(std::string_view name);

}  // namespace driftd
