#include "cmd/driftd/report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <httplib.h>

#include "cmd/driftd/status.h"
#include "cmd/driftd/supervisor.h"
#include "engine/drift/evaluation.h"
#include "engine/executor/status_history.h"
#include "engine/json_writer.h"
#include "engine/wall_clock.h"
#include "state/checkpoint_store.h"

namespace {
#include "cmd/driftd/report_page.inc"
}  // namespace

namespace driftd {

namespace {

// Where the page's script finds its data (a JavaScript literal, so JSON fits as it is).
constexpr std::string_view kDataMarker = "/*DRIFTD_REPORT_DATA*/null";

// The drift stage's key of a series' latest evaluation (engine/executor/drift_stage.cc).
constexpr std::string_view kDriftNamespace = "drift";
constexpr std::string_view kEvaluationPrefix = "drift-eval/";

// Keeps at most kMaxReportSeries series: those in WARN or ALERT first, then the highest score.
void KeepMostUrgent(std::vector<ReportSeries>& series) {
  if (series.size() <= kMaxReportSeries) return;
  auto urgency = [](const ReportSeries& s) {
    AlertLevel level = AlertLevel::kOk;
    double score = 0;
    if (!s.points.empty()) level = s.points.back().level;
    // A packed latest evaluation is unpacked for this alone, one series at a time.
    const SharedEvaluation latest = s.latest ? s.latest : s.packed ? s.packed.Unpack() : nullptr;
    const std::vector<DetectorReading>* readings =
        latest ? &latest->detectors : s.points.empty() ? nullptr : &s.points.back().detectors;
    if (readings != nullptr) {
      if (const DetectorReading* worst = WorstReading(*readings)) score = worst->score;
    }
    if (latest) level = latest->level;
    const bool open = level == AlertLevel::kWarn || level == AlertLevel::kAlert;
    return std::make_tuple(open, static_cast<int>(level), score);
  };
  // Each series' urgency once, then the most urgent in their order (a stable sort).
  std::vector<std::pair<decltype(urgency(series[0])), size_t>> ranked;
  ranked.reserve(series.size());
  for (size_t i = 0; i < series.size(); ++i) ranked.emplace_back(urgency(series[i]), i);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<ReportSeries> kept;
  kept.reserve(kMaxReportSeries);
  for (size_t i = 0; i < kMaxReportSeries; ++i) kept.push_back(std::move(series[ranked[i].second]));
  series = std::move(kept);
  std::sort(series.begin(), series.end(), [](const ReportSeries& a, const ReportSeries& b) {
    return std::tie(a.model, a.series) < std::tie(b.model, b.series);
  });
}

std::string SeriesJson(const ReportSeries& s) {
  std::string out;
  JsonObject o(out);
  o.String("model", s.model);
  o.String("series", s.series);
  const EvaluationPoint* last = s.points.empty() ? nullptr : &s.points.back();
  if (s.latest) {
    const Evaluation& e = *s.latest;
    o.String("kind", e.series_kind == SeriesKind::kCategorical ? "categorical" : "numeric");
    o.String("level", LevelLabel(e.level));
    if (const DetectorReading* worst = WorstReading(e.detectors)) {
      o.Raw("worst", ReadingJson(*worst));
    }
    o.TimestampOrNull("windowStart", e.window_start_us);
    o.TimestampOrNull("windowEnd", e.window_end_us);
    o.Int("windowN", e.window_n);
    o.Int("baselineN", e.baseline_n);
    if (e.series_kind != SeriesKind::kCategorical) {
      o.Number("windowMean", e.window_mean);
      o.Number("windowStddev", e.window_stddev);
      o.Number("baselineMean", e.baseline_mean);
      o.Number("baselineStddev", e.baseline_stddev);
    }
    o.Raw("distribution", DistributionJson(e));
  } else if (last != nullptr) {
    o.String("level", LevelLabel(last->level));
    if (const DetectorReading* worst = WorstReading(last->detectors)) {
      o.Raw("worst", ReadingJson(*worst));
    }
    o.TimestampOrNull("windowEnd", last->window_end_us);
    o.Raw("distribution", "[]");
  }
  std::string points = "[";
  for (const EvaluationPoint& p : s.points) {
    if (points.size() > 1) points.push_back(',');
    points += PointJson(p);
  }
  points.push_back(']');
  o.Raw("points", points);
  o.Close();
  return out;
}

httplib::Client ReportClient(const HttpAddress& address) {
  std::string host = address.host.find(':') != std::string::npos ? "[" + address.host + "]"
                                                                 : address.host;
  httplib::Client client(fmt::format("http://{}:{}", host, address.port));
  client.set_connection_timeout(3, 0);
  client.set_read_timeout(60, 0);
  return client;
}

// Writes `content` to `path` whole or not at all (a temporary file renamed over it).
Status WriteWhole(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << content;
    out.flush();
    if (!out) return MakeError(ErrorCode::kIo, "cannot write {}", temporary);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    return MakeError(ErrorCode::kIo, "cannot write {}", path);
  }
  return Ok();
}

}  // namespace

