#include "engine/quantile_sketch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "engine/drift/codec.h"

namespace driftd {

namespace {

// The rank error of a KLL sketch of parameter k is about C / k. C here is the measured worst
// normalized rank error times k over the quantile tests (10M values, 1,000 quantiles, several
// orders; tests/engine/quantile_sketch_test.cc and bench_quantiles: 3.96 at k 4000).
constexpr double kErrorTimesK = 4.0;
// A level never holds fewer than this many items before it compacts (small k, deep levels).
constexpr uint32_t kMinLevelWidth = 8;
// The coin's fixed seed: the same values in the same order give the same sketch everywhere.
constexpr uint64_t kCoinSeed = 0x6b6c6c2d73656564ULL;  // "kll-seed"

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint32_t QuantileSketch::KForAccuracy(int64_t accuracy) {
  accuracy = std::clamp<int64_t>(accuracy, 1, kMaxAccuracy);
  const double k = std::ceil(kErrorTimesK * static_cast<double>(accuracy));
  return static_cast<uint32_t>(std::clamp<double>(k, kMinK, kMaxK));
}

double QuantileSketch::RankErrorBound(uint32_t k) { return kErrorTimesK / static_cast<double>(k); }

QuantileSketch::QuantileSketch(uint32_t k)
    : k_(std::clamp(k, kMinK, kMaxK)), coin_state_(kCoinSeed), levels_(1) {
  UpdateCapacity();
}

uint32_t QuantileSketch::LevelCapacity(uint32_t k, size_t levels, size_t level) {
  // k * (2/3)^depth in integers, so that every platform computes the same capacities.
  uint64_t capacity = k;
  for (size_t depth = levels - 1 - level; depth > 0 && capacity > kMinLevelWidth; --depth) {
    capacity = (capacity * 2 + 2) / 3;
  }
  return static_cast<uint32_t>(std::max<uint64_t>(capacity, kMinLevelWidth));
}

void QuantileSketch::UpdateCapacity() {
  capacity_ = 0;
  level_capacity_.resize(levels_.size());
  for (size_t h = 0; h < levels_.size(); ++h) {
    level_capacity_[h] = LevelCapacity(k_, levels_.size(), h);
    capacity_ += level_capacity_[h];
  }
  level0_capacity_ = level_capacity_[0];
}

bool QuantileSketch::NextCoin() { return (SplitMix64(coin_state_) >> 63) != 0; }

void QuantileSketch::Compress() {
  // Eager: a level compacts as soon as it reaches its own capacity, so that no level outgrows
  // the buffer reserved for it and the memory held stays about the items' capacity.
  for (size_t level = 0; level < levels_.size(); ++level) {
    if (levels_[level].size() >= level_capacity_[level]) CompactLevel(level);
  }
}

void QuantileSketch::CompactLevel(size_t level) {
  if (level + 1 == levels_.size()) {
    // A new top level: every level below is one deeper and its capacity shrinks, so its buffer
    // is given back down to what it holds (this happens about log2(n / k) times).
    levels_.emplace_back();
    UpdateCapacity();
    for (size_t h = 0; h + 1 < levels_.size(); ++h) {
      if (levels_[h].capacity() > level_capacity_[h] + level_capacity_[h] / 2 + 1) {
        levels_[h].shrink_to_fit();
      }
    }
  }
  std::vector<double>& items = levels_[level];
  if (level == 0) std::sort(items.begin(), items.end());
  // An odd item out stays (the largest): pairs of weight 2^h become one item of weight 2^(h+1),
  // so the total weight stays exactly the count.
  const bool odd = items.size() % 2 != 0;
  const double held = odd ? items.back() : 0.0;
  const size_t pairs = items.size() / 2;
  const size_t offset = NextCoin() ? 1 : 0;
  for (size_t i = 0; i < pairs; ++i) items[i] = items[2 * i + offset];
  // Merged into the level above from the back, in place: no allocation once the level's
  // buffer has grown to what it holds at most (its capacity plus one compaction from below).
  std::vector<double>& above = levels_[level + 1];
  size_t i = above.size();
  size_t j = pairs;
  const size_t need = i + j;
  if (above.capacity() < need) {
    above.reserve(std::max<size_t>(need, level_capacity_[level + 1] + level_capacity_[level] / 2 + 1));
  }
  above.resize(need);
  for (size_t out = need; j > 0;) {
    if (i > 0 && above[i - 1] > items[j - 1]) {
      above[--out] = above[--i];
    } else {
      above[--out] = items[--j];
    }
  }
  items.clear();
  if (odd) items.push_back(held);
  retained_ -= pairs;
}

Status QuantileSketch::Merge(const QuantileSketch& other) {
  if (other.k_ != k_) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "quantile sketches of different k ({} and {}) cannot be merged", k_,
                     other.k_);
  }
  if (other.count_ == 0) return Ok();
  if (levels_.size() < other.levels_.size()) {
    levels_.resize(other.levels_.size());
    UpdateCapacity();
  }
  for (size_t h = 0; h < other.levels_.size(); ++h) {
    std::vector<double>& mine = levels_[h];
    const size_t before = mine.size();
    mine.insert(mine.end(), other.levels_[h].begin(), other.levels_[h].end());
    if (h == 0) {
      // Level 0 is in arrival order; sorted here so that the merge does not depend on which
      // sketch came first.
      std::sort(mine.begin(), mine.end());
    } else {
      std::inplace_merge(mine.begin(), mine.begin() + static_cast<ptrdiff_t>(before), mine.end());
    }
  }
  count_ += other.count_;
  retained_ += other.retained_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  coin_state_ += other.coin_state_;  // commutative: Merge(a, b) == Merge(b, a)
  Compress();
  return Ok();
}

