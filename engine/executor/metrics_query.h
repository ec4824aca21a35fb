// Per-query metrics beyond QueryCounters, for the daemon's /metrics, /progress and watchdog:
// a batch-duration histogram, malformed rows by reason, lag per partition, state size, alerts by
// level, the last drift statistic per (model, series, detector), and a heartbeat of the
// executor's loop.
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

#include "connectors/sink.h"
#include "engine/drift/monitor.h"
#include "engine/executor/progress.h"

namespace driftd {

/// Upper bounds (seconds) of the batch-duration histogram's buckets; +Inf is implicit.
inline constexpr std::array<double, 13> kBatchDurationBuckets = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

struct QueryMetricsOptions {
  /// Progress records kept for RecentProgress(). Default: 32.
  size_t progress_history = 32;
};

/// A consistent copy of a query's metrics.
struct QueryMetricsSnapshot {
  /// Count per bucket of kBatchDurationBuckets (not cumulative), then +Inf at the end.
  std::array<int64_t, kBatchDurationBuckets.size() + 1> duration_buckets{};
  double duration_sum_seconds = 0;
  int64_t duration_count = 0;
  /// Malformed rows since start, by reason name ("not_json", ...), reasons seen only.
  std::map<std::string, int64_t> malformed_by_reason;
  /// Lag per partition after the last batch.
  std::map<std::string, int64_t> lag;
  int64_t state_keys = 0;
  int64_t state_bytes = 0;
  int64_t state_groups = 0;
  int64_t lost_records = 0;
  /// Alert events emitted since start, by level ("WARN", "ALERT", "RESOLVED", ...).
  std::map<std::string, int64_t> alerts_by_level;
  struct DriftGauge {
    double statistic = 0;
    double threshold = 0;
    int level = 0;  // 0 OK / RESOLVED, 1 WARN, 2 ALERT
  };
  /// The last alert event of each (model, series, detector).
  std::map<std::tuple<std::string, std::string, std::string>, DriftGauge> drift;
  /// The drift state of each model as the monitor holds it (restored state included, so a
  /// restarted daemon shows a model still in ALERT before any new alert event).
  std::vector<DriftMonitor::ModelStats> drift_models;
  int64_t last_batch_timestamp_ms = 0;
  int64_t last_batch_id = -1;
  int64_t last_batch_input_rows = 0;
};

class QueryMetrics {
 public:
  explicit QueryMetrics(QueryMetricsOptions options = {});

  // Hooks of the executor's thread.
  /// A loop iteration (planning and running a batch) begins / ends.
  void LoopBusy();
  void LoopIdle();
  /// After every committed batch, with its progress record and alert rows.
  void RecordBatch(const ProgressRecord& progress, const OutputRows& alerts);
  /// After restoring the checkpoint and after every batch: each model's drift state.
  void RecordDriftModels(std::vector<DriftMonitor::ModelStats> models);
  /// Keeps a progress record (JSON) for RecentProgress().
  void RecordProgress(std::string json);

  // Readers, any thread.
  QueryMetricsSnapshot Snapshot() const;
  /// The last progress records, oldest first.
  std::vector<std::string> RecentProgress() const;
  /// How long the current loop iteration has been running; 0 while the loop waits or before
  /// it started. A loop stuck in one batch shows a growing value (for the watchdog).
  int64_t BusyForMs() const;
  /// Loop iterations begun so far.
  int64_t loop_iterations() const { return loop_iterations_.load(); }

 private:
  QueryMetricsOptions options_;
  std::atomic<int64_t> busy_since_ns_{0};
  std::atomic<int64_t> loop_iterations_{0};
  mutable std::mutex mutex_;
  QueryMetricsSnapshot data_;
  std::deque<std::string> progress_;
};

}  // namespace driftd
