// Placeholder until the kafka source lands: declares the format, refuses to run.
#include "connectors/connector_factories.h"

namespace driftd {

ConnectorDecl KafkaSourceDecl() {
  ConnectorDecl decl;
  decl.format = "kafka";
  decl.role = ConnectorRole::kSource;
  decl.doc = "not yet available";
  return decl;
}

Result<std::unique_ptr<Source>> CreateKafkaSource(const PipelineSpec&) {
  return MakeError(ErrorCode::kConfig, "the kafka source is not available in this build");
}

}  // namespace driftd
