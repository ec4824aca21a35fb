// The quantile sketch on its own (accuracy against exact quantiles, bounded memory,
// determinism, merging, its encoding) and the approx_percentile aggregates built on it.
#include <simdjson.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/aggregation.h"
#include "engine/json_decoder.h"
#include "engine/quantile_sketch.h"
#include "tests/engine/aggregation_test_util.h"

namespace driftd::testing {
namespace {

// The largest distance, over the fractions 0.001 .. 0.999, between a fraction and the range of
// ranks (as fractions of n) its answer has among the exact, sorted values.
double WorstRankError(const QuantileSketch& sketch, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::vector<double> fractions;
  for (int i = 1; i <= 999; ++i) fractions.push_back(i / 1000.0);
  std::vector<double> answers(fractions.size());
  sketch.Quantiles(fractions, answers);
  const double n = static_cast<double>(values.size());
  double worst = 0;
  for (size_t i = 0; i < fractions.size(); ++i) {
    const double below =
        static_cast<double>(std::lower_bound(values.begin(), values.end(), answers[i]) -
                            values.begin()) / n;
    const double at_or_below =
        static_cast<double>(std::upper_bound(values.begin(), values.end(), answers[i]) -
                            values.begin()) / n;
    const double p = fractions[i];
    worst = std::max(worst, p < below ? below - p : (p > at_or_below ? p - at_or_below : 0.0));
  }
  return worst;
}

enum class Order { kRandom, kAscending, kDescending };

std::vector<double> Values(size_t n, int distribution, Order order, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> values(n);
  for (double& x : values) {
    switch (distribution) {
      case 0: x = normal(random); break;
      case 1: x = std::exp(2 * normal(random)); break;         // heavy right tail
      default: x = static_cast<double>(random() % 500); break;  // many ties
    }
  }
  if (order == Order::kAscending) std::sort(values.begin(), values.end());
  if (order == Order::kDescending) std::sort(values.rbegin(), values.rend());
  return values;
}

TEST_CASE("quantiles of 1M values are within the stated rank error of the exact ones",
          "[quantiles]") {
  constexpr int64_t kAccuracy = 500;
  const uint32_t k = QuantileSketch::KForAccuracy(kAccuracy);
  REQUIRE(QuantileSketch::RankErrorBound(k) <= 1.0 / kAccuracy);
  for (int distribution = 0; distribution < 3; ++distribution) {
    for (Order order : {Order::kRandom, Order::kAscending, Order::kDescending}) {
      DYNAMIC_SECTION("distribution " << distribution << " order " << static_cast<int>(order)) {
        const std::vector<double> values = Values(1'000'000, distribution, order, 17);
        QuantileSketch sketch(k);
        for (double x : values) sketch.Add(x);
        CHECK(sketch.count() == 1'000'000);
        const double error = WorstRankError(sketch, values);
        INFO("worst rank error " << error << ", stated " << 1.0 / kAccuracy);
        CHECK(error <= 1.0 / kAccuracy);
        CHECK(error > 0);  // it did compact: the test can fail
        CHECK(sketch.Quantile(0) == *std::min_element(values.begin(), values.end()));
        CHECK(sketch.Quantile(1) == *std::max_element(values.begin(), values.end()));
      }
    }
  }
}

TEST_CASE("a sketch's memory stays bounded whatever the count", "[quantiles]") {
  const uint32_t k = QuantileSketch::KForAccuracy(500);
  QuantileSketch sketch(k);
  std::mt19937_64 random(3);
  std::uniform_real_distribution<double> uniform(0, 1);
  size_t largest_after_100k = 0;
  size_t largest_retained = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    sketch.Add(uniform(random));
    if (i >= 100'000) largest_after_100k = std::max(largest_after_100k, sketch.MemoryBytes());
    largest_retained = std::max(largest_retained, sketch.num_retained());
  }
  // Fewer than 3k items retained, in at most about 40 bytes per unit of k.
  CHECK(largest_retained < 3 * k);
  CHECK(largest_after_100k < 40 * static_cast<size_t>(k));
}

TEST_CASE("fewer values than the sketch compacts give exact order statistics (Spark's rule)",
          "[quantiles]") {
  QuantileSketch sketch(QuantileSketch::KForAccuracy(10000));
  CHECK(std::isnan(sketch.Quantile(0.5)));
  for (int i = 100; i >= 1; --i) sketch.Add(i);
  CHECK(sketch.Quantile(0.5) == 50);
  CHECK(sketch.Quantile(0.25) == 25);
  CHECK(sketch.Quantile(0.251) == 26);
  CHECK(sketch.Quantile(0) == 1);
  CHECK(sketch.Quantile(0.001) == 1);
  CHECK(sketch.Quantile(1) == 100);
  QuantileSketch infinite;
  infinite.Add(-std::numeric_limits<double>::infinity());
  infinite.Add(1);
  CHECK(infinite.Quantile(0.5) == -std::numeric_limits<double>::infinity());
  CHECK(infinite.Quantile(1) == 1);
}

TEST_CASE("the same values give the same sketch after an encode and decode at any point",
          "[quantiles][checkpoint]") {
  const std::vector<double> values = Values(300'000, 1, Order::kRandom, 5);
  const uint32_t k = QuantileSketch::KForAccuracy(200);
  QuantileSketch uninterrupted(k);
  for (double x : values) uninterrupted.Add(x);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{777}, size_t{123'457}, values.size()}) {
    QuantileSketch first(k);
    for (size_t i = 0; i < cut; ++i) first.Add(values[i]);
    std::string bytes;
    first.Encode(bytes);
    std::string_view in(bytes);
    auto restored = QuantileSketch::Decode(in);
    REQUIRE(restored);
    CHECK(in.empty());
    CHECK(*restored == first);
    for (size_t i = cut; i < values.size(); ++i) restored->Add(values[i]);
    INFO("restored after " << cut << " values");
    CHECK(*restored == uninterrupted);
    std::string a, b;
    restored->Encode(a);
    uninterrupted.Encode(b);
    CHECK(a == b);
  }
}

TEST_CASE("merging sketches is order-independent and stays within the stated error",
          "[quantiles]") {
  const uint32_t k = QuantileSketch::KForAccuracy(500);
  const std::vector<double> values = Values(600'000, 0, Order::kRandom, 11);
  QuantileSketch a(k), b(k), c(k);
  for (size_t i = 0; i < values.size(); ++i) (i % 3 == 0 ? a : i % 3 == 1 ? b : c).Add(values[i]);
  QuantileSketch ab = a;
  REQUIRE(ab.Merge(b));
  QuantileSketch ba = b;
  REQUIRE(ba.Merge(a));
  CHECK(ab == ba);
  REQUIRE(ab.Merge(c));
  CHECK(ab.count() == static_cast<int64_t>(values.size()));
  CHECK(WorstRankError(ab, values) <= 1.0 / 500);
  QuantileSketch other_k(k + 1);
  CHECK_FALSE(a.Merge(other_k));
}

TEST_CASE("a corrupt sketch encoding is refused, not misread", "[quantiles][checkpoint]") {
  QuantileSketch sketch(QuantileSketch::KForAccuracy(100));
  for (int i = 0; i < 5000; ++i) sketch.Add(i % 71);
  std::string bytes;
  sketch.Encode(bytes);
  for (size_t size : {size_t{0}, size_t{1}, size_t{20}, bytes.size() - 1}) {
    std::string_view in(bytes.data(), size);
    CHECK_FALSE(QuantileSketch::Decode(in));
  }
  std::string wrong_version = bytes;
  wrong_version[0] = 9;
  std::string_view in(wrong_version);
  CHECK_FALSE(QuantileSketch::Decode(in));
  std::string wrong_count = bytes;
  wrong_count[5] ^= 1;  // the count no longer matches the items' weights
  in = wrong_count;
  CHECK_FALSE(QuantileSketch::Decode(in));
}

// ---- the aggregates ----------------------------------------------------------------------

QuerySpec PercentileQuery(bool windowed) {
  QuerySpec query = TestQuery(windowed ? 10 : 0, windowed ? 10 : 0, windowed ? 0 : -1);
  AggregateSpec median;
  median.fn = AggregateFn::kApproxPercentile;
  median.column = "value";
  median.percentages = {0.5};
  median.accuracy = 10000;
  median.output_name = "approx_percentile(value, 0.5, 10000)";
  AggregateSpec quartiles;
  quartiles.fn = AggregateFn::kApproxPercentile;
  quartiles.column = "value";
  quartiles.percentages = {0.25, 0.75};
  quartiles.percentage_array = true;
  quartiles.accuracy = 100;
  quartiles.output_name = "percentile_approx(value, array(0.25, 0.75), 100)";
  query.aggregates.push_back(median);
  query.aggregates.push_back(quartiles);
  return query;
}

struct Emitted {
  std::vector<std::string> rows;
  StatePuts puts;
};

Emitted RunAggregator(Aggregator& aggregator, const std::vector<std::string>& lines,
                      int64_t watermark_us = INT64_MIN) {
  Schema schema = TestSchema();
  JsonDecoder decoder(schema, MalformedSpec{});
  InputChunk chunk;
  for (size_t i = 0; i < lines.size(); ++i) {
    chunk.Append(lines[i], RecordPosition{0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  RecordBatch batch;
  batch.Reset(schema);
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  RowTimes times;
  times.event_us.assign(batch.num_rows, INT64_MIN);
  times.late_before.assign(batch.num_rows, INT64_MIN);
  aggregator.Add(batch, times);
  EmittedRows rows;
  aggregator.EmitAll(rows);
  Emitted out;
  out.rows = rows.rows;
  std::vector<std::string> deletes;
  aggregator.EndBatch(watermark_us, true, out.puts, deletes);
  return out;
}

TEST_CASE("approx_percentile and percentile_approx give Spark's columns and values",
          "[quantiles][aggregation]") {
  auto aggregator = Aggregator::Create(PercentileQuery(false), TestSchema());
  REQUIRE(aggregator);
  std::vector<std::string> lines;
  for (int i = 1; i <= 100; ++i) lines.push_back(Row("m1", i, i));
  lines.push_back(R"({"model_id":"m2","event_time":null,"value":null})");
  Emitted out = RunAggregator(**aggregator, lines);
  REQUIRE(out.rows.size() == 2);
  CHECK(out.rows[0] ==
        R"j({"model_id":"m1","count":100,"sum(value)":5050,"approx_percentile(value, 0.5, 10000)":50,)j"
        R"j("percentile_approx(value, array(0.25, 0.75), 100)":[25,75]})j");
  // No value: null, as Spark gives.
  CHECK(out.rows[1] ==
        R"j({"model_id":"m2","count":1,"sum(value)":null,"approx_percentile(value, 0.5, 10000)":null,)j"
        R"j("percentile_approx(value, array(0.25, 0.75), 100)":null})j");
}

TEST_CASE("percentile aggregates restored from the checkpoint continue exactly where they were",
          "[quantiles][aggregation][checkpoint]") {
  const QuerySpec query = PercentileQuery(true);
  std::mt19937_64 random(23);
  std::normal_distribution<double> normal(10, 3);
  std::vector<std::vector<std::string>> batches(6);
  for (int i = 0; i < 60'000; ++i) {
    batches[static_cast<size_t>(i) / 10'000].push_back(
        Row(i % 2 ? "m1" : "m2", i * 0.001, std::round(normal(random) * 1000) / 1000));
  }
  auto reference = Aggregator::Create(query, TestSchema());
  REQUIRE(reference);
  std::vector<std::string> last;
  for (const auto& batch : batches) last = RunAggregator(**reference, batch).rows;

  auto first = Aggregator::Create(query, TestSchema());
  REQUIRE(first);
  std::map<std::string, std::string> state;
  for (size_t b = 0; b < 3; ++b) {
    for (auto& [key, value] : RunAggregator(**first, batches[b]).puts) state[key] = value;
  }
  auto restarted = Aggregator::Create(query, TestSchema());
  REQUIRE(restarted);
  for (const auto& [key, value] : state) REQUIRE((*restarted)->Restore(key, value));
  std::vector<std::string> after;
  for (size_t b = 3; b < batches.size(); ++b) after = RunAggregator(**restarted, batches[b]).rows;
  REQUIRE(!last.empty());
  CHECK(after == last);

  // A damaged sketch in a state entry is refused with a message.
  auto fresh = Aggregator::Create(query, TestSchema());
  REQUIRE(fresh);
  std::string damaged = state.begin()->second;
  damaged.resize(damaged.size() - 3);
  CHECK_FALSE((*fresh)->Restore(state.begin()->first, damaged));
}

}  // namespace
}  // namespace driftd::testing
