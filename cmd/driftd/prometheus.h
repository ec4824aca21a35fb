// Renders the daemon's metrics in the Prometheus text exposition format (version 0.0.4): one
// family per metric with # HELP and # TYPE lines, samples labelled by pipeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/executor/metrics_query.h"

namespace driftd {

/// What /metrics shows of one pipeline (a copy, taken under the supervisor's lock).
struct PipelineMetricsView {
  std::string name;
  std::string file;
  /// "starting", "running", "retrying", "failed", "finished".
  std::string state;
  bool ready = false;
  int64_t batches = 0;
  int64_t input_rows = 0;
  int64_t output_rows = 0;
  int64_t malformed_rows = 0;
  int64_t dropped_by_watermark = 0;
  int64_t filtered_rows = 0;  // removed by query.where
  int64_t alerts = 0;
  int64_t last_batch_id = -1;
  int64_t start_failures = 0;
  QueryMetricsSnapshot metrics;
};

struct ProcessMetricsView {
  std::string version;
  int64_t reloads_ok = 0;
  int64_t reloads_failed = 0;  // reloads in which at least one file was refused
  double start_time_seconds = 0;
  /// Series per pipeline whose per-detector drift gauges are shown (--metrics-max-series):
  /// those not OK first, then by their highest score. At 10,000 models, 68,000 series with
  /// an evaluation otherwise made a scrape of 1.75 million samples (200 MB).
  size_t max_drift_series = 2000;
  /// Models (and segments) per pipeline the per-model families show, the most urgent first.
  size_t max_models_shown = 500;
};

std::string RenderPrometheus(const ProcessMetricsView& process,
                             const std::vector<PipelineMetricsView>& pipelines);

/// Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown.
int64_t ProcessResidentBytes();

}  // namespace driftd
