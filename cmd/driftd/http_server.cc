#include "cmd/driftd/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "cmd/driftd/http_access.h"
#include "engine/redact.h"

namespace {
#include "cmd/driftd/status_page.inc"
}  // namespace

namespace driftd {

Result<HttpAddress> ParseHttpAddress(std::string_view text) {
  HttpAddress address;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return MakeError(ErrorCode::kInvalidArgument,
                       "--http '{}': expected [IPv6]:PORT, HOST:PORT or off", text);
    }
    address.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "--http '{}': expected HOST:PORT (e.g. 127.0.0.1:9464) or off", text);
    }
    address.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), address.port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || address.port < 0 ||
      address.port > 65535) {
    return MakeError(ErrorCode::kInvalidArgument, "--http '{}': port must be 0-65535", text);
  }
  return address;
}


namespace {

HttpResponse Text(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

HttpResponse Content(std::string body, std::string content_type) {
  HttpResponse response;
  response.body = std::move(body);
  response.content_type = std::move(content_type);
  return response;
}

// A listening socket on `address` (non-blocking, for the loop), or why not.
Result<int> Listen(const HttpAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (const int rc = getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return MakeError(ErrorCode::kIo, "cannot listen on {}:{}: {}", address.host, address.port,
                     gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, &freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR: a restart binds at once. Not SO_REUSEPORT, with which a second daemon on
    // the port would share it silently instead of being told it is taken.
    const int yes = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (ai->ai_family == AF_INET6) {
      // "[::]:9464" serves IPv4 clients too, whatever the system's default.
      const int no = 0;
      (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, kListenBacklog) == 0) {
      return fd;
    }
    why = errno == EADDRINUSE ? "address in use" : std::strerror(errno);
    close(fd);
  }
  return MakeError(ErrorCode::kIo, "cannot listen on {}:{} ({})", address.host, address.port,
                   why);
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) return -1;
  if (bound.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(bound).sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in&>(bound).sin_port);
}

}  // namespace

struct HttpServer::Routes {
  struct Route {
    std::string_view method;  // GET routes answer HEAD too
    std::string_view path;
    HttpPool pool;
    HttpHandler handler;
  };
  HttpAccessPolicy policy;
  std::vector<Route> routes;
};

HttpServer::HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpAddress& address,
                                                      HttpHandlers handlers) {
  std::unique_ptr<HttpServer> http(new HttpServer());
  http->routes_ = std::make_unique<Routes>();
  Routes& table = *http->routes_;
  table.policy.admin_token = handlers.admin_token;
  table.policy.allowed_hosts = handlers.allowed_hosts;
  // The name the endpoint was bound to is its own ("--http myhost:9464").
  {
    HttpRequest probe;
    probe.headers.emplace_back("host", address.host);
    if (!address.host.empty() && !RefuseForeignRequest(table.policy, probe).empty()) {
      std::string name = address.host;
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      table.policy.allowed_hosts.push_back(name);
    }
  }
  auto h = std::make_shared<HttpHandlers>(std::move(handlers));
  using Route = Routes::Route;
  std::vector<Route>& routes = table.routes;

  routes.push_back({"GET", "/metrics", HttpPool::kWorker, [h](const HttpRequest&) {
                      return Content(h->metrics(), "text/plain; version=0.0.4; charset=utf-8");
                    }});
  routes.push_back({"GET", "/healthz", HttpPool::kProbe, [h](const HttpRequest&) {
                      const bool healthy = h->healthy();
                      return Text(healthy ? 200 : 503, healthy ? "ok\n" : "not running\n");
                    }});
  routes.push_back({"GET", "/readyz", HttpPool::kProbe, [h](const HttpRequest&) {
                      std::string detail;
                      const bool ready = h->ready(detail);
                      return Text(ready ? 200 : 503,
                                  detail.empty() ? (ready ? "ready\n" : "not ready\n")
                                                 : detail + "\n");
                    }});
  routes.push_back({"GET", "/progress", HttpPool::kWorker, [h](const HttpRequest& request) {
                      return Content(h->progress(request.Param("pipeline")), "application/json");
                    }});
  // The status page: one self-contained HTML file (styles and script inline), embedded.
  routes.push_back({"GET", "/", HttpPool::kWorker, [](const HttpRequest&) {
                      HttpResponse page = Content(kStatusPageHtml, "text/html; charset=utf-8");
                      page.headers.emplace_back("Cache-Control", "no-cache");
                      // Nothing from other origins: the page works offline and cannot be made
                      // to load scripts; no other site may frame it.
                      page.headers.emplace_back(
                          "Content-Security-Policy",
                          "default-src 'self'; script-src 'unsafe-inline'; "
                          "style-src 'unsafe-inline'; img-src 'self' data:; "
                          "frame-ancestors 'none'");
                      return page;
                    }});
  routes.push_back({"GET", "/api/status", HttpPool::kWorker, [h](const HttpRequest&) {
                      if (!h->status) return Text(404, "");
                      return Content(h->status(), "application/json");
                    }});
  routes.push_back({"GET", "/api/series", HttpPool::kWorker, [h](const HttpRequest& request) {
                      std::optional<std::string> body;
                      if (h->series) {
                        body = h->series(request.Param("pipeline"), request.Param("model"),
                                         request.Param("series"));
                      }
                      if (!body) return Text(404, "no such pipeline\n");
                      return Content(std::move(*body), "application/json");
                    }});
  routes.push_back({"GET", "/api/report", HttpPool::kWorker, [h](const HttpRequest& request) {
                      std::optional<std::string> body;
                      if (h->report) body = h->report(request.Param("pipeline"));
                      if (!body) return Text(404, "no such pipeline\n");
                      return Content(std::move(*body), "application/json");
                    }});
  routes.push_back(
      {"POST", "/admin/rebaseline", HttpPool::kWorker, [h](const HttpRequest& request) {
         if (!h->rebaseline) return Text(404, "");
         const std::string pipeline = request.Param("pipeline");
         const std::string model = request.Param("model");
         const std::string refusal = h->rebaseline(pipeline, model);
         if (!refusal.empty()) return Text(404, refusal + "\n");
         return Text(202, "model " + model + " of pipeline " + pipeline +
                              " warms up a new baseline from the next batch\n");
       }});
  // Every body, of every route, passes the secrets' redaction (engine/redact.h): pipeline
  // names, paths and URLs in metrics labels, progress records and readiness details.
  for (Route& route : routes) {
    route.handler = [inner = std::move(route.handler)](const HttpRequest& request) {
      HttpResponse response = inner(request);
      response.body = Redact(response.body);
      return response;
    };
  }

  // Runs on the loop's thread: only checks that cost nothing, then the route's pool.
  const Routes* table_ptr = &table;
  HttpDispatcher dispatcher = [table_ptr](const HttpRequest& request) {
    HttpDispatch dispatch;
    if (std::string why = RefuseForeignRequest(table_ptr->policy, request); !why.empty()) {
      dispatch.immediate = Text(403, Redact(why));
      return dispatch;
    }
    const bool read_only = request.method == "GET" || request.method == "HEAD";
    const Route* same_path = nullptr;
    for (const Route& route : table_ptr->routes) {
      if (route.path != request.path) continue;
      same_path = &route;
      if (route.method == request.method || (route.method == "GET" && request.method == "HEAD")) {
        if (!read_only) {
          if (std::string why = RefuseStateChange(table_ptr->policy, request); !why.empty()) {
            dispatch.immediate = Text(403, why);
            return dispatch;
          }
        }
        dispatch.pool = route.pool;
        dispatch.handler = &route.handler;
        return dispatch;
      }
    }
    if (same_path != nullptr) {
      HttpResponse response = Text(405, fmt::format("{} takes {}\n", request.path.substr(0, 200),
                                                    same_path->method));
      response.headers.emplace_back(
          "Allow", same_path->method == "GET" ? "GET, HEAD" : std::string(same_path->method));
      dispatch.immediate = std::move(response);
      return dispatch;
    }
    dispatch.immediate = Text(404, "not found\n");
    return dispatch;
  };

  auto listening = Listen(address);
  if (!listening) return tl::unexpected(listening.error());
  http->port_ = BoundPort(*listening);
  HttpLoopOptions options;
  options.max_connections = kMaxConnections;
  options.max_connections_per_address = kMaxConnectionsPerAddress;
  options.idle_timeout = kKeepAlive;
  options.header_deadline = kHeaderDeadline;
  options.body_deadline = kBodyDeadline;
  options.write_deadline = kWriteTimeout;
  options.probe_threads = kProbeThreads;
  options.worker_threads = kWorkerThreads;
  // The socket listens already: a client that connects from here on is queued by the kernel
  // and answered as soon as the loop's thread runs, so Start returns with the endpoint serving.
  auto loop = HttpLoop::Start(*listening, std::move(dispatcher), options);
  if (!loop) return tl::unexpected(loop.error());
  http->loop_ = std::move(*loop);
  return http;
}

// The loop's destruction wakes its thread through an eventfd: a stop is never lost, whenever
// it comes, and nothing waits on a client.
HttpServer::~HttpServer() { loop_.reset(); }

}  // namespace driftd
