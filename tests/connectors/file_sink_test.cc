#include "connectors/file_sink.h"

#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "connectors/connector_factories.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

using testing::TempDir;
using testing::WriteText;

SinkSpec FileSinkSpec(const std::string& name, const std::string& path,
                      StreamKind stream = StreamKind::kStats,
                      OutputMode mode = OutputMode::kUpdate) {
  SinkSpec spec;
  spec.name = name;
  spec.format = "file";
  spec.stream = stream;
  spec.output_mode = mode;
  spec.options = testing::WithDefaults("file", ConnectorRole::kSink, {{"path", path}});
  return spec;
}

std::unique_ptr<Sink> OpenedSink(const std::string& path, StreamKind stream = StreamKind::kStats,
                                 OutputMode mode = OutputMode::kUpdate) {
  PipelineSpec pipeline;
  pipeline.sinks.push_back(FileSinkSpec("stats", path, stream, mode));
  auto sink = CreateFileSink(pipeline, pipeline.sinks[0]);
  REQUIRE(sink);
  REQUIRE((*sink)->Open());
  return std::move(*sink);
}

BatchOutput Batch(int64_t id, std::vector<std::string> rows) {
  BatchOutput output;
  output.batch_id = id;
  for (auto& row : rows) output.stats_update.Add("", std::move(row));
  return output;
}

bool Delivered(Sink& sink, int64_t batch) {
  auto delivered = sink.IsDelivered(batch);
  REQUIRE(delivered);
  return *delivered;
}

std::vector<std::string> Committed(const std::string& path) {
  auto rows = ReadCommittedFileSinkRows(path);
  REQUIRE(rows);
  return *rows;
}

TEST_CASE("a delivered batch is in the manifest and its rows are readable", "[file][sink]") {
  TempDir dir;
  std::string out = dir.Sub("stats");
  auto sink = OpenedSink(out);
  CHECK_FALSE(Delivered(*sink, 0));
  CHECK(Committed(out).empty());
  REQUIRE(sink->Deliver(Batch(0, {R"({"model_id":"m1","count":1})", R"({"model_id":"m2"})"})));
  CHECK(Delivered(*sink, 0));
  CHECK_FALSE(Delivered(*sink, 1));
  CHECK(std::filesystem::exists(out + "/part-0000000000-stats.jsonl"));
  CHECK(std::filesystem::exists(out + "/_driftd_manifest/0"));
  CHECK(Committed(out) ==
        std::vector<std::string>{R"({"model_id":"m1","count":1})", R"({"model_id":"m2"})"});
}

TEST_CASE("a batch of several megabytes, one row larger than the write blocks, comes back whole",
          "[file][sink]") {
  TempDir dir;
  std::string out = dir.Sub("stats");
  auto sink = OpenedSink(out);
  std::vector<std::string> rows;
  for (int i = 0; i < 30000; ++i) {
    rows.push_back(fmt::format(R"({{"model_id":"m{}","count":{}}})", i, i * 7) +
                   std::string(static_cast<size_t>(i % 200), ' '));
  }
  rows[12345] = R"({"model_id":"wide","note":")" + std::string(3 << 20, 'x') + R"("})";
  size_t bytes = 0;
  for (const auto& row : rows) bytes += row.size() + 1;
  REQUIRE(sink->Deliver(Batch(0, rows)));
  CHECK(std::filesystem::file_size(out + "/part-0000000000-stats.jsonl") == bytes);
  // Delivered only when the manifest's byte count is the part's size.
  CHECK(Delivered(*sink, 0));
  CHECK(Committed(out) == rows);
}

TEST_CASE("a batch without rows gets a manifest entry and no part file", "[file][sink]") {
  TempDir dir;
  auto sink = OpenedSink(dir.path());
  REQUIRE(sink->Deliver(Batch(4, {})));
  CHECK(Delivered(*sink, 4));
  CHECK_FALSE(std::filesystem::exists(dir.Sub(FileSinkPartName(4, "stats"))));
  auto batches = ReadFileSinkManifest(dir.path());
  REQUIRE(batches);
  CHECK(*batches == std::vector<int64_t>{4});
}

TEST_CASE("a redelivery after a crash before the manifest entry overwrites the part",
          "[file][sink]") {
  TempDir dir;
  {
    auto sink = OpenedSink(dir.path());
    REQUIRE(sink->Deliver(Batch(0, {R"({"n":0})"})));
  }
  // The crash left batch 1's part (half of it) and a temp file, but no manifest entry.
  WriteText(dir.Sub(FileSinkPartName(1, "stats")), "{\"n\":1}\n{\"n\":");
  WriteText(dir.Sub(".part-0000000002-stats.jsonl.tmp"), "{\"n\":2}\n");
  CHECK(Committed(dir.path()) == std::vector<std::string>{R"({"n":0})"});

  auto restarted = OpenedSink(dir.path());
  CHECK_FALSE(std::filesystem::exists(dir.Sub(".part-0000000002-stats.jsonl.tmp")));
  CHECK(Delivered(*restarted, 0));
  CHECK_FALSE(Delivered(*restarted, 1));
  REQUIRE(restarted->Deliver(Batch(1, {R"({"n":1})", R"({"n":1.5})"})));
  CHECK(Committed(dir.path()) ==
        std::vector<std::string>{R"({"n":0})", R"({"n":1})", R"({"n":1.5})"});
}

TEST_CASE("delivering a batch already in the manifest writes nothing again", "[file][sink]") {
  TempDir dir;
  auto sink = OpenedSink(dir.path());
  REQUIRE(sink->Deliver(Batch(3, {R"({"n":3})"})));
  REQUIRE(sink->Deliver(Batch(3, {R"({"n":"different"})"})));
  CHECK(Committed(dir.path()) == std::vector<std::string>{R"({"n":3})"});
}

