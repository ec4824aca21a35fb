// The `file` source: a directory of JSON-lines files, processed in file-name order, with files
// that appear while running picked up at the next batch. Offsets map each file name to the
// byte position up to which complete lines have been consumed, so files may grow (appends) and
// new files may be added, but a file must never be rewritten, truncated or removed while it
// holds unread data. A last line without '\n' is left alone until its newline arrives.
#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "connectors/connector_factories.h"
#include "connectors/dir_watch.h"
#include "connectors/fs_util.h"
#include "engine/log.h"

namespace driftd {

namespace {

constexpr size_t kBlockBytes = 1 << 20;
// Reads into a chunk that is nearly full are still this large.
constexpr size_t kMinBlockBytes = 64 << 10;
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
constexpr size_t kScanBlockBytes = 64 << 10;

// The source's options as BindFileSource made them (their defaults are declared in
// FileSourceDecl only).
struct FileSourceOptions {
  std::string path;
  /// Files with new data per batch; 0: no limit.
  int64_t max_files_per_trigger = 0;
  /// Bytes per batch (soft: one line longer than this still goes alone); 0: no limit.
  int64_t max_bytes_per_trigger = 0;
  std::vector<std::string> globs;
  bool fail_on_data_loss = false;
  /// Lines longer than this reach the decoder cut to max + 1 bytes (reported as too large).
  int64_t max_record_bytes = 1 << 20;
};

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; });
}

// Position just after the last '\n' in [begin, end) of the file, or -1.
Result<int64_t> LastLineEnd(const UniqueFd& fd, const std::string& path, int64_t begin, int64_t end,
                            std::string& block) {
  int64_t at = end;
  while (at > begin) {
    int64_t from = std::max(begin, at - static_cast<int64_t>(kScanBlockBytes));
    DRIFTD_TRY(ReadAt(fd, path, from, static_cast<size_t>(at - from), block));
    if (static_cast<int64_t>(block.size()) < at - from) {
      return MakeError(ErrorCode::kDataLoss, "file {} shrank while being read", path);
    }
    size_t newline = block.rfind('\n');
    if (newline != std::string::npos) return from + static_cast<int64_t>(newline) + 1;
    at = from;
  }
  return int64_t{-1};
}

// Position just after the first '\n' in [begin, end) of the file, or -1.
Result<int64_t> FirstLineEnd(const UniqueFd& fd, const std::string& path, int64_t begin,
                             int64_t end, std::string& block) {
  int64_t at = begin;
  while (at < end) {
    size_t size = static_cast<size_t>(std::min<int64_t>(end - at, kScanBlockBytes));
    DRIFTD_TRY(ReadAt(fd, path, at, size, block));
    if (block.empty()) break;
    size_t newline = block.find('\n');
    if (newline != std::string::npos) return at + static_cast<int64_t>(newline) + 1;
    at += static_cast<int64_t>(block.size());
  }
  return int64_t{-1};
}

struct FileRange {
  uint32_t index = 0;
  std::string path;
  int64_t begin = 0;
  int64_t end = 0;
};

