#include "cmd/driftd/prometheus.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <set>
#include <tuple>
#include <sstream>

#include <fmt/format.h>

#include "engine/drift/evaluation.h"

namespace driftd {
namespace {

// Label values escape backslash, double quote and newline; HELP text escapes backslash and
// newline (the exposition format's rules).
void AppendLabelValue(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void Family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }

  using Labels = std::vector<std::pair<std::string_view, std::string_view>>;

  void Sample(std::string_view name, Labels labels, double value) {
    out_ += name;
    if (labels.size() > 0) {
      out_.push_back('{');
      bool first = true;
      for (const auto& [key, label_value] : labels) {
        if (!first) out_.push_back(',');
        first = false;
        out_ += key;
        out_ += "=\"";
        AppendLabelValue(out_, label_value);
        out_.push_back('"');
      }
      out_.push_back('}');
    }
    out_.push_back(' ');
    out_ += FormatValue(value);
    out_.push_back('\n');
  }

 private:
  std::string& out_;
};

using View = PipelineMetricsView;

// A model's labels, with its segment's when drift is per segment (absent otherwise, so that
// series without segments keep their labels).
Writer::Labels WithSegment(Writer::Labels head, std::string_view segment, Writer::Labels tail) {
  if (!segment.empty()) head.emplace_back("segment", segment);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// One family whose samples are one number per pipeline.
void PerPipeline(Writer& w, const std::vector<View>& pipelines, std::string_view name,
                 std::string_view type, std::string_view help,
                 const std::function<double(const View&)>& value) {
  if (pipelines.empty()) return;
  w.Family(name, type, help);
  for (const View& p : pipelines) w.Sample(name, {{"pipeline", p.name}}, value(p));
}

}  // namespace

int64_t ProcessResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0;
  int64_t resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

namespace {

struct ProcessStats {
  double cpu_seconds = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
};

// What the Prometheus client libraries export as process_*: CPU time and virtual size from
// /proc/self/stat (fields 14, 15 and 23), descriptors from /proc/self/fd and RLIMIT_NOFILE.
ProcessStats ReadProcessStats() {
  ProcessStats stats;
  std::ifstream stat_file("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces; the fields after it start past its ')'.
  const size_t close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(text.substr(close + 2));
    std::vector<std::string> values;
    for (std::string field; fields >> field;) values.push_back(field);
    // values[0] is field 3 (state).
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    if (values.size() > 20 && ticks > 0) {
      stats.cpu_seconds = (std::strtod(values[11].c_str(), nullptr) +
                           std::strtod(values[12].c_str(), nullptr)) /
                          ticks;
      stats.virtual_bytes = std::strtod(values[20].c_str(), nullptr);
    }
  }
  if (DIR* dir = opendir("/proc/self/fd")) {
    int64_t count = 0;
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++count;
    }
    closedir(dir);
    stats.open_fds = static_cast<double>(count - 1);  // not the one reading the directory
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) stats.max_fds = static_cast<double>(limit.rlim_cur);
  return stats;
}

double LevelValue(AlertLevel level) {
  switch (level) {
    case AlertLevel::kAlert: return 2;
    case AlertLevel::kWarn: return 1;
    default: return 0;
  }
}

// The series of a pipeline whose per-detector gauges a scrape shows, in (model, series) order:
// every one when there are at most `limit`, else the `limit` most urgent (a level other than
// OK first, then the highest score of any detector, ties by model and series).
std::vector<SharedEvaluation> ShownSeries(const QueryMetricsSnapshot& m, size_t limit) {
  std::vector<SharedEvaluation> out;
  out.reserve(std::min(limit, m.evaluations.size()));
  if (m.evaluations.size() <= limit) {
    for (const auto& [key, evaluation] : m.evaluations) out.push_back(evaluation.Unpack());
    return out;
  }
  struct Candidate {
    bool ok;
    double score;
    size_t order;  // in the map's (model, series) order
    const PackedEvaluation* evaluation;
  };
  std::vector<Candidate> candidates;
  candidates.reserve(m.evaluations.size());
  for (const auto& [key, evaluation] : m.evaluations) {
    const bool ok =
        evaluation.level() == AlertLevel::kOk || evaluation.level() == AlertLevel::kResolved;
    candidates.push_back({ok, evaluation.max_score(), candidates.size(), &evaluation});
  }
  auto urgent = [](const Candidate& a, const Candidate& b) {
    if (a.ok != b.ok) return !a.ok;
    if (a.score != b.score) return a.score > b.score;
    return a.order < b.order;
  };
  std::nth_element(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(limit),
                   candidates.end(), urgent);
  candidates.resize(limit);
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.order < b.order; });
  for (const Candidate& c : candidates) out.push_back(c.evaluation->Unpack());
  return out;
}

