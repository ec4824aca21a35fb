// Placeholder until the file sink lands: declares the format, refuses to run.
#include "connectors/connector_factories.h"

namespace driftd {

ConnectorDecl FileSinkDecl() {
  ConnectorDecl decl;
  decl.format = "file";
  decl.role = ConnectorRole::kSink;
  decl.doc = "not yet available";
  return decl;
}

Result<std::unique_ptr<Sink>> CreateFileSink(const PipelineSpec&, const SinkSpec&) {
  return MakeError(ErrorCode::kConfig, "the file sink is not available in this build");
}

}  // namespace driftd
