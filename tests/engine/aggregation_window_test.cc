// Golden tests of event-time windows and the watermark at the Aggregator level, on out-of-order
// data, with expected outputs computed by hand (engine/EVENT_TIME.md states the rules).
// Times are seconds after kT0; a window [a,b) closes when the watermark reaches b.
#include <catch2/catch.hpp>

#include <set>

#include "tests/engine/aggregation_test_util.h"

namespace driftd::testing {
namespace {

// Tumbling windows of 10 s, watermark delay 5 s. The batches, with the watermark each one runs
// under (computed from the batches before it). All rows are of one partition, so a row is also
// judged by the rows before it in its batch (the partition's watermark just before it):
//   b0 wm none: m1@3 v1, m1@12 v2, m2@7 v4, m1@1 v8                       max 12 -> wm 7
//   b1 wm 7:    m1@7 v16 (exactly at the watermark; its window [0,10) is open), m1@9.5 v64,
//               m2@15 v32 (after it, a row of [0,10) would be late)        max 15 -> wm 10
//   b2 wm 10:   m1@9.999999 v128 (1 us behind the watermark; [0,10) closed: dropped),
//               m2@10 v256 (exactly at the watermark; [10,20) open), m1@25 v512,
//               m1 with a null event time v1024 (counted, not aggregated) max 25 -> wm 20
//   b3 wm 20:   no data: [10,20) windows are closable
//   b4 wm 20:   m2@19 v2048 ([10,20) closed: dropped), m2@21 v4096          max 21 -> wm 20
std::vector<std::vector<std::string>> TumblingBatches() {
  return {
      {Row("m1", 3, 1), Row("m1", 12, 2), Row("m2", 7, 4), Row("m1", 1, 8)},
      {Row("m1", 7, 16), Row("m1", 9.5, 64), Row("m2", 15, 32)},
      {Row("m1", 9.999999, 128), Row("m2", 10, 256), Row("m1", 25, 512),
       RowWithoutTime("m1", 1024)},
      {},
      {Row("m2", 19, 2048), Row("m2", 21, 4096)},
  };
}

TEST_CASE("tumbling windows in update mode emit the windows each batch changed",
          "[aggregation][window][watermark]") {
  Driver driver(TestQuery(10, 10, 5), OutputMode::kUpdate);
  auto batches = TumblingBatches();

  BatchResult b0 = driver.Batch(batches[0]);
  CHECK(b0.rows == Rows{"m1 [0,10) n=2 sum=9", "m1 [10,20) n=1 sum=2", "m2 [0,10) n=1 sum=4"});
  CHECK(b0.watermark_after_us == AtSeconds(7));

  BatchResult b1 = driver.Batch(batches[1]);
  CHECK(b1.rows == Rows{"m1 [0,10) n=4 sum=89", "m2 [10,20) n=1 sum=32"});
  CHECK(b1.dropped == 0);
  CHECK(b1.watermark_after_us == AtSeconds(10));

  BatchResult b2 = driver.Batch(batches[2]);
  CHECK(b2.rows == Rows{"m1 [20,30) n=1 sum=512", "m2 [10,20) n=2 sum=288"});
  CHECK(b2.dropped == 1);
  CHECK(b2.without_event_time == 1);
  CHECK(b2.deletes == 2);  // [0,10) of m1 and m2: behind the watermark, state deleted
  CHECK(b2.watermark_after_us == AtSeconds(20));

  REQUIRE(driver.aggregator().HasClosableWindows(driver.watermark_us()));
  BatchResult b3 = driver.Batch(batches[3]);
  CHECK(b3.rows.empty());
  CHECK(b3.deletes == 2);
  CHECK_FALSE(driver.aggregator().HasClosableWindows(driver.watermark_us()));

  BatchResult b4 = driver.Batch(batches[4]);
  CHECK(b4.rows == Rows{"m2 [20,30) n=1 sum=4096"});
  CHECK(b4.dropped == 1);
  CHECK(b4.watermark_after_us == AtSeconds(20));  // never moves back
  CHECK(driver.aggregator().num_groups() == 2);
  CHECK(driver.state().size() == 2);
}

TEST_CASE(
    "tumbling windows in append mode emit each window once, when the watermark passes "
    "its end",
    "[aggregation][window][watermark]") {
  Driver driver(TestQuery(10, 10, 5), OutputMode::kAppend);
  auto batches = TumblingBatches();
  CHECK(driver.Batch(batches[0]).rows.empty());
  CHECK(driver.Batch(batches[1]).rows.empty());  // wm 7: no window ends at or before 7
  // wm 10 reaches the end of [0,10): final, with the row that was exactly at the watermark in
  // b1 and without the row 1 us behind it in b2.
  BatchResult b2 = driver.Batch(batches[2]);
  CHECK(b2.rows == Rows{"m1 [0,10) n=4 sum=89", "m2 [0,10) n=1 sum=4"});
  CHECK(b2.dropped == 1);
  // The no-data batch emits [10,20) without waiting for new data.
  BatchResult b3 = driver.Batch(batches[3]);
  CHECK(b3.rows == Rows{"m1 [10,20) n=1 sum=2", "m2 [10,20) n=2 sum=288"});
  BatchResult b4 = driver.Batch(batches[4]);
  CHECK(b4.rows.empty());
  CHECK(b4.dropped == 1);
  // Nothing is emitted twice, even when the watermark moves on.
  CHECK(driver.Batch({Row("m3", 45, 1)}).rows.empty());  // wm 20 -> 40
  BatchResult last = driver.Batch({});
  CHECK(last.rows == Rows{"m1 [20,30) n=1 sum=512", "m2 [20,30) n=1 sum=4096"});
  CHECK(driver.aggregator().num_groups() == 1);  // m3 [40,50) is still open
}

TEST_CASE(
    "tumbling windows in complete mode keep and emit every window, late rows still "
    "dropped",
    "[aggregation][window][watermark]") {
  Driver driver(TestQuery(10, 10, 5), OutputMode::kComplete);
  auto batches = TumblingBatches();
  CHECK(driver.Batch(batches[0]).rows ==
        Rows{"m1 [0,10) n=2 sum=9", "m1 [10,20) n=1 sum=2", "m2 [0,10) n=1 sum=4"});
  CHECK(driver.Batch(batches[1]).rows == Rows{"m1 [0,10) n=4 sum=89", "m1 [10,20) n=1 sum=2",
                                              "m2 [0,10) n=1 sum=4", "m2 [10,20) n=1 sum=32"});
  BatchResult b2 = driver.Batch(batches[2]);
  CHECK(b2.rows == Rows{"m1 [0,10) n=4 sum=89", "m1 [10,20) n=1 sum=2", "m1 [20,30) n=1 sum=512",
                        "m2 [0,10) n=1 sum=4", "m2 [10,20) n=2 sum=288"});
  CHECK(b2.dropped == 1);
  CHECK(b2.deletes == 0);
  // Windows closed in complete mode are not "closable" again: no endless no-data batches.
  BatchResult b3 = driver.Batch(batches[3]);
  CHECK(b3.rows.size() == 5);
  CHECK_FALSE(driver.aggregator().HasClosableWindows(driver.watermark_us()));
  BatchResult b4 = driver.Batch(batches[4]);
  CHECK(b4.rows == Rows{"m1 [0,10) n=4 sum=89", "m1 [10,20) n=1 sum=2", "m1 [20,30) n=1 sum=512",
                        "m2 [0,10) n=1 sum=4", "m2 [10,20) n=2 sum=288",
                        "m2 [20,30) n=1 sum=4096"});
  CHECK(b4.dropped == 1);
  CHECK(driver.state().size() == 6);
}

// Sliding windows of 10 s every 5 s, delay 5 s: a row at t is in [floor(t/5)*5 - 5, +10) and
// [floor(t/5)*5, +10).
//   b0 wm none: m1@3 v1 ([-5,5) [0,10)), m1@12 v2 ([5,15) [10,20)), m1@8 v4 ([0,10) [5,15))
//                                                                          max 12 -> wm 7
//   b1 wm 7:    m1@6 v8 ([0,10) [5,15)), m1@4 v16 ([0,10) only: [-5,5) is closed),
//               m1@17 v32 ([10,20) [15,25))                                max 17 -> wm 12
//   b2 wm 12:   m1@4.9 v64 (both windows closed: dropped), m1@7 v128 ([5,15) only),
//               m1@12 v256 (exactly at the watermark: [5,15) [10,20))      max 12 -> wm 12
std::vector<std::vector<std::string>> SlidingBatches() {
  return {
      {Row("m1", 3, 1), Row("m1", 12, 2), Row("m1", 8, 4)},
      {Row("m1", 6, 8), Row("m1", 4, 16), Row("m1", 17, 32)},
      {Row("m1", 4.9, 64), Row("m1", 7, 128), Row("m1", 12, 256)},
  };
}

TEST_CASE("sliding windows in update mode add a row to each of its open windows",
          "[aggregation][window][watermark]") {
  Driver driver(TestQuery(10, 5, 5), OutputMode::kUpdate);
  auto batches = SlidingBatches();
  CHECK(driver.Batch(batches[0]).rows == Rows{"m1 [-5,5) n=1 sum=1", "m1 [0,10) n=2 sum=5",
                                              "m1 [5,15) n=2 sum=6", "m1 [10,20) n=1 sum=2"});
  BatchResult b1 = driver.Batch(batches[1]);
  CHECK(b1.rows == Rows{"m1 [0,10) n=4 sum=29", "m1 [5,15) n=3 sum=14", "m1 [10,20) n=2 sum=34",
                        "m1 [15,25) n=1 sum=32"});
  CHECK(b1.dropped == 0);  // m1@4 still had an open window
  CHECK(b1.deletes == 1);  // [-5,5)
  BatchResult b2 = driver.Batch(batches[2]);
  CHECK(b2.rows == Rows{"m1 [5,15) n=5 sum=398", "m1 [10,20) n=3 sum=290"});
  CHECK(b2.dropped == 1);
  CHECK(b2.deletes == 1);  // [0,10)
  CHECK(b2.watermark_after_us == AtSeconds(12));
  CHECK(driver.aggregator().num_groups() == 3);
}

TEST_CASE("sliding windows in append mode emit each window once after the watermark passes it",
          "[aggregation][window][watermark]") {
  Driver driver(TestQuery(10, 5, 5), OutputMode::kAppend);
  auto batches = SlidingBatches();
  CHECK(driver.Batch(batches[0]).rows.empty());
  CHECK(driver.Batch(batches[1]).rows == Rows{"m1 [-5,5) n=1 sum=1"});
  BatchResult b2 = driver.Batch(batches[2]);
  CHECK(b2.rows == Rows{"m1 [0,10) n=4 sum=29"});
  CHECK(b2.dropped == 1);
  CHECK_FALSE(driver.aggregator().HasClosableWindows(driver.watermark_us()));
  // A row far ahead moves the watermark to 40: a no-data batch emits the rest in window order.
  CHECK(driver.Batch({Row("m1", 45, 1)}).rows.empty());
  CHECK(driver.Batch({}).rows ==
        Rows{"m1 [5,15) n=5 sum=398", "m1 [10,20) n=3 sum=290", "m1 [15,25) n=1 sum=32"});
}

TEST_CASE("sliding windows in complete mode keep every window", "[aggregation][window]") {
  Driver driver(TestQuery(10, 5, 5), OutputMode::kComplete);
  auto batches = SlidingBatches();
  driver.Batch(batches[0]);
  CHECK(driver.Batch(batches[1]).rows == Rows{"m1 [-5,5) n=1 sum=1", "m1 [0,10) n=4 sum=29",
                                              "m1 [5,15) n=3 sum=14", "m1 [10,20) n=2 sum=34",
                                              "m1 [15,25) n=1 sum=32"});
  BatchResult b2 = driver.Batch(batches[2]);
  CHECK(b2.rows == Rows{"m1 [-5,5) n=1 sum=1", "m1 [0,10) n=4 sum=29", "m1 [5,15) n=5 sum=398",
                        "m1 [10,20) n=3 sum=290", "m1 [15,25) n=1 sum=32"});
  CHECK(b2.dropped == 1);
}

TEST_CASE("a window closes exactly when the watermark reaches its end", "[aggregation][window]") {
  Driver driver(TestQuery(10, 10, 0), OutputMode::kAppend);
  driver.Batch({Row("m1", 5, 1), Row("m1", 9.999999, 2)});  // wm 9.999999
  BatchResult open = driver.Batch({Row("m1", 9.5, 4)});     // [0,10) still open: aggregated
  CHECK(open.rows.empty());
  CHECK(open.dropped == 0);
  driver.Batch({Row("m1", 10, 8)});  // wm 10 = the end of [0,10)
  BatchResult closed = driver.Batch({Row("m1", 9.999999, 16)});
  CHECK(closed.rows == Rows{"m1 [0,10) n=3 sum=7"});
  CHECK(closed.dropped == 1);
}

TEST_CASE("without a window, rows at or behind the watermark are dropped and counted",
          "[aggregation][watermark]") {
  Driver driver(TestQuery(0, 0, 5), OutputMode::kUpdate);
  CHECK(driver.Batch({Row("m1", 20, 1)}).rows == Rows{"m1 n=1 sum=1"});  // wm 15
  BatchResult b1 = driver.Batch(
      {Row("m1", 15, 2), Row("m1", 15.000001, 4), Row("m2", 14, 8), RowWithoutTime("m2", 16)});
  // 15 is at the watermark (late); 1 us after it is not; a null event time cannot be late.
  CHECK(b1.rows == Rows{"m1 n=2 sum=5", "m2 n=1 sum=16"});
  CHECK(b1.dropped == 2);
  CHECK(b1.without_event_time == 0);
}

TEST_CASE("windows restored from the checkpoint continue exactly where they were",
          "[aggregation][window][checkpoint]") {
  auto batches = TumblingBatches();
  for (OutputMode mode : {OutputMode::kAppend, OutputMode::kUpdate, OutputMode::kComplete}) {
    INFO("mode " << ToString(mode));
    Driver straight(TestQuery(10, 10, 5), mode);
    Driver restarted(TestQuery(10, 10, 5), mode);
    for (size_t b = 0; b < batches.size(); ++b) {
      INFO("batch " << b);
      // Restart before every batch from what a checkpoint holds: state and watermark.
      restarted.Restart(std::map<std::string, std::string>(restarted.state()),
                        restarted.watermark_us());
      BatchResult expected = straight.Batch(batches[b]);
      BatchResult actual = restarted.Batch(batches[b]);
      CHECK(actual.rows == expected.rows);
      CHECK(actual.dropped == expected.dropped);
      CHECK(restarted.state() == straight.state());
      CHECK(restarted.aggregator().HasClosableWindows(restarted.watermark_us()) ==
            straight.aggregator().HasClosableWindows(straight.watermark_us()));
    }
  }
}

TEST_CASE("state of a long windowed run stays bounded by the open windows",
          "[aggregation][window][long]") {
  // 10M rows of 8 models over 100k seconds of event time, a little out of order, in batches
  // of 100k: tumbling 60 s windows with a 30 s watermark delay.
  Schema schema = TestSchema();
  auto created = Aggregator::Create(TestQuery(60, 60, 30), schema);
  REQUIRE(created);
  Aggregator& aggregator = **created;
  const int64_t rows = 10'000'000;
  const int64_t batch_rows = 100'000;
  const int64_t step_us = 10'000;  // 100 rows per second of event time
  RecordBatch batch;
  EventClockOptions clock_options;
  clock_options.column = 1;
  clock_options.delay_us = 30'000'000;
  EventClock clock(clock_options);
  RowTimes times;
  int64_t watermark = INT64_MIN;
  std::set<std::string> emitted;
  std::set<std::string> state;
  simdjson::dom::parser parser;
  int64_t aggregated = 0;
  int64_t dropped = 0;
  size_t max_groups = 0;
  for (int64_t first = 0; first < rows; first += batch_rows) {
    batch.Reset(schema);
    for (int64_t n = first; n < first + batch_rows; ++n) {
      Column& model = batch.columns[0];
      model.valid.push_back(1);
      model.str_data += static_cast<char>('0' + n % 8);
      model.str_offsets.push_back(static_cast<uint32_t>(model.str_data.size()));
      // Every 7th row arrives 20 s late (inside the delay); every 1000th 90 s late (dropped
      // once the watermark is past its window).
      int64_t lateness = n % 1000 == 0 ? 90'000'000 : (n % 7 == 0 ? 20'000'000 : 0);
      batch.columns[1].valid.push_back(1);
      batch.columns[1].i64.push_back(kT0Us + n * step_us - lateness);
      batch.columns[2].valid.push_back(1);
      batch.columns[2].f64.push_back(1.0);
      batch.positions.push_back({0, n});
    }
    batch.num_rows = static_cast<size_t>(batch_rows);
    clock.BeginBatch({PartitionActivity{"", false, true}}, 0);
    clock.Stamp(batch, [](uint32_t) { return std::string(); }, times);
    aggregator.Add(batch, times);
    EmittedRows out;
    aggregator.EmitClosed(watermark, out);
    for (const std::string& row : out.rows) {
      simdjson::dom::element parsed = parser.parse(row);
      aggregated += int64_t(parsed["count"]);
      auto [it, fresh] = emitted.insert(fmt::format("{} {}", std::string_view(parsed["model_id"]),
                                                    simdjson::minify(parsed["window"])));
      if (!fresh) FAIL("window emitted twice: " << *it);
    }
    dropped += aggregator.TakeRowsDroppedByWatermark();
    StatePuts puts;
    std::vector<std::string> deletes;
    aggregator.EndBatch(watermark, true, puts, deletes);
    for (const auto& entry : puts) state.insert(entry.first);
    for (const std::string& key : deletes) state.erase(key);
    max_groups = std::max(max_groups, aggregator.num_groups());
    clock.CommitBatch();
    watermark = clock.watermark_us();
  }
  // A batch covers 1000 s of event time, 17 windows per model, plus a window of late rows and
  // the one the watermark is in: state is bounded by that, whatever the length of the run.
  CHECK(max_groups <= 8 * 20);
  CHECK(aggregator.num_groups() == state.size());
  CHECK(emitted.size() > 8 * 1600);
  // Every row was aggregated into exactly one window (emitted or still open) or dropped.
  EmittedRows open;
  aggregator.EmitAll(open);
  for (const std::string& row : open.rows) aggregated += int64_t(parser.parse(row)["count"]);
  CHECK(aggregated + dropped == rows);
  CHECK(dropped > 0);
  CHECK(dropped <= rows / 1000);  // only the rows 90 s late can miss their window
}

}  // namespace
}  // namespace driftd::testing
