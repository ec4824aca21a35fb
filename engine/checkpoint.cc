#include "engine/checkpoint.h"

namespace driftd {

std::string StateScopePrefix(uint32_t scope) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(scope >> shift));
  return out;
}

std::string EncodeStateKey(uint32_t scope, std::string_view ns, std::string_view key) {
  std::string out = StateScopePrefix(scope);
  out.reserve(4 + ns.size() + 1 + key.size());
  out.append(ns);
  out.push_back('\0');
  out.append(key);
  return out;
}

bool DecodeStateKey(std::string_view encoded, StateKeyView& out) {
  if (encoded.size() < 5) return false;
  uint32_t scope = 0;
  for (int i = 0; i < 4; ++i) scope = (scope << 8) | static_cast<uint8_t>(encoded[i]);
  const std::string_view rest = encoded.substr(4);
  const size_t end = rest.find('\0');
  if (end == std::string_view::npos || end == 0) return false;
  out.scope = scope;
  out.ns = rest.substr(0, end);
  out.key = rest.substr(end + 1);
  return true;
}

}  // namespace driftd
