#include "engine/executor/metrics_query.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace driftd {
namespace {

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "inference-logs-3" -> ("inference-logs", "3"); names without a numeric suffix stay whole.
LagGauge GaugeOf(const PartitionLag& lag, bool kafka) {
  LagGauge gauge;
  gauge.partition = lag.partition;
  gauge.lag = lag.lag();
  gauge.bytes = lag.bytes;
  if (kafka) {
    const size_t dash = lag.partition.rfind('-');
    if (dash != std::string::npos && dash > 0 && dash + 1 < lag.partition.size() &&
        lag.partition.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
      gauge.topic = lag.partition.substr(0, dash);
      gauge.partition = lag.partition.substr(dash + 1);
    }
  }
  return gauge;
}

}  // namespace

void EvaluationRing::Unwrap() {
  std::rotate(items_.begin(), items_.begin() + static_cast<ptrdiff_t>(oldest_), items_.end());
  oldest_ = 0;
}

void EvaluationRing::Push(SharedEvaluation evaluation, size_t cap) {
  cap = std::max<size_t>(cap, 1);
  if (items_.size() > cap) Trim(cap);
  if (items_.size() < cap) {
    Unwrap();
    items_.push_back(std::move(evaluation));
    return;
  }
  items_[oldest_] = std::move(evaluation);
  oldest_ = (oldest_ + 1) % items_.size();
}

void EvaluationRing::Trim(size_t cap) {
  cap = std::max<size_t>(cap, 1);
  if (items_.size() <= cap) return;
  Unwrap();
  items_.erase(items_.begin(), items_.end() - static_cast<ptrdiff_t>(cap));
  items_.shrink_to_fit();
}

std::vector<SharedEvaluation> EvaluationRing::InOrder() const {
  std::vector<SharedEvaluation> out;
  out.reserve(items_.size());
  out.insert(out.end(), items_.begin() + static_cast<ptrdiff_t>(oldest_), items_.end());
  out.insert(out.end(), items_.begin(), items_.begin() + static_cast<ptrdiff_t>(oldest_));
  return out;
}

QueryMetrics::QueryMetrics(QueryMetricsOptions options) : options_(options) {}

void QueryMetrics::LoopBusy() {
  loop_iterations_.fetch_add(1);
  // Never 0 while busy: 0 means idle.
  busy_since_ns_.store(std::max<int64_t>(SteadyNowNs(), 1));
}

void QueryMetrics::LoopIdle() { busy_since_ns_.store(0); }

void QueryMetrics::LoopProgress() {
  if (busy_since_ns_.load() != 0) busy_since_ns_.store(std::max<int64_t>(SteadyNowNs(), 1));
}

int64_t QueryMetrics::BusyForMs() const {
  int64_t since = busy_since_ns_.load();
  if (since == 0) return 0;
  return std::max<int64_t>(0, (SteadyNowNs() - since) / 1'000'000);
}

void QueryMetrics::SetLag(const std::vector<PartitionLag>& lag) {
  data_.lag.clear();
  data_.lag.reserve(lag.size());
  data_.backlog_records = -1;
  data_.backlog_bytes = -1;
  for (const PartitionLag& partition : lag) {
    data_.lag.push_back(GaugeOf(partition, options_.kafka_partitions));
    int64_t& total = partition.bytes ? data_.backlog_bytes : data_.backlog_records;
    total = std::max<int64_t>(total, 0) + partition.lag();
  }
}

void QueryMetrics::RecordLag(const std::vector<PartitionLag>& lag) {
  std::lock_guard<std::mutex> lock(mutex_);
  SetLag(lag);
}

