#include "engine/drift/value_sample.h"

#include <algorithm>
#include <bit>
#include <iterator>

#include "engine/drift/codec.h"

namespace driftd {

namespace {

// Version 2: the values in the compact decimal form (drift/codec.h) and varint counts, the
// threshold only when something was sampled out. Version 1 (fixed 8-byte values, counts and
// threshold) is still read.
constexpr uint8_t kEncodingVersion = 2;

uint64_t BitsOf(double value) {
  if (value == 0) value = 0;  // -0.0 and 0.0 are one value
  return std::bit_cast<uint64_t>(value);
}

// splitmix64's finalizer: a fixed, well-mixed hash of the value's bits.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool Kept(uint64_t bits, uint64_t threshold) {
  return threshold == UINT64_MAX || Mix(bits) < threshold;
}

// Bits of two values in their value order (the values are never NaN).
bool ValueLess(uint64_t a, uint64_t b) {
  return std::bit_cast<double>(a) < std::bit_cast<double>(b);
}

}  // namespace

void ValueSample::AddCount(double value, int64_t count) {
  const uint64_t bits = BitsOf(value);
  if (!Kept(bits, threshold_)) return;
  auto [at, added] = counts_.try_emplace(bits, 0);
  at->second += count;
  if (added && !order_lost_) added_.push_back(bits);
  if (counts_.size() > capacity_) Shrink();
}

void ValueSample::Shrink() {
  order_lost_ = true;
  while (counts_.size() > capacity_) {
    threshold_ = threshold_ == UINT64_MAX ? (uint64_t{1} << 63) : threshold_ >> 1;
    for (auto it = counts_.begin(); it != counts_.end();) {
      it = Kept(it->first, threshold_) ? std::next(it) : counts_.erase(it);
    }
  }
}

void ValueSample::Merge(const ValueSample& other) {
  if (other.threshold_ < threshold_) {
    order_lost_ = true;
    threshold_ = other.threshold_;
    for (auto it = counts_.begin(); it != counts_.end();) {
      it = Kept(it->first, threshold_) ? std::next(it) : counts_.erase(it);
    }
  }
  for (const auto& [bits, count] : other.counts_) {
    if (!Kept(bits, threshold_)) continue;
    auto [at, added] = counts_.try_emplace(bits, 0);
    at->second += count;
    if (added && !order_lost_) added_.push_back(bits);
  }
  if (counts_.size() > capacity_) Shrink();
}

void ValueSample::Clear() {
  threshold_ = UINT64_MAX;
  counts_.clear();
  ordered_ = {};
  added_ = {};
  order_lost_ = false;
}

void ValueSample::Order() const {
  // Made at its exact size, and the list of values added released: between encodings the
  // order costs 8 bytes a kept value, and 8 more a value added since.
  std::vector<uint64_t> order;
  order.reserve(counts_.size());
  if (order_lost_) {
    for (const auto& [bits, count] : counts_) order.push_back(bits);
    std::sort(order.begin(), order.end(), ValueLess);
    order_lost_ = false;
  } else {
    if (added_.empty()) return;
    std::sort(added_.begin(), added_.end(), ValueLess);
    std::merge(ordered_.begin(), ordered_.end(), added_.begin(), added_.end(),
               std::back_inserter(order), ValueLess);
  }
  ordered_ = std::move(order);
  added_ = {};
}

int64_t ValueSample::kept_total() const {
  int64_t total = 0;
  for (const auto& [bits, count] : counts_) total += count;
  return total;
}

std::vector<std::pair<double, int64_t>> ValueSample::Sorted() const {
  Order();
  std::vector<std::pair<double, int64_t>> out;
  out.reserve(ordered_.size());
  for (uint64_t bits : ordered_) out.emplace_back(std::bit_cast<double>(bits), counts_.at(bits));
  return out;
}

std::vector<std::pair<double, int64_t>> ValueSample::InHashOrder() const {
  std::vector<std::pair<uint64_t, uint64_t>> order;  // (hash, bits): distinct values, distinct bits
  order.reserve(counts_.size());
  for (const auto& [bits, count] : counts_) order.emplace_back(Mix(bits), bits);
  std::sort(order.begin(), order.end());
  std::vector<std::pair<double, int64_t>> out;
  out.reserve(order.size());
  for (const auto& [hash, bits] : order) out.emplace_back(std::bit_cast<double>(bits), counts_.at(bits));
  return out;
}

void ValueSample::Encode(std::string& out) const {
  drift::ByteWriter w(out);
  w.U8(kEncodingVersion);
  if (exact()) {
    w.Varint(0);
  } else {
    w.Varint(1);
    w.U64(threshold_);
  }
  // In value order, so equal samples encode to equal bytes.
  Order();
  w.Varint(ordered_.size());
  int digits = 0;
  for (uint64_t bits : ordered_) {
    w.Decimal(std::bit_cast<double>(bits), digits);
    w.Varint(static_cast<uint64_t>(counts_.at(bits)));
  }
}

Result<ValueSample> ValueSample::Decode(std::string_view bytes) {
  drift::ByteReader r(bytes);
  auto corrupt = [&] {
    return MakeError(ErrorCode::kCorruption, "value sample of {} bytes is unreadable",
                     bytes.size());
  };
  const uint8_t version = r.U8();
  ValueSample sample;
  if (version == 1) {
    sample.threshold_ = r.U64();
    const uint32_t n = r.U32();
    if (r.failed() || n > r.remaining() / 16 || n > sample.capacity_) return corrupt();
    for (uint32_t i = 0; i < n; ++i) {
      const double value = r.F64();
      const int64_t count = r.I64();
      if (count <= 0 || value != value) return corrupt();
      sample.counts_[BitsOf(value)] += count;
    }
  } else if (version == kEncodingVersion) {
    const uint64_t sampled = r.Varint();
    if (sampled > 1) return corrupt();
    if (sampled == 1) sample.threshold_ = r.U64();
    const uint64_t n = r.Varint();
    if (r.failed() || n > r.remaining() / 2 || n > sample.capacity_) return corrupt();
    for (uint64_t i = 0; i < n; ++i) {
      const double value = r.Decimal();
      const int64_t count = static_cast<int64_t>(r.Varint());
      if (count <= 0 || value != value) return corrupt();
      sample.counts_[BitsOf(value)] += count;
    }
  } else {
    return corrupt();
  }
  if (r.failed() || !r.at_end()) return corrupt();
  sample.order_lost_ = true;  // its order is made at its first Encode
  return sample;
}

}  // namespace driftd
