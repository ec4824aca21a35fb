#include "cmd/driftd/status.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <httplib.h>
#include <simdjson.h>

#include "engine/drift/evaluation.h"
#include "engine/json_writer.h"
#include "engine/wall_clock.h"

namespace driftd {

const DetectorReading* WorstReading(const std::vector<DetectorReading>& readings) {
  // The order of the monitor's own choice of the detector an alert names: the reading's level,
  // then its calibrated score (one scale for every detector), then how far past its threshold.
  auto rank = [](const DetectorReading& r) {
    const double threshold = r.level == AlertLevel::kAlert ? r.alert_threshold : r.warn_threshold;
    const double ratio = threshold > 0 ? r.statistic / threshold : r.statistic;
    return std::make_tuple(static_cast<int>(r.level), r.score, std::clamp(ratio, 0.0, 1e3));
  };
  const DetectorReading* worst = nullptr;
  for (const DetectorReading& r : readings) {
    if (worst == nullptr || rank(r) > rank(*worst)) worst = &r;
  }
  return worst;
}

bool IsPerformanceSeries(std::string_view series) {
  return series.starts_with("estimated:") || series.starts_with("performance:");
}

namespace {

// A wall-clock time in milliseconds, null when unknown (0: restored from a checkpoint).
void WallTime(JsonObject& object, std::string_view key, int64_t ms) {
  if (ms <= 0) {
    object.Null(key);
  } else {
    object.Timestamp(key, ms * 1000);
  }
}

}  // namespace

std::string ReadingJson(const DetectorReading& r) {
  std::string out;
  JsonObject d(out);
  d.String("detector", r.detector);
  d.Number("statistic", r.statistic);
  d.Number("score", r.score);
  d.Number("warn", r.warn);
  d.Number("alert", r.alert);
  d.Number("warn_threshold", r.warn_threshold);
  d.Number("alert_threshold", r.alert_threshold);
  d.Number("effect", r.effect);
  d.Number("min_effect", r.min_effect);
  d.String("level", LevelLabel(r.level));
  if (r.held_from != AlertLevel::kOk) d.String("held_by_min_effect", LevelLabel(r.held_from));
  if (!r.extras.empty()) {
    std::string extras;
    JsonObject x(extras);
    for (const auto& [name, value] : r.extras) x.Number(name, value);
    x.Close();
    d.Raw("extras", extras);
  }
  d.Close();
  return out;
}

std::string DistributionJson(const Evaluation& e) {
  std::string out = "[";
  for (size_t i = 0; i < e.distribution.size(); ++i) {
    if (i > 0) out.push_back(',');
    const DistributionCell& cell = e.distribution[i];
    JsonObject o(out);
    if (e.series_kind == SeriesKind::kCategorical) {
      o.String("category", e.category(i));
    } else {
      // The first bin has no lower edge, the last no upper: null.
      if (const double lower = e.lower(i); std::isfinite(lower)) {
        o.Number("lower", lower);
      } else {
        o.Null("lower");
      }
      if (std::isfinite(cell.upper)) {
        o.Number("upper", cell.upper);
      } else {
        o.Null("upper");
      }
    }
    o.Int("baseline", cell.baseline);
    o.Int("window", cell.window);
    o.Close();
  }
  out.push_back(']');
  return out;
}

std::string IncidentJson(const IncidentSummary& i) {
  std::string out;
  JsonObject o(out);
  o.String("incidentId", i.incident_id);
  o.String("model", ModelLabel(i.model, i.segment));
  o.String("series", i.series);
  o.String("level", LevelLabel(i.level));
  o.String("openedLevel", LevelLabel(i.opened_level));
  o.String("detector", i.detector);
  o.Number("statistic", i.statistic);
  o.Number("threshold", i.threshold);
  o.TimestampOrNull("since", i.since_us);
  WallTime(o, "detectedAt", i.since_ms);
  o.Int("sinceBatch", i.since_batch);
  WallTime(o, "updatedAt", i.updated_ms);
  o.Close();
  return out;
}

std::string AlertJson(const AlertSummary& a) {
  std::string out;
  JsonObject o(out);
  o.String("alertId", a.alert_id);
  o.String("incidentId", a.incident_id);
  o.String("level", LevelLabel(a.level));
  o.String("previousLevel", LevelLabel(a.previous_level));
  o.String("model", a.model);
  if (!a.segment.empty()) o.String("segment", a.segment);
  o.String("series", a.series);
  o.String("detector", a.detector);
  o.Number("statistic", a.statistic);
  o.Number("threshold", a.threshold);
  o.Number("score", a.score);
  o.Int("batchId", a.batch_id);
  o.TimestampOrNull("windowStart", a.window_start_us);
  o.TimestampOrNull("windowEnd", a.window_end_us);
  WallTime(o, "recordedAt", a.recorded_at_ms);
  o.Close();
  return out;
}

std::string PointJson(const EvaluationPoint& p) {
  std::string out;
  JsonObject o(out);
  o.Int("batchId", p.batch_id);
  o.Int("windowEndRecord", p.window_end_record);
  o.TimestampOrNull("windowStart", p.window_start_us);
  o.TimestampOrNull("windowEnd", p.window_end_us);
  o.Int("windowN", p.window_n);
  o.Number("windowMean", p.window_mean);
  o.Int("baselineN", p.baseline_n);
  o.Number("baselineMean", p.baseline_mean);
  o.String("level", LevelLabel(p.level));
  o.Bool("evaluated", p.evaluated);
  if (const DetectorReading* worst = WorstReading(p.detectors)) o.String("worst", worst->detector);
  std::string readings = "[";
  for (size_t i = 0; i < p.detectors.size(); ++i) {
    if (i > 0) readings.push_back(',');
    readings += ReadingJson(p.detectors[i]);
  }
  readings.push_back(']');
  o.Raw("detectors", readings);
  o.Close();
  return out;
}

namespace {

// Rows of the status page's grid (models, or model segments): a page of 10,000 models made a
// 66 MB /api/status that a browser re-reads every few seconds.
constexpr size_t kMaxGridModels = 500;

std::string ReadingsJson(const std::vector<DetectorReading>& readings) {
  std::string out = "[";
  for (size_t i = 0; i < readings.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += ReadingJson(readings[i]);
  }
  out.push_back(']');
  return out;
}

std::string PipelineJson(const PipelineStatus& status) {
  const PipelineMetricsView& view = status.view;
  const QueryMetricsSnapshot& m = view.metrics;
  std::string out;
  JsonObject p(out);
  p.String("name", view.name);
  p.String("file", view.file);
  p.String("state", view.state);
  p.Bool("ready", view.ready);
  p.String("source", status.source);
  p.String("trigger", status.trigger);
  p.Int("triggerIntervalMs", status.trigger_interval_ms);
  p.Int("batches", view.batches);
  p.Int("inputRows", view.input_rows);
  p.Int("outputRows", view.output_rows);
  p.Int("malformedRows", view.malformed_rows);
  p.Int("alerts", view.alerts);
  p.Int("lastBatchId", view.last_batch_id);
  if (m.last_batch_timestamp_ms > 0) p.Timestamp("lastBatchTime", m.last_batch_timestamp_ms * 1000);
  p.Int("busyMs", status.busy_ms);
  p.Number("inputRowsPerSecond", m.input_rows_per_second);
  p.Number("processedRowsPerSecond", m.processed_rows_per_second);
  p.Int("backlogRecords", m.backlog_records);
  p.Int("backlogBytes", m.backlog_bytes);
  p.Int("stateKeys", m.state_keys);
  p.Int("stateBytes", m.state_bytes);

  std::string batches = "[";
  for (size_t i = 0; i < status.batches.size(); ++i) {
    if (i > 0) batches.push_back(',');
    const BatchPoint& b = status.batches[i];
    JsonObject o(batches);
    o.Int("batchId", b.batch_id);
    o.Int("timestampMs", b.timestamp_ms);
    o.Int("inputRows", b.input_rows);
    o.Number("inputRowsPerSecond", b.input_rows_per_second);
    o.Number("processedRowsPerSecond", b.processed_rows_per_second);
    o.Int("durationMs", b.duration_ms);
    o.Int("backlog", b.backlog);
    o.Close();
  }
  batches.push_back(']');
  p.Raw("batchHistory", batches);

  // Open incidents, by (model label, series), for the cells and the incidents table.
  std::map<std::pair<std::string, std::string>, const IncidentSummary*> incident_of;
  for (const IncidentSummary& incident : status.incidents) {
    incident_of[{ModelLabel(incident.model, incident.segment), incident.series}] = &incident;
  }

  // The grid: series in first-seen order (monitor order), then one row per model.
  std::vector<std::string> series;
  std::set<std::string> seen;
  std::map<std::string, std::vector<const PackedEvaluation*>> by_model;
  // A row per model, or per (model, segment): named "model [segment]".
  for (const auto& [key, e] : m.evaluations) by_model[key.first].push_back(&e);
  for (const DriftMonitor::ModelStats& model : m.drift_models) {
    by_model[ModelLabel(model.model, model.segment)];
  }
  for (const auto& [key, e] : m.evaluations) {
    if (seen.insert(key.second).second) series.push_back(key.second);
  }
  // Numbered series by their index, not as text ("x[10]" after "x[9]").
  std::stable_sort(series.begin(), series.end(), [](const std::string& a, const std::string& b) {
    auto split = [](const std::string& s) {
      const size_t open = s.find('[');
      if (open == std::string::npos) return std::make_pair(s, -1L);
      return std::make_pair(s.substr(0, open), std::strtol(s.c_str() + open + 1, nullptr, 10));
    };
    return split(a) < split(b);
  });
  std::string names = "[";
  for (size_t i = 0; i < series.size(); ++i) {
    if (i > 0) names.push_back(',');
    AppendJsonString(names, series[i]);
  }
  names.push_back(']');
  p.Raw("series", names);

  // The grid's rows: every model up to kMaxGridModels, else the most urgent (roll-up in
  // alert, then most series in alert, then in warn), in name order.
  std::map<std::string, const DriftMonitor::ModelStats*> stats_by_model;
  for (const DriftMonitor::ModelStats& stats : m.drift_models) {
    stats_by_model.emplace(ModelLabel(stats.model, stats.segment), &stats);
  }
  std::vector<decltype(by_model)::const_iterator> rows;
  rows.reserve(by_model.size());
  for (auto it = by_model.cbegin(); it != by_model.cend(); ++it) rows.push_back(it);
  if (rows.size() > kMaxGridModels) {
    auto urgency = [&](decltype(by_model)::const_iterator row) {
      auto stats = stats_by_model.find(row->first);
      if (stats == stats_by_model.end()) return std::make_tuple(false, int64_t{0}, int64_t{0});
      return std::make_tuple(stats->second->rollup_alert, stats->second->series_in_alert,
                             stats->second->series_in_warn);
    };
    std::stable_sort(rows.begin(), rows.end(),
                     [&](auto a, auto b) { return urgency(a) > urgency(b); });
    rows.resize(kMaxGridModels);
    std::sort(rows.begin(), rows.end(), [](auto a, auto b) { return a->first < b->first; });
  }
  p.Int("modelsTotal", static_cast<int64_t>(by_model.size()));

  std::string models = "[";
  bool first_model = true;
  for (auto row : rows) {
    const auto& [model, evaluations] = *row;
    if (!first_model) models.push_back(',');
    first_model = false;
    JsonObject o(models);
    o.String("name", model);
    if (auto found = stats_by_model.find(model); found != stats_by_model.end()) {
      const DriftMonitor::ModelStats& stats = *found->second;
      o.String("model", stats.model);
      if (!stats.segment.empty()) o.String("segment", stats.segment);
      o.Int("seriesInAlert", stats.series_in_alert);
      o.Int("seriesInWarn", stats.series_in_warn);
      o.Int("values", stats.values);
      o.Bool("rollupAlert", stats.rollup_alert);
    }
    // The model's oldest incident open now (its roll-up's included): what "since" shows.
    const IncidentSummary* oldest = nullptr;
    for (auto it = incident_of.lower_bound({model, ""});
         it != incident_of.end() && it->first.first == model; ++it) {
      const IncidentSummary& i = *it->second;
      if (oldest == nullptr || std::make_pair(i.since_ms, i.since_batch) <
                                   std::make_pair(oldest->since_ms, oldest->since_batch)) {
        oldest = &i;
      }
    }
    if (oldest != nullptr) o.Raw("incidentSince", IncidentJson(*oldest));
    std::string cells;
    JsonObject c(cells);
    for (const PackedEvaluation* packed : evaluations) {
      const SharedEvaluation e = packed->Unpack();  // the rows shown only
      std::string cell;
      JsonObject x(cell);
      x.String("level", LevelLabel(e->level));
      x.Bool("evaluated", e->evaluated);
      // The cell's worst detector, the same choice the chart opens on: its calibrated score is
      // what the cell shows (one scale for every detector), its statistic and thresholds are
      // in the detector's own units.
      if (const DetectorReading* worst = WorstReading(e->detectors)) {
        x.Raw("worst", ReadingJson(*worst));
      }
      x.Int("windowN", e->window_n);
      if (e->window_n > 0 && e->series_kind != SeriesKind::kCategorical) {
        x.Number("windowMean", e->window_mean);
      }
      x.Int("batchId", e->batch_id);
      x.TimestampOrNull("windowEnd", e->window_end_us);
      x.Raw("detectors", ReadingsJson(e->detectors));
      if (auto incident = incident_of.find({model, e->series}); incident != incident_of.end()) {
        x.Raw("incident", IncidentJson(*incident->second));
      }
      x.Close();
      c.Raw(e->series, cell);
    }
    c.Close();
    o.Raw("cells", cells);
    o.Close();
  }
  models.push_back(']');
  p.Raw("models", models);

  std::string incidents = "[";
  for (const IncidentSummary& incident : status.incidents) {
    if (incidents.size() > 1) incidents.push_back(',');
    incidents += IncidentJson(incident);
  }
  incidents.push_back(']');
  p.Raw("incidents", incidents);

  // Per model: its estimated and realized performance over its last windows.
  std::string performance = "[";
  std::map<std::string, std::map<std::string, const std::vector<EvaluationPoint>*>> by_metric;
  for (const auto& [key, points] : status.performance) {
    by_metric[key.first][key.second] = &points;
  }
  for (const auto& [model, of_model] : by_metric) {
    std::map<std::string, std::pair<const std::vector<EvaluationPoint>*,
                                    const std::vector<EvaluationPoint>*>>
        metrics;  // metric -> (estimated, realized)
    for (const auto& [name, points] : of_model) {
      const size_t colon = name.find(':');
      auto& slot = metrics[name.substr(colon + 1)];
      (name.starts_with("estimated:") ? slot.first : slot.second) = points;
    }
    for (const auto& [metric, pair] : metrics) {
      if (performance.size() > 1) performance.push_back(',');
      JsonObject o(performance);
      o.String("model", model);
      o.String("metric", metric);
      for (const auto& [key, points] : {std::make_pair("estimated", pair.first),
                                        std::make_pair("realized", pair.second)}) {
        std::string arr = "[";
        for (size_t i = 0; points != nullptr && i < points->size(); ++i) {
          if ((*points)[i].detectors.empty()) continue;
          if (arr.size() > 1) arr.push_back(',');
          arr += PointJson((*points)[i]);
        }
        arr.push_back(']');
        o.Raw(key, arr);
      }
      o.Close();
    }
  }
  performance.push_back(']');
  p.Raw("performance", performance);

  std::string alerts = "[";
  for (size_t i = status.alerts.size(); i-- > 0;) {  // newest first
    if (alerts.size() > 1) alerts.push_back(',');
    alerts += AlertJson(status.alerts[i]);
  }
  alerts.push_back(']');
  p.Raw("recentAlerts", alerts);
  p.Close();
  return out;
}

// ---- the terminal view -----------------------------------------------------------------

std::string Human(double value) {
  const double a = std::abs(value);
  if (a >= 1e9) return fmt::format("{:.1f}G", value / 1e9);
  if (a >= 1e6) return fmt::format("{:.1f}M", value / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.0f}", value);
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string Text(simdjson::dom::element e, const char* key) {
  std::string_view v;
  return e[key].get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}
int64_t Int(simdjson::dom::element e, const char* key, int64_t fallback = 0) {
  int64_t v = fallback;
  if (e[key].get(v) != simdjson::SUCCESS) return fallback;
  return v;
}
double Num(simdjson::dom::element e, const char* key) {
  double v = 0;
  if (e[key].get(v) != simdjson::SUCCESS) return 0;
  return v;
}
bool Flag(simdjson::dom::element e, const char* key) {
  bool v = false;
  return e[key].get(v) == simdjson::SUCCESS && v;
}

// "2026-12-04T19:42:49.827Z" as "2026-12-04 19:42:49Z"; "" for no time.
std::string ShortTime(const std::string& rfc3339) {
  if (rfc3339.size() < 19 || rfc3339[10] != 'T') return rfc3339;
  return fmt::format("{} {}Z", rfc3339.substr(0, 10), rfc3339.substr(11, 8));
}

std::string Color(const std::string& level, bool tty) {
  if (!tty) return "";
  if (level == "alert") return "\033[1;31m";
  if (level == "warn") return "\033[33m";
  return "\033[32m";
}

std::string FormatStatus(const std::string& json, bool tty) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json).get(root) != simdjson::SUCCESS) return "unreadable answer\n";
  const std::string reset = tty ? "\033[0m" : "";
  std::string out = fmt::format("driftd {}  ready: {}\n\n", Text(root, "version"),
                                Flag(root, "ready") ? "yes" : "no");
  out += fmt::format("{:<24} {:<10} {:>5} {:>9} {:>10} {:>10} {:>10} {:>8}\n", "PIPELINE",
                     "STATE", "READY", "BATCHES", "ROWS", "IN ROWS/S", "BACKLOG", "ALERTS");
  simdjson::dom::array pipelines;
  if (root["pipelines"].get(pipelines) != simdjson::SUCCESS) return out;
  for (simdjson::dom::element p : pipelines) {
    const int64_t backlog_records = Int(p, "backlogRecords", -1);
    const int64_t backlog_bytes = Int(p, "backlogBytes", -1);
    std::string backlog = backlog_records >= 0   ? Human(static_cast<double>(backlog_records))
                          : backlog_bytes >= 0 ? Human(static_cast<double>(backlog_bytes)) + "B"
                                               : "-";
    out += fmt::format("{:<24} {:<10} {:>5} {:>9} {:>10} {:>10} {:>10} {:>8}\n",
                       Text(p, "name"), Text(p, "state"), Flag(p, "ready") ? "yes" : "no",
                       Int(p, "batches"), Human(static_cast<double>(Int(p, "inputRows"))),
                       Human(Num(p, "inputRowsPerSecond")), backlog, Int(p, "alerts"));
  }
  for (simdjson::dom::element p : pipelines) {
    simdjson::dom::array models;
    if (p["models"].get(models) != simdjson::SUCCESS || models.size() == 0) continue;
    const int64_t total = Int(p, "modelsTotal", static_cast<int64_t>(models.size()));
    if (total > static_cast<int64_t>(models.size())) {
      out += fmt::format("\n{}: drift by model (the {} most urgent of {})\n", Text(p, "name"),
                         models.size(), total);
    } else {
      out += fmt::format("\n{}: drift by model\n", Text(p, "name"));
    }
    out += fmt::format("  {:<20} {:<6} {}\n", "MODEL", "LEVEL", "SERIES IN ALERT / WARN");
    for (simdjson::dom::element model : models) {
      simdjson::dom::object cells;
      std::vector<std::string> alerting, warning;
      if (model["cells"].get(cells) == simdjson::SUCCESS) {
        for (auto [series, cell] : cells) {
          const std::string level = Text(cell, "level");
          if (level == "alert") alerting.emplace_back(series);
          if (level == "warn") warning.emplace_back(series);
        }
      }
      const std::string level = !alerting.empty() ? "alert" : !warning.empty() ? "warn" : "ok";
      std::string detail;
      if (!alerting.empty()) detail += fmt::format("alert: {}", fmt::join(alerting, ", "));
      if (!warning.empty()) {
        detail += fmt::format("{}warn: {}", detail.empty() ? "" : "; ", fmt::join(warning, ", "));
      }
      simdjson::dom::element since;
      if (model["incidentSince"].get(since) == simdjson::SUCCESS) {
        std::string at = Text(since, "since");
        if (at.empty()) at = Text(since, "detectedAt");
        if (at.size() > 19) at = at.substr(0, 19);
        std::replace(at.begin(), at.end(), 'T', ' ');
        detail += fmt::format(" (since {} UTC)", at);
      }
      out += fmt::format("  {:<20} {}{:<6}{} {}\n", Text(model, "name"), Color(level, tty), level,
                         reset, detail);
    }
    simdjson::dom::array alerts;
    if (p["recentAlerts"].get(alerts) == simdjson::SUCCESS && alerts.size() > 0) {
      out += fmt::format("  recent alerts (newest first):\n");
      size_t shown = 0;
      for (simdjson::dom::element a : alerts) {
        if (++shown > 8) break;
        const std::string level = Text(a, "level");
        // When driftd raised it, and the end of the window it judged (event time: earlier
        // than the first while catching up).
        const std::string window_end = ShortTime(Text(a, "windowEnd"));
        out += fmt::format("    {} {}{:<8}{} {} {} {} {:.4g} (threshold {:.4g}) batch {}{}\n",
                           ShortTime(Text(a, "recordedAt")), Color(level, tty), level, reset,
                           Text(a, "segment").empty()
                               ? Text(a, "model")
                               : fmt::format("{} [{}]", Text(a, "model"), Text(a, "segment")),
                           Text(a, "series"),
                           Text(a, "detector"), Num(a, "statistic"), Num(a, "threshold"),
                           Int(a, "batchId"),
                           window_end.empty() ? "" : ", window ending " + window_end);
      }
    }
  }
  return out;
}