// The models of a pipeline whose per-model families a scrape shows, in their order: every one
// when there are at most `limit`, else the `limit` most urgent (a roll-up in ALERT, then the
// most series in ALERT, then in WARN, then the most values; ties in their order).
std::vector<const DriftMonitor::ModelStats*> ShownModels(const QueryMetricsSnapshot& m,
                                                         size_t limit) {
  std::vector<const DriftMonitor::ModelStats*> out;
  for (const DriftMonitor::ModelStats& model : m.drift_models) out.push_back(&model);
  if (out.size() <= limit) return out;
  auto rank = [](const DriftMonitor::ModelStats* s) {
    return std::make_tuple(s->rollup_alert, s->series_in_alert, s->series_in_warn, s->values);
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto* a, const auto* b) {
    return rank(a) > rank(b);
  });
  out.resize(limit);
  std::sort(out.begin(), out.end());  // back in the snapshot's order (pointers into it)
  return out;
}

}  // namespace

std::string RenderPrometheus(const ProcessMetricsView& process,
                             const std::vector<PipelineMetricsView>& pipelines) {
  std::string out;
  out.reserve(4096 + pipelines.size() * 4096);
  Writer w(out);

  w.Family("driftd_build_info", "gauge", "Always 1; the version label says which build runs.");
  w.Sample("driftd_build_info", {{"version", process.version}}, 1);
  const ProcessStats stats = ReadProcessStats();
  w.Family("process_cpu_seconds_total", "counter", "Total user and system CPU time in seconds.");
  w.Sample("process_cpu_seconds_total", {}, stats.cpu_seconds);
  w.Family("process_open_fds", "gauge", "Number of open file descriptors.");
  w.Sample("process_open_fds", {}, stats.open_fds);
  w.Family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
  w.Sample("process_max_fds", {}, stats.max_fds);
  w.Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  w.Sample("process_virtual_memory_bytes", {}, stats.virtual_bytes);
  w.Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  w.Sample("process_resident_memory_bytes", {}, static_cast<double>(ProcessResidentBytes()));
  w.Family("process_start_time_seconds", "gauge",
           "Start time of the process since unix epoch in seconds.");
  w.Sample("process_start_time_seconds", {}, process.start_time_seconds);
  w.Family("driftd_reloads_total", "counter",
           "Pipeline reloads (SIGHUP) by result; failed means some file was refused.");
  w.Sample("driftd_reloads_total", {{"result", "ok"}}, static_cast<double>(process.reloads_ok));
  w.Sample("driftd_reloads_total", {{"result", "failed"}},
           static_cast<double>(process.reloads_failed));
  w.Family("driftd_pipelines", "gauge", "Pipelines the daemon runs.");
  w.Sample("driftd_pipelines", {}, static_cast<double>(pipelines.size()));

  if (!pipelines.empty()) {
    w.Family("driftd_query_state", "gauge",
             "1 for the state the pipeline's query is in (starting, running, retrying, failed, "
             "finished).");
    for (const View& p : pipelines) {
      for (std::string_view state : {"starting", "running", "retrying", "failed", "finished"}) {
        w.Sample("driftd_query_state", {{"pipeline", p.name}, {"state", state}},
                 p.state == state ? 1 : 0);
      }
    }
  }
  PerPipeline(w, pipelines, "driftd_query_ready", "gauge",
              "1 when the query restored its state and its source is ready.",
              [](const View& p) { return p.ready ? 1 : 0; });
  PerPipeline(w, pipelines, "driftd_query_start_failures_total", "counter",
              "Attempts to start the query that failed (it is retried with backoff).",
              [](const View& p) { return static_cast<double>(p.start_failures); });
  PerPipeline(w, pipelines, "driftd_batches_total", "counter", "Micro-batches committed.",
              [](const View& p) { return static_cast<double>(p.batches); });
  PerPipeline(w, pipelines, "driftd_last_batch_id", "gauge",
              "Id of the last committed batch (-1 before the first).",
              [](const View& p) { return static_cast<double>(p.last_batch_id); });
  PerPipeline(w, pipelines, "driftd_last_batch_timestamp_seconds", "gauge",
              "When the last batch finished, since the Unix epoch (0 before the first).",
              [](const View& p) {
                return static_cast<double>(p.metrics.last_batch_timestamp_ms) / 1000.0;
              });
  PerPipeline(w, pipelines, "driftd_input_rows_total", "counter", "Records read from the source.",
              [](const View& p) { return static_cast<double>(p.input_rows); });
  PerPipeline(w, pipelines, "driftd_output_rows_total", "counter",
              "Rows delivered to sinks (all sinks together).",
              [](const View& p) { return static_cast<double>(p.output_rows); });
  PerPipeline(w, pipelines, "driftd_rows_dropped_by_watermark_total", "counter",
              "Late rows dropped because their window was behind the watermark.",
              [](const View& p) { return static_cast<double>(p.dropped_by_watermark); });
  PerPipeline(w, pipelines, "driftd_rows_filtered_total", "counter",
              "Well-formed rows that query.where filtered out (not malformed).",
              [](const View& p) { return static_cast<double>(p.filtered_rows); });
  PerPipeline(w, pipelines, "driftd_source_lost_records_total", "counter",
              "Records the source could no longer deliver (failOnDataLoss=false).",
              [](const View& p) { return static_cast<double>(p.metrics.lost_records); });

  if (!pipelines.empty()) {
    w.Family("driftd_malformed_rows_total", "counter",
             "Malformed records by reason (each counted once, under its first reason).");
    for (const View& p : pipelines) {
      for (const auto& [reason, count] : p.metrics.malformed_by_reason) {
        w.Sample("driftd_malformed_rows_total", {{"pipeline", p.name}, {"reason", reason}},
                 static_cast<double>(count));
      }
    }

    w.Family("driftd_source_lag_records", "gauge",
             "Records available but not yet read after the last batch, per topic and partition "
             "(topic empty for sources other than Kafka).");
    for (const View& p : pipelines) {
      for (const LagGauge& lag : p.metrics.lag) {
        if (lag.bytes) continue;
        w.Sample("driftd_source_lag_records",
                 {{"pipeline", p.name}, {"topic", lag.topic}, {"partition", lag.partition}},
                 static_cast<double>(lag.lag));
      }
    }
    w.Family("driftd_source_lag_bytes", "gauge",
             "Bytes of input files not yet read after the last batch (file source), per file.");
    for (const View& p : pipelines) {
      for (const LagGauge& lag : p.metrics.lag) {
        if (!lag.bytes) continue;
        w.Sample("driftd_source_lag_bytes", {{"pipeline", p.name}, {"file", lag.partition}},
                 static_cast<double>(lag.lag));
      }
    }

    w.Family("driftd_batch_duration_seconds", "histogram",
             "Wall time of a batch from planning to delivery.");
    for (const View& p : pipelines) {
      int64_t cumulative = 0;
      for (size_t i = 0; i < kBatchDurationBuckets.size(); ++i) {
        cumulative += p.metrics.duration_buckets[i];
        std::string le = FormatValue(kBatchDurationBuckets[i]);
        w.Sample("driftd_batch_duration_seconds_bucket", {{"pipeline", p.name}, {"le", le}},
                 static_cast<double>(cumulative));
      }
      cumulative += p.metrics.duration_buckets.back();
      w.Sample("driftd_batch_duration_seconds_bucket", {{"pipeline", p.name}, {"le", "+Inf"}},
               static_cast<double>(cumulative));
      w.Sample("driftd_batch_duration_seconds_sum", {{"pipeline", p.name}},
               p.metrics.duration_sum_seconds);
      w.Sample("driftd_batch_duration_seconds_count", {{"pipeline", p.name}},
               static_cast<double>(p.metrics.duration_count));
    }
  }

  PerPipeline(w, pipelines, "driftd_state_keys", "gauge", "Live keys in the checkpoint's state.",
              [](const View& p) { return static_cast<double>(p.metrics.state_keys); });
  PerPipeline(w, pipelines, "driftd_state_bytes", "gauge",
              "Bytes of live state entries (keys and values).",
              [](const View& p) { return static_cast<double>(p.metrics.state_bytes); });
  PerPipeline(w, pipelines, "driftd_state_groups", "gauge", "Aggregation groups held in memory.",
              [](const View& p) { return static_cast<double>(p.metrics.state_groups); });
  PerPipeline(w, pipelines, "driftd_drift_values_over_key_cap_total", "counter",
              "Map values drift did not watch since start: their model had "
              "drift.maxKeysPerModel keys (or the pipeline drift.maxKeys).",
              [](const View& p) { return static_cast<double>(p.metrics.drift_values_over_key_cap); });
  PerPipeline(w, pipelines, "driftd_models", "gauge",
              "Models the query keeps state for (admitted under query.maxModels).",
              [](const View& p) { return static_cast<double>(p.metrics.models); });
  PerPipeline(w, pipelines, "driftd_max_models", "gauge",
              "The cap on models, query.maxModels (0: the query has no string model column).",
              [](const View& p) { return static_cast<double>(p.metrics.max_models); });
  PerPipeline(w, pipelines, "driftd_rows_over_model_cap_total", "counter",
              "Rows of models over query.maxModels since start: dropped, or kept under the "
              "model \"(other)\" (query.modelOverflow).",
              [](const View& p) { return static_cast<double>(p.metrics.rows_over_model_cap); });
  {
    w.Family("driftd_labels_total", "counter",
             "The labels' join since start, by outcome: predictions labelled and never labelled, "
             "labels without a prediction, outside the bound, late, duplicate; duplicate and "
             "late predictions; rows without a key; predictions of models over query.maxModels.");
    for (const View& p : pipelines) {
      if (!p.metrics.labels) continue;
      const JoinCounts& j = p.metrics.join;
      for (const auto& [outcome, value] :
           std::initializer_list<std::pair<const char*, int64_t>>{
               {"labelled", j.labelled},
               {"unlabelled", j.unlabelled},
               {"label_without_prediction", j.labels_without_prediction},
               {"label_outside_bound", j.labels_outside_bound},
               {"label_late", j.labels_late},
               {"duplicate_label", j.duplicate_labels},
               {"duplicate_prediction", j.duplicate_predictions},
               {"prediction_late", j.predictions_late},
               {"without_key", j.without_key},
               {"prediction_over_model_cap", j.predictions_over_model_cap},
               {"row_over_key_cap", j.rows_over_key_cap}}) {
        w.Sample("driftd_labels_total", {{"pipeline", p.name}, {"outcome", outcome}},
                 static_cast<double>(value));
      }
    }
    w.Family("driftd_labels_pending", "gauge",
             "Predictions and labels waiting in the join's state for their other half.");
    for (const View& p : pipelines) {
      if (!p.metrics.labels) continue;
      w.Sample("driftd_labels_pending", {{"pipeline", p.name}},
               static_cast<double>(p.metrics.join.pending));
    }
  }
  PerPipeline(w, pipelines, "driftd_output_rows_over_sink_limit_total", "counter",
              "Output rows over what a sink takes of one row (a Kafka topic's "
              "max.message.bytes) since start: set aside to the dead-letter stream, cut to "
              "fit.",
              [](const View& p) { return static_cast<double>(p.metrics.rows_over_sink_limit); });
  PerPipeline(w, pipelines, "driftd_drift_rows_over_segment_cap_total", "counter",
              "Rows drift did not watch since start: their model had drift.maxSegmentsPerModel "
              "segments.",
              [](const View& p) {
                return static_cast<double>(p.metrics.drift_rows_over_segment_cap);
              });

  if (!pipelines.empty()) {
    w.Family("driftd_alerts_total", "counter",
             "Alert events emitted since start, by model and level (warn, alert, resolved, "
             "ok: a warning that cleared).");
    // Per-model families cover at most max_models_shown models per pipeline, the most urgent.
    std::vector<std::vector<const DriftMonitor::ModelStats*>> shown_models;
    for (const View& p : pipelines) {
      shown_models.push_back(ShownModels(p.metrics, process.max_models_shown));
    }
    auto models_of = [&](const View& p) -> const std::vector<const DriftMonitor::ModelStats*>& {
      return shown_models[static_cast<size_t>(&p - pipelines.data())];
    };
    w.Family("driftd_drift_models", "gauge", "Models (and segments) with drift series.");
    for (const View& p : pipelines) {
      w.Sample("driftd_drift_models", {{"pipeline", p.name}},
               static_cast<double>(p.metrics.drift_models.size()));
    }
    w.Family("driftd_drift_models_shown", "gauge",
             "Models (and segments) the per-model families show (--metrics-max-models, the most "
             "urgent first).");
    for (const View& p : pipelines) {
      w.Sample("driftd_drift_models_shown", {{"pipeline", p.name}},
               static_cast<double>(models_of(p).size()));
    }
    for (const View& p : pipelines) {
      std::set<std::pair<std::string, std::string>> models;  // (model, segment)
      for (const DriftMonitor::ModelStats* m : models_of(p)) models.emplace(m->model, m->segment);
      if (p.metrics.drift_models.size() <= process.max_models_shown) {
        for (const auto& [key, count] : p.metrics.alerts_by_model) {
          models.emplace(std::get<0>(key), std::get<1>(key));
        }
      }
      for (const auto& [model, segment] : models) {
        for (AlertLevel level :
             {AlertLevel::kWarn, AlertLevel::kAlert, AlertLevel::kResolved, AlertLevel::kOk}) {
          auto it = p.metrics.alerts_by_model.find({model, segment, level});
          const int64_t count = it == p.metrics.alerts_by_model.end() ? 0 : it->second;
          w.Sample("driftd_alerts_total",
                   WithSegment({{"pipeline", p.name}, {"model", model}}, segment,
                               {{"level", LevelLabel(level)}}),
                   static_cast<double>(count));
        }
      }
    }

    // Drift gauges come from every evaluation (and are restored with the state), so each
    // series shows up at its first closed window, drifting or not; with more series than
    // max_drift_series, the most urgent of them.
    std::vector<std::vector<SharedEvaluation>> shown_series;
    for (const View& p : pipelines) {
      shown_series.push_back(ShownSeries(p.metrics, process.max_drift_series));
    }
    auto shown_of = [&](const View& p) -> const std::vector<SharedEvaluation>& {
      return shown_series[static_cast<size_t>(&p - pipelines.data())];
    };
    w.Family("driftd_drift_series", "gauge",
             "Drift series with an evaluation (restored ones included).");
    for (const View& p : pipelines) {
      w.Sample("driftd_drift_series", {{"pipeline", p.name}},
               static_cast<double>(p.metrics.evaluations.size()));
    }
    w.Family("driftd_drift_series_shown", "gauge",
             "Drift series whose per-detector gauges this scrape shows (at most "
             "--metrics-max-series: those not OK first, then by their highest score).");
    for (const View& p : pipelines) {
      w.Sample("driftd_drift_series_shown", {{"pipeline", p.name}},
               static_cast<double>(shown_of(p).size()));
    }
    w.Family("driftd_drift_statistic", "gauge",
             "The detector's statistic at the last evaluated window of the model and series.");
    for (const View& p : pipelines) {
      for (const SharedEvaluation& shown : shown_of(p)) {
        const Evaluation& e = *shown;
        for (const DetectorReading& r : e.detectors) {
          w.Sample("driftd_drift_statistic",
                   WithSegment({{"pipeline", p.name}, {"model", e.model}}, e.segment,
                               {{"series", e.series}, {"detector", r.detector}}),
                   r.statistic);
        }
      }
    }
    w.Family("driftd_drift_threshold", "gauge",
             "The statistic the detector's warn and alert levels need at the last evaluated "
             "window's sample sizes (level label).");
    for (const View& p : pipelines) {
      for (const SharedEvaluation& shown : shown_of(p)) {
        const Evaluation& e = *shown;
        for (const DetectorReading& r : e.detectors) {
          for (const auto& [level, value] :
               {std::pair<std::string_view, double>{"warn", r.warn_threshold},
                {"alert", r.alert_threshold}}) {
            w.Sample("driftd_drift_threshold",
                     WithSegment({{"pipeline", p.name}, {"model", e.model}}, e.segment,
                                 {{"series", e.series}, {"detector", r.detector}, {"level", level}}),
                     value);
          }
        }
      }
    }
    w.Family("driftd_drift_score", "gauge",
             "The detector's calibrated score at the last evaluated window: the z whose upper "
             "normal tail is its false-alarm probability (levels: warn 5, alert 5.5 by "
             "default).");
    for (const View& p : pipelines) {
      for (const SharedEvaluation& shown : shown_of(p)) {
        const Evaluation& e = *shown;
        for (const DetectorReading& r : e.detectors) {
          w.Sample("driftd_drift_score",
                   WithSegment({{"pipeline", p.name}, {"model", e.model}}, e.segment,
                               {{"series", e.series}, {"detector", r.detector}}),
                   r.score);
        }
      }
    }
    w.Family("driftd_drift_level", "gauge",
             "The level the detector's last reading indicates on its own (before hysteresis): "
             "0 ok, 1 warn, 2 alert.");
    for (const View& p : pipelines) {
      for (const SharedEvaluation& shown : shown_of(p)) {
        const Evaluation& e = *shown;
        for (const DetectorReading& r : e.detectors) {
          w.Sample("driftd_drift_level",
                   WithSegment({{"pipeline", p.name}, {"model", e.model}}, e.segment,
                               {{"series", e.series}, {"detector", r.detector}}),
                   LevelValue(r.level));
        }
      }
    }
    w.Family("driftd_drift_series_level", "gauge",
             "The series' alert state after its last evaluation (hysteresis and cooldown "
             "applied): 0 ok or resolved, 1 warn, 2 alert.");
    for (const View& p : pipelines) {
      for (const SharedEvaluation& shown : shown_of(p)) {
        const Evaluation& e = *shown;
        w.Sample("driftd_drift_series_level",
                 WithSegment({{"pipeline", p.name}, {"model", e.model}}, e.segment,
                             {{"series", e.series}}),
                 LevelValue(e.level));
      }
    }
    w.Family("driftd_drift_window_mean", "gauge",
             "Mean of the series over its last evaluated window (of a missing-value or "
             "malformed series: the share of records without a value, or malformed; none for "
             "a categorical series).");
    for (const View& p : pipelines) {
      for (const SharedEvaluation& shown : shown_of(p)) {
        const Evaluation& e = *shown;
        if (e.window_n == 0 || e.series_kind == SeriesKind::kCategorical) continue;
        w.Sample("driftd_drift_window_mean",
                 WithSegment({{"pipeline", p.name}, {"model", e.model}}, e.segment,
                             {{"series", e.series}}),
                 e.window_mean);
      }
    }
    w.Family("driftd_drift_evaluations_total", "counter",
             "Drift windows closed since start per model (evaluated, or below minSamples).");
    for (const View& p : pipelines) {
      for (const DriftMonitor::ModelStats* shown : models_of(p)) {
        const DriftMonitor::ModelStats& m = *shown;
        auto it = p.metrics.evaluations_by_model.find(ModelLabel(m.model, m.segment));
        w.Sample("driftd_drift_evaluations_total",
                 WithSegment({{"pipeline", p.name}, {"model", m.model}}, m.segment, {}),
                 static_cast<double>(it == p.metrics.evaluations_by_model.end() ? 0 : it->second));
      }
    }
    w.Family("driftd_drift_model_series", "gauge",
             "Drift series of a model by current level (ok, warn, alert), restored state "
             "included.");
    for (const View& p : pipelines) {
      for (const DriftMonitor::ModelStats* shown : models_of(p)) {
        const DriftMonitor::ModelStats& m = *shown;
        const int64_t ok = m.series - m.series_in_warn - m.series_in_alert;
        for (const auto& [level, count] : {std::pair<const char*, int64_t>{"ok", ok},
                                           {"warn", m.series_in_warn},
                                           {"alert", m.series_in_alert}}) {
          w.Sample("driftd_drift_model_series",
                   WithSegment({{"pipeline", p.name}, {"model", m.model}}, m.segment,
                               {{"level", level}}),
                   static_cast<double>(count));
        }
      }
    }
    w.Family("driftd_drift_model_alert", "gauge",
             "1 while the model's roll-up is in ALERT (drift.modelAlertSeries series alerting).");
    for (const View& p : pipelines) {
      for (const DriftMonitor::ModelStats* shown : models_of(p)) {
        const DriftMonitor::ModelStats& m = *shown;
        w.Sample("driftd_drift_model_alert",
                 WithSegment({{"pipeline", p.name}, {"model", m.model}}, m.segment, {}),
                 m.rollup_alert ? 1 : 0);
      }
    }
    w.Family("driftd_drift_model_values_total", "counter",
             "Values of a model's drift series taken in (baseline and windows).");
    for (const View& p : pipelines) {
      for (const DriftMonitor::ModelStats* shown : models_of(p)) {
        const DriftMonitor::ModelStats& m = *shown;
        w.Sample("driftd_drift_model_values_total",
                 WithSegment({{"pipeline", p.name}, {"model", m.model}}, m.segment, {}),
                 static_cast<double>(m.values));
      }
    }
  }
  return out;
}

}  // namespace driftd