size_t QuantileSketch::MemoryBytes() const {
  size_t bytes = sizeof(*this) + levels_.capacity() * sizeof(std::vector<double>) +
                 level_capacity_.capacity() * sizeof(uint32_t);
  for (const auto& level : levels_) bytes += level.capacity() * sizeof(double);
  return bytes;
}

void QuantileSketch::Quantiles(std::span<const double> fractions, std::span<double> out) const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (count_ == 0) {
    std::fill(out.begin(), out.end(), nan);
    return;
  }
  std::vector<std::pair<double, uint64_t>> items;
  items.reserve(retained_);
  for (size_t h = 0; h < levels_.size(); ++h) {
    for (double x : levels_[h]) items.emplace_back(x, uint64_t{1} << h);
  }
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < items.size(); ++i) items[i].second += items[i - 1].second;
  for (size_t q = 0; q < fractions.size(); ++q) {
    const double p = fractions[q];
    if (std::isnan(p)) {
      out[q] = nan;
    } else if (p <= 0) {
      out[q] = min_;
    } else if (p >= 1) {
      out[q] = max_;
    } else {
      const double wanted = std::ceil(p * static_cast<double>(count_));
      const uint64_t rank = static_cast<uint64_t>(std::max(1.0, wanted));
      auto it = std::lower_bound(items.begin(), items.end(), rank,
                                 [](const auto& item, uint64_t r) { return item.second < r; });
      out[q] = it == items.end() ? max_ : it->first;
    }
  }
}

double QuantileSketch::Quantile(double fraction) const {
  double out = 0;
  Quantiles(std::span<const double>(&fraction, 1), std::span<double>(&out, 1));
  return out;
}

void QuantileSketch::Encode(std::string& out) const {
  drift::ByteWriter w(out);
  w.U8(kEncodingVersion);
  w.U32(k_);
  w.I64(count_);
  w.F64(min_);
  w.F64(max_);
  w.U64(coin_state_);
  w.U32(static_cast<uint32_t>(levels_.size()));
  for (const auto& level : levels_) {
    w.U32(static_cast<uint32_t>(level.size()));
    for (double x : level) w.F64(x);
  }
}

Result<QuantileSketch> QuantileSketch::Decode(std::string_view& bytes) {
  auto corrupt = [](std::string_view what) {
    return MakeError(ErrorCode::kCorruption, "quantile sketch: {}", what);
  };
  drift::ByteReader r(bytes);
  const uint8_t version = r.U8();
  if (r.failed()) return corrupt("empty");
  if (version != kEncodingVersion) {
    return MakeError(ErrorCode::kCorruption, "quantile sketch: unknown encoding version {}",
                     version);
  }
  const uint32_t k = r.U32();
  QuantileSketch sketch(k);
  sketch.count_ = r.I64();
  sketch.min_ = r.F64();
  sketch.max_ = r.F64();
  sketch.coin_state_ = r.U64();
  const uint32_t levels = r.U32();
  if (r.failed()) return corrupt("truncated header");
  if (k < kMinK || k > kMaxK || sketch.count_ < 0 || levels == 0 || levels > 56) {
    return corrupt("impossible header");
  }
  sketch.levels_.assign(levels, {});
  uint64_t weight = 0;
  for (uint32_t h = 0; h < levels; ++h) {
    const uint32_t size = r.U32();
    if (r.failed() || r.remaining() / 8 < size) return corrupt("truncated level");
    std::vector<double>& level = sketch.levels_[h];
    level.reserve(size);
    for (uint32_t i = 0; i < size; ++i) {
      const double x = r.F64();
      if (std::isnan(x)) return corrupt("NaN item");
      level.push_back(x);
    }
    if (h > 0 && !std::is_sorted(level.begin(), level.end())) return corrupt("unsorted level");
    sketch.retained_ += size;
    weight += static_cast<uint64_t>(size) << h;
  }
  sketch.UpdateCapacity();
  // The weights add up to the count, and nothing lies outside [min, max].
  if (weight != static_cast<uint64_t>(sketch.count_)) return corrupt("weights do not add up");
  if (sketch.retained_ > sketch.capacity_) return corrupt("more items than capacity");
  for (const auto& level : sketch.levels_) {
    for (double x : level) {
      if (x < sketch.min_ || x > sketch.max_) return corrupt("item outside [min, max]");
    }
  }
  bytes.remove_prefix(bytes.size() - r.remaining());
  return sketch;
}

bool QuantileSketch::operator==(const QuantileSketch& other) const {
  auto bits_equal = [](double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); };
  return k_ == other.k_ && count_ == other.count_ && bits_equal(min_, other.min_) &&
         bits_equal(max_, other.max_) && coin_state_ == other.coin_state_ &&
         levels_ == other.levels_;
}

}  // namespace driftd
