#include "engine/key_interner.h"

#include <cstring>
#include <random>

namespace driftd {

namespace {

__extension__ typedef unsigned __int128 Uint128;  // NOLINT(modernize-use-using)

uint64_t Mix(uint64_t a, uint64_t b) {
  const Uint128 product = static_cast<Uint128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

constexpr uint64_t kOdd1 = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kOdd2 = 0xd6e8feb86659fd93ull;

// A name's hash in a few multiplications, where std::hash spent about a hundred instructions on
// a short name. Names of up to 16 bytes (most models') are read in at most two overlapping loads
// per half. The seed is drawn once per process: ids never depend on it (they are given in order
// of first appearance), and a stream cannot pick names that all land in one run of slots.
uint64_t HashName(std::string_view name, uint64_t seed) {
  const auto* p = reinterpret_cast<const unsigned char*>(name.data());
  size_t n = name.size();
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

uint64_t ProcessSeed() {
  static const uint64_t seed = [] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }();
  return seed;
}

}  // namespace

KeyInterner::KeyInterner(int column) : column_(column), seed_(ProcessSeed()) {}

uint32_t KeyInterner::Intern(std::string_view name) {
  if (slots_.empty()) Grow();
  const uint64_t hash = HashName(name, seed_);
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    Slot& slot = slots_[i];
    if (slot.id == kNull) {
      const auto id = static_cast<uint32_t>(names_.size());
      slot = {hash, id};
      names_.emplace_back(name);
      if (names_.size() * 2 > slots_.size()) Grow();
      return id;
    }
    if (slot.hash == hash && names_[slot.id] == name) return slot.id;
  }
}

void KeyInterner::Grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.id == kNull) continue;
    size_t i = slot.hash & mask;
    while (slots_[i].id != kNull) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

const std::vector<uint32_t>& KeyInterner::Ids(const RecordBatch& batch) {
  if (batch.generation != 0 && batch.generation == generation_ &&
      row_ids_.size() == batch.num_rows) {
    return row_ids_;
  }
  generation_ = batch.generation;
  row_ids_.resize(batch.num_rows);
  const Column& column = batch.columns[static_cast<size_t>(column_)];
  for (size_t row = 0; row < batch.num_rows; ++row) {
    row_ids_[row] = column.IsNull(row) ? kNull : Intern(column.String(row));
  }
  return row_ids_;
}

}  // namespace driftd
