#include "engine/expr/projection.h"

#include <cstring>
#include <utility>

namespace driftd {

Result<std::unique_ptr<Projection>> Projection::Create(const PipelineSpec& spec) {
  std::unique_ptr<Projection> projection(new Projection());
  // Each derived column may read the ones before it; the filter reads them all.
  Schema columns = WithMetadataColumns(spec.schema, spec.query.metadata);
  for (const DerivedColumnSpec& derived : spec.query.derived) {
    auto item = expr::CompileSelectItem(derived.text, columns);
    if (!item) {
      return MakeError(ErrorCode::kConfig, "query.select '{}': {}", derived.text,
                       item.error().message);
    }
    columns.fields.push_back({derived.name, item->expression.type(), true});
    projection->derived_.push_back(std::move(item->expression));
  }
  if (!spec.query.where.empty()) {
    auto where = expr::Expression::Compile(spec.query.where, columns);
    if (!where) {
      return MakeError(ErrorCode::kConfig, "query.where: {}", where.error().message);
    }
    if (where->type() != FieldType::kBoolean) {
      return MakeError(ErrorCode::kConfig, "query.where is {}, not a boolean",
                       FieldTypeName(where->type()));
    }
    projection->where_ = std::move(*where);
  }
  return projection;
}

Result<std::vector<bool>> ColumnsUsed(const PipelineSpec& spec) {
  const Schema& schema = spec.schema;
  std::vector<bool> used(schema.fields.size(), false);
  auto use = [&](const std::string& name) {
    const int index = schema.IndexOf(name);
    if (index >= 0) used[static_cast<size_t>(index)] = true;
  };
  const QuerySpec& query = spec.query;
  for (const std::string& name : query.group_by) use(name);
  if (query.window) use(query.window->column);
  if (query.watermark) use(query.watermark->column);
  for (const AggregateSpec& aggregate : query.aggregates) use(aggregate.column);
  if (!query.IsAggregation()) {
    // A select stage emits its columns, or every schema column.
    if (query.select.empty()) used.assign(used.size(), true);
    for (const std::string& name : query.select) use(name);
  }
  // Derived columns and the filter: the schema columns their expressions read (indexes past
  // the schema's fields are metadata or earlier derived columns).
  Schema columns = WithMetadataColumns(schema, query.metadata);
  auto read = [&](const expr::Expression& expression) {
    for (int index : expression.ColumnsRead()) {
      if (index >= 0 && static_cast<size_t>(index) < used.size()) used[index] = true;
    }
  };
  for (const DerivedColumnSpec& derived : query.derived) {
    auto item = expr::CompileSelectItem(derived.text, columns);
    if (!item) {
      return MakeError(ErrorCode::kConfig, "query.select '{}': {}", derived.text,
                       item.error().message);
    }
    read(item->expression);
    columns.fields.push_back({derived.name, item->expression.type(), true});
  }
  if (!query.where.empty()) {
    auto where = expr::Expression::Compile(query.where, columns);
    if (!where) return MakeError(ErrorCode::kConfig, "query.where: {}", where.error().message);
    read(*where);
  }
  const DriftSpec& drift = spec.drift;
  if (drift.enabled) {
    use(drift.model_column.empty() && !query.group_by.empty() ? query.group_by[0]
                                                               : drift.model_column);
    for (const std::string& name : drift.series) use(name);
    // Segments (drift per model and segment) may name columns nothing else reads.
    for (const std::string& name : drift.segment_by) use(name);
    use(drift.prediction_column);
    use(drift.label_column);
    // Drift dates its values by the window or watermark column, else by the first timestamp
    // column (engine/executor/drift_stage.cc).
    if (!query.window && !query.watermark) {
      const Schema query_schema = QuerySchema(spec);
      for (const Field& field : query_schema.fields) {
        if (field.type == FieldType::kTimestamp) {
          use(field.name);
          break;
        }
      }
    }
  }
  // The labels' join reads the model, the join key and the prediction
  // (engine/executor/performance_stage.cc).
  if (spec.labels.enabled) {
    use(drift.model_column.empty() && !query.group_by.empty() ? query.group_by[0]
                                                               : drift.model_column);
    use(spec.labels.prediction_key);
    use(spec.performance.prediction);
  }
  // A scaled-out query routes rows by the model column (engine/executor/scale_out.cc).
  if (spec.scale_out.enabled) {
    use(drift.model_column.empty() && !query.group_by.empty() ? query.group_by[0]
                                                               : drift.model_column);
  }
  return used;
}

int64_t Projection::Apply(RecordBatch& batch) {
  for (expr::Expression& derived : derived_) {
    Column column = derived.Evaluate(batch);
    batch.columns.push_back(std::move(column));
  }
  if (!where_) return 0;
  const Column& condition = where_->Evaluate(batch);
  keep_.resize(batch.num_rows);
  int64_t removed = 0;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    keep_[row] = condition.valid[row] != 0 && condition.i64[row] != 0;
    removed += keep_[row] == 0;
  }
  if (removed > 0) KeepRows(batch, keep_);
  return removed;
}

