#include <cmath>
#include <random>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/detectors.h"
#include "engine/drift/histogram.h"

namespace driftd {
namespace {

const std::vector<double> kRef = {0.25, 0.25, 0.25, 0.25};
const std::vector<double> kCur = {0.10, 0.20, 0.30, 0.40};

TEST_CASE("PSI of the reference shares matches the published terms", "[drift][psi]") {
  std::vector<double> terms(4);
  const double psi = Psi(kRef, kCur, terms);
  CHECK(terms[0] == Approx(0.137444).margin(1e-6));
  CHECK(terms[1] == Approx(0.011157).margin(1e-6));
  CHECK(terms[2] == Approx(0.009116).margin(1e-6));
  CHECK(terms[3] == Approx(0.070501).margin(1e-6));
  CHECK(psi == Approx(0.228217).margin(1e-6));
  // 0.228 is above psi's default floor (minEffect 0.05): whether it raises a level depends on
  // the sample sizes behind the shares (its chi-square test).
  CHECK(psi >= DetectorParam(DefaultDetectorSpec(DetectorKind::kPsi), "minEffect"));
}

TEST_CASE("Jensen-Shannon distance and binned KS of the reference shares", "[drift][js][ks]") {
  CHECK(JensenShannonDistance(kRef, kCur) == Approx(0.200503).margin(1e-6));
  CHECK(KsFromBins(kRef, kCur) == Approx(0.20).margin(1e-12));
  // Identical distributions are at distance zero; disjoint ones at the maximum of 1.
  CHECK(JensenShannonDistance(kRef, kRef) == 0.0);
  CHECK(JensenShannonDistance(std::vector<double>{1, 0}, std::vector<double>{0, 1}) ==
        Approx(1.0).margin(1e-12));
  CHECK(KsFromBins(kCur, kRef) == Approx(0.20).margin(1e-12));  // symmetric
}

TEST_CASE("PSI smooths empty bins with a share of 1e-4 and leaves others alone", "[drift][psi]") {
  CHECK(kPsiEmptyBinShare == 1e-4);
  // A bin empty in the baseline but holding half the window.
  const std::vector<double> ref = {1.0, 0.0};
  const std::vector<double> cur = {0.5, 0.5};
  std::vector<double> terms(2);
  const double psi = Psi(ref, cur, terms);
  CHECK(terms[0] == Approx((0.5 - 1.0) * std::log(0.5 / 1.0)).margin(1e-12));
  CHECK(terms[1] == Approx((0.5 - 1e-4) * std::log(0.5 / 1e-4)).margin(1e-12));
  CHECK(std::isfinite(psi));
  CHECK(psi == Approx(0.346574 + 4.257745).margin(1e-6));
  // Empty in both: contributes nothing.
  CHECK(PsiTerm(0.0, 0.0) == 0.0);
  // A tiny non-empty share is not replaced by the epsilon.
  CHECK(PsiTerm(1e-6, 1e-6) == 0.0);
}

TEST_CASE("quantile bin edges split the baseline into equally filled bins", "[drift][bins]") {
  std::vector<double> values;
  for (int i = 0; i < 1000; ++i) values.push_back(static_cast<double>((i * 7919) % 1000));
  BinEdges edges = BinEdges::FromQuantiles(values, 10);
  REQUIRE(edges.bins() == 10);
  std::vector<int64_t> counts(edges.bins());
  for (double v : values) ++counts[edges.BinOf(v)];
  for (int64_t c : counts) CHECK(c == 100);
  // The outer bins are open: nothing falls outside.
  CHECK(edges.BinOf(-1e300) == 0);
  CHECK(edges.BinOf(1e300) == 9);
  CHECK(std::isinf(edges.Lower(0)));
  CHECK(std::isinf(edges.Upper(9)));
  CHECK(edges.Upper(0) == edges.Lower(1));
}

TEST_CASE("a feature with few distinct values gets one bin per value range", "[drift][bins]") {
  std::vector<double> values;
  for (int i = 0; i < 1000; ++i) values.push_back(i < 700 ? 0.0 : 1.0);
  const BinEdges edges = BinEdges::FromQuantiles(values, 10);
  // Edges collapse to {0, 1}: (-inf, 0), [0, 1), [1, inf).
  REQUIRE(edges.inner() == std::vector<double>{0.0, 1.0});
  CHECK(edges.BinOf(0.0) == 1);
  CHECK(edges.BinOf(1.0) == 2);
  CHECK(edges.BinOf(-0.5) == 0);
  // And a constant one gets a single usable edge, never an empty histogram.
  std::vector<double> constant(50, 3.0);
  CHECK(BinEdges::FromQuantiles(constant, 10).bins() == 2);
  std::vector<double> none;
  CHECK(BinEdges::FromQuantiles(none, 10).bins() == 1);
}

TEST_CASE("a value's bin is the count of edges at or below it, for any number of edges",
          "[drift][bins]") {
  // Up to 16 edges are counted one by one, more by a binary search: both must give the bin
  // the definition gives, on and between the edges, and bin 0 for NaN.
  std::mt19937_64 random(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int count = 0; count <= 20; ++count) {
    std::vector<double> inner;
    for (int i = 0; i < count; ++i) inner.push_back(i * 0.5 - 3.0);
    const BinEdges edges(inner);
    REQUIRE(edges.inner().size() == inner.size());
    REQUIRE(edges.bins() == inner.size() + 1);
    std::vector<double> probes = {-INFINITY, INFINITY, 1e300, -1e300};
    for (double e : inner) probes.insert(probes.end(), {e, std::nextafter(e, -INFINITY)});
    for (int i = 0; i < 200; ++i) probes.push_back(normal(random) * 4);
    for (double x : probes) {
      size_t expected = 0;
      for (double e : inner) expected += x >= e ? 1 : 0;
      CHECK(edges.BinOf(x) == expected);
    }
    CHECK(edges.BinOf(NAN) == 0);
    CHECK(edges == BinEdges(inner));
    if (count > 0) CHECK_FALSE(edges == BinEdges(std::vector<double>(inner.begin() + 1, inner.end())));
  }
}

TEST_CASE("mean shift statistics of the reference example", "[drift][mean_shift]") {
  const MeanShiftResult r = MeanShift(10000, 0.50, 0.10, 400, 0.515, 0.12);
  CHECK(r.z == Approx(3.000).margin(1e-9));
  CHECK(r.welch_t == Approx(2.46598).margin(1e-5));
  CHECK(r.effect == Approx(0.15).margin(1e-12));
  // A downward shift is negative z with the same effect.
  const MeanShiftResult down = MeanShift(10000, 0.50, 0.10, 400, 0.485, 0.12);
  CHECK(down.z == Approx(-3.0).margin(1e-9));
  CHECK(down.effect == Approx(0.15).margin(1e-12));
}

TEST_CASE("a constant baseline still scores a change as huge but finite", "[drift][mean_shift]") {
  const MeanShiftResult r = MeanShift(1000, 1.0, 0.0, 1000, 1.5, 0.1);
  CHECK(std::isfinite(r.z));
  CHECK(r.z > 1e6);
  CHECK(r.effect > 1e6);
  CHECK(MeanShift(1000, 1.0, 0.0, 1000, 1.0, 0.0).z == 0.0);
}

TEST_CASE("the stddev ratio scores a rise and a fall in spread alike", "[drift][stddev_ratio]") {
  CHECK(StddevRatio(1.0, 1.5) == Approx(1.5));
  CHECK(StddevRatio(1.5, 1.0) == Approx(1.5));
  CHECK(StddevRatio(2.0, 2.0) == 1.0);
  CHECK(StddevRatio(0.0, 0.0) == 1.0);
  CHECK(std::isfinite(StddevRatio(0.0, 1.0)));
  CHECK(StddevRatio(0.0, 1.0) > 1e6);
}

TEST_CASE("back evidence favours the baseline when a window looks like it, the change when not",
          "[drift][incident]") {
  // A window of 1000 values at the baseline against an incident that shifted by 0.2 sd:
  // log LR = n d (d/2 - |u|) = 1000 * 0.2 * 0.1 = 20 for "back".
  CHECK(LocationBackEvidence(1000, 0.0, 0.2) == Approx(20));
  CHECK(LocationBackEvidence(1000, 0.2, 0.2) == Approx(-20));
  // A shift to the other side is not "back".
  CHECK(LocationBackEvidence(1000, -0.2, 0.2) < 0);
  CHECK(SpreadBackEvidence(0.0, 0.002, 0.4) > 0);
  CHECK(SpreadBackEvidence(0.4, 0.002, 0.4) < 0);
  const std::vector<int64_t> reference = {250, 250, 250, 250};
  const std::vector<double> moved = {-100, -50, 50, 100};  // the incident's change of counts
  std::vector<double> delta(4);
  for (size_t i = 0; i < 4; ++i) delta[i] = moved[i] / 1000;
  CHECK(ShapeBackEvidence(std::vector<int64_t>{250, 250, 250, 250}, reference, delta) > 0);
  CHECK(ShapeBackEvidence(std::vector<int64_t>{150, 200, 300, 350}, reference, delta) < 0);
  CHECK(ErrorBackEvidence(1000, 100, 0.10, 0.15) > 0);
  CHECK(ErrorBackEvidence(1000, 150, 0.10, 0.15) < 0);
}

TEST_CASE("error-rate rise counts predictions that miss their label by more than the threshold",
          "[drift][error_rate]") {
  ErrorSummary base;
  ErrorSummary window;
  for (int i = 0; i < 100; ++i) base.Add(i < 10 ? 1.0 : 0.0, 0.0, 0.5);    // 10% wrong
  for (int i = 0; i < 100; ++i) window.Add(i < 25 ? 0.0 : 1.0, 1.0, 0.5);  // 25% wrong
  CHECK(base.ErrorRate() == Approx(0.10));
  CHECK(window.ErrorRate() == Approx(0.25));
  CHECK(ErrorRateRise(base, window) == Approx(0.15));
  CHECK(ErrorRateRise(window, base) == Approx(-0.15));  // fewer errors is no drift
  CHECK(base.abs_error.mean() == Approx(0.10));         // MAE
  CHECK(ErrorRateRise(ErrorSummary(), window) == 0.0);  // no labels, no evaluation
}

TEST_CASE("the detector kinds code names are the registrations of those names",
          "[drift][defaults]") {
  // engine/pipeline_spec.h names the built-in kinds; a kind is a position in the registry, so
  // those come first in engine/drift/detectors/registered.inc, in this order.
  const std::vector<std::pair<DetectorKind, std::string_view>> named = {
      {DetectorKind::kMeanShift, "mean_shift"},
      {DetectorKind::kStddevRatio, "stddev_ratio"},
      {DetectorKind::kPsi, "psi"},
      {DetectorKind::kJensenShannon, "js"},
      {DetectorKind::kKs, "ks"},
      {DetectorKind::kCusum, "cusum"},
      {DetectorKind::kErrorRate, "error_rate"},
      {DetectorKind::kChiSquare, "chi_square"},
      {DetectorKind::kUnseenCategories, "unseen_categories"},
      {DetectorKind::kMissingRate, "missing_rate"},
      {DetectorKind::kMalformedRate, "malformed_rate"}};
  for (const auto& [kind, name] : named) {
    INFO(name);
    CHECK(DefaultsFor(kind).name == name);
    CHECK(ToString(kind) == name);
    CHECK(ParseDetectorKind(name) == kind);
  }
  // Every registration has its own name, and its kind is its position.
  std::set<std::string_view> names;
  for (size_t i = 0; i < DetectorDefaultsTable().size(); ++i) {
    const DetectorDefaults& d = DetectorDefaultsTable()[i];
    CHECK(static_cast<size_t>(d.kind) == i);
    CHECK(names.insert(d.name).second);
  }
}

TEST_CASE("the defaults table carries the documented levels and floors", "[drift][defaults]") {
  const DetectorSpec ms = DefaultDetectorSpec(DetectorKind::kMeanShift);
  CHECK(ms.name == "mean_shift");
  CHECK(ms.warn == 5);
  CHECK(ms.alert == 5.5);
  CHECK(DetectorParam(ms, "minEffect") == 0.1);
  for (const DetectorDefaults& d : DetectorDefaultsTable()) {
    INFO(d.name);
    // Every detector's levels mean the same false-alarm probabilities.
    CHECK(d.warn == 5);
    CHECK(d.alert == 5.5);
    CHECK(d.evaluate != nullptr);
    CHECK(DefaultsFor(d.kind).name == d.name);
  }
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kStddevRatio), "minEffect") == 1.1);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kPsi), "bins") == 10);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kPsi), "minEffect") == 0.05);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kCusum), "allowance") == 0.15);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kErrorRate), "minEffect") == 0.02);
  CHECK(DefaultsFor(DetectorKind::kCusum).immediate);
  CHECK(DefaultsFor(DetectorKind::kErrorRate).error_series);
  CHECK(DefaultDetectorSpecs().size() == 11);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kChiSquare), "categories") == 30);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kChiSquare), "minEffect") == 0.05);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kUnseenCategories), "minEffect") == 0.02);
  CHECK(DetectorParam(DefaultDetectorSpec(DetectorKind::kMissingRate), "minEffect") == 0.02);
  // Each kind of series gets the detectors that read it.
  CHECK(DefaultsFor(DetectorKind::kPsi).Watches(SeriesKind::kCategorical));
  CHECK(DefaultsFor(DetectorKind::kPsi).Watches(SeriesKind::kNumeric));
  CHECK_FALSE(DefaultsFor(DetectorKind::kKs).Watches(SeriesKind::kCategorical));
  CHECK_FALSE(DefaultsFor(DetectorKind::kChiSquare).Watches(SeriesKind::kNumeric));
  CHECK(DefaultsFor(DetectorKind::kMissingRate).Watches(SeriesKind::kMissing));
  CHECK_FALSE(DefaultsFor(DetectorKind::kMissingRate).Watches(SeriesKind::kMalformed));
  CHECK(DefaultsFor(DetectorKind::kMalformedRate).Watches(SeriesKind::kMalformed));
  CHECK_FALSE(DefaultsFor(DetectorKind::kErrorRate).Watches(SeriesKind::kNumeric));
  CHECK(ParseDetectorKind("js") == DetectorKind::kJensenShannon);
  CHECK(ParseDetectorKind("cusum") == DetectorKind::kCusum);
  CHECK_FALSE(ParseDetectorKind("page_hinkley"));
  CHECK_FALSE(ParseDetectorKind("nope"));

  // snake_case spellings of parameters are accepted too.
  DetectorSpec custom = ms;
  custom.params = {{"min_effect", 0.4}};
  CHECK(DetectorParam(custom, "minEffect") == 0.4);
}

}  // namespace
}  // namespace driftd
