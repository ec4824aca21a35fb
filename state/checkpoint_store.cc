// CheckpointStore on RocksDB.
//
// On-disk layout (one RocksDB database per pipeline, in the checkpoint directory):
//
//   column family  key                           value
//   -------------  ----------------------------  ---------------------------------------------
//   default        (unused; RocksDB requires it)
//   meta           "driftd.layout"               layout version, decimal ("1"); its presence is
//                                                what makes a directory a driftd checkpoint
//                  "pipeline_name"               UTF-8 name
//                  "fingerprint_json"            JSON object
//                  "format_version"              decimal
//                  "created_at_ms"               decimal, Unix epoch milliseconds
//                  "checkpoint_id"               random id, hex (absent in older checkpoints)
//   commits        batch id, 8 bytes big-endian  encoded CommitRecord (below); the newest
//                                                options.commit_history records are kept
//   state          opaque executor bytes         opaque executor bytes
//   outbox         batch id, 8 bytes big-endian  encoded pending sinks + payload (below)
//
// Big-endian ids make RocksDB's bytewise order the numeric order (batch ids are >= 0).
//
// Keys and values use the codec of engine/codec.h (big-endian integers, u32-length-prefixed
// strings, a version byte first in every value).
//
// CommitRecord value: u8 version (3) | i64 batch_id | i64 watermark_us | i64 committed_at_ms |
//   start offsets | end offsets | largest event time per clock partition (µs), each as
//   codec::PutOffsets writes them (u32 count, then key String and i64 per entry, in key order).
//   Versions 2 (the offsets and event times as u32-length-prefixed JSON text) and 1 (without
//   event times) are still read; the next commit writes version 3.
// Outbox value: u8 version (1) | u32 sink count | per sink: String name | payload (rest: the
//   executor's encoding of the batch's output, engine/executor/outbox_codec.cc).
//
// Commit() writes the state puts (then deletes), the commit record, the outbox entry and the
// deletion of commit records beyond the history limit in one WriteBatch, so a crash leaves either
// all of a batch or none of it (the WAL is replayed in point-in-time recovery mode).
//
// Read-only opens (driftd inspect) use RocksDB's secondary mode, which is the supported way to
// read a database that a running daemon is writing: it replays the primary's MANIFEST and WAL
// without taking the LOCK and without touching the primary's files. Its own bookkeeping goes to
// a private temporary directory that is removed on close.
#include "engine/wall_clock.h"
#include "state/checkpoint_store.h"
#include "state/checkpoint_codec.h"

#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <filesystem>
#include <unordered_map>

#include "engine/codec.h"
#include "engine/log.h"

