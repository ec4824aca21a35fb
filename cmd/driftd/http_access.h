// Who may use the daemon's HTTP endpoint: the checks, made before any handler runs, that keep
// a web page the operator's browser visits from reading the endpoint or changing state
// through that browser.
//
// - DNS rebinding: a page at http://evil.example:9464 whose name is made to resolve to
//   127.0.0.1 reads the endpoint as its own origin. Its requests carry `Host: evil.example`,
//   so a request is served only when its Host is an IP literal, `localhost`, the name the
//   endpoint was bound to, or a name the operator allowed (--http-allowed-hosts). An IP literal
//   cannot be rebound, and it is often not this machine's own address (a container's published
//   port, a Kubernetes Service), so IP literals pass whatever the bound address. The port is
//   not compared: a port-forward (kubectl port-forward 8080:9464) or a proxy changes it, and it
//   is the name that a rebinding page controls.
// - Cross-site requests: a request whose Origin is not the endpoint's own (the Host it was
//   sent to, or an allowed name) is refused, whatever its method.
// - Forged state changes: a page can send a POST without an Origin (old browsers) or as a
//   form (no preflight), but it cannot add a header of its choosing to a cross-site request
//   without a CORS preflight, which this endpoint never grants. So every request that changes
//   state needs `Authorization: Bearer <DRIFTD_ADMIN_TOKEN>` when a token is set, else a
//   loopback client and `X-Driftd-Admin: 1`; and a browser's `Sec-Fetch-Site` must say
//   same-origin when it is sent.
//
// Thread-safety: the functions are pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cmd/driftd/http_loop.h"
#include "engine/result.h"

namespace driftd {

/// The header a state-changing request without a token must carry (value "1").
inline constexpr std::string_view kAdminHeader = "X-Driftd-Admin";

struct HttpAccessPolicy {
  /// Host names served besides IP literals and localhost, lower case: exact names, ".name"
  /// for a domain and its subdomains, or "*" for any Host (no rebinding check).
  std::vector<std::string> allowed_hosts;
  /// Bearer token of state-changing requests; empty: loopback clients with kAdminHeader.
  std::string admin_token;
};

/// --http-allowed-hosts / DRIFTD_HTTP_ALLOWED_HOSTS entries, checked and lower-cased: names
/// without scheme, port or path, ".domain", or "*". Empty entries are skipped.
Result<std::vector<std::string>> ParseAllowedHosts(const std::vector<std::string>& entries);

/// Empty when `request` may be served (Host and Origin), else why not: a 403's body.
std::string RefuseForeignRequest(const HttpAccessPolicy& policy, const HttpRequest& request);

/// Empty when `request`, which changes state, may (token, or loopback with kAdminHeader;
/// Sec-Fetch-Site), else why not: a 403's body.
std::string RefuseStateChange(const HttpAccessPolicy& policy, const HttpRequest& request);

}  // namespace driftd
