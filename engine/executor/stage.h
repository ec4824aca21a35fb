// The query's stages (aggregation, drift detection, a plain select) behind one interface, so
// that the executor drives every stage the same way: restore its state, fold each decoded chunk
// into it, and at the end of a batch collect its output rows and its state changes for the
// batch's atomic commit. A stage owns its state in memory; the executor persists what it reports
// and hands it back on restore, under the stage's own namespace and the task (scope) it serves.
//
// Lifecycle: created by CreateStages; Restore() for every persisted key of its namespace before
// the first Process(); then per batch any number of Process() calls and one Finish(). All calls
// on the executor's thread, except when the executor runs a batch on several threads
// (engine/executor/chunk_pipeline.h): then a stage with shards has Route() called from any
// thread and ProcessShard() for different shards at once, one call at a time per shard.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/batch.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/sink.h"

namespace driftd {

/// What a stage is told at the end of a batch.
struct BatchContext {
  int64_t batch_id = 0;
  /// Processing time of the batch (Unix epoch milliseconds).
  int64_t now_ms = 0;
  /// The watermark in force during this batch (INT64_MIN: none yet). Windows whose end is at or
  /// behind it are closed.
  int64_t watermark_us = INT64_MIN;
  /// The watermark the next batch will use; never behind watermark_us.
  int64_t next_watermark_us = INT64_MIN;
};

/// State changes of a batch, keys in the stage's own encoding (the executor adds scope and
/// namespace).
struct StateChanges {
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
};

/// Counters a stage reports into the batch's progress record.
struct StageProgress {
  int64_t num_groups = 0;
  int64_t rows_updated = 0;
  int64_t num_open_windows = 0;
  int64_t dropped_by_watermark = 0;
  int64_t without_event_time = 0;
  /// Drift: series whose state changed in the batch, and the encoded size of what changed
  /// (DriftMonitor::WriteStats), beside what the batch writes (ProgressRecord).
  int64_t drift_dirty_series = 0;
  int64_t drift_dirty_bytes = 0;
  int64_t drift_put_bytes = 0;
  /// The encoded size of the state the stage changed: the values it puts (drift: its records'
  /// changed parts, drift_dirty_bytes, and its evaluations), beside what the commit writes.
  int64_t state_dirty_bytes = 0;
  /// Drift: values of map keys and rows of segments not watched, their model being at
  /// drift.maxKeysPerModel (or maxKeys) and maxSegmentsPerModel.
  int64_t drift_values_over_key_cap = 0;
  int64_t drift_rows_over_segment_cap = 0;
};

class Stage {
 public:
  virtual ~Stage() = default;

  /// Namespace of the stage's state keys in the checkpoint ("agg", "drift"); persisted, so it
  /// never changes. Empty: the stage keeps no state.
  virtual std::string_view state_namespace() const = 0;

  /// Loads one persisted entry (a key and value this stage reported in Finish).
  virtual Status Restore(std::string_view key, std::string_view value) = 0;

  /// Called once after every persisted entry was restored (the whole checkpoint was scanned).
  virtual Status FinishRestore() { return Ok(); }

  /// Folds decoded rows into the stage. `times` has one entry per row.
  virtual void Process(const RecordBatch& batch, const RowTimes& times, BatchOutput& output) = 0;

  /// Shards: a stage whose state is a set of independent groups may split it in shards by a
  /// property of the row alone (its group), so that several threads fold one batch, each shard
  /// seeing its rows in their input order, as Process would. Default: one shard (Process).
  virtual uint32_t shard_count() const { return 1; }
  /// Appends the index of each row of `batch` to the list of its shard (rows_of_shard holds
  /// shard_count() lists). Reads only what the stage was created with: may run on any thread
  /// while shards fold other batches.
  virtual void Route(const RecordBatch& batch,
                     std::span<std::vector<uint32_t>> rows_of_shard) const {
    (void)batch;
    (void)rows_of_shard;
  }
  /// Folds the rows `rows` (ascending indexes into `batch`, all routed to `shard`) into shard
  /// `shard`. Calls for different shards may run at once on different threads.
  virtual void ProcessShard(uint32_t shard, const RecordBatch& batch, const RowTimes& times,
                            std::span<const uint32_t> rows) {
    (void)shard;
    (void)batch;
    (void)times;
    (void)rows;
  }

  /// Whether a batch without input is due: a window not yet closed ends at or before
  /// `watermark_us`, so a batch must run to emit or evict it.
  virtual bool HasClosableWindows(int64_t watermark_us) const {
    (void)watermark_us;
    return false;
  }

  /// Ends the batch: appends its rows to `output`, its state changes to `changes`, and adds its
  /// counters to `progress`.
  virtual void Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
                      StageProgress& progress) = 0;
};

/// The stages a pipeline needs, in the order the executor runs them: the aggregation (or a
/// select of the input rows), then drift detection when configured. The spec must have passed
/// validation. `shards` >= 1: how many shards a stage that can split its state uses (the
/// aggregation when it has groupBy keys); its results are the same for any number.
Result<std::vector<std::unique_ptr<Stage>>> CreateStages(const PipelineSpec& spec,
                                                         uint32_t shards = 1);

}  // namespace driftd
