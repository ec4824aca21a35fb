// The `stdin` source: JSON lines from the daemon's standard input, for a pipe
// (`zcat logs.jsonl.gz | driftd run p.yaml`) or a quick try at a terminal. Not fault-tolerant:
// lines live only in memory between batches, and a restart neither replays nor recovers what
// was read (like the socket source). With trigger once or availableNow the query reads to the
// end of the input and then stops, so a file piped in is processed whole.
//
// Threads: one background thread reads the descriptor into a bounded buffer; the executor's
// thread plans, reads and trims it (connectors/line_source.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "connectors/connector_factories.h"
#include "connectors/line_source.h"
#include "engine/log.h"

namespace driftd {
namespace {

constexpr std::string_view kStdinPartition = "stdin";

struct StdinOptions {
  /// Bytes read but not yet committed before reading pauses (the writer then blocks).
  int64_t max_buffered_bytes = 0;
};

class StdinSource final : public LineSource {
 public:
  explicit StdinSource(StdinOptions options)
      : LineSource(kStdinPartition, options.max_buffered_bytes) {}

  ~StdinSource() override { StopReceiving(); }

  Status Start(const SourceOffsets& committed) override {
    lines_.Start(committed);
    receiver_ = std::thread([this] { Run(); });
    return Ok();
  }

  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t from = lines_.Position(start, lines_.first_line());
    // Draining to the end: a batch waits for lines (or the end) rather than seeing none.
    if (to_end_) changed_.wait(lock, [&] { return stop_ || ended_ || lines_.received() > from; });
    if (lines_.received() <= from) return start;
    return lines_.ReceivedOffsets();
  }

  // What is available of a pipe is all of it, to its end: from now on a batch waits for lines
  // and no batch finds nothing before the end. The reading thread goes on as batches commit,
  // so an input larger than maxBufferedBytes is drained too.
  Status FreezeAvailable() override {
    std::lock_guard<std::mutex> lock(mutex_);
    to_end_ = true;
    return Ok();
  }

  std::string DescribePosition(const RecordPosition& position) const override {
    return fmt::format("stdin line {}", position.offset + 1);
  }

  std::string Describe() const override { return "StdinSource"; }

 private:
  // Reads until the end of the input or destruction.
  void Run() {
    std::string block(64 << 10, '\0');
    while (true) {
      // A full buffer pauses reading; the writer then blocks on the full pipe.
      const std::optional<ssize_t> got = ReceiveWhenRoom(STDIN_FILENO, block);
      if (!got) return;
      std::lock_guard<std::mutex> lock(mutex_);
      if (*got <= 0) {
        if (*got < 0) {
          GetLogger("connectors")->warn("stdin source: {}; no more input", std::strerror(errno));
        }
        lines_.EndPendingLine();  // the input's last line may lack its newline
        ended_ = true;
        changed_.notify_all();
        return;
      }
      lines_.Append(std::string_view(block.data(), static_cast<size_t>(*got)));
      changed_.notify_all();  // a batch draining to the end may be waiting for lines
    }
  }

  // Guarded by mutex_.
  bool ended_ = false;
  bool to_end_ = false;  // FreezeAvailable: batches drain the input to its end
};

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
