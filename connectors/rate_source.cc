// Placeholder until the rate source lands: declares the format, refuses to run.
#include "connectors/connector_factories.h"

namespace driftd {

ConnectorDecl RateSourceDecl() {
  ConnectorDecl decl;
  decl.format = "rate";
  decl.role = ConnectorRole::kSource;
  decl.doc = "not yet available";
  return decl;
}

Result<std::unique_ptr<Source>> CreateRateSource(const PipelineSpec&) {
  return MakeError(ErrorCode::kConfig, "the rate source is not available in this build");
}

}  // namespace driftd
