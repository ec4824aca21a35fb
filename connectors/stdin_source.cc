// The `stdin` source: JSON lines from the daemon's standard input, for a pipe
// (`zcat logs.jsonl.gz | driftd run p.yaml`) or a quick try at a terminal. Not fault-tolerant:
// lines live only in memory between batches, and a restart neither replays nor recovers what
// was read (like the socket source). With trigger once or availableNow the query reads to the
// end of the input and then stops, so a file piped in is processed whole.
//
// Threads: one background thread reads the descriptor into a bounded buffer; the executor's
// thread plans, reads and trims it. A mutex guards the buffer.
#include <poll.h>
#include <unistd.h>

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
#include "engine/log.h"

namespace driftd {
namespace {

constexpr std::string_view kPartition = "stdin";
constexpr int kPollMs = 200;

struct StdinOptions {
  /// Bytes read but not yet committed before reading pauses (the writer then blocks).
  int64_t max_buffered_bytes = 0;
};

class StdinSource;

class StdinReader final : public SourceReader {
 public:
  StdinReader(StdinSource& source, int64_t begin, int64_t end)
      : source_(source), next_(begin), end_(end) {}
  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override;
  int64_t lost_records() const override { return lost_; }

 private:
  StdinSource& source_;
  int64_t next_;
  int64_t end_;
  int64_t lost_ = 0;
};

class StdinSource final : public Source {
 public:
  explicit StdinSource(StdinOptions options) : options_(options) {}

  ~StdinSource() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Status Start(const SourceOffsets& committed) override {
    auto it = committed.find(std::string(kPartition));
    // Line numbers continue after a restart; the lines themselves are not replayed.
    first_line_ = received_ = it == committed.end() ? 0 : it->second;
    thread_ = std::thread([this] { Run(); });
    return Ok();
  }

  Result<SourceOffsets> InitialOffsets() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return SourceOffsets{{std::string(kPartition), first_line_}};
  }

  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = start.find(std::string(kPartition));
    const int64_t from = it == start.end() ? first_line_ : it->second;
    // Draining to the end: a batch waits for lines (or the end) rather than seeing none.
    if (to_end_) changed_.wait(lock, [&] { return stop_ || ended_ || received_ > from; });
    if (received_ <= from) return start;
    return SourceOffsets{{std::string(kPartition), received_}};
  }

