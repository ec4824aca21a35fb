// Whose checkpoint this is, decided before a query uses it: the pipeline it belongs to, whether
// the pipeline changed in ways its saved state cannot serve (the fingerprint), its format (a
// format 1 checkpoint is migrated), its id (given once, when it is created), and whether it is
// behind what its sinks delivered (a copy or an older backup, which would deliver batches a
// second time).
//
// Called by the executor's Start, on its thread, before anything is read or delivered.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/sink.h"

namespace driftd {

/// 128 random bits in hex, unique without coordination: a checkpoint's id, a run's id.
std::string NewCheckpointId();

/// Checks the checkpoint's metadata against the pipeline, writing it on a first start and
/// migrating a checkpoint of format 1, and returns the checkpoint's id. `fingerprint_json`
/// empty: not compared. `checkpoint_name`: the name as the checkpoint keeps it (empty: the
/// pipeline's name). A refusal is kIncompatible and says what to do.
Result<std::string> ClaimCheckpoint(CheckpointStore& store, const PipelineSpec& spec,
                                    const std::string& fingerprint_json,
                                    const std::string& checkpoint_name);

/// Refuses a checkpoint whose last committed batch is `last_batch` when a sink has delivered a
/// later batch of it.
Status RefuseStaleCheckpoint(const std::vector<std::unique_ptr<Sink>>& sinks,
                             const PipelineSpec& spec, int64_t last_batch);

}  // namespace driftd
