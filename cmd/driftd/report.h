// `driftd report`: one self-contained HTML file (styles, script and charts inline; it loads
// nothing, so it opens from disk or a mail attachment) of what drift found, per model and
// series: the baseline's and the latest window's distributions side by side, the statistic
// over the last windows against its thresholds, the incidents open and the recent alerts;
// and each model's estimated and realized performance. Made from a checkpoint (opened
// read-only, safe while a daemon writes it) or from a running daemon's /api/report.
//
// The report's data is one JSON object (RenderReportJson), which /api/report serves and the
// HTML file carries inline; the page's script draws it with the status page's charts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cmd/driftd/http_server.h"
#include "engine/executor/metrics_query.h"
#include "engine/result.h"

namespace driftd {

struct ReportSeries {
  std::string model;  // ModelLabel
  std::string series;
  /// The latest evaluation, with its distributions (null when only history points are kept).
  SharedEvaluation latest;
  /// The metrics' packed copy of it, while the most urgent series are chosen.
  PackedEvaluation packed;
  std::vector<EvaluationPoint> points;  // oldest first
};

struct ReportPipeline {
  std::string name;
  int64_t last_batch_id = -1;
  int64_t last_batch_ms = 0;
  /// Series in (model, series) order; at most kMaxReportSeries, the most urgent first chosen.
  std::vector<ReportSeries> series;
  int64_t series_total = 0;
  std::vector<AlertSummary> alerts;  // oldest first
  std::vector<IncidentSummary> incidents;
};

/// Series a report shows of one pipeline: with more, those in WARN or ALERT first, then by
/// their worst detector's score. Default: 2,000.
inline constexpr size_t kMaxReportSeries = 2'000;

/// From a running query's metrics (what its status page shows).
ReportPipeline ReportFromMetrics(const std::string& name, const QueryMetrics& metrics);

/// From a checkpoint directory, opened read-only: the latest evaluation of every series (as
/// the drift stage keeps it) and the history the status page keeps (status_history.h).
Result<ReportPipeline> ReportFromCheckpoint(const std::string& directory);

/// The report's data, one JSON object. `source` says where it came from.
std::string RenderReportJson(const std::vector<ReportPipeline>& pipelines, std::string_view source,
                             std::string_view version);

/// The HTML file for the data of RenderReportJson.
std::string RenderReportHtml(std::string_view report_json);

struct ReportCommand {
  /// One of: a checkpoint directory, or a daemon's address.
  std::string checkpoint;
  std::optional<HttpAddress> http;
  /// Only this pipeline of the daemon (all when empty).
  std::string pipeline;
  /// Where the HTML goes ("-": stdout).
  std::string output;
};

/// `driftd report`: the exit code (1 when the daemon cannot be reached, 74 for an unreadable
/// checkpoint).
int RunReportCommand(const ReportCommand& command, std::string_view version);

}  // namespace driftd
