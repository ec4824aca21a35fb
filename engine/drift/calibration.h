// Null distributions behind the drift detectors' levels: each detector turns its statistic into
// the probability of a value at least this extreme when nothing changed (for the window's and the
// baseline's sample sizes, the baseline's own error included), and reports that probability as a
// z-equivalent "score": the z whose upper normal tail has the same probability. A level of 5 then
// means a false-alarm probability of 2.9e-7 per evaluation for every detector and every n.
// Pure functions; engine/drift/README.md states the formulas and their accuracy.
#pragma once

#include <cstdint>

namespace driftd::calibration {

/// Scores are capped here: an upper tail below ~1e-300 is not representable in a double.
inline constexpr double kMaxScore = 37.0;

/// P(N(0,1) >= z).
double NormalUpperTail(double z);
/// The score of an upper-tail probability: the z with P(N(0,1) >= z) = p. p >= 1 gives 0 (never
/// negative), p <= 0 gives kMaxScore.
double ScoreOfTail(double p);
/// Inverse of ScoreOfTail: the upper-tail probability of a level (5 -> 2.87e-7).
double TailOfScore(double score);

/// P(chi^2 with `df` degrees of freedom >= x).
double ChiSquareUpperTail(double x, double df);

/// The x with P(chi^2_df >= x) = p: the critical value of a chi-square test at rate p.
double ChiSquareCritical(double df, double p);

/// Asymptotic two-sample Kolmogorov-Smirnov tail: P(D >= d) for samples of n1 and n2 values,
/// with Stephens' small-sample correction of the effective size. Conservative for a D measured at
/// a few points only (binned) and for data with ties.
double KsUpperTail(double d, double n1, double n2);

/// The D with KsUpperTail(D, n1, n2) = p.
double KsCritical(double n1, double n2, double p);

/// One-sided upper tail of a standard normal statistic, as a score (z itself, clamped to
/// [0, kMaxScore]).
double ScoreOfZ(double z);
/// Two-sided: the score of P(|N| >= |z|) = 2 P(N >= |z|).
double ScoreOfTwoSidedZ(double z);

/// What a CUSUM's false-alarm rate depends on. Values are standardized with the baseline's
/// (winsorized) mean and standard deviation, which are estimates themselves: their errors act as a
/// constant drift and a changed scale for the whole life of the series, which is what makes a naive
/// CUSUM against a short baseline alarm for sure on a long stream. The rate below averages over
/// those errors.
struct CusumModel {
  /// Allowance k, in baseline standard deviations: the CUSUM accumulates x - k.
  double allowance = 0.15;
  /// Values in the baseline (its mean's error has variance 1 / n in sd units).
  double baseline_n = 5000;
  /// Kurtosis of the baseline values (3 for a normal; the sd's relative error grows with it).
  double kurtosis = 3;
  /// Skewness of the baseline values (a positive skew makes the upper side alarm more often).
  double skewness = 0;
};

/// Probability per value that a two-sided CUSUM S = max(0, S + z - k) (and its mirror) first
/// crosses `h`, for a stream that did not change: Siegmund's approximation of the average run
/// length with its overshoot correction (b = h + 1.166), the adjustment coefficient of a skewed
/// increment, averaged over the baseline's errors by a saddle-point integral. Capped at 1.
double CusumFalseAlarmRate(const CusumModel& model, double h);

/// The threshold h whose rate is `rate` per value (rate in (0, 1)). The model's allowance must be
/// feasible (CusumFeasibleAllowance); otherwise returns the h of the smallest achievable rate.
double CusumThreshold(const CusumModel& model, double rate);

/// The smallest allowance >= model.allowance for which `rate` is reachable with margin: with a
/// short baseline its error dominates any small allowance, so the CUSUM must look for larger
/// shifts. Returns model.allowance when it is feasible already.
double CusumFeasibleAllowance(const CusumModel& model, double rate);

/// Approximate average run length (values) of a one-sided CUSUM with allowance k and threshold h
/// for a shift of `shift` baseline standard deviations (Siegmund), for documentation and tests.
double CusumAverageRunLength(double allowance, double h, double shift);

}  // namespace driftd::calibration
