// Per-query metrics beyond QueryCounters, for the daemon's /metrics, /progress, status page
// and watchdog: a batch-duration histogram, malformed rows by reason, lag per partition, state
// size, alerts by model and level, the latest evaluation of every (model, series) with a short
// history, the recent alerts, and a heartbeat of the executor's loop.
//
// Thread-safety: the executor's thread calls the Record*/Loop* hooks; any thread may call
// Snapshot(), RecentProgress() and BusyForMs() at the same time.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "engine/sink.h"
#include "engine/drift/monitor.h"
#include "engine/executor/progress.h"
#include "engine/executor/status_history.h"

namespace driftd {

/// Upper bounds (seconds) of the batch-duration histogram's buckets; +Inf is implicit.
inline constexpr std::array<double, 13> kBatchDurationBuckets = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

struct QueryMetricsOptions {
  /// Progress records kept for RecentProgress(). Default: 32.
  size_t progress_history = 32;
  /// Evaluations kept per (model, series) for SeriesHistory() (the status page's chart).
  /// Default: 60.
  size_t evaluation_history = 60;
  /// Evaluations kept in all: with more series than evaluation_history_points /
  /// evaluation_history, each keeps fewer (at least its latest), so the history's memory is
  /// bounded whatever the number of models (a point with its detectors' readings is ~750
  /// bytes: 60 of each of 130,000 series, 10,000 models, would be ~6 GB). Default: 100,000.
  size_t evaluation_history_points = 100'000;
  /// Alert events kept for RecentAlerts(). Default: 100.
  size_t alert_history = 100;
  /// Partition names are Kafka's "<topic>-<partition>" and are split into the two labels.
  /// Default: false.
  bool kafka_partitions = false;
};

/// Lag of one source partition after the last batch.
struct LagGauge {
  std::string topic;      // Kafka topic; empty for other sources
  std::string partition;  // Kafka partition number, or the source's partition name
  int64_t lag = 0;
  bool bytes = false;     // the file source counts bytes, not records
};

/// One point of a series' statistics over time.
struct EvaluationPoint {
  int64_t batch_id = -1;
  int64_t window_end_record = 0;
  int64_t window_start_us = INT64_MIN;
  int64_t window_end_us = INT64_MIN;
  int64_t window_n = 0;
  double window_mean = 0;
  int64_t baseline_n = 0;
  double baseline_mean = 0;
  AlertLevel level = AlertLevel::kOk;
  bool evaluated = false;
  std::vector<DetectorReading> detectors;
};

/// An evaluation as a point of its series' history.
EvaluationPoint PointOf(const Evaluation& evaluation);

/// One batch, as the status page charts it.
struct BatchPoint {
  int64_t batch_id = 0;
  int64_t timestamp_ms = 0;
  int64_t input_rows = 0;
  double input_rows_per_second = 0;
  double processed_rows_per_second = 0;
  int64_t duration_ms = 0;
  int64_t backlog = -1;  // records (or bytes, file source) left after the batch; -1 unknown
};

/// A consistent copy of a query's metrics.
struct QueryMetricsSnapshot {
  /// Count per bucket of kBatchDurationBuckets (not cumulative), then +Inf at the end.
  std::array<int64_t, kBatchDurationBuckets.size() + 1> duration_buckets{};
  double duration_sum_seconds = 0;
  int64_t duration_count = 0;
  /// Malformed rows since start, by reason name ("not_json", ...), reasons seen only.
  std::map<std::string, int64_t> malformed_by_reason;
  /// Lag per partition after the last batch (partitions the source no longer reports are gone).
  std::vector<LagGauge> lag;
  int64_t state_keys = 0;
  int64_t state_bytes = 0;
  int64_t state_groups = 0;
  int64_t lost_records = 0;
  /// Alert events emitted since start, by (model, segment, level).
  std::map<std::tuple<std::string, std::string, AlertLevel>, int64_t> alerts_by_model;
  /// The latest evaluation of each (model, series), from the first evaluation on and restored
  /// from the checkpoint after a restart; by (ModelLabel, series). Packed: a reader unpacks
  /// the ones it shows.
  std::map<std::pair<std::string, std::string>, PackedEvaluation> evaluations;
  /// Windows closed per model (and segment: ModelLabel) since start (evaluated or not).
  std::map<std::string, int64_t> evaluations_by_model;
  /// Drift values and rows not watched since start: map keys over drift.maxKeysPerModel (or
  /// maxKeys), segments over maxSegmentsPerModel.
  int64_t drift_values_over_key_cap = 0;
  int64_t drift_rows_over_segment_cap = 0;
  int64_t rows_over_sink_limit = 0;
  /// The cap on models: models admitted, the cap (0: none), rows over it since start.
  int64_t models = 0;
  int64_t max_models = 0;
  int64_t rows_over_model_cap = 0;
  /// The labels' join since start (pending: now).
  JoinCounts join;
  bool labels = false;
  /// The drift state of each model as the monitor holds it (restored state included, so a
  /// restarted daemon shows a model still in ALERT before any new alert event).
  std::vector<DriftMonitor::ModelStats> drift_models;
  int64_t last_batch_timestamp_ms = 0;
  int64_t last_batch_id = -1;
  int64_t last_batch_input_rows = 0;
  /// Input rows over the batches since start, and the backlog (records the source reported
  /// available but not read) after the last batch; -1 when the source reports none.
  int64_t rows_done = 0;
  int64_t backlog_records = -1;
  int64_t backlog_bytes = -1;
  /// Input rows per second over the last batches (progress records' inputRowsPerSecond).
  double input_rows_per_second = 0;
  double processed_rows_per_second = 0;
};

/// A series' last evaluations in room for about as many as it keeps (a std::deque took ~600
/// bytes a series even for one: 78 MB at 130,000 series).
class EvaluationRing {
 public:
  /// Adds `evaluation` as the newest, keeping the newest `cap` (>= 1).
  void Push(SharedEvaluation evaluation, size_t cap);
  /// Keeps the newest `cap` (>= 1).
  void Trim(size_t cap);
  size_t size() const { return items_.size(); }
  /// Oldest first.
  std::vector<SharedEvaluation> InOrder() const;