  // What is available of a pipe is all of it, to its end: from now on a batch waits for lines
  // and no batch finds nothing before the end. The reading thread goes on as batches commit,
  // so an input larger than maxBufferedBytes is drained too.
  Status FreezeAvailable() override {
    std::lock_guard<std::mutex> lock(mutex_);
    to_end_ = true;
    return Ok();
  }

  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    auto position = [](const SourceOffsets& offsets) {
      auto it = offsets.find(std::string(kPartition));
      return it == offsets.end() ? int64_t{0} : it->second;
    };
    return std::make_unique<StdinReader>(*this, position(start), position(end));
  }

  Status OnCommitted(const SourceOffsets& end) override {
    auto it = end.find(std::string(kPartition));
    if (it == end.end()) return Ok();
    {
      std::lock_guard<std::mutex> lock(mutex_);
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
    changed_.notify_all();
    return Ok();
  }

  std::vector<PartitionLag> Lag(const SourceOffsets& position) override {
    auto it = position.find(std::string(kPartition));
    std::lock_guard<std::mutex> lock(mutex_);
    return {{std::string(kPartition), it == position.end() ? first_line_ : it->second, received_}};
  }

  std::string DescribePosition(const RecordPosition& position) const override {
    return fmt::format("stdin line {}", position.offset + 1);
  }

  std::string Describe() const override { return "StdinSource"; }

  bool IsReplayable() const override { return false; }

 private:
  friend class StdinReader;

  struct Line {
    size_t begin = 0;  // into data_
    uint32_t size = 0;
    int64_t read_us = 0;
  };

  // Reads until the end of the input or destruction.
  void Run() {
    std::string block(64 << 10, '\0');
    while (true) {
      {
        // Pause while the buffer is full; the writer then blocks on the full pipe.
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] {
          return stop_ || static_cast<int64_t>(data_.size()) < options_.max_buffered_bytes;
        });
        if (stop_) return;
      }
      pollfd wait{STDIN_FILENO, POLLIN, 0};
      const int ready = ::poll(&wait, 1, kPollMs);
      if (ready == 0 || (ready < 0 && errno == EINTR)) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
        continue;
      }
      const ssize_t got = ready < 0 ? -1 : ::read(STDIN_FILENO, block.data(), block.size());
      if (got < 0 && errno == EINTR) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      if (got <= 0) {
        if (got < 0) {
          GetLogger("connectors")->warn("stdin source: {}; no more input", std::strerror(errno));
        }
        EndPendingLine();  // the input's last line may lack its newline
        ended_ = true;
        changed_.notify_all();
        return;
      }
      Append(std::string_view(block.data(), static_cast<size_t>(got)));
      changed_.notify_all();  // a batch draining to the end may be waiting for lines
    }
  }

  // Appends bytes read and cuts complete lines. Caller holds mutex_.
  void Append(std::string_view bytes) {
    size_t scan = data_.size();
    data_ += bytes;
    while (true) {
      const size_t newline = data_.find('\n', scan);
      if (newline == std::string::npos) break;
      AddLine(pending_, newline);
      pending_ = scan = newline + 1;
    }
    if (lines_.empty() && pending_ > 0) {  // only blank lines: drop their bytes now
      data_.erase(0, pending_);
      pending_ = 0;
    }
    // One line larger than the whole buffer would stall reading forever; cut it.
    if (static_cast<int64_t>(data_.size() - pending_) >= options_.max_buffered_bytes) {
      EndPendingLine();
    }
  }

  void EndPendingLine() {
    if (pending_ < data_.size()) AddLine(pending_, data_.size());
    pending_ = data_.size();
  }

  void AddLine(size_t begin, size_t end) {
    if (end > begin && data_[end - 1] == '\r') --end;
    if (end == begin) return;  // blank lines carry no record
    const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    lines_.push_back({begin, static_cast<uint32_t>(end - begin), now});
    ++received_;
  }

  StdinOptions options_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  bool ended_ = false;
  std::string data_;        // bytes read and not yet committed
  std::deque<Line> lines_;  // complete lines in data_, line number first_line_ first
  size_t pending_ = 0;      // start of the incomplete last line in data_
  int64_t first_line_ = 0;  // number of lines_.front()
  int64_t received_ = 0;    // lines read since the stream began (continues after restarts)
  bool to_end_ = false;     // FreezeAvailable: batches drain the input to its end
};

Result<bool> StdinReader::Next(InputChunk& chunk, size_t max_bytes) {
  std::lock_guard<std::mutex> lock(source_.mutex_);
  while (next_ < end_ && chunk.byte_size() < max_bytes) {
    if (next_ < source_.first_line_) {
      // Trimmed already: the range is older than this process (stdin is not replayable).
      lost_ += source_.first_line_ - next_;
      next_ = source_.first_line_;
      continue;
    }
    const auto index = static_cast<size_t>(next_ - source_.first_line_);
    if (index >= source_.lines_.size()) break;
    const StdinSource::Line& line = source_.lines_[index];
    chunk.Append(std::string_view(source_.data_).substr(line.begin, line.size),
                 RecordPosition{0, next_}, line.read_us);
    ++next_;
  }
  return next_ < end_ && static_cast<size_t>(next_ - source_.first_line_) < source_.lines_.size();
}

}  // namespace

ConnectorDecl StdinSourceDecl() {
  ConnectorDecl decl;
  decl.format = "stdin";
  decl.role = ConnectorRole::kSource;
  decl.doc =
      "JSON lines (one record per line) from driftd's standard input, e.g. `zcat "
      "logs.jsonl.gz | driftd run p.yaml`. With trigger `once` or `availableNow` the query "
      "reads to the end of the input and then stops. NOT fault-tolerant: lines are buffered in "
      "memory between batches, and a restart neither replays nor recovers them, so "
      "exactly-once does not hold. Offsets: `stdin` = lines read.";
  decl.options = {
      OptionDecl{"maxBufferedBytes", OptionType::kInt, "67108864",
                 "Bytes read and not yet committed; beyond it, reading pauses and the writer "
                 "blocks."}
          .AtLeast(1024),
  };
  BindSource<StdinOptions>(
      decl,
      [](const PipelineSpec&, const SourceSpec&, const Options& o) -> Bound<StdinOptions> {
        return StdinOptions{.max_buffered_bytes = o.GetInt("maxBufferedBytes")};
      },
      [](const PipelineSpec&, StdinOptions options) {
        return Result<std::unique_ptr<Source>>(std::make_unique<StdinSource>(options));
      });
  return decl;
}

}  // namespace driftd