httplib::Client StatusClient(const HttpAddress& address) {
  std::string host = address.host.find(':') != std::string::npos ? "[" + address.host + "]"
                                                                 : address.host;
  httplib::Client client(fmt::format("http://{}:{}", host, address.port));
  client.set_connection_timeout(3, 0);
  client.set_read_timeout(5, 0);
  return client;
}

}  // namespace

std::string RenderStatusJson(std::string_view version, const std::vector<PipelineStatus>& status) {
  std::string out;
  JsonObject root(out);
  root.String("version", version);
  root.Timestamp("time", NowUs());
  bool ready = !status.empty();
  for (const PipelineStatus& s : status) ready = ready && (s.view.ready || s.view.state == "finished");
  root.Bool("ready", ready);
  std::string pipelines = "[";
  for (size_t i = 0; i < status.size(); ++i) {
    if (i > 0) pipelines.push_back(',');
    pipelines += PipelineJson(status[i]);
  }
  pipelines.push_back(']');
  root.Raw("pipelines", pipelines);
  root.Close();
  return out;
}

std::string RenderSeriesJson(const std::string& pipeline, const std::string& model,
                             const std::string& series,
                             const std::vector<EvaluationPoint>& points,
                             const Evaluation* latest) {
  std::string out;
  JsonObject root(out);
  root.String("pipeline", pipeline);
  root.String("model", model);
  root.String("series", series);
  std::string arr = "[";
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0) arr.push_back(',');
    arr += PointJson(points[i]);
  }
  arr.push_back(']');
  root.Raw("points", arr);
  if (latest != nullptr) {
    // What the latest window's histogram or categorical detectors compared, with the
    // detector the grid cell shows (the chart opens on it).
    if (const DetectorReading* worst = WorstReading(latest->detectors)) {
      root.String("worst", worst->detector);
    }
    root.String("kind", latest->series_kind == SeriesKind::kCategorical ? "categorical"
                                                                         : "numeric");
    root.TimestampOrNull("windowStart", latest->window_start_us);
    root.TimestampOrNull("windowEnd", latest->window_end_us);
    root.Raw("distribution", DistributionJson(*latest));
  }
  root.Close();
  return out;
}

