// What the detector definitions (engine/drift/detectors/*.cc) share: the tests behind their
// levels (normal tails with look-backs, homogeneity of two count vectors, a rise of a rate) and
// the steps every reading takes (Begin, Judge). Pure functions; see engine/drift/README.md for
// the formulas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "engine/drift/detectors.h"

namespace driftd::detector_common {

/// Parameters several detectors take, with one spelling, range and documentation.
extern const DetectorParamDef kBinsParam;
extern const DetectorParamDef kCategoriesParam;
/// The series kinds a shape detector over bins reads: numbers (frozen bins) and categories.
inline constexpr uint8_t kNumericOrCategorical =
    SeriesBit(SeriesKind::kNumeric) | SeriesBit(SeriesKind::kCategorical);

/// Two-sided normal tail 2 P(N >= |z|), without underflowing to 0 for |z| up to ~37.
double TwoSidedTail(double z);
/// The critical |z| of a level when `tests` look-backs are tried (Bonferroni: each gets the
/// level's rate / tests). Asked for at every evaluation with the same few levels, so remembered
/// (per thread).
double TwoSidedCritical(double level, size_t tests);
double OneSidedCritical(double level, size_t tests);
/// Score of the best of `tests` look-backs whose smallest tail probability is `p`.
double BonferroniScore(double p, size_t tests);

/// Starts a reading: the detector's name, its levels and its effect floor, the rest zero.
void Begin(const DetectorConfig& config, double warn, double alert, DetectorReading& out);
/// Sets level and held_from from score and effect (the floor holds a significant but small
/// reading down).
void Judge(double warn, double alert, DetectorReading& out);

/// Pearson's chi-square and the G statistic of the 2 x k table (window, reference) x cells.
struct Homogeneity {
  double pearson = 0;
  double g = 0;
  /// Cells with a value in either sample, less one.
  double df = 0;
  double n_w = 0;
  double n_r = 0;
};
Homogeneity TestHomogeneity(std::span<const int64_t> win, std::span<const int64_t> ref);

/// A distance between the baseline's and the window's shares of the bins (Psi,
/// JensenShannonDistance, KsFromBins).
using ShareDistance = double (*)(std::span<const double> ref, std::span<const double> win);
/// The first steps of a shape reading that is a distance between shares (js, psi, ks): Begin,
/// the homogeneity test of the window's and the baseline's counts, and `distance` of their
/// shares as the statistic and the effect. nullopt (the reading as Begin left it) when fewer
/// than two cells hold values.
std::optional<Homogeneity> BeginShareDistance(const EvaluationInput& in,
                                              const DetectorConfig& config, double warn,
                                              double alert, ShareDistance distance,
                                              DetectorReading& out);
/// Thresholds (in the statistic's unit, floored at minEffect), the level, and window_level as
/// the level: a shape reading compares the current window only.
void FinishShape(double warn_threshold, double alert_threshold, double warn, double alert,
                 DetectorReading& out);

/// The rise over the reference's rate `ref_k` / `ref_n` at which the one-sided two-proportion
/// test (arcsine scale, as ErrorRiseZ) of `n` window records reaches `level`, with `tests`
/// look-backs tried.
double RiseThreshold(double level, size_t tests, int64_t ref_k, int64_t ref_n, int64_t n);

/// The rise of a rate series' share of flagged records (missing values, malformed records) over
/// the baseline's, on the look-backs of EvaluationInput::rate_lookbacks.
void EvaluateRateRise(const EvaluationInput& in, const DetectorConfig& config, double warn,
                      double alert, DetectorReading& out);

}  // namespace driftd::detector_common
