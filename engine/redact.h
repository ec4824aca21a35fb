// Secret values known to the process, and their removal from every text that leaves it: log
// lines (every module's, librdkafka's included), error messages, progress records, HTTP bodies
// (/metrics labels, /progress, /readyz, ...), the service status and `driftd validate`'s output.
//
// The values come from pipeline files: config/ marks as secret the values of options whose
// names look secret and every value a secret environment variable went into (the substituted
// text, so that a URL or path keeps the rest of itself: ".../services/<redacted>"), and lists
// them in PipelineSpec::secrets; cmd/ registers them when it loads a pipeline. A value once
// registered stays registered for the life of the process.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/sinks/sink.h>

namespace driftd {

/// What a secret is replaced with.
inline constexpr std::string_view kRedacted = "<redacted>";

/// Values shorter than this are not redacted: replacing "1" or "on" everywhere would garble every
/// message, and such values are no secrets worth the name.
inline constexpr size_t kMinRedactedSize = 4;

/// Adds values to the process's secrets (shorter ones than kMinRedactedSize are ignored).
void RegisterSecrets(const std::vector<std::string>& values);

/// `text` with every registered secret replaced by <redacted>, longer secrets first.
std::string Redact(std::string_view text);

/// `text` with each of `secrets` replaced by `replacement(secret)`, longer secrets first.
std::string RedactWith(std::string_view text, const std::vector<std::string>& secrets,
                       std::string_view replacement = kRedacted);

/// A log sink that redacts each message (Redact) before `inner` formats and writes it; set the
/// pattern or formatter on the wrapper, it forwards them.
std::shared_ptr<spdlog::sinks::sink> MakeRedactingSink(std::shared_ptr<spdlog::sinks::sink> inner);

}  // namespace driftd
