#include "engine/aggregates.h"

#include <cstdlib>
#include <limits>

namespace driftd {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

}  // namespace

const std::vector<AggregateDecl>& AggregateKinds() {
  static const std::vector<AggregateDecl> kinds = {
      {.fn = AggregateFn::kCount,
       .name = "count",
       .stable_name = "count",
       .counts_rows = true,
       .finalize = [](const Moments& m) { return static_cast<double>(m.count()); },
       .doc = "Rows (count, count(*)), or rows whose column is not null (count(column))."},
      {.fn = AggregateFn::kSum,
       .name = "sum",
       .stable_name = "sum",
       .finalize = [](const Moments& m) { return m.count() > 0 ? m.sum() : kNan; },
       .doc = "Sum of the column's values (compensated)."},
      {.fn = AggregateFn::kMean,
       .name = "mean",
       .aliases = {"avg"},
       .stable_name = "mean",
       .finalize = [](const Moments& m) { return m.count() > 0 ? m.mean() : kNan; },
       .doc = "Mean of the column's values."},
      {.fn = AggregateFn::kStddev,
       .name = "stddev",
       .stable_name = "stddev",
       .finalize = [](const Moments& m) { return m.count() > 1 ? m.Stddev() : kNan; },
       .doc = "Sample standard deviation (null below 2 values)."},
      {.fn = AggregateFn::kVariance,
       .name = "variance",
       .stable_name = "variance",
       .finalize = [](const Moments& m) { return m.count() > 1 ? m.SampleVariance() : kNan; },
       .doc = "Sample variance (null below 2 values)."},
      {.fn = AggregateFn::kMin,
       .name = "min",
       .stable_name = "min",
       .finalize = [](const Moments& m) { return m.count() > 0 ? m.min() : kNan; },
       .doc = "Smallest value."},
      {.fn = AggregateFn::kMax,
       .name = "max",
       .stable_name = "max",
       .finalize = [](const Moments& m) { return m.count() > 0 ? m.max() : kNan; },
       .doc = "Largest value."},
      {.fn = AggregateFn::kApproxPercentile,
       .name = "approx_percentile",
       .aliases = {"percentile_approx"},
       .stable_name = "approx_percentile",
       .state = AggregateState::kSketch,
       .doc = "approx_percentile(column, p or array(p, ...)[, accuracy]), from a quantile "
              "sketch (Spark's arguments)."},
  };
  return kinds;
}

const AggregateDecl& KindOf(AggregateFn fn) {
  for (const AggregateDecl& kind : AggregateKinds()) {
    if (kind.fn == fn) return kind;
  }
  std::abort();  // every enumerator has its entry (tests/engine check it)
}

const AggregateDecl* FindAggregate(std::string_view name) {
  for (const AggregateDecl& kind : AggregateKinds()) {
    if (kind.name == name) return &kind;
    for (std::string_view alias : kind.aliases) {
      if (alias == name) return &kind;
    }
  }
  return nullptr;
}

}  // namespace driftd