ReportPipeline ReportFromMetrics(const std::string& name, const QueryMetrics& metrics) {
  ReportPipeline report;
  report.name = name;
  const QueryMetricsSnapshot snapshot = metrics.Snapshot();
  report.last_batch_id = snapshot.last_batch_id;
  report.last_batch_ms = snapshot.last_batch_timestamp_ms;
  for (const auto& [key, latest] : snapshot.evaluations) {
    ReportSeries& s = report.series.emplace_back();
    s.model = key.first;
    s.series = key.second;
    s.packed = latest;
  }
  report.series_total = static_cast<int64_t>(report.series.size());
  KeepMostUrgent(report.series);
  for (ReportSeries& s : report.series) {
    if (s.packed) s.latest = s.packed.Unpack();
    s.packed = PackedEvaluation();
  }
  for (ReportSeries& s : report.series) s.points = metrics.SeriesHistory(s.model, s.series);
  report.alerts = metrics.RecentAlerts();
  report.incidents = metrics.OpenIncidents();
  return report;
}

Result<ReportPipeline> ReportFromCheckpoint(const std::string& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return MakeError(ErrorCode::kInvalidArgument, "no checkpoint directory '{}'", directory);
  }
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(directory, options);
  if (!store) return tl::unexpected(store.error());
  ReportPipeline report;
  auto metadata = (*store)->ReadMetadata();
  if (!metadata) return tl::unexpected(metadata.error());
  report.name = *metadata ? (*metadata)->pipeline_name : directory;
  auto last = (*store)->LastCommit();
  if (!last) return tl::unexpected(last.error());
  if (*last) {
    report.last_batch_id = (*last)->batch_id;
    report.last_batch_ms = (*last)->committed_at_ms;
  }
  StatusHistory history;
  std::map<std::pair<std::string, std::string>, SharedEvaluation> latest;
  Status status = Ok();
  DRIFTD_TRY((*store)->ScanState([&](std::string_view encoded, std::string_view value) {
    if (!status) return;
    StateKeyView key;
    if (!DecodeStateKey(encoded, key)) return;
    if (key.ns == kDriftNamespace && key.key.starts_with(kEvaluationPrefix)) {
      auto evaluation = DecodeEvaluation(value);
      if (!evaluation) {
        status = tl::unexpected(evaluation.error().Wrap(std::string(key.key)));
        return;
      }
      std::pair<std::string, std::string> series(
          ModelLabel(evaluation->model, evaluation->segment), evaluation->series);
      latest[std::move(series)] = std::make_shared<const Evaluation>(std::move(*evaluation));
    } else if (key.ns == HistoryStage::kNamespace) {
      status = ReadHistoryEntry(key.key, value, history);
    }
  }));
  DRIFTD_TRY(status);
  std::map<std::pair<std::string, std::string>, ReportSeries> series;
  for (auto& [key, evaluation] : latest) {
    ReportSeries& s = series[key];
    s.model = key.first;
    s.series = key.second;
    s.latest = evaluation;
  }
  for (auto& [key, points] : history.points) {
    ReportSeries& s = series[key];
    s.model = key.first;
    s.series = key.second;
    for (const SharedEvaluation& point : points) s.points.push_back(PointOf(*point));
  }
  for (auto& [key, s] : series) {
    // A series whose history the checkpoint does not keep (many series) shows its latest.
    if (s.points.empty() && s.latest) s.points.push_back(PointOf(*s.latest));
    report.series.push_back(std::move(s));
  }
  report.series_total = static_cast<int64_t>(report.series.size());
  KeepMostUrgent(report.series);
  // The checkpoint's entries keep no wall clock; the commit log (its last 100 batches) says
  // when the batches that raised them committed.
  auto commits = (*store)->RecentCommits(100);
  if (!commits) return tl::unexpected(commits.error());
  std::map<int64_t, int64_t> committed_at;
  for (const CommitRecord& commit : *commits) {
    committed_at[commit.batch_id] = commit.committed_at_ms;
  }
  auto when = [&](int64_t batch_id) {
    auto it = committed_at.find(batch_id);
    return it == committed_at.end() ? int64_t{0} : it->second;
  };
  for (AlertSummary& alert : history.alerts) {
    if (alert.recorded_at_ms == 0) alert.recorded_at_ms = when(alert.batch_id);
  }
  for (IncidentSummary& incident : history.incidents) {
    if (incident.since_ms == 0) incident.since_ms = when(incident.since_batch);
  }
  report.alerts = std::move(history.alerts);
  report.incidents = std::move(history.incidents);
  return report;
}

