// Loads pipeline files: YAML -> a validated PipelineSpec. Every problem in a file is reported at
// once, each naming its YAML path ("sinks[1].options.topic") and line. The file format is
// described in config/README.md. yaml-cpp stays private to config/: nothing here throws.
//
// Thread-safety: the functions are reentrant; LoadOptions::env is called from the caller's thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "config/interpolate.h"
#include "engine/options.h"
#include "engine/pipeline_spec.h"
#include "engine/value_decoder.h"

namespace driftd {

enum class ProblemSeverity {
  kError,    // the pipeline is rejected
  kWarning,  // the pipeline runs, but probably not as the user meant
};

struct ConfigProblem {
  /// YAML path of the offending value, e.g. "sinks[1].options.topic"; empty for the whole file.
  std::string path;
  /// Where in the file (1-based); line 0 when the problem has no single place.
  SourceMark mark;
  /// What was found, what was expected, and "did you mean 'X'?" for a misspelt key. Values of
  /// secret options (and of secret environment variables) are never included.
  std::string message;
  ProblemSeverity severity = ProblemSeverity::kError;
};

struct LoadOptions {
  /// Declarations that source and sink options are checked against (connectors'
  /// ConnectorDeclarations() in the daemon). Default: nullptr, which skips format and option
  /// validation and passes options through unchecked (for tools that only read a file).
  const ConnectorCatalog* catalog = nullptr;
  /// The value formats source.valueFormat may name, whose options and files are checked
  /// (connectors' ValueFormats() in the daemon). Default: nullptr, which accepts only the
  /// default format, json, and leaves source.valueOptions unchecked.
  const ValueFormatCatalog* value_formats = nullptr;
  /// Reads a file baseline's reference (drift.baseline.path, relative to the pipeline file)
  /// into BaselineSpec::reference, in bounded time and memory: a missing, unreadable or
  /// oversized file is a problem at the path's line. Off for a tool that writes that very file
  /// (`driftd baseline build`). Default: true.
  bool read_references = true;
  /// Resolves ${VAR} references. Default: the process environment.
  EnvLookup env = ProcessEnv();
  /// When set, receives the warnings of a file that loaded (on failure, warnings are returned
  /// together with the errors). Default: nullptr (warnings dropped).
  std::vector<ConfigProblem>* warnings = nullptr;
};

using PipelineResult = tl::expected<PipelineSpec, std::vector<ConfigProblem>>;

/// Parses and validates a pipeline held in memory. `file_name` is recorded in PipelineSpec::file.
/// On failure, every problem found (errors, then any warnings), ordered by line.
PipelineResult ParsePipeline(std::string_view yaml, std::string_view file_name,
                             const LoadOptions& options);

/// The text of a pipeline file, read in bounded time and memory: a file that is not a regular
/// file (a FIFO, a device, a directory) or is unreadable is kIo, one larger than 1 MiB kConfig.
Result<std::string> ReadPipelineText(const std::string& path);

/// Reads `path` (ReadPipelineText) and parses it as ParsePipeline does; a file that cannot be
/// read is one problem.
PipelineResult LoadPipelineFile(const std::string& path, const LoadOptions& options);

/// One line per problem, compiler style ("file:line:column: path: message"), e.g.
///   p.yaml:12:5: sinks[0].options.topc: unknown option 'topc' for the kafka sink; did you mean ...
/// Warnings carry "warning: " before the message. Ends with a newline unless empty.
std::string FormatProblems(std::string_view file, const std::vector<ConfigProblem>& problems);

/// What a checkpoint's state depends on, as canonical JSON (fixed key order, no whitespace):
/// source format and identity options (path, subscribe, subscribePattern, assign), schema,
/// groupBy, window, aggregates, and the drift model column, series, baseline, detector kinds and
/// bins. Not included, because changing them leaves state readable: trigger, watermark delay,
/// thresholds, hysteresis, cooldown, overrides, sinks, malformed-record policy, other options.
std::string PipelineFingerprintJson(const PipelineSpec& spec);

/// The pipeline's name as its checkpoint keeps it: a secret in it (`name: hooks-${TOKEN}`) as
/// the fingerprint keeps one, `<redacted:DIGEST>`, so the checkpoint never holds it in clear and
/// another secret still makes another name.
std::string CheckpointPipelineName(const PipelineSpec& spec);

/// scaleOut.instance when it is not given: $HOSTNAME (a Kubernetes pod's name), else the host
/// name, with characters a name may not hold replaced by '_'.
std::string DefaultInstanceName(const EnvLookup& env);

/// The default checkpoint location of a pipeline without checkpointLocation:
/// "$STATE_DIRECTORY/<name>" (the first entry of systemd's StateDirectory= list) or
/// "/var/lib/driftd/<name>" when STATE_DIRECTORY is unset.
std::string DefaultCheckpointLocation(std::string_view pipeline_name, const EnvLookup& env);

}  // namespace driftd
