#include "cmd/driftd/http_loop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/log.h"

namespace driftd {

namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<spdlog::logger> Log() { return GetLogger("http"); }

// epoll's data of the two descriptors that are not connections; connections count from 2.
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
// Deadlines are checked this often: a connection overstays its deadline by at most this.
constexpr std::chrono::milliseconds kSweepInterval{250};
// After the process ran out of descriptors with no connection to close, accepting pauses this
// long rather than spinning on a listening socket that stays readable.
constexpr std::chrono::milliseconds kAcceptPause{100};
// Between log lines about connections closed at a limit or a deadline.
constexpr std::chrono::seconds kReportInterval{60};

std::string_view Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

// The bytes of an answer. Every answer says nosniff: a body is what its Content-Type says
// (a progress record with an HTML-looking model name is not rendered as a page).
std::string Serialize(const HttpResponse& response, bool head, bool keep_alive,
                      int minor_version) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", response.status, Reason(response.status));
  if (!response.content_type.empty()) {
    out += fmt::format("Content-Type: {}\r\n", response.content_type);
  }
  out += fmt::format("Content-Length: {}\r\n", response.body.size());
  out += "X-Content-Type-Options: nosniff\r\n";
  for (const auto& [name, value] : response.headers) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (minor_version == 0) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  if (!head) out += response.body;
  return out;
}

HttpResponse TextResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string_view TrimSpaces(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// Whether a comma-separated header value (Connection) holds `token`, case-insensitively.
bool HasToken(const std::string* value, std::string_view token) {
  if (value == nullptr) return false;
  std::string_view rest(*value);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    if (AsciiLower(TrimSpaces(rest.substr(0, comma))) == token) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

void AddParams(std::string_view text, std::map<std::string, std::string>& params) {
  while (!text.empty()) {
    size_t amp = text.find('&');
    std::string_view pair = text.substr(0, amp);
    if (!pair.empty()) {
      size_t eq = pair.find('=');
      std::string name = UrlDecode(pair.substr(0, eq));
      std::string value = eq == std::string_view::npos ? "" : UrlDecode(pair.substr(eq + 1));
      params.emplace(std::move(name), std::move(value));
    }
    if (amp == std::string_view::npos) break;
    text.remove_prefix(amp + 1);
  }
}

// A request's head, parsed: what the connection needs to know about its body and its life.
struct Head {
  int error_status = 0;  // not 0: refuse with this status and `error`, then close
  std::string error;
  size_t body_length = 0;
  bool expect_continue = false;
};

// Parses the request line and headers in `text` (everything before the blank line, line ends
// included) into `request`.
Head ParseHead(std::string_view text, HttpRequest& request) {
  Head head;
  auto fail = [&](int status, std::string why) {
    head.error_status = status;
    head.error = std::move(why);
    return head;
  };
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  // Empty lines before a request line are allowed (RFC 9112 2.2).
  size_t first = 0;
  while (first < lines.size() && lines[first].empty()) ++first;
  if (first == lines.size()) return fail(400, "no request line");
  const std::string_view line = lines[first];
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "the request line is not 'METHOD TARGET HTTP/1.1'");
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), IsTokenChar)) {
    return fail(400, "bad method");
  }
  if (version == "HTTP/1.1") {
    request.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    request.minor_version = 0;
  } else if (version.rfind("HTTP/", 0) == 0) {
    return fail(505, "HTTP/1.0 and HTTP/1.1 only");
  } else {
    return fail(400, "bad HTTP version");
  }
  request.method = std::string(method);
  // The absolute form (a proxy's) names the host in the target; it stands for Host.
  std::optional<std::string> target_host;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && AsciiLower(target.substr(0, scheme.size())) == scheme) {
      target.remove_prefix(scheme.size());
      const size_t slash = target.find_first_of("/?");
      target_host = std::string(target.substr(0, slash));
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  if (target.empty() || (target.front() != '/' && target != "*")) return fail(400, "bad target");
  const size_t question = target.find('?');
  request.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) AddParams(target.substr(question + 1), request.params);

  size_t hosts = 0;
  for (size_t i = first + 1; i < lines.size(); ++i) {
    const std::string_view header = lines[i];
    if (header.empty()) continue;
    if (header.front() == ' ' || header.front() == '\t') {
      return fail(400, "folded header lines are not accepted");
    }
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail(400, "bad header line");
    const std::string_view name = header.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), IsTokenChar)) return fail(400, "bad header name");
    std::string lower = AsciiLower(name);
    hosts += lower == "host";
    request.headers.emplace_back(std::move(lower),
                                 std::string(TrimSpaces(header.substr(colon + 1))));
  }
  if (target_host) {
    // RFC 9112 3.2.2: the target's authority replaces any Host header.
    std::erase_if(request.headers, [](const auto& h) { return h.first == "host"; });
    request.headers.emplace_back("host", *target_host);
    hosts = 1;
  }
  if (hosts > 1 || (hosts == 0 && request.minor_version == 1)) {
    return fail(400, "an HTTP/1.1 request needs exactly one Host header");
  }
  if (request.Header("transfer-encoding") != nullptr) {
    return fail(501, "request bodies with Transfer-Encoding (chunked) are not accepted; send "
                     "Content-Length");
  }
  std::optional<size_t> length;
  for (const auto& [name, value] : request.headers) {
    if (name != "content-length") continue;
    size_t parsed = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() ||
        (length && *length != parsed)) {
      return fail(400, "bad Content-Length");
    }
    length = parsed;
  }
  head.body_length = length.value_or(0);
  if (const std::string* expect = request.Header("expect")) {
    if (AsciiLower(*expect) != "100-continue") return fail(417, "only Expect: 100-continue");
    head.expect_continue = request.minor_version == 1;
  }
  return head;
}

