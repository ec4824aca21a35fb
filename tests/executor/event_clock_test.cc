#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/executor/event_clock.h"

namespace driftd {
namespace {

constexpr int64_t kSecond = 1'000'000;

// A batch of rows of schema {event_time: timestamp}, each from a given partition index.
struct Rows {
  RecordBatch batch;
  explicit Rows(const std::vector<std::pair<uint32_t, int64_t>>& rows) {
    Schema schema;
    schema.fields.push_back({"event_time", FieldType::kTimestamp, true});
    batch.Reset(schema);
    for (const auto& [partition, seconds] : rows) {
      batch.columns[0].valid.push_back(1);
      batch.columns[0].i64.push_back(seconds * kSecond);
      batch.positions.push_back({partition, 0});
    }
    batch.num_rows = rows.size();
  }
};

std::string Name(uint32_t index) { return "p" + std::to_string(index); }

EventClock ClockWithDelay(int64_t delay_seconds, int64_t idle_ms = 0) {
  EventClockOptions options;
  options.column = 0;
  options.delay_us = delay_seconds * kSecond;
  options.idle_timeout_ms = idle_ms;
  return EventClock(options);
}

// A clock with a 1 s idle timeout after a first batch read p0 up to 100 s and p1 up to 10 s.
EventClock ClockAfterFirstBatch() {
  EventClock clock = ClockWithDelay(0, /*idle_ms=*/1000);
  clock.BeginBatch({{"p0", false, true}, {"p1", false, true}}, 0);
  Rows first({{0, 100}, {1, 10}});
  RowTimes times;
  clock.Stamp(first.batch, Name, times);
  clock.CommitBatch();
  return clock;
}

TEST_CASE("the watermark is the slowest partition's event time minus the delay",
          "[clock]") {
  EventClock clock = ClockWithDelay(5);
  clock.BeginBatch({{"p0", false, true}, {"p1", false, true}}, 0);
  Rows rows({{0, 100}, {1, 40}, {0, 120}});
  RowTimes times;
  clock.Stamp(rows.batch, Name, times);
  CHECK(clock.NextWatermark() == 35 * kSecond);
  CHECK(clock.watermark_us() == INT64_MIN);  // moves only when the batch commits
  clock.CommitBatch();
  CHECK(clock.watermark_us() == 35 * kSecond);
}

TEST_CASE("an event time near the smallest a producer can write does not wrap the watermark "
          "around to the largest",
          "[clock]") {
  EventClock clock = ClockWithDelay(600);
  clock.BeginBatch({{"p0", false, true}}, 0);
  Rows rows({{0, 0}, {0, 0}});
  rows.batch.columns[0].i64[0] = INT64_MIN + 1;
  rows.batch.columns[0].i64[1] = 100 * kSecond;
  RowTimes times;
  clock.Stamp(rows.batch, Name, times);
  // The second row's own partition watermark is the first's time less the delay, saturated.
  CHECK(times.late_before[1] == INT64_MIN + 1);
  CHECK(clock.NextWatermark() == (100 - 600) * kSecond);

  EventClock alone = ClockWithDelay(600);
  alone.BeginBatch({{"p0", false, true}}, 0);
  Rows first({{0, 0}});
  first.batch.columns[0].i64[0] = INT64_MIN + 1;
  alone.Stamp(first.batch, Name, times);
  CHECK(alone.NextWatermark() == INT64_MIN + 1);
}

TEST_CASE("a partition with records not read yet holds the watermark back", "[clock]") {
  EventClock clock = ClockWithDelay(0);
  // p1 has records waiting but none was read in this batch.
  clock.BeginBatch({{"p0", false, true}, {"p1", true, false}}, 0);
  Rows rows({{0, 100}});
  RowTimes times;
  clock.Stamp(rows.batch, Name, times);
  CHECK(clock.NextWatermark() == INT64_MIN);
  // An empty partition (no records, none waiting) does not count.
  clock.BeginBatch({{"p0", false, false}, {"p1", false, false}}, 0);
  CHECK(clock.NextWatermark() == 100 * kSecond);
}

TEST_CASE("a row is late by its own partition's watermark, whatever else was read",
          "[clock]") {
  EventClock clock = ClockWithDelay(10);
  clock.BeginBatch({{"p0", false, true}, {"p1", false, true}}, 0);
  // p0 runs ahead to 100 s; p1's rows are judged only by p1's own earlier rows.
  Rows rows({{0, 100}, {1, 50}, {1, 60}, {1, 45}, {0, 85}});
  RowTimes times;
  clock.Stamp(rows.batch, Name, times);
  CHECK(times.late_before[0] == INT64_MIN);      // first row of p0
  CHECK(times.late_before[1] == INT64_MIN);      // first row of p1
  CHECK(times.late_before[2] == 40 * kSecond);   // p1 so far: 50 - 10
  CHECK(times.late_before[3] == 50 * kSecond);   // p1 so far: 60 - 10
  CHECK(times.late_before[4] == 90 * kSecond);   // p0 so far: 100 - 10
  CHECK(times.event_us[3] == 45 * kSecond);
}

TEST_CASE("an idle partition stops holding the watermark back, and never moves it back",
          "[clock]") {
  EventClock clock = ClockAfterFirstBatch();
  RowTimes times;
  CHECK(clock.watermark_us() == 10 * kSecond);
  // p1 has nothing to read; until the timeout it still holds the watermark.
  clock.BeginBatch({{"p0", false, true}, {"p1", false, false}}, 500);
  Rows second({{0, 200}});
  clock.Stamp(second.batch, Name, times);
  CHECK(clock.NextWatermark() == 10 * kSecond);
  clock.BeginBatch({{"p0", false, false}, {"p1", false, false}}, 1500);
  CHECK(clock.NextWatermark() == 200 * kSecond);
  clock.CommitBatch();
  // p1 comes back with old records: they are late by the query's watermark.
  clock.BeginBatch({{"p0", false, false}, {"p1", false, true}}, 1600);
  Rows third({{1, 20}});
  clock.Stamp(third.batch, Name, times);
  CHECK(times.late_before[0] == 200 * kSecond);
  CHECK(clock.NextWatermark() == 200 * kSecond);
}

// A partition that leaves the plan (its topic deleted, a pattern that no longer matches it) held
// the watermark at its last event time for good.
TEST_CASE("a partition the plan no longer lists stops holding the watermark once idle",
          "[clock]") {
  EventClock clock = ClockAfterFirstBatch();
  RowTimes times;
  CHECK(clock.watermark_us() == 10 * kSecond);
  // p1 is gone from the plan: it holds the watermark until the idle timeout, then not.
  clock.BeginBatch({{"p0", false, true}}, 500);
  Rows second({{0, 200}});
  clock.Stamp(second.batch, Name, times);
  CHECK(clock.NextWatermark() == 10 * kSecond);
  clock.BeginBatch({{"p0", false, false}}, 1500);
  CHECK(clock.NextWatermark() == 200 * kSecond);
  CHECK(clock.StateOf("p1").idle);
  // So does a partition restored from the checkpoint that the plan never lists.
  EventClock restored = ClockWithDelay(0, /*idle_ms=*/1000);
  restored.Restore({{"p0", 100 * kSecond}, {"gone", 50 * kSecond}}, 50 * kSecond);
  restored.BeginBatch({{"p0", false, false}}, 0);
  CHECK(restored.NextWatermark() == 50 * kSecond);
  restored.BeginBatch({{"p0", false, false}}, 1000);
  CHECK(restored.NextWatermark() == 100 * kSecond);
}

// Scaled out, a task's clock hears of its partitions only from their readers' marks. A partition
// whose topic was deleted has no reader any more, so no mark ever said it went idle: it held
// the task's watermark at its last mark for good.
TEST_CASE("a task's clock stops waiting for a partition that left the source once idle, and "
          "goes on waiting for one that is listed but not reported",
          "[clock]") {
  EventClock clock = ClockWithDelay(0, /*idle_ms=*/1000);
  for (const char* name : {"a-0", "a-1", "b-0"}) clock.Expect(name);
  clock.Report("a-0", 100 * kSecond, false, false);
  clock.Report("a-1", 80 * kSecond, false, false);
  clock.Report("b-0", 10 * kSecond, false, false);
  clock.CommitBatch();
  CHECK(clock.watermark_us() == 10 * kSecond);
  // Topic b is deleted: b-0 holds the watermark until the idle timeout, then not.
  const std::vector<std::string> listed = {"a-0", "a-1"};
  clock.Delist(listed, 5000);
  CHECK(clock.NextWatermark() == 10 * kSecond);
  clock.Delist(listed, 5999);
  CHECK(clock.NextWatermark() == 10 * kSecond);
  clock.Delist(listed, 6000);
  CHECK(clock.StateOf("b-0").idle);
  CHECK(clock.NextWatermark() == 80 * kSecond);
  clock.CommitBatch();
  // A partition still listed is its reader's to report: it keeps the watermark however long
  // its reader is silent (it may be taking over the partition), and a partition listed again
  // (its topic made again) counts once its reader reports it.
  clock.Delist(listed, 60'000);
  CHECK_FALSE(clock.StateOf("a-1").idle);
  CHECK(clock.NextWatermark() == 80 * kSecond);
  clock.Report("b-0", 20 * kSecond, false, false);
  CHECK_FALSE(clock.StateOf("b-0").idle);
  CHECK(clock.NextWatermark() == 80 * kSecond);  // never back
  // A never-read partition the watermark waits for (Expect: its reader may not have reported
  // yet) waits on through a gap in the listing shorter than the idle timeout, and two short
  // gaps do not add up; it stops waiting once it has been gone for the idle timeout.
  EventClock fresh = ClockWithDelay(0, /*idle_ms=*/1000);
  fresh.Expect("a-0");
  fresh.Expect("gone-0");
  fresh.Report("a-0", 50 * kSecond, false, false);
  CHECK(fresh.NextWatermark() == INT64_MIN);
  fresh.Delist({"a-0"}, 0);
  CHECK(fresh.NextWatermark() == INT64_MIN);
  fresh.Delist({"a-0", "gone-0"}, 500);
  fresh.Delist({"a-0"}, 1200);
  CHECK_FALSE(fresh.StateOf("gone-0").idle);
  CHECK(fresh.NextWatermark() == INT64_MIN);
  fresh.Delist({"a-0"}, 2200);
  CHECK(fresh.StateOf("gone-0").idle);
  CHECK(fresh.NextWatermark() == 50 * kSecond);
  // Listed again, a partition its reader last reported idle is idle again, not waited for.
  EventClock relisted = ClockWithDelay(0, /*idle_ms=*/1000);
  relisted.Report("a-0", 50 * kSecond, false, false);
  relisted.Report("b-0", 10 * kSecond, false, /*idle=*/true);
  relisted.Delist({"a-0"}, 0);
  relisted.Delist({"a-0", "b-0"}, 100);
  CHECK(relisted.StateOf("b-0").idle);
  CHECK(relisted.NextWatermark() == 50 * kSecond);
}

TEST_CASE("the clock restores each partition's maximum from the commit", "[clock]") {
  EventClock clock = ClockWithDelay(5);
  clock.Restore({{"p0", 100 * kSecond}, {"p1", 70 * kSecond}}, 65 * kSecond);
  CHECK(clock.watermark_us() == 65 * kSecond);
  clock.BeginBatch({{"p0", false, true}, {"p1", false, false}}, 0);
  Rows rows({{0, 90}});
  RowTimes times;
  clock.Stamp(rows.batch, Name, times);
  CHECK(times.late_before[0] == 95 * kSecond);
  CHECK(clock.MaxEventTimes().at("p1") == 70 * kSecond);
}

}  // namespace
}  // namespace driftd
