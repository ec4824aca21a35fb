// Placeholder until the console sink lands: declares the format, refuses to run.
#include "connectors/connector_factories.h"

namespace driftd {

ConnectorDecl ConsoleSinkDecl() {
  ConnectorDecl decl;
  decl.format = "console";
  decl.role = ConnectorRole::kSink;
  decl.doc = "not yet available";
  return decl;
}

Result<std::unique_ptr<Sink>> CreateConsoleSink(const PipelineSpec&, const SinkSpec&) {
  return MakeError(ErrorCode::kConfig, "the console sink is not available in this build");
}

}  // namespace driftd
