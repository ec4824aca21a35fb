// The checkpoint: one RocksDB database per pipeline holding keyed state, source offsets, the
// commit log, the outbox of undelivered batch output and the checkpoint metadata. A batch's
// effects are written in one atomic, synced WriteBatch. No RocksDB type appears in this header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/offsets.h"
#include "engine/result.h"

namespace driftd {

struct CheckpointOptions {
  /// fsync the WAL on every commit. Default: true (required for crash safety).
  bool sync = true;
  /// RocksDB block cache size in bytes. Default: 8 MiB (state is small and kept in memory).
  size_t block_cache_bytes = 8 << 20;
  /// Commit records kept for `driftd inspect`. Default: 100.
  int commit_history = 100;
  /// Open without writing (driftd inspect). Default: false.
  bool read_only = false;
};

/// Identity of the pipeline a checkpoint belongs to.
struct CheckpointMetadata {
  std::string pipeline_name;
  /// JSON object describing everything state depends on (source, schema, keys, aggregates...).
  std::string fingerprint_json;
  int format_version = 1;
  int64_t created_at_ms = 0;
  /// Random id given to the checkpoint once, when it is created (the executor writes it). Batch
  /// ids restart at 0 in a new checkpoint of the same pipeline, so sinks that remember delivered
  /// batch ids outside the checkpoint tell checkpoints apart by it. Empty in checkpoints written
  /// before ids existed (the executor adds one on their next start).
  std::string checkpoint_id;
};

/// The durable record that batch `batch_id` happened.
struct CommitRecord {
  int64_t batch_id = -1;
  SourceOffsets start;
  SourceOffsets end;
  /// Event-time watermark in effect for the next batch, microseconds; INT64_MIN if none.
  int64_t watermark_us = INT64_MIN;
  int64_t committed_at_ms = 0;
};

/// Output of a committed batch not yet delivered to every sink.
struct OutboxEntry {
  int64_t batch_id = 0;
  std::string payload;                       // serialized BatchOutput (engine's encoding)
  std::vector<std::string> pending_sinks;    // sinks that have not confirmed delivery
};

/// Everything one batch changes, applied atomically by CheckpointStore::Commit.
struct BatchWrite {
  CommitRecord commit;
  std::vector<std::pair<std::string, std::string>> state_puts;
  std::vector<std::string> state_deletes;
  /// Empty pending_sinks: nothing to deliver, no outbox entry written.
  OutboxEntry outbox;
};

struct StateStats {
  int64_t keys = 0;
  int64_t bytes = 0;  // sum of key and value sizes of live state entries
};

/// Thread-safety: all methods may be called from one thread at a time.
class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;

  /// Opens (creating if absent, unless read_only) the checkpoint in `directory`.
  [[nodiscard]] static Result<std::unique_ptr<CheckpointStore>> Open(
      const std::string& directory, const CheckpointOptions& options);

  virtual Result<std::optional<CheckpointMetadata>> ReadMetadata() = 0;
  virtual Status WriteMetadata(const CheckpointMetadata& metadata) = 0;

  /// The last committed batch, if any.
  virtual Result<std::optional<CommitRecord>> LastCommit() = 0;
  /// Up to `limit` most recent commits, newest first.
  virtual Result<std::vector<CommitRecord>> RecentCommits(int limit) = 0;

  /// Calls `visit` for every state entry, in key order.
  virtual Status ScanState(
      const std::function<void(std::string_view key, std::string_view value)>& visit) = 0;

  /// Applies a batch atomically (one WriteBatch; synced if options.sync).
  virtual Status Commit(const BatchWrite& write) = 0;

  /// Outbox entries, oldest batch first.
  virtual Result<std::vector<OutboxEntry>> PendingOutbox() = 0;
  /// `sink` has delivered `batch_id`; the entry goes when no sink is pending.
  virtual Status MarkDelivered(int64_t batch_id, std::string_view sink) = 0;

  /// Live state key count and bytes (maintained incrementally, cheap).
  virtual StateStats Stats() = 0;
};

}  // namespace driftd
