// The aggregate functions of a query (query.aggregates), one definition each: the names it is
// written with, its stable spelling in checkpoints' fingerprints, the state it keeps and how its
// value is taken from that state. config/ (names, arguments), the fingerprint, the aggregation
// (engine/aggregation.h) and the pipeline reference read this table; adding an aggregate over
// the moments a group keeps is one entry in aggregates.cc plus its AggregateFn enumerator.
//
// Thread-safety: the table is built once and read-only.
#pragma once

#include <string_view>
#include <vector>

#include "engine/pipeline_spec.h"
#include "engine/stats.h"

namespace driftd {

/// The state an aggregate reads per group and series.
enum class AggregateState {
  kMoments,  // count, mean, M2, min, max, sum (engine/stats.h): mergeable, exact
  kSketch,   // a quantile sketch (engine/quantile_sketch.h), with its own arguments
};

struct AggregateDecl {
  AggregateFn fn = AggregateFn::kCount;
  /// As written in query.aggregates and in output column names: "mean".
  std::string_view name;
  /// Other spellings accepted (Spark's): "avg" for mean. Default: none.
  std::vector<std::string_view> aliases = {};
  /// Its spelling in checkpoints' fingerprints: fixed once released, whatever `name` becomes,
  /// so that a rename cannot invalidate every checkpoint.
  std::string_view stable_name;
  AggregateState state = AggregateState::kMoments;
  /// Counts rows: takes `*` (count(*)) and columns of any type, and its result is a whole
  /// number. Default: false (a numeric column; a double result).
  bool counts_rows = false;
  /// Its value over a series' moments; NaN renders as null. kMoments only.
  double (*finalize)(const Moments& m) = nullptr;
  std::string_view doc;
};

/// Every aggregate, in the order the reference lists them.
const std::vector<AggregateDecl>& AggregateKinds();
/// The definition of `fn`.
const AggregateDecl& KindOf(AggregateFn fn);
/// The aggregate written `name` (lower case; a name or an alias), or nullptr.
const AggregateDecl* FindAggregate(std::string_view name);

}  // namespace driftd