void QueryMetrics::RecordBatch(const ProgressRecord& progress) {
  double seconds = static_cast<double>(progress.trigger_execution_ms) / 1000.0;
  size_t bucket = 0;
  while (bucket < kBatchDurationBuckets.size() && seconds > kBatchDurationBuckets[bucket]) {
    ++bucket;
  }

  std::lock_guard<std::mutex> lock(mutex_);
  SetLag(progress.lag);
  ++data_.duration_buckets[bucket];
  data_.duration_sum_seconds += seconds;
  ++data_.duration_count;
  for (size_t i = 0; i < kMalformedReasonCount; ++i) {
    if (progress.malformed.by_reason[i] > 0) {
      data_.malformed_by_reason[std::string(ToString(static_cast<MalformedReason>(i)))] =
          progress.malformed.by_reason[i];
    }
  }
  data_.rows_done += progress.num_input_rows;
  data_.input_rows_per_second = progress.input_rows_per_second;
  data_.processed_rows_per_second = progress.processed_rows_per_second;
  data_.state_keys = progress.state.keys;
  data_.state_bytes = progress.state.bytes;
  data_.state_groups = progress.num_groups;
  data_.lost_records += progress.lost_records;
  data_.drift_values_over_key_cap += progress.drift_values_over_key_cap;
  data_.drift_rows_over_segment_cap += progress.drift_rows_over_segment_cap;
  data_.rows_over_sink_limit += progress.rows_over_sink_limit;
  data_.rows_over_model_cap += progress.rows_over_model_cap;
  data_.labels = data_.labels || progress.labels;
  data_.join.Add(progress.join);
  data_.join.pending = progress.join.pending;
  data_.models = progress.models;
  data_.max_models = progress.max_models;
  data_.last_batch_timestamp_ms = progress.timestamp_ms;
  data_.last_batch_id = progress.batch_id;
  data_.last_batch_input_rows = progress.num_input_rows;
  BatchPoint point;
  point.batch_id = progress.batch_id;
  point.timestamp_ms = progress.timestamp_ms;
  point.input_rows = progress.num_input_rows;
  point.input_rows_per_second = progress.input_rows_per_second;
  point.processed_rows_per_second = progress.processed_rows_per_second;
  point.duration_ms = progress.trigger_execution_ms;
  point.backlog = data_.backlog_records >= 0 ? data_.backlog_records : data_.backlog_bytes;
  batches_.push_back(point);
  while (batches_.size() > std::max<size_t>(options_.progress_history, 2)) batches_.pop_front();
}

void QueryMetrics::RecordDrift(const std::vector<AlertEvent>& events,
                               const std::vector<PackedEvaluation>& evaluations, int64_t now_ms) {
  if (events.empty() && evaluations.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const AlertEvent& event : events) {
    ++data_.alerts_by_model[{event.model, event.segment, event.level}];
    const AlertSummary& summary = alerts_.emplace_back(SummarizeAlert(event, now_ms));
    incidents_.Apply(summary);
    while (alerts_.size() > options_.alert_history) alerts_.pop_front();
  }
  for (const PackedEvaluation& packed : evaluations) {
    const std::string label = ModelLabel(packed.model(), packed.segment());
    ++data_.evaluations_by_model[label];
    auto key = std::make_pair(label, std::string(packed.series()));
    auto [at, added] = data_.evaluations.try_emplace(key);
    if (added || history_cap_ == 0) SetHistoryCap();
    if (history_cap_ > 1) {
      // Older points are drawn as a line: only the latest (the gauge's) keeps what it
      // compared, so the history's memory stays what its cap says.
      auto point = std::make_shared<Evaluation>(*packed.Unpack());
      point->distribution = {};
      point->categories = {};
      history_.try_emplace(std::move(key)).first->second.Push(std::move(point), history_cap_);
    }
    // A window below minSamples has no readings: the gauges keep the last real ones, with
    // this window's level.
    PackedEvaluation& gauge = at->second;
    if (!packed.evaluated() && gauge) {
      if (gauge.level() != packed.level()) {
        Evaluation relevelled = *gauge.Unpack();
        relevelled.level = packed.level();
        gauge = PackedEvaluation(relevelled);
      }
      continue;
    }
    gauge = packed;
  }
}

void QueryMetrics::SetHistoryCap() {
  const size_t cap = std::clamp<size_t>(
      options_.evaluation_history_points / std::max<size_t>(data_.evaluations.size(), 1), 1,
      std::max<size_t>(options_.evaluation_history, 1));
  if (history_cap_ != 0 && cap >= history_cap_) return;
  history_cap_ = cap;
  if (cap <= 1) {
    // One point a series: the gauge is that point; a ring beside it would only repeat it.
    history_.clear();
    return;
  }
  for (auto& [series, points] : history_) points.Trim(cap);
}

void QueryMetrics::RecordRestoredModels(int64_t models, int64_t max_models) {
  std::lock_guard<std::mutex> lock(mutex_);
  data_.models = models;
  data_.max_models = max_models;
}

void QueryMetrics::RecordRestoredEvaluations(std::vector<PackedEvaluation> latest) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (PackedEvaluation& evaluation : latest) {
    auto key = std::make_pair(ModelLabel(evaluation.model(), evaluation.segment()),
                              std::string(evaluation.series()));
    data_.evaluations[std::move(key)] = std::move(evaluation);
  }
}

