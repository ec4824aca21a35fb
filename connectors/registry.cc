#include "connectors/registry.h"

#include <fmt/format.h>

#include "connectors/connector_factories.h"

namespace driftd {

const ConnectorCatalog& ConnectorDeclarations() {
  static const ConnectorCatalog catalog = {
      KafkaSourceDecl(), FileSourceDecl(), RateSourceDecl(), SocketSourceDecl(),
      KafkaSinkDecl(),   FileSinkDecl(),   ConsoleSinkDecl(),  WebhookSinkDecl(),
  };
  return catalog;
}

Result<std::unique_ptr<Source>> CreateSource(const PipelineSpec& pipeline) {
  const std::string& format = pipeline.source.format;
  if (format == "file") return CreateFileSource(pipeline);
  if (format == "rate") return CreateRateSource(pipeline);
  if (format == "socket") return CreateSocketSource(pipeline);
  if (format == "kafka") return CreateKafkaSource(pipeline);
  return MakeError(ErrorCode::kConfig, "unknown source format '{}'", format);
}

Result<std::vector<std::unique_ptr<Sink>>> CreateSinks(const PipelineSpec& pipeline,
                                                       Source* source) {
  std::vector<std::unique_ptr<Sink>> sinks;
  std::vector<const SinkSpec*> kafka_specs;
  for (const SinkSpec& spec : pipeline.sinks) {
    Result<std::unique_ptr<Sink>> sink = MakeError(ErrorCode::kConfig, "unknown sink format '{}'",
                                                   spec.format);
    if (spec.format == "kafka") {
      kafka_specs.push_back(&spec);
      continue;
    }
    if (spec.value_format != "json") {
      return MakeError(ErrorCode::kConfig,
                       "sink '{}': the {} sink writes rows as JSON; valueFormat {} applies to "
                       "sinks that write one message per row (kafka)",
                       spec.name, spec.format, spec.value_format);
    }
    if (spec.format == "file") sink = CreateFileSink(pipeline, spec);
    if (spec.format == "console") sink = CreateConsoleSink(pipeline, spec);
    if (spec.format == "webhook") sink = CreateWebhookSink(pipeline, spec);
    if (!sink) return tl::unexpected(sink.error().Wrap(fmt::format("sink '{}'", spec.name)));
    sinks.push_back(std::move(*sink));
  }
  if (!kafka_specs.empty() || pipeline.scale_out.enabled) {
    auto sink = CreateKafkaSink(pipeline, kafka_specs, source, ValueFormats());
    if (!sink) return tl::unexpected(sink.error().Wrap("kafka sink"));
    sinks.push_back(std::move(*sink));
  }
  return sinks;
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
  return out;
}

}  // namespace driftd
