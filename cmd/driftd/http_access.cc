#include "cmd/driftd/http_access.h"

#include <arpa/inet.h>

#include <optional>

#include <fmt/format.h>

namespace driftd {
namespace {

// The host of "host", "host:port", "[v6]" or "[v6]:port", lower case, without brackets and
// one trailing dot; nullopt when it is not of that shape.
std::optional<std::string> HostOf(std::string_view authority) {
  std::string_view host;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = authority.substr(1, close - 1);
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
    }
    in6_addr address{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &address) != 1) return std::nullopt;
  } else {
    const size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  for (char c : port) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty()) return std::nullopt;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_' || c == ':';
    if (!ok) return std::nullopt;
  }
  return AsciiLower(host);
}

bool IsIpLiteral(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// Whether `host` is one of the operator's names (not the built-in IP and localhost rule).
bool Listed(const HttpAccessPolicy& policy, const std::string& host) {
  for (const std::string& allowed : policy.allowed_hosts) {
    if (allowed == "*" || allowed == host) return true;
    if (allowed.front() == '.' &&
        (host == allowed.substr(1) ||
         (host.size() > allowed.size() && host.ends_with(allowed)))) {
      return true;
    }
  }
  return false;
}

bool HostAllowed(const HttpAccessPolicy& policy, const std::string& host) {
  return IsIpLiteral(host) || host == "localhost" || Listed(policy, host);
}

// "http://example:80" and "http://example" are one origin.
std::string_view WithoutDefaultPort(std::string_view scheme, std::string_view authority) {
  const std::string_view suffix = scheme == "https" ? ":443" : ":80";
  if (authority.ends_with(suffix)) authority.remove_suffix(suffix.size());
  return authority;
}

// Constant time in the length of `expected`: the comparison does not tell a client how much
// of a guess was right.
bool SameSecret(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i] ^ (i < given.size() ? given[i] : 0));
  }
  return diff == 0;
}

}  // namespace

Result<std::vector<std::string>> ParseAllowedHosts(const std::vector<std::string>& entries) {
  std::vector<std::string> out;
  for (const std::string& entry : entries) {
    std::string name = AsciiLower(entry);
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.empty()) continue;
    if (name == "*") {
      out.push_back(name);
      continue;
    }
    std::string_view bare(name);
    if (bare.front() == '.') bare.remove_prefix(1);
    std::optional<std::string> host = HostOf(bare);
    if (!host || *host != bare || name.find(':') != std::string::npos) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "--http-allowed-hosts '{}': give host names (or .domain, or *) without "
                       "scheme, port or path; IP addresses and localhost are always served",
                       entry);
    }
    out.push_back(name);
  }
  return out;
}

std::string RefuseForeignRequest(const HttpAccessPolicy& policy, const HttpRequest& request) {
  const std::string* host_header = request.Header("host");
  // HTTP/1.0 without Host: no browser sends that (the loop refuses HTTP/1.1 without one).
  if (host_header != nullptr) {
    std::optional<std::string> host = HostOf(*host_header);
    if (!host || !HostAllowed(policy, *host)) {
      return fmt::format(
          "Host '{}' is not a name of this endpoint; IP addresses and localhost are served, "
          "other names only when listed in --http-allowed-hosts (DRIFTD_HTTP_ALLOWED_HOSTS)\n",
          host_header->substr(0, 200));
    }
  }
  const std::string* origin = request.Header("origin");
  if (origin == nullptr) return {};
  const std::string refused =
      fmt::format("requests from the web page at Origin '{}' are not served: only the "
                  "endpoint's own pages (and origins listed in --http-allowed-hosts) may call it\n",
                  origin->substr(0, 200));
  const size_t scheme_end = origin->find("://");
  if (scheme_end == std::string::npos) return refused;  // "null" among others
  const std::string scheme = AsciiLower(origin->substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") return refused;
  const std::string authority = AsciiLower(origin->substr(scheme_end + 3));
  if (authority.find('/') != std::string::npos) return refused;
  std::optional<std::string> origin_host = HostOf(authority);
  if (!origin_host) return refused;
  // Same origin: the page was served from the Host this request is sent to.
  if (host_header != nullptr && WithoutDefaultPort(scheme, authority) ==
                                    WithoutDefaultPort(scheme, AsciiLower(*host_header))) {
    return {};
  }
  // A proxy in front (TLS, another port): its name must be one the operator listed.
  if (Listed(policy, *origin_host)) return {};
  return refused;
}

std::string RefuseStateChange(const HttpAccessPolicy& policy, const HttpRequest& request) {
  if (const std::string* site = request.Header("sec-fetch-site")) {
    if (*site != "same-origin" && *site != "none") {
      return fmt::format("a browser sent this request from another site (Sec-Fetch-Site: {})\n",
                         site->substr(0, 40));
    }
  }
  if (!policy.admin_token.empty()) {
    const std::string* authorization = request.Header("authorization");
    const std::string_view prefix = "Bearer ";
    if (authorization == nullptr || authorization->rfind(prefix, 0) != 0 ||
        !SameSecret(std::string_view(*authorization).substr(prefix.size()), policy.admin_token)) {
      return "a valid 'Authorization: Bearer <DRIFTD_ADMIN_TOKEN>' is needed\n";
    }
    return {};
  }
  if (!request.remote_loopback) {
    return "admin endpoints answer loopback clients only (set DRIFTD_ADMIN_TOKEN to allow "
           "others with a bearer token)\n";
  }
  const std::string* header = request.Header(AsciiLower(kAdminHeader));
  if (header == nullptr || *header != "1") {
    return fmt::format(
        "a state-changing request needs the header '{}: 1' (driftd's own clients send it; a "
        "web page cannot), or a DRIFTD_ADMIN_TOKEN bearer token\n",
        kAdminHeader);
  }
  return {};
}

}  // namespace driftd
