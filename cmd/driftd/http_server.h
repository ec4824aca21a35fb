// The daemon's HTTP endpoint (cpp-httplib): /metrics (Prometheus text), /healthz, /readyz and
// /progress. It only reads through the handlers it is given; it owns no pipeline state.
//
// Lifecycle: Start (binds, then serves on its own threads), destruction stops it. Handlers are
// called on the server's threads, concurrently.
#pragma once

#include <functional>
#include <memory>
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

struct HttpHandlers {
  /// The /metrics body.
  std::function<std::string()> metrics;
  /// /healthz: true while the process runs its control loop.
  std::function<bool()> healthy;
  /// /readyz: true when every query is restored and its source ready; `detail` says which is not.
  std::function<bool(std::string& detail)> ready;
  /// /progress: a JSON array of recent progress records; `pipeline` filters when non-empty.
  std::function<std::string(const std::string& pipeline)> progress;
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
