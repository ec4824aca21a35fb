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
    if (spec.format == "file") sink = CreateFileSink(pipeline, spec);
    if (spec.format == "console") sink = CreateConsoleSink(pipeline, spec);
    if (spec.format == "webhook") sink = CreateWebhookSink(pipeline, spec);
    if (!sink) return tl::unexpected(sink.error().Wrap(fmt::format("sink '{}'", spec.name)));
    sinks.push_back(std::move(*sink));
  }
  if (!kafka_specs.empty() || pipeline.scale_out.enabled) {
    auto sink = CreateKafkaSink(pipeline, kafka_specs, source);
    if (!sink) return tl::unexpected(sink.error().Wrap("kafka sink"));
    sinks.push_back(std::move(*sink));
  }
  return sinks;
}

std::string ConnectorReferenceMarkdown() {
  std::string out;
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    out += fmt::format("### `{}` {}\n\n{}\n\n", decl.format,
                       decl.role == ConnectorRole::kSource ? "source" : "sink", decl.doc);
    out += "| option | type | default | description |\n|---|---|---|---|\n";
    for (const OptionDecl& option : decl.options) {
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
      out += fmt::format("| `{}` | {} | {} | {} |\n", option.name, type, default_value,
                         option.doc);
    }
    if (!decl.passthrough_prefix.empty()) {
      out += fmt::format("| `{}*` | string | | passed through to the client library |\n",
                         decl.passthrough_prefix);
    }
    out += "\n";
  }
  return out;
}

}  // namespace driftd
