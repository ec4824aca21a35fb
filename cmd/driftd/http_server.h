// The daemon's HTTP endpoint: /metrics (Prometheus text), /healthz, /readyz, /progress, the
// status page (/ with its data at /api/status and /api/series; the page is built into the
// binary, it loads nothing from elsewhere), /api/report (`driftd report`'s data) and POST
// /admin/rebaseline. It only reads through the handlers it is given; it owns no pipeline
// state. Connections are served by an epoll loop (http_loop.h) that hands complete requests
// to small pools, so that slow and idle clients cannot delay a probe; who may call it is
// http_access.h's rule.
//
// Lifecycle: Start binds, listens and serves on its own threads before it returns;
// destruction stops it (it waits only for handlers already running). Handlers are called on
// the server's threads, concurrently.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmd/driftd/http_loop.h"
#include "engine/result.h"

namespace driftd {

struct HttpAddress {
  std::string host;
  int port = 0;  // 0: any free port
};

/// "127.0.0.1:9464", "[::1]:9464", "0.0.0.0:0". "off" is handled by the caller.
Result<HttpAddress> ParseHttpAddress(std::string_view text);

/// Connection handling of the endpoint (see http_loop.h). Connections open at once, in all
/// and per client address: beyond them the connection that has waited longest without an
/// answer is closed to make room, so a new one (a probe) always gets in. The total is lowered
/// to half the open-file limit when that is smaller; `driftd run` raises its soft limit to the
/// hard one at start. Default: 10,000 and 5,000.
inline constexpr size_t kMaxConnections = 10'000;
inline constexpr size_t kMaxConnectionsPerAddress = 5'000;
/// A request's line and headers must arrive within this of its first byte, its body within
/// this of its headers; else 408 and the connection closes. Default: 10 s each.
inline constexpr std::chrono::seconds kHeaderDeadline{10};
inline constexpr std::chrono::seconds kBodyDeadline{10};
/// A connection without a (next) request closes after this. Default: 5 s.
inline constexpr std::chrono::seconds kKeepAlive{5};
/// The client must have taken the whole answer within this. Default: 10 s.
inline constexpr std::chrono::seconds kWriteTimeout{10};
/// Threads answering /healthz and /readyz, and threads for every other route (/metrics can
/// take a while at many models). Default: 2 and 4.
inline constexpr size_t kProbeThreads = 2;
inline constexpr size_t kWorkerThreads = 4;
/// Connections the kernel queues before the loop accepts them (capped by somaxconn), so that
/// a crowd connecting at once does not drop a probe's SYN. Default: 4096.
inline constexpr int kListenBacklog = 4096;

struct HttpHandlers {
  /// The /metrics body.
  std::function<std::string()> metrics;
  /// /healthz: true while the process runs its control loop.
  std::function<bool()> healthy;
  /// /readyz: true when every query is restored and its source ready; `detail` says which is not.
  std::function<bool(std::string& detail)> ready;
  /// /progress: a JSON array of recent progress records; `pipeline` filters when non-empty.
  std::function<std::string(const std::string& pipeline)> progress;
  /// /api/status: the status page's data (JSON). Unset: 404.
  std::function<std::string()> status;
  /// /api/series?pipeline=&model=&series=: one series' recent evaluations (JSON), or nullopt
  /// for an unknown pipeline (404). Unset: 404.
  std::function<std::optional<std::string>(const std::string& pipeline, const std::string& model,
                                           const std::string& series)>
      series;
  /// /api/report?pipeline=: the data of `driftd report` (JSON) for one pipeline, or every
  /// pipeline when empty; nullopt for an unknown pipeline (404). Unset: 404.
  std::function<std::optional<std::string>(const std::string& pipeline)> report;
  /// POST /admin/rebaseline?pipeline=&model=: an empty string when queued (202), else the
  /// reason it was not (404). With the bearer token `admin_token` when one is set, else from
  /// loopback clients with `X-Driftd-Admin: 1` (http_access.h). Unset: 404.
  std::function<std::string(const std::string& pipeline, const std::string& model)> rebaseline;
  std::string admin_token;
  /// Host names served besides IP literals, localhost and the bound name
  /// (--http-allowed-hosts, checked by ParseAllowedHosts).
  std::vector<std::string> allowed_hosts;
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> Start(const HttpAddress& address,
                                                   HttpHandlers handlers);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// The bound port (the chosen one when the address asked for port 0).
  int port() const { return port_; }

 private:
  HttpServer();
  struct Routes;
  std::unique_ptr<Routes> routes_;  // before loop_: the loop's handlers point into it
  std::unique_ptr<HttpLoop> loop_;
  int port_ = 0;
};

}  // namespace driftd
