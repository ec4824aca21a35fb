// A mergeable quantile sketch with a stated rank error, for the approx_percentile /
// percentile_approx aggregates. Pure code: no I/O.
//
// The sketch is KLL (Karnin, Lang and Liberty, "Optimal Quantile Approximation in Streams",
// 2016) with lazy compaction: level h holds items of weight 2^h; when the items retained exceed
// the levels' total capacity, the lowest level at its capacity is sorted and every other item
// (odd or even positions, by a coin) moves up a level with twice the weight. Level capacities
// shrink by 2/3 per level below the top, so a sketch of parameter k retains fewer than about 3k
// items whatever the count, and a quantile's rank is off by at most RankErrorBound(k) * n (with
// probability at least 99.9%, measured; see tests/engine/quantile_sketch_test.cc).
//
// Determinism: the coin is a SplitMix64 sequence with a fixed seed, kept in the sketch (and in
// its encoding), so the same values added in the same order give the same sketch bit for bit
// however they are batched, and a sketch decoded from a checkpoint goes on exactly as the one
// that was encoded. Merge(a, b) equals Merge(b, a). The sketch does depend on the order in which
// values arrive (which items share a level at a compaction): a group whose values come from
// several input partitions can give different (equally accurate) answers for different
// interleavings of those partitions.
//
// Not thread-safe; a value type (copy freely).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace driftd {

class QuantileSketch {
 public:
  /// Layout version written by Encode().
  static constexpr uint8_t kEncodingVersion = 1;
  /// Smallest and largest k accepted. Default for Spark's default accuracy of 10000 is
  /// KForAccuracy(10000).
  static constexpr uint32_t kMinK = 8;
  static constexpr uint32_t kMaxK = 1u << 22;

  /// Spark's accuracy bounds for approx_percentile: 1 / accuracy is the relative rank error.
  static constexpr int64_t kDefaultAccuracy = 10000;
  static constexpr int64_t kMaxAccuracy = 1'000'000;

  /// k whose RankErrorBound(k) is at most 1 / accuracy. `accuracy` in [1, kMaxAccuracy].
  static uint32_t KForAccuracy(int64_t accuracy);
  /// The rank error this sketch states for parameter k, as a fraction of the count.
  static double RankErrorBound(uint32_t k);

  explicit QuantileSketch(uint32_t k = KForAccuracy(kDefaultAccuracy));

  /// Adds one value. Callers skip NaN (its place in the order is undefined).
  void Add(double x) {
    levels_[0].push_back(x);
    ++count_;
    if (x < min_) min_ = x;
    if (x > max_) max_ = x;
    ++retained_;
    if (levels_[0].size() >= level0_capacity_) Compress();
  }

  /// Folds `other` (of the same k) into this sketch. kInvalidArgument when k differs.
  [[nodiscard]] Status Merge(const QuantileSketch& other);

  uint32_t k() const { return k_; }
  int64_t count() const { return count_; }
  /// Exact smallest and largest value; +inf / -inf while empty.
  double min() const { return min_; }
  double max() const { return max_; }
  /// Items kept (at most about 3k).
  size_t num_retained() const { return retained_; }
  /// Bytes this sketch holds in memory (the object and its level buffers' capacity).
  size_t MemoryBytes() const;

  /// The value at each fraction of `fractions` (each in [0, 1]), written to `out` (same size):
  /// the smallest retained value whose estimated rank (number of values at or below it) reaches
  /// ceil(p * n); p = 0 gives the exact minimum and p = 1 the exact maximum. NaN when empty.
  void Quantiles(std::span<const double> fractions, std::span<double> out) const;
  double Quantile(double fraction) const;

  /// Appends the sketch: u8 version, u32 k, i64 count, f64 min, f64 max, u64 coin state,
  /// u32 levels, then per level a u32 item count and its items as f64, all little-endian.
  void Encode(std::string& out) const;
  /// Reads what Encode() wrote, from the front of `bytes`, which it advances past the sketch.
  /// kCorruption for other versions, short input or impossible values.
  static Result<QuantileSketch> Decode(std::string_view& bytes);

  bool operator==(const QuantileSketch& other) const;

 private:
  static uint32_t LevelCapacity(uint32_t k, size_t levels, size_t level);
  void Compress();
  void CompactLevel(size_t level);
  void UpdateCapacity();
  bool NextCoin();

  uint32_t k_;
  int64_t count_ = 0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  uint64_t coin_state_;
  size_t retained_ = 0;
  size_t capacity_ = 0;  // sum of the levels' capacities
  size_t level0_capacity_ = 0;
  std::vector<uint32_t> level_capacity_;  // per level, from k and the number of levels
  // levels_[0] in arrival order; every higher level sorted ascending.
  std::vector<std::vector<double>> levels_;
};

}  // namespace driftd
