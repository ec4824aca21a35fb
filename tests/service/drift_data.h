// Deterministic inference logs with one drifting model, and a file-source pipeline that
// watches them, for the telemetry, status page and Prometheus tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/support/test_support.h"

namespace driftd::testing {

struct DriftData {
  int models = 4;
  int records_per_model = 3000;
  /// This model's prediction shifts by `shift` (in standard deviations) after `drift_after`
  /// of its records; empty: no drift.
  std::string drifting_model = "model-2";
  int drift_after = 1500;
  double shift = 3.0;
  uint64_t seed = 7;
  /// Only this model's records (the others' values are drawn all the same, so a model's
  /// values do not depend on this). Empty: every model.
  std::string only_model = "";
  /// Lines from this record index (per model) on; with `until`, before it.
  int from = 0;
  int until = -1;
};

inline std::string ModelName(int index) { return fmt::format("model-{}", index); }

/// JSON lines, models interleaved: {"model_id", "event_time", "prediction", "feature_vector"}.
/// Values are sums of uniforms (near normal, mean 0.5, stddev about 0.1).
inline std::string DriftRecords(const DriftData& data) {
  uint64_t state = data.seed * 6364136223846793005ull + 1442695040888963407ull;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  auto normalish = [&] {
    double sum = 0;
    for (int i = 0; i < 12; ++i) sum += uniform();
    return sum - 6.0;  // mean 0, stddev 1
  };
  std::string out;
  const int64_t start_ms = 1'700'000'000'000;
  for (int r = 0; r < data.records_per_model; ++r) {
    for (int m = 0; m < data.models; ++m) {
      const std::string model = ModelName(m);
      double prediction = 0.5 + 0.1 * normalish();
      const double f0 = normalish();
      const double f1 = normalish();
      if (model == data.drifting_model && r >= data.drift_after) prediction += data.shift * 0.1;
      if (!data.only_model.empty() && model != data.only_model) continue;
      if (r < data.from || (data.until >= 0 && r >= data.until)) continue;
      const int64_t t = start_ms + static_cast<int64_t>(r) * 10;
      out += fmt::format(
          "{{\"model_id\":\"{}\",\"event_time\":{},\"prediction\":{:.6f},"
          "\"feature_vector\":[{:.6f},{:.6f}]}}\n",
          model, t, prediction, f0, f1);
    }
  }
  return out;
}

/// A file-source pipeline on `input_dir` with drift on prediction (psi and mean_shift,
/// warmup 500, windows of 500), sinks for stats, alerts and evaluations under `out_dir`.
/// `extra_sinks` are more YAML sink lines ("  - {...}\n").
inline std::string DriftPipelineYaml(const std::string& name, const std::string& input_dir,
                                     const std::string& out_dir,
                                     const std::string& trigger = "{processingTime: 200 milliseconds}",
                                     const std::string& extra_sinks = "") {
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: long}}
  - {{name: prediction, type: double}}
  - {{name: feature_vector, type: array<double>}}
source:
  format: file
  options: {{path: {input}}}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
drift:
  series: [prediction, feature_vector]
  baseline: {{type: warmup, records: 500}}
  windowRecords: 500
  detectors:
    - {{type: psi}}
    - {{type: mean_shift}}
sinks:
  - {{name: stats, format: file, stream: stats, outputMode: update, options: {{path: {out}/stats}}}}
  - {{name: alerts, format: file, stream: alerts, options: {{path: {out}/alerts}}}}
  - {{name: evaluations, format: file, stream: evaluations, options: {{path: {out}/evaluations}}}}
{extra}trigger: {trigger}
checkpointLocation: {out}/checkpoint
)",
                     fmt::arg("name", name), fmt::arg("input", input_dir),
                     fmt::arg("out", out_dir), fmt::arg("trigger", trigger),
                     fmt::arg("extra", extra_sinks));
}

/// Every row a file sink wrote (its part files, in name order).
inline std::vector<std::string> FileSinkRows(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> parts;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".jsonl") {
      parts.push_back(entry.path());
    }
  }
  std::sort(parts.begin(), parts.end());
  std::vector<std::string> rows;
  for (const auto& part : parts) {
    for (std::string& line : SplitLines(ReadFile(part))) {
      if (!line.empty()) rows.push_back(std::move(line));
    }
  }
  return rows;
}

}  // namespace driftd::testing
