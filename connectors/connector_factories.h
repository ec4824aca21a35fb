// Declarations and factories of the individual connectors; only registry.cc calls these.
#pragma once

#include <memory>
#include <vector>

#include "engine/sink.h"
#include "engine/source.h"
#include "engine/options.h"
#include "engine/pipeline_spec.h"
#include "engine/value_decoder.h"

namespace driftd {

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
