// The RocksDB checkpoint: one database per pipeline implementing engine/checkpoint.h's
// CheckpointStore. A batch's effects are written in one atomic, synced WriteBatch. No RocksDB
// type appears in this header; the layout is documented at the top of checkpoint_store.cc.
#pragma once

#include <memory>
#include <string>

#include "engine/checkpoint.h"
#include "engine/result.h"

namespace driftd {

/// Opens (creating if absent, unless options.read_only) the checkpoint in `directory`.
/// Thread-safety of the returned store: all methods from one thread at a time.
[[nodiscard]] Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
    const std::string& directory, const CheckpointOptions& options);

}  // namespace driftd