// Streams the lines of a list of byte ranges, each starting and ending at a line boundary. The
// file's bytes are read straight into the chunk, whose records point into them (no copy per
// record); only a line that the chunk's end cuts is copied, to the start of the next chunk.
// Read, not mapped: a mapped file that someone truncates kills the process (SIGBUS) where a
// read reports the rewrite, and the read's copy is ~7% of a file pipeline's CPU (2M records).
class FileReader final : public SourceReader {
 public:
  FileReader(std::vector<FileRange> ranges, int64_t max_record_bytes)
      : ranges_(std::move(ranges)), max_record_bytes_(std::max<int64_t>(max_record_bytes, 1)) {}

  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override {
    while (current_ < ranges_.size()) {
      const FileRange& range = ranges_[current_];
      if (!fd_.valid()) DRIFTD_TRY(OpenRange(range));
      // The line the previous chunk ended inside of starts this one. `delta` maps the chunk's
      // unread bytes to the file: file position = chunk offset + delta.
      size_t line_begin = chunk.byte_size();
      int64_t delta = carry_pos_ - static_cast<int64_t>(line_begin);
      if (!carry_.empty()) std::memcpy(chunk.Extend(carry_.size()), carry_.data(), carry_.size());
      size_t scan_from = chunk.byte_size();
      bool range_done = false;
      while (true) {
        const size_t end = chunk.byte_size();
        while (scan_from < end) {
          const char* data = chunk.bytes().data();
          const void* found = std::memchr(data + scan_from, '\n', end - scan_from);
          if (found == nullptr) {
            scan_from = end;
            break;
          }
          const size_t newline = static_cast<size_t>(static_cast<const char*>(found) - data);
          if (skipping_) {
            skipping_ = false;  // the end of an oversized line
          } else {
            EmitLine(chunk, range, line_begin, newline - line_begin,
                     static_cast<int64_t>(line_begin) + delta);
          }
          line_begin = scan_from = newline + 1;
        }
        if (skipping_) {
          // Inside an oversized line: its bytes are dropped as they are read.
          delta += static_cast<int64_t>(end - line_begin);
          chunk.DropBack(end - line_begin);
          scan_from = line_begin;
        } else if (static_cast<int64_t>(end - line_begin) > max_record_bytes_) {
          // An unfinished line past the limit reaches the decoder cut to max + 1 bytes (it
          // reports it as too large); the rest of it is skipped, so memory stays bounded.
          const size_t kept = line_begin + static_cast<size_t>(max_record_bytes_) + 1;
          chunk.AddRecord(line_begin, static_cast<uint32_t>(kept - line_begin),
                          RecordPosition{range.index, static_cast<int64_t>(line_begin) + delta},
                          /*cut=*/true);
          delta += static_cast<int64_t>(end - kept);
          chunk.DropBack(end - kept);
          line_begin = scan_from = kept;
          skipping_ = true;
        }
        if (read_pos_ >= range.end) {
          // Planning ends ranges at a newline; a remainder means the file changed under us.
          if (!skipping_ && line_begin < chunk.byte_size()) {
            return MakeError(ErrorCode::kDataLoss,
                             "file {} was rewritten: byte {} is no longer the end of a line",
                             range.path, range.end);
          }
          range_done = true;
          break;
        }
        if (chunk.byte_size() >= max_bytes) break;
        // The next block, no larger than what the chunk still takes (nor than a small block).
        const size_t room = std::max(max_bytes - chunk.byte_size(), kMinBlockBytes);
        const size_t size = static_cast<size_t>(
            std::min<int64_t>(range.end - read_pos_, static_cast<int64_t>(std::min(room, kBlockBytes))));
        size_t got = 0;
        Status read = ReadAt(fd_, range.path, read_pos_, size, chunk.Extend(size), got);
        if (!read || got < size) {
          chunk.DropBack(size);
          if (!read) return tl::unexpected(read.error());
          return MakeError(ErrorCode::kDataLoss, "file {} shrank below byte {} while being read",
                           range.path, range.end);
        }
        read_pos_ += static_cast<int64_t>(size);
      }
      if (!range_done) {
        // The chunk is full: the unfinished line moves to the next one.
        carry_.assign(chunk.bytes(), line_begin, chunk.byte_size() - line_begin);
        carry_pos_ = static_cast<int64_t>(line_begin) + delta;
        chunk.DropBack(chunk.byte_size() - line_begin);
        return true;
      }
      fd_ = UniqueFd();
      carry_.clear();
      ++current_;
    }
    return false;
  }