namespace driftd {
namespace {

namespace fs = std::filesystem;

enum CfIndex : size_t { kDefaultCf = 0, kMetaCf, kCommitsCf, kStateCf, kOutboxCf, kCfCount };
constexpr std::string_view kCfNames[kCfCount] = {"default", "meta", "commits", "state", "outbox"};

constexpr std::string_view kLayoutKey = "driftd.layout";
constexpr int kLayoutVersion = 1;
constexpr std::string_view kPipelineNameKey = "pipeline_name";
constexpr std::string_view kFingerprintKey = "fingerprint_json";
constexpr std::string_view kFormatVersionKey = "format_version";
constexpr std::string_view kCreatedAtKey = "created_at_ms";
constexpr std::string_view kCheckpointIdKey = "checkpoint_id";

// Commit records: 3 keeps the offsets in the codec's binary form; 2 (offsets as JSON text, with
// the event times) and 1 (without them) are still read, and rewritten as 3 by the next commit.
constexpr uint8_t kCommitEncodingVersion = 3;
constexpr uint8_t kCommitJsonOffsets = 2;
constexpr uint8_t kCommitWithoutEventTimes = 1;
constexpr uint8_t kOutboxEncodingVersion = 1;

std::shared_ptr<spdlog::logger> Log() { return GetLogger("state"); }

rocksdb::Slice ToSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
std::string_view ToView(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

// --- Encoding (engine/codec.h) --------------------------------------------------------------

std::string EncodeBatchId(int64_t batch_id) {
  std::string key;
  key.reserve(8);
  codec::Writer(key).U64(static_cast<uint64_t>(batch_id));
  return key;
}

Result<int64_t> DecodeBatchId(std::string_view key) {
  codec::Reader reader(key);
  int64_t batch_id = 0;
  if (key.size() != 8 || !reader.I64(batch_id) || batch_id < 0) {
    return MakeError(ErrorCode::kCorruption, "malformed batch id key ({} bytes)", key.size());
  }
  return batch_id;
}

std::string EncodeCommit(const CommitRecord& commit) {
  std::string out;
  out.reserve(1 + 3 * 8 + 12 + 24 * (commit.start.size() + commit.end.size() +
                                     commit.max_event_us.size()));
  codec::Writer writer(out);
  writer.U8(kCommitEncodingVersion);
  writer.I64(commit.batch_id);
  writer.I64(commit.watermark_us);
  writer.I64(commit.committed_at_ms);
  codec::PutOffsets(writer, commit.start);
  codec::PutOffsets(writer, commit.end);
  codec::PutOffsets(writer, commit.max_event_us);
  return out;
}

Result<CommitRecord> DecodeCommit(std::string_view value) {
  codec::Reader reader(value);
  uint8_t version = 0;
  CommitRecord commit;
  if (!reader.U8(version)) {
    return MakeError(ErrorCode::kCorruption, "empty commit record");
  }
  if (version != kCommitEncodingVersion && version != kCommitJsonOffsets &&
      version != kCommitWithoutEventTimes) {
    return MakeError(ErrorCode::kIncompatible,
                     "commit record encoding {} is not supported (this driftd reads {})", version,
                     kCommitEncodingVersion);
  }
  if (!reader.I64(commit.batch_id) || !reader.I64(commit.watermark_us) ||
      !reader.I64(commit.committed_at_ms)) {
    return MakeError(ErrorCode::kCorruption, "truncated commit record ({} bytes)", value.size());
  }
  if (version == kCommitEncodingVersion) {
    if (!codec::GetOffsets(reader, commit.start) || !codec::GetOffsets(reader, commit.end) ||
        !codec::GetOffsets(reader, commit.max_event_us) || !reader.done()) {
      return MakeError(ErrorCode::kCorruption, "truncated commit record ({} bytes)",
                       value.size());
    }
    return commit;
  }
  // Versions 1 and 2 kept the offsets as JSON text.
  std::string_view start, end, times;
  if (!reader.String(start) || !reader.String(end) ||
      (version == kCommitJsonOffsets && !reader.String(times)) || !reader.done()) {
    return MakeError(ErrorCode::kCorruption, "truncated commit record ({} bytes)", value.size());
  }
  auto start_offsets = OffsetsFromJson(start);
  if (!start_offsets) return tl::unexpected(start_offsets.error().Wrap("commit start offsets"));
  auto end_offsets = OffsetsFromJson(end);
  if (!end_offsets) return tl::unexpected(end_offsets.error().Wrap("commit end offsets"));
  commit.start = std::move(*start_offsets);
  commit.end = std::move(*end_offsets);
  if (version == kCommitJsonOffsets) {
    auto event_times = OffsetsFromJson(times);
    if (!event_times) return tl::unexpected(event_times.error().Wrap("commit event times"));
    commit.max_event_us = std::move(*event_times);
  }
  return commit;
}

/// An outbox entry's value is this header followed by the payload.
std::string EncodeOutboxHeader(const std::vector<std::string>& sinks) {
  std::string out;
  codec::Writer writer(out);
  writer.U8(kOutboxEncodingVersion);
  writer.U32(static_cast<uint32_t>(sinks.size()));
  for (const auto& sink : sinks) writer.String(sink);
  return out;
}

std::string EncodeOutbox(const std::vector<std::string>& sinks, std::string_view payload) {
  std::string out = EncodeOutboxHeader(sinks);
  out += payload;
  return out;
}

Result<OutboxEntry> DecodeOutbox(int64_t batch_id, std::string_view value) {
  codec::Reader reader(value);
  uint8_t version = 0;
  uint32_t count = 0;
  if (!reader.U8(version)) return MakeError(ErrorCode::kCorruption, "empty outbox entry");
  if (version != kOutboxEncodingVersion) {
    return MakeError(ErrorCode::kIncompatible,
                     "outbox encoding {} is not supported (this driftd reads {})", version,
                     kOutboxEncodingVersion);
  }
  if (!reader.U32(count)) {
    return MakeError(ErrorCode::kCorruption, "truncated outbox entry of batch {}", batch_id);
  }
  OutboxEntry entry;
  entry.batch_id = batch_id;
  entry.pending_sinks.reserve(std::min<uint32_t>(count, 64));
  for (uint32_t i = 0; i < count; ++i) {
    std::string_view sink;
    if (!reader.String(sink)) {
      return MakeError(ErrorCode::kCorruption, "truncated outbox entry of batch {}", batch_id);
    }
    entry.pending_sinks.emplace_back(sink);
  }
  entry.payload.assign(reader.rest());
  return entry;
}

// --- RocksDB plumbing ------------------------------------------------------------------------

/// Drops RocksDB's info log. Used by read-only opens so that `driftd inspect` never rotates or
/// writes the LOG file of a running daemon.
class DiscardLogger final : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

Error RocksError(const rocksdb::Status& status, std::string_view what, const std::string& dir) {
  ErrorCode code = status.IsCorruption() ? ErrorCode::kCorruption : ErrorCode::kIo;
  std::string hint;
  if (status.IsIOError() && status.ToString().find("lock") != std::string::npos) {
    hint = " (is another driftd process running with this checkpoint?)";
  }
  return Error(code, fmt::format("checkpoint '{}': {}: {}{}", dir, what, status.ToString(), hint));
}

uint64_t StateKeyHash(std::string_view key) { return std::hash<std::string_view>{}(key); }

/// The bytes a WriteBatch takes for these state entries: each one's key and value and at most
/// 16 more (tag, column family, two lengths). A batch's state can be tens of megabytes, and a
/// WriteBatch grown by doubling would hold up to twice that while the old copy moves.
size_t StateEntryBytes(const StatePuts& puts, const std::vector<std::string>& deletes) {
  size_t bytes = 0;
  for (const auto& [key, value] : puts) bytes += key.size() + value.size() + 16;
  for (const std::string& key : deletes) bytes += key.size() + 16;
  return bytes;
}

rocksdb::ColumnFamilyOptions MakeCfOptions(const std::shared_ptr<rocksdb::Cache>& cache,
                                           size_t write_buffer_bytes) {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = write_buffer_bytes;
  cf.max_write_buffer_number = 2;
  cf.level_compaction_dynamic_level_bytes = true;
  cf.target_file_size_base = 8 << 20;
  cf.max_bytes_for_level_base = 32 << 20;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return cf;
}

size_t WriteBufferBytes(std::string_view cf_name) {
  // meta and commits stay tiny; state and outbox take the batch volume. Batches rewrite the
  // same keys (a model's record, an outbox entry put then deleted): a memtable that holds a
  // few batches flushes their last versions only (at 10,000 models, 16 MB instead of 4 cut
  // the bytes written to files from 3.2x to 2.6x what the commits put).
  if (cf_name == "state" || cf_name == "outbox") return 16 << 20;
  return 1 << 20;
}

/// Creates the checkpoint directory and its missing parents with mode 0700 exactly, whatever the
/// umask: the state, the outbox's rows and the sinks' files (dead letters) are the owner's only.
Status CreateCheckpointDirectory(const std::string& directory) {
  std::string path;
  for (size_t at = 0; at <= directory.size();) {
    size_t slash = directory.find('/', at);
    if (slash == std::string::npos) slash = directory.size();
    path = directory.substr(0, slash);
    at = slash + 1;
    if (path.empty() || path == "." || path == "..") continue;
    if (::mkdir(path.c_str(), 0700) == 0) {
      // mkdir's mode passes through the umask, which can only take bits away.
      if (::chmod(path.c_str(), 0700) != 0) {
        return MakeError(ErrorCode::kIo, "checkpoint '{}': cannot set the mode of {}: {}",
                         directory, path, std::strerror(errno));
      }
    } else if (errno != EEXIST) {
      return MakeError(ErrorCode::kIo, "checkpoint '{}': cannot create the directory {}: {}",
                       directory, path, std::strerror(errno));
    }
  }
  return Ok();
}

/// RocksDB's files as the owner's only: each file it creates is made 0600, each directory
/// 0700, whatever the umask. RocksDB creates them 0644 less the umask, and its own switch for
/// this (Env::SetAllowNonOwnerAccess) does not reach the POSIX file system of this RocksDB.
class OwnerOnlyFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit OwnerOnlyFileSystem(const std::shared_ptr<rocksdb::FileSystem>& target)
      : FileSystemWrapper(target) {}
  const char* Name() const override { return "DriftdOwnerOnly"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Restrict(target()->NewWritableFile(f, o, r, d), f, 0600);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    return Restrict(target()->ReopenWritableFile(f, o, r, d), f, 0600);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return Restrict(target()->ReuseWritableFile(f, old, o, r, d), f, 0600);
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Restrict(target()->NewRandomRWFile(f, o, r, d), f, 0600);
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o,
                             rocksdb::FileLock** l, rocksdb::IODebugContext* d) override {
    return Restrict(target()->LockFile(f, o, l, d), f, 0600);
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o,
                              std::shared_ptr<rocksdb::Logger>* r,
                              rocksdb::IODebugContext* d) override {
    return Restrict(target()->NewLogger(f, o, r, d), f, 0600);
  }
  rocksdb::IOStatus CreateDir(const std::string& f, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* d) override {
    return Restrict(target()->CreateDir(f, o, d), f, 0700);
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& f, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* d) override {
    return Restrict(target()->CreateDirIfMissing(f, o, d), f, 0700);
  }

 private:
  static rocksdb::IOStatus Restrict(rocksdb::IOStatus status, const std::string& path,
                                    mode_t mode) {
    if (!status.ok()) return status;
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && (info.st_mode & 0777) != mode &&
        ::chmod(path.c_str(), mode) != 0) {
      return rocksdb::IOStatus::IOError("setting the mode of " + path, std::strerror(errno));
    }
    return status;
  }
};

/// The Env every checkpoint database of the process uses (never destroyed: RocksDB's
/// background threads may run until exit).
rocksdb::Env* OwnerOnlyEnv() {
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(
          std::make_shared<OwnerOnlyFileSystem>(rocksdb::FileSystem::Default()))
          .release();
  return env;
}

/// True if every file in `dir` is one RocksDB writes while creating a database before CURRENT
/// exists (the info log, LOCK, IDENTITY, the first MANIFEST, a temp file of CURRENT).
bool OnlyCreationLeftovers(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool leftover = name == "LOCK" || name == "LOG" || name.starts_with("LOG.old.") ||
                          name == "IDENTITY" || name.starts_with("MANIFEST-") ||
                          name.starts_with("OPTIONS-") || name.ends_with(".dbtmp");
    if (!leftover || !entry.is_regular_file()) return false;
  }
  return !ec;
}

