// ExactSum: the correctly rounded sum of its terms, whatever their order and however they were
// split into partial sums merged later (the labels' join's windows rely on it scaled out).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/exact_sum.h"

namespace driftd {
namespace {

double SumOf(const std::vector<double>& terms) {
  ExactSum sum;
  for (double t : terms) sum.Add(t);
  return sum.Value();
}

TEST_CASE("an exact sum is the true sum rounded once", "[exact_sum]") {
  CHECK(SumOf({}) == 0.0);
  CHECK(SumOf({1e16, 1.0, -1e16}) == 1.0);  // a naive sum gives 0
  CHECK(SumOf(std::vector<double>(10, 0.1)) == 1.0);  // a naive sum gives 0.9999999999999999
  CHECK(SumOf({1e308, -1e308, 1e308}) == 1e308);
  // Half an ulp of 1.0 above it, and a tiny part that leans the same way: rounds up, not to even.
  const double half_ulp = std::ldexp(1.0, -53);
  CHECK(SumOf({1.0, half_ulp, 1e-300}) == std::nextafter(1.0, 2.0));
  CHECK(SumOf({1.0, half_ulp}) == 1.0);  // exactly half: to even
  CHECK(SumOf({1.0, half_ulp, -1e-300}) == 1.0);
}

TEST_CASE("an exact sum does not depend on the order of its terms or on how they were split",
          "[exact_sum]") {
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> terms;
  for (int i = 0; i < 5000; ++i) {
    // Magnitudes from 1e-12 to 1e12, as squared errors and log losses of a window have.
    terms.push_back(uniform(random) * std::pow(10.0, static_cast<int>(i % 25) - 12));
  }
  const double reference = SumOf(terms);
  long double wide = 0;
  for (double t : terms) wide += t;
  CHECK(std::fabs(reference - static_cast<double>(wide)) <= 1e-9 * std::fabs(reference) + 1e-12);
  double naive_differs = 0;
  for (int round = 0; round < 20; ++round) {
    std::shuffle(terms.begin(), terms.end(), random);
    // Split among 1-5 partial sums, merged in a random order.
    std::vector<ExactSum> partial(1 + round % 5);
    double naive = 0;
    for (size_t i = 0; i < terms.size(); ++i) {
      partial[random() % partial.size()].Add(terms[i]);
      naive += terms[i];
    }
    std::shuffle(partial.begin(), partial.end(), random);
    ExactSum merged;
    for (const ExactSum& p : partial) merged.Merge(p);
    CHECK(merged.Value() == reference);
    ExactSum restored = ExactSum::Restore(merged.parts(), merged.special());
    CHECK(restored.Value() == reference);
    if (naive != reference) ++naive_differs;
  }
  // The case is one where order matters to a plain sum, or the test would prove nothing.
  CHECK(naive_differs > 0);
}

TEST_CASE("an exact sum of terms that are not finite is their IEEE sum", "[exact_sum]") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(SumOf({1.0, inf, 2.0}) == inf);
  CHECK(std::isnan(SumOf({inf, -inf})));
  CHECK(std::isnan(SumOf({1.0, std::nan("")})));
  CHECK(SumOf({1.7e308, 1.7e308}) == inf);
  CHECK(SumOf({1.7e308, 1.7e308, -1.7e308}) == inf);  // past the largest double on the way
}

}  // namespace
}  // namespace driftd
