// The source, inputs and sinks sections of a pipeline file: connectors, value formats and the
// malformed-record policy (PipelineParser, config/loader_parser.h).
#include "config/loader_parser.h"

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/connector_options.h"
#include "config/suggest.h"
#include "engine/row_shape.h"

namespace driftd::loader_detail {

namespace {

const std::vector<std::pair<std::string_view, MalformedPolicy>> kPolicies = {
    {"permissive", MalformedPolicy::kPermissive},
    {"drop", MalformedPolicy::kDrop},
    {"fail", MalformedPolicy::kFail},
    {"dead_letter", MalformedPolicy::kDeadLetter},
};

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

}  // namespace

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

// ---- source -------------------------------------------------------------------------------

void PipelineParser::ParseSource(const MapReader& top) {
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
void PipelineParser::ParseInputs(const MapReader& top) {
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
      } else if (!names.insert(name->value).second || name->value == "main" ||
                 name->value == "labels") {
        // "labels" prefixes the labels input's offsets (and names it in progress records).
        problems_.Error(name->path, name->mark,
                        fmt::format("input name {} is used twice (\"main\" is the source's, "
                                    "\"labels\" the labels input's)",
                                    Show(*name)));
      }
      spec.name = name->value;
    }
    ParseSourceFields(input, path, spec.source, /*main=*/false);
    spec_.inputs.push_back(std::move(spec));
  }
}

