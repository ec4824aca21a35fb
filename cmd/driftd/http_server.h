// The daemon's HTTP endpoint (cpp-httplib): /metrics (Prometheus text), /healthz, /readyz,
// /progress, and the status page (/ with its data at /api/status and /api/series; the page is
// built into the binary, it loads nothing from elsewhere). It only reads through the handlers it is given; it owns no pipeline state.
//
// Lifecycle: Start (binds, then serves on its own threads), destruction stops it. Handlers are
// called on the server's threads, concurrently.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "engine/result.h"

namespace httplib {
class Server;
}

namespace driftd {

struct HttpAddress {
  std::string host;
  int port = 0;  // 0: any free port
};

/// "127.0.0.1:9464", "[::1]:9464", "0.0.0.0:0". "off" is handled by the caller.
Result<HttpAddress> ParseHttpAddress(std::string_view text);

/// Connection handling of the endpoint. Probes must be answered within a second whatever
/// other clients do: every connection gets a thread of its own (idle and slow clients cost a
/// thread each, not the probes' turn), at most this many at once. Default: 512.
inline constexpr size_t kMaxConnectionThreads = 512;
/// Longest wait for the next piece of a request (its line, a header, the body) or for the
/// client to read the answer. Default: 2 s.
inline constexpr std::chrono::seconds kReadTimeout{2};
inline constexpr std::chrono::seconds kWriteTimeout{5};
/// A keep-alive connection without a new request closes after this. Default: 2 s.
inline constexpr std::chrono::seconds kKeepAlive{2};
/// A connection that sends nothing is left to the kernel this long before the server accepts
/// it (TCP_DEFER_ACCEPT). Default: 10 s.
inline constexpr std::chrono::seconds kDeferAccept{10};
/// Connections the kernel queues before the server accepts them (capped by somaxconn), so that
/// a crowd connecting at once does not drop a probe's SYN. Default: 1024.
inline constexpr int kListenBacklog = 1024;

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
  /// POST /admin/rebaseline?pipeline=&model=: an empty string when queued (202), else the
  /// reason it was not (404). Only from loopback clients, or with the bearer token
  /// `admin_token` when one is set. Unset: 404.
  std::function<std::string(const std::string& pipeline, const std::string& model)> rebaseline;
  std::string admin_token;
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
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace driftd
