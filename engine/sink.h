// The Sink interface (Spark's DataStreamWriter side); connectors/ implements it. The executor
// persists a batch's output in the checkpoint's outbox before delivering it; a sink makes
// delivery idempotent per batch id so that recovery can finish an interrupted delivery without
// repeating it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/pipeline_spec.h"
#include "engine/source.h"
#include "engine/result.h"

namespace driftd {

/// The rows of one result stream for one batch. Each row is a JSON object (one line, no
/// trailing newline); `keys[i]` is the row's message key (e.g. the model id) or empty.
struct OutputRows {
  std::vector<std::string> columns;
  std::vector<std::string> rows;
  std::vector<std::string> keys;

  bool empty() const { return rows.empty(); }
  void Add(std::string key, std::string row) {
    keys.push_back(std::move(key));
    rows.push_back(std::move(row));
  }
};

/// A record of a scaled-out query's internal topics (engine/group.h).
struct InternalRecord {
  uint32_t partition = 0;
  std::string key;
  std::string value;
  /// A deletion (a changelog tombstone): no value.
  bool tombstone = false;
};

/// Everything a batch produced, by stream and output mode. Only the combinations some sink asked
/// for are filled in.
struct BatchOutput {
  int64_t batch_id = 0;
  OutputRows stats_append;
  OutputRows stats_update;
  OutputRows stats_complete;
  OutputRows alerts;
  OutputRows dead_letters;
  /// One row per closed drift window (filled only when a sink takes the evaluations stream).
  OutputRows evaluations;
  /// Each model's performance per window (labels).
  OutputRows performance;
  /// Source end offsets of the batch (for Kafka's send_offsets_to_transaction).
  SourceOffsets source_end;
  /// Scaled out (engine/group.h): rows and clock marks for the tasks that own their models
  /// (repartition topic), the batch's state changes by task (changelog topic), and the metadata
  /// committed with each source partition's offset (its clock). The Kafka sink delivers them in
  /// the batch's transaction; the outbox never holds them.
  std::vector<InternalRecord> repartition;
  std::vector<InternalRecord> changelog;
  std::map<std::string, std::string> offset_metadata;

  const OutputRows& For(StreamKind stream, OutputMode mode) const {
    switch (stream) {
      case StreamKind::kAlerts: return alerts;
      case StreamKind::kDeadLetter: return dead_letters;
      case StreamKind::kEvaluations: return evaluations;
      case StreamKind::kPerformance: return performance;
      case StreamKind::kStats: break;
    }
    switch (mode) {
      case OutputMode::kAppend: return stats_append;
      case OutputMode::kUpdate: return stats_update;
      case OutputMode::kComplete: return stats_complete;
    }
    return stats_append;
  }
};

/// The largest row one of a sink's streams can take: the row's bytes (as the stream holds them,
/// JSON) plus its key's. A row over it would fail every delivery of its batch (a Kafka record
/// over the topic's max.message.bytes aborts the transaction, and a retry cannot help), so the
/// executor sets such rows aside before the batch commits (engine/executor/output_limits.h)
/// and the sink skips them.
struct RowLimit {
  std::string sink;  // the SinkSpec's name
  StreamKind stream = StreamKind::kStats;
  OutputMode mode = OutputMode::kUpdate;
  size_t max_bytes = 0;
  /// What sets the limit, for messages ("topic alerts takes records of up to 1048588 bytes").
  std::string why;
};

/// Whether a row of `rows` at `i` is over `limit` (the measure RowLimit states).
inline bool OverRowLimit(const OutputRows& rows, size_t i, size_t limit) {
  const size_t key = i < rows.keys.size() ? rows.keys[i].size() : 0;
  return rows.rows[i].size() + key > limit;
}

/// A delivery target. One Sink object may serve several SinkSpecs of its format (all Kafka
/// sinks of a pipeline share one transactional producer, so a batch commits everywhere or
/// nowhere).
/// Lifecycle: Open, then Delivered/Deliver per batch from the executor's thread, then Close.
class Sink {
 public:
  virtual ~Sink() = default;

  /// A stable name, used to track delivery in the outbox.
  virtual const std::string& name() const = 0;

  /// Called by the executor before Open with the checkpoint's identity
  /// (CheckpointMetadata::checkpoint_id) and its last committed batch (-1: none). Batch ids
  /// restart at 0 when a pipeline starts over with a new checkpoint, so a sink that records
  /// delivered batch ids outside the checkpoint (the Kafka sink's progress topic) must not take
  /// another checkpoint's ids for its own; and a sink whose record is ahead of the last commit
  /// may refuse to Open (kIncompatible) before it disturbs anything (see LastDelivered).
  /// Default: ignored.
  virtual void SetCheckpointId(const std::string& checkpoint_id, int64_t last_committed_batch) {
    (void)checkpoint_id;
    (void)last_committed_batch;
  }

  /// Connects; fences zombies and aborts open transactions where the sink has them.
  virtual Status Open() = 0;

  /// Whether batch `batch_id` was fully delivered before (file manifest, committed Kafka
  /// transaction). Used only on recovery for batches still in the outbox.
  virtual Result<bool> IsDelivered(int64_t batch_id) = 0;

  /// After Open: the newest batch of this checkpoint (SetCheckpointId) that the sink's own
  /// record says was delivered, or nullopt when it keeps no such record (console) or has
  /// delivered nothing yet. A checkpoint whose last committed batch is older is a copy or an
  /// old backup of one that kept running, and the executor refuses to start from it rather
  /// than deliver those batches again.
  virtual Result<std::optional<int64_t>> LastDelivered() { return std::optional<int64_t>(); }

  /// Delivers the batch's rows atomically: afterwards IsDelivered(batch_id) is true, and a
  /// crash before that leaves nothing visible to readers of committed output.
  virtual Status Deliver(const BatchOutput& output) = 0;

  /// Lets Deliver leave what it writes in the OS's cache, durable only after the next Sync():
  /// the continuous trigger asks for it, so that an epoch costs one durable write (the
  /// checkpoint's commit) and the sinks' output is synced once per trigger interval. The
  /// executor marks such deliveries done in the checkpoint only after Sync() returned, so a
  /// machine crash in between makes recovery ask IsDelivered(), which must then tell a
  /// complete delivery from one the crash cut. A sink that cannot defer ignores the call.
  /// Default: ignored.
  virtual void DeferDurability(bool on) { (void)on; }

  /// Makes every delivery finished before the call durable. Called from a thread other than
  /// Deliver's, possibly while a Deliver runs: a sink that defers must be safe for that.
  /// Default: nothing to do (the sink's deliveries are durable when Deliver returns).
  virtual Status Sync() { return Ok(); }

  /// Asks an Open under way to give up soon (it then fails with kCancelled); called from any
  /// thread when the query is asked to stop. A delivery under way is not cut short. Default:
  /// nothing (Open ends soon by itself).
  virtual void Cancel() {}

  /// Whether Deliver commits a scaled-out query's batch: the Kafka sink, whose transaction
  /// holds the batch's internal records and offsets (engine/group.h). Default: false.
  virtual bool CommitsScaledOutBatches() const { return false; }

  /// After Open: the most each of the sink's (stream, output mode) targets takes of one row;
  /// none for a target without a limit. Asked before each batch (a limit may become known
  /// late). Deliver skips the rows over a limit (OverRowLimit): the executor has set them
  /// aside, counted, before the batch committed. Default: none.
  virtual std::vector<RowLimit> RowLimits() { return {}; }

  /// Flushes and releases resources; best effort.
  virtual Status Close() { return Ok(); }
};

}  // namespace driftd
