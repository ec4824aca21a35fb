#include "engine/key_interner.h"

#include "engine/string_hash.h"

namespace driftd {

KeyInterner::KeyInterner(int column) : column_(column), seed_(ProcessHashSeed()) {}

uint32_t KeyInterner::Intern(std::string_view name) {
  if (slots_.empty()) Grow();
  const uint64_t hash = HashString(name, seed_);
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