// Whether the directory holds RocksDB's own files: a manifest and write-ahead logs or tables
// (`data`: a non-empty log or table).
bool HoldsDatabaseFiles(const std::string& dir, bool data = false) {
  std::error_code ec;
  bool manifest = false;
  bool files = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    manifest = manifest || name.starts_with("MANIFEST-");
    if (name.ends_with(".log") || name.ends_with(".sst")) {
      std::error_code size_error;
      files = files || !data || fs::file_size(entry.path(), size_error) > 0;
    }
  }
  return !ec && (data ? files : manifest && files);
}

class RocksCheckpointStore final : public CheckpointStore {
 public:
  RocksCheckpointStore(std::string directory, CheckpointOptions options)
      : directory_(std::move(directory)), options_(options) {
    options_.commit_history = std::max(1, options_.commit_history);
  }

  ~RocksCheckpointStore() override {
    if (db_ != nullptr) {
      for (rocksdb::ColumnFamilyHandle* handle : handles_) {
        // Cannot fail for handles that Open returned; nothing to do about it on close anyway.
        db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
      }
      handles_.clear();
      rocksdb::Status status = db_->Close();
      if (!status.ok() && !status.IsNotSupported()) {
        Log()->warn("closing checkpoint '{}': {}", directory_, status.ToString());
      }
      db_.reset();
    }
    if (!secondary_dir_.empty()) {
      std::error_code ec;
      fs::remove_all(secondary_dir_, ec);  // best effort: a temp dir of ours
    }
  }

  Status Init();

  Result<std::optional<CheckpointMetadata>> ReadMetadata() override;
  Status WriteMetadata(const CheckpointMetadata& metadata) override;
  Status RewriteState(const std::vector<std::pair<std::string, std::string>>& puts,
                      const std::vector<std::string>& deletes,
                      const CheckpointMetadata& metadata) override;
  Result<std::optional<CommitRecord>> LastCommit() override;
  Result<std::vector<CommitRecord>> RecentCommits(int limit) override;
  Status ScanState(
      const std::function<void(std::string_view key, std::string_view value)>& visit) override;
  Status Commit(BatchWrite write) override;
  Status ApplyState(const StatePuts& puts, const std::vector<std::string>& deletes) override;
  Status ScanStatePrefix(
      std::string_view prefix,
      const std::function<void(std::string_view key, std::string_view value)>& visit) override;
  Result<std::vector<OutboxEntry>> PendingOutbox() override;
  Status MarkDelivered(int64_t batch_id, std::string_view sink) override;
  StateStats Stats() override { return stats_; }

 private:
  rocksdb::ColumnFamilyHandle* cf(CfIndex index) const { return handles_[index]; }
  Error Fail(const rocksdb::Status& status, std::string_view what) const {
    return RocksError(status, what, directory_);
  }
  Status RefuseIfReadOnly(std::string_view operation) const {
    if (options_.read_only) {
      return MakeError(ErrorCode::kInvalidArgument, "checkpoint '{}': {} on a read-only open",
                       directory_, operation);
    }
    return Ok();
  }
  void PrepareClose() override {
    if (db_ != nullptr && !options_.read_only) {
      rocksdb::CancelAllBackgroundWork(db_.get(), /*wait=*/false);
    }
  }

  rocksdb::WriteOptions SyncedWrite() const {
    rocksdb::WriteOptions write_options;
    write_options.sync = options_.sync;
    return write_options;
  }

  Status OpenDatabase(const std::vector<std::string>& existing_cfs);
  /// A state put (value_size >= 0) or delete (-1) as the statistics count it.
  struct CountedEntry {
    uint64_t hash;
    uint32_t key_size;
    int64_t value_size;
  };
  // Mirrors applied state puts and deletes in the live key count and sizes.
  void CountState(const std::vector<CountedEntry>& entries);
  void CountState(const StatePuts& puts, const std::vector<std::string>& deletes);
  Status CheckOrWriteMarker(bool created_now);
  Result<bool> CfIsEmpty(CfIndex index);
  Result<bool> DatabaseIsEmpty(const std::vector<std::string>& cf_names) const;
  Status LoadIndexes();
  Result<std::optional<std::string>> GetMeta(std::string_view key);

