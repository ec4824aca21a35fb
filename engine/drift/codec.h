// Fixed little-endian byte encoding for drift state. State written by one build must read back
// on any other (and on big-endian hosts), so every value goes through these helpers instead of
// memcpy of structs.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace driftd::drift {

/// Appends fixed-width little-endian values to a caller-owned string.
class ByteWriter {
 public:
  explicit ByteWriter(std::string& out) : out_(out) {}

  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) { U64(std::bit_cast<uint64_t>(v)); }
  /// Length-prefixed (u32) bytes.
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
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
