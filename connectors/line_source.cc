#include "connectors/line_source.h"
#include "engine/wall_clock.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace driftd {

namespace {

// How long the receiving thread waits for bytes before it looks whether to stop.
constexpr int kPollMs = 200;

}  // namespace

// Reads the lines of a planned batch from a LineBuffer that `mutex` guards (LineBuffer's friend,
// so not in the anonymous namespace).
class LineReader final : public SourceReader {
 public:
  LineReader(std::mutex& mutex, const LineBuffer& lines, const SourceOffsets& start,
             const SourceOffsets& end)
      : mutex_(mutex),
        lines_(lines),
        next_(lines.Position(start, 0)),
        end_(lines.Position(end, 0)) {}
  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override;
  int64_t lost_records() const override { return lost_; }

 private:
  std::mutex& mutex_;
  const LineBuffer& lines_;
  int64_t next_;
  int64_t end_;
  int64_t lost_ = 0;
};

void LineBuffer::Append(std::string_view bytes) {
  size_t scan = data_.size();
  data_ += bytes;
  const int64_t now = NowUs();
  while (true) {
    const size_t newline = data_.find('\n', scan);
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
  if (static_cast<int64_t>(data_.size() - pending_) >= max_bytes_) EndPendingLine();
}

void LineBuffer::EndPendingLine() {
  if (pending_ < data_.size()) AddLine(pending_, data_.size(), NowUs());
  pending_ = data_.size();
}

void LineBuffer::AddLine(size_t begin, size_t end, int64_t received_us) {
  if (end > begin && data_[end - 1] == '\r') --end;
  if (end == begin) return;  // blank lines carry no record
  lines_.push_back({begin, static_cast<uint32_t>(end - begin), received_us});
  ++received_;
}

void LineBuffer::Trim(const SourceOffsets& end) {
  auto it = end.find(partition_);
  if (it == end.end()) return;
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

int64_t LineBuffer::Position(const SourceOffsets& offsets, int64_t missing) const {
  auto it = offsets.find(partition_);
  return it == offsets.end() ? missing : it->second;
}

std::vector<PartitionLag> LineBuffer::Lag(const SourceOffsets& position) const {
  return {{partition_, Position(position, first_line_), received_}};
}

Result<bool> LineReader::Next(InputChunk& chunk, size_t max_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t first = lines_.first_line_;
  while (next_ < end_ && chunk.byte_size() < max_bytes) {
    if (next_ < first) {
      lost_ += first - next_;
      next_ = first;
      continue;
    }
    const auto index = static_cast<size_t>(next_ - first);
    if (index >= lines_.lines_.size()) break;
    const LineBuffer::Line& line = lines_.lines_[index];
    chunk.Append(std::string_view(lines_.data_).substr(line.begin, line.size),
                 RecordPosition{0, next_}, line.received_us);
    ++next_;
  }
  return next_ < end_ && static_cast<size_t>(next_ - first) < lines_.lines_.size();
}

Result<SourceOffsets> LineSource::InitialOffsets() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_.InitialOffsets();
}

Result<std::unique_ptr<SourceReader>> LineSource::Read(const SourceOffsets& start,
                                                       const SourceOffsets& end) {
  return std::make_unique<LineReader>(mutex_, lines_, start, end);
}

void LineSource::OnCheckpointed(const SourceOffsets& end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.Trim(end);
  }
  changed_.notify_all();
}

std::vector<PartitionLag> LineSource::Lag(const SourceOffsets& position) {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_.Lag(position);
}

void LineSource::StopReceiving() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (receiver_.joinable()) receiver_.join();
}

std::optional<ssize_t> LineSource::ReceiveWhenRoom(int fd, std::string& block) {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stop_ || !lines_.full(); });
      if (stop_) return std::nullopt;
    }
    pollfd wait{fd, POLLIN, 0};
    const int ready = ::poll(&wait, 1, kPollMs);
    if (ready == 0 || (ready < 0 && errno == EINTR)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return std::nullopt;
      continue;
    }
    const ssize_t got = ready < 0 ? -1 : ::read(fd, block.data(), block.size());
    if (got < 0 && errno == EINTR) continue;
    return got;
  }
}

}  // namespace driftd
