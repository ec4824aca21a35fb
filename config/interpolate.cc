#include "config/interpolate.h"

#include <cctype>
#include <cstdlib>

#include "engine/options.h"

namespace driftd {
namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Result<Interpolated> InterpolateEnv(std::string_view text, const EnvLookup& env) {
  Interpolated out;
  out.value.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c != '$') {
      out.value.push_back(c);
      ++i;
      continue;
    }
    if (text.compare(i, 3, "$${") == 0) {
      out.value.append("${");
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "${") != 0) {
      out.value.push_back(c);
      ++i;
      continue;
    }
    size_t close = text.find('}', i + 2);
    if (close == std::string_view::npos) {
      return MakeError(ErrorCode::kConfig,
                       "unterminated '${' (close it with '}', or write '$${' for a literal '${')");
    }
    std::string_view body = text.substr(i + 2, close - (i + 2));
    std::string_view name = body;
    std::optional<std::string_view> fallback;
    if (size_t sep = body.find(":-"); sep != std::string_view::npos) {
      name = body.substr(0, sep);
      fallback = body.substr(sep + 2);
    }
    bool valid = !name.empty() && IsNameStart(name.front());
    for (char n : name) valid = valid && IsNameChar(n);
    if (!valid) {
      // The text is not echoed: in a secret value it may be part of the secret.
      return MakeError(ErrorCode::kConfig,
                       "invalid variable reference (expected ${NAME} or ${NAME:-default}, NAME "
                       "made of letters, digits and '_'; write '$${' for a literal '${')");
    }
    std::optional<std::string> value = env ? env(name) : std::nullopt;
    if (value && value->empty() && fallback) value.reset();
    if (!value && !fallback) {
      return MakeError(ErrorCode::kConfig,
                       "environment variable '{}' is not set (set it, or give a default: "
                       "${{{}:-default}})",
                       name, name);
    }
    std::string substitute = value ? *value : std::string(*fallback);
    out.value.append(substitute);
    out.substituted = true;
    if (IsSecretOptionName(name)) {
      out.secret = true;
      out.secret_parts.push_back(std::move(substitute));
    }
    i = close + 1;
  }
  return out;
}

}  // namespace driftd
