// What a query's start checks before it touches anything, run when a pipeline file is loaded:
// the connectors' factories (every option value, and the rules between options that only a
// connector knows: startingOffsets' words, negative limits, Kafka sinks sharing one producer,
// ...) and the drift stage's set-up (detectors, a file baseline). `driftd validate`, `run` and
// every reload refuse a pipeline that fails them, each problem with the YAML path and line of
// the option at fault, so that validate passes exactly what run starts.
//
// Thread-safety: reentrant; called from the control thread or the CLI.
#pragma once

#include <vector>

#include "config/loader.h"
#include "engine/pipeline_spec.h"

namespace driftd {

/// The problems (errors) a start of `spec` would stop at; empty when it would start. Creates
/// and destroys the source, sinks and drift stage without opening them: no file is written, no
/// connection made.
std::vector<ConfigProblem> PreflightProblems(const PipelineSpec& spec);

}  // namespace driftd
