// The byte codec of everything driftd keeps on disk (the checkpoint's keys and values: state,
// commit records, the outbox), so that a checkpoint written on one host reads on any other and
// keys sort as their values do. state/README.md describes where each record uses it.
//
// - Integers are big-endian, fixed width. RocksDB orders keys bytewise, so a big-endian
//   unsigned number sorts numerically; a signed one is written with its sign bit flipped
//   (OrderedI64) so that negative numbers sort first.
// - Strings are length-prefixed: a u32 length, then the bytes. In a key a string is followed by
//   the rest of the key; keys of one kind compare by length first, then bytes.
// - Doubles are their IEEE-754 bits as a u64.
// - Every value starts with a u8 version of its layout; a reader accepts the versions it knows
//   (older ones included) and refuses the rest, never guesses.
// - Inside a value, a field may use the compact body encoding of drift's state (engine/drift/
//   codec.h: little-endian LEB128 varints and the compact decimal form of doubles; fixed-width
//   fields of those bodies are little-endian). Moments, quantile sketches and the drift
//   monitor's records are such bodies, each with a version byte of its own.
// - Numbers kept as text (the checkpoint's metadata) are parsed with std::from_chars, which
//   never throws and refuses trailing bytes (ParseDecimal).
//
// Thread-safety: the functions are pure; a Writer or Reader is used by one thread.
#pragma once

#include <bit>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "engine/drift/codec.h"
#include "engine/result.h"

namespace driftd::codec {

/// Appends big-endian values to a caller-owned string.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void U64(uint64_t v) { Fixed(v, 8); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  /// A signed number whose bytes sort as the number does (sign bit flipped), for keys.
  void OrderedI64(int64_t v) { U64(static_cast<uint64_t>(v) ^ (uint64_t{1} << 63)); }
  void F64(double v) { U64(std::bit_cast<uint64_t>(v)); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  /// A u32 length and the bytes.
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  /// Bytes as they are (the rest of a value, or a part whose length the reader knows).
  void Raw(std::string_view s) { out_.append(s); }

 private:
  void Fixed(uint64_t v, int bytes) {
    char buf[8];
    for (int i = 0; i < bytes; ++i) buf[i] = static_cast<char>(v >> (8 * (bytes - 1 - i)));
    out_.append(buf, static_cast<size_t>(bytes));
  }

  std::string& out_;
};

/// The byte order of a reader's fixed-width integers.
enum class ByteOrder {
  kBig,     // Writer's: the codec's
  kLittle,  // records written before the codec, by hosts that copied integers' memory
};

/// Reads what Writer wrote (ByteOrder::kBig: Reader), or the records written before this codec
/// in the hosts' little-endian order (LegacyReader), which are still read. Each read returns
/// false (and reads nothing) when the bytes run out, so a decoder refuses a truncated value
/// instead of reading past it.
template <ByteOrder kOrder>
class BasicReader {
 public:
  explicit BasicReader(std::string_view in) : in_(in) {}

  bool U8(uint8_t& v) {
    if (in_.empty()) return false;
    v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool U32(uint32_t& v) {
    uint64_t wide = 0;
    if (!Fixed(wide, 4)) return false;
    v = static_cast<uint32_t>(wide);
    return true;
  }
  bool U64(uint64_t& v) { return Fixed(v, 8); }
  bool I64(int64_t& v) {
    uint64_t u = 0;
    if (!U64(u)) return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool OrderedI64(int64_t& v) {
    uint64_t u = 0;
    if (!U64(u)) return false;
    v = static_cast<int64_t>(u ^ (uint64_t{1} << 63));
    return true;
  }
  bool F64(double& v) {
    uint64_t u = 0;
    if (!U64(u)) return false;
    v = std::bit_cast<double>(u);
    return true;
  }
  bool Bool(bool& v) {
    uint8_t b = 0;
    if (!U8(b) || b > 1) return false;
    v = b != 0;
    return true;
  }
  /// A u32 length and that many bytes (a view into the input).
  bool String(std::string_view& v) {
    uint32_t size = 0;
    if (!U32(size) || in_.size() < size) return false;
    v = in_.substr(0, size);
    in_.remove_prefix(size);
    return true;
  }
  bool String(std::string& v) {
    std::string_view view;
    if (!String(view)) return false;
    v.assign(view);
    return true;
  }
  /// The next `size` bytes as they are.
  bool Raw(size_t size, std::string_view& v) {
    if (in_.size() < size) return false;
    v = in_.substr(0, size);
    in_.remove_prefix(size);
    return true;
  }

  /// What is left unread.
  std::string_view rest() const { return in_; }
  bool done() const { return in_.empty(); }

 private:
  bool Fixed(uint64_t& v, int bytes) {
    if (in_.size() < static_cast<size_t>(bytes)) return false;
    v = 0;
    if constexpr (kOrder == ByteOrder::kBig) {
      for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(in_[i]);
    } else {
      for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in_[i]);
    }
    in_.remove_prefix(static_cast<size_t>(bytes));
    return true;
  }

  std::string_view in_;
};

using Reader = BasicReader<ByteOrder::kBig>;
using LegacyReader = BasicReader<ByteOrder::kLittle>;

/// Source offsets ("topic-0" -> 42) in a value: a u32 count, then each key (String) and offset
/// (I64), in key order.
inline void PutOffsets(Writer& out, const std::map<std::string, int64_t>& offsets) {
  out.U32(static_cast<uint32_t>(offsets.size()));
  for (const auto& [key, offset] : offsets) {
    out.String(key);
    out.I64(offset);
  }
}

inline bool GetOffsets(Reader& in, std::map<std::string, int64_t>& offsets) {
  uint32_t count = 0;
  // An entry takes at least 12 bytes: a count beyond what is left is refused before allocating.
  if (!in.U32(count) || count > in.rest().size() / 12) return false;
  offsets.clear();
  for (uint32_t i = 0; i < count; ++i) {
    std::string key;
    int64_t offset = 0;
    if (!in.String(key) || !in.I64(offset)) return false;
    offsets.emplace(std::move(key), offset);
  }
  return true;
}

/// A whole decimal integer (optional '-', digits) as persisted in text, or nullopt: never
/// throws, and refuses empty text, trailing bytes and overflow.
template <typename T = int64_t>
std::optional<T> ParseDecimal(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

/// A name inside a '/'-separated key path (drift's "drift/<model>/<series>", its evaluations,
/// the status history's "p/<model>/<series>/<seq>"): '%' is written "%25" and '/' "%2F", every
/// other byte as it is, so the path splits at its '/' and keys keep their names' order within
/// a prefix. One scheme for every such key, persisted: it never changes.
inline std::string EscapeKeyPart(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

/// The name EscapeKeyPart wrote; kCorruption for an escape it never writes.
inline Result<std::string> UnescapeKeyPart(std::string_view part) {
  std::string out;
  out.reserve(part.size());
  for (size_t i = 0; i < part.size(); ++i) {
    if (part[i] != '%') {
      out.push_back(part[i]);
      continue;
    }
    const std::string_view code = part.substr(i + 1, 2);
    if (code == "25") {
      out.push_back('%');
    } else if (code == "2F") {
      out.push_back('/');
    } else {
      return MakeError(ErrorCode::kCorruption, "state key: bad escape in '{}'", part);
    }
    i += 2;
  }
  return out;
}

/// The compact value bodies of drift's state (engine/drift/codec.h), named here so that every
/// encoding on disk is reached from this header.
using BodyWriter = drift::ByteWriter;
using BodyReader = drift::ByteReader;

}  // namespace driftd::codec
