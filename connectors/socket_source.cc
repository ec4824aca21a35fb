// The `socket` source: text lines from a TCP server (like Spark's socket source, driftd connects
// as a client, e.g. to `nc -lk 9999`). Not fault-tolerant: lines live only in memory between
// batches, so a restart neither replays nor recovers what was buffered.
//
// Threads: one background thread per source receives lines into a bounded buffer; the
// executor's thread plans, reads and trims it. A mutex guards the buffer.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "connectors/connector_factories.h"
#include "connectors/fs_util.h"
#include "engine/log.h"

namespace driftd {

namespace {

constexpr std::string_view kPartition = "socket";
constexpr int kPollMs = 200;
constexpr auto kReconnectDelay = std::chrono::seconds(1);

// The source's options as bound (their defaults are declared in SocketSourceDecl only).
struct SocketOptions {
  std::string host;
  int port = 0;
  /// Received bytes held before reading pauses (TCP backpressure).
  int64_t max_buffered_bytes = 0;
};

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

class SocketSource;

class SocketReader final : public SourceReader {
 public:
  SocketReader(SocketSource& source, int64_t begin, int64_t end)
      : source_(source), next_(begin), end_(end) {}
  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override;
  int64_t lost_records() const override { return lost_; }

 private:
  SocketSource& source_;
  int64_t next_;
  int64_t end_;
  int64_t lost_ = 0;
};

class SocketSource final : public Source {
 public:
  explicit SocketSource(SocketOptions options) : options_(std::move(options)) {}

  ~SocketSource() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Status Start(const SourceOffsets& committed) override {
    auto it = committed.find(std::string(kPartition));
    // Line numbers continue after a restart; the lines themselves are not replayed.
    first_line_ = received_ = it == committed.end() ? 0 : it->second;
    auto fd = Connect(options_);
    if (!fd) return tl::unexpected(fd.error());
    connected_ = true;
    thread_ = std::thread([this, socket = std::move(*fd)]() mutable { Run(std::move(socket)); });
    return Ok();
  }

  Result<SourceOffsets> InitialOffsets() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return SourceOffsets{{std::string(kPartition), first_line_}};
  }

  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t end = frozen_ ? std::min(*frozen_, received_) : received_;
    auto it = start.find(std::string(kPartition));
    if (it != start.end() && end <= it->second) return start;
    return SourceOffsets{{std::string(kPartition), end}};
  }

