// Drift telemetry as an operator sees it: gauges for every (model, series, detector) from the
// first evaluation, the same gauges after a restart with no new data, the evaluations stream,
// Spark-shaped progress records, JSON logs carrying them as objects, and lag that goes away
// once a file is read. With many series and models, the gauges and the status page's grid
// show the most urgent.
#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <regex>
#include <set>

#include <simdjson.h>
#include <catch2/catch.hpp>

#include "tests/service/drift_data.h"
#include "tests/service/service_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

int ExitCodeOf(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

Exposition ScrapeMetrics(int port) { return ParsePrometheus(HttpGet(port, "/metrics").body); }

bool Ready(int port, const std::string& pipeline) {
  return ScrapeMetrics(port).Value("driftd_query_ready", {{"pipeline", pipeline}}).value_or(0) ==
         1;
}

// Windows each model's prediction closes: (records - warmup) / window.
constexpr int kRecords = 3000;
constexpr int kWindows = (kRecords - 500) / 500;

struct Daemon {
  ChildProcess process;
  int port = 0;
};

Daemon StartDaemon(const std::string& pipeline, const std::string& log,
                   std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {DriftdBinary(), "run", pipeline, "--http", "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Daemon daemon{ChildProcess::Start(argv, log), 0};
  auto port = WaitForHttpPort(log);
  if (port) daemon.port = *port;
  return daemon;
}

TEST_CASE(
    "drift gauges show every model from its first evaluation, the drifting one in alert, and "
    "the same after a restart with no new data",
    "[service][metrics][drift][e2e]") {
  TempDir dir("driftd-telemetry");
  WriteFileAt(dir / "input/logs.jsonl", DriftRecords({.records_per_model = kRecords}));
  WriteFileAt(dir / "p.yaml", DriftPipelineYaml("telemetry", dir / "input", dir / "out"));
  std::string log = dir / "log.txt";
  INFO(ReadFile(log));
  std::map<std::string, double> psi_before;
  {
    Daemon daemon = StartDaemon(dir / "p.yaml", log, {"--quiet-progress"});
    REQUIRE(daemon.port > 0);
    REQUIRE(WaitFor([&] {
      Exposition m = ScrapeMetrics(daemon.port);
      for (int i = 0; i < 4; ++i) {
        if (m.Value("driftd_drift_evaluations_total",
                    {{"pipeline", "telemetry"}, {"model", ModelName(i)}})
                .value_or(0) < 3 * kWindows) {  // prediction and two features
          return false;
        }
      }
      return true;
    }, 60s));
    Exposition m = ScrapeMetrics(daemon.port);
    REQUIRE(m.errors.empty());
    for (int i = 0; i < 4; ++i) {
      const std::string model = ModelName(i);
      INFO(model);
      for (const char* series : {"prediction", "feature_vector[0]", "feature_vector[1]"}) {
        INFO(series);
        for (const char* detector : {"psi", "mean_shift"}) {
          std::map<std::string, std::string> labels{{"pipeline", "telemetry"},
                                                    {"model", model},
                                                    {"series", series},
                                                    {"detector", detector}};
          CHECK(m.Value("driftd_drift_statistic", labels).has_value());
          CHECK(m.Value("driftd_drift_level", labels).has_value());
          CHECK(m.Value("driftd_drift_score", labels).has_value());
          // The statistic each level needs at the window's sample sizes (floor included).
          labels["level"] = "warn";
          const double warn = m.Value("driftd_drift_threshold", labels).value_or(-1);
          labels["level"] = "alert";
          const double alert = m.Value("driftd_drift_threshold", labels).value_or(-1);
          CHECK(warn > 0);
          CHECK(alert >= warn);
        }
      }
      const double level = m.Value("driftd_drift_series_level", {{"pipeline", "telemetry"},
                                                                 {"model", model},
                                                                 {"series", "prediction"}})
                               .value_or(-1);
      CHECK(level == (model == "model-2" ? 2 : 0));
      psi_before[model] = m.Value("driftd_drift_statistic", {{"pipeline", "telemetry"},
                                                            {"model", model},
                                                            {"series", "prediction"},
                                                            {"detector", "psi"}})
                              .value_or(-1);
    }
    CHECK(m.Value("driftd_alerts_total",
                  {{"pipeline", "telemetry"}, {"model", "model-2"}, {"level", "alert"}}) == 1);
    CHECK(m.Value("driftd_alerts_total",
                  {{"pipeline", "telemetry"}, {"model", "model-0"}, {"level", "alert"}}) == 0);
    // The input file is read to its end: no lag is left behind for it (not its last value).
    for (const Sample& sample : m.samples) CHECK(sample.name != "driftd_source_lag_bytes");

    // The terminal view says the same.
    const std::string address = "127.0.0.1:" + std::to_string(daemon.port);
    RunResult status = RunDriftd({"status", "--http", address});
    INFO(status.output);
    CHECK(status.exit_code == 0);
    CHECK_THAT(status.output, Catch::Contains("telemetry"));
    CHECK(std::regex_search(status.output, std::regex("model-2 +alert +alert: prediction")));
    CHECK(std::regex_search(status.output, std::regex("model-0 +ok")));
    CHECK_THAT(status.output, Catch::Contains("alert    model-2 prediction"));
    // Each recent alert says when driftd raised it (UTC), not only its batch.
    CHECK(std::regex_search(
        status.output,
        std::regex(R"(\n +20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ alert +model-2 prediction \S+ )"
                   R"([-0-9.e+]+ \(threshold [-0-9.e+]+\) batch \d+)")));
    RunResult json = RunDriftd({"status", "--http", address, "--json"});
    CHECK_THAT(json.output, Catch::Contains("\"pipelines\":[{\"name\":\"telemetry\""));
    CHECK(RunDriftd({"status", "--http", "127.0.0.1:1"}).exit_code == 1);
    daemon.process.Signal(SIGTERM);
    REQUIRE(ExitCodeOf(daemon.process.Wait(30s)) == 0);
  }

  // The evaluations stream holds every closed window of every (model, series).
  std::map<std::string, int> windows;
  simdjson::dom::parser parser;
  for (const std::string& row : FileSinkRows(dir / "out/evaluations")) {
    simdjson::dom::element e;
    REQUIRE(parser.parse(row).get(e) == simdjson::SUCCESS);
    std::string_view model, series;
    REQUIRE(e["model"].get(model) == simdjson::SUCCESS);
    REQUIRE(e["series"].get(series) == simdjson::SUCCESS);
    simdjson::dom::array detectors;
    REQUIRE(e["detectors"].get(detectors) == simdjson::SUCCESS);
    CHECK(detectors.size() == 2);
    int64_t n = 0;
    CHECK(e["window"]["n"].get(n) == simdjson::SUCCESS);
    CHECK(n == 500);
    ++windows[std::string(model) + "/" + std::string(series)];
  }
  CHECK(windows.size() == 12);
  for (const auto& [key, count] : windows) {
    INFO(key);
    CHECK(count == kWindows);
  }

  // Restarted on the same checkpoint with nothing new to read: no evaluation happens, yet
  // every gauge is back with the value it had.
  {
    std::string log2 = dir / "log2.txt";
    Daemon daemon = StartDaemon(dir / "p.yaml", log2, {"--quiet-progress"});
    REQUIRE(daemon.port > 0);
    REQUIRE(WaitFor([&] { return Ready(daemon.port, "telemetry"); }));
    Exposition m = ScrapeMetrics(daemon.port);
    for (int i = 0; i < 4; ++i) {
      const std::string model = ModelName(i);
      INFO(model);
      CHECK(m.Value("driftd_drift_evaluations_total",
                    {{"pipeline", "telemetry"}, {"model", model}}) == 0);
      CHECK(m.Value("driftd_drift_statistic", {{"pipeline", "telemetry"},
                                               {"model", model},
                                               {"series", "prediction"},
                                               {"detector", "psi"}}) == psi_before[model]);
      CHECK(m.Value("driftd_drift_series_level", {{"pipeline", "telemetry"},
                                                  {"model", model},
                                                  {"series", "prediction"}}) ==
            (model == "model-2" ? 2 : 0));
    }
    // Every series is shown while they are at most --metrics-max-series (2000 by default).
    CHECK(m.Value("driftd_drift_series", {{"pipeline", "telemetry"}}) == 12);
    CHECK(m.Value("driftd_drift_series_shown", {{"pipeline", "telemetry"}}) == 12);
    daemon.process.Signal(SIGTERM);
    CHECK(ExitCodeOf(daemon.process.Wait(30s)) == 0);
  }

  // With more series than --metrics-max-series, a scrape shows the most urgent (the one in
  // alert) and says how many there are. With more models than the status page's grid takes
  // (500), it shows the most urgent too: 600 more models, named to sort before the others.
  std::string extra;
  for (int i = 0; i < 600; ++i) {
    extra += fmt::format(
        "{{\"model_id\":\"extra-{:03}\",\"event_time\":1700000000000,\"prediction\":0.5,"
        "\"feature_vector\":[0.1,0.2]}}\n",
        i);
  }
  WriteFileAt(dir / "input/more.jsonl", extra);
  {
    std::string log3 = dir / "log3.txt";
    Daemon daemon =
        StartDaemon(dir / "p.yaml", log3, {"--quiet-progress", "--metrics-max-series", "1"});
    REQUIRE(daemon.port > 0);
    REQUIRE(WaitFor([&] { return Ready(daemon.port, "telemetry"); }));
    Exposition m = ScrapeMetrics(daemon.port);
    REQUIRE(m.errors.empty());
    CHECK(m.Value("driftd_drift_series", {{"pipeline", "telemetry"}}) == 12);
    CHECK(m.Value("driftd_drift_series_shown", {{"pipeline", "telemetry"}}) == 1);
    std::set<std::string> shown;
    for (const Sample& sample : m.samples) {
      if (sample.name.starts_with("driftd_drift_") && sample.labels.count("series")) {
        shown.insert(sample.labels.at("model") + "/" + sample.labels.at("series"));
      }
    }
    CHECK(shown == std::set<std::string>{"model-2/prediction"});
    CHECK(m.Value("driftd_drift_series_level",
                  {{"pipeline", "telemetry"}, {"model", "model-2"}, {"series", "prediction"}}) ==
          2);
    // The per-model gauges cover the 4 models (the extra ones come in a later batch).
    for (int i = 0; i < 4; ++i) {
      CHECK(m.Value("driftd_drift_model_values_total",
                    {{"pipeline", "telemetry"}, {"model", ModelName(i)}})
                .has_value());
    }

    // With 604 models, the per-model families show --metrics-max-models (500) of them, the
    // alerting model among them.
    REQUIRE(WaitFor([&] {
      return ScrapeMetrics(daemon.port).Value("driftd_drift_models", {{"pipeline", "telemetry"}}) ==
             604;
    }));
    Exposition capped = ScrapeMetrics(daemon.port);
    CHECK(capped.Value("driftd_drift_models_shown", {{"pipeline", "telemetry"}}) == 500);
    CHECK(capped.Value("driftd_drift_model_series",
                       {{"pipeline", "telemetry"}, {"model", "model-2"}, {"level", "alert"}}) == 1);
    size_t model_lines = 0;
    for (const Sample& sample : capped.samples) {
      model_lines += sample.name == "driftd_drift_model_values_total";
    }
    CHECK(model_lines == 500);
    const std::string body = HttpGet(daemon.port, "/api/status").body;
    simdjson::dom::parser status_parser;
    simdjson::dom::element root;
    REQUIRE(status_parser.parse(body).get(root) == simdjson::SUCCESS);
    simdjson::dom::element pipeline = root["pipelines"].at(0);
    CHECK(pipeline["modelsTotal"].get_int64().value() == 604);
    simdjson::dom::array models = pipeline["models"].get_array();
    CHECK(models.size() == 500);
    std::set<std::string> rows;
    for (simdjson::dom::element model : models) {
      rows.emplace(std::string_view(model["name"].get_string().value()));
    }
    CHECK(rows.count("model-2") == 1);
    RunResult status = RunDriftd({"status", "--http", "127.0.0.1:" + std::to_string(daemon.port)});
    CHECK_THAT(status.output, Catch::Contains("drift by model (the 500 most urgent of 604)"));
    CHECK(std::regex_search(status.output, std::regex("model-2 +alert +alert: prediction")));
    daemon.process.Signal(SIGTERM);
    CHECK(ExitCodeOf(daemon.process.Wait(30s)) == 0);
  }
}

TEST_CASE(
    "progress records carry id, runId and batchDuration, JSON logs hold them as objects, and "
    "a file read to its end leaves no lag behind",
    "[service][progress][e2e]") {
  TempDir dir("driftd-progress-shape");
  WriteFileAt(dir / "input/logs.jsonl", DriftRecords({.records_per_model = 1000}));
  WriteFileAt(dir / "p.yaml", DriftPipelineYaml("shape", dir / "input", dir / "out",
                                                "{availableNow: true}"));
  auto run = [&] {
    RunResult result = RunDriftd({"run", dir / "p.yaml", "--http", "off", "--log-format",
                                  "json"});
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    std::vector<std::pair<std::string, std::string>> ids;  // (id, runId) per progress line
    simdjson::dom::parser parser;
    for (const std::string& line : SplitLines(result.output)) {
      simdjson::dom::element entry;
      if (line.empty() || line[0] != '{') continue;
      REQUIRE(parser.parse(line).get(entry) == simdjson::SUCCESS);
      std::string_view msg;
      REQUIRE(entry["msg"].get(msg) == simdjson::SUCCESS);
      if (msg != "progress") continue;
      simdjson::dom::element progress = entry["progress"];
      REQUIRE(progress.is_object());
      std::string_view id, run_id;
      int64_t duration = -1;
      CHECK(progress["id"].get(id) == simdjson::SUCCESS);
      CHECK(progress["runId"].get(run_id) == simdjson::SUCCESS);
      CHECK(progress["batchDuration"].get(duration) == simdjson::SUCCESS);
      CHECK(duration >= 0);
      simdjson::dom::element source = progress["sources"].at(0);
      // The file has been read to its end by the last batch of availableNow.
      simdjson::dom::object lag_bytes;
      if (source["lagBytes"].get(lag_bytes) == simdjson::SUCCESS) {
        for (auto [file, lag] : lag_bytes) CHECK(lag.get_int64().value() > 0);
      }
      ids.emplace_back(std::string(id), std::string(run_id));
    }
    return ids;
  };
  auto first = run();
  REQUIRE(!first.empty());
  for (const auto& ids : first) CHECK(ids == first.front());
  // A second run on the same checkpoint: the same query id, a new run id.
  AppendFile(dir / "input/logs.jsonl", DriftRecords({.records_per_model = 10, .seed = 9}));
  auto second = run();
  REQUIRE(!second.empty());
  CHECK(second.front().first == first.front().first);
  CHECK(second.front().second != first.front().second);
}

TEST_CASE("a backlog shows a progress line on a terminal and is logged at intervals otherwise",
          "[service][progress][e2e]") {
  TempDir dir("driftd-catch-up");
  // Rows arrive faster than the batches may take them: the backlog only grows.
  std::string yaml = RatePipelineYaml("behind", dir.path().string());
  const std::string rate = "rowsPerSecond: 2000,";
  yaml.replace(yaml.find(rate), rate.size(), "rowsPerSecond: 20000, maxRowsPerTrigger: 200,");
  WriteFileAt(dir / "p.yaml", yaml);
  {
    std::string log = dir / "log.txt";
    auto daemon = ChildProcess::Start({DriftdBinary(), "run", dir / "p.yaml", "--http", "off",
                                       "--quiet-progress", "--progress-log-interval", "0.2"},
                                      log);
    CHECK(WaitFor([&] {
      return std::regex_search(ReadFile(log),
                               std::regex(R"(catching up: behind: [0-9.]+k? of [0-9.]+[kM]? rows \([0-9]+%\), [0-9.]+k? rows/s, )"));
    }));
    INFO(ReadFile(log));
    daemon.Signal(SIGTERM);
    CHECK(ExitCodeOf(daemon.Wait(30s)) == 0);
  }
  {
    // On a terminal (script(1) gives it one) the line is redrawn in place instead. timeout(1)
    // ends the daemon (SIGTERM), so nothing outlives the pseudo-terminal.
    std::string out = dir / "tty.txt";
    // script(1) stops when its standard input ends: give it /dev/null, not the runner's.
    auto daemon = ChildProcess::Start(
        {"/bin/bash", "-c",
         "exec script -q -e -c 'timeout -s TERM 10 " + DriftdBinary() + " run " +
             (dir / "p.yaml") + " --http off --quiet-progress' " + out + " < /dev/null"},
        dir / "script.txt");
    REQUIRE(daemon.Wait(60s).has_value());
    const std::string screen = ReadFile(out);
    INFO(screen.substr(0, 3000));
    CHECK_THAT(screen, Catch::Contains("\r\033[Kbehind: "));
    CHECK_THAT(screen, Catch::Contains(" left\r"));
    CHECK_THAT(screen, !Catch::Contains("catching up:"));
  }
}

}  // namespace
}  // namespace driftd::testing