  std::string directory_;
  CheckpointOptions options_;
  std::shared_ptr<rocksdb::Cache> cache_;
  std::shared_ptr<rocksdb::Logger> discard_logger_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // kCfNames order, then unknown ones
  std::string secondary_dir_;

  // Sizes of live state entries, so a put over an existing key adjusts bytes instead of double
  // counting, by a 64-bit hash of the key (StateKeyHash): the sizes only feed the statistics,
  // and keeping the keys themselves cost 12 MB at 150,000 keys; two keys share a hash with odds
  // of about 1 in 10^9 at that size, and would then be counted as one.
  std::unordered_map<uint64_t, uint32_t> value_sizes_;
  /// The sinks still to deliver of the outbox entries this store wrote or read, by batch id:
  /// marking the last one delivered deletes the entry without reading its payload back.
  std::unordered_map<int64_t, std::vector<std::string>> outbox_sinks_;
  /// Commit's WriteBatch, kept with its buffer (batch_reserved_ bytes) from batch to batch
  /// while that is at most kKeptWriteBatchBytes.
  static constexpr size_t kKeptWriteBatchBytes = 4 << 20;
  rocksdb::WriteBatch batch_;
  size_t batch_reserved_ = 0;
  StateStats stats_;
  // Batch ids present in the commits column family, oldest first (at most commit_history + a
  // few after the limit was lowered); lets Commit trim without reading.
  std::deque<int64_t> commit_ids_;
};

Status RocksCheckpointStore::Init() {
  std::error_code ec;
  const fs::file_status status = fs::status(directory_, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return MakeError(ErrorCode::kIo, "checkpoint '{}': {}", directory_, ec.message());
  }
  bool has_database = false;
  if (!fs::exists(status)) {
    if (options_.read_only) {
      return MakeError(ErrorCode::kIo, "checkpoint '{}' does not exist", directory_);
    }
    DRIFTD_TRY(CreateCheckpointDirectory(directory_));
  } else if (!fs::is_directory(status)) {
    return MakeError(ErrorCode::kInvalidArgument, "checkpoint '{}' is not a directory", directory_);
  } else {
    has_database = fs::exists(fs::path(directory_) / "CURRENT", ec);
    const bool empty = fs::is_empty(directory_, ec);
    if (ec) {
      return MakeError(ErrorCode::kIo, "checkpoint '{}': {}", directory_, ec.message());
    }
    if (!has_database && !empty && !options_.read_only && OnlyCreationLeftovers(directory_)) {
      // Killed while RocksDB created the database, before it wrote CURRENT: create it again.
      Log()->info("checkpoint '{}': finishing a creation that was interrupted", directory_);
    } else if (!has_database && !empty && HoldsDatabaseFiles(directory_)) {
      // RocksDB's files without the CURRENT that names their manifest: a damaged checkpoint,
      // not someone else's directory.
      return MakeError(ErrorCode::kCorruption,
                       "checkpoint '{}' is damaged: it holds a database's files but no CURRENT "
                       "file naming its manifest; restore it from a backup, or start over with "
                       "a new checkpointLocation",
                       directory_);
    } else if (!has_database && !empty) {
      return MakeError(ErrorCode::kIncompatible,
                       "'{}' is not a driftd checkpoint: the directory is not empty and holds no "
                       "checkpoint database; use an empty or new directory",
                       directory_);
    }
    if (!has_database && options_.read_only) {
      return MakeError(ErrorCode::kIo, "checkpoint '{}' is empty: no pipeline has run with it",
                       directory_);
    }
    // A checkpoint made by an older driftd, or under a lax umask, becomes the owner's only.
    struct stat info {};
    if (!options_.read_only && ::stat(directory_.c_str(), &info) == 0 &&
        (info.st_mode & 0077) != 0 && ::chmod(directory_.c_str(), 0700) != 0) {
      Log()->warn("checkpoint '{}' can be read by other users (mode {:o}) and its mode cannot "
                  "be changed: {}",
                  directory_, info.st_mode & 0777, std::strerror(errno));
    }
  }

  std::vector<std::string> existing_cfs;
  if (has_database) {
    rocksdb::Status list =
        rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), directory_, &existing_cfs);
    if (!list.ok()) return tl::unexpected(Fail(list, "reading the database's column families"));
    std::vector<std::string> missing;
    for (std::string_view name : kCfNames) {
      if (std::find(existing_cfs.begin(), existing_cfs.end(), name) == existing_cfs.end()) {
        missing.emplace_back(name);
      }
    }
    // A first open killed while RocksDB was adding the column families leaves a database with
    // only some of them and no data: finish creating it. Anything holding data is someone
    // else's database and must not even get our column families added, so look before writing.
    bool only_ours = std::all_of(existing_cfs.begin(), existing_cfs.end(), [](const auto& name) {
      return std::find(std::begin(kCfNames), std::end(kCfNames), name) != std::end(kCfNames);
    });
    if (!missing.empty() && only_ours) {
      auto empty = DatabaseIsEmpty(existing_cfs);
      if (!empty) return tl::unexpected(empty.error());
      if (*empty && existing_cfs.size() <= 1 && HoldsDatabaseFiles(directory_, true)) {
        // Only the (unused) default column family listed, yet the files hold data: a manifest
        // cut short lists what it had time to, so the data is in column families it lost.
        return MakeError(ErrorCode::kCorruption,
                         "checkpoint '{}' is damaged: its manifest lists no column family but "
                         "the default while the directory holds data; restore it from a "
                         "backup, or start over with a new checkpointLocation",
                         directory_);
      }
      if (*empty && !options_.read_only) {
        Log()->info("checkpoint '{}': finishing a creation that was interrupted", directory_);
        missing.clear();
      }
    }
    if (!missing.empty()) {
      return MakeError(ErrorCode::kIncompatible,
                       "'{}' is a RocksDB database but not a driftd checkpoint (it has no '{}' "
                       "column family)",
                       directory_, fmt::join(missing, "', '"));
    }
  }

  DRIFTD_TRY(OpenDatabase(existing_cfs));
  DRIFTD_TRY(CheckOrWriteMarker(/*created_now=*/!has_database));
  DRIFTD_TRY(LoadIndexes());
  // `driftd inspect` prints its own report; only a daemon's open is worth an info line.
  Log()->log(options_.read_only ? spdlog::level::debug : spdlog::level::info,
             "opened checkpoint '{}'{}: {} commits kept, {} state keys ({} bytes)", directory_,
             options_.read_only ? " read-only" : "", commit_ids_.size(), stats_.keys, stats_.bytes);
  return Ok();
}

