// Dense ids for the values of one string column of the decoded rows (the query's model column),
// so that the stages keyed by it, aggregation by model and drift, look a row's model up once:
// the first stage to ask for a batch's ids computes them, the next one reuses them. Ids are
// given in order of first appearance and never change; they are not persisted (state keys use
// the names). Not thread-safe: the executor's thread, one interner per task's stages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/batch.h"
#include "engine/string_hash.h"

namespace driftd {

class KeyInterner {
 public:
  /// The id of a null value.
  static constexpr uint32_t kNull = UINT32_MAX;

  /// `column`: the index of a kString column of the rows the stages see.
  explicit KeyInterner(int column) : column_(column) {}

  int column() const { return column_; }

  /// The id of each row's value of the column in `batch` (kNull where it is null), computed
  /// once per batch (RecordBatch::generation).
  const std::vector<uint32_t>& Ids(const RecordBatch& batch);

  /// The id of `name`, given if new.
  uint32_t Intern(std::string_view name);
  const std::string& Name(uint32_t id) const { return *names_[id]; }
  size_t size() const { return names_.size(); }

 private:
  int column_;
  StringMap<uint32_t> ids_;
  std::vector<const std::string*> names_;  // by id: the map's keys (nodes do not move)
  uint32_t last_ = kNull;                  // the id of the previous row's value
  // The ids of the batch seen last.
  uint64_t generation_ = 0;
  std::vector<uint32_t> row_ids_;
};

}  // namespace driftd
