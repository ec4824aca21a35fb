// Dense ids for the values of one string column of the decoded rows (the query's model column),
// so that the stages keyed by it, aggregation by model and drift, look a row's model up once:
// the first stage to ask for a batch's ids computes them, the next one reuses them. Ids are
// given in order of first appearance and never change; they are not persisted (state keys use
// the names). Not thread-safe: one thread at a time (the stages sharing a task's interner run on
// one thread; an aggregation shard's own one is used by the lane folding that shard).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"

namespace driftd {

class KeyInterner {
 public:
  /// The id of a null value.
  static constexpr uint32_t kNull = UINT32_MAX;

  /// `column`: the index of a kString column of the rows the stages see.
  explicit KeyInterner(int column);

  int column() const { return column_; }

  /// The id of each row's value of the column in `batch` (kNull where it is null), computed
  /// once per batch (RecordBatch::generation).
  const std::vector<uint32_t>& Ids(const RecordBatch& batch);

  /// The id of `name`, given if new.
  uint32_t Intern(std::string_view name);
  const std::string& Name(uint32_t id) const { return names_[id]; }
  size_t size() const { return names_.size(); }

 private:
  // The names' ids in an open-addressing table: no node to follow and no division per lookup,
  // and each slot holds its name's full hash, so a probe compares strings only when the hashes
  // agree. At most half full; linear probing.
  struct Slot {
    uint64_t hash = 0;
    uint32_t id = kNull;
  };
  void Grow();

  int column_;
  uint64_t seed_;
  std::vector<Slot> slots_;
  std::deque<std::string> names_;  // by id (a deque: names do not move as it grows)
  // The ids of the batch seen last.
  uint64_t generation_ = 0;
  std::vector<uint32_t> row_ids_;
};

}  // namespace driftd