namespace {

// Compacts the kept rows of a column of variable-width values (`offsets` into `data`) in place,
// a run of consecutive kept rows at a time: rows are kept in runs (the rows of a partition, of a
// model) far more often than one by one. Returns the rows kept.
template <typename Data>
size_t KeepRuns(std::vector<uint8_t>& valid, std::vector<uint32_t>& offsets, Data& data,
                const std::vector<uint8_t>& keep) {
  const size_t rows = keep.size();
  size_t out = 0;
  uint32_t write = 0;
  size_t row = 0;
  while (row < rows) {
    if (!keep[row]) {
      ++row;
      continue;
    }
    const size_t first = row;
    while (row < rows && keep[row]) ++row;
    // Rows [first, row) move to `out`, their values to `write`.
    const uint32_t begin = offsets[first];
    const uint32_t size = offsets[row] - begin;
    if (write != begin) {
      std::memmove(data.data() + write, data.data() + begin, size * sizeof(data[0]));
    }
    for (size_t r = first; r < row; ++r, ++out) {
      valid[out] = valid[r];
      offsets[out] = offsets[r] - begin + write;
    }
    write += size;
  }
  offsets[out] = write;
  offsets.resize(out + 1);
  data.resize(write);
  return out;
}

// Compacts in place: a kept row only ever moves towards the front.
void KeepColumnRows(Column& column, const std::vector<uint8_t>& keep) {
  const size_t rows = keep.size();
  size_t out = 0;
  switch (column.type) {
    case FieldType::kString:
      out = KeepRuns(column.valid, column.str_offsets, column.str_data, keep);
      break;
    case FieldType::kDoubleArray:
      out = KeepRuns(column.valid, column.arr_offsets, column.f64, keep);
      break;
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap: {
      // Entries of several kinds move together: rebuilt rather than moved in place.
      Column kept;
      kept.type = column.type;
      kept.Clear();
      for (size_t row = 0; row < rows; ++row) {
        if (keep[row]) kept.AppendRow(column, row);
      }
      column = std::move(kept);
      return;
    }
    case FieldType::kDouble:
      for (size_t row = 0; row < rows; ++row) {
        if (!keep[row]) continue;
        column.valid[out] = column.valid[row];
        column.f64[out] = column.f64[row];
        ++out;
      }
      column.f64.resize(out);
      break;
    default:
      for (size_t row = 0; row < rows; ++row) {
        if (!keep[row]) continue;
        column.valid[out] = column.valid[row];
        column.i64[out] = column.i64[row];
        ++out;
      }
      column.i64.resize(out);
      break;
  }
  column.valid.resize(out);
}

}  // namespace

void KeepRows(RecordBatch& batch, const std::vector<uint8_t>& keep) {
  for (Column& column : batch.columns) KeepColumnRows(column, keep);
  size_t out = 0;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    if (keep[row]) batch.positions[out++] = batch.positions[row];
  }
  batch.positions.resize(out);
  batch.num_rows = out;
}

}  // namespace driftd
