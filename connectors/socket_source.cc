// The `socket` source: text lines from a TCP server (like Spark's socket source, driftd connects
// as a client, e.g. to `nc -lk 9999`). Not fault-tolerant: lines live only in memory between
// batches, so a restart neither replays nor recovers what was buffered.
//
// Threads: one background thread per source receives lines into a bounded buffer; the
// executor's thread plans, reads and trims it (connectors/line_source.h).
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "connectors/connector_factories.h"
#include "connectors/fs_util.h"
#include "connectors/line_source.h"
#include "engine/log.h"

namespace driftd {

namespace {

constexpr std::string_view kSocketPartition = "socket";
constexpr auto kReconnectDelay = std::chrono::seconds(1);

// The source's options as bound (their defaults are declared in SocketSourceDecl only).
struct SocketOptions {
  std::string host;
  int port = 0;
  /// Received bytes held before reading pauses (TCP backpressure).
  int64_t max_buffered_bytes = 0;
};

Result<UniqueFd> Connect(const SocketOptions& options) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string port = std::to_string(options.port);
  int rc = ::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return MakeError(ErrorCode::kIo, "resolving {}: {}", options.host, ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses{found, &::freeaddrinfo};
  int last_error = 0;
  for (addrinfo* address = addresses.get(); address != nullptr; address = address->ai_next) {
    UniqueFd fd{
        ::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol)};
    if (!fd.valid()) {
      last_error = errno;
      continue;
    }
    timeval timeout{5, 0};  // bounds connect() on Linux
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (::connect(fd.get(), address->ai_addr, address->ai_addrlen) == 0) return fd;
    last_error = errno;
  }
  return MakeError(ErrorCode::kIo, "connecting to {}:{}: {}", options.host, options.port,
                   std::strerror(last_error));
}

class SocketSource final : public LineSource {
 public:
  explicit SocketSource(SocketOptions options)
      : LineSource(kSocketPartition, options.max_buffered_bytes), options_(std::move(options)) {}

  ~SocketSource() override { StopReceiving(); }

  Status Start(const SourceOffsets& committed) override {
    lines_.Start(committed);
    auto fd = Connect(options_);
    if (!fd) return tl::unexpected(fd.error());
    connected_ = true;
    receiver_ = std::thread([this, socket = std::move(*fd)]() mutable { Run(std::move(socket)); });
    return Ok();
  }

  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t received = lines_.received();
    int64_t end = frozen_ ? std::min(*frozen_, received) : received;
    auto it = start.find(std::string(kSocketPartition));
    if (it != start.end() && end <= it->second) return start;
    return SourceOffsets{{std::string(kSocketPartition), end}};
  }

  Status FreezeAvailable() override {
    std::lock_guard<std::mutex> lock(mutex_);
    frozen_ = lines_.received();
    return Ok();
  }

  std::string DescribePosition(const RecordPosition& position) const override {
    return fmt::format("socket {}:{} line {}", options_.host, options_.port, position.offset);
  }

  std::string Describe() const override {
    return fmt::format("TextSocketSource[host: {}, port: {}]", options_.host, options_.port);
  }

  bool IsReady() const override { return connected_; }

 private:
  // Receives until destruction, reconnecting after the server closes or fails.
  void Run(UniqueFd socket) {
    std::string block(64 << 10, '\0');
    while (true) {
      if (!socket.valid()) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          if (changed_.wait_for(lock, kReconnectDelay, [this] { return stop_; })) return;
        }
        auto fd = Connect(options_);
        if (!fd) continue;
        socket = std::move(*fd);
        connected_ = true;
        GetLogger("connectors")
            ->info("socket source reconnected to {}:{}", options_.host, options_.port);
      }
      // A full buffer pauses reading; the sender then blocks (TCP backpressure).
      const std::optional<ssize_t> got = ReceiveWhenRoom(socket.get(), block);
      if (!got) return;
      if (*got <= 0) {
        GetLogger("connectors")
            ->warn("socket source lost {}:{}: {}; reconnecting", options_.host, options_.port,
                   *got == 0 ? "closed by the server" : std::strerror(errno));
        socket = UniqueFd();
        connected_ = false;
        std::lock_guard<std::mutex> lock(mutex_);
        lines_.EndPendingLine();  // the server ended the last line by closing
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.Append(std::string_view(block.data(), static_cast<size_t>(*got)));
    }
  }

  SocketOptions options_;
  std::atomic<bool> connected_{false};
  std::optional<int64_t> frozen_;  // guarded by mutex_
};

}  // namespace

ConnectorDecl SocketSourceDecl() {
  ConnectorDecl decl;
  decl.format = "socket";
  decl.role = ConnectorRole::kSource;
  decl.doc =
      "Text lines (one JSON record per line) read from a TCP server, as Spark's socket source: "
      "driftd connects to host:port (try `nc -lk 9999`) and reconnects if the server goes away. "
      "NOT fault-tolerant: lines are buffered in memory between batches, and a restart neither "
      "replays nor recovers them, so exactly-once does not hold. For testing and demos only. "
      "Offsets: `socket` = lines received.";
  decl.options = {
      {"host", OptionType::kString, "localhost", "Server host name or address."},
      OptionDecl{"port", OptionType::kInt, "", "Server TCP port.", true}.Between(1, 65535),
      OptionDecl{"maxBufferedBytes", OptionType::kInt, "67108864",
                 "Received bytes held between batches; beyond it, reading pauses and the sender "
                 "blocks."}
          .AtLeast(1024),
  };
  BindSource<SocketOptions>(
      decl,
      [](const PipelineSpec&, const SourceSpec&, const Options& o) -> Bound<SocketOptions> {
        SocketOptions options;
        options.host = o.GetString("host");
        options.port = static_cast<int>(o.GetInt("port"));
        options.max_buffered_bytes = o.GetInt("maxBufferedBytes");
        if (options.host.empty()) return tl::unexpected(OptionProblem{"host", "must not be empty"});
        return options;
      },
      [](const PipelineSpec&, SocketOptions options) {
        return Result<std::unique_ptr<Source>>(std::make_unique<SocketSource>(std::move(options)));
      });
  return decl;
}

Result<std::unique_ptr<Source>> CreateSocketSource(const PipelineSpec& pipeline) {
  static const ConnectorDecl decl = SocketSourceDecl();
  return decl.create_source(pipeline);
}

}  // namespace driftd
