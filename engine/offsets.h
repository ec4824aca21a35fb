// Source offsets as the executor and the checkpoint see them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "engine/result.h"

namespace driftd {

/// Positions of a source, by partition name ("topic-3", a file path, "rate-0"). A source may
/// keep extra entries of its own (e.g. the rate source's start time). Stored in the checkpoint.
using SourceOffsets = std::map<std::string, int64_t>;

/// {"inference-logs-0":1742,"inference-logs-1":1690}
std::string OffsetsToJson(const SourceOffsets& offsets);
Result<SourceOffsets> OffsetsFromJson(std::string_view json);

}  // namespace driftd
