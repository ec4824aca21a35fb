#include "cmd/driftd/http_server.h"

#include <charconv>

#include <httplib.h>

#include "engine/redact.h"

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

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpAddress& address,
                                                      HttpHandlers handlers) {
  std::unique_ptr<HttpServer> http(new HttpServer());
  http->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *http->server_;
  // Scrapes and probes are rare and cheap: two workers are plenty on a shared machine.
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };

  server.Get("/metrics", [h = handlers](const httplib::Request&, httplib::Response& response) {
    response.set_content(h.metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/healthz", [h = handlers](const httplib::Request&, httplib::Response& response) {
    bool healthy = h.healthy();
    response.status = healthy ? 200 : 503;
    response.set_content(healthy ? "ok\n" : "not running\n", "text/plain");
  });
  server.Get("/readyz", [h = handlers](const httplib::Request&, httplib::Response& response) {
    std::string detail;
    bool ready = h.ready(detail);
    response.status = ready ? 200 : 503;
    response.set_content(detail.empty() ? (ready ? "ready\n" : "not ready\n") : detail + "\n",
                         "text/plain");
  });
  server.Get(
      "/progress", [h = handlers](const httplib::Request& request, httplib::Response& response) {
        std::string pipeline =
            request.has_param("pipeline") ? request.get_param_value("pipeline") : std::string();
        response.set_content(h.progress(pipeline), "application/json");
      });

  // Every body, of every route, passes the secrets' redaction (engine/redact.h): pipeline
  // names, paths and URLs in metrics labels, progress records and readiness details.
  server.set_post_routing_handler([](const httplib::Request&, httplib::Response& response) {
    response.body = Redact(response.body);
  });

  if (address.port == 0) {
    http->port_ = server.bind_to_any_port(address.host);
    if (http->port_ < 0) {
      return MakeError(ErrorCode::kIo, "cannot listen on {}:0 (any port)", address.host);
    }
  } else {
    if (!server.bind_to_port(address.host, address.port)) {
      return MakeError(ErrorCode::kIo, "cannot listen on {}:{} (address in use or invalid)",
                       address.host, address.port);
    }
    http->port_ = address.port;
  }
  http->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return http;
}

HttpServer::~HttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace driftd
