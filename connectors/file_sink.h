// The `file` sink's on-disk layout and its reader. A batch N delivered by sink S is
//   <path>/part-<N, 10 digits>-<S>.jsonl        the rows, one JSON object per line (absent
//                                                when the batch had no rows)
//   <path>/_driftd_manifest/<N>                 {"batchId":N,"sink":S,"files":[...],"rows":k,
//                                                "bytes":b,"checkpoint":C}
// Both are written with temp file + fsync + rename (under the continuous trigger, without the
// fsyncs, which come once per trigger interval: Sink::DeferDurability). A manifest entry that
// exists, parses and whose part holds b bytes means N is delivered; part files without one are
// leftovers of an interrupted delivery and must be ignored (the re-delivery overwrites them). Readers should go through ReadCommittedFileSinkRows.
// C is the id of the checkpoint whose batch N it is: batch numbers start over with a new
// checkpoint, so a directory holding another checkpoint's batches is refused at open rather
// than taken as already delivered (entries without C, of older versions, are accepted).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace driftd {

inline constexpr std::string_view kFileSinkManifestDir = "_driftd_manifest";

/// "part-0000000042-stats.jsonl"; characters other than [A-Za-z0-9._-] in the sink name
/// become '_'.
std::string FileSinkPartName(int64_t batch_id, std::string_view sink_name);

/// Batch ids with a manifest entry in `path`, ascending. An absent directory has none.
Result<std::vector<int64_t>> ReadFileSinkManifest(const std::string& path);

/// The rows (JSON objects, no newline) of every committed batch in `path`, in batch order.
/// Parts without a manifest entry are ignored; a listed part that is missing is kCorruption.
Result<std::vector<std::string>> ReadCommittedFileSinkRows(const std::string& path);

}  // namespace driftd