// format, options, malformed, valueFormat and valueOptions of an input, at `path`.
void PipelineParser::ParseSourceFields(const MapReader& source, const std::string& path,
                                       SourceSpec& target, bool main) {
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

void PipelineParser::ParseValueFormat(const MapReader& source, const std::string& path,
                                      SourceSpec& spec, bool main) {
  const ValueFormatDecl* found = nullptr;
  bool ok = ParseValueFormatOf(source, path, spec, found);
  if (main) {
    value_format_ok_ = ok;
    value_format_decl_ = found;
  } else if (ok) {
    CheckInputValueFormat(path, spec, found);
  }
}

// The checks CheckValueFormat makes for the source, made at once for another input.
void PipelineParser::CheckInputValueFormat(const std::string& path, const SourceSpec& source,
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

bool PipelineParser::ParseValueFormatOf(const MapReader& source, const std::string& path,
                                        SourceSpec& spec,
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
    const size_t errors = problems_.error_count();
    spec.value_options = config_detail::ReadConnectorOptions(
        reader_, source, &decl, fmt::format("{} value format", decl.format),
        &spec.value_option_marks, "valueOptions");
    // Bound once, here, as the decoder is made of them at start (ValueFormatDecl::bind).
    if (problems_.error_count() == errors) {
      BindResult bound = value_format_decl->bind(spec.value_options);
      if (!bound) {
        ReportValueOptionProblem(
            bound.error(), path, spec.value_option_marks,
            spec.value_format_mark.line > 0 ? spec.value_format_mark : spec.mark);
        return false;
      }
      spec.value_bound = std::move(*bound);
    }
  } else {
    spec.value_options = config_detail::ReadConnectorOptions(
        reader_, source, nullptr, "json value format", &spec.value_option_marks,
        "valueOptions");
  }
  return true;
}

// The value format's own checks (its files, the schema they must fit), once the schema and
// the source are read, reported at the option at fault.
void PipelineParser::CheckValueFormat() {
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
  // The schema or options may be incomplete.
  if (!problems_.errors().empty() || !source.value_bound.has_value()) return;
  auto decoder = value_format_decl_->create(spec_.schema, source.malformed, source.value_bound);
  if (decoder) return;
  ReportValueOptionProblem(
      decoder.error(), "source", source.value_option_marks,
      source.value_format_mark.line > 0 ? source.value_format_mark : source.mark);
}

// A value format's problem at <prefix>.valueOptions.<option>, with the option's mark (`anchor`
// for an option the file does not give), or at <prefix>.valueFormat for the format as a whole.
void PipelineParser::ReportValueOptionProblem(const ValueFormatProblem& problem,
                                              const std::string& prefix,
                                              const std::map<std::string, SourceMark>& marks,
                                              SourceMark anchor) {
  if (problem.option.empty()) {
    problems_.Error(prefix + ".valueFormat", anchor, problem.message);
    return;
  }
  auto mark = marks.find(problem.option);
  problems_.Error(fmt::format("{}.valueOptions.{}", prefix, problem.option),
                  mark != marks.end() ? mark->second : anchor, problem.message);
}

bool PipelineParser::CheckFormat(const Scalar& format, ConnectorRole role,
                                 const ConnectorDecl** decl) {
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

void PipelineParser::ParseMalformed(const MapReader& source, const std::string& path,
                                    SourceSpec& target, bool main) {
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

// ---- sinks --------------------------------------------------------------------------------

void PipelineParser::ParseSinks(const MapReader& top) {
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
      } else if (const ConnectorDecl* shared =
                     options_.catalog ? FindConnector(*options_.catalog, name->value,
                                                      ConnectorRole::kSink)
                                      : nullptr;
                 shared != nullptr && shared->create_shared_sink && sink.format != shared->format) {
        // The sinks of such a format deliver together, under the format's name (the outbox
        // records a batch as pending for it): another sink of that name would be taken for
        // them, and a batch marked delivered when it alone had it.
        problems_.Error(name->path, name->mark,
                        fmt::format("sink name {} is the name the {} sinks deliver under "
                                    "together; name this {} sink otherwise",
                                    Show(*name), shared->format, sink.format));
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
void PipelineParser::ParseSinkValueFormat(const MapReader& map, const ConnectorDecl* decl,
                                          SinkSpec& sink, SinkInfo& info) {
  if (!map.Has("valueFormat") && !map.Has("valueOptions")) {
    // The default format's options (none), bound as any other's for the sink's encoder.
    const ValueFormatDecl* json =
        options_.value_formats != nullptr && decl != nullptr && decl->value_formats
            ? FindValueFormat(*options_.value_formats, sink.value_format)
            : nullptr;
    if (json == nullptr || !json->bind_sink) return;
    if (BindResult bound = json->bind_sink(sink.value_options)) {
      sink.value_bound = std::move(*bound);
    }
    return;
  }
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
  const size_t errors = problems_.error_count();
  sink.value_options = config_detail::ReadConnectorOptions(
      reader_, map, info.value_format != nullptr ? &options_decl : nullptr,
      fmt::format("{} value format of a sink", sink.value_format), &sink.value_option_marks,
      "valueOptions");
  // Bound once, here, as the sink's encoder is made of them (ValueFormatDecl::bind_sink).
  if (info.value_format == nullptr || problems_.error_count() != errors) return;
  BindResult bound = info.value_format->bind_sink(sink.value_options);
  if (!bound) {
    ReportValueOptionProblem(bound.error(), map.path(), sink.value_option_marks,
                             sink.value_format_mark.line > 0 ? sink.value_format_mark : sink.mark);
    info.value_format = nullptr;  // nothing more to check of it
    return;
  }
  sink.value_bound = std::move(*bound);
}

// Each sink value format's own checks (its schema file, the rows it must cover), once
// everything is read, reported at the option at fault: validate refuses what the sink's
// first delivery would.
void PipelineParser::CheckSinkValueFormats() {
  if (!problems_.errors().empty()) return;  // the query or the options may be incomplete
  for (size_t i = 0; i < spec_.sinks.size() && i < sink_info_.size(); ++i) {
    const SinkSpec& sink = spec_.sinks[i];
    const ValueFormatDecl* decl = sink_info_[i].value_format;
    if (decl == nullptr || !decl->create_encoder || !sink.value_bound.has_value()) continue;
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
    auto encoder = decl->create_encoder(context, sink.value_bound);
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

}  // namespace driftd::loader_detail
