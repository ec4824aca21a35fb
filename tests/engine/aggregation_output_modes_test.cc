// Output modes of an aggregation without a window, batch by batch: update emits the groups a
// batch changed, complete the whole result table (Spark's rows for each batch).
#include <catch2/catch.hpp>

#include "tests/engine/aggregation_test_util.h"

namespace driftd::testing {
namespace {

std::string NullValue(std::string_view model) {
  return fmt::format(R"({{"model_id":"{}","event_time":null,"value":null}})", model);
}

//   b0: m1 v1, m2 v2, m1 v4
//   b1: m3 v8
//   b2: m2 null, m1 v16, m4 null   (count(*) counts rows; sum ignores nulls, null if none)
std::vector<std::vector<std::string>> Batches() {
  return {
      {Row("m1", 1, 1), Row("m2", 2, 2), Row("m1", 3, 4)},
      {Row("m3", 4, 8)},
      {NullValue("m2"), Row("m1", 5, 16), NullValue("m4")},
  };
}

TEST_CASE("update mode without a window emits only the groups each batch changed",
          "[aggregation][output-mode]") {
  Driver driver(TestQuery(0, 0, -1), OutputMode::kUpdate);
  auto batches = Batches();
  CHECK(driver.Batch(batches[0]).rows == Rows{"m1 n=2 sum=5", "m2 n=1 sum=2"});
  CHECK(driver.Batch(batches[1]).rows == Rows{"m3 n=1 sum=8"});
  CHECK(driver.Batch(batches[2]).rows == Rows{"m1 n=3 sum=21", "m2 n=2 sum=2", "m4 n=1 sum=null"});
  CHECK(driver.Batch({}).rows.empty());
}

TEST_CASE("complete mode without a window emits the whole result table every batch",
          "[aggregation][output-mode]") {
  Driver driver(TestQuery(0, 0, -1), OutputMode::kComplete);
  auto batches = Batches();
  CHECK(driver.Batch(batches[0]).rows == Rows{"m1 n=2 sum=5", "m2 n=1 sum=2"});
  CHECK(driver.Batch(batches[1]).rows == Rows{"m1 n=2 sum=5", "m2 n=1 sum=2", "m3 n=1 sum=8"});
  CHECK(driver.Batch(batches[2]).rows ==
        Rows{"m1 n=3 sum=21", "m2 n=2 sum=2", "m3 n=1 sum=8", "m4 n=1 sum=null"});
  CHECK(driver.state().size() == 4);
}

TEST_CASE("append mode on an aggregation without a window emits nothing",
          "[aggregation][output-mode]") {
  // config/ rejects this combination; the aggregator still never emits a row it cannot call
  // final.
  Driver driver(TestQuery(0, 0, -1), OutputMode::kAppend);
  for (const auto& batch : Batches()) CHECK(driver.Batch(batch).rows.empty());
}

TEST_CASE("a watermark without a window never evicts the groups", "[aggregation][output-mode]") {
  Driver driver(TestQuery(0, 0, 1), OutputMode::kUpdate);
  driver.Batch({Row("m1", 1, 1)});
  driver.Batch({Row("m2", 100, 2)});  // wm 99: m1's group is keyed by model only, it stays
  CHECK(driver.Batch({Row("m1", 101, 4)}).rows == Rows{"m1 n=2 sum=5"});
  CHECK(driver.aggregator().num_groups() == 2);
  CHECK_FALSE(driver.aggregator().HasClosableWindows(driver.watermark_us()));
}

}  // namespace
}  // namespace driftd::testing
