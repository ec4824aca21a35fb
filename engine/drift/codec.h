// Fixed little-endian byte encoding for drift state. State written by one build must read back
// on any other (and on big-endian hosts), so every value goes through these helpers instead of
// memcpy of structs. Varints (LEB128) and the compact decimal form of a double keep records that
// are mostly small numbers small.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace driftd::drift {

/// Powers of ten that are exact doubles, for the compact decimal form.
inline constexpr double kPow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6, 1e7,
                                    1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14};
/// Decimal digits tried by the compact form; the tag after the last means "raw double".
inline constexpr int kDecimalRaw = 15;

/// The compact decimal form of `v`: (m, k) with v == m / 10^k exactly, |m| < 2^52 and the
/// smallest such k, or false. `hint` is tried first (the digits of the caller's last value);
/// below 2^52 at most one m per k rounds to v, so the smallest k follows from any by dropping
/// trailing zeros of m, and the result does not depend on the hint.
inline bool ToDecimal(double v, int& hint, int64_t& m, int& k) {
  constexpr double kLimit = 4503599627370496.0;  // 2^52
  auto fits = [&](int digits) {
    const double scaled = v * kPow10[digits];
    if (!(std::fabs(scaled) < kLimit)) return false;
    const double r = std::nearbyint(scaled);
    // -0.0 is not m / 10^k for any m (0 / 10^k is +0.0).
    if (r == 0 && std::signbit(v)) return false;
    if (std::bit_cast<uint64_t>(r / kPow10[digits]) != std::bit_cast<uint64_t>(v)) return false;
    m = static_cast<int64_t>(r);
    k = digits;
    return true;
  };
  // Below kOneTry, whether any number of digits fits is whether the most does: if v is the
  // double nearest m / 10^k, v * 10^14 is within 0.2 of the integer m * 10^(14 - k) (which is
  // below 2^50 there), so it rounds to it and back to v. A value of many digits (most of a
  // model's scores and features) is then told apart in one try instead of fifteen.
  constexpr double kOneTry = 1125899906842624.0 / 1e14;  // 2^50 / 10^14, about 11.26
  if (!fits(hint)) {
    bool found = false;
    if (std::fabs(v) < kOneTry) {
      found = fits(kDecimalRaw - 1);
    } else {
      for (int digits = 0; digits < kDecimalRaw && !found; ++digits) found = fits(digits);
    }
    if (!found) return false;
  }
  while (k > 0 && m % 10 == 0) {
    m /= 10;
    --k;
  }
  hint = k;
  return true;
}

/// Zigzag: a signed number as an unsigned one that is small when its magnitude is, of either
/// sign (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...), for a short varint.
inline uint64_t ToZigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t FromZigzag(uint64_t z) {
  return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
}

/// The most bytes a varint takes.
inline constexpr size_t kMaxVarintBytes = 10;

/// Unsigned LEB128 (7 bits a byte, low first; 1 byte below 128) written at `out`, which has room
/// for kMaxVarintBytes; the bytes written.
inline size_t PutVarint(uint64_t v, char* out) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<char>(v);
  return n;
}

/// The most bytes PutDecimal writes for one value.
inline constexpr size_t kMaxDecimalBytes = 10;

/// The compact decimal form of `v` (see ByteWriter::Decimal) written at `out`, which has room
/// for kMaxDecimalBytes; the bytes written.
inline size_t PutDecimal(double v, int& hint, char* out) {
  int64_t m = 0;
  int k = 0;
  uint64_t tag = kDecimalRaw;
  const bool compact = ToDecimal(v, hint, m, k);
  if (compact) tag = (ToZigzag(m) << 4) | static_cast<uint64_t>(k);
  size_t n = PutVarint(tag, out);
  if (!compact) {
    const uint64_t bits = std::bit_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) out[n++] = static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  return n;
}

/// Appends fixed-width little-endian values to a caller-owned string.
class ByteWriter {
 public:
  explicit ByteWriter(std::string& out) : out_(out) {}

  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    char buf[4];
    for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out_.append(buf, 4);
  }
  void U64(uint64_t v) {
    char buf[8];
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out_.append(buf, 8);
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) { U64(std::bit_cast<uint64_t>(v)); }
  /// Unsigned LEB128 (PutVarint).
  void Varint(uint64_t v) {
    char buf[kMaxVarintBytes];
    out_.append(buf, PutVarint(v, buf));
  }
  /// Signed as zigzag varint: small magnitudes of either sign take few bytes.
  void Zigzag(int64_t v) { Varint(ToZigzag(v)); }
  /// A double exactly, in its compact decimal form when it has one (ToDecimal): the varint of
  /// zigzag(m) * 16 + k (2 to 4 bytes for the values of inference logs), else the varint 15
  /// and the 8 raw bytes. `hint` as for ToDecimal.
  void Decimal(double v, int& hint) {
    char buf[kMaxDecimalBytes];
    out_.append(buf, PutDecimal(v, hint, buf));
  }
  /// Length-prefixed (u32) bytes.
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  /// Length-prefixed (varint) bytes.
  void Bytes(std::string_view s) {
    Varint(s.size());
    out_.append(s);
  }

 private:
  std::string& out_;
};

/// Reads what ByteWriter wrote. A read past the end sets failed() and yields zeros, so a decoder
/// can read a whole record and check once at the end.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t U64() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  double F64() { return std::bit_cast<double>(U64()); }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (!Need(1)) return 0;
      const uint8_t byte = static_cast<uint8_t>(in_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    failed_ = true;  // more than 10 bytes
    return 0;
  }
  int64_t Zigzag() { return FromZigzag(Varint()); }
  double Decimal() {
    const uint64_t t = Varint();
    const int k = static_cast<int>(t & 15);
    if (k == kDecimalRaw) return F64();
    return static_cast<double>(FromZigzag(t >> 4)) / kPow10[k];
  }
  /// A varint length and that many bytes.
  std::string_view Bytes() {
    const uint64_t n = Varint();
    if (!Need(n)) return {};
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view Str() {
    uint32_t n = U32();
    if (!Need(n)) return {};
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  bool failed() const { return failed_; }
  bool at_end() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  bool Need(size_t n) {
    if (failed_ || in_.size() - pos_ < n) {
      failed_ = true;
      return false;
    }
    return true;
  }

  std::string_view in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace driftd::drift