Status RocksCheckpointStore::OpenDatabase(const std::vector<std::string>& existing_cfs) {
  cache_ = rocksdb::NewLRUCache(std::max<size_t>(options_.block_cache_bytes, 1 << 20));

  rocksdb::DBOptions db_options;
  // Files 0600 and directories 0700, as the checkpoint directory is.
  db_options.env = OwnerOnlyEnv();
  db_options.create_if_missing = !options_.read_only;
  db_options.create_missing_column_families = !options_.read_only;
  db_options.max_open_files = options_.read_only ? -1 : 64;  // secondary mode requires -1
  db_options.keep_log_file_num = 2;
  db_options.max_log_file_size = 1 << 20;
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db_options.stats_dump_period_sec = 0;
  db_options.stats_persist_period_sec = 0;
  db_options.max_background_jobs = 2;
  // meta and commits are written rarely or tiny, so their memtables would pin old WAL files;
  // this bound makes RocksDB flush them instead of keeping the WAL forever.
  db_options.max_total_wal_size = 32 << 20;
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Write back a commit's WAL and a flush's table file a megabyte at a time while they are
  // written, so that the sync that ends them waits for the last megabyte, not for all of it.
  db_options.wal_bytes_per_sync = 1 << 20;
  db_options.bytes_per_sync = 1 << 20;

  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (std::string_view name : kCfNames) {
    rocksdb::ColumnFamilyOptions options = MakeCfOptions(cache_, WriteBufferBytes(name));
    // Outbox entries live from a commit to their delivery: one that a flush catches (a
    // batch's rows, megabytes) is deleted soon after, and compressing it cost a buffer of its
    // size and the CPU to fill it. State keeps Snappy: at 10,000 models it cut what flushes
    // and compactions write by ~40%, for ~6% of a run past the warmup pinned to one core (on a
    // machine of two it runs beside the query, on RocksDB's threads).
    if (name == "outbox") options.compression = rocksdb::kNoCompression;
    descriptors.emplace_back(std::string(name), options);
  }
  // Column families of a newer driftd must be opened too (RocksDB insists on all of them);
  // the layout version check below decides whether we can serve this checkpoint.
  for (const std::string& name : existing_cfs) {
    if (std::find(std::begin(kCfNames), std::end(kCfNames), name) == std::end(kCfNames)) {
      descriptors.emplace_back(name, MakeCfOptions(cache_, 1 << 20));
    }
  }

  rocksdb::DB* raw = nullptr;
  rocksdb::Status status;
  if (options_.read_only) {
    discard_logger_ = std::make_shared<DiscardLogger>();
    db_options.info_log = discard_logger_;
    std::string pattern = (fs::temp_directory_path() / "driftd-inspect-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return MakeError(ErrorCode::kIo,
                       "checkpoint '{}': cannot create a temporary directory "
                       "for the read-only open: {}",
                       directory_, std::strerror(errno));
    }
    secondary_dir_ = pattern;
    status = rocksdb::DB::OpenAsSecondary(db_options, directory_, secondary_dir_, descriptors,
                                          &handles_, &raw);
  } else {
    status = rocksdb::DB::Open(db_options, directory_, descriptors, &handles_, &raw);
  }
  db_.reset(raw);
  if (!status.ok()) {
    return tl::unexpected(Fail(status, options_.read_only ? "opening read-only" : "opening"));
  }
  return Ok();
}

Result<bool> RocksCheckpointStore::CfIsEmpty(CfIndex index) {
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions(), cf(index))};
  it->SeekToFirst();
  if (!it->status().ok()) return tl::unexpected(Fail(it->status(), "reading"));
  return !it->Valid();
}

Result<bool> RocksCheckpointStore::DatabaseIsEmpty(const std::vector<std::string>& cf_names) const {
  rocksdb::DBOptions db_options;
  db_options.info_log = std::make_shared<DiscardLogger>();  // leave the directory untouched
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& name : cf_names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status =
      rocksdb::DB::OpenForReadOnly(db_options, directory_, descriptors, &handles, &raw);
  if (!status.ok()) return tl::unexpected(Fail(status, "examining the database"));
  std::unique_ptr<rocksdb::DB> db(raw);
  bool empty = true;
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    std::unique_ptr<rocksdb::Iterator> it{db->NewIterator(rocksdb::ReadOptions(), handle)};
    it->SeekToFirst();
    if (!it->status().ok()) status = it->status();
    empty = empty && !it->Valid();
  }
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    db->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
  }
  if (!status.ok()) return tl::unexpected(Fail(status, "examining the database"));
  return empty;
}

Status RocksCheckpointStore::CheckOrWriteMarker(bool created_now) {
  auto marker = GetMeta(kLayoutKey);
  if (!marker) return tl::unexpected(marker.error());
  if (*marker) {
    const auto parsed = codec::ParseDecimal<int>(**marker);
    if (!parsed) {
      return MakeError(ErrorCode::kCorruption, "checkpoint '{}': unreadable layout marker '{}'",
                       directory_, **marker);
    }
    const int version = *parsed;
    if (version > kLayoutVersion) {
      return MakeError(ErrorCode::kIncompatible,
                       "checkpoint '{}' has layout version {}, written by a newer driftd (this "
                       "one reads up to {})",
                       directory_, version, kLayoutVersion);
    }
    return Ok();
  }
  // No marker. Either we just created the database, or a first open crashed between creating
  // the column families and writing the marker (then every column family is still empty).
  bool adopt = created_now;
  if (!adopt) {
    adopt = true;
    for (CfIndex index : {kDefaultCf, kMetaCf, kCommitsCf, kStateCf, kOutboxCf}) {
      auto empty = CfIsEmpty(index);
      if (!empty) return tl::unexpected(empty.error());
      adopt = adopt && *empty;
    }
  }
  if (!adopt) {
    return MakeError(ErrorCode::kIncompatible,
                     "'{}' is not a driftd checkpoint: its database has no driftd layout marker",
                     directory_);
  }
  if (options_.read_only) {
    return MakeError(ErrorCode::kIo, "checkpoint '{}' was never initialised by a pipeline run",
                     directory_);
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  rocksdb::Status status =
      db_->Put(write_options, cf(kMetaCf), ToSlice(kLayoutKey), std::to_string(kLayoutVersion));
  if (!status.ok()) return tl::unexpected(Fail(status, "writing the layout marker"));
  return Ok();
}

Status RocksCheckpointStore::LoadIndexes() {
  rocksdb::ReadOptions read_options;
  read_options.fill_cache = false;  // one pass at open; keep the cache for later reads
  read_options.readahead_size = 1 << 20;
  {
    std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(read_options, cf(kStateCf))};
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const rocksdb::Slice key = it->key();
      const size_t value_size = it->value().size();
      value_sizes_.emplace(StateKeyHash(ToView(key)), static_cast<uint32_t>(value_size));
      stats_.keys += 1;
      stats_.bytes += static_cast<int64_t>(key.size() + value_size);
    }
    if (!it->status().ok()) return tl::unexpected(Fail(it->status(), "scanning state"));
  }
  {
    std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(read_options, cf(kCommitsCf))};
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto batch_id = DecodeBatchId(ToView(it->key()));
      if (!batch_id) return tl::unexpected(batch_id.error().Wrap("checkpoint commit log"));
      commit_ids_.push_back(*batch_id);
    }
    if (!it->status().ok()) return tl::unexpected(Fail(it->status(), "scanning commits"));
  }
  return Ok();
}