bool Loopback(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    return (ntohl(v4.sin_addr.s_addr) >> 24) == 127;
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    if (IN6_IS_ADDR_LOOPBACK(&v6.sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr) && v6.sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

std::string AddressText(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      inet_ntop(AF_INET, &v6.sin6_addr.s6_addr[12], text, sizeof text);
    } else {
      inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    }
  }
  return text;
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

std::string HttpRequest::Param(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string UrlDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out.push_back(' ');
    } else if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 &&
               hex(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// ---- the pools ------------------------------------------------------------------------------

namespace {

struct Job {
  uint64_t connection = 0;
  const HttpHandler* handler = nullptr;
  HttpRequest request;
  bool head = false;
  bool keep_alive = true;
};

// A finished answer on its way back to the loop.
struct Completion {
  uint64_t connection = 0;
  std::string bytes;
  bool close = false;
};

// Fixed threads taking jobs from a bounded queue. Stop() lets running jobs finish and drops
// the queued ones (their connections are closed by the loop anyway).
class Pool {
 public:
  Pool(size_t threads, size_t max_queued, std::function<void(Job&)> run)
      : max_queued_(max_queued), run_(std::move(run)) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~Pool() { Stop(); }

  /// False when the queue is full.
  bool Submit(Job job) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (jobs_.size() >= max_queued_ || stopping_) return false;
    jobs_.push_back(std::move(job));
    wake_.notify_one();
    return true;
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      jobs_.clear();
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      run_(job);
      lock.lock();
    }
  }

  const size_t max_queued_;
  std::function<void(Job&)> run_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

enum class State {
  kIdle,     // waiting for a request's first byte
  kHeaders,  // a request's line and headers are arriving
  kBody,     // its body is arriving
  kBusy,     // a handler has it
  kWriting,  // its answer is being sent
};

struct Connection;
// Connections not handed to a handler, oldest state change first: who makes room at a limit.
using Waiting = std::list<Connection*>;

struct AddressSlot {
  size_t count = 0;  // every connection of the address, busy ones included
  Waiting waiting;
};

struct Connection {
  uint64_t id = 0;
  int fd = -1;
  std::string address;
  bool loopback = false;
  State state = State::kIdle;
  Clock::time_point deadline;
  std::string in;           // read, not consumed yet
  size_t scanned = 0;       // `in` has no blank line before this
  size_t body_at = 0;       // kBody: where the body starts in `in`
  size_t body_length = 0;
  bool expect_continue = false;
  HttpRequest request;      // kBody: the parsed head
  std::string out;          // kWriting: the answer
  size_t out_at = 0;
  bool close_after = false;
  bool peer_closed = false;
  uint32_t events = 0;
  bool listed = false;
  Waiting::iterator in_all;
  Waiting::iterator in_address;
  AddressSlot* slot = nullptr;
};

}  // namespace

class HttpLoop::Impl {
 public:
  Impl(int listen_fd, HttpDispatcher dispatcher, const HttpLoopOptions& options)
      : listen_(listen_fd), dispatcher_(std::move(dispatcher)), options_(options) {}

  ~Impl() {
    stopping_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
    // Handlers still running finish; their answers go nowhere.
    if (probes_) probes_->Stop();
    if (workers_) workers_->Stop();
    for (auto& [id, connection] : connections_) close(connection->fd);
    if (listen_ >= 0) close(listen_);
    if (wake_ >= 0) close(wake_);
    if (epoll_ >= 0) close(epoll_);
  }

  Status Open() {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_ < 0 || wake_ < 0) {
      return MakeError(ErrorCode::kIo, "http: epoll/eventfd: {}", std::strerror(errno));
    }
    epoll_event listen_event{};
    listen_event.events = EPOLLIN;
    listen_event.data.u64 = kListenId;
    epoll_event wake_event{};
    wake_event.events = EPOLLIN;
    wake_event.data.u64 = kWakeId;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, listen_, &listen_event) != 0 ||
        epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &wake_event) != 0) {
      return MakeError(ErrorCode::kIo, "http: epoll_ctl: {}", std::strerror(errno));
    }
    // Each connection holds a descriptor: leave the other half of the limit to the rest of the
    // process (RocksDB, Kafka, sinks).
    max_connections_ = options_.max_connections;
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      max_connections_ =
          std::min<size_t>(max_connections_, std::max<size_t>(16, limit.rlim_cur / 2));
    }
    max_per_address_ = std::min(options_.max_connections_per_address, max_connections_);
    auto run = [this](Job& job) { Run(job); };
    probes_ = std::make_unique<Pool>(options_.probe_threads, options_.max_queued * 4, run);
    workers_ = std::make_unique<Pool>(options_.worker_threads, options_.max_queued, run);
    thread_ = std::thread([this] { Loop(); });
    return Ok();
  }

 private:
  // ---- on the pools' threads ----

  void Run(Job& job) {
    HttpResponse response;
    try {
      response = (*job.handler)(job.request);
    } catch (const std::exception& e) {
      // A handler's failure is this request's 500, not the end of the endpoint.
      Log()->error("{} {}: {}", job.request.method, job.request.path, e.what());
      response = TextResponse(500, "internal error\n");
    }
    Completion done;
    done.connection = job.connection;
    done.bytes = Serialize(response, job.head, job.keep_alive, job.request.minor_version);
    done.close = !job.keep_alive;
    {
      std::lock_guard<std::mutex> lock(completions_mutex_);
      completions_.push_back(std::move(done));
    }
    Wake();
  }

  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof one);
  }

  // ---- on the loop's thread ----

  void Loop() {
    std::vector<epoll_event> events(256);
    auto next_sweep = Clock::now() + kSweepInterval;
    while (!stopping_.load()) {
      const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(kSweepInterval.count()));
      if (n < 0 && errno != EINTR) {
        Log()->error("epoll_wait: {}; the HTTP endpoint stops", std::strerror(errno));
        return;
      }
      now_ = Clock::now();
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        if (id == kListenId) {
          Accept();
        } else if (id == kWakeId) {
          uint64_t count = 0;
          (void)!read(wake_, &count, sizeof count);
          TakeCompletions();
        } else {
          OnEvent(id, events[i].events);
        }
      }
      if (now_ >= next_sweep) {
        Sweep();
        next_sweep = now_ + kSweepInterval;
      }
    }
  }

  void Accept() {
    // Bounded per turn so that the connections already in get their turn during a flood.
    for (int i = 0; i < 1024; ++i) {
      sockaddr_storage address{};
      socklen_t length = sizeof address;
      const int fd = accept4(listen_, reinterpret_cast<sockaddr*>(&address), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the oldest waiting connection makes room, else wait a moment.
          if (EvictOldest(all_)) continue;
          PauseAccepting();
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          Log()->warn("accept: {}", std::strerror(errno));
        }
        return;
      }
      Admit(fd, address);
    }
  }

  void Admit(int fd, const sockaddr_storage& address) {
    auto connection = std::make_unique<Connection>();
    connection->id = next_id_++;
    connection->fd = fd;
    connection->address = AddressText(address);
    connection->loopback = Loopback(address);
    AddressSlot& slot = addresses_[connection->address];
    // The new connection's place is taken first, so that the slot stays while its own older
    // connections make room.
    ++slot.count;
    while (slot.count > max_per_address_ && EvictOldest(slot.waiting)) ++evicted_per_address_;
    while (connections_.size() >= max_connections_ && EvictOldest(all_)) ++evicted_;
    auto give_up = [&] {
      close(fd);
      if (--slot.count == 0) addresses_.erase(connection->address);
    };
    if (connections_.size() >= max_connections_ || slot.count > max_per_address_) {
      // Every connection is with a handler: nothing to close but the new one.
      give_up();
      ++refused_;
      Report();
      return;
    }
    const int yes = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = connection->id;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event) != 0) {
      give_up();
      return;
    }
    connection->events = EPOLLIN;
    connection->slot = &slot;
    Connection& c = *connection;
    connections_.emplace(c.id, std::move(connection));
    Enter(c, State::kIdle, options_.idle_timeout);
    if (evicted_ + evicted_per_address_ > 0) Report();
  }

  void OnEvent(uint64_t id, uint32_t events) {
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    Connection& c = *it->second;
    if ((events & EPOLLERR) != 0) {
      Close(c);
      return;
    }
    if (c.state == State::kWriting) {
      if ((events & (EPOLLOUT | EPOLLHUP)) != 0) Flush(c);
      return;
    }
    if (c.state == State::kBusy) {
      // Nothing is read while a handler has the request; a hang-up means nobody waits for it.
      if ((events & EPOLLHUP) != 0) Close(c);
      return;
    }
    if ((events & (EPOLLIN | EPOLLHUP)) != 0) Read(c);
  }

  void Read(Connection& c) {
    char buffer[16 * 1024];
    const ssize_t n = recv(c.fd, buffer, sizeof buffer, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      Close(c);
      return;
    }
    if (n == 0) {
      c.peer_closed = true;
    } else {
      c.in.append(buffer, static_cast<size_t>(n));
    }
    const uint64_t id = c.id;
    Advance(c);
    // Advance may have closed it.
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    Connection& still = *it->second;
    if (still.peer_closed && (still.state == State::kIdle || still.state == State::kHeaders ||
                              still.state == State::kBody)) {
      Close(still);  // the client went away before its request was complete
    }
  }

  // Moves a connection on from what it has read: the head, the body, the handler.
  void Advance(Connection& c) {
    if (c.state == State::kIdle) {
      if (c.in.empty()) return;
      Enter(c, State::kHeaders, options_.header_deadline);
    }
    if (c.state == State::kHeaders) {
      size_t end = std::string::npos;
      size_t blank = 0;
      for (size_t at = c.scanned; at < c.in.size(); ++at) {
        if (c.in[at] != '\n') continue;
        // A line end followed by an empty line ("\n\n" or "\n\r\n") ends the head; empty lines
        // before the request line do not.
        if (at + 1 < c.in.size() && c.in[at + 1] == '\n') {
          blank = 2;
        } else if (at + 2 < c.in.size() && c.in[at + 1] == '\r' && c.in[at + 2] == '\n') {
          blank = 3;
        } else {
          continue;
        }
        if (c.in.find_first_not_of("\r\n") < at) {
          end = at;
          break;
        }
      }
      if (end == std::string::npos) {
        if (c.in.size() > options_.max_header_bytes) {
          Refuse(c, 431, "the request's headers are too large");
          return;
        }
        // The last two bytes may begin the blank line: look at them again next time.
        c.scanned = c.in.size() >= 2 ? c.in.size() - 2 : 0;
        return;
      }
      if (end > options_.max_header_bytes) {
        Refuse(c, 431, "the request's headers are too large");
        return;
      }
      c.request = HttpRequest();
      c.request.remote_address = c.address;
      c.request.remote_loopback = c.loopback;
      Head head = ParseHead(std::string_view(c.in).substr(0, end + 1), c.request);
      if (head.error_status != 0) {
        Refuse(c, head.error_status, head.error);
        return;
      }
      if (head.body_length > options_.max_body_bytes) {
        Refuse(c, 413, fmt::format("request bodies of up to {} bytes are accepted",
                                   options_.max_body_bytes));
        return;
      }
      c.body_at = end + blank;
      c.body_length = head.body_length;
      c.expect_continue = head.expect_continue;
      Enter(c, State::kBody, options_.body_deadline);
    }
    if (c.state == State::kBody) {
      if (c.in.size() < c.body_at + c.body_length) {
        if (c.expect_continue) {
          // The client waits for this before it sends the body; it is short enough for the
          // socket's buffer, which holds nothing else now.
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          (void)!send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          c.expect_continue = false;
        }
        return;
      }
      c.request.body = c.in.substr(c.body_at, c.body_length);
      c.in.erase(0, c.body_at + c.body_length);
      c.scanned = 0;
      Dispatch(c);
    }
  }

  void Dispatch(Connection& c) {
    HttpRequest& request = c.request;
    const std::string* content_type = request.Header("content-type");
    if (content_type != nullptr &&
        AsciiLower(*content_type).rfind("application/x-www-form-urlencoded", 0) == 0) {
      AddParams(request.body, request.params);
    }
    const std::string* connection = request.Header("connection");
    const bool keep_alive = !c.peer_closed && !HasToken(connection, "close") &&
                            (request.minor_version == 1 || HasToken(connection, "keep-alive"));
    const bool head = request.method == "HEAD";
    HttpDispatch dispatch = dispatcher_(request);
    if (dispatch.immediate || dispatch.handler == nullptr) {
      HttpResponse response =
          dispatch.immediate ? std::move(*dispatch.immediate) : TextResponse(404, "not found\n");
      StartWrite(c, Serialize(response, head, keep_alive, request.minor_version), !keep_alive);
      return;
    }
    Job job;
    job.connection = c.id;
    job.handler = dispatch.handler;
    job.head = head;
    job.keep_alive = keep_alive;
    const int minor = request.minor_version;
    job.request = std::move(request);
    Enter(c, State::kBusy, {});
    SetEvents(c, 0);
    Pool& pool = dispatch.pool == HttpPool::kProbe ? *probes_ : *workers_;
    if (!pool.Submit(std::move(job))) {
      HttpResponse busy = TextResponse(503, "the endpoint is busy; try again\n");
      busy.headers.emplace_back("Retry-After", "1");
      StartWrite(c, Serialize(busy, head, keep_alive, minor), !keep_alive);
    }
  }

  // Answers a request that cannot be read on (malformed, too large, too slow) and closes.
  void Refuse(Connection& c, int status, const std::string& why) {
    StartWrite(c, Serialize(TextResponse(status, why + "\n"), false, false, 1), true);
  }

  void TakeCompletions() {
    std::vector<Completion> done;
    {
      std::lock_guard<std::mutex> lock(completions_mutex_);
      done.swap(completions_);
    }
    for (Completion& completion : done) {
      auto it = connections_.find(completion.connection);
      if (it == connections_.end()) continue;  // the client left, or the loop closed it
      StartWrite(*it->second, std::move(completion.bytes), completion.close);
    }
  }

  void StartWrite(Connection& c, std::string bytes, bool close_after) {
    c.out = std::move(bytes);
    c.out_at = 0;
    c.close_after = c.close_after || close_after;
    Enter(c, State::kWriting, options_.write_deadline);
    Flush(c);
  }

  void Flush(Connection& c) {
    while (c.out_at < c.out.size()) {
      const ssize_t n =
          send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          SetEvents(c, EPOLLOUT);
          return;
        }
        Close(c);
        return;
      }
      c.out_at += static_cast<size_t>(n);
    }
    if (c.close_after) {
      Close(c);
      return;
    }
    std::string().swap(c.out);
    c.out_at = 0;
    SetEvents(c, EPOLLIN);
    Enter(c, State::kIdle, options_.idle_timeout);
    // A pipelined request may be read already.
    const uint64_t id = c.id;
    Advance(c);
    auto it = connections_.find(id);
    if (it != connections_.end() && it->second->peer_closed &&
        it->second->state == State::kIdle) {
      Close(*it->second);
    }
  }

  // A state change: its deadline, and its place at the back of the waiting lists (a busy
  // connection is in none: it is never closed to make room).
  void Enter(Connection& c, State state, std::chrono::milliseconds timeout) {
    c.state = state;
    c.deadline = now_ + timeout;
    Unlist(c);
    if (state == State::kBusy) return;
    c.in_all = all_.insert(all_.end(), &c);
    c.in_address = c.slot->waiting.insert(c.slot->waiting.end(), &c);
    c.listed = true;
  }

  void Unlist(Connection& c) {
    if (!c.listed) return;
    all_.erase(c.in_all);
    c.slot->waiting.erase(c.in_address);
    c.listed = false;
  }

  void SetEvents(Connection& c, uint32_t events) {
    if (c.events == events) return;
    epoll_event event{};
    event.events = events;
    event.data.u64 = c.id;
    if (epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &event) == 0) c.events = events;
  }

  bool EvictOldest(Waiting& waiting) {
    if (waiting.empty()) return false;
    Close(*waiting.front());
    return true;
  }

  void Close(Connection& c) {
    Unlist(c);
    close(c.fd);  // also leaves the epoll set
    AddressSlot* slot = c.slot;
    const std::string address = c.address;
    const uint64_t id = c.id;
    connections_.erase(id);  // c is gone from here on
    if (slot != nullptr && --slot->count == 0) addresses_.erase(address);
  }

  void PauseAccepting() {
    epoll_event event{};
    event.events = 0;
    event.data.u64 = kListenId;
    if (epoll_ctl(epoll_, EPOLL_CTL_MOD, listen_, &event) == 0) {
      accept_paused_until_ = now_ + kAcceptPause;
      accept_paused_ = true;
    }
  }

  // Closes the connections past their deadline; a request that was still arriving is told why.
  void Sweep() {
    std::vector<uint64_t> expired;
    for (Connection* c : all_) {
      if (c->deadline <= now_) expired.push_back(c->id);
    }
    for (uint64_t id : expired) {
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      Connection& c = *it->second;
      if (c.state == State::kHeaders || c.state == State::kBody) {
        ++timed_out_;
        const std::string answer = Serialize(
            TextResponse(408, c.state == State::kHeaders
                                  ? "the request's headers did not arrive in time\n"
                                  : "the request's body did not arrive in time\n"),
            false, false, 1);
        (void)!send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      Close(c);
    }
    if (accept_paused_ && now_ >= accept_paused_until_) {
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.u64 = kListenId;
      if (epoll_ctl(epoll_, EPOLL_CTL_MOD, listen_, &event) == 0) accept_paused_ = false;
    }
    if (timed_out_ > 0) Report();
  }

  // What the limits and deadlines did, in the log at most once a minute.
  void Report() {
    if (now_ < next_report_) return;
    if (evicted_ + evicted_per_address_ + refused_ + timed_out_ == 0) return;
    Log()->warn(
        "{} connections open; since the last report {} were closed to make room (at most {} "
        "connections, {} per client address: {} at the address limit), {} refused while every "
        "connection was being answered, {} closed for a request that did not arrive within "
        "{} ms",
        connections_.size(), evicted_ + evicted_per_address_, max_connections_, max_per_address_,
        evicted_per_address_, refused_, timed_out_, options_.header_deadline.count());
    evicted_ = evicted_per_address_ = refused_ = timed_out_ = 0;
    next_report_ = now_ + kReportInterval;
  }

  int listen_ = -1;
  int epoll_ = -1;
  int wake_ = -1;
  HttpDispatcher dispatcher_;
  const HttpLoopOptions options_;
  size_t max_connections_ = 0;
  size_t max_per_address_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::unique_ptr<Pool> probes_;
  std::unique_ptr<Pool> workers_;
  std::mutex completions_mutex_;
  std::vector<Completion> completions_;

  // The loop thread's own.
  Clock::time_point now_ = Clock::now();
  uint64_t next_id_ = 2;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::unordered_map<std::string, AddressSlot> addresses_;
  Waiting all_;
  bool accept_paused_ = false;
  Clock::time_point accept_paused_until_;
  Clock::time_point next_report_;
  uint64_t evicted_ = 0;
  uint64_t evicted_per_address_ = 0;
  uint64_t refused_ = 0;
  uint64_t timed_out_ = 0;
};

HttpLoop::HttpLoop(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpLoop::~HttpLoop() = default;

Result<std::unique_ptr<HttpLoop>> HttpLoop::Start(int listen_fd, HttpDispatcher dispatcher,
                                                  const HttpLoopOptions& options) {
  auto impl = std::make_unique<Impl>(listen_fd, std::move(dispatcher), options);
  DRIFTD_TRY(impl->Open());
  return std::unique_ptr<HttpLoop>(new HttpLoop(std::move(impl)));
}

}  // namespace driftd
