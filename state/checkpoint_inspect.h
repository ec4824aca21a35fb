// `driftd inspect`: a report of what a checkpoint holds, for operators. Opens the checkpoint
// read-only (safe while a daemon is writing it), so it never changes the checkpoint.
#pragma once

#include <string>

#include "engine/result.h"

namespace driftd {

/// Human-readable report for `driftd inspect CHECKPOINT`: pipeline name, fingerprint, last batch
/// id and time, its start/end offsets, watermark, state key count and bytes, outbox entries
/// (batch ids and pending sinks), and the recent commit history (last 10).
/// json=true: one JSON object with the same facts (camelCase keys, times as epoch ms and
/// ISO-8601 UTC, offsets and fingerprint as JSON objects, absent facts as null).
/// Every block of every table file is read and its checksum checked first: a damaged checkpoint
/// is kCorruption (exit code 74), as it would be for the daemon.
Result<std::string> InspectCheckpoint(const std::string& directory, bool json);

}  // namespace driftd
