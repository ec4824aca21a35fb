#include "cmd/driftd/demo.h"

#include "cmd/driftd/demo_pipeline.inc"

namespace driftd {

std::string_view DemoPipelineYaml() { return kDemoPipelineYaml; }

}  // namespace driftd
