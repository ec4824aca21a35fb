#include "connectors/registry.h"

#include <fmt/format.h>

#include "connectors/connector_factories.h"
#include "engine/aggregates.h"

namespace driftd {

// The source kinds, one line each: <Name>Decl() is defined in the kind's own file (its name,
// options with types, ranges and defaults, traits, bind and factory).
#define DRIFTD_SOURCE_KINDS(X) \
  X(KafkaSource)               \
  X(FileSource)                \
  X(RateSource)                \
  X(SocketSource)              \
  X(StdinSource)

// The sink kinds, one line each: <Name>Decl() is defined in the kind's own file (its name,
// options with types, ranges and defaults, bind and factory: BindSink, or BindSharedSink for
// a kind whose sinks share one Sink).
#define DRIFTD_SINK_KINDS(X) \
  X(KafkaSink)               \
  X(FileSink)                \
  X(ConsoleSink)             \
  X(WebhookSink)

#define DRIFTD_DECLARE_KIND(name) ConnectorDecl name##Decl();
DRIFTD_SOURCE_KINDS(DRIFTD_DECLARE_KIND)
DRIFTD_SINK_KINDS(DRIFTD_DECLARE_KIND)
#undef DRIFTD_DECLARE_KIND

// Every connector of the daemon: config/, validate, the fingerprint, `driftd reference`,
// progress and the executor find a kind here by its name. A new source or sink is its file
// plus one line in DRIFTD_SOURCE_KINDS or DRIFTD_SINK_KINDS.
const ConnectorCatalog& ConnectorDeclarations() {
#define DRIFTD_KIND_ENTRY(name) name##Decl(),
  static const ConnectorCatalog catalog = {DRIFTD_SOURCE_KINDS(DRIFTD_KIND_ENTRY)
                                               DRIFTD_SINK_KINDS(DRIFTD_KIND_ENTRY)};
#undef DRIFTD_KIND_ENTRY
  return catalog;
}

const ConnectorDecl* FindSourceKind(std::string_view format) {
  return FindConnector(ConnectorDeclarations(), format, ConnectorRole::kSource);
}

const ConnectorDecl* FindSinkKind(std::string_view format) {
  return FindConnector(ConnectorDeclarations(), format, ConnectorRole::kSink);
}

Result<std::unique_ptr<Source>> CreateSource(const PipelineSpec& pipeline) {
  const ConnectorDecl* kind = FindSourceKind(pipeline.source.format);
  if (kind == nullptr || !kind->create_source) {
    return MakeError(ErrorCode::kConfig, "unknown source format '{}'", pipeline.source.format);
  }
  return kind->create_source(pipeline);
}

tl::expected<std::vector<std::unique_ptr<Sink>>, SinkFailure> MakeSinks(
    const PipelineSpec& pipeline, Source* source) {
  std::vector<std::unique_ptr<Sink>> sinks;
  // Kinds whose sinks share one Sink, with their specs, in catalog order.
  std::vector<std::pair<const ConnectorDecl*, std::vector<const SinkSpec*>>> shared;
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    if (decl.role == ConnectorRole::kSink && decl.create_shared_sink) shared.push_back({&decl, {}});
  }
  for (const SinkSpec& spec : pipeline.sinks) {
    auto failed = [&](Error error) { return tl::unexpected(SinkFailure{std::move(error), &spec}); };
    const ConnectorDecl* kind = FindSinkKind(spec.format);
    if (kind == nullptr || (!kind->create_sink && !kind->create_shared_sink)) {
      return failed(
          Error(ErrorCode::kConfig, fmt::format("unknown sink format '{}'", spec.format)));
    }
    if (kind->create_shared_sink) {
      for (auto& [decl, specs] : shared) {
        if (decl == kind) specs.push_back(&spec);
      }
      continue;
    }
    if (!kind->value_formats && spec.value_format != "json") {
      return failed(Error(ErrorCode::kConfig,
                          fmt::format("the {} sink writes rows as JSON; valueFormat {} applies "
                                      "to sinks that write one message per row (kafka)",
                                      spec.format, spec.value_format)));
    }
    auto sink = kind->create_sink(pipeline, spec);
    if (!sink) return failed(std::move(sink.error()));
    sinks.push_back(std::move(*sink));
  }
  for (auto& [decl, specs] : shared) {
    if (specs.empty() && !(pipeline.scale_out.enabled && decl->carries_scale_out)) continue;
    auto sink = decl->create_shared_sink(pipeline, specs, source, ValueFormats());
    if (!sink) {
      SinkFailure failure = std::move(sink.error());
      if (failure.sink == nullptr) failure.error = failure.error.Wrap(decl->format + " sink");
      return tl::unexpected(std::move(failure));
    }
    sinks.push_back(std::move(*sink));
  }
  return sinks;
}

