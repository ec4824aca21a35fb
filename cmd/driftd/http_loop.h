// The connection loop under the daemon's HTTP endpoint. One thread watches every connection
// with epoll, reads requests as their bytes come and hands only complete requests on, to one of
// two small thread pools: one for the probes (/healthz, /readyz), one for the rest. An idle or
// trickling connection costs a few hundred bytes and a descriptor, never a thread, so a crowd
// of them cannot delay a probe; a slow handler (/metrics at many models) delays only its pool.
//
// What it speaks: HTTP/1.0 and 1.1 requests with a request line, headers and a
// Content-Length body; keep-alive and pipelined requests; `Expect: 100-continue`; HEAD (routed
// as GET, answered without the body). Not: chunked request bodies (501), TLS, HTTP/2, upgrades.
//
// Limits (constants in http_server.h): a deadline for a request's headers and one for its
// body, an idle timeout between requests, a write deadline for the answer, header and body
// sizes, and connection limits per client address and in all. A new connection always gets
// in: at a limit, the connection that has waited longest without a request being answered is
// closed to make room (the address's own at its limit), so a flood from one address evicts its
// own connections and a probe is never the one turned away.
//
// Thread-safety: Start and destruction on one thread. The dispatcher runs on the loop's
// thread (it must be quick: refusals, routing); handlers run on the pools' threads,
// concurrently. Destruction stops accepting, closes every connection and waits for the
// handlers that are running to return (queued requests are dropped).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/result.h"

namespace driftd {

struct HttpRequest {
  std::string method;  // as sent: "GET", "HEAD", "POST", ...
  std::string path;    // the target without its query, e.g. "/api/series"
  /// The query's and (for application/x-www-form-urlencoded) the body's parameters, decoded;
  /// the first value of a repeated name.
  std::map<std::string, std::string> params;
  /// Header names in lower case, values without surrounding spaces, in the order sent.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// The client's address: "127.0.0.1", "::1" (an IPv4 client of an IPv6 socket shows as its
  /// IPv4 address).
  std::string remote_address;
  bool remote_loopback = false;
  int minor_version = 1;  // HTTP/1.x

  /// The value of the header `lower_name` (lower case), or nullptr when it was not sent.
  const std::string* Header(std::string_view lower_name) const;
  /// The parameter's value, or "" when absent.
  std::string Param(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  /// More headers. Content-Length, Connection and X-Content-Type-Options are the loop's.
  std::vector<std::pair<std::string, std::string>> headers;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

/// The pools a request can run on.
enum class HttpPool { kProbe, kWorker };

/// What the loop does with a complete request: send `immediate` at once (made on the loop's
/// thread, so only what costs nothing: refusals, 404s), or run `*handler` on `pool`.
struct HttpDispatch {
  std::optional<HttpResponse> immediate;
  HttpPool pool = HttpPool::kWorker;
  const HttpHandler* handler = nullptr;  // outlives the loop
};
using HttpDispatcher = std::function<HttpDispatch(const HttpRequest&)>;

struct HttpLoopOptions {
  /// Connections open at once; lowered to half the open-file limit when that is smaller.
  size_t max_connections = 10'000;
  /// Connections open at once from one client address.
  size_t max_connections_per_address = 5'000;
  std::chrono::milliseconds idle_timeout{5'000};
  std::chrono::milliseconds header_deadline{10'000};
  std::chrono::milliseconds body_deadline{10'000};
  std::chrono::milliseconds write_deadline{10'000};
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 64 * 1024;
  size_t probe_threads = 2;
  size_t worker_threads = 4;
  /// Requests waiting for a worker beyond which new ones are answered 503 at once.
  size_t max_queued = 256;
};

class HttpLoop {
 public:
  /// Serves `listen_fd` (a listening socket; the loop takes it and closes it) until destroyed.
  static Result<std::unique_ptr<HttpLoop>> Start(int listen_fd, HttpDispatcher dispatcher,
                                                 const HttpLoopOptions& options);
  ~HttpLoop();
  HttpLoop(const HttpLoop&) = delete;
  HttpLoop& operator=(const HttpLoop&) = delete;

  class Impl;

 private:
  explicit HttpLoop(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// "%41+b" -> "A b" (application/x-www-form-urlencoded); a malformed escape stays as written.
std::string UrlDecode(std::string_view text);

/// ASCII letters in lower case, as header names, schemes and host names compare.
std::string AsciiLower(std::string_view text);

}  // namespace driftd