 private:
  /// Puts the oldest first.
  void Unwrap();
  std::vector<SharedEvaluation> items_;
  size_t oldest_ = 0;  // where the oldest is once the ring is full and has wrapped
};

class QueryMetrics {
 public:
  explicit QueryMetrics(QueryMetricsOptions options = {});

  // Hooks of the executor's thread.
  /// A loop iteration (planning and running a batch) begins / ends.
  void LoopBusy();
  void LoopIdle();
  /// The batch is making progress (a chunk of input was read, even an empty one while the
  /// source waits out an outage): BusyForMs() counts from here.
  void LoopProgress();
  /// After every committed batch, with its progress record.
  void RecordBatch(const ProgressRecord& progress);
  /// After a trigger that found nothing to do: the lag it measured, so that the backlog (and
  /// the "catching up" line) never outlives the input it counted.
  void RecordLag(const std::vector<PartitionLag>& lag);
  /// After every batch: its alert events and the windows it closed.
  void RecordDrift(const std::vector<AlertEvent>& events,
                   const std::vector<PackedEvaluation>& evaluations, int64_t now_ms);
  /// After restoring the checkpoint: the latest evaluation of every series.
  void RecordRestoredEvaluations(std::vector<PackedEvaluation> latest);
  /// After restoring the checkpoint (after RecordRestoredEvaluations): the alert events, open
  /// incidents and series histories it kept (engine/executor/status_history.h).
  void RecordRestoredHistory(StatusHistory history);
  /// The models the checkpoint admitted, before the first batch (ModelGate).
  void RecordRestoredModels(int64_t models, int64_t max_models);
  /// After restoring the checkpoint and after every batch: each model's drift state.
  void RecordDriftModels(std::vector<DriftMonitor::ModelStats> models);
  /// Keeps a progress record (JSON) for RecentProgress().
  void RecordProgress(std::string json);

  // Readers, any thread.
  QueryMetricsSnapshot Snapshot() const;
  /// Snapshot() with only the last batch's id, time and input rows filled in: what a status
  /// line needs, without copying every series' evaluation (130,000 at 10,000 models).
  QueryMetricsSnapshot LastBatch() const;
  /// The last progress records, oldest first.
  std::vector<std::string> RecentProgress() const;
  /// The last alert events, oldest first.
  std::vector<AlertSummary> RecentAlerts() const;
  /// The last batches (as many as progress_history), oldest first.
  std::vector<BatchPoint> RecentBatches() const;
  /// The last evaluations of (model, series), oldest first; `model` as ModelLabel names it.
  std::vector<EvaluationPoint> SeriesHistory(const std::string& model,
                                             const std::string& series) const;
  /// The latest evaluation of (model, series) with its distributions, or null.
  SharedEvaluation LatestEvaluation(const std::string& model, const std::string& series) const;
  /// The incidents open now (a series in WARN or ALERT, since when), by (ModelLabel, series).
  std::vector<IncidentSummary> OpenIncidents() const;
  /// How long the current loop iteration has been running without progress; 0 while the
  /// loop waits or before it started. A loop stuck in one batch shows a growing value (for
  /// the watchdog and /healthz).
  int64_t BusyForMs() const;
  /// Loop iterations begun so far.
  int64_t loop_iterations() const { return loop_iterations_.load(); }

 private:
  /// The lag gauges and backlog from `lag`; under mutex_.
  void SetLag(const std::vector<PartitionLag>& lag);
  /// Sets history_cap_ from the number of series (the gauges), trimming the rings when it
  /// falls; at one point a series the rings go (the gauges are those points). Under mutex_.
  void SetHistoryCap();

  QueryMetricsOptions options_;
  std::atomic<int64_t> busy_since_ns_{0};
  std::atomic<int64_t> loop_iterations_{0};
  mutable std::mutex mutex_;
  QueryMetricsSnapshot data_;
  std::deque<std::string> progress_;
  std::deque<AlertSummary> alerts_;
  IncidentBook incidents_;
  std::deque<BatchPoint> batches_;
  /// Each series' recent evaluations, while a series keeps more than one.
  std::map<std::pair<std::string, std::string>, EvaluationRing> history_;
  /// Points each series keeps now (evaluation_history, less with many series).
  size_t history_cap_ = 0;
};

}  // namespace driftd
