// Placeholder until the socket source lands: declares the format, refuses to run.
#include "connectors/connector_factories.h"

namespace driftd {

ConnectorDecl SocketSourceDecl() {
  ConnectorDecl decl;
  decl.format = "socket";
  decl.role = ConnectorRole::kSource;
  decl.doc = "not yet available";
  return decl;
}

Result<std::unique_ptr<Source>> CreateSocketSource(const PipelineSpec&) {
  return MakeError(ErrorCode::kConfig, "the socket source is not available in this build");
}

}  // namespace driftd