Result<std::optional<std::string>> RocksCheckpointStore::GetMeta(std::string_view key) {
  std::string value;
  rocksdb::Status status = db_->Get(rocksdb::ReadOptions(), cf(kMetaCf), ToSlice(key), &value);
  if (status.IsNotFound()) return std::optional<std::string>();
  if (!status.ok()) return tl::unexpected(Fail(status, fmt::format("reading meta '{}'", key)));
  return std::optional<std::string>(std::move(value));
}

Result<std::optional<CheckpointMetadata>> RocksCheckpointStore::ReadMetadata() {
  auto name = GetMeta(kPipelineNameKey);
  if (!name) return tl::unexpected(name.error());
  if (!*name) return std::optional<CheckpointMetadata>();
  auto fingerprint = GetMeta(kFingerprintKey);
  if (!fingerprint) return tl::unexpected(fingerprint.error());
  auto version = GetMeta(kFormatVersionKey);
  if (!version) return tl::unexpected(version.error());
  auto created = GetMeta(kCreatedAtKey);
  if (!created) return tl::unexpected(created.error());
  auto checkpoint_id = GetMeta(kCheckpointIdKey);
  if (!checkpoint_id) return tl::unexpected(checkpoint_id.error());

  CheckpointMetadata metadata;
  metadata.pipeline_name = std::move(**name);
  metadata.fingerprint_json = fingerprint->value_or("");
  metadata.checkpoint_id = checkpoint_id->value_or("");
  // Absent in older checkpoints: the defaults stand.
  const std::optional<int> format_version =
      *version ? codec::ParseDecimal<int>(**version) : metadata.format_version;
  const std::optional<int64_t> created_at =
      *created ? codec::ParseDecimal(**created) : metadata.created_at_ms;
  if (!format_version || !created_at) {
    return MakeError(ErrorCode::kCorruption, "checkpoint '{}': unreadable metadata numbers",
                     directory_);
  }
  metadata.format_version = *format_version;
  metadata.created_at_ms = *created_at;
  return std::optional<CheckpointMetadata>(std::move(metadata));
}

Status RocksCheckpointStore::WriteMetadata(const CheckpointMetadata& metadata) {
  return RewriteState({}, {}, metadata);
}

Status RocksCheckpointStore::RewriteState(
    const std::vector<std::pair<std::string, std::string>>& puts,
    const std::vector<std::string>& deletes, const CheckpointMetadata& metadata) {
  DRIFTD_TRY(RefuseIfReadOnly("writing metadata"));
  rocksdb::WriteBatch batch;
  rocksdb::ColumnFamilyHandle* meta = cf(kMetaCf);
  rocksdb::Status status;
  // Deletes before puts: a migration may rewrite a key into itself.
  for (const std::string& key : deletes) {
    if (status.ok()) status = batch.Delete(cf(kStateCf), key);
  }
  for (const auto& [key, value] : puts) {
    if (status.ok()) status = batch.Put(cf(kStateCf), key, value);
  }
  const std::string version = std::to_string(metadata.format_version);
  const std::string created = std::to_string(metadata.created_at_ms);
  if (status.ok()) status = batch.Put(meta, ToSlice(kPipelineNameKey), metadata.pipeline_name);
  if (status.ok()) status = batch.Put(meta, ToSlice(kFingerprintKey), metadata.fingerprint_json);
  if (status.ok()) status = batch.Put(meta, ToSlice(kFormatVersionKey), version);
  if (status.ok()) status = batch.Put(meta, ToSlice(kCreatedAtKey), created);
  if (status.ok() && !metadata.checkpoint_id.empty()) {
    status = batch.Put(meta, ToSlice(kCheckpointIdKey), metadata.checkpoint_id);
  }
  if (status.ok()) {
    rocksdb::WriteOptions write_options;
    write_options.sync = true;  // rare and the checkpoint's identity: always durable
    status = db_->Write(write_options, &batch);
  }
  if (!status.ok()) return tl::unexpected(Fail(status, "writing metadata"));
  if (!puts.empty() || !deletes.empty()) {
    // Sizes are rebuilt from the database: rewrites are rare (format migrations).
    value_sizes_.clear();
    commit_ids_.clear();
    stats_ = StateStats{};
    DRIFTD_TRY(LoadIndexes());
  }
  return Ok();
}

Result<std::optional<CommitRecord>> RocksCheckpointStore::LastCommit() {
  auto recent = RecentCommits(1);
  if (!recent) return tl::unexpected(recent.error());
  if (recent->empty()) return std::optional<CommitRecord>();
  return std::optional<CommitRecord>(std::move(recent->front()));
}

Result<std::vector<CommitRecord>> RocksCheckpointStore::RecentCommits(int limit) {
  std::vector<CommitRecord> commits;
  if (limit <= 0) return commits;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions(), cf(kCommitsCf))};
  for (it->SeekToLast(); it->Valid() && static_cast<int>(commits.size()) < limit; it->Prev()) {
    auto commit = DecodeCommit(ToView(it->value()));
    if (!commit) {
      return tl::unexpected(commit.error().Wrap(fmt::format("checkpoint '{}'", directory_)));
    }
    commits.push_back(std::move(*commit));
  }
  if (!it->status().ok()) return tl::unexpected(Fail(it->status(), "reading commits"));
  return commits;
}

Status RocksCheckpointStore::ScanState(
    const std::function<void(std::string_view key, std::string_view value)>& visit) {
  rocksdb::ReadOptions read_options;
  read_options.readahead_size = 1 << 20;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(read_options, cf(kStateCf))};
  for (it->SeekToFirst(); it->Valid(); it->Next()) visit(ToView(it->key()), ToView(it->value()));
  if (!it->status().ok()) return tl::unexpected(Fail(it->status(), "scanning state"));
  return Ok();
}

