// Output modes without a window, through the daemon, for a scripted sequence of batches (one
// file each): append of a non-aggregation query emits each batch's new rows, update the groups a
// batch changed, complete the whole result table, as Spark does.
#include <catch2/catch.hpp>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/window_test_util.h"

namespace driftd::testing {
namespace {

using Rows = std::vector<std::string>;

std::string ModesPipeline(const TempDir& dir, const std::string& query,
                          const std::vector<std::pair<std::string, std::string>>& sinks) {
  std::string sink_yaml;
  for (const auto& [name, mode] : sinks) {
    sink_yaml += fmt::format(
        "  - {{name: {0}, format: file, stream: stats, outputMode: {1}, options: {{path: {2}}}}}\n",
        name, mode, dir / ("out-" + name));
  }
  std::string path = dir / "pipeline.yaml";
  WriteFile(path, fmt::format(R"(name: modes
{schema}
source:
  format: file
  options: {{path: {input}, maxFilesPerTrigger: 1}}
query:
  {query}
sinks:
{sinks}trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                              fmt::arg("schema", kValueSchema), fmt::arg("input", dir / "input"),
                              fmt::arg("query", query), fmt::arg("sinks", sink_yaml),
                              fmt::arg("checkpoint", dir / "checkpoint")));
  return path;
}

void WriteScript(const TempDir& dir) {
  std::filesystem::create_directories(dir / "input");
  WriteFile(dir / "input/f0.jsonl",
            Lines({EventRow("m1", 1, 1), EventRow("m2", 2, 2), EventRow("m1", 3, 4)}));
  WriteFile(dir / "input/f1.jsonl", Lines({EventRow("m3", 4, 8)}));
  WriteFile(dir / "input/f2.jsonl",
            Lines({R"({"model_id":"m2","value":null})", EventRow("m1", 5, 16)}));
}

TEST_CASE("append mode of a select query emits exactly each batch's new rows",
          "[e2e][output-mode]") {
  TempDir dir;
  WriteScript(dir);
  RunResult run =
      RunDriftd({"run", ModesPipeline(dir, "select: [model_id, value]", {{"rows", "append"}})});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto batch = [&](int64_t id) {
    Rows out;
    for (const std::string& row : BatchRows(dir.path() / "out-rows", id, "rows")) {
      out.push_back(JsonField(row, "model_id") + " " + JsonField(row, "value"));
    }
    return out;
  };
  REQUIRE(*ReadFileSinkManifest(dir / "out-rows") == std::vector<int64_t>{0, 1, 2});
  CHECK(batch(0) == Rows{"m1 1", "m2 2", "m1 4"});
  CHECK(batch(1) == Rows{"m3 8"});
  CHECK(batch(2) == Rows{"m2 null", "m1 16"});
  CHECK(JsonField(BatchRows(dir.path() / "out-rows", 0, "rows")[0], "event_time") == "<missing>");
}

TEST_CASE("update and complete modes of a grouped query emit Spark's rows batch by batch",
          "[e2e][output-mode]") {
  TempDir dir;
  WriteScript(dir);
  RunResult run =
      RunDriftd({"run", ModesPipeline(dir, "groupBy: [model_id]\n  aggregates: [count, sum(value)]",
                                      {{"upd", "update"}, {"all", "complete"}})});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::filesystem::path upd = dir.path() / "out-upd";
  std::filesystem::path all = dir.path() / "out-all";
  REQUIRE(*ReadFileSinkManifest(upd) == std::vector<int64_t>{0, 1, 2});
  CHECK(CompactBatch(upd, 0, "upd") == Rows{"m1 n=2 sum=5", "m2 n=1 sum=2"});
  CHECK(CompactBatch(upd, 1, "upd") == Rows{"m3 n=1 sum=8"});
  CHECK(CompactBatch(upd, 2, "upd") == Rows{"m1 n=3 sum=21", "m2 n=2 sum=2"});
  CHECK(CompactBatch(all, 0, "all") == Rows{"m1 n=2 sum=5", "m2 n=1 sum=2"});
  CHECK(CompactBatch(all, 1, "all") == Rows{"m1 n=2 sum=5", "m2 n=1 sum=2", "m3 n=1 sum=8"});
  CHECK(CompactBatch(all, 2, "all") == Rows{"m1 n=3 sum=21", "m2 n=2 sum=2", "m3 n=1 sum=8"});
}

}  // namespace
}  // namespace driftd::testing
