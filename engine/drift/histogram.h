// Histograms with bins frozen from a baseline, and the distances between two binned
// distributions that the drift detectors use: PSI, Jensen-Shannon distance and a KS statistic.
// Pure functions; nothing here allocates except BinEdges construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace driftd {

/// PSI smoothing: a bin with a share of exactly 0 (no values) in either distribution takes this
/// share instead, so ln(cur/ref) stays finite. Non-empty bins keep their share, and shares are
/// not renormalised. 1e-4 is one value in 10'000: small enough not to matter for populated bins,
/// large enough that one newly populated bin adds a visible but bounded term
/// (e.g. ref 0 -> cur 0.10 adds 0.0999 * ln(1000) = 0.69).
inline constexpr double kPsiEmptyBinShare = 1e-4;

/// Bin boundaries frozen from baseline values: k-1 strictly increasing inner edges give k bins
/// (-inf, e0), [e0, e1), ..., [e[k-2], +inf). The outer bins are open so that no value ever
/// falls outside. A value type; thread-compatible.
class BinEdges {
 public:
  BinEdges() = default;
  /// Takes strictly increasing, finite inner edges (duplicates and non-finite values dropped).
  explicit BinEdges(std::vector<double> inner);

  /// Edges at the i/bins quantiles of `values` (i = 1..bins-1), so the baseline fills the bins
  /// about equally. Repeated values collapse edges: a feature with few distinct values gets
  /// fewer bins, one per distinct value range. Sorts `values` in place. Empty input: one bin.
  static BinEdges FromQuantiles(std::vector<double>& values, int bins);

  size_t bins() const { return inner_.size() + 1; }
  const std::vector<double>& inner() const { return inner_; }
  /// Lower bound of `bin` (-inf for bin 0) and upper bound (+inf for the last bin).
  double Lower(size_t bin) const;
  double Upper(size_t bin) const;

  /// The bin of `x`: the number of inner edges <= x. NaN goes to bin 0 (callers skip NaN).
  size_t BinOf(double x) const {
    // Linear for the usual handful of edges: fewer mispredicted branches than a binary search.
    if (inner_.size() <= 16) {
      size_t b = 0;
      for (double e : inner_) b += (x >= e) ? 1 : 0;
      return b;
    }
    return BinOfSearch(x);
  }

  bool operator==(const BinEdges&) const = default;

 private:
  size_t BinOfSearch(double x) const;
  std::vector<double> inner_;
};

/// Shares (count / total) of `counts`, written to `shares` (same size). All zero if total is 0.
void SharesOf(std::span<const int64_t> counts, std::span<double> shares);

/// One PSI term (cur - ref) * ln(cur / ref), with kPsiEmptyBinShare substituted for zero shares.
double PsiTerm(double ref_share, double cur_share);

/// Population Stability Index: sum of PsiTerm over the bins. `terms`, if not empty, receives
/// each bin's term (same size as the inputs).
double Psi(std::span<const double> ref, std::span<const double> cur, std::span<double> terms = {});

/// Jensen-Shannon distance, base 2: sqrt of the JS divergence, in [0, 1]. Needs no smoothing
/// (a zero share contributes 0; the mixture is never zero where either share is not).
double JensenShannonDistance(std::span<const double> ref, std::span<const double> cur);

/// Kolmogorov-Smirnov D from binned data: max |CDF_ref - CDF_cur| over the bin edges. A lower
/// bound of the KS statistic of the raw values (it cannot see inside a bin).
double KsFromBins(std::span<const double> ref, std::span<const double> cur);

}  // namespace driftd
