#include "engine/drift/histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace driftd {

BinEdges::BinEdges(std::vector<double> inner) {
  inner_.reserve(inner.size());
  for (double e : inner) {
    if (!std::isfinite(e)) continue;
    if (!inner_.empty() && !(e > inner_.back())) continue;
    inner_.push_back(e);
  }
}

BinEdges BinEdges::FromQuantiles(std::vector<double>& values, int bins) {
  BinEdges edges;
  if (values.empty() || bins < 2) return edges;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  edges.inner_.reserve(static_cast<size_t>(bins - 1));
  for (int i = 1; i < bins; ++i) {
    // Bin i then holds sorted[i*n/k, (i+1)*n/k): equal counts when values are distinct.
    const double e = values[static_cast<size_t>(i) * n / static_cast<size_t>(bins)];
    if (!std::isfinite(e)) continue;
    if (!edges.inner_.empty() && !(e > edges.inner_.back())) continue;
    edges.inner_.push_back(e);
  }
  return edges;
}

double BinEdges::Lower(size_t bin) const {
  return bin == 0 ? -std::numeric_limits<double>::infinity() : inner_[bin - 1];
}

double BinEdges::Upper(size_t bin) const {
  return bin >= inner_.size() ? std::numeric_limits<double>::infinity() : inner_[bin];
}

size_t BinEdges::BinOfSearch(double x) const {
  if (std::isnan(x)) return 0;  // as the linear count gives it
  return static_cast<size_t>(std::upper_bound(inner_.begin(), inner_.end(), x) - inner_.begin());
}

void SharesOf(std::span<const int64_t> counts, std::span<double> shares) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  for (size_t i = 0; i < counts.size(); ++i) {
    shares[i] = total > 0 ? static_cast<double>(counts[i]) / static_cast<double>(total) : 0.0;
  }
}

double PsiTerm(double ref_share, double cur_share) {
  const double r = ref_share > 0 ? ref_share : kPsiEmptyBinShare;
  const double c = cur_share > 0 ? cur_share : kPsiEmptyBinShare;
  return (c - r) * std::log(c / r);
}

double Psi(std::span<const double> ref, std::span<const double> cur, std::span<double> terms) {
  double psi = 0;
  const size_t k = std::min(ref.size(), cur.size());
  for (size_t i = 0; i < k; ++i) {
    const double t = PsiTerm(ref[i], cur[i]);
    if (i < terms.size()) terms[i] = t;
    psi += t;
  }
  return psi;
}

double JensenShannonDistance(std::span<const double> ref, std::span<const double> cur) {
  double divergence = 0;
  const size_t k = std::min(ref.size(), cur.size());
  for (size_t i = 0; i < k; ++i) {
    const double m = 0.5 * (ref[i] + cur[i]);
    if (ref[i] > 0) divergence += 0.5 * ref[i] * std::log2(ref[i] / m);
    if (cur[i] > 0) divergence += 0.5 * cur[i] * std::log2(cur[i] / m);
  }
  // Rounding can leave a tiny negative divergence for identical inputs.
  return std::sqrt(std::max(0.0, divergence));
}

double KsFromBins(std::span<const double> ref, std::span<const double> cur) {
  double cum_ref = 0;
  double cum_cur = 0;
  double d = 0;
  const size_t k = std::min(ref.size(), cur.size());
  for (size_t i = 0; i < k; ++i) {
    cum_ref += ref[i];
    cum_cur += cur[i];
    d = std::max(d, std::abs(cum_ref - cum_cur));
  }
  return d;
}

}  // namespace driftd
