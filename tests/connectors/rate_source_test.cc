#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "connectors/connector_factories.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

using testing::ReadRange;
using testing::SourcePipeline;
using testing::Texts;

// 2026-11-29T10:15:02.123Z
constexpr const char* kStartMs = "1795947302123";

std::unique_ptr<Source> StartedRate(const std::map<std::string, std::string>& options,
                                    const SourceOffsets& committed = {}) {
  auto source = CreateRateSource(SourcePipeline("rate", options));
  REQUIRE(source);
  REQUIRE((*source)->Start(committed));
  return std::move(*source);
}

TEST_CASE("the plain rate source writes Spark's timestamp and value rows", "[rate][source]") {
  auto source = StartedRate({{"rowsPerSecond", "4"},
                             {"realTime", "false"},
                             {"startTimeMs", kStartMs},
                             {"maxRowsPerTrigger", "3"}});
  auto start = source->InitialOffsets();
  REQUIRE(start);
  CHECK(*start == SourceOffsets{{"rate-0", 0}, {"startTimeMs", 1795947302123}});
  auto end = source->PlanBatch(*start);
  REQUIRE(end);
  CHECK(end->at("rate-0") == 3);
  auto records = ReadRange(*source, *start, *end);
  CHECK(Texts(records) ==
        std::vector<std::string>{R"({"timestamp":"2026-11-29T10:15:02.123Z","value":0})",
                                 R"({"timestamp":"2026-11-29T10:15:02.373Z","value":1})",
                                 R"({"timestamp":"2026-11-29T10:15:02.623Z","value":2})"});
  CHECK(records[2].position.partition == 0);
  CHECK(records[2].position.offset == 2);
}

TEST_CASE("the rate source spreads rows over partitions and plans whole row prefixes",
          "[rate][source]") {
  auto source = StartedRate({{"numPartitions", "3"},
                             {"realTime", "false"},
                             {"maxRowsPerTrigger", "7"},
                             {"totalRows", "10"},
                             {"startTimeMs", kStartMs}});
  SourceOffsets start = *source->InitialOffsets();
  auto first = source->PlanBatch(start);
  REQUIRE(first);
  CHECK(first->at("rate-0") == 3);  // rows 0, 3, 6
  CHECK(first->at("rate-1") == 2);  // rows 1, 4
  CHECK(first->at("rate-2") == 2);  // rows 2, 5
  auto records = ReadRange(*source, start, *first);
  REQUIRE(records.size() == 7);
  CHECK(records[4].position.partition == 1);
  CHECK(records[4].position.offset == 1);
  CHECK_THAT(records[4].text, Catch::Contains("\"value\":4"));

  // totalRows ends the stream: 3 more rows, then no new data.
  auto second = source->PlanBatch(*first);
  REQUIRE(second);
  CHECK(ReadRange(*source, *first, *second).size() == 3);
  auto third = source->PlanBatch(*second);
  REQUIRE(third);
  CHECK(*third == *second);
}

TEST_CASE("reading a rate range twice yields identical inference records", "[rate][source]") {
  std::map<std::string, std::string> options = {
      {"mode", "inference"},     {"rowsPerSecond", "1000"},
      {"realTime", "false"},     {"maxRowsPerTrigger", "5000"},
      {"startTimeMs", kStartMs}, {"drift", "model-3 feature 0 shifts by 1.5 sigma after 2 s"}};
  auto source = StartedRate(options);
  SourceOffsets start = *source->InitialOffsets();
  SourceOffsets end = *source->PlanBatch(start);
  auto once = Texts(ReadRange(*source, start, end, 4096));
  auto twice = Texts(ReadRange(*source, start, end, 1 << 20));
  REQUIRE(once.size() == 5000);
  CHECK(once == twice);
  CHECK_THAT(once[0], Catch::StartsWith("{\"model_id\":\"model-"));
  // A second process with the same options writes the same bytes.
  auto other = StartedRate(options);
  CHECK(Texts(ReadRange(*other, start, end)) == once);
}

