// Declarations and factories of the individual connectors (registry.cc lists them), and how a
// connector declares that its options bind once (BindSource).
#pragma once

#include <any>
#include <memory>
#include <utility>
#include <vector>

#include "engine/sink.h"
#include "engine/source.h"
#include "engine/options.h"
#include "engine/pipeline_spec.h"
#include "engine/value_decoder.h"

namespace driftd {

/// Declares how a source of type-T options is bound and created, after decl.options is set:
/// `bind` sees the options with the declared ranges checked and the declared defaults filled in
/// (so it writes no default of its own) and makes T once; `create` makes the source from T.
/// config/ binds at load and keeps T in SourceSpec::bound; a spec built without config/ (a test,
/// a tool) is bound when created, by the same code.
template <typename T>
void BindSource(ConnectorDecl& decl,
                Bound<T> (*bind)(const PipelineSpec& pipeline, const SourceSpec& source,
                                 const Options& options),
                Result<std::unique_ptr<Source>> (*create)(const PipelineSpec& pipeline,
                                                          T options)) {
  decl.bind = [declared = decl.options, bind](const PipelineSpec& pipeline,
                                              const SourceSpec& source) -> BindResult {
    return BindDeclared<T>(declared, source.options,
                           [&](const Options& options) { return bind(pipeline, source, options); });
  };
  decl.create_source = [bind_source = decl.bind, what = decl.format + " source",
                        create](const PipelineSpec& pipeline) -> Result<std::unique_ptr<Source>> {
    Result<T> options = BoundOrBind<T>(
        pipeline.source.bound, [&] { return bind_source(pipeline, pipeline.source); }, what);
    if (!options) return tl::unexpected(std::move(options.error()));
    return create(pipeline, std::move(*options));
  };
}

ConnectorDecl FileSourceDecl();
ConnectorDecl RateSourceDecl();
ConnectorDecl SocketSourceDecl();
ConnectorDecl KafkaSourceDecl();
ConnectorDecl FileSinkDecl();
ConnectorDecl ConsoleSinkDecl();
ConnectorDecl KafkaSinkDecl();
ConnectorDecl WebhookSinkDecl();

Result<std::unique_ptr<Source>> CreateFileSource(const PipelineSpec& pipeline);
Result<std::unique_ptr<Source>> CreateRateSource(const PipelineSpec& pipeline);
Result<std::unique_ptr<Source>> CreateSocketSource(const PipelineSpec& pipeline);
Result<std::unique_ptr<Source>> CreateKafkaSource(const PipelineSpec& pipeline);

/// Each creates one Sink for the given specs (indices into pipeline.sinks).
Result<std::unique_ptr<Sink>> CreateFileSink(const PipelineSpec& pipeline, const SinkSpec& spec);
Result<std::unique_ptr<Sink>> CreateConsoleSink(const PipelineSpec& pipeline,
                                                const SinkSpec& spec);
Result<std::unique_ptr<Sink>> CreateWebhookSink(const PipelineSpec& pipeline,
                                                const SinkSpec& spec);
/// One Sink for all Kafka sinks of the pipeline (one transactional producer). Scaled out, it
/// also writes the query's internal topics in each transaction, with the group metadata of
/// `source` (the pipeline's Kafka source; required then); `specs` may then be empty.
/// Each Kafka sink's rows are encoded by its valueFormat, an entry of `formats`.
Result<std::unique_ptr<Sink>> CreateKafkaSink(const PipelineSpec& pipeline,
                                              const std::vector<const SinkSpec*>& specs,
                                              Source* source, const ValueFormatCatalog& formats);

}  // namespace driftd
