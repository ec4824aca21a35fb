// The micro-batch executor: one query from a source through decoding, aggregation and drift
// detection to its sinks, with the exactly-once protocol of DESIGN.md:
//   plan [start, end) -> read + decode + aggregate -> commit state, offsets and outbox in one
//   RocksDB write -> deliver the outbox to each sink -> mark delivered -> progress record.
// Recovery restores state, finishes an undelivered outbox, and resumes from the last end offsets.
//
// A query is a set of tasks (engine/executor/task.h) in every mode, run by one batch loop; what
// scale-out adds (assignment by the consumer group, routing through the repartition topic, the
// changelog and the transactional commit) is behind one seam, the placement
// (engine/executor/placement.h). engine/executor/README.md draws the loop.
//
// The executor names no connector and no storage engine: it is handed factories for the
// source, the sinks and the checkpoint (QueryIo), which cmd/ wires to connectors/ and state/.
//
// Lifecycle: Create, Start (restore; after it the query is "ready"), Run (until the trigger
// ends or Stop), destruction. Run and Start on one thread; Stop from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/sink.h"
#include "engine/source.h"
#include "engine/value_decoder.h"

namespace driftd {

class QueryMetrics;  // engine/executor/metrics_query.h

/// How the executor reaches the world: the pipeline's source and sinks, and its checkpoint.
struct QueryIo {
  std::function<Result<std::unique_ptr<Source>>(const PipelineSpec&)> create_source;
  /// Every SinkSpec of the pipeline is served by exactly one returned Sink; `source` is the
  /// pipeline's (a scaled-out Kafka sink shares its group).
  std::function<Result<std::vector<std::unique_ptr<Sink>>>(const PipelineSpec&, Source& source)>
      create_sinks;
  CheckpointOpener open_checkpoint;
  /// The decoder of the source's value format (source.valueFormat). Default (empty): JSON.
  std::function<Result<std::unique_ptr<ValueDecoder>>(const PipelineSpec&)> create_decoder;
};

struct ExecutorOptions {
  /// Bytes of input read and decoded at a time; bounds memory. Default: 4 MiB.
  size_t chunk_bytes = 4 << 20;
  /// JSON describing what state depends on (config's PipelineFingerprintJson); compared with
  /// the checkpoint's at start. Empty: not checked.
  std::string fingerprint_json;
  /// The pipeline's name as the checkpoint keeps it (config's CheckpointPipelineName: secrets
  /// in it as digests). Empty: the name itself. A checkpoint holding the name in clear (written
  /// before) is still this pipeline's.
  std::string checkpoint_name;
  /// Called after every batch with its progress record (JSON), on the executor's thread.
  std::function<void(const std::string& progress_json)> on_progress;
  /// Attempts to deliver a batch before giving up with an error. Default: 10.
  int delivery_attempts = 10;
  /// fsync each commit. Default: true.
  bool sync_commits = true;
  /// Trigger continuous: how often an idle source is polled for new records, in ms. Default: 5.
  int64_t continuous_poll_ms = 5;
  /// Optional metrics fed from the executor's thread (not owned; must outlive the executor).
  /// Default: nullptr.
  QueryMetrics* metrics = nullptr;
};

/// Counters of a running query, readable from any thread (metrics, status).
struct QueryCounters {
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> input_rows{0};
  std::atomic<int64_t> output_rows{0};
  std::atomic<int64_t> malformed_rows{0};
  /// Rows removed by query.where (well-formed rows the filter rejected).
  std::atomic<int64_t> filtered_rows{0};
  std::atomic<int64_t> dropped_by_watermark{0};
  /// Rows of a windowed query whose window column was null (not aggregated).
  std::atomic<int64_t> without_event_time{0};
  std::atomic<int64_t> alerts{0};
  /// Output rows over a sink's row limit (engine/executor/output_limits.h).
  std::atomic<int64_t> rows_over_sink_limit{0};
  /// Rows of models over query.maxModels (engine/executor/model_gate.h).
  std::atomic<int64_t> rows_over_model_cap{0};
  std::atomic<int64_t> last_batch_id{-1};
};

class QueryExecutor {
 public:
  static Result<std::unique_ptr<QueryExecutor>> Create(const PipelineSpec& spec,
                                                       ExecutorOptions options, QueryIo io);
  ~QueryExecutor();
  QueryExecutor(const QueryExecutor&) = delete;
  QueryExecutor& operator=(const QueryExecutor&) = delete;

  /// Opens the checkpoint (refusing an incompatible one), restores state, opens the sinks,
  /// finishes any undelivered outbox and starts the source.
  Status Start();

  /// Runs batches as the trigger says until it ends (once, availableNow) or Stop() is called.
  /// Trigger continuous runs epochs back to back: each takes the records that have arrived,
  /// commits and delivers them like a micro-batch; an idle source is polled every
  /// continuous_poll_ms; progress is reported once per trigger interval
  /// (engine/EVENT_TIME.md says what is guaranteed).
  /// Returns an error for a failure that ends the query (malformed record under policy fail,
  /// data loss, a sink that cannot deliver).
  Status Run();

  /// Asks Run to return after the current batch (a batch being read is abandoned, nothing of
  /// it committed). Thread-safe.
  void Stop();

  /// Starts `model`'s drift baselines over (DriftStage::ResetBaselines) in the next batch,
  /// which runs even without new input and commits the change. Thread-safe.
  void RequestBaselineReset(std::string model);

  const QueryCounters& counters() const { return counters_; }
  /// The last progress record (JSON), or empty. Thread-safe.
  std::string LastProgress() const;
  /// True once Start succeeded and the source reports ready.
  bool IsReady() const;

 private:
  class Impl;
  explicit QueryExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  QueryCounters counters_;
};

}  // namespace driftd
