// The query's row-level step before its stages: derived columns of `query.select` computed and
// appended after the decoded columns, then `query.where` applied. A row whose condition is not
// TRUE (FALSE or NULL, as Spark's filter) is removed from the batch and counted as filtered;
// it is neither malformed nor dead-lettered, and it moves no event-time clock.
//
// Lifecycle: Create once per query (or task); Apply on every decoded batch, on one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/batch.h"
#include "engine/expr/expr.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"

namespace driftd {

class Projection {
 public:
  /// Compiles the query's derived columns and filter against the pipeline's schema. A spec
  /// that passed validation compiles; an error (kConfig) names the expression.
  static Result<std::unique_ptr<Projection>> Create(const PipelineSpec& spec);

  /// Appends the derived columns to `batch` (whose columns are the schema's, then the metadata
  /// columns the query reads) and removes the rows the filter rejects, keeping the order of the
  /// rest. Returns the number removed.
  int64_t Apply(RecordBatch& batch);

 private:
  Projection() = default;

  std::vector<expr::Expression> derived_;
  std::optional<expr::Expression> where_;
  std::vector<uint8_t> keep_;
};

/// The fields of `spec.schema` that something in the pipeline reads: groupBy, window and
/// watermark columns, aggregated columns, the columns a query without aggregation emits, what
/// derived columns and the filter read, and drift's model, series, prediction, label and
/// event-time columns. The decoder need not convert the others (ValueDecoder::Project).
/// Indexes follow spec.schema.fields; the spec must have passed validation.
Result<std::vector<bool>> ColumnsUsed(const PipelineSpec& spec);

/// Keeps the rows of `batch` whose `keep` entry is non-zero, in order.
void KeepRows(RecordBatch& batch, const std::vector<uint8_t>& keep);

}  // namespace driftd
