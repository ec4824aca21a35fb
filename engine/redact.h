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
// A secret is also removed in the forms it takes inside other text (SecretForms): escaped in a
// JSON string or a Prometheus label (a `"` or `\` in it), percent-encoded in a URL, or decoded
// from the percent-encoding it was written with.
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

/// Adds values to the process's secrets, each in all its SecretForms (shorter ones than
/// kMinRedactedSize are ignored).
void RegisterSecrets(const std::vector<std::string>& values);

/// `secret` as it may appear in text: itself; JSON-escaped, once and twice (a JSON document
/// inside a JSON string: a dead-letter row's error, a progress record in a log line), which is
/// also a Prometheus label's escaping; percent-encoded with upper- and lower-case digits and
/// `+` or `%20` for a space; and percent-decoded when it holds escapes (a URL password written
/// encoded). Unique; forms shorter than kMinRedactedSize are left out.
std::vector<std::string> SecretForms(std::string_view secret);

/// `text` with every registered secret replaced by <redacted>, longer secrets first.
std::string Redact(std::string_view text);

/// `text` with each of `secrets`, in all its SecretForms, replaced by `replacement`, longer
/// forms first.
std::string RedactWith(std::string_view text, const std::vector<std::string>& secrets,
                       std::string_view replacement = kRedacted);

/// A log sink that redacts each message (Redact) before `inner` formats and writes it; set the
/// pattern or formatter on the wrapper, it forwards them.
std::shared_ptr<spdlog::sinks::sink> MakeRedactingSink(std::shared_ptr<spdlog::sinks::sink> inner);

}  // namespace driftd
