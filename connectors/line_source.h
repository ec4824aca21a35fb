// What the sources of text lines from a stream (socket, stdin) share. Bytes received are cut
// into lines, which are held in memory from when they arrive until the batch that read them
// commits. Lines are numbered from the stream's start, the numbers being the source's offsets
// in its one partition; the numbers go on after a restart, the lines do not (these sources are
// not replayable). A source adds how bytes arrive and how it plans a batch.
//
// Threads: a source receives on a thread of its own (receiver_), which waits in ReceiveWhenRoom
// and adds what it read to lines_; the executor's thread calls the Source methods. mutex_ guards
// lines_, stop_ and whatever state of its own the source guards with it.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/source.h"

namespace driftd {

/// The lines received and not yet committed, and their numbers. Not thread-safe: LineSource
/// guards it.
class LineBuffer {
 public:
  /// `partition`: the name of the source's one partition in its offsets. `max_bytes`: the
  /// received bytes held before full().
  LineBuffer(std::string_view partition, int64_t max_bytes)
      : partition_(partition), max_bytes_(max_bytes) {}

  /// Numbers the next line received after the committed offsets (0 on a first start).
  void Start(const SourceOffsets& committed) { first_line_ = received_ = Position(committed, 0); }

  /// Appends received bytes and cuts the complete lines out of them, stamped with the time they
  /// arrived. Blank lines carry no record; a trailing '\r' is dropped. A line as long as the
  /// whole buffer is cut there, as reading would otherwise stall.
  void Append(std::string_view bytes);
  /// Ends the last line, which has no newline (the stream ended or the server closed).
  void EndPendingLine();
  /// Drops the lines before `end` (their batch committed) and compacts the bytes behind them.
  void Trim(const SourceOffsets& end);

  /// The buffer holds `max_bytes`: the source stops reading (the sender then blocks) until a
  /// commit trims it.
  bool full() const { return static_cast<int64_t>(data_.size()) >= max_bytes_; }
  /// The number of the first line held.
  int64_t first_line() const { return first_line_; }
  /// Lines received since the stream began (counting those before a restart).
  int64_t received() const { return received_; }
  /// The offset in `offsets` (`missing` when they have none of this partition).
  int64_t Position(const SourceOffsets& offsets, int64_t missing) const;

  /// The offsets before the first line held (the start of the first batch).
  SourceOffsets InitialOffsets() const { return {{partition_, first_line_}}; }
  /// The offsets after the last line received.
  SourceOffsets ReceivedOffsets() const { return {{partition_, received_}}; }
  std::vector<PartitionLag> Lag(const SourceOffsets& position) const;

 private:
  friend class LineReader;

  struct Line {
    size_t begin = 0;  // into data_
    uint32_t size = 0;
    int64_t received_us = 0;
  };

  void AddLine(size_t begin, size_t end, int64_t received_us);

  std::string partition_;
  int64_t max_bytes_;
  std::string data_;        // received bytes not yet committed
  std::deque<Line> lines_;  // complete lines in data_, line number first_line_ first
  size_t pending_ = 0;      // start of the incomplete last line in data_
  int64_t first_line_ = 0;  // number of lines_.front()
  int64_t received_ = 0;    // lines received since the stream began (continues after restarts)
};

/// Lifecycle: a source's Start calls lines_.Start and starts receiver_; its destructor calls
/// StopReceiving first, as the thread uses the source's own members.
class LineSource : public Source {
 public:
  Result<SourceOffsets> InitialOffsets() override;
  /// Lines of the range that were trimmed already (a range older than this process) are
  /// counted as lost.
  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override;
  /// Trims the checkpointed lines, which makes room for the receiving thread.
  void OnCheckpointed(const SourceOffsets& end) override;
  std::vector<PartitionLag> Lag(const SourceOffsets& position) override;
  bool IsReplayable() const override { return false; }

 protected:
  /// `max_buffered_bytes`: the received bytes held before reading pauses.
  LineSource(std::string_view partition, int64_t max_buffered_bytes)
      : lines_(partition, max_buffered_bytes) {}

  /// Stops the receiving thread and waits for it to end.
  void StopReceiving();
  /// On the receiving thread: waits for room in the buffer (reading pauses while it is full,
  /// and the sender blocks), then for `fd` to be readable, and reads into `block`. Returns what
  /// read(2) did (the bytes read, 0 at the end of the stream, -1 with errno on an error), or
  /// nullopt once the source stops.
  std::optional<ssize_t> ReceiveWhenRoom(int fd, std::string& block);

  std::thread receiver_;
  std::mutex mutex_;
  /// Notified of each commit (room in the buffer) and of stopping; a source may wait on it for
  /// what it notifies it of.
  std::condition_variable changed_;
  bool stop_ = false;
  LineBuffer lines_;
};

}  // namespace driftd
