// Log set-up for the daemon: readable text (default) or JSON lines on stderr.
#pragma once

#include <string_view>

namespace driftd {

/// format: "text" or "json"; level: trace, debug, info, warn, error.
/// In JSON, a message that is this prefix followed by a JSON object (the per-batch progress
/// record, "progress {...}") is written as "msg":"progress" with the object itself under
/// "progress", so log tools read its fields without unescaping a string.
void SetUpLogging(std::string_view format, std::string_view level);

inline constexpr std::string_view kProgressLogPrefix = "progress ";

}  // namespace driftd
