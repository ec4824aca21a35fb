// Placeholder until the file source lands: declares the format, refuses to run.
#include "connectors/connector_factories.h"

namespace driftd {

ConnectorDecl FileSourceDecl() {
  ConnectorDecl decl;
  decl.format = "file";
  decl.role = ConnectorRole::kSource;
  decl.doc = "not yet available";
  return decl;
}

Result<std::unique_ptr<Source>> CreateFileSource(const PipelineSpec&) {
  return MakeError(ErrorCode::kConfig, "the file source is not available in this build");
}

}  // namespace driftd
