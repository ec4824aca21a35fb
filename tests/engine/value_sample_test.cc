#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "engine/drift/histogram.h"
#include "engine/drift/value_sample.h"

namespace driftd {
namespace {

std::vector<double> Values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> values(n);
  for (double& v : values) v = normal(rng);
  return values;
}

TEST_CASE("a value sample is the same whatever the order the values came in and however they "
          "were split and merged",
          "[drift][sample]") {
  const std::vector<double> values = Values(50'000, 1);
  ValueSample in_order(1000);
  for (double v : values) in_order.Add(v);
  CHECK_FALSE(in_order.exact());
  CHECK(in_order.Sorted().size() <= 1000);
  CHECK(in_order.Sorted().size() >= 250);

  std::vector<double> shuffled = values;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(7));
  // Three "partitions" sampled apart, then merged.
  ValueSample a(1000), b(1000), c(1000);
  for (size_t i = 0; i < shuffled.size(); ++i) (i % 3 == 0 ? a : i % 3 == 1 ? b : c).Add(shuffled[i]);
  ValueSample merged(1000);
  merged.Merge(c);
  merged.Merge(a);
  merged.Merge(b);
  CHECK(merged == in_order);

  // The order a warmup is fed from it is therefore the same too, and so are the bins learned.
  CHECK(merged.InHashOrder() == in_order.InHashOrder());
  auto expand = [](const std::vector<std::pair<double, int64_t>>& entries) {
    std::vector<double> out;
    for (const auto& [value, count] : entries) out.insert(out.end(), count, value);
    return out;
  };
  std::vector<double> from_merged = expand(merged.InHashOrder());
  std::vector<double> from_in_order = expand(in_order.InHashOrder());
  CHECK(BinEdges::FromQuantiles(from_merged, 10) == BinEdges::FromQuantiles(from_in_order, 10));
}

TEST_CASE("a value sample keeps every value, with counts, below its capacity", "[drift][sample]") {
  ValueSample sample(100);
  for (int round = 0; round < 3; ++round) {
    for (int v = 0; v < 50; ++v) sample.Add(v * 0.5);
  }
  sample.Add(-0.0);  // the same value as 0.0
  CHECK(sample.exact());
  CHECK(sample.kept_total() == 151);
  const auto sorted = sample.Sorted();
  REQUIRE(sorted.size() == 50);
  CHECK(sorted.front() == std::pair<double, int64_t>{0.0, 4});
  CHECK(sorted.back() == std::pair<double, int64_t>{24.5, 3});
  // An exact sample hands every value over, each as often as it came, in one fixed order.
  const auto hashed = sample.InHashOrder();
  REQUIRE(hashed.size() == 50);
  CHECK(std::is_permutation(hashed.begin(), hashed.end(), sorted.begin(), sorted.end()));
}

TEST_CASE("a value sample survives its encoding, and a damaged one is refused", "[drift][sample]") {
  ValueSample sample(500);
  for (double v : Values(5000, 3)) sample.Add(v);
  std::string bytes;
  sample.Encode(bytes);
  auto decoded = ValueSample::Decode(bytes);
  REQUIRE(decoded);
  CHECK(*decoded == sample);
  CHECK_FALSE(ValueSample::Decode(std::string_view(bytes).substr(0, bytes.size() - 3)));
}

TEST_CASE("a value sample encoded after every batch gives the bytes of one made at once",
          "[drift][sample]") {
  // As a model's open warmup window is persisted after each batch: values added, encoded,
  // sometimes merged with another sample, sampled down past its capacity, or restored from
  // its bytes; each encoding must be that of a sample given the same values in one go.
  const std::vector<double> values = Values(30'000, 11);
  std::mt19937_64 rng(5);
  ValueSample live;  // the capacity a restored one has
  std::vector<double> so_far;
  size_t at = 0;
  for (int batch = 0; at < values.size(); ++batch) {
    const size_t n = std::min<size_t>(values.size() - at, 1 + rng() % 900);
    if (batch % 7 == 3) {
      ValueSample other;
      for (size_t i = at; i < at + n; ++i) other.Add(values[i]);
      live.Merge(other);
    } else {
      for (size_t i = at; i < at + n; ++i) live.Add(values[i]);
    }
    so_far.insert(so_far.end(), values.begin() + at, values.begin() + at + n);
    at += n;
    std::string bytes;
    live.Encode(bytes);
    ValueSample whole;
    for (double v : so_far) whole.Add(v);
    std::string expected;
    whole.Encode(expected);
    INFO("batch " << batch << ", " << so_far.size() << " values");
    REQUIRE(bytes == expected);
    REQUIRE(live.Sorted() == whole.Sorted());
    if (batch % 5 == 2) {
      auto restored = ValueSample::Decode(bytes);
      REQUIRE(restored);
      live = std::move(*restored);
    }
  }
  CHECK_FALSE(live.exact());  // it was sampled down on the way
}

}  // namespace
}  // namespace driftd
