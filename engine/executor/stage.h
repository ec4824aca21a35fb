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
#include "engine/state_value.h"

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
  /// Records were left beyond this batch (a backlog is being read): what only the status page
  /// shows may wait for a later batch to be written (HistoryStage).
  bool more_available = false;
};

/// State changes of a batch, keys in the stage's own encoding (the executor adds scope and
/// namespace).
struct StateChanges {
  StatePuts puts;
  std::vector<std::string> deletes;
};

/// Counters of the labels' join (engine/executor/performance_stage.h).
struct JoinCounts {
  int64_t pending = 0;  // predictions and labels waiting in state after the batch
  int64_t labelled = 0;
  int64_t unlabelled = 0;                 // predictions the bound passed without a label
  int64_t labels_without_prediction = 0;  // labels the bound passed without a prediction
  int64_t labels_outside_bound = 0;       // a label too far in event time from its prediction
  int64_t labels_late = 0;                // behind the watermark when they came
  int64_t duplicate_labels = 0;
  int64_t duplicate_predictions = 0;
  int64_t predictions_late = 0;  // behind the watermark when they came
  int64_t without_key = 0;       // a null or over-long key or value, or no usable event time
  // Predictions of a model the join could not take: it joins for query.maxModels models (the
  // model gate's share on the other tasks is theirs to count).
  int64_t predictions_over_model_cap = 0;
  // Rows of a key that holds the most rows one key may (a key that is not a request's).
  int64_t rows_over_key_cap = 0;

  void Add(const JoinCounts& o) {
    pending += o.pending;
    labelled += o.labelled;
    unlabelled += o.unlabelled;
    labels_without_prediction += o.labels_without_prediction;
    labels_outside_bound += o.labels_outside_bound;
    labels_late += o.labels_late;
    duplicate_labels += o.duplicate_labels;
    duplicate_predictions += o.duplicate_predictions;
    predictions_late += o.predictions_late;
    without_key += o.without_key;
    predictions_over_model_cap += o.predictions_over_model_cap;
    rows_over_key_cap += o.rows_over_key_cap;
  }
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
  /// The model gate (engine/executor/model_gate.h): models admitted, rows of models over the
  /// cap in the batch.
  int64_t models = 0;
  int64_t rows_over_model_cap = 0;
  /// The labels' join, in this batch (pending: after it).
  JoinCounts join;
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

  /// Whether the stage takes the rows of the labels input (the query's labels section), in
  /// ProcessLabels, in input order with the other rows. Default: no.
  virtual bool TakesLabels() const { return false; }
  virtual void ProcessLabels(const RecordBatch& labels, const RowTimes& times) {
    (void)labels;
    (void)times;
  }

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

  /// At a clean stop, after the last batch committed: state the stage keeps back from its
  /// batches' changes because no batch reads it (what only the status page and reports show;
  /// drift's latest evaluations), to be written without a batch. Default: none.
  virtual void FlushKept(int64_t now_ms, StateChanges& changes) {
    (void)now_ms;
    (void)changes;
  }
};

class DriftStage;        // engine/executor/drift_stage.h
class PerformanceStage;  // engine/executor/performance_stage.h
class HistoryStage;      // engine/executor/status_history.h

/// A task's stages in the order the loop runs them, and, beside them, the stages the loop asks
/// for more than rows (an operator's baseline reset, drift's values in event-time order, the
/// alerts and evaluations the metrics show, the status page's restored history): views into `all` that the factory sets when it
/// creates them, so that nothing finds a stage by its type.
struct StageSet {
  std::vector<std::unique_ptr<Stage>> all;
  DriftStage* drift = nullptr;              // drift detection, when configured
  PerformanceStage* performance = nullptr;  // the labels' join, when the query has labels
  HistoryStage* history = nullptr;          // the status page's history, in one process
};

/// The stages a pipeline needs, in the order the executor runs them: the aggregation (or a
/// select of the input rows), then drift detection when configured, then the labels' join. The
/// spec must have passed validation. `shards` >= 1: how many shards a stage that can split its
/// state uses (the aggregation when it has groupBy keys); its results are the same for any
/// number.
Result<StageSet> CreateStageSet(const PipelineSpec& spec, uint32_t shards = 1);
/// CreateStageSet's stages alone.
Result<std::vector<std::unique_ptr<Stage>>> CreateStages(const PipelineSpec& spec,
                                                         uint32_t shards = 1);

}  // namespace driftd