TEST_CASE("committed rows come back in batch order, not name order", "[file][sink]") {
  TempDir dir;
  auto sink = OpenedSink(dir.path());
  for (int64_t batch : {10, 2, 1}) {
    REQUIRE(sink->Deliver(Batch(batch, {fmt::format(R"({{"batch":{}}})", batch)})));
  }
  CHECK(Committed(dir.path()) ==
        std::vector<std::string>{R"({"batch":1})", R"({"batch":2})", R"({"batch":10})"});
}

TEST_CASE("the file sink writes the rows of its own stream and output mode", "[file][sink]") {
  TempDir dir;
  auto alerts = OpenedSink(dir.Sub("alerts"), StreamKind::kAlerts);
  auto complete = OpenedSink(dir.Sub("complete"), StreamKind::kStats, OutputMode::kComplete);
  BatchOutput output = Batch(0, {R"({"kind":"update"})"});
  output.alerts.Add("m1", R"({"kind":"alert"})");
  output.stats_complete.Add("", R"({"kind":"complete"})");
  REQUIRE(alerts->Deliver(output));
  REQUIRE(complete->Deliver(output));
  CHECK(Committed(dir.Sub("alerts")) == std::vector<std::string>{R"({"kind":"alert"})"});
  CHECK(Committed(dir.Sub("complete")) == std::vector<std::string>{R"({"kind":"complete"})"});
}

TEST_CASE("a manifest entry whose part is missing is reported as corruption", "[file][sink]") {
  TempDir dir;
  auto sink = OpenedSink(dir.path());
  REQUIRE(sink->Deliver(Batch(0, {R"({"n":0})"})));
  std::filesystem::remove(dir.Sub(FileSinkPartName(0, "stats")));
  auto rows = ReadCommittedFileSinkRows(dir.path());
  REQUIRE_FALSE(rows);
  CHECK(rows.error().code() == ErrorCode::kCorruption);
}

TEST_CASE("deferred deliveries are visible at once and whole after Sync, and survive a restart",
          "[file][sink]") {
  TempDir dir;
  {
    auto sink = OpenedSink(dir.path());
    sink->DeferDurability(true);
    REQUIRE(sink->Deliver(Batch(0, {R"({"n":0})"})));
    REQUIRE(sink->Deliver(Batch(1, {})));
    // Readers see each batch as soon as Deliver returns, before any sync.
    CHECK(Delivered(*sink, 0));
    CHECK(Delivered(*sink, 1));
    CHECK(Committed(dir.path()) == std::vector<std::string>{R"({"n":0})"});
    REQUIRE(sink->Sync());
    REQUIRE(sink->Sync());  // nothing new: nothing to do
  }
  auto restarted = OpenedSink(dir.path());
  CHECK(Delivered(*restarted, 0));
  CHECK(Delivered(*restarted, 1));
}

TEST_CASE("a delivery that a machine crash cut before its sync counts as not delivered and is "
          "written again",
          "[file][sink]") {
  TempDir dir;
  {
    auto sink = OpenedSink(dir.path());
    sink->DeferDurability(true);
    REQUIRE(sink->Deliver(Batch(0, {R"({"n":0})"})));
    REQUIRE(sink->Sync());
    REQUIRE(sink->Deliver(Batch(1, {R"({"n":1})", R"({"n":1.5})"})));
    REQUIRE(sink->Deliver(Batch(2, {R"({"n":2})"})));
    REQUIRE(sink->Deliver(Batch(3, {R"({"n":3})"})));
  }
  // What a power loss may leave of unsynced writes: batch 1's entry renamed into place but its
  // part's data lost, batch 2's part gone, batch 3's entry torn (empty).
  WriteText(dir.Sub(FileSinkPartName(1, "stats")), "");
  std::filesystem::remove(dir.Sub(FileSinkPartName(2, "stats")));
  WriteText(dir.Sub("_driftd_manifest/3"), "");

  auto restarted = OpenedSink(dir.path());
  CHECK(Delivered(*restarted, 0));
  CHECK_FALSE(Delivered(*restarted, 1));
  CHECK_FALSE(Delivered(*restarted, 2));
  CHECK_FALSE(Delivered(*restarted, 3));
  // Recovery delivers them again from the checkpoint's outbox: the same rows, once.
  REQUIRE(restarted->Deliver(Batch(1, {R"({"n":1})", R"({"n":1.5})"})));
  REQUIRE(restarted->Deliver(Batch(2, {R"({"n":2})"})));
  REQUIRE(restarted->Deliver(Batch(3, {R"({"n":3})"})));
  CHECK(Committed(dir.path()) == std::vector<std::string>{R"({"n":0})", R"({"n":1})",
                                                           R"({"n":1.5})", R"({"n":2})",
                                                           R"({"n":3})"});
}

TEST_CASE("two file sinks may not share a directory", "[file][sink]") {
  TempDir dir;
  PipelineSpec pipeline;
  pipeline.sinks.push_back(FileSinkSpec("stats", dir.Sub("out")));
  pipeline.sinks.push_back(FileSinkSpec("alerts", dir.Sub("out/"), StreamKind::kAlerts));
  auto sink = CreateFileSink(pipeline, pipeline.sinks[1]);
  REQUIRE_FALSE(sink);
  CHECK(sink.error().code() == ErrorCode::kConfig);
  CHECK(FileSinkPartName(7, "my sink/1") == "part-0000000007-my_sink_1.jsonl");
}

}  // namespace
}  // namespace driftd