 private:
  Status OpenRange(const FileRange& range) {
    auto fd = OpenForReading(range.path);
    if (!fd) {
      return MakeError(ErrorCode::kDataLoss,
                       "file {} is gone but bytes {}..{} of it are still to be read; files must "
                       "not be removed before they are processed",
                       range.path, range.begin, range.end);
    }
    struct stat info {};
    if (::fstat(fd->get(), &info) == 0 && info.st_size < range.end) {
      return MakeError(ErrorCode::kDataLoss,
                       "file {} shrank to {} bytes but bytes {}..{} are still to be read; files "
                       "must only be appended to, never rewritten",
                       range.path, static_cast<int64_t>(info.st_size), range.begin, range.end);
    }
    fd_ = std::move(*fd);
    read_pos_ = range.begin;
    carry_.clear();
    carry_pos_ = range.begin;
    skipping_ = false;
    return Ok();
  }

  // The line at [begin, begin + size) of the chunk, at file position `position`.
  void EmitLine(InputChunk& chunk, const FileRange& range, size_t begin, size_t size,
                int64_t position) {
    std::string_view line(chunk.bytes().data() + begin, size);
    // A UTF-8 byte order mark (editors on Windows write one) is not part of the first record.
    if (position == 0 && line.substr(0, 3) == kUtf8Bom) {
      line.remove_prefix(3);
      begin += 3;
      position = 3;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || IsBlank(line)) return;
    chunk.AddRecord(begin, static_cast<uint32_t>(line.size()),
                    RecordPosition{range.index, position});
  }

  std::vector<FileRange> ranges_;
  int64_t max_record_bytes_;
  size_t current_ = 0;
  UniqueFd fd_;
  int64_t read_pos_ = 0;   // next file byte to read
  std::string carry_;      // the line the last chunk ended inside of
  int64_t carry_pos_ = 0;  // its file position
  bool skipping_ = false;  // inside an oversized line, already emitted cut
};

class FileSource final : public Source {
 public:
  explicit FileSource(FileSourceOptions options) : options_(std::move(options)) {}

  Status Start(const SourceOffsets& committed) override {
    (void)committed;  // positions are per file and read from `start` in every call
    struct stat info {};
    if (::stat(options_.path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      return MakeError(ErrorCode::kIo, "the file source's path {} is not a directory",
                       options_.path);
    }
    return Ok();
  }

  Result<SourceOffsets> InitialOffsets() override { return SourceOffsets{}; }

  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    auto listing = ListInput();
    if (!listing) return tl::unexpected(listing.error());
    DRIFTD_TRY(CheckCommitted(start, *listing));

    SourceOffsets end = start;
    int64_t files = 0;
    int64_t bytes = 0;
    const int64_t budget = options_.max_bytes_per_trigger > 0 ? options_.max_bytes_per_trigger
                                                              : std::numeric_limits<int64_t>::max();
    for (const DirEntry& entry : *listing) {
      auto it = start.find(entry.name);
      int64_t consumed = it == start.end() ? 0 : it->second;
      if (consumed >= entry.size) continue;
      if (options_.max_files_per_trigger > 0 && files >= options_.max_files_per_trigger) break;
      if (bytes >= budget) break;
      std::string path = JoinPath(options_.path, entry.name);
      auto fd = OpenForReading(path);
      if (!fd) {
        if (FileSizeOrMissing(path).value_or(0) < 0) continue;  // removed since listing
        return tl::unexpected(fd.error());
      }
      int64_t limit =
          budget - bytes >= entry.size - consumed ? entry.size : consumed + (budget - bytes);
      auto line_end = LastLineEnd(*fd, path, consumed, limit, scan_block_);
      if (!line_end) return tl::unexpected(line_end.error());
      int64_t stop = *line_end;
      if (stop < 0 && limit < entry.size) {
        // No complete line fits the remaining budget. The first file of a batch still takes
        // one line, so a line longer than maxBytesPerTrigger cannot stall the source.
        if (bytes > 0) break;
        auto first = FirstLineEnd(*fd, path, limit, entry.size, scan_block_);
        if (!first) return tl::unexpected(first.error());
        stop = *first;
      }
      if (stop < 0) continue;  // only a half-written last line so far
      end[entry.name] = stop;
      bytes += stop - consumed;
      ++files;
      // The budget cut this file: later files wait, so files are consumed in name order.
      if (limit < entry.size) break;
    }
    return end;
  }