int RunStatusCommand(const HttpAddress& address, double watch_seconds, bool json) {
  const bool tty = isatty(STDOUT_FILENO) == 1;
  while (true) {
    httplib::Client client = StatusClient(address);
    auto result = client.Get("/api/status");
    std::string text;
    bool ok = result && result->status == 200;
    if (!ok) {
      text = fmt::format("driftd status: no answer from http://{}:{}/api/status ({})\n",
                         address.host, address.port,
                         result ? fmt::format("HTTP {}", result->status)
                                : httplib::to_string(result.error()));
    } else {
      text = json ? result->body + "\n" : FormatStatus(result->body, tty);
    }
    if (watch_seconds <= 0) {
      (ok ? std::cout : std::cerr) << text << std::flush;
      return ok ? 0 : 1;
    }
    // Redraw in place: home, then clear to the end of the screen.
    std::cout << (tty ? "\033[H\033[2J" : "") << text << std::flush;
    std::this_thread::sleep_for(std::chrono::milliseconds(
        static_cast<int64_t>(std::max(0.2, watch_seconds) * 1000)));
  }
}

int RunHealthCommand(const HttpAddress& address, bool ready) {
  httplib::Client client = StatusClient(address);
  const char* path = ready ? "/readyz" : "/healthz";
  auto result = client.Get(path);
  if (!result) {
    std::cerr << fmt::format("driftd health: no answer from http://{}:{}{} ({})\n", address.host,
                             address.port, path, httplib::to_string(result.error()));
    return 1;
  }
  (result->status == 200 ? std::cout : std::cerr) << result->body;
  return result->status == 200 ? 0 : 1;
}

