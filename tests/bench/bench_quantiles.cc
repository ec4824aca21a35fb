// bench_quantiles: the approx_percentile sketch on 10M values against exact quantiles (a full
// sort), per accuracy: the worst rank error over the fractions 0.001 .. 0.999 next to the
// stated one, the bytes a sketch holds and encodes to, and the time per value next to sorting
// the same values (ratios measured in one run).
//
//   bench_quantiles [--values N] [--check]
// --check exits 1 when a rank error exceeds the stated bound (a test runs it so).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/quantile_sketch.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::vector<double> Values(size_t n, int distribution, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> values(n);
  for (double& x : values) {
    switch (distribution) {
      case 0: x = normal(random); break;
      case 1: x = std::exp(2 * normal(random)); break;
      default: x = static_cast<double>(random() % 1000); break;
    }
  }
  if (distribution == 1) {
    // Half of it sorted: a trend, the order a sketch is worst at.
    std::sort(values.begin(), values.begin() + static_cast<ptrdiff_t>(n / 2));
  }
  return values;
}

const char* kDistributions[] = {"normal", "lognormal, first half sorted", "1000 ties"};

}  // namespace

int main(int argc, char** argv) {
  size_t n = 10'000'000;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--values") == 0 && i + 1 < argc) {
      n = std::stoul(argv[++i]);
    } else if (std::strcmp(argv[i], "--check") == 0) {
      check = true;
    } else {
      std::fprintf(stderr, "usage: bench_quantiles [--values N] [--check]\n");
      return 64;
    }
  }
  bool ok = true;
  std::vector<double> fractions;
  for (int i = 1; i <= 999; ++i) fractions.push_back(i / 1000.0);
  std::printf("%zu values per run; rank error = worst |p - rank(answer)/n| over p = 0.001..0.999\n",
              n);
  for (int distribution = 0; distribution < 3; ++distribution) {
    const std::vector<double> values = Values(n, distribution, 42 + distribution);
    std::vector<double> sorted = values;
    const auto sort_start = Clock::now();
    std::sort(sorted.begin(), sorted.end());
    const double sort_s = Seconds(sort_start);
    for (int64_t accuracy : {int64_t{100}, int64_t{1000}, driftd::QuantileSketch::kDefaultAccuracy}) {
      const uint32_t k = driftd::QuantileSketch::KForAccuracy(accuracy);
      driftd::QuantileSketch sketch(k);
      const auto add_start = Clock::now();
      for (double x : values) sketch.Add(x);
      const double add_s = Seconds(add_start);
      std::vector<double> answers(fractions.size());
      const auto query_start = Clock::now();
      sketch.Quantiles(fractions, answers);
      const double query_s = Seconds(query_start);
      double worst = 0;
      for (size_t i = 0; i < fractions.size(); ++i) {
        const double below = static_cast<double>(
            std::lower_bound(sorted.begin(), sorted.end(), answers[i]) - sorted.begin());
        const double at_or_below = static_cast<double>(
            std::upper_bound(sorted.begin(), sorted.end(), answers[i]) - sorted.begin());
        const double p = fractions[i] * static_cast<double>(n);
        const double error = p < below ? below - p : (p > at_or_below ? p - at_or_below : 0.0);
        worst = std::max(worst, error / static_cast<double>(n));
      }
      std::string encoded;
      sketch.Encode(encoded);
      const double stated = 1.0 / static_cast<double>(accuracy);
      const bool within = worst <= stated;
      ok = ok && within;
      std::printf(
          "%-30s accuracy %6lld (k %6u): rank error %.6f (stated %.6f, %s), %zu items, "
          "%zu bytes in memory, %zu encoded; %.1f ns/value, %.2fx the time of sorting; "
          "999 quantiles in %.2f ms\n",
          kDistributions[distribution], static_cast<long long>(accuracy), k, worst, stated,
          within ? "within" : "EXCEEDED", sketch.num_retained(), sketch.MemoryBytes(),
          encoded.size(), add_s * 1e9 / static_cast<double>(n), add_s / sort_s, query_s * 1e3);
    }
  }
  if (check && !ok) {
    std::printf("FAILED: a rank error exceeded its stated bound\n");
    return 1;
  }
  return 0;
}