void QueryMetrics::RecordRestoredHistory(StatusHistory history) {
  std::lock_guard<std::mutex> lock(mutex_);
  // What the checkpoint kept replaces what these metrics hold of it: a query restarted after a
  // failure (the supervisor keeps its metrics) shows each alert once. A checkpoint written
  // before the history was kept has none, and replaces nothing.
  if (!history.alerts.empty() || !history.incidents.empty()) {
    alerts_.clear();
    incidents_ = IncidentBook();
  }
  for (AlertSummary& alert : history.alerts) {
    alerts_.push_back(std::move(alert));
    while (alerts_.size() > options_.alert_history) alerts_.pop_front();
  }
  for (IncidentSummary& incident : history.incidents) incidents_.Put(std::move(incident));
  for (auto& [key, points] : history.points) {
    if (points.empty()) continue;
    // A series only the history keeps (the performance stage's) shows its last point.
    auto [at, added] = data_.evaluations.try_emplace(key, PackedEvaluation(*points.back()));
    if (added || history_cap_ == 0) SetHistoryCap();
    if (history_cap_ <= 1) continue;
    EvaluationRing& ring = history_[key];
    ring = EvaluationRing();
    for (SharedEvaluation& point : points) ring.Push(std::move(point), history_cap_);
  }
}

void QueryMetrics::RecordDriftModels(std::vector<DriftMonitor::ModelStats> models) {
  std::lock_guard<std::mutex> lock(mutex_);
  data_.drift_models = std::move(models);
}

void QueryMetrics::RecordProgress(std::string json) {
  std::lock_guard<std::mutex> lock(mutex_);
  progress_.push_back(std::move(json));
  while (progress_.size() > options_.progress_history) progress_.pop_front();
}

QueryMetricsSnapshot QueryMetrics::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return data_;
}

QueryMetricsSnapshot QueryMetrics::LastBatch() const {
  QueryMetricsSnapshot last;
  std::lock_guard<std::mutex> lock(mutex_);
  last.last_batch_id = data_.last_batch_id;
  last.last_batch_timestamp_ms = data_.last_batch_timestamp_ms;
  last.last_batch_input_rows = data_.last_batch_input_rows;
  return last;
}

std::vector<std::string> QueryMetrics::RecentProgress() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {progress_.begin(), progress_.end()};
}

std::vector<AlertSummary> QueryMetrics::RecentAlerts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {alerts_.begin(), alerts_.end()};
}

std::vector<BatchPoint> QueryMetrics::RecentBatches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {batches_.begin(), batches_.end()};
}

std::vector<EvaluationPoint> QueryMetrics::SeriesHistory(const std::string& model,
                                                         const std::string& series) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = history_.find({model, series});
  if (it == history_.end()) {
    // With one point a series, that point is the gauge's.
    auto gauge = data_.evaluations.find({model, series});
    if (history_cap_ > 1 || gauge == data_.evaluations.end() || !gauge->second) return {};
    return {PointOf(*gauge->second.Unpack())};
  }
  std::vector<EvaluationPoint> points;
  points.reserve(it->second.size());
  for (const SharedEvaluation& evaluation : it->second.InOrder()) {
    points.push_back(PointOf(*evaluation));
  }
  return points;
}

EvaluationPoint PointOf(const Evaluation& evaluation) {
  EvaluationPoint point;
  point.batch_id = evaluation.batch_id;
  point.window_end_record = evaluation.window_end_record;
  point.window_start_us = evaluation.window_start_us;
  point.window_end_us = evaluation.window_end_us;
  point.window_n = evaluation.window_n;
  point.window_mean = evaluation.window_mean;
  point.baseline_n = evaluation.baseline_n;
  point.baseline_mean = evaluation.baseline_mean;
  point.level = evaluation.level;
  point.evaluated = evaluation.evaluated;
  point.detectors = evaluation.detectors;
  return point;
}

SharedEvaluation QueryMetrics::LatestEvaluation(const std::string& model,
                                                const std::string& series) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = data_.evaluations.find({model, series});
  return it == data_.evaluations.end() || !it->second ? nullptr : it->second.Unpack();
}

std::vector<IncidentSummary> QueryMetrics::OpenIncidents() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<IncidentSummary> out;
  out.reserve(incidents_.open().size());
  for (const auto& [key, incident] : incidents_.open()) out.push_back(incident);
  return out;
}

}  // namespace driftd
