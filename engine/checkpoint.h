// The checkpoint interface: what the executor needs of durable storage (keyed state, source
// offsets and the commit log, the outbox of undelivered batch output, the checkpoint's identity).
// A batch's effects are applied atomically. state/ implements it on RocksDB
// (state/checkpoint_store.h); the executor is handed an opener and never names the
// implementation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/offsets.h"
#include "engine/result.h"
#include "engine/state_value.h"

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
  /// 1: state keys unscoped (migrated to 2 on the first start of a newer driftd); 2: state
  /// keys are EncodeStateKey(scope, namespace, key).
  int format_version = 2;
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
  /// Largest event time read from each clock partition so far (engine/executor/event_clock.h),
  /// microseconds. Empty without an event-time clock, and in records written before clocks
  /// were per partition.
  std::map<std::string, int64_t> max_event_us;
};

/// State keys: the task that owns the entry (its scope: 0 for a query run by one process, the
/// task's partition in a scaled-out query), the stage's namespace ("agg", "drift") and the
/// stage's own key. Encoded as a big-endian u32 scope, the namespace, a 0 byte and the key, so
/// that a task's entries, and a namespace's within it, are contiguous in key order.
struct StateKeyView {
  uint32_t scope = 0;
  std::string_view ns;
  std::string_view key;
};
std::string EncodeStateKey(uint32_t scope, std::string_view ns, std::string_view key);
/// False when `encoded` is not a state key of this encoding.
bool DecodeStateKey(std::string_view encoded, StateKeyView& out);
/// The first key of a scope's entries (all of them share it as a prefix).
std::string StateScopePrefix(uint32_t scope);

/// Output of a committed batch not yet delivered to every sink.
struct OutboxEntry {
  int64_t batch_id = 0;
  std::string payload;                       // serialized BatchOutput (engine's encoding)
  std::vector<std::string> pending_sinks;    // sinks that have not confirmed delivery
};

/// Everything one batch changes, applied atomically by CheckpointStore::Commit.
struct BatchWrite {
  CommitRecord commit;
  StatePuts state_puts;
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

  virtual Result<std::optional<CheckpointMetadata>> ReadMetadata() = 0;
  virtual Status WriteMetadata(const CheckpointMetadata& metadata) = 0;
  /// Replaces state entries (deletes first, then puts) and writes the metadata, in one atomic,
  /// synced write: how a checkpoint's format is migrated.
  virtual Status RewriteState(const std::vector<std::pair<std::string, std::string>>& puts,
                              const std::vector<std::string>& deletes,
                              const CheckpointMetadata& metadata) = 0;

  /// The last committed batch, if any.
  virtual Result<std::optional<CommitRecord>> LastCommit() = 0;
  /// Up to `limit` most recent commits, newest first.
  virtual Result<std::vector<CommitRecord>> RecentCommits(int limit) = 0;

  /// Calls `visit` for every state entry, in key order.
  virtual Status ScanState(
      const std::function<void(std::string_view key, std::string_view value)>& visit) = 0;

  /// Applies a batch atomically (one WriteBatch; synced if options.sync). By value: a caller
  /// that moves its write in lets the store release the puts once it has copied them (a
  /// batch's state can be tens of megabytes).
  virtual Status Commit(BatchWrite write) = 0;

  /// Applies state entries alone (deletes first, then puts) atomically, without a commit
  /// record: a scaled-out task's state restored from its changelog. Synced if options.sync.
  virtual Status ApplyState(const StatePuts& puts, const std::vector<std::string>& deletes) = 0;

  /// Calls `visit` for every state entry whose key starts with `prefix`, in key order.
  virtual Status ScanStatePrefix(
      std::string_view prefix,
      const std::function<void(std::string_view key, std::string_view value)>& visit) = 0;

  /// Outbox entries, oldest batch first.
  virtual Result<std::vector<OutboxEntry>> PendingOutbox() = 0;
  /// `sink` has delivered `batch_id`; the entry goes when no sink is pending. Not synced by
  /// itself (the next Commit's sync persists it): call it only once the sink's own record of
  /// the delivery is durable, which Sink::IsDelivered reads after a machine crash.
  virtual Status MarkDelivered(int64_t batch_id, std::string_view sink) = 0;

  /// Live state key count and bytes (maintained incrementally, cheap).
  virtual StateStats Stats() = 0;

  /// The store is about to be closed: the writes that may follow are the last delivery marks.
  /// No flush or compaction starts from here on. One that a large commit set off and that was
  /// still running at close was thrown away (the WAL holds every write, and the next open
  /// replays it), after costing a table file's worth of work and keeping the close waiting.
  virtual void PrepareClose() = 0;
};

/// Opens (creating if absent, unless options.read_only) the checkpoint in a directory.
using CheckpointOpener = std::function<Result<std::unique_ptr<CheckpointStore>>(
    const std::string& directory, const CheckpointOptions& options)>;

}  // namespace driftd
