// Long windowed runs through the daemon: state stays bounded by the open windows however many
// records pass, and the continuous trigger delivers records as they arrive.
#include <signal.h>
#include <sys/wait.h>

#include <set>

#include <catch2/catch.hpp>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/window_test_util.h"

namespace driftd::testing {
namespace {

TEST_CASE("a long windowed run keeps its state bounded and emits every closed window once",
          "[e2e][window][long]") {
  // 2M inference records, 1 ms of event time apart (2000 s), in 20 batches of 100k; one-minute
  // windows, 10 s watermark delay. (tests/engine/aggregation_window_test.cc runs 10M rows at
  // the Aggregator level.)
  TempDir dir;
  std::string path = dir / "pipeline.yaml";
  WriteFile(
      path,
      fmt::format(R"(name: long-run
{schema}
source:
  format: rate
  options: {{mode: inference, rowsPerSecond: 1000, totalRows: 2000000, realTime: false,
            maxRowsPerTrigger: 100000, startTimeMs: {start_ms}, models: 8, features: 2}}
query:
  groupBy: [model_id]
  window: {{column: event_time, size: 1 minute}}
  watermark: {{column: event_time, delay: 10 seconds}}
  aggregates: [count, mean(prediction)]
sinks:
  - {{name: closed, format: file, stream: stats, outputMode: append, options: {{path: {output}}}}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                  fmt::arg("schema", kInferenceSchema), fmt::arg("start_ms", kWindowT0Us / 1000),
                  fmt::arg("output", dir / "output"), fmt::arg("checkpoint", dir / "checkpoint")));
  RunResult run = RunDriftd({"run", path}, std::chrono::seconds(120));
  INFO(run.output.substr(0, 4000));
  REQUIRE(run.exit_code == 0);

  std::vector<std::string> progress = ProgressRecords(run.output);
  // 20 data batches and the no-data batch that emits the last closable windows.
  REQUIRE(progress.size() == 21);
  int64_t max_keys = 0;
  int64_t input = 0;
  for (const std::string& record : progress) {
    max_keys = std::max(max_keys, StateOperatorValue(record, "stateKeys"));
    input += ProgressValue(record, "numInputRows");
    CHECK(StateOperatorValue(record, "numRowsDroppedByWatermark") == 0);
  }
  CHECK(input == 2'000'000);
  // A batch spans 100 s of event time: at most 3 one-minute windows per model are open, so 24
  // keys, whether the run is 2M or 2G records long, beside one key per admitted model.
  CHECK(max_keys <= 8 * 3 + 8);
  CHECK(StateOperatorValue(progress.back(), "stateKeys") <= 8 * 1 + 8);

  // Windows ending at or before the final watermark (1989.999 s) were emitted, once each:
  // [0,60) ... [1920,1980) for 8 models, holding every row before 1980 s.
  std::vector<std::string> rows = CommittedRows(dir / "output");
  CHECK(rows.size() == 33 * 8);
  std::set<std::string> windows;
  int64_t count = 0;
  for (const std::string& row : rows) {
    windows.insert(JsonField(row, "model_id") + JsonField(row, "window"));
    count += static_cast<int64_t>(JsonNumber(row, "count"));
  }
  CHECK(windows.size() == rows.size());
  CHECK(count == 1'980'000);
}

TEST_CASE("the continuous trigger delivers new records long before its interval",
          "[e2e][window][continuous]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "input");
  std::string path = dir / "pipeline.yaml";
  // A checkpoint interval of an hour: only records processed as they arrive can show up.
  WriteFile(path, fmt::format(R"(name: continuous
{schema}
source:
  format: file
  options: {{path: {input}}}
query:
  select: [model_id, value]
sinks:
  - {{name: rows, format: file, stream: stats, outputMode: append, options: {{path: {output}}}}}
trigger: {{continuous: 1 hour}}
checkpointLocation: {checkpoint}
)",
                              fmt::arg("schema", kValueSchema), fmt::arg("input", dir / "input"),
                              fmt::arg("output", dir / "output"),
                              fmt::arg("checkpoint", dir / "checkpoint")));
  ChildProcess daemon = ChildProcess::Start({DriftdBinary(), "run", path}, dir / "log.txt");
  auto rows = [&] {
    auto committed = ReadCommittedFileSinkRows(dir / "output");
    return committed ? committed->size() : 0;
  };
  for (int i = 1; i <= 5; ++i) {
    WriteFile(dir.path() / "input" / fmt::format("f{}.jsonl", i), Lines({EventRow("m1", i, i)}));
    auto written = std::chrono::steady_clock::now();
    REQUIRE(WaitFor([&] { return rows() == static_cast<size_t>(i); }, std::chrono::seconds(10)));
    // Generous for a loaded CI machine, and far below the one-hour interval.
    CHECK(std::chrono::steady_clock::now() - written < std::chrono::seconds(5));
  }
  // Progress is reported once per interval, not per epoch: only the first epoch's record.
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(std::chrono::seconds(20));
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  CHECK(ProgressRecords(ReadFile(dir / "log.txt")).size() == 1);
  CHECK(*ReadFileSinkManifest(dir / "output") == std::vector<int64_t>{0, 1, 2, 3, 4});
}

}  // namespace
}  // namespace driftd::testing
