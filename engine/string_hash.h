// Hashing strings: HashString, the fast seeded hash of the per-row lookups (model ids, shard
// routing); StableHash, the one processes agree on; and hash tables keyed by std::string that
// are looked up by std::string_view without making a string per lookup (C++20 heterogeneous
// lookup): a record's model, key or series name is a view into the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace driftd {

namespace string_hash_detail {

__extension__ typedef unsigned __int128 Uint128;  // NOLINT(modernize-use-using)

inline uint64_t Mix(uint64_t a, uint64_t b) {
  const Uint128 product = static_cast<Uint128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

constexpr uint64_t kOdd1 = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kOdd2 = 0xd6e8feb86659fd93ull;

}  // namespace string_hash_detail

/// A hash of a string in a few multiplications (std::hash spends about a hundred instructions on
/// a short model name, and the engine hashes one per row): strings of up to 16 bytes, most
/// models' names, are read in at most two overlapping loads per half. For in-memory tables and
/// routing only, never persisted: with the seed ProcessHashSeed draws, a stream does not know
/// where its names land (though some pairs of names hash alike whatever the seed: the last mix
/// is symmetric in its two words).
inline uint64_t HashString(std::string_view text, uint64_t seed) {
  using string_hash_detail::kOdd1;
  using string_hash_detail::kOdd2;
  using string_hash_detail::Mix;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  uint64_t a = 0;
  uint64_t b = 0;
  auto load8 = [](const unsigned char* at) {
    uint64_t v;
    std::memcpy(&v, at, 8);
    return v;
  };
  auto load4 = [](const unsigned char* at) {
    uint32_t v;
    std::memcpy(&v, at, 4);
    return uint64_t{v};
  };
  uint64_t h = seed ^ (n * kOdd1);
  if (n <= 16) {
    if (n >= 8) {
      a = load8(p);
      b = load8(p + n - 8);
    } else if (n >= 4) {
      a = load4(p);
      b = load4(p + n - 4);
    } else if (n > 0) {
      a = (uint64_t{p[0]} << 16) | (uint64_t{p[n / 2]} << 8) | p[n - 1];
    }
  } else {
    for (; n > 16; n -= 16, p += 16) h = Mix(load8(p) ^ seed ^ kOdd1, load8(p + 8) ^ h);
    a = load8(p + n - 16);
    b = load8(p + n - 8);
  }
  return Mix(a ^ seed ^ kOdd2, b ^ h);
}

/// The seed HashString is used with in this process, drawn once.
uint64_t ProcessHashSeed();

/// FNV-1a 64 of a string: the same in every process, build and version, for what processes must
/// agree on (which task owns a model, a join key). Slow per byte: not for per-row tables.
inline uint64_t StableHash(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;
using StringSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;

}  // namespace driftd