TEST_CASE("a restarted rate source continues the same timeline from its committed offsets",
          "[rate][source]") {
  std::map<std::string, std::string> options = {{"mode", "inference"},
                                                {"realTime", "false"},
                                                {"maxRowsPerTrigger", "100"},
                                                {"numPartitions", "2"}};
  auto first = StartedRate(options);  // start time: the wall clock now
  SourceOffsets start = *first->InitialOffsets();
  SourceOffsets middle = *first->PlanBatch(start);
  SourceOffsets end = *first->PlanBatch(middle);
  auto expected = Texts(ReadRange(*first, middle, end));

  // The restart gets only the committed offsets, which carry the start time.
  auto restarted = StartedRate(options, middle);
  CHECK(*restarted->PlanBatch(middle) == end);
  CHECK(Texts(ReadRange(*restarted, middle, end)) == expected);
}

TEST_CASE("a rate checkpoint written with another partition count is refused", "[rate][source]") {
  auto source = CreateRateSource(SourcePipeline("rate", {{"numPartitions", "2"}}));
  REQUIRE(source);
  auto started = (*source)->Start({{"rate-0", 5}, {"startTimeMs", 1}});
  REQUIRE_FALSE(started);
  CHECK(started.error().code() == ErrorCode::kIncompatible);
}

TEST_CASE("real-time rows become due as time passes, capped per trigger", "[rate][source]") {
  auto begin = std::chrono::steady_clock::now();
  auto source = StartedRate({{"rowsPerSecond", "2000"}, {"maxRowsPerTrigger", "50"}});
  SourceOffsets start = *source->InitialOffsets();
  // Poll until rows are due rather than sleeping a fixed time.
  SourceOffsets end = start;
  auto deadline = begin + std::chrono::seconds(5);
  while (end == start && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    end = *source->PlanBatch(start);
  }
  REQUIRE(end != start);
  auto elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - begin)
                        .count();
  int64_t rows = end.at("rate-0");
  CHECK(rows <= std::min<int64_t>(50, 2 * (elapsed_ms + 1)));
  CHECK(rows >= 1);
}

TEST_CASE("availableNow freezes the rate source at the rows due at that moment", "[rate][source]") {
  auto source =
      StartedRate({{"realTime", "false"}, {"totalRows", "25"}, {"maxRowsPerTrigger", "10"}});
  REQUIRE(source->FreezeAvailable());
  SourceOffsets position = *source->InitialOffsets();
  int batches = 0;
  while (true) {
    SourceOffsets next = *source->PlanBatch(position);
    if (next == position) break;
    position = next;
    ++batches;
  }
  CHECK(batches == 3);
  CHECK(position.at("rate-0") == 25);

  auto endless = StartedRate({{"realTime", "false"}});
  auto frozen = endless->FreezeAvailable();
  REQUIRE_FALSE(frozen);
  CHECK_THAT(frozen.error().message(), Catch::Contains("totalRows"));
}

TEST_CASE("bad rate options fail at creation", "[rate][source]") {
  auto bad_drift = CreateRateSource(SourcePipeline(
      "rate", {{"mode", "inference"}, {"drift", "model-3 feature 0 shifts by 1.5 after 60 s"}}));
  REQUIRE_FALSE(bad_drift);
  CHECK(bad_drift.error().code() == ErrorCode::kConfig);
  auto no_model = CreateRateSource(
      SourcePipeline("rate", {{"mode", "inference"},
                              {"models", "2"},
                              {"drift", "model-3 feature 0 shifts by 1 sigma after 60 s"}}));
  REQUIRE_FALSE(no_model);
  auto plain_drift = CreateRateSource(
      SourcePipeline("rate", {{"drift", "model-0 feature 0 shifts by 1 sigma after 1 s"}}));
  REQUIRE_FALSE(plain_drift);
  auto zero_rate = CreateRateSource(SourcePipeline("rate", {{"rowsPerSecond", "0"}}));
  REQUIRE_FALSE(zero_rate);
}

}  // namespace
}  // namespace driftd
