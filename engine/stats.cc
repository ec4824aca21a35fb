#include "engine/stats.h"

#include <bit>
#include <cmath>
#include <iterator>

#include "engine/drift/codec.h"

namespace driftd {

void Moments::Merge(const Moments& other) {
  if (other.count_ == 0) return;
  if (count_ == 0) {
    *this = other;
    return;
  }
  const double na = static_cast<double>(count_);
  const double nb = static_cast<double>(other.count_);
  const double n = na + nb;
  const double delta = other.mean_ - mean_;
  // Chan, Golub and LeVeque: M2 = M2a + M2b + delta^2 * na * nb / n.
  mean_ += delta * (nb / n);
  m2_ += other.m2_ + delta * delta * (na * nb / n);
  count_ += other.count_;
  if (other.min_ < min_) min_ = other.min_;
  if (other.max_ > max_) max_ = other.max_;
  AddToSum(other.sum_);
  AddToSum(other.sum_compensation_);
}

double Moments::Stddev() const { return std::sqrt(SampleVariance()); }

void Moments::Encode(std::string& out) const {
  // Built in place and appended once: a group of many columns encodes thousands of these a
  // batch, and eight appends each (with their capacity checks) were most of the cost.
  char bytes[kEncodedSize];
  bytes[0] = static_cast<char>(kEncodingVersion);
  const uint64_t fields[] = {static_cast<uint64_t>(count_),
                             std::bit_cast<uint64_t>(mean_),
                             std::bit_cast<uint64_t>(m2_),
                             std::bit_cast<uint64_t>(min_),
                             std::bit_cast<uint64_t>(max_),
                             std::bit_cast<uint64_t>(sum_),
                             std::bit_cast<uint64_t>(sum_compensation_)};
  static_assert(kEncodedSize == 1 + 8 * std::size(fields));
  for (size_t f = 0; f < std::size(fields); ++f) {
    for (size_t i = 0; i < 8; ++i) {
      bytes[1 + 8 * f + i] = static_cast<char>((fields[f] >> (8 * i)) & 0xff);
    }
  }
  out.append(bytes, kEncodedSize);
}

Result<Moments> Moments::Decode(std::string_view bytes) {
  if (bytes.size() != kEncodedSize) {
    return MakeError(ErrorCode::kCorruption, "moments: expected {} bytes, got {}", kEncodedSize,
                     bytes.size());
  }
  drift::ByteReader r(bytes);
  const uint8_t version = r.U8();
  if (version != kEncodingVersion) {
    return MakeError(ErrorCode::kCorruption, "moments: unknown encoding version {}", version);
  }
  Moments m;
  m.count_ = r.I64();
  m.mean_ = r.F64();
  m.m2_ = r.F64();
  m.min_ = r.F64();
  m.max_ = r.F64();
  m.sum_ = r.F64();
  m.sum_compensation_ = r.F64();
  if (m.count_ < 0 || !(m.m2_ >= 0) || std::isnan(m.mean_)) {
    return MakeError(ErrorCode::kCorruption, "moments: impossible values (count {}, m2 {})",
                     m.count_, m.m2_);
  }
  return m;
}

Moments Moments::FromParts(int64_t count, double mean, double m2, double min, double max,
                           double sum) {
  Moments m;
  if (count <= 0) return m;
  m.count_ = count;
  m.mean_ = mean;
  m.m2_ = m2;
  m.min_ = min;
  m.max_ = max;
  m.sum_ = sum;
  return m;
}

}  // namespace driftd
