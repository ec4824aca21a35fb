#include "engine/executor/metrics_query.h"

#include <algorithm>
#include <chrono>

#include <simdjson.h>

#include "engine/json_decoder.h"

namespace driftd {
namespace {

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int LevelValue(std::string_view level) {
  if (level == "ALERT") return 2;
  if (level == "WARN") return 1;
  return 0;
}

}  // namespace

QueryMetrics::QueryMetrics(QueryMetricsOptions options) : options_(options) {}

void QueryMetrics::LoopBusy() {
  loop_iterations_.fetch_add(1);
  // Never 0 while busy: 0 means idle.
  busy_since_ns_.store(std::max<int64_t>(SteadyNowNs(), 1));
}

void QueryMetrics::LoopIdle() { busy_since_ns_.store(0); }

int64_t QueryMetrics::BusyForMs() const {
  int64_t since = busy_since_ns_.load();
  if (since == 0) return 0;
  return std::max<int64_t>(0, (SteadyNowNs() - since) / 1'000'000);
}

void QueryMetrics::RecordBatch(const ProgressRecord& progress, const OutputRows& alerts) {
  // Alert rows are few per batch (state transitions only), so parsing them here is cheap.
  struct Parsed {
    std::string level, model, series, detector;
    double statistic = 0, threshold = 0;
  };
  std::vector<Parsed> parsed;
  parsed.reserve(alerts.rows.size());
  simdjson::dom::parser parser;
  for (const std::string& row : alerts.rows) {
    simdjson::dom::element element;
    if (parser.parse(row).get(element) != simdjson::SUCCESS) continue;
    Parsed p;
    std::string_view text;
    if (element["level"].get(text) == simdjson::SUCCESS) p.level = text;
    if (element["model"].get(text) == simdjson::SUCCESS) p.model = text;
    if (element["series"].get(text) == simdjson::SUCCESS) p.series = text;
    if (element["detector"].get(text) == simdjson::SUCCESS) p.detector = text;
    double number = 0;
    if (element["statistic"].get(number) == simdjson::SUCCESS) p.statistic = number;
    if (element["threshold"].get(number) == simdjson::SUCCESS) p.threshold = number;
    parsed.push_back(std::move(p));
  }

  double seconds = static_cast<double>(progress.trigger_execution_ms) / 1000.0;
  size_t bucket = 0;
  while (bucket < kBatchDurationBuckets.size() && seconds > kBatchDurationBuckets[bucket]) {
    ++bucket;
  }

  std::lock_guard<std::mutex> lock(mutex_);
  ++data_.duration_buckets[bucket];
  data_.duration_sum_seconds += seconds;
  ++data_.duration_count;
  for (size_t i = 0; i < kMalformedReasonCount; ++i) {
    if (progress.malformed.by_reason[i] > 0) {
      data_.malformed_by_reason[std::string(ToString(static_cast<MalformedReason>(i)))] =
          progress.malformed.by_reason[i];
    }
  }
  for (const PartitionLag& lag : progress.lag) data_.lag[lag.partition] = lag.lag();
  data_.state_keys = progress.state.keys;
  data_.state_bytes = progress.state.bytes;
  data_.state_groups = progress.num_groups;
  data_.lost_records += progress.lost_records;
  data_.last_batch_timestamp_ms = progress.timestamp_ms;
  data_.last_batch_id = progress.batch_id;
  data_.last_batch_input_rows = progress.num_input_rows;
  for (Parsed& p : parsed) {
    ++data_.alerts_by_level[p.level];
    auto& gauge = data_.drift[{std::move(p.model), std::move(p.series), std::move(p.detector)}];
    gauge.statistic = p.statistic;
    gauge.threshold = p.threshold;
    gauge.level = LevelValue(p.level);
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

std::vector<std::string> QueryMetrics::RecentProgress() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {progress_.begin(), progress_.end()};
}

}  // namespace driftd
