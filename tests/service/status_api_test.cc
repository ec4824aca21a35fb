// The data behind the status page and `driftd report`, as a running daemon serves it: one
// choice of "worst" detector (its calibrated score in the cell, its thresholds in the
// statistic's units in the series' history), the incident since the window that opened it,
// the latest window's distribution beside the baseline's, and all of it after a restart.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include "tests/service/drift_data.h"
#include "tests/service/service_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

struct Daemon {
  std::string dir;
  int port = 0;
  std::optional<ChildProcess> process;
  void Start(const std::string& log) {
    process.emplace(ChildProcess::Start({DriftdBinary(), "run", dir + "/p.yaml", "--http",
                                         "127.0.0.1:" + std::to_string(port), "--quiet-progress"},
                                        dir + "/" + log));
    REQUIRE(WaitFor([&] { return HttpGet(port, "/readyz").status == 200; }, 60s));
  }
  void Stop() {
    process->Signal(SIGTERM);
    auto status = process->Wait(30s);
    REQUIRE((status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
    process.reset();
  }
};

// What /api/status and /api/series say of model-2's prediction, the drifting series.
struct Seen {
  std::string cell_worst;
  double cell_score = 0;
  double cell_alert_threshold = 0;
  std::string incident_since;
  std::string series_worst;
  double series_alert_threshold = 0;
  size_t points = 0;
  int64_t distribution_baseline = 0;
  int64_t distribution_window = 0;
  int64_t baseline_n = 0;
  int64_t window_n = 0;
  size_t alerts = 0;
};

Seen Look(int port) {
  Seen seen;
  simdjson::dom::parser parser;
  const std::string status_body = HttpGet(port, "/api/status").body;
  simdjson::dom::element pipeline = parser.parse(status_body)["pipelines"].at(0);
  for (simdjson::dom::element model : pipeline["models"].get_array()) {
    if (std::string_view(model["name"]) != "model-2") continue;
    simdjson::dom::element cell = model["cells"]["prediction"];
    seen.cell_worst = std::string(std::string_view(cell["worst"]["detector"]));
    seen.cell_score = double(cell["worst"]["score"]);
    seen.cell_alert_threshold = double(cell["worst"]["alert_threshold"]);
    seen.incident_since = std::string(std::string_view(cell["incident"]["since"]));
    seen.window_n = int64_t(cell["windowN"]);
  }
  seen.alerts = pipeline["recentAlerts"].get_array().size();

  simdjson::dom::parser series_parser;
  const std::string series_body =
      HttpGet(port, "/api/series?pipeline=ops&model=model-2&series=prediction").body;
  simdjson::dom::element series = series_parser.parse(series_body);
  seen.series_worst = std::string(std::string_view(series["worst"]));
  for (simdjson::dom::element point : series["points"].get_array()) {
    if (!bool(point["evaluated"])) continue;
    ++seen.points;
    seen.baseline_n = int64_t(point["baselineN"]);
    for (simdjson::dom::element d : point["detectors"].get_array()) {
      if (std::string_view(d["detector"]) == seen.series_worst) {
        seen.series_alert_threshold = double(d["alert_threshold"]);
      }
    }
  }
  for (simdjson::dom::element cell : series["distribution"].get_array()) {
    seen.distribution_baseline += int64_t(cell["baseline"]);
    seen.distribution_window += int64_t(cell["window"]);
  }
  return seen;
}

TEST_CASE("the status data names one worst detector, its thresholds in the statistic's units, "
          "the incident since its window and the distributions, and keeps them over a restart",
          "[service][http][drift][e2e]") {
  TempDir tmp("driftd-status-api");
  Daemon daemon;
  daemon.dir = tmp.path().string();
  WriteFileAt(tmp / "input/logs.jsonl", DriftRecords({.records_per_model = 3000}));
  WriteFileAt(tmp / "p.yaml", DriftPipelineYaml("ops", tmp / "input", tmp / "out"));
  daemon.port = FreePort();
  daemon.Start("log.txt");
  INFO(ReadFile(tmp / "log.txt"));
  REQUIRE(WaitFor(
      [&] {
        return ParsePrometheus(HttpGet(daemon.port, "/metrics").body)
                   .Value("driftd_drift_evaluations_total",
                          {{"pipeline", "ops"}, {"model", "model-2"}})
                   .value_or(0) >= 15;
      },
      90s));

  // The alert the sink got, and the window that raised it.
  simdjson::dom::parser parser;
  std::string opened_at;
  for (const std::string& row : FileSinkRows(tmp / "out/alerts")) {
    simdjson::dom::element e = parser.parse(row);
    if (std::string_view(e["model"]) != "model-2") continue;
    opened_at = std::string(std::string_view(e["window"]["end_time"]));
  }
  REQUIRE(!opened_at.empty());

  const Seen seen = Look(daemon.port);
  // One worst: the cell's is the history's, its score past the ALERT level, its threshold in
  // the statistic's units.
  CHECK(seen.cell_worst == seen.series_worst);
  CHECK(seen.cell_score >= 5.5);
  CHECK(seen.cell_alert_threshold == seen.series_alert_threshold);
  CHECK(seen.cell_alert_threshold != 5.5);  // not the score level
  CHECK(seen.incident_since == opened_at);
  CHECK(seen.points == 5);
  // The latest window's distribution: every value of the window and the baseline in a bin.
  CHECK(seen.distribution_window == seen.window_n);
  CHECK(seen.distribution_baseline == seen.baseline_n);
  CHECK(seen.alerts == 1);

  // /api/report: every series of the pipeline; an unknown pipeline is 404.
  HttpReply report = HttpGet(daemon.port, "/api/report?pipeline=ops");
  REQUIRE(report.status == 200);
  simdjson::dom::parser report_parser;
  simdjson::dom::element root = report_parser.parse(report.body);
  CHECK(int64_t(root["pipelines"].at(0)["seriesTotal"]) == 12);
  CHECK(root["pipelines"].at(0)["series"].get_array().size() == 12);
  CHECK(HttpGet(daemon.port, "/api/report?pipeline=nope").status == 404);

  daemon.Stop();
  daemon.Start("log2.txt");
  const Seen again = Look(daemon.port);
  CHECK(again.cell_worst == seen.cell_worst);
  CHECK(again.cell_score == seen.cell_score);
  CHECK(again.series_alert_threshold == seen.series_alert_threshold);
  CHECK(again.incident_since == seen.incident_since);
  CHECK(again.points == seen.points);
  CHECK(again.distribution_window == seen.distribution_window);
  CHECK(again.alerts == seen.alerts);
  daemon.Stop();
}

}  // namespace
}  // namespace driftd::testing
