// libFuzzer harness: query.where and derived select columns (engine/expr) on arbitrary text,
// compiled against a schema of every type and evaluated on a batch holding NULLs and extreme
// values, then projected (filter and derived columns together). A refusal must say where and
// why; a compiled expression must give one value per row, of its declared type.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/batch.h"
#include "engine/expr/expr.h"
#include "engine/expr/projection.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace driftd;

Schema FuzzSchema() {
  Schema schema;
  schema.fields = {
      {"model_id", FieldType::kString, true},  {"v", FieldType::kString, true},
      {"p", FieldType::kDouble, true},         {"g", FieldType::kDouble, true},
      {"n", FieldType::kLong, true},           {"i", FieldType::kInt, true},
      {"ok", FieldType::kBoolean, true},       {"t", FieldType::kTimestamp, true},
      {"f", FieldType::kDoubleArray, true},
  };
  return schema;
}

// Three rows: ordinary values, extremes (INT64_MIN, -0.0, an empty string), and NULLs.
RecordBatch FuzzBatch(const Schema& schema) {
  RecordBatch batch;
  batch.Reset(schema);
  batch.num_rows = 3;
  batch.positions.resize(3);
  for (Column& column : batch.columns) {
    for (size_t row = 0; row < 3; ++row) {
      column.valid.push_back(row != 2);
      switch (column.type) {
        case FieldType::kString:
          column.str_data += row == 0 ? "shadow" : "";
          column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
          break;
        case FieldType::kDoubleArray:
          if (row == 0) {
            column.f64.push_back(1.5);
            column.f64.push_back(-2);
          }
          column.arr_offsets.push_back(static_cast<uint32_t>(column.f64.size()));
          break;
        case FieldType::kDouble: column.f64.push_back(row == 0 ? 1e308 : -0.0); break;
        default: column.i64.push_back(row == 0 ? INT64_MAX : INT64_MIN); break;
      }
    }
  }
  return batch;
}

void CheckResult(const Column& column, FieldType type, size_t rows) {
  if (column.type != type || column.valid.size() != rows) std::abort();
  if (type == FieldType::kString && column.str_offsets.size() != rows + 1) std::abort();
  if (type == FieldType::kDoubleArray && column.arr_offsets.size() != rows + 1) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Schema schema = FuzzSchema();
  static const RecordBatch batch = FuzzBatch(schema);
  const std::string_view text = fuzz::AsText(data, size);

  auto expression = expr::Expression::Compile(text, schema);
  if (expression) {
    CheckResult(expression->Evaluate(batch), expression->type(), batch.num_rows);
    // Again on the same batch: constants are reused, results must be the same shape.
    CheckResult(expression->Evaluate(batch), expression->type(), batch.num_rows);
  } else if (expression.error().message.empty() || expression.error().offset > text.size()) {
    std::abort();
  }

  auto item = expr::CompileSelectItem(text, schema);
  if (!item) {
    if (item.error().message.empty() || item.error().offset > text.size()) std::abort();
    return 0;
  }
  CheckResult(item->expression.Evaluate(batch), item->expression.type(), batch.num_rows);
  // The loader refuses a name the schema has (config/loader_query.cc); so does this.
  if (item->alias.empty() || schema.IndexOf(item->alias) >= 0) return 0;
  // As a pipeline would use it: the derived column, and a filter over it when it is boolean.
  PipelineSpec spec;
  spec.schema = schema;
  spec.query.derived.push_back({item->alias, std::string(text), item->expression.type(), {}});
  if (item->expression.type() == FieldType::kBoolean) spec.query.where = "`" + item->alias + "`";
  if (item->alias.find('`') != std::string::npos) spec.query.where.clear();
  auto projection = Projection::Create(spec);
  if (!projection) std::abort();
  RecordBatch copy = batch;
  const int64_t removed = (*projection)->Apply(copy);
  if (removed < 0 || copy.num_rows + static_cast<size_t>(removed) != batch.num_rows ||
      copy.columns.size() != schema.fields.size() + 1) {
    std::abort();
  }
  return 0;
}
