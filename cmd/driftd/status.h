// What an operator looks at: the status page's data (/api/status, /api/series), the terminal
// view `driftd status [--watch]` built on the same data, `driftd health` (the container's and
// the probes' check), and the progress line of a replay or catch-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cmd/driftd/http_server.h"
#include "cmd/driftd/supervisor.h"

namespace driftd {

/// /api/status: every pipeline with its state, rates, recent batches, series grid (the latest
/// evaluation of each model and series) and recent alerts. One JSON object.
std::string RenderStatusJson(std::string_view version, const std::vector<PipelineStatus>& status);

/// /api/series: the last evaluations of one series, oldest first, and what its latest window
/// compared (`latest`, may be null). One JSON object.
std::string RenderSeriesJson(const std::string& pipeline, const std::string& model,
                             const std::string& series,
                             const std::vector<EvaluationPoint>& points,
                             const Evaluation* latest);

/// The reading a grid cell, the chart and the report show for an evaluation: the highest
/// level, then the highest calibrated score, then the furthest past its threshold (the order
/// the monitor picks the detector an alert names by). Null when there is none.
const DetectorReading* WorstReading(const std::vector<DetectorReading>& readings);

/// The series of the labels' performance stage: "estimated:accuracy", "performance:mae", ...
bool IsPerformanceSeries(std::string_view series);

/// Pieces of the status page's and the report's JSON.
std::string ReadingJson(const DetectorReading& reading);
std::string DistributionJson(const Evaluation& evaluation);
std::string IncidentJson(const IncidentSummary& incident);
std::string AlertJson(const AlertSummary& alert);
std::string PointJson(const EvaluationPoint& point);

/// `driftd status`: fetches /api/status from `address` and prints it as text (or the JSON);
/// with watch_seconds > 0 redraws every that many seconds until interrupted. Returns the exit
/// code (1 when the daemon cannot be reached).
int RunStatusCommand(const HttpAddress& address, double watch_seconds, bool json);

/// `driftd health`: GET /healthz (or /readyz) on `address`; exit code 0 when it answers 200,
/// 1 otherwise, with the answer's body printed.
int RunHealthCommand(const HttpAddress& address, bool ready);

/// The progress line of long work (a replay or a backlog): rows done of the backlog, rate and
/// time left, for the pipelines that are behind. Empty when none is.
std::string CatchUpLine(const std::vector<PipelineStatus>& status);

}  // namespace driftd
