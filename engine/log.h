// Named loggers, one per module ("engine", "kafka", "state", ...). All share the sinks and
// format that cmd/driftd sets up (readable text, or JSON lines with --log-format json).
#pragma once

#include <memory>
#include <string_view>

#include <spdlog/spdlog.h>

namespace driftd {

/// The logger of `module`, created on first use with the default logger's sinks.
std::shared_ptr<spdlog::logger> GetLogger(std::string_view module);

}  // namespace driftd
