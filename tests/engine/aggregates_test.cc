// The aggregate functions' definitions (engine/aggregates.h): one per function, found by each
// of its names, with the values of the moments they finalize.
#include <cmath>
#include <set>

#include <catch2/catch.hpp>

#include "engine/aggregates.h"

namespace driftd {
namespace {

TEST_CASE("every aggregate function has one definition, found by each of its names",
          "[aggregation][kinds]") {
  std::set<AggregateFn> seen;
  std::set<std::string_view> names;
  for (const AggregateDecl& kind : AggregateKinds()) {
    INFO(kind.name);
    CHECK(seen.insert(kind.fn).second);
    CHECK(&KindOf(kind.fn) == &kind);
    CHECK(FindAggregate(kind.name) == &kind);
    CHECK(names.insert(kind.name).second);
    for (std::string_view alias : kind.aliases) {
      CHECK(FindAggregate(alias) == &kind);
      CHECK(names.insert(alias).second);
    }
    CHECK_FALSE(kind.stable_name.empty());
    CHECK_FALSE(kind.doc.empty());
    CHECK((kind.state == AggregateState::kMoments) == (kind.finalize != nullptr));
  }
  CHECK(seen.size() == 8);  // every AggregateFn
  CHECK(FindAggregate("avg") == &KindOf(AggregateFn::kMean));
  CHECK(FindAggregate("median") == nullptr);
}

TEST_CASE("the moments aggregates finalize as Spark's functions do", "[aggregation][kinds]") {
  Moments m;
  for (double v : {2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0}) m.Add(v);
  CHECK(KindOf(AggregateFn::kCount).finalize(m) == 8);
  CHECK(KindOf(AggregateFn::kSum).finalize(m) == 40);
  CHECK(KindOf(AggregateFn::kMean).finalize(m) == 5);
  CHECK(KindOf(AggregateFn::kVariance).finalize(m) == Approx(4.571429).epsilon(1e-6));
  CHECK(KindOf(AggregateFn::kMin).finalize(m) == 2);
  CHECK(KindOf(AggregateFn::kMax).finalize(m) == 9);
  Moments one;
  one.Add(3);
  CHECK(std::isnan(KindOf(AggregateFn::kStddev).finalize(one)));  // null below 2 values
  CHECK(std::isnan(KindOf(AggregateFn::kMean).finalize(Moments())));
}

}  // namespace
}  // namespace driftd
