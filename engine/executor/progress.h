// The progress record written after every batch, shaped like Spark's StreamingQueryProgress.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/source.h"
#include "engine/value_decoder.h"
#include "engine/pipeline_spec.h"
#include "engine/checkpoint.h"
#include "engine/executor/stage.h"

namespace driftd {

struct ProgressRecord {
  /// The query's id (its checkpoint's, stable across restarts) and this run's id (new at
  /// every start), as Spark's id and runId.
  std::string id;
  std::string run_id;
  int64_t batch_id = 0;
  int64_t timestamp_ms = 0;
  int64_t num_input_rows = 0;
  int64_t num_output_rows = 0;
  int64_t num_alerts = 0;
  double input_rows_per_second = 0;
  double processed_rows_per_second = 0;
  // durationMs by phase
  int64_t latest_offset_ms = 0;  // planning the batch's offsets
  int64_t add_batch_ms = 0;      // reading, decoding, aggregating, drift
  int64_t wal_commit_ms = 0;     // the RocksDB commit
  int64_t delivery_ms = 0;       // delivering the outbox to the sinks
  int64_t trigger_execution_ms = 0;
  SourceOffsets start_offsets;
  SourceOffsets end_offsets;
  std::vector<PartitionLag> lag;
  std::string source_description;
  /// The query's inputs (Source::Summaries), with the rows each gave in the batch (the same
  /// order); one entry for a query of one input.
  std::vector<SourceSummary> sources;
  std::vector<int64_t> input_rows_by_input;
  StateStats state;
  /// State written by the batch's commit: keys put and their bytes (keys and values), keys
  /// deleted, the encoded size of what the batch changed (StageProgress::state_dirty_bytes);
  /// drift series changed and the encoded size of their changes.
  int64_t state_keys_written = 0;
  int64_t state_bytes_written = 0;
  int64_t state_dirty_bytes = 0;
  int64_t state_keys_deleted = 0;
  int64_t drift_dirty_series = 0;
  int64_t drift_dirty_bytes = 0;
  int64_t drift_put_bytes = 0;  // keys and values of the drift monitor's puts
  /// Drift values and rows not watched: map keys over drift.maxKeysPerModel (or maxKeys),
  /// segments over maxSegmentsPerModel.
  int64_t drift_values_over_key_cap = 0;
  int64_t drift_rows_over_segment_cap = 0;
  /// Output rows over what a sink takes of one row, set aside to the dead-letter stream
  /// (engine/executor/output_limits.h).
  int64_t rows_over_sink_limit = 0;
  /// The model gate: models admitted (0: no gate), the cap, rows over it in the batch.
  int64_t models = 0;
  int64_t max_models = 0;
  int64_t rows_over_model_cap = 0;
  /// Drift's values waiting for the watermark to take them in event-time order
  /// (engine/executor/order_buffer.h), after the batch; -1: none are ordered.
  int64_t order_buffered = -1;
  /// The labels' join in this batch (engine/executor/performance_stage.h), when the query has
  /// labels.
  bool labels = false;
  JoinCounts join;
  int64_t num_groups = 0;
  int64_t rows_updated = 0;
  int64_t dropped_by_watermark = 0;
  int64_t without_event_time = 0;  // windowed query: rows whose window column was null
  int64_t num_open_windows = 0;    // windows the watermark has not closed yet
  int64_t lost_records = 0;
  int64_t max_event_time_us = INT64_MIN;
  /// Record-count drift windows: models whose records came through more than one partition.
  int64_t models_across_partitions = 0;
  /// scaleOut: tasks this process owns, tasks restored before this batch and how long that
  /// took, and batches whose transaction was aborted (a rebalance) and computed again.
  int64_t scale_out_tasks = 0;
  int64_t restored_tasks = 0;
  int64_t restore_ms = 0;
  int64_t aborted_batches = 0;
  int64_t watermark_us = INT64_MIN;
  MalformedCounts malformed;  // cumulative since start
  int64_t malformed_in_batch = 0;
  /// Rows query.where removed in this batch (they are in num_input_rows, not malformed).
  int64_t filtered_rows = 0;
};

/// The record as JSON, shaped like Spark's StreamingQueryProgress: id, runId, name,
/// timestamp, batchId, batchDuration, numInputRows, rates, durationMs, stateOperators,
/// sources (offsets nested by topic and partition for Kafka, as startingOffsets takes them),
/// malformed and sink.
std::string RenderProgress(const PipelineSpec& spec, const ProgressRecord& progress);

}  // namespace driftd
