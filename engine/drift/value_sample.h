// A bounded sample of a stream of values that does not depend on the order the values arrive
// in, so that histogram edges learned from it are the same however the stream was batched, read
// or split over partitions. Each distinct value is kept, with its count, when a hash of its bits
// is below a threshold; when more than `capacity` distinct values are kept the threshold halves
// and the values above it go. The threshold a sample ends with is the largest power-of-two step
// under which the whole stream's distinct values fit, which only the set of values decides; the
// kept values and their counts then follow from it. Samples merge (at the lower threshold), so a
// window's sample and a baseline's are the union of their parts. Up to `capacity` distinct
// values the sample is exact.
//
// The value order Encode and Sorted need is kept between calls: the distinct values added since
// the last one are sorted and merged in, so a sample persisted after every batch is not sorted
// whole each time (a model's open event-time warmup windows are). It costs 8 bytes a kept value
// beside the counts' ~40: on 1M records of 16 models x 9 series in 10 s windows, 132 MB peak
// RSS against 112 MB when the order was made at each encoding, for the same CPU; with a batch
// every 100 ms (tests/bench/bench_scale_out) it saves 30% of the CPU.
//
// A value type. Not thread-safe, Encode and Sorted included (they update the kept order). NaN
// must not be added (callers skip it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/result.h"

namespace driftd {

class ValueSample {
 public:
  /// Distinct values kept at most. Default: 10'000.
  static constexpr size_t kDefaultCapacity = 10'000;

  explicit ValueSample(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  void Add(double value) { AddCount(value, 1); }
  void Merge(const ValueSample& other);
  void Clear();

  bool empty() const { return counts_.empty(); }
  /// Whether every value added is kept (no value was ever sampled out).
  bool exact() const { return threshold_ == UINT64_MAX; }
  /// Sum of the counts of the kept values.
  int64_t kept_total() const;
  /// Kept values and their counts, in increasing value order.
  std::vector<std::pair<double, int64_t>> Sorted() const;
  /// Kept values and their counts in the order of their hashes: a fixed pseudo-random order
  /// that only the set of values decides (a warmup fed in it learns from a spread of values).
  std::vector<std::pair<double, int64_t>> InHashOrder() const;

  void Encode(std::string& out) const;
  static Result<ValueSample> Decode(std::string_view bytes);
  bool operator==(const ValueSample& other) const {
    return threshold_ == other.threshold_ && counts_ == other.counts_;
  }

 private:
  void AddCount(double value, int64_t count);
  void Shrink();
  /// Every kept value's bits in value order (`ordered_`), from the last order and the values
  /// added since.
  void Order() const;

  size_t capacity_;
  uint64_t threshold_ = UINT64_MAX;  // keep values whose hash is below it (all at UINT64_MAX)
  std::unordered_map<uint64_t, int64_t> counts_;  // by the value's bits
  // The kept values in value order as of the last Order(), the distinct values added since,
  // and whether values left since (Shrink, Clear, Merge at a lower threshold): then the order
  // is made again from counts_.
  mutable std::vector<uint64_t> ordered_;
  mutable std::vector<uint64_t> added_;
  mutable bool order_lost_ = false;
};

}  // namespace driftd
