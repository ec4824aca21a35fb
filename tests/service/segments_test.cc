// Drift per segment as an operator sees it on a running daemon: metrics with a segment label
// (only where there are segments), the status page's data and `driftd status` naming the
// segment, and the caps on map keys reported in progress records and metrics.
#include <signal.h>
#include <sys/wait.h>

#include <random>
#include <regex>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/service/service_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

int ExitCodeOf(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

// Two models in two countries with three named features; fraud-v7's amount in DE moves by
// 3 sd after the first half.
std::string NamedRecords(int count) {
  std::mt19937_64 rng(9);
  std::normal_distribution<double> normal(0, 1);
  std::string out;
  for (int i = 0; i < count; ++i) {
    const bool fraud = i % 2 == 0;
    const bool de = (i / 2) % 2 == 0;
    double amount = 50 + 10 * normal(rng);
    if (fraud && de && i >= count / 2) amount += 30;
    out += fmt::format(
        R"({{"model_id":"{}","segment":{{"country":"{}"}},"features":{{"amount":{},"score":{},"tenure":{}}}}})",
        fraud ? "fraud-v7" : "churn-v2", de ? "DE" : "FR", amount, normal(rng), normal(rng));
    out += "\n";
  }
  return out;
}

TEST_CASE("metrics, the status page and driftd status name the segment that drifts",
          "[service][metrics][drift][segments][e2e]") {
  TempDir dir("driftd-segments");
  WriteFileAt(dir / "input/logs.jsonl", NamedRecords(16000));
  WriteFileAt(dir / "p.yaml", fmt::format(R"(name: segments
schema:
  - {{name: model_id, type: string}}
  - name: segment
    type: struct<country:string>
  - name: features
    type: map<string,double>
source:
  format: file
  options: {{path: {}}}
query:
  groupBy: [model_id, segment.country]
  aggregates: [count]
drift:
  series: [features]
  baseline: {{type: warmup, records: 1000}}
  windowRecords: 500
  maxKeysPerModel: 2
sinks:
  - {{name: alerts, format: file, stream: alerts, options: {{path: {}}}}}
trigger: {{processingTime: 100 milliseconds}}
checkpointLocation: {}
)",
                                          dir / "input", dir / "out", dir / "checkpoint"));
  const std::string log = dir / "log.txt";
  INFO(ReadFile(log));
  ChildProcess process = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "p.yaml", "--http", "127.0.0.1:0"}, log);
  const std::optional<int> port = WaitForHttpPort(log);
  REQUIRE(port);
  const std::map<std::string, std::string> drifting = {{"pipeline", "segments"},
                                                       {"model", "fraud-v7"},
                                                       {"segment", "segment.country=DE"},
                                                       {"series", "features.amount"}};
  REQUIRE(WaitFor([&] {
    return ParsePrometheus(HttpGet(*port, "/metrics").body)
               .Value("driftd_drift_series_level", drifting)
               .value_or(0) == 2;
  }, 60s));
  const Exposition m = ParsePrometheus(HttpGet(*port, "/metrics").body);
  REQUIRE(m.errors.empty());
  std::map<std::string, std::string> quiet = drifting;
  quiet["segment"] = "segment.country=FR";
  CHECK(m.Value("driftd_drift_series_level", quiet) == 0);
  CHECK(m.Value("driftd_alerts_total", {{"pipeline", "segments"},
                                        {"model", "fraud-v7"},
                                        {"segment", "segment.country=DE"},
                                        {"level", "alert"}}) == 1);
  // Without its segment label the series is not there: every sample names its segment.
  CHECK_FALSE(m.Value("driftd_drift_series_level", {{"pipeline", "segments"},
                                                    {"model", "fraud-v7"},
                                                    {"series", "features.amount"}})
                  .has_value());
  // tenure, each model's third key, is over drift.maxKeysPerModel: 16000 values not watched.
  CHECK(m.Value("driftd_drift_values_over_key_cap_total", {{"pipeline", "segments"}}) == 16000);
  CHECK(m.Value("driftd_drift_rows_over_segment_cap_total", {{"pipeline", "segments"}}) == 0);
  CHECK(HttpGet(*port, "/progress").body.find("\"driftValuesOverKeyCap\":") != std::string::npos);

  const std::string api = HttpGet(*port, "/api/status").body;
  CHECK(api.find(R"("name":"fraud-v7 [segment.country=DE]","model":"fraud-v7","segment":"segment.country=DE")") !=
        std::string::npos);
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  RunResult status = RunDriftd({"status", "--http", address});
  INFO(status.output);
  CHECK(std::regex_search(status.output,
                          std::regex(R"(fraud-v7 \[segment\.country=DE\] +alert +alert: features\.amount)")));
  CHECK(std::regex_search(status.output, std::regex(R"(fraud-v7 \[segment\.country=FR\] +ok)")));
  CHECK_THAT(status.output, Catch::Contains("alert    fraud-v7 [segment.country=DE] features.amount"));
  process.Signal(SIGTERM);
  CHECK(ExitCodeOf(process.Wait(30s)) == 0);
}

}  // namespace
}  // namespace driftd::testing
