#include "state/checkpoint_inspect.h"

#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <catch2/catch.hpp>

#include "state/checkpoint_store.h"
#include "tests/state/temp_dir.h"

namespace driftd {
namespace {

using Catch::Contains;

// 2025-11-29T09:24:22.123Z
constexpr int64_t kCreatedMs = 1'764'408'262'123;
constexpr int64_t kWatermarkUs = 1'764'408'000'000'000;  // 2025-11-29T09:20:00.000Z

/// A checkpoint as a pipeline leaves it: metadata, 12 commits (history 100), 3 state entries,
/// batch 10 delivered to one of its two sinks and batch 11 to none.
void WritePipelineCheckpoint(const std::string& dir) {
  CheckpointOptions options;
  options.sync = false;
  auto store = OpenCheckpointStore(dir, options);
  if (!store) FAIL(store.error().message());
  CheckpointMetadata metadata;
  metadata.pipeline_name = "fraud-model-drift";
  metadata.fingerprint_json = R"({"source": "kafka", "keys": ["model_id"]})";
  metadata.format_version = 1;
  metadata.created_at_ms = kCreatedMs;
  REQUIRE((*store)->WriteMetadata(metadata));
  for (int64_t id = 0; id < 12; ++id) {
    BatchWrite write;
    write.commit.batch_id = id;
    write.commit.start = {{"inference-logs-0", id * 100}};
    write.commit.end = {{"inference-logs-0", (id + 1) * 100}};
    write.commit.watermark_us = id < 11 ? INT64_MIN : kWatermarkUs;
    write.commit.committed_at_ms = kCreatedMs + 1000 * (id + 1);
    if (id == 0) write.state_puts = {{"m1/f1", "12345"}, {"m1/f2", "123"}, {"m2/f1", "1"}};
    if (id >= 10) {
      write.outbox.payload = "output";
      write.outbox.pending_sinks = {"kafka-alerts", "file-stats"};
    }
    REQUIRE((*store)->Commit(write));
  }
  REQUIRE((*store)->MarkDelivered(10, "kafka-alerts"));
}

TEST_CASE("the inspect report states the checkpoint's facts", "[state][inspect]") {
  testing::TempDir tmp;
  WritePipelineCheckpoint(tmp.path());
  auto report = InspectCheckpoint(tmp.path(), /*json=*/false);
  if (!report) FAIL(report.error().message());
  const std::string& text = *report;
  INFO(text);
  CHECK_THAT(text, Contains(tmp.path()));
  CHECK_THAT(text, Contains("fraud-model-drift"));
  CHECK_THAT(text, Contains(R"({"source": "kafka", "keys": ["model_id"]})"));
  CHECK_THAT(text, Contains("created         2025-11-29T09:24:22.123Z"));
  CHECK_THAT(text, Contains("last batch      11, committed 2025-11-29T09:24:34.123Z"));
  CHECK_THAT(text, Contains(R"(start offsets {"inference-logs-0":1100})"));
  CHECK_THAT(text, Contains(R"(end offsets   {"inference-logs-0":1200})"));
  CHECK_THAT(text, Contains("2025-11-29T09:20:00.000Z"));
  CHECK_THAT(text, Contains("3 keys, 24 bytes"));
  CHECK_THAT(text, Contains("2 undelivered batches"));
  CHECK_THAT(text, Contains("batch 10"));
  CHECK_THAT(text, Contains("pending sinks: file-stats ("));
  CHECK_THAT(text, Contains("pending sinks: file-stats, kafka-alerts"));
  // The last 10 commits are listed (11 down to 2), older ones are not.
  CHECK_THAT(text, Contains(R"({"inference-logs-0":300})"));
  CHECK_THAT(text, !Contains(R"({"inference-logs-0":200})"));
}

TEST_CASE("the JSON inspect report is one object with the same facts", "[state][inspect]") {
  testing::TempDir tmp;
  WritePipelineCheckpoint(tmp.path());
  auto report = InspectCheckpoint(tmp.path(), /*json=*/true);
  if (!report) FAIL(report.error().message());
  INFO(*report);

  simdjson::dom::parser parser;
  simdjson::dom::element root;
  REQUIRE(parser.parse(*report).get(root) == simdjson::SUCCESS);
  CHECK(std::string_view(root["pipeline"]) == "fraud-model-drift");
  CHECK(std::string_view(root["fingerprint"]["source"]) == "kafka");
  CHECK(int64_t(root["createdAtMs"]) == kCreatedMs);
  CHECK(int64_t(root["lastBatch"]["batchId"]) == 11);
  CHECK(int64_t(root["lastBatch"]["startOffsets"]["inference-logs-0"]) == 1100);
  CHECK(int64_t(root["lastBatch"]["endOffsets"]["inference-logs-0"]) == 1200);
  CHECK(int64_t(root["lastBatch"]["watermarkUs"]) == kWatermarkUs);
  CHECK(int64_t(root["state"]["keys"]) == 3);
  CHECK(int64_t(root["state"]["bytes"]) == 5 + 5 + 5 + 3 + 5 + 1);

  simdjson::dom::array outbox = root["outbox"];
  REQUIRE(outbox.size() == 2);
  CHECK(int64_t(outbox.at(0)["batchId"]) == 10);
  simdjson::dom::array sinks = outbox.at(0)["pendingSinks"];
  REQUIRE(sinks.size() == 1);
  CHECK(std::string_view(sinks.at(0)) == "file-stats");
  CHECK(simdjson::dom::array(outbox.at(1)["pendingSinks"]).size() == 2);

  simdjson::dom::array recent = root["recentCommits"];
  REQUIRE(recent.size() == 10);
  CHECK(int64_t(recent.at(0)["batchId"]) == 11);
  CHECK(int64_t(recent.at(9)["batchId"]) == 2);
  CHECK(recent.at(9)["watermarkUs"].is_null());
}

TEST_CASE("inspecting a fresh checkpoint reports that nothing was committed", "[state][inspect]") {
  testing::TempDir tmp;
  {
    auto store = OpenCheckpointStore(tmp.path(), CheckpointOptions());
    REQUIRE(store);
  }
  auto text = InspectCheckpoint(tmp.path(), false);
  if (!text) FAIL(text.error().message());
  CHECK_THAT(*text, Contains("none committed") && Contains("no metadata"));
  auto json = InspectCheckpoint(tmp.path(), true);
  REQUIRE(json);
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  REQUIRE(parser.parse(*json).get(root) == simdjson::SUCCESS);
  CHECK(root["lastBatch"].is_null());
  CHECK(root["pipeline"].is_null());
}

TEST_CASE("inspecting a missing checkpoint fails and names it", "[state][inspect]") {
  testing::TempDir tmp;
  auto report = InspectCheckpoint(tmp.Sub("missing"), false);
  REQUIRE_FALSE(report);
  CHECK_THAT(report.error().message(), Contains(tmp.Sub("missing")));
}

}  // namespace
}  // namespace driftd