  Status FreezeAvailable() override {
    std::lock_guard<std::mutex> lock(mutex_);
    frozen_ = received_;
    return Ok();
  }

  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    auto position = [](const SourceOffsets& offsets) {
      auto it = offsets.find(std::string(kPartition));
      return it == offsets.end() ? int64_t{0} : it->second;
    };
    return std::make_unique<SocketReader>(*this, position(start), position(end));
  }

  Status OnCommitted(const SourceOffsets& end) override {
    auto it = end.find(std::string(kPartition));
    if (it == end.end()) return Ok();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Drop committed lines and compact the byte buffer behind them.
      size_t drop = 0;
      while (!lines_.empty() && first_line_ < it->second) {
        drop = lines_.front().begin + lines_.front().size;
        lines_.pop_front();
        ++first_line_;
      }
      if (drop > 0) {
        data_.erase(0, drop);
        for (Line& line : lines_) line.begin -= drop;
        pending_ -= drop;
      }
    }
    space_.notify_all();
    return Ok();
  }

  std::vector<PartitionLag> Lag(const SourceOffsets& position) override {
    auto it = position.find(std::string(kPartition));
    std::lock_guard<std::mutex> lock(mutex_);
    return {{std::string(kPartition), it == position.end() ? first_line_ : it->second, received_}};
  }

  std::string DescribePosition(const RecordPosition& position) const override {
    return fmt::format("socket {}:{} line {}", options_.host, options_.port, position.offset);
  }

  std::string Describe() const override {
    return fmt::format("TextSocketSource[host: {}, port: {}]", options_.host, options_.port);
  }

  bool IsReplayable() const override { return false; }
  bool IsReady() const override { return connected_; }

 private:
  friend class SocketReader;

  struct Line {
    size_t begin = 0;  // into data_
    uint32_t size = 0;
    int64_t received_us = 0;
  };

  // Receives until destruction, reconnecting after the server closes or fails.
  void Run(UniqueFd socket) {
    std::string block(64 << 10, '\0');
    while (true) {
      if (!socket.valid()) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          if (space_.wait_for(lock, kReconnectDelay, [this] { return stop_; })) return;
        }
        auto fd = Connect(options_);
        if (!fd) continue;
        socket = std::move(*fd);
        connected_ = true;
        GetLogger("connectors")
            ->info("socket source reconnected to {}:{}", options_.host, options_.port);
      }
      {
        // Pause reading while the buffer is full; the sender then blocks (TCP backpressure).
        std::unique_lock<std::mutex> lock(mutex_);
        space_.wait(lock, [this] {
          return stop_ || static_cast<int64_t>(data_.size()) < options_.max_buffered_bytes;
        });
        if (stop_) return;
      }
      pollfd wait{socket.get(), POLLIN, 0};
      int ready = ::poll(&wait, 1, kPollMs);
      if (ready == 0 || (ready < 0 && errno == EINTR)) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
        continue;
      }
      ssize_t got = ready < 0 ? -1 : ::recv(socket.get(), block.data(), block.size(), 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        GetLogger("connectors")
            ->warn("socket source lost {}:{}: {}; reconnecting", options_.host, options_.port,
                   got == 0 ? "closed by the server" : std::strerror(errno));
        socket = UniqueFd();
        connected_ = false;
        std::lock_guard<std::mutex> lock(mutex_);
        EndPendingLine();  // the server ended the last line by closing
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      Append(std::string_view(block.data(), static_cast<size_t>(got)));
    }
  }

  // Appends received bytes and cuts complete lines. Caller holds mutex_.
  void Append(std::string_view bytes) {
    size_t scan = data_.size();
    data_ += bytes;
    int64_t now = NowUs();
    while (true) {
      size_t newline = data_.find('\n', scan);
      if (newline == std::string::npos) break;
      AddLine(pending_, newline, now);
      pending_ = scan = newline + 1;
    }
    // Bytes of blank lines are only trimmed with the lines after them; with no line pending,
    // drop them now so a stream of blank lines cannot fill the buffer.
    if (lines_.empty() && pending_ > 0) {
      data_.erase(0, pending_);
      pending_ = 0;
    }
    // One line larger than the whole buffer would stall reading forever; cut it.
    if (static_cast<int64_t>(data_.size() - pending_) >= options_.max_buffered_bytes) {
      EndPendingLine();
    }
  }

  void EndPendingLine() {
    if (pending_ < data_.size()) AddLine(pending_, data_.size(), NowUs());
    pending_ = data_.size();
  }

  void AddLine(size_t begin, size_t end, int64_t received_us) {
    if (end > begin && data_[end - 1] == '\r') --end;
    if (end == begin) return;  // blank lines carry no record
    lines_.push_back({begin, static_cast<uint32_t>(end - begin), received_us});
    ++received_;
  }

  SocketOptions options_;
  std::thread thread_;
  std::atomic<bool> connected_{false};
  mutable std::mutex mutex_;
  std::condition_variable space_;
  bool stop_ = false;
  std::string data_;        // received bytes not yet committed
  std::deque<Line> lines_;  // complete lines in data_, line number first_line_ first
  size_t pending_ = 0;      // start of the incomplete last line in data_
  int64_t first_line_ = 0;  // number of lines_.front()
  int64_t received_ = 0;    // lines received since the stream began (continues after restarts)
  std::optional<int64_t> frozen_;
};

Result<bool> SocketReader::Next(InputChunk& chunk, size_t max_bytes) {
  std::lock_guard<std::mutex> lock(source_.mutex_);
  while (next_ < end_ && chunk.byte_size() < max_bytes) {
    if (next_ < source_.first_line_) {
      // Already trimmed: the range is older than this process (socket is not replayable).
      lost_ += source_.first_line_ - next_;
      next_ = source_.first_line_;
      continue;
    }
    const auto index = static_cast<size_t>(next_ - source_.first_line_);
    if (index >= source_.lines_.size()) break;
    const SocketSource::Line& line = source_.lines_[index];
    chunk.Append(std::string_view(source_.data_).substr(line.begin, line.size),
                 RecordPosition{0, next_}, line.received_us);
    ++next_;
  }
  return next_ < end_ && static_cast<size_t>(next_ - source_.first_line_) < source_.lines_.size();
}

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
