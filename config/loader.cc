// Pipeline files read and checked: ParsePipeline runs the parser (config/loader_parser.h) over
// the YAML and returns the PipelineSpec or every problem; the parser's construction, the order
// of the sections and the rules across sections are here.
#include "config/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/loader_parser.h"
#include "config/yaml_precheck.h"
#include "engine/redact.h"

namespace driftd {
namespace loader_detail {
namespace {

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

}  // namespace

bool IsValidName(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

std::string Join(const std::vector<std::string_view>& words) {
  std::string out;
  for (std::string_view word : words) {
    if (!out.empty()) out += ", ";
    out += word;
  }
  return out;
}

bool ReadUpTo(std::istream& in, size_t max_bytes, std::string& text) {
  char block[64 * 1024];
  while (text.size() <= max_bytes && in.read(block, sizeof block).gcount() > 0) {
    text.append(block, static_cast<size_t>(in.gcount()));
  }
  return !in.bad();
}

PipelineParser::PipelineParser(const LoadOptions& options, Problems& problems,
                               std::string_view text)
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

PipelineSpec PipelineParser::Parse(const YAML::Node& root, std::string_view file_name) {
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
  // The connectors bind options that passed the file's own checks (a bind would only repeat a
  // problem already reported in other words).
  if (problems_.errors().empty()) {
    BindSources();
    BindSinks();
  }
  return spec_;
}

void PipelineParser::CheckOutputModes() {
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

void PipelineParser::CheckDeadLetter() {
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
void PipelineParser::BindSources() {
  if (!options_.catalog) return;
  auto bind = [&](const PipelineSpec& pipeline, SourceSpec& source, const std::string& prefix) {
    const ConnectorDecl* decl =
        FindConnector(*options_.catalog, source.format, ConnectorRole::kSource);
    if (decl == nullptr || !decl->bind) return;
    BindResult bound = decl->bind(pipeline, pipeline.source);
    if (bound) {
      source.bound = std::move(*bound);
      return;
    }
    ReportOptionProblem(bound.error(), prefix + ".options", source.option_marks, source.mark);
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
    // engine/executor/performance_stage.h): their schema, no query and no sinks, scaled out
    // as the query is.
    PipelineSpec labels;
    labels.name = spec_.name;
    labels.file = spec_.file;
    labels.schema = spec_.labels.schema;
    labels.source = spec_.labels.source;
    labels.checkpoint_location = spec_.checkpoint_location;
    labels.secrets = spec_.secrets;
    labels.scale_out = spec_.scale_out;
    bind(labels, spec_.labels.source, "labels.source");
  }
}

// Each sink's options parsed once by its kind (ConnectorDecl::bind_sink), in the order of the
// file, so that a rule between two sinks is found by the later one's bind; what run creates the
// sinks from. A problem is reported at the option it names, with the line the parser recorded.
void PipelineParser::BindSinks() {
  if (!options_.catalog) return;
  for (size_t i = 0; i < spec_.sinks.size(); ++i) {
    SinkSpec& sink = spec_.sinks[i];
    const ConnectorDecl* decl = FindConnector(*options_.catalog, sink.format, ConnectorRole::kSink);
    if (decl == nullptr || !decl->bind_sink) continue;
    BindResult bound = decl->bind_sink(spec_, sink);
    if (bound) {
      sink.bound = std::move(*bound);
      continue;
    }
    ReportOptionProblem(bound.error(), fmt::format("sinks[{}].options", i), sink.option_marks,
                        sink.mark);
  }
}

void PipelineParser::ReportOptionProblem(const OptionProblem& problem, const std::string& prefix,
                                         const std::map<std::string, SourceMark>& marks,
                                         SourceMark anchor) {
  if (problem.option.empty()) {
    problems_.Error(prefix, anchor, problem.message);
    return;
  }
  auto mark = marks.find(problem.option);
  problems_.Error(fmt::format("{}.{}", prefix, problem.option),
                  mark != marks.end() ? mark->second : anchor, problem.message);
}

// A sink writing where the source reads would read its own output back, again and again;
// two sinks writing into one directory would mix their files and manifests. Paths are
// compared as absolute, with symbolic links of existing parts resolved.
void PipelineParser::CheckPaths() {
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

void PipelineParser::CheckStreams() {
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

}  // namespace loader_detail

namespace {

using config_detail::Problems;
using loader_detail::PipelineParser;

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
  std::string text;
  if (!loader_detail::ReadUpTo(in, max_bytes, text)) {
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