Status RocksCheckpointStore::Commit(BatchWrite write) {
  DRIFTD_TRY(RefuseIfReadOnly("commit"));
  const int64_t batch_id = write.commit.batch_id;
  if (batch_id < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "checkpoint '{}': batch id {} is negative",
                     directory_, batch_id);
  }
  if (!commit_ids_.empty() && batch_id <= commit_ids_.back()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "checkpoint '{}': batch {} is not after the last committed batch {}",
                     directory_, batch_id, commit_ids_.back());
  }

  CommitRecord record = write.commit;
  if (record.committed_at_ms == 0) record.committed_at_ms = NowMs();
  const std::string id_key = EncodeBatchId(batch_id);

  // The WriteBatch's bytes reserved at once (StateEntryBytes); the outbox header and the
  // commit log's trimmed ids take a few kilobytes at most.
  const std::string commit_value = EncodeCommit(record);
  size_t reserve = 4096 + id_key.size() + commit_value.size() + write.outbox.payload.size() +
                   StateEntryBytes(write.state_puts, write.state_deletes);
  for (const std::string& sink : write.outbox.pending_sinks) reserve += sink.size() + 8;
  if (reserve > batch_reserved_) {
    batch_ = rocksdb::WriteBatch();  // the old buffer goes before the new one is taken
    batch_reserved_ = reserve + reserve / 64;
    batch_ = rocksdb::WriteBatch(batch_reserved_);
  } else {
    batch_.Clear();
  }
  rocksdb::WriteBatch& batch = batch_;
  rocksdb::Status status;
  // Puts before deletes: a key both put and deleted in one batch ends up deleted.
  // In key order, the memtable takes each put next to the one before (its skip list starts
  // the search where the last insert ended) instead of searching from the top: at 10,000
  // models that was 9% of the run. The order is sorted, not the puts (moving strings cost
  // more than comparing them); ties by position, so a key put twice keeps its last value.
  std::vector<uint32_t> order(write.state_puts.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const int c = write.state_puts[a].first.compare(write.state_puts[b].first);
    return c < 0 || (c == 0 && a < b);
  });
  // Each put is released once copied (with what the statistics need of it), so the batch's
  // state is held about once, not twice, while the WriteBatch fills.
  std::vector<CountedEntry> counted;
  counted.reserve(write.state_puts.size() + write.state_deletes.size());
  for (uint32_t i : order) {
    auto& [key, value] = write.state_puts[i];
    if (status.ok()) status = batch.Put(cf(kStateCf), key, ToSlice(value.view()));
    counted.push_back(
        {StateKeyHash(key), static_cast<uint32_t>(key.size()), static_cast<int64_t>(value.size())});
    std::string().swap(key);
    value.Release();
  }
  for (const std::string& key : write.state_deletes) {
    if (status.ok()) status = batch.Delete(cf(kStateCf), key);
    counted.push_back({StateKeyHash(key), static_cast<uint32_t>(key.size()), -1});
  }
  if (status.ok()) status = batch.Put(cf(kCommitsCf), id_key, commit_value);

  std::vector<std::string> sinks = write.outbox.pending_sinks;
  std::sort(sinks.begin(), sinks.end());
  sinks.erase(std::unique(sinks.begin(), sinks.end()), sinks.end());
  if (status.ok() && !sinks.empty()) {
    // Header and payload as parts: the payload is copied once, into the WriteBatch.
    const std::string header = EncodeOutboxHeader(sinks);
    const rocksdb::Slice key_part = ToSlice(id_key);
    const rocksdb::Slice value_parts[] = {ToSlice(header), ToSlice(write.outbox.payload)};
    status = batch.Put(cf(kOutboxCf), rocksdb::SliceParts(&key_part, 1),
                       rocksdb::SliceParts(value_parts, 2));
  }

  // Trim the commit log to the newest commit_history records, this one included.
  const size_t keep = static_cast<size_t>(options_.commit_history);
  const size_t trim = commit_ids_.size() + 1 > keep ? commit_ids_.size() + 1 - keep : 0;
  for (size_t i = 0; i < trim && status.ok(); ++i) {
    status = batch.Delete(cf(kCommitsCf), EncodeBatchId(commit_ids_[i]));
  }
  if (!status.ok())
    return tl::unexpected(Fail(status, fmt::format("preparing batch {}", batch_id)));

  // The rest of the write is in the WriteBatch too: released before the memtables copy it.
  StatePuts().swap(write.state_puts);
  std::vector<std::string>().swap(write.state_deletes);
  std::string().swap(write.outbox.payload);

  status = db_->Write(SyncedWrite(), &batch);
  // A large buffer is not kept between batches: the memtables hold the batch by now, and a
  // process past its warmup would carry the largest batch's size (85 MB at 10,000 models)
  // for nothing while it reads the next one. A small one saves the next batch's page faults.
  if (batch_reserved_ > kKeptWriteBatchBytes) {
    batch_ = rocksdb::WriteBatch();
    batch_reserved_ = 0;
  }
  if (!status.ok())
    return tl::unexpected(Fail(status, fmt::format("committing batch {}", batch_id)));

  // Durable: now mirror it in memory, in the same order the WriteBatch applied it.
  commit_ids_.erase(commit_ids_.begin(), commit_ids_.begin() + static_cast<ptrdiff_t>(trim));
  commit_ids_.push_back(batch_id);
  if (!sinks.empty()) outbox_sinks_[batch_id] = std::move(sinks);
  CountState(counted);
  return Ok();
}

void RocksCheckpointStore::CountState(const std::vector<CountedEntry>& entries) {
  for (const CountedEntry& entry : entries) {
    if (entry.value_size < 0) {
      auto it = value_sizes_.find(entry.hash);
      if (it == value_sizes_.end()) continue;
      stats_.keys -= 1;
      stats_.bytes -= static_cast<int64_t>(entry.key_size + it->second);
      value_sizes_.erase(it);
      continue;
    }
    auto [it, inserted] = value_sizes_.try_emplace(entry.hash, 0);
    if (inserted) {
      stats_.keys += 1;
      stats_.bytes += entry.key_size;
    }
    stats_.bytes += entry.value_size - static_cast<int64_t>(it->second);
    it->second = static_cast<uint32_t>(entry.value_size);
  }
}

