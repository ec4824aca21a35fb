// The built-in demo pipeline (deploy/examples/demo.yaml, embedded at build time).
#pragma once

#include <string_view>

namespace driftd {

std::string_view DemoPipelineYaml();

}  // namespace driftd