std::string RenderReportJson(const std::vector<ReportPipeline>& pipelines, std::string_view source,
                             std::string_view version) {
  std::string out;
  JsonObject root(out);
  root.String("version", version);
  root.String("source", source);
  root.Timestamp("generatedAt", NowUs());
  std::string array = "[";
  for (const ReportPipeline& p : pipelines) {
    if (array.size() > 1) array.push_back(',');
    JsonObject o(array);
    o.String("name", p.name);
    o.Int("lastBatchId", p.last_batch_id);
    if (p.last_batch_ms > 0) {
      o.Timestamp("lastBatchTime", p.last_batch_ms * 1000);
    } else {
      o.Null("lastBatchTime");
    }
    o.Int("seriesTotal", p.series_total);
    std::string series = "[";
    for (const ReportSeries& s : p.series) {
      if (series.size() > 1) series.push_back(',');
      series += SeriesJson(s);
    }
    series.push_back(']');
    o.Raw("series", series);
    std::string incidents = "[";
    for (const IncidentSummary& i : p.incidents) {
      if (incidents.size() > 1) incidents.push_back(',');
      incidents += IncidentJson(i);
    }
    incidents.push_back(']');
    o.Raw("incidents", incidents);
    std::string alerts = "[";
    for (size_t i = p.alerts.size(); i-- > 0;) {  // newest first
      if (alerts.size() > 1) alerts.push_back(',');
      alerts += AlertJson(p.alerts[i]);
    }
    alerts.push_back(']');
    o.Raw("alerts", alerts);
    o.Close();
  }
  array.push_back(']');
  root.Raw("pipelines", array);
  root.Close();
  return out;
}

std::string RenderReportHtml(std::string_view report_json) {
  std::string page(kReportPageHtml);
  // '<' only occurs inside the JSON's strings, where \u003c reads the same: no "</script>"
  // in a model's name can end the script early.
  std::string data;
  data.reserve(report_json.size());
  for (char c : report_json) {
    if (c == '<') {
      data += "\\u003c";
    } else {
      data.push_back(c);
    }
  }
  const size_t at = page.find(kDataMarker);
  if (at != std::string::npos) page.replace(at, kDataMarker.size(), data);
  return page;
}

int RunReportCommand(const ReportCommand& command, std::string_view version) {
  std::string json;
  if (!command.checkpoint.empty()) {
    auto report = ReportFromCheckpoint(command.checkpoint);
    if (!report) {
      std::cerr << "driftd report: " << report.error().message() << "\n";
      return report.error().code() == ErrorCode::kInvalidArgument ? kExitUsage
                                                                  : ExitCodeFor(report.error());
    }
    json = RenderReportJson({*report}, "checkpoint " + command.checkpoint, version);
  } else {
    httplib::Client client = ReportClient(*command.http);
    std::string path = "/api/report";
    if (!command.pipeline.empty()) {
      path += "?pipeline=" + httplib::detail::encode_query_param(command.pipeline);
    }
    auto result = client.Get(path);
    if (!result || result->status != 200) {
      std::cerr << fmt::format("driftd report: no answer from http://{}:{}{} ({})\n",
                               command.http->host, command.http->port, path,
                               result ? fmt::format("HTTP {}: {}", result->status, result->body)
                                      : httplib::to_string(result.error()));
      return kExitFailure;
    }
    json = std::move(result->body);
  }
  const std::string html = RenderReportHtml(json);
  if (command.output == "-") {
    std::cout << html;
    return kExitOk;
  }
  if (Status written = WriteWhole(command.output, html); !written) {
    std::cerr << "driftd report: " << written.error().message() << "\n";
    return kExitIoError;
  }
  std::cerr << fmt::format("driftd report: wrote {} ({} KiB)\n", command.output,
                           (html.size() + 1023) / 1024);
  return kExitOk;
}

}  // namespace driftd
