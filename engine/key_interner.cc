#include "engine/key_interner.h"

namespace driftd {

uint32_t KeyInterner::Intern(std::string_view name) {
  // Consecutive rows of one model are common: no hash lookup for them.
  if (last_ != kNull && name == *names_[last_]) return last_;
  auto it = ids_.find(name);
  if (it == ids_.end()) {
    it = ids_.emplace(std::string(name), static_cast<uint32_t>(names_.size())).first;
    names_.push_back(&it->first);
  }
  last_ = it->second;
  return last_;
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
