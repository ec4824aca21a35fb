// Multivariate drift's math (engine/drift/multivariate.h): the co-moments give the baseline's
// mean and covariance as a two-pass computation does, and merge as if accumulated at once; the
// PCA keeps the components that explain the stated variance; a vector that keeps the
// correlations reconstructs well and one that breaks them does not; the state encodes what it
// decodes; memory is what the header states for d features.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/drift/multivariate.h"

namespace driftd::drift {
namespace {

// a ~ N(0, 1), b = 0.9 a + sqrt(0.19) e (correlation 0.9), c ~ N(5, 2) independent; with
// `broken`, b is independent of a (the same marginal).
std::vector<std::vector<double>> Vectors(size_t count, uint64_t seed, bool broken = false) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < count; ++i) {
    const double a = normal(random);
    const double e = normal(random);
    const double b = broken ? e : 0.9 * a + std::sqrt(0.19) * e;
    const double c = 5 + 2 * normal(random);
    out.push_back({a, b, c});
  }
  return out;
}

TEST_CASE("the co-moments give a two-pass mean and covariance, and merge as one pass",
          "[drift][multivariate]") {
  const auto vectors = Vectors(5000, 1);
  MultivariateOptions never;
  never.records = INT64_MAX;
  MultivariateState all(3);
  for (const auto& x : vectors) CHECK_FALSE(all.Add(x, never));
  REQUIRE(all.count() == 5000);
  // Two passes, the textbook way.
  std::vector<double> mean(3, 0);
  for (const auto& x : vectors) {
    for (size_t i = 0; i < 3; ++i) mean[i] += x[i] / 5000;
  }
  for (size_t i = 0; i < 3; ++i) {
    CHECK(all.mean()[i] == Approx(mean[i]).margin(1e-12));
    for (size_t j = 0; j < 3; ++j) {
      double c = 0;
      for (const auto& x : vectors) c += (x[i] - mean[i]) * (x[j] - mean[j]);
      CHECK(all.Covariance(i, j) == Approx(c / 4999).epsilon(1e-10).margin(1e-12));
    }
  }
  CHECK(all.Covariance(0, 1) == Approx(0.9).margin(0.06));  // 3 sd of 5000 draws

  // Three parts merged: the same moments.
  MultivariateState parts[3] = {MultivariateState(3), MultivariateState(3), MultivariateState(3)};
  for (size_t k = 0; k < vectors.size(); ++k) {
    CHECK_FALSE(parts[k < 1000 ? 0 : k < 3700 ? 1 : 2].Add(vectors[k], never));
  }
  parts[0].Merge(parts[1]);
  parts[0].Merge(parts[2]);
  REQUIRE(parts[0].count() == 5000);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(parts[0].mean()[i] == Approx(all.mean()[i]).margin(1e-12));
    for (size_t j = i; j < 3; ++j) {
      CHECK(parts[0].Covariance(i, j) == Approx(all.Covariance(i, j)).epsilon(1e-10));
    }
  }
}

TEST_CASE("the PCA keeps the explained variance and sees a broken correlation the marginals hide",
          "[drift][multivariate]") {
  MultivariateOptions options;
  options.records = 5000;
  options.explained_variance = 0.65;
  MultivariateState state(3);
  const auto baseline = Vectors(5000, 2);
  for (size_t k = 0; k < baseline.size(); ++k) {
    CHECK_FALSE(state.Add(baseline[k], options));  // the baseline gives no errors
    CHECK(state.fitted() == (k + 1 == baseline.size()));
  }
  // Correlation eigenvalues 1.9, 1, 0.1 (of 3): 65% needs the first two.
  CHECK(state.components() == 2);
  CHECK(state.explained() == Approx(2.9 / 3).margin(0.01));

  // The error's mean: sqrt of the left-out eigenvalue's share (0.1) while the correlation holds;
  // broken, the (a, b) plane spreads equally (eigenvalue 1 left out).
  auto mean_error = [&](const std::vector<std::vector<double>>& vectors) {
    double sum = 0;
    for (const auto& x : vectors) {
      auto error = state.Add(x, options);
      REQUIRE(error);
      sum += *error;
    }
    return sum / static_cast<double>(vectors.size());
  };
  const double kept = mean_error(Vectors(5000, 3));
  const double broken = mean_error(Vectors(5000, 4, /*broken=*/true));
  // E|N(0, s^2)| = s sqrt(2/pi)
  CHECK(kept == Approx(std::sqrt(0.1) * std::sqrt(2 / M_PI)).epsilon(0.05));
  CHECK(broken == Approx(std::sqrt(1.0) * std::sqrt(2 / M_PI)).epsilon(0.05));

  // More variance explained: all three components, nothing left to err.
  MultivariateState all(3);
  options.explained_variance = 0.99;
  for (const auto& x : baseline) CHECK_FALSE(all.Add(x, options));
  CHECK(all.components() == 3);
  CHECK(*all.Add(Vectors(1, 5, true)[0], options) == Approx(0).margin(1e-9));
}

TEST_CASE("a multivariate state decodes to what it encoded, before and after the fit",
          "[drift][multivariate][state]") {
  MultivariateOptions options;
  options.records = 500;
  MultivariateState state(3);
  const auto vectors = Vectors(1000, 6, true);
  for (size_t k = 0; k < 300; ++k) CHECK_FALSE(state.Add(vectors[k], options));
  std::string bytes;
  state.Encode(bytes);
  MultivariateState restored;
  REQUIRE(MultivariateState::Decode(bytes, 3, restored));
  CHECK_FALSE(MultivariateState::Decode(bytes, 4, restored) );  // other features
  REQUIRE(MultivariateState::Decode(bytes, 3, restored));
  // Both go on to fit the same PCA and give the same errors, to the bit.
  for (size_t k = 300; k < 1000; ++k) {
    auto a = state.Add(vectors[k], options);
    auto b = restored.Add(vectors[k], options);
    REQUIRE(a.has_value() == b.has_value());
    if (a) CHECK(*a == *b);
  }
  std::string fitted;
  state.Encode(fitted);
  std::string again;
  restored.Encode(again);
  CHECK(fitted == again);
  MultivariateState from_fitted;
  REQUIRE(MultivariateState::Decode(fitted, 3, from_fitted));
  CHECK(*from_fitted.Add(vectors[7], options) == *state.Add(vectors[7], options));
  CHECK_FALSE(MultivariateState::Decode(fitted.substr(0, fitted.size() - 1), 3, from_fitted));
}

TEST_CASE("memory for d features is what the header states", "[drift][multivariate]") {
  for (size_t d : {2u, 20u, 100u}) {
    MultivariateState state(d);
    CHECK(state.MemoryBytes() == 8 * (d + d * (d + 1) / 2));
    std::mt19937_64 random(d);
    std::normal_distribution<double> normal(0, 1);
    MultivariateOptions options;
    options.records = 200;
    std::vector<double> x(d);
    for (int k = 0; k < 200; ++k) {
      for (double& v : x) v = normal(random);
      CHECK_FALSE(state.Add(x, options));
    }
    REQUIRE(state.fitted());
    CHECK(state.MemoryBytes() == 8 * (2 * d + state.components() * d));
    CHECK(state.components() <= d);
  }
}

}  // namespace
}  // namespace driftd::drift