  Status FreezeAvailable() override {
    auto listing = ListInput();
    if (!listing) return tl::unexpected(listing.error());
    frozen_.emplace();
    for (const DirEntry& entry : *listing) (*frozen_)[entry.name] = entry.size;
    return Ok();
  }

  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    std::vector<FileRange> ranges;
    for (const auto& [name, stop] : end) {
      auto it = start.find(name);
      int64_t begin = it == start.end() ? 0 : it->second;
      if (stop <= begin) continue;
      ranges.push_back({IndexOf(name), JoinPath(options_.path, name), begin, stop});
    }
    return std::make_unique<FileReader>(std::move(ranges), options_.max_record_bytes);
  }

  std::vector<PartitionLag> Lag(const SourceOffsets& position) override {
    std::vector<PartitionLag> lags;
    auto listing = ListInput();
    if (!listing) return lags;  // progress only; the next PlanBatch reports the error
    for (const DirEntry& entry : *listing) {
      auto it = position.find(entry.name);
      int64_t committed = it == position.end() ? 0 : it->second;
      if (entry.size > committed) lags.push_back({entry.name, committed, entry.size, true});
    }
    return lags;
  }

  std::string DescribePosition(const RecordPosition& position) const override {
    std::string name = position.partition < names_.size() ? names_[position.partition]
                                                          : fmt::format("#{}", position.partition);
    return fmt::format("file {} byte {}", JoinPath(options_.path, name), position.offset);
  }

  std::string Describe() const override { return fmt::format("FileSource[{}]", options_.path); }

 private:
  bool Matches(const std::string& name) const {
    // Hidden and '_' files are in-progress writes or metadata (as in Spark).
    if (name.empty() || name[0] == '.' || name[0] == '_') return false;
    for (const std::string& glob : options_.globs) {
      if (::fnmatch(glob.c_str(), name.c_str(), 0) == 0) return true;
    }
    return false;
  }

  // Matching files in name order, limited to the frozen snapshot under availableNow.
  Result<std::vector<DirEntry>> ListInput() {
    auto listing = watch_.Files();
    if (!listing) return tl::unexpected(listing.error());
    std::vector<DirEntry> input;
    for (DirEntry& entry : *listing) {
      if (!Matches(entry.name)) continue;
      if (frozen_) {
        auto it = frozen_->find(entry.name);
        if (it == frozen_->end()) continue;
        entry.size = std::min(entry.size, it->second);
      }
      input.push_back(std::move(entry));
    }
    return input;
  }

  // A committed position beyond a file's end (or in a removed file) means the input changed
  // under the checkpoint: data is lost unless failOnDataLoss is off.
  Status CheckCommitted(const SourceOffsets& start, const std::vector<DirEntry>& listing) {
    for (const auto& [name, offset] : start) {
      if (offset <= 0) continue;
      auto it =
          std::lower_bound(listing.begin(), listing.end(), name,
                           [](const DirEntry& e, const std::string& n) { return e.name < n; });
      bool present = it != listing.end() && it->name == name;
      if (present && it->size >= offset) continue;
      if (frozen_ && !present) continue;  // created after the freeze; not this run's concern
      std::string problem =
          present ? fmt::format("file {} shrank to {} bytes below the committed position {}",
                                JoinPath(options_.path, name), it->size, offset)
                  : fmt::format("file {} was removed (committed position {})",
                                JoinPath(options_.path, name), offset);
      if (options_.fail_on_data_loss) {
        return MakeError(ErrorCode::kDataLoss,
                         "{}: input files must only be added or appended to, never rewritten or "
                         "removed (set failOnDataLoss: false to tolerate removing processed "
                         "files)",
                         problem);
      }
      if (warned_.insert(name).second) {
        GetLogger("connectors")->warn("{}; continuing because failOnDataLoss is false", problem);
      }
    }
    return Ok();
  }

  uint32_t IndexOf(const std::string& name) {
    auto [it, inserted] = index_.try_emplace(name, static_cast<uint32_t>(names_.size()));
    if (inserted) names_.push_back(name);
    return it->second;
  }

  FileSourceOptions options_;
  DirectoryWatch watch_{options_.path};
  std::optional<std::unordered_map<std::string, int64_t>> frozen_;
  // Stable per-process numbering of files for RecordPosition::partition.
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> index_;
  std::set<std::string> warned_;
  std::string scan_block_;
};

