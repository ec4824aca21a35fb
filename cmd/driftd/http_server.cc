#include "cmd/driftd/http_server.h"

#include <chrono>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <httplib.h>

#include "engine/redact.h"

namespace {
#include "cmd/driftd/status_page.inc"
}  // namespace

namespace driftd {
namespace {

// Each connection on a thread of its own, up to `max_threads` at once (connections beyond wait
// for one to end). cpp-httplib holds a worker for a connection's whole life, so with a fixed
// pool a few idle keep-alive or half-sent requests took every worker and probes waited behind
// them; here they cost a thread each and a probe gets one at once. Threads exit after a while
// without work, so an idle endpoint keeps few.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : state_(std::make_shared<State>(max_threads)) {}
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    State& state = *state_;
    std::lock_guard<std::mutex> lock(state.mutex);
    state.jobs.push_back(std::move(fn));
    // Each idle thread takes one queued job; a job beyond them gets a thread of its own (an idle
    // thread woken for an earlier job counts as idle until it has taken it).
    if (state.jobs.size() > state.idle && state.threads < state.max_threads) {
      ++state.threads;
      // The thread shares the state, so it may finish after this object is gone.
      std::thread([state = state_] { Work(*state); }).detach();
    } else {
      state.wake.notify_one();
    }
  }

  void shutdown() override {
    State& state = *state_;
    std::unique_lock<std::mutex> lock(state.mutex);
    state.stopping = true;
    state.wake.notify_all();
    // Every thread finishes its connection (bounded by the server's read and keep-alive
    // timeouts once it stops listening) and the jobs still queued.
    state.done.wait(lock, [&] { return state.threads == 0; });
  }

 private:
  struct State {
    explicit State(size_t max) : max_threads(max) {}
    const size_t max_threads;
    std::mutex mutex;
    std::condition_variable wake;
    std::condition_variable done;
    std::deque<std::function<void()>> jobs;
    size_t threads = 0;
    size_t idle = 0;
    bool stopping = false;
  };

  static void Work(State& state) {
    std::unique_lock<std::mutex> lock(state.mutex);
    while (true) {
      if (state.jobs.empty()) {
        if (state.stopping) break;
        ++state.idle;
        const bool woken = state.wake.wait_for(
            lock, kIdleExit, [&] { return state.stopping || !state.jobs.empty(); });
        --state.idle;
        if (!woken && state.threads > kKeptThreads) break;
        continue;
      }
      std::function<void()> job = std::move(state.jobs.front());
      state.jobs.pop_front();
      lock.unlock();
      job();
      job = nullptr;
      lock.lock();
    }
    if (--state.threads == 0) state.done.notify_all();
  }

  static constexpr std::chrono::seconds kIdleExit{30};
  static constexpr size_t kKeptThreads = 2;

  std::shared_ptr<State> state_;
};

}  // namespace

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
  // Connection handling (see ConnectionThreads): a thread per connection, and short timeouts so
  // that an idle or slow client lets its thread go soon. A request's line and headers must come
  // within kReadTimeout of each other; a keep-alive connection closes after kKeepAlive without
  // a request; bodies are small (the endpoint takes no uploads).
  server.new_task_queue = [] { return new ConnectionThreads(kMaxConnectionThreads); };
  server.set_read_timeout(kReadTimeout);
  server.set_write_timeout(kWriteTimeout);
  server.set_keep_alive_timeout(kKeepAlive.count());
  server.set_keep_alive_max_count(100);
  server.set_payload_max_length(64 * 1024);

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

  // The status page: one self-contained HTML file (styles and script inline), embedded.
  server.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content(kStatusPageHtml, "text/html; charset=utf-8");
    response.set_header("Cache-Control", "no-cache");
    // Nothing from other origins: the page works offline and cannot be made to load scripts.
    response.set_header("Content-Security-Policy",
                        "default-src 'self'; script-src 'unsafe-inline'; "
                        "style-src 'unsafe-inline'; img-src 'self' data:");
  });
  server.Get("/api/status", [h = handlers](const httplib::Request&, httplib::Response& response) {
    if (!h.status) {
      response.status = 404;
      return;
    }
    response.set_content(h.status(), "application/json");
  });
  server.Get("/api/series",
             [h = handlers](const httplib::Request& request, httplib::Response& response) {
               auto param = [&](const char* name) {
                 return request.has_param(name) ? request.get_param_value(name) : std::string();
               };
               std::optional<std::string> body;
               if (h.series) body = h.series(param("pipeline"), param("model"), param("series"));
               if (!body) {
                 response.status = 404;
                 response.set_content("no such pipeline\n", "text/plain");
                 return;
               }
               response.set_content(*body, "application/json");
             });

  server.Post("/admin/rebaseline",
              [h = handlers](const httplib::Request& request, httplib::Response& response) {
                // Changing state needs more than reaching the port: a token when one is set,
                // else a client on this host.
                const bool loopback = request.remote_addr == "127.0.0.1" ||
                                      request.remote_addr == "::1" ||
                                      request.remote_addr.rfind("::ffff:127.", 0) == 0;
                const bool allowed =
                    h.admin_token.empty()
                        ? loopback
                        : request.get_header_value("Authorization") == "Bearer " + h.admin_token;
                if (!allowed) {
                  response.status = 403;
                  response.set_content(
                      h.admin_token.empty()
                          ? "admin endpoints answer loopback clients only (set "
                            "DRIFTD_ADMIN_TOKEN to allow others with a bearer token)\n"
                          : "a valid 'Authorization: Bearer <DRIFTD_ADMIN_TOKEN>' is needed\n",
                      "text/plain");
                  return;
                }
                if (!h.rebaseline) {
                  response.status = 404;
                  return;
                }
                const std::string pipeline =
                    request.has_param("pipeline") ? request.get_param_value("pipeline") : "";
                const std::string model =
                    request.has_param("model") ? request.get_param_value("model") : "";
                const std::string refusal = h.rebaseline(pipeline, model);
                response.status = refusal.empty() ? 202 : 404;
                response.set_content(
                    refusal.empty()
                        ? "model " + model + " of pipeline " + pipeline +
                              " warms up a new baseline from the next batch\n"
                        : refusal + "\n",
                    "text/plain");
              });

  // cpp-httplib listens with a backlog of 5: when a crowd connects at once, the kernel drops
  // further SYNs and a probe's connect waits a second for its retransmission. The listening
  // socket is the last one the socket options were given; its backlog is raised after bind.
  // SO_REUSEADDR (a restart binds at once) rather than cpp-httplib's SO_REUSEPORT, with which
  // a second daemon on the port would share it silently instead of being told it is taken.
  // TCP_DEFER_ACCEPT: a connection is handed to the server only once its first bytes arrive,
  // so a client that connects and says nothing costs no thread (cpp-httplib's wait for a
  // request polls every 10 ms, and a few hundred such threads slow everything down).
  socket_t listening = INVALID_SOCKET;
  server.set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    (void)setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    int defer_seconds = static_cast<int>(kDeferAccept.count());
    (void)setsockopt(sock, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_seconds, sizeof defer_seconds);
    listening = sock;
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
  if (listening != INVALID_SOCKET) (void)::listen(listening, kListenBacklog);
  http->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return http;
}

HttpServer::~HttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace driftd