void RocksCheckpointStore::CountState(const StatePuts& puts,
                                      const std::vector<std::string>& deletes) {
  std::vector<CountedEntry> entries;
  entries.reserve(puts.size() + deletes.size());
  for (const auto& [key, value] : puts) {
    entries.push_back(
        {StateKeyHash(key), static_cast<uint32_t>(key.size()), static_cast<int64_t>(value.size())});
  }
  for (const std::string& key : deletes) {
    entries.push_back({StateKeyHash(key), static_cast<uint32_t>(key.size()), -1});
  }
  CountState(entries);
}

Status RocksCheckpointStore::ApplyState(const StatePuts& puts,
                                        const std::vector<std::string>& deletes) {
  DRIFTD_TRY(RefuseIfReadOnly("writing state"));
  // Reserved at its size, as Commit's: a clean stop may write every waiting evaluation.
  rocksdb::WriteBatch batch(64 + StateEntryBytes(puts, deletes));
  rocksdb::Status status;
  for (const std::string& key : deletes) {
    if (status.ok()) status = batch.Delete(cf(kStateCf), key);
  }
  for (const auto& [key, value] : puts) {
    if (status.ok()) status = batch.Put(cf(kStateCf), key, ToSlice(value.view()));
  }
  if (status.ok()) status = db_->Write(SyncedWrite(), &batch);
  if (!status.ok()) return tl::unexpected(Fail(status, "writing state"));
  // The deletes applied first, so count them first.
  CountState({}, deletes);
  CountState(puts, {});
  return Ok();
}

Status RocksCheckpointStore::ScanStatePrefix(
    std::string_view prefix,
    const std::function<void(std::string_view key, std::string_view value)>& visit) {
  rocksdb::ReadOptions read_options;
  read_options.readahead_size = 1 << 20;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(read_options, cf(kStateCf))};
  for (it->Seek(ToSlice(prefix)); it->Valid() && ToView(it->key()).starts_with(prefix);
       it->Next()) {
    visit(ToView(it->key()), ToView(it->value()));
  }
  if (!it->status().ok()) return tl::unexpected(Fail(it->status(), "scanning state"));
  return Ok();
}

Result<std::vector<OutboxEntry>> RocksCheckpointStore::PendingOutbox() {
  std::vector<OutboxEntry> entries;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions(), cf(kOutboxCf))};
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto batch_id = DecodeBatchId(ToView(it->key()));
    if (!batch_id) return tl::unexpected(batch_id.error().Wrap("checkpoint outbox"));
    auto entry = DecodeOutbox(*batch_id, ToView(it->value()));
    if (!entry) {
      return tl::unexpected(entry.error().Wrap(fmt::format("checkpoint '{}'", directory_)));
    }
    outbox_sinks_[entry->batch_id] = entry->pending_sinks;
    entries.push_back(std::move(*entry));
  }
  if (!it->status().ok()) return tl::unexpected(Fail(it->status(), "reading the outbox"));
  return entries;
}

Status RocksCheckpointStore::MarkDelivered(int64_t batch_id, std::string_view sink) {
  DRIFTD_TRY(RefuseIfReadOnly("marking delivery"));
  if (batch_id < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "checkpoint '{}': batch id {} is negative",
                     directory_, batch_id);
  }
  const std::string key = EncodeBatchId(batch_id);
  // Not synced: the sink's own record of the delivery (a file manifest entry, a committed
  // Kafka transaction) is durable before this is called, and a mark that a machine crash
  // loses only makes recovery ask the sink (Sink::IsDelivered) instead. The next commit's
  // sync persists it anyway. One fsync per batch fewer.
  const rocksdb::WriteOptions unsynced;
  if (auto known = outbox_sinks_.find(batch_id); known != outbox_sinks_.end()) {
    auto& pending = known->second;
    auto found = std::find(pending.begin(), pending.end(), sink);
    if (found == pending.end()) return Ok();
    if (pending.size() == 1) {
      // The last sink: the entry goes, and its payload (a batch's rows) is never read back.
      rocksdb::Status status = db_->Delete(unsynced, cf(kOutboxCf), key);
      if (!status.ok()) {
        return tl::unexpected(Fail(status, fmt::format("marking batch {} delivered", batch_id)));
      }
      outbox_sinks_.erase(known);
      return Ok();
    }
  }
  std::string value;
  rocksdb::Status status = db_->Get(rocksdb::ReadOptions(), cf(kOutboxCf), key, &value);
  // Idempotent: recovery may confirm a delivery that was already recorded.
  if (status.IsNotFound()) return Ok();
  if (!status.ok()) return tl::unexpected(Fail(status, "reading the outbox"));
  auto entry = DecodeOutbox(batch_id, value);
  if (!entry) return tl::unexpected(entry.error().Wrap(fmt::format("checkpoint '{}'", directory_)));

  auto& sinks = entry->pending_sinks;
  auto found = std::find(sinks.begin(), sinks.end(), sink);
  if (found == sinks.end()) return Ok();
  sinks.erase(found);
  if (sinks.empty()) {
    status = db_->Delete(unsynced, cf(kOutboxCf), key);
  } else {
    status = db_->Put(unsynced, cf(kOutboxCf), key, EncodeOutbox(sinks, entry->payload));
  }
  if (!status.ok()) {
    return tl::unexpected(Fail(status, fmt::format("marking batch {} delivered", batch_id)));
  }
  if (sinks.empty()) {
    outbox_sinks_.erase(batch_id);
  } else {
    outbox_sinks_[batch_id] = sinks;
  }
  return Ok();
}

}  // namespace

Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(const std::string& directory,
                                                               const CheckpointOptions& options) {
  if (directory.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "checkpoint directory is empty");
  }
  auto store = std::make_unique<RocksCheckpointStore>(directory, options);
  DRIFTD_TRY(store->Init());
  return std::unique_ptr<CheckpointStore>(std::move(store));
}

}  // namespace driftd

namespace driftd::checkpoint_codec {

std::string EncodeBatchIdKey(int64_t batch_id) { return EncodeBatchId(batch_id); }
std::string EncodeCommitValue(const CommitRecord& commit) { return EncodeCommit(commit); }
std::string EncodeOutboxValue(const std::vector<std::string>& sinks, std::string_view payload) {
  return EncodeOutbox(sinks, payload);
}
Result<int64_t> DecodeBatchIdKey(std::string_view key) { return DecodeBatchId(key); }
Result<CommitRecord> DecodeCommitValue(std::string_view value) { return DecodeCommit(value); }
Result<OutboxEntry> DecodeOutboxValue(int64_t batch_id, std::string_view value) {
  return DecodeOutbox(batch_id, value);
}

}  // namespace driftd::checkpoint_codec
