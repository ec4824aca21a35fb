// The connector registry: every source and sink format driftd knows, its option declarations,
// and a factory. config/ validates against Declarations(); the executor creates through it.
#pragma once

#include <memory>
#include <vector>

#include "engine/sink.h"
#include "engine/source.h"
#include "engine/options.h"
#include "engine/pipeline_spec.h"
#include "engine/value_decoder.h"

namespace driftd {

/// Declarations of every connector (sources and sinks), for validation and documentation.
const ConnectorCatalog& ConnectorDeclarations();

/// The source or sink kind named `format` (source.format, sinks[].format), or nullptr.
const ConnectorDecl* FindSourceKind(std::string_view format);
const ConnectorDecl* FindSinkKind(std::string_view format);

/// Creates the pipeline's source. The spec must have passed validation.
Result<std::unique_ptr<Source>> CreateSource(const PipelineSpec& pipeline);

/// Creates the pipeline's sinks from the options bound at load (SinkSpec::bound; a spec built
/// without config/ is bound now). Sinks of one format may share one Sink object (all Kafka
/// sinks share a transactional producer); each SinkSpec is served by exactly one returned Sink.
/// A scaled-out pipeline's Kafka sink shares the group of `source`, its Kafka source (and
/// exists even when no Kafka sink is configured: it writes the internal topics). A failure
/// says which sink could not be made (SinkFailure::sink), or none for a problem of a shared
/// Sink as a whole.
tl::expected<std::vector<std::unique_ptr<Sink>>, SinkFailure> MakeSinks(
    const PipelineSpec& pipeline, Source* source = nullptr);

/// MakeSinks, a failure told as an error that names the sink ("sink 'out': ...").
Result<std::vector<std::unique_ptr<Sink>>> CreateSinks(const PipelineSpec& pipeline,
                                                       Source* source = nullptr);

/// The value formats source.valueFormat may name (json, avro, protobuf), for validation,
/// documentation and the executor's decoder (connectors/format/).
const ValueFormatCatalog& ValueFormats();

/// Markdown reference of every connector's options, the value formats' and the aggregate
/// functions, generated from their declarations (`driftd reference`).
std::string ConnectorReferenceMarkdown();

}  // namespace driftd
