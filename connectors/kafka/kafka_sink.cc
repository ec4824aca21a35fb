// Placeholder until the kafka sink lands: declares the format, refuses to run.
#include "connectors/connector_factories.h"

namespace driftd {

ConnectorDecl KafkaSinkDecl() {
  ConnectorDecl decl;
  decl.format = "kafka";
  decl.role = ConnectorRole::kSink;
  decl.doc = "not yet available";
  return decl;
}

Result<std::unique_ptr<Sink>> CreateKafkaSink(const PipelineSpec&, const std::vector<const SinkSpec*>&) {
  return MakeError(ErrorCode::kConfig, "the kafka sink is not available in this build");
}

}  // namespace driftd
