// Event time through the daemon: a file source, a windowed query with a watermark and file sinks
// per output mode; every batch's rows computed by hand (the same data as
// tests/engine/aggregation_window_test.cc, one file per batch).
#include <catch2/catch.hpp>

#include "state/checkpoint_store.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/window_test_util.h"

namespace driftd::testing {
namespace {

using Rows = std::vector<std::string>;

struct SinkDecl {
  std::string name;
  std::string mode;
};

std::string WindowPipeline(const TempDir& dir, const std::vector<SinkDecl>& sinks,
                           const std::string& trigger = "{availableNow: true}") {
  std::string sink_yaml;
  for (const SinkDecl& sink : sinks) {
    sink_yaml += fmt::format(
        "  - {{name: {0}, format: file, stream: stats, outputMode: {1}, options: {{path: {2}}}}}\n",
        sink.name, sink.mode, dir / ("out-" + sink.name));
  }
  std::string path = dir / "pipeline.yaml";
  WriteFile(path, fmt::format(R"(name: windows
{schema}
source:
  format: file
  options: {{path: {input}, maxFilesPerTrigger: 1}}
query:
  groupBy: [model_id]
  window: {{column: event_time, size: 10 seconds}}
  watermark: {{column: event_time, delay: 5 seconds}}
  aggregates: [count, sum(value)]
sinks:
{sinks}trigger: {trigger}
checkpointLocation: {checkpoint}
)",
                              fmt::arg("schema", kValueSchema), fmt::arg("input", dir / "input"),
                              fmt::arg("sinks", sink_yaml), fmt::arg("trigger", trigger),
                              fmt::arg("checkpoint", dir / "checkpoint")));
  return path;
}

// One file per batch (times in seconds after kWindowT0Us; the watermark each batch runs under;
// the files are one stream, so a row is also judged by the rows before it in its file):
//   b0 wm none: m1@3 v1, m1@12 v2, m2@7 v4, m1@1 v8                         -> wm 7
//   b1 wm 7:    m1@7 v16 (at the watermark, window open), m1@9.5 v64, m2@15 v32 -> wm 10
//   b2 wm 10:   m1@9.999999 v128 (late: [0,10) closed), m2@10 v256, m1@25 v512,
//               m1 with a null event time                                 -> wm 20
//   b3 wm 20:   m2@19 v2048 (late), m2@21 v4096, m1@36 v8192              -> wm 31
//   b4 wm 31:   no data; [20,30) closable
void WriteBatches(const TempDir& dir) {
  std::filesystem::create_directories(dir / "input");
  WriteFile(dir / "input/f0.jsonl", Lines({EventRow("m1", 3, 1), EventRow("m1", 12, 2),
                                           EventRow("m2", 7, 4), EventRow("m1", 1, 8)}));
  WriteFile(dir / "input/f1.jsonl",
            Lines({EventRow("m1", 7, 16), EventRow("m1", 9.5, 64), EventRow("m2", 15, 32)}));
  WriteFile(dir / "input/f2.jsonl",
            Lines({EventRow("m1", 9.999999, 128), EventRow("m2", 10, 256), EventRow("m1", 25, 512),
                   R"({"model_id":"m1","event_time":null,"value":1024})"}));
  WriteFile(dir / "input/f3.jsonl",
            Lines({EventRow("m2", 19, 2048), EventRow("m2", 21, 4096), EventRow("m1", 36, 8192)}));
}

TEST_CASE(
    "the daemon emits hand-computed windows in update and append mode and evicts closed "
    "ones",
    "[e2e][window][watermark]") {
  TempDir dir;
  WriteBatches(dir);
  RunResult run = RunDriftd({"run", WindowPipeline(dir, {{"upd", "update"}, {"app", "append"}})});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto manifest = ReadFileSinkManifest(dir / "out-upd");
  REQUIRE(manifest);
  // Four data batches, then one no-data batch that the watermark made due.
  CHECK(*manifest == std::vector<int64_t>{0, 1, 2, 3, 4});

  std::filesystem::path upd = dir.path() / "out-upd";
  CHECK(CompactBatch(upd, 0, "upd") ==
        Rows{"m1 [0,10) n=2 sum=9", "m1 [10,20) n=1 sum=2", "m2 [0,10) n=1 sum=4"});
  CHECK(CompactBatch(upd, 1, "upd") == Rows{"m1 [0,10) n=4 sum=89", "m2 [10,20) n=1 sum=32"});
  CHECK(CompactBatch(upd, 2, "upd") == Rows{"m1 [20,30) n=1 sum=512", "m2 [10,20) n=2 sum=288"});
  CHECK(CompactBatch(upd, 3, "upd") == Rows{"m1 [30,40) n=1 sum=8192", "m2 [20,30) n=1 sum=4096"});
  CHECK(CompactBatch(upd, 4, "upd").empty());

  std::filesystem::path app = dir.path() / "out-app";
  CHECK(CompactBatch(app, 0, "app").empty());
  CHECK(CompactBatch(app, 1, "app").empty());
  CHECK(CompactBatch(app, 2, "app") == Rows{"m1 [0,10) n=4 sum=89", "m2 [0,10) n=1 sum=4"});
  CHECK(CompactBatch(app, 3, "app") == Rows{"m1 [10,20) n=1 sum=2", "m2 [10,20) n=2 sum=288"});
  CHECK(CompactBatch(app, 4, "app") == Rows{"m1 [20,30) n=1 sum=512", "m2 [20,30) n=1 sum=4096"});

  // Late rows and rows without an event time are counted, each under its own name.
  std::vector<std::string> progress = ProgressRecords(run.output);
  REQUIRE(progress.size() == 5);
  std::vector<int64_t> dropped;
  std::vector<int64_t> without_time;
  for (const std::string& record : progress) {
    dropped.push_back(StateOperatorValue(record, "numRowsDroppedByWatermark"));
    without_time.push_back(StateOperatorValue(record, "numRowsWithoutEventTime"));
  }
  CHECK(dropped == std::vector<int64_t>{0, 0, 1, 1, 0});
  CHECK(without_time == std::vector<int64_t>{0, 0, 1, 0, 0});
  // Only m1 [30,40) is still open: every closed window's state was deleted. The other two keys
  // are the models admitted under query.maxModels.
  CHECK(StateOperatorValue(progress.back(), "stateKeys") == 1 + 2);
  CHECK(StateOperatorValue(progress.back(), "numOpenWindows") == 1);

  // The watermark is in the checkpoint: a restart with new late data drops it at once.
  WriteFile(dir / "input/f4.jsonl", Lines({EventRow("m1", 29, 1), EventRow("m1", 31.5, 2)}));
  RunResult again = RunDriftd({"run", WindowPipeline(dir, {{"upd", "update"}, {"app", "append"}})});
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK(CompactBatch(upd, 5, "upd") == Rows{"m1 [30,40) n=2 sum=8194"});
  CHECK(CompactBatch(app, 5, "app").empty());
  std::vector<std::string> resumed = ProgressRecords(again.output);
  REQUIRE(resumed.size() == 1);
  CHECK(StateOperatorValue(resumed[0], "numRowsDroppedByWatermark") == 1);
}

TEST_CASE("the daemon keeps every window in complete mode and emits the whole table each batch",
          "[e2e][window]") {
  TempDir dir;
  WriteBatches(dir);
  RunResult run = RunDriftd({"run", WindowPipeline(dir, {{"all", "complete"}})});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("grows without bound"));
  std::filesystem::path all = dir.path() / "out-all";
  CHECK(*ReadFileSinkManifest(all) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(CompactBatch(all, 2, "all") == Rows{"m1 [0,10) n=4 sum=89", "m1 [10,20) n=1 sum=2",
                                            "m1 [20,30) n=1 sum=512", "m2 [0,10) n=1 sum=4",
                                            "m2 [10,20) n=2 sum=288"});
  Rows everything{"m1 [0,10) n=4 sum=89",    "m1 [10,20) n=1 sum=2", "m1 [20,30) n=1 sum=512",
                  "m1 [30,40) n=1 sum=8192", "m2 [0,10) n=1 sum=4",  "m2 [10,20) n=2 sum=288",
                  "m2 [20,30) n=1 sum=4096"};
  CHECK(CompactBatch(all, 3, "all") == everything);
  CHECK(CompactBatch(all, 4, "all") == everything);
  std::vector<std::string> progress = ProgressRecords(run.output);
  REQUIRE(progress.size() == 5);
  // Seven windows and the two admitted models.
  CHECK(StateOperatorValue(progress.back(), "stateKeys") == 7 + 2);
  CHECK(StateOperatorValue(progress[2], "numRowsDroppedByWatermark") == 1);
}

}  // namespace
}  // namespace driftd::testing
