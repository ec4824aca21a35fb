#include "engine/stats.h"

#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

namespace driftd {
namespace {

Moments Of(const std::vector<double>& values) {
  Moments m;
  for (double v : values) m.Add(v);
  return m;
}

TEST_CASE("Welford moments of the reference sample are exact", "[stats]") {
  const Moments m = Of({2, 4, 4, 4, 5, 5, 7, 9});
  CHECK(m.count() == 8);
  CHECK(m.mean() == 5.0);
  CHECK(m.m2() == 32.0);
  CHECK(m.SampleVariance() == Approx(4.571429).margin(1e-6));
  CHECK(m.PopulationVariance() == 4.0);
  CHECK(m.Stddev() == Approx(std::sqrt(32.0 / 7.0)).margin(1e-12));
  CHECK(m.min() == 2.0);
  CHECK(m.max() == 9.0);
  CHECK(m.sum() == 40.0);
}

TEST_CASE("merging two halves with Chan's formula gives the reference M2", "[stats]") {
  Moments a = Of({2, 4, 4, 4});
  const Moments b = Of({5, 5, 7, 9});
  CHECK(a.mean() == 3.5);
  CHECK(a.m2() == 3.0);
  CHECK(b.mean() == 6.5);
  CHECK(b.m2() == Approx(11.0).margin(1e-12));
  a.Merge(b);
  CHECK(a.count() == 8);
  CHECK(a.mean() == 5.0);
  CHECK(a.m2() == 32.0);  // 3 + 11 + 9 * 4 * 4 / 8
  CHECK(a.min() == 2.0);
  CHECK(a.max() == 9.0);
  CHECK(a.sum() == 40.0);
}

TEST_CASE("merged partial summaries agree with one pass over all values", "[stats]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(1000.0, 3.0);
  Moments whole;
  Moments parts[3];
  for (int i = 0; i < 30'000; ++i) {
    const double v = normal(rng);
    whole.Add(v);
    parts[i % 3].Add(v);
  }
  Moments merged;
  for (const Moments& p : parts) merged.Merge(p);
  CHECK(merged.count() == whole.count());
  CHECK(merged.mean() == Approx(whole.mean()).epsilon(1e-12));
  CHECK(merged.SampleVariance() == Approx(whole.SampleVariance()).epsilon(1e-9));
  CHECK(merged.min() == whole.min());
  CHECK(merged.max() == whole.max());
  CHECK(merged.sum() == Approx(whole.sum()).epsilon(1e-14));
}

TEST_CASE("merging with an empty summary changes nothing", "[stats]") {
  Moments a = Of({1, 2, 3});
  const Moments before = a;
  a.Merge(Moments());
  CHECK(a == before);
  Moments empty;
  empty.Merge(before);
  CHECK(empty == before);
}

TEST_CASE("empty and single-value summaries report undefined variance as NaN", "[stats]") {
  Moments m;
  CHECK(std::isnan(m.mean()));
  CHECK(std::isnan(m.SampleVariance()));
  m.Add(3);
  CHECK(m.mean() == 3);
  CHECK(std::isnan(m.SampleVariance()));
  CHECK(m.PopulationVariance() == 0);
}

TEST_CASE("the compensated sum keeps small terms next to large ones", "[stats]") {
  Moments m;
  m.Add(1e16);
  for (int i = 0; i < 10; ++i) m.Add(1.0);
  m.Add(-1e16);
  CHECK(m.sum() == 10.0);  // a naive double sum gives 0 or 16
}

TEST_CASE("moments survive an encode/decode round trip bit for bit", "[stats]") {
  const Moments m = Of({0.1, -2.5, 3e10, 7});
  std::string bytes;
  m.Encode(bytes);
  CHECK(bytes.size() == Moments::kEncodedSize);
  CHECK(static_cast<uint8_t>(bytes[0]) == Moments::kEncodingVersion);
  auto decoded = Moments::Decode(bytes);
  REQUIRE(decoded);
  CHECK(*decoded == m);

  // The layout is fixed little-endian: count 4 sits in bytes 1..8.
  CHECK(static_cast<uint8_t>(bytes[1]) == 4);
  for (int i = 2; i <= 8; ++i) CHECK(bytes[static_cast<size_t>(i)] == 0);
}

TEST_CASE("decoding rejects truncated input and unknown versions", "[stats]") {
  std::string bytes;
  Of({1, 2}).Encode(bytes);
  auto truncated = Moments::Decode(std::string_view(bytes).substr(0, bytes.size() - 1));
  REQUIRE_FALSE(truncated);
  CHECK(truncated.error().code() == ErrorCode::kCorruption);
  bytes[0] = 9;
  CHECK_FALSE(Moments::Decode(bytes));
}

}  // namespace
}  // namespace driftd
