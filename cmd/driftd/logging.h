// Log set-up for the daemon: readable text (default) or JSON lines on stderr.
#pragma once

#include <string_view>

namespace driftd {

/// format: "text" or "json"; level: trace, debug, info, warn, error.
void SetUpLogging(std::string_view format, std::string_view level);

}  // namespace driftd