std::string CatchUpLine(const std::vector<PipelineStatus>& status) {
  std::vector<std::string> parts;
  for (const PipelineStatus& s : status) {
    const QueryMetricsSnapshot& m = s.view.metrics;
    if (s.view.state != "running") continue;
    const bool bytes = m.backlog_records < 0;
    const int64_t backlog = bytes ? m.backlog_bytes : m.backlog_records;
    // Behind: more records left than the last batch took (a replay, or a backlog after
    // downtime), or more than 64 KiB of input files.
    if (backlog <= 0 || (bytes ? backlog <= 64 * 1024 : backlog <= m.last_batch_input_rows)) {
      continue;
    }
    const double rate = m.processed_rows_per_second > 0 ? m.input_rows_per_second : 0;
    std::string left;
    if (bytes) {
      left = fmt::format("{}B of input left", Human(static_cast<double>(backlog)));
    } else {
      const double done = static_cast<double>(m.rows_done);
      const double total = done + static_cast<double>(backlog);
      left = fmt::format("{} of {} rows ({:.0f}%)", Human(done), Human(total),
                         total > 0 ? 100.0 * done / total : 0.0);
    }
    std::string eta = "?";
    if (!bytes && rate > 0) eta = Duration(static_cast<double>(backlog) / rate);
    parts.push_back(fmt::format("{}: {}, {} rows/s, {} left", s.view.name, left, Human(rate),
                                eta));
  }
  return fmt::format("{}", fmt::join(parts, " | "));
}

}  // namespace driftd