namespace driftd {
namespace {

// The checkpoint's table files (*.sst), largest first.
std::vector<std::filesystem::path> TableFiles(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".sst") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
    return std::filesystem::file_size(a) > std::filesystem::file_size(b);
  });
  return files;
}

}  // namespace

TEST_CASE("inspect reads every table file and reports a damaged checkpoint as corrupt",
          "[state][inspect]") {
  for (const bool truncate : {false, true}) {
    INFO((truncate ? "a truncated table file" : "a flipped byte in a table file"));
    testing::TempDir tmp;
    WritePipelineCheckpoint(tmp.path());
    {
      // Opening again moves what the log holds into a table file.
      auto store = OpenCheckpointStore(tmp.path(), CheckpointOptions{});
      REQUIRE(store);
    }
    const auto tables = TableFiles(tmp.path());
    REQUIRE_FALSE(tables.empty());
    auto good = InspectCheckpoint(tmp.path(), /*json=*/false);
    if (!good) FAIL(good.error().message());
    CHECK_THAT(*good, Contains("checksums       verified"));

    const std::filesystem::path table = tables.front();
    const auto size = std::filesystem::file_size(table);
    if (truncate) {
      std::filesystem::resize_file(table, size / 2);
    } else {
      // A byte in the first data block: the footer and index stay readable, so only reading
      // the block and checking its checksum notices.
      std::fstream file(table, std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(20);
      char byte = 0;
      file.read(&byte, 1);
      byte = static_cast<char>(byte ^ 0x5a);
      file.seekp(20);
      file.write(&byte, 1);
    }
    auto bad = InspectCheckpoint(tmp.path(), /*json=*/false);
    REQUIRE_FALSE(bad);
    INFO(bad.error().message());
    CHECK(bad.error().code() == ErrorCode::kCorruption);
  }
}

TEST_CASE("inspect says when the write-ahead log was cut short, which a writer would pass over",
          "[state][inspect]") {
  testing::TempDir tmp;
  WritePipelineCheckpoint(tmp.path());
  auto whole = InspectCheckpoint(tmp.path(), /*json=*/true);
  if (!whole) FAIL(whole.error().message());
  CHECK_THAT(*whole, Contains("\"walTailDamage\":null"));

  // The log's last records cut off: the commits they held are gone from every open.
  std::filesystem::path log;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    if (entry.path().extension() == ".log") log = entry.path();
  }
  REQUIRE_FALSE(log.empty());
  std::filesystem::resize_file(log, std::filesystem::file_size(log) - 100);
  auto text = InspectCheckpoint(tmp.path(), /*json=*/false);
  if (!text) FAIL(text.error().message());
  INFO(*text);
  CHECK_THAT(*text, Contains("last batch      10,"));
  CHECK_THAT(*text, Contains("write-ahead log ends in a damaged or incomplete record"));
  CHECK_THAT(*text, Contains("restore the checkpoint from a backup"));
  auto json = InspectCheckpoint(tmp.path(), /*json=*/true);
  if (!json) FAIL(json.error().message());
  CHECK_THAT(*json, Contains("\"walTailDamage\":\"Corruption"));
}

}  // namespace driftd
