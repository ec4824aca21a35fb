#include "engine/batch.h"

#include <atomic>

namespace driftd {

void Column::Clear() {
  valid.clear();
  f64.clear();
  i64.clear();
  str_offsets.clear();
  str_data.clear();
  arr_offsets.clear();
  if (type == FieldType::kString) str_offsets.push_back(0);
  if (type == FieldType::kDoubleArray) arr_offsets.push_back(0);
}

void RecordBatch::Reset(const Schema& schema) {
  columns.resize(schema.fields.size());
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    columns[i].type = schema.fields[i].type;
    columns[i].Clear();
  }
  positions.clear();
  num_rows = 0;
  static std::atomic<uint64_t> generations{0};
  generation = generations.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace driftd