std::vector<std::string> SplitGlobs(std::string_view text) {
  std::vector<std::string> globs;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view glob = text.substr(begin, end - begin);
    while (!glob.empty() && glob.front() == ' ') glob.remove_prefix(1);
    while (!glob.empty() && glob.back() == ' ') glob.remove_suffix(1);
    if (!glob.empty()) globs.emplace_back(glob);
    begin = end + 1;
  }
  return globs;
}

Bound<FileSourceOptions> BindFileSource(const PipelineSpec&, const SourceSpec& source,
                                        const Options& o) {
  FileSourceOptions options;
  options.path = o.GetString("path");
  // Unset: no limit.
  options.max_files_per_trigger = o.GetInt("maxFilesPerTrigger", 0);
  options.max_bytes_per_trigger = o.GetInt("maxBytesPerTrigger", 0);
  options.globs = SplitGlobs(o.GetString("fileNameGlob"));
  options.fail_on_data_loss = o.GetBool("failOnDataLoss");
  options.max_record_bytes = source.malformed.max_record_bytes;
  if (options.path.empty()) {
    return tl::unexpected(OptionProblem{"path", "the file source needs a directory"});
  }
  if (options.globs.empty()) return tl::unexpected(OptionProblem{"fileNameGlob", "has no pattern"});
  return options;
}

}  // namespace

ConnectorDecl FileSourceDecl() {
  ConnectorDecl decl;
  decl.format = "file";
  decl.role = ConnectorRole::kSource;
  decl.doc =
      "A directory of JSON-lines files (one JSON object per line, `\\n` or `\\r\\n`; blank "
      "lines are skipped). New and growing files are picked up while running (the directory is "
      "watched with inotify, and listed again every 10 s for changes inotify cannot see, such "
      "as another machine writing to a network file system). Files are processed in "
      "file-name order, so name them so that newer files sort later (e.g. `2026-11-29T10-00.jsonl`). Files may be added or appended to, "
      "never rewritten or truncated; a last line without a newline is read once it is "
      "complete. Files whose names start with `.` or `_` are ignored, so write elsewhere or "
      "under a hidden name and rename into place. Offsets: file name -> bytes consumed.";
  decl.options = {
      OptionDecl{"path", OptionType::kString, "", "The input directory.", true, {},
                 PathUse::kReadsDirectory}
          .Identity(),
      OptionDecl{"maxFilesPerTrigger", OptionType::kInt, "",
                 "Files with new data read per batch (unset or 0: no limit)."}
          .AtLeast(0),
      OptionDecl{"maxBytesPerTrigger", OptionType::kInt, "",
                 "Bytes read per batch, cut at line ends; a single longer line still goes alone "
                 "(unset or 0: no limit)."}
          .AtLeast(0),
      {"fileNameGlob", OptionType::kString, "*.json,*.jsonl,*.ndjson",
       "File-name patterns (shell globs, comma-separated) of the files to read."},
      {"failOnDataLoss", OptionType::kBool, "true",
       "Stop when a file shrank or was removed below the committed position. false: warn and "
       "go on (lets a cleanup job remove processed files)."},
  };
  BindSource<FileSourceOptions>(
      decl, &BindFileSource, [](const PipelineSpec&, FileSourceOptions options) {
        return Result<std::unique_ptr<Source>>(std::make_unique<FileSource>(std::move(options)));
      });
  return decl;
}

Result<std::unique_ptr<Source>> CreateFileSource(const PipelineSpec& pipeline) {
  static const ConnectorDecl decl = FileSourceDecl();
  return decl.create_source(pipeline);
}

}  // namespace driftd
