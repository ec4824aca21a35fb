// What a query's start checks before it touches anything, run when a pipeline file is loaded,
// after config/ bound every source's, sink's and value format's options (each problem of an
// option reported there, at its YAML path and line): the connectors' factories, for what
// concerns a source or a sink as a whole, and the drift stage's set-up (detectors, a file
// baseline). `driftd validate`, `run` and every reload refuse a pipeline that fails them, each
// problem at the mark of the source, input or sink it concerns (known from the factories'
// results, not from their messages), so that validate passes exactly what run starts.
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