Result<std::vector<std::unique_ptr<Sink>>> CreateSinks(const PipelineSpec& pipeline,
                                                       Source* source) {
  auto sinks = MakeSinks(pipeline, source);
  if (sinks) return std::move(*sinks);
  const SinkFailure& failure = sinks.error();
  if (failure.sink == nullptr) return tl::unexpected(failure.error);
  return tl::unexpected(failure.error.Wrap(fmt::format("sink '{}'", failure.sink->name)));
}

namespace {

void AppendOptionTable(std::string& out, const std::vector<OptionDecl>& options,
                       std::string_view passthrough_prefix = {}) {
  out += "| option | type | default | description |\n|---|---|---|---|\n";
  for (const OptionDecl& option : options) {
    std::string type(OptionTypeName(option.type));
    if (option.type == OptionType::kEnum) {
      type.clear();
      for (const auto& choice : option.choices) {
        type += (type.empty() ? "" : " \\| ") + choice;
      }
    }
    if (option.min && option.max) {
      type += fmt::format(", {} to {}", *option.min, *option.max);
    } else if (option.min) {
      type += fmt::format(", at least {}", *option.min);
    } else if (option.max) {
      type += fmt::format(", at most {}", *option.max);
    }
    std::string default_value = option.required ? "(required)"
                                : option.default_value.empty()
                                    ? "(unset)"
                                    : fmt::format("`{}`", option.default_value);
    out += fmt::format("| `{}` | {} | {} | {} |\n", option.name, type, default_value, option.doc);
  }
  if (!passthrough_prefix.empty()) {
    out += fmt::format("| `{}*` | string | | passed through to the client library |\n",
                       passthrough_prefix);
  }
}

}  // namespace

std::string ConnectorReferenceMarkdown() {
  std::string out;
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    out += fmt::format("### `{}` {}\n\n{}\n\n", decl.format,
                       decl.role == ConnectorRole::kSource ? "source" : "sink", decl.doc);
    AppendOptionTable(out, decl.options, decl.passthrough_prefix);
    if (decl.value_formats) {
      out += "\nEach row's record value is written in the sink's `valueFormat` (default `json`), "
             "with its `valueOptions`: see the value formats below.\n";
    }
    out += "\n";
  }
  for (const ValueFormatDecl& format : ValueFormats()) {
    out += fmt::format("### `{}` value format\n\n{}\n\n", format.name, format.doc);
    if (format.options.empty()) {
      out += "Read by a source (`source.valueFormat`); no `source.valueOptions`.\n\n";
    } else {
      out += "Read by a source: `source.valueOptions`\n\n";
      AppendOptionTable(out, format.options);
      out += "\n";
    }
    if (!format.create_encoder) {
      out += "Sinks cannot write it.\n\n";
    } else if (format.sink_options.empty()) {
      out += "Written by a sink (`sinks[].valueFormat`); no `sinks[].valueOptions`.\n\n";
    } else {
      out += "Written by a sink: `sinks[].valueOptions`\n\n";
      AppendOptionTable(out, format.sink_options);
      out += "\n";
    }
  }
  out += "### Aggregate functions\n\n`query.aggregates` takes these (engine/aggregates.h); an "
         "aggregate of an `array<double>` column is taken per element.\n\n"
         "| function | also written | result | description |\n|---|---|---|---|\n";
  for (const AggregateDecl& kind : AggregateKinds()) {
    std::string aliases;
    for (std::string_view alias : kind.aliases) {
      aliases += fmt::format("{}`{}`", aliases.empty() ? "" : ", ", alias);
    }
    const std::string_view result = kind.counts_rows ? "integer"
                                    : kind.state == AggregateState::kSketch
                                        ? "number; an array for array(p, ...)"
                                        : "number (null without values)";
    out += fmt::format("| `{}` | {} | {} | {} |\n", kind.name, aliases, result, kind.doc);
  }
  out += "\n";
  return out;
}

}  // namespace driftd
