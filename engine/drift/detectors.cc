#include "engine/drift/detectors.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "engine/drift/histogram.h"

namespace driftd {

namespace {

using calibration::kMaxScore;
using calibration::ScoreOfTail;
using calibration::TailOfScore;

std::string SnakeCase(std::string_view camel) {
  std::string out;
  for (char c : camel) {
    if (c >= 'A' && c <= 'Z') {
      out.push_back('_');
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

/// Two-sided normal tail 2 P(N >= |z|), without underflowing to 0 for |z| up to ~37.
double TwoSidedTail(double z) {
  const double a = std::abs(z);
  if (!std::isfinite(a)) return std::isnan(a) ? 1 : 0;
  return std::min(1.0, 2 * calibration::NormalUpperTail(a));
}

/// The |z| a two-sided test needs for the score `level` when `tests` look-backs are tried
/// (Bonferroni: each gets level's rate / tests).
/// The critical z of a level with `tests` look-backs (Bonferroni), one- or two-sided. Asked for
/// at every evaluation with the same few levels, so remembered (per thread).
double Critical(double level, size_t tests, bool two_sided) {
  struct Entry {
    double level;
    size_t tests;
    bool two_sided;
    double z;
  };
  thread_local std::vector<Entry> entries;
  const size_t t = std::max<size_t>(1, tests);
  for (const Entry& e : entries) {
    if (e.level == level && e.tests == t && e.two_sided == two_sided) return e.z;
  }
  const double rate = TailOfScore(level) / static_cast<double>(t);
  const double z = ScoreOfTail(two_sided ? rate / 2 : rate);
  if (entries.size() >= 64) entries.erase(entries.begin());
  entries.push_back({level, t, two_sided, z});
  return z;
}

double TwoSidedCritical(double level, size_t tests) { return Critical(level, tests, true); }
double OneSidedCritical(double level, size_t tests) { return Critical(level, tests, false); }

/// Score of the best of `tests` look-backs whose smallest tail probability is `p`.
double BonferroniScore(double p, size_t tests) {
  return ScoreOfTail(std::min(1.0, p * static_cast<double>(std::max<size_t>(1, tests))));
}

/// Sets level, held_from and thresholds-derived fields from score and effect.
void Judge(double warn, double alert, DetectorReading& out) {
  const AlertLevel by_score = LevelOfScore(out.score, warn, alert);
  out.level = by_score;
  if (by_score != AlertLevel::kOk && out.effect < out.min_effect) {
    out.held_from = by_score;
    out.level = AlertLevel::kOk;
  }
}

void Begin(const DetectorConfig& config, double warn, double alert, DetectorReading& out) {
  out = DetectorReading();
  out.detector = config.name;
  out.warn = warn;
  out.alert = alert;
  out.min_effect = config.min_effect;
}

// ---- mean_shift -----------------------------------------------------------------------------

struct LocationTest {
  double z = 0;
  double p = 1;
  double se = 1;
};

LocationTest TestLocation(const HigherMoments& ref, double sigma, const Lookback& lb) {
  LocationTest t;
  if (lb.n <= 0 || ref.count() <= 0) return t;
  // Welch's variance, with the window's own (within-window) spread floored at the reference's:
  // a wider window is not more evidence of a shift, a narrower one not more precision.
  const double var_w = std::max(lb.pooled_variance, sigma * sigma);
  t.se = std::sqrt(var_w / static_cast<double>(lb.n) +
                   sigma * sigma / static_cast<double>(ref.count()));
  t.z = (lb.mean - ref.mean()) / t.se;
  t.p = TwoSidedTail(t.z);
  return t;
}

void EvaluateMeanShift(const EvaluationInput& in, const DetectorConfig& config, double warn,
                       double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const HigherMoments& ref = in.reference;
  const double sigma = FlooredSigma(ref.Stddev(), ref.mean());
  const size_t tests = in.lookbacks.size();
  if (tests == 0 || ref.count() <= 0) return;
  size_t best = 0;
  LocationTest best_test;
  for (size_t j = 0; j < tests; ++j) {
    const LocationTest t = TestLocation(ref, sigma, in.lookbacks[j]);
    if (j == 0 || std::abs(t.z) > std::abs(best_test.z)) {
      best = j;
      best_test = t;
    }
  }
  const Lookback& lb = in.lookbacks[best];
  const double diff = lb.mean - ref.mean();
  out.statistic = std::abs(best_test.z);
  out.score = BonferroniScore(best_test.p, tests);
  out.effect = std::abs(diff) / sigma;
  const double floor_z = out.min_effect * sigma / best_test.se;  // the floor's |z| here
  out.warn_threshold = std::max(TwoSidedCritical(warn, tests), floor_z);
  out.alert_threshold = std::max(TwoSidedCritical(alert, tests), floor_z);
  Judge(warn, alert, out);
  // The current window alone decides whether an incident may leave.
  const LocationTest now = TestLocation(ref, sigma, in.lookbacks[0]);
  DetectorReading current = out;
  current.score = BonferroniScore(now.p, tests);
  current.effect = std::abs(in.lookbacks[0].mean - ref.mean()) / sigma;
  Judge(warn, alert, current);
  out.window_level = current.level;
  const double s_w = std::sqrt(std::max(0.0, lb.pooled_variance));
  const double welch = diff / std::sqrt(sigma * sigma / static_cast<double>(ref.count()) +
                                        s_w * s_w / static_cast<double>(std::max<int64_t>(1, lb.n)));
  // (The effect is the reading's own `effect`; an extra of that name would repeat the member.)
  out.extras = {{"z", best_test.z},
                {"welch_t", welch},
                {"lookback_windows", static_cast<double>(lb.windows)}};
}

// ---- stddev_ratio ---------------------------------------------------------------------------

struct SpreadTest {
  double log_ratio = 0;
  double variance = 1;
  double z = 0;
  double p = 1;
};

/// Kurtosis used for the spread test: the reference's, floored (a near-two-point distribution
/// has kurtosis near 1, and its estimate is then least reliable) and widened by its sampling
/// error so that a short or heavy-tailed baseline does not understate the spread's noise.
double SpreadKurtosis(const HigherMoments& ref) {
  const double n = std::max(4.0, static_cast<double>(ref.count()));
  return std::max(ref.Kurtosis(), 1.2) * (1 + 2 / std::sqrt(n));
}

SpreadTest TestSpread(const HigherMoments& ref, double kurtosis, const Lookback& lb) {
  SpreadTest t;
  if (lb.dof < 2 || ref.count() < 3) return t;
  const double floor = FlooredSigma(0, ref.mean());
  const double var_r = std::max(ref.Variance(), floor * floor);
  const double var_w = std::max(lb.pooled_variance, floor * floor);
  t.log_ratio = std::log(var_w / var_r);
  t.variance = (kurtosis - 1) * (1.0 / static_cast<double>(lb.dof) +
                                 1.0 / static_cast<double>(ref.count() - 1));
  t.z = t.log_ratio / std::sqrt(std::max(t.variance, 1e-300));
  t.p = TwoSidedTail(t.z);
  return t;
}

void EvaluateStddevRatio(const EvaluationInput& in, const DetectorConfig& config, double warn,
                         double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const HigherMoments& ref = in.reference;
  const size_t tests = in.lookbacks.size();
  if (tests == 0 || ref.count() < 3) return;
  const double kurtosis = SpreadKurtosis(ref);
  size_t best = 0;
  SpreadTest best_test;
  for (size_t j = 0; j < tests; ++j) {
    const SpreadTest t = TestSpread(ref, kurtosis, in.lookbacks[j]);
    if (j == 0 || std::abs(t.z) > std::abs(best_test.z)) {
      best = j;
      best_test = t;
    }
  }
  out.statistic = std::exp(std::abs(best_test.log_ratio) / 2);
  out.score = BonferroniScore(best_test.p, tests);
  out.effect = out.statistic;
  const double sd = std::sqrt(best_test.variance);
  out.warn_threshold =
      std::max(std::exp(TwoSidedCritical(warn, tests) * sd / 2), out.min_effect);
  out.alert_threshold =
      std::max(std::exp(TwoSidedCritical(alert, tests) * sd / 2), out.min_effect);
  Judge(warn, alert, out);
  const SpreadTest now = TestSpread(ref, kurtosis, in.lookbacks[0]);
  DetectorReading current = out;
  current.score = BonferroniScore(now.p, tests);
  current.effect = std::exp(std::abs(now.log_ratio) / 2);
  Judge(warn, alert, current);
  out.window_level = current.level;
  out.extras = {{"sd_ratio", std::exp(best_test.log_ratio / 2)},
                {"z", best_test.z},
                {"kurtosis", kurtosis},
                {"lookback_windows", static_cast<double>(in.lookbacks[best].windows)}};
}

// ---- psi, js, ks ----------------------------------------------------------------------------

struct Homogeneity {
  double pearson = 0;
  double g = 0;
  double df = 0;
  double n_w = 0;
  double n_r = 0;
};

/// Pearson's chi-square and the G statistic of the 2 x k table (window, reference) x bins.
Homogeneity TestHomogeneity(std::span<const int64_t> win, std::span<const int64_t> ref) {
  Homogeneity h;
  const size_t k = std::min(win.size(), ref.size());
  for (size_t i = 0; i < k; ++i) {
    h.n_w += static_cast<double>(win[i]);
    h.n_r += static_cast<double>(ref[i]);
  }
  if (!(h.n_w > 0) || !(h.n_r > 0)) return h;
  const double total = h.n_w + h.n_r;
  int used = 0;
  for (size_t i = 0; i < k; ++i) {
    const double c = static_cast<double>(win[i]);
    const double b = static_cast<double>(ref[i]);
    const double pooled = (c + b) / total;
    if (!(pooled > 0)) continue;
    ++used;
    const double ew = h.n_w * pooled;
    const double er = h.n_r * pooled;
    h.pearson += (c - ew) * (c - ew) / ew + (b - er) * (b - er) / er;
    if (c > 0) h.g += 2 * c * std::log(c / ew);
    if (b > 0) h.g += 2 * b * std::log(b / er);
  }
  h.df = std::max(0, used - 1);
  return h;
}

void Shares(std::span<const int64_t> counts, std::vector<double>& shares) {
  shares.resize(counts.size());
  SharesOf(counts, shares);
}

void FinishShape(const Homogeneity& h, double statistic_scale_warn, double statistic_scale_alert,
                 double warn, double alert, DetectorReading& out) {
  out.warn_threshold = std::max(statistic_scale_warn, out.min_effect);
  out.alert_threshold = std::max(statistic_scale_alert, out.min_effect);
  Judge(warn, alert, out);
  out.window_level = out.level;
  (void)h;
}

void EvaluatePsi(const EvaluationInput& in, const DetectorConfig& config, double warn,
                 double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return;
  thread_local std::vector<double> r;
  thread_local std::vector<double> c;
  Shares(in.ref_counts, r);
  Shares(in.win_counts, c);
  out.statistic = Psi(r, c);
  out.effect = out.statistic;
  out.score = ScoreOfTail(calibration::ChiSquareUpperTail(h.pearson, h.df));
  const double scale = 1 / h.n_w + 1 / h.n_r;
  FinishShape(h, calibration::ChiSquareCritical(h.df, TailOfScore(warn)) * scale,
              calibration::ChiSquareCritical(h.df, TailOfScore(alert)) * scale, warn, alert, out);
  out.extras = {{"chi_square", h.pearson}, {"df", h.df}};
}

void EvaluateJs(const EvaluationInput& in, const DetectorConfig& config, double warn,
                double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return;
  thread_local std::vector<double> r;
  thread_local std::vector<double> c;
  Shares(in.ref_counts, r);
  Shares(in.win_counts, c);
  out.statistic = JensenShannonDistance(r, c);
  out.effect = out.statistic;
  out.score = ScoreOfTail(calibration::ChiSquareUpperTail(h.g, h.df));
  const double scale = (1 / h.n_w + 1 / h.n_r) / (8 * std::log(2.0));
  FinishShape(h, std::sqrt(calibration::ChiSquareCritical(h.df, TailOfScore(warn)) * scale),
              std::sqrt(calibration::ChiSquareCritical(h.df, TailOfScore(alert)) * scale), warn,
              alert, out);
  out.extras = {{"g", h.g}, {"df", h.df}};
}

void EvaluateKs(const EvaluationInput& in, const DetectorConfig& config, double warn,
                double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return;
  thread_local std::vector<double> r;
  thread_local std::vector<double> c;
  Shares(in.ref_counts, r);
  Shares(in.win_counts, c);
  out.statistic = KsFromBins(r, c);
  out.effect = out.statistic;
  out.score = ScoreOfTail(calibration::KsUpperTail(out.statistic, h.n_w, h.n_r));
  FinishShape(h, calibration::KsCritical(h.n_w, h.n_r, TailOfScore(warn)),
              calibration::KsCritical(h.n_w, h.n_r, TailOfScore(alert)), warn, alert, out);
}

// ---- cusum ----------------------------------------------------------------------------------

void EvaluateCusum(const EvaluationInput& in, const DetectorConfig& config, double warn,
                   double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  out.statistic = in.cusum;
  const double rate = calibration::CusumFalseAlarmRate(in.cusum_model, in.cusum);
  out.score = ScoreOfTail(std::min(1.0, rate * in.cusum_values_per_evaluation));
  out.warn_threshold = in.cusum_warn_h;
  out.alert_threshold = in.cusum_alert_h;
  out.min_effect = 0;
  out.effect = 0;
  // The thresholds were solved from the same rate, so the level follows the sum exactly.
  out.level = in.cusum >= in.cusum_alert_h   ? AlertLevel::kAlert
              : in.cusum >= in.cusum_warn_h ? AlertLevel::kWarn
                                            : AlertLevel::kOk;
  out.score = out.level == AlertLevel::kAlert  ? std::max(out.score, alert)
              : out.level == AlertLevel::kWarn ? std::clamp(out.score, warn, alert)
                                               : std::min(out.score, warn);
  out.window_level = AlertLevel::kOk;
  out.extras = {{"upper", in.cusum_up},
                {"lower", in.cusum_down},
                {"allowance", in.cusum_allowance}};
}

// ---- rises of a rate: error_rate, unseen_categories, missing_rate, malformed_rate ------------

/// The rise over the reference's rate `ref_k` / `ref_n` at which the one-sided two-proportion
/// test (arcsine scale, as ErrorRiseZ) of `n` window records reaches `level`, with `tests`
/// look-backs tried.
double RiseThreshold(double level, size_t tests, int64_t ref_k, int64_t ref_n, int64_t n) {
  const double z = OneSidedCritical(level, tests);
  const double nw = static_cast<double>(std::max<int64_t>(1, n));
  const double nr = static_cast<double>(ref_n);
  const double ref_rate = static_cast<double>(ref_k) / nr;
  const double h_r = std::asin(std::sqrt((static_cast<double>(ref_k) + 0.375) / (nr + 0.75)));
  const double h = std::min(M_PI / 2, h_r + z * std::sqrt(1 / (nw + 0.5) + 1 / (nr + 0.5)) / 2);
  const double s = std::sin(h);
  return std::max(0.0, (s * s * (nw + 0.75) - 0.375) / nw) - ref_rate;
}

// ---- error_rate -----------------------------------------------------------------------------

void EvaluateErrorRate(const EvaluationInput& in, const DetectorConfig& config, double warn,
                       double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const ErrorSummary& ref = in.error_reference;
  const size_t tests = in.error_lookbacks.size();
  if (tests == 0 || ref.count() <= 0) return;
  size_t best = 0;
  double best_z = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < tests; ++j) {
    const ErrorLookback& lb = in.error_lookbacks[j];
    if (lb.n <= 0) continue;
    const double z = ErrorRiseZ(ref.errors, ref.count(), lb.errors, lb.n);
    if (z > best_z) {
      best_z = z;
      best = j;
    }
  }
  const ErrorLookback& lb = in.error_lookbacks[best];
  const double ref_rate = ref.ErrorRate();
  const double rate = lb.n > 0 ? static_cast<double>(lb.errors) / static_cast<double>(lb.n) : 0;
  out.statistic = rate - ref_rate;
  out.effect = out.statistic;
  out.score = BonferroniScore(calibration::NormalUpperTail(best_z), tests);
  // The rise at which a level is reached, on the same arcsine scale.
  auto critical = [&](double level) {
    return RiseThreshold(level, tests, ref.errors, ref.count(), lb.n);
  };
  out.warn_threshold = std::max(critical(warn), out.min_effect);
  out.alert_threshold = std::max(critical(alert), out.min_effect);
  Judge(warn, alert, out);
  const ErrorLookback& now = in.error_lookbacks[0];
  DetectorReading current = out;
  current.score = BonferroniScore(
      calibration::NormalUpperTail(ErrorRiseZ(ref.errors, ref.count(), now.errors, now.n)),
      tests);
  current.effect = now.n > 0 ? static_cast<double>(now.errors) / static_cast<double>(now.n) - ref_rate
                             : 0;
  Judge(warn, alert, current);
  out.window_level = current.level;
  out.extras = {{"baseline_error_rate", ref_rate},
                {"window_error_rate", rate},
                {"baseline_mae", ref.abs_error.count() > 0 ? ref.abs_error.mean() : 0.0},
                {"window_mae", in.error_window.count() > 0 ? in.error_window.abs_error.mean() : 0.0},
                {"error_threshold", in.error_threshold},
                {"z", best_z},
                {"lookback_windows", static_cast<double>(lb.windows)}};
}

// ---- chi_square (categorical) ----------------------------------------------------------------

/// The TVD a change along the window's own pattern needs for the chi-square's critical value at
/// `level` (chi-square grows with the square of a change's size, to first order); without a
/// pattern (no change at all), that of mass moving between two halves.
double TvdNeeded(const Homogeneity& h, double tvd, double level) {
  const double critical = calibration::ChiSquareCritical(h.df, TailOfScore(level));
  if (h.pearson > 0 && tvd > 0) return tvd * std::sqrt(critical / h.pearson);
  return std::sqrt(critical * (1 / h.n_w + 1 / h.n_r)) / 2;
}

void EvaluateChiSquare(const EvaluationInput& in, const DetectorConfig& config, double warn,
                       double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return;
  const double tvd = TotalVariation(in.win_counts, in.ref_counts);
  out.statistic = tvd;
  out.effect = tvd;
  out.score = ScoreOfTail(calibration::ChiSquareUpperTail(h.pearson, h.df));
  FinishShape(h, TvdNeeded(h, tvd, warn), TvdNeeded(h, tvd, alert), warn, alert, out);
  out.extras = {{"chi_square", h.pearson},
                {"df", h.df},
                {"cramers_v", std::sqrt(h.pearson / (h.n_w + h.n_r))}};
}

// ---- unseen_categories (categorical) ---------------------------------------------------------

void EvaluateUnseen(const EvaluationInput& in, const DetectorConfig& config, double warn,
                    double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  if (in.unseen_n <= 0 || in.ref_unseen_n <= 0) return;
  const double share = static_cast<double>(in.unseen) / static_cast<double>(in.unseen_n);
  const double ref_share =
      static_cast<double>(in.ref_unseen) / static_cast<double>(in.ref_unseen_n);
  const double z = ErrorRiseZ(in.ref_unseen, in.ref_unseen_n, in.unseen, in.unseen_n);
  out.statistic = share - ref_share;
  out.effect = out.statistic;
  out.score = BonferroniScore(calibration::NormalUpperTail(z), 1);
  out.warn_threshold = std::max(
      RiseThreshold(warn, 1, in.ref_unseen, in.ref_unseen_n, in.unseen_n), out.min_effect);
  out.alert_threshold = std::max(
      RiseThreshold(alert, 1, in.ref_unseen, in.ref_unseen_n, in.unseen_n), out.min_effect);
  Judge(warn, alert, out);
  out.window_level = out.level;
  out.extras = {{"window_share", share}, {"baseline_share", ref_share}, {"z", z}};
}

// ---- missing_rate, malformed_rate -------------------------------------------------------------

void EvaluateRate(const EvaluationInput& in, const DetectorConfig& config, double warn,
                  double alert, DetectorReading& out) {
  Begin(config, warn, alert, out);
  const size_t tests = in.rate_lookbacks.size();
  if (tests == 0 || in.rate_ref_n <= 0) return;
  size_t best = 0;
  double best_z = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < tests; ++j) {
    const ErrorLookback& lb = in.rate_lookbacks[j];
    if (lb.n <= 0) continue;
    const double z = ErrorRiseZ(in.rate_ref_k, in.rate_ref_n, lb.errors, lb.n);
    if (z > best_z) {
      best_z = z;
      best = j;
    }
  }
  const ErrorLookback& lb = in.rate_lookbacks[best];
  const double ref_rate = static_cast<double>(in.rate_ref_k) / static_cast<double>(in.rate_ref_n);
  const double rate = lb.n > 0 ? static_cast<double>(lb.errors) / static_cast<double>(lb.n) : 0;
  out.statistic = rate - ref_rate;
  out.effect = out.statistic;
  out.score = BonferroniScore(calibration::NormalUpperTail(best_z), tests);
  out.warn_threshold =
      std::max(RiseThreshold(warn, tests, in.rate_ref_k, in.rate_ref_n, lb.n), out.min_effect);
  out.alert_threshold =
      std::max(RiseThreshold(alert, tests, in.rate_ref_k, in.rate_ref_n, lb.n), out.min_effect);
  Judge(warn, alert, out);
  const ErrorLookback& now = in.rate_lookbacks[0];
  DetectorReading current = out;
  current.score = BonferroniScore(
      calibration::NormalUpperTail(ErrorRiseZ(in.rate_ref_k, in.rate_ref_n, now.errors, now.n)),
      tests);
  current.effect =
      now.n > 0 ? static_cast<double>(now.errors) / static_cast<double>(now.n) - ref_rate : 0;
  Judge(warn, alert, current);
  out.window_level = current.level;
  out.extras = {{"baseline_rate", ref_rate},
                {"window_rate", rate},
                {"z", best_z},
                {"lookback_windows", static_cast<double>(lb.windows)}};
}

}  // namespace

std::string_view ToString(SeriesKind kind) {
  switch (kind) {
    case SeriesKind::kNumeric:
      return "numeric";
    case SeriesKind::kCategorical:
      return "categorical";
    case SeriesKind::kMissing:
      return "missing";
    case SeriesKind::kMalformed:
      return "malformed";
  }
  return "?";
}

double TotalVariation(std::span<const int64_t> a, std::span<const int64_t> b) {
  const size_t k = std::min(a.size(), b.size());
  double na = 0;
  double nb = 0;
  for (size_t i = 0; i < k; ++i) {
    na += static_cast<double>(a[i]);
    nb += static_cast<double>(b[i]);
  }
  if (!(na > 0) || !(nb > 0)) return 0;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    sum += std::abs(static_cast<double>(a[i]) / na - static_cast<double>(b[i]) / nb);
  }
  return sum / 2;
}

std::string_view ToString(DetectorFamily family) {
  switch (family) {
    case DetectorFamily::kLocation:
      return "location";
    case DetectorFamily::kSpread:
      return "spread";
    case DetectorFamily::kShape:
      return "shape";
    case DetectorFamily::kError:
      return "error";
  }
  return "?";
}

double FlooredSigma(double sd, double mean) {
  const double floor = kSigmaFloor * std::max(1.0, std::abs(mean));
  return (std::isfinite(sd) && sd > floor) ? sd : floor;
}

MeanShiftResult MeanShift(double ref_n, double ref_mean, double ref_sd, double win_n,
                          double win_mean, double win_sd) {
  MeanShiftResult r;
  if (!(ref_n > 0) || !(win_n > 0)) return r;
  const double sigma = FlooredSigma(ref_sd, ref_mean);
  const double s_w = std::isfinite(win_sd) ? win_sd : 0.0;
  const double diff = win_mean - ref_mean;
  r.z = diff / (sigma / std::sqrt(win_n));
  r.welch_t = diff / std::sqrt(sigma * sigma / ref_n + s_w * s_w / win_n);
  r.effect = std::abs(diff) / sigma;
  return r;
}

double StddevRatio(double ref_sd, double win_sd) {
  const double r = std::isfinite(ref_sd) ? ref_sd : 0.0;
  const double w = std::isfinite(win_sd) ? win_sd : 0.0;
  if (r == w) return 1.0;
  const double hi = std::max(r, w);
  const double lo = std::max(std::min(r, w), kSigmaFloor * std::max(1.0, hi));
  return hi / lo;
}

double ErrorRateRise(const ErrorSummary& reference, const ErrorSummary& window) {
  if (reference.count() == 0 || window.count() == 0) return 0;
  return window.ErrorRate() - reference.ErrorRate();
}

double ErrorRiseZ(int64_t ref_errors, int64_t ref_n, int64_t errors, int64_t n) {
  if (ref_n <= 0 || n <= 0) return 0;
  auto h = [](int64_t e, int64_t total) {
    return std::asin(std::sqrt((static_cast<double>(e) + 0.375) /
                               (static_cast<double>(total) + 0.75)));
  };
  const double se = std::sqrt(1 / (static_cast<double>(n) + 0.5) +
                              1 / (static_cast<double>(ref_n) + 0.5));
  return 2 * (h(errors, n) - h(ref_errors, ref_n)) / se;
}

AlertLevel LevelOfScore(double score, double warn, double alert) {
  if (score >= alert) return AlertLevel::kAlert;
  if (score >= warn) return AlertLevel::kWarn;
  return AlertLevel::kOk;
}

double LocationBackEvidence(int64_t n, double u, double d) {
  const double a = std::abs(d);
  return static_cast<double>(n) * a * (a / 2 - std::abs(u));
}

double SpreadBackEvidence(double log_ratio, double variance, double incident) {
  const double a = std::abs(incident);
  if (!(variance > 0)) return 0;
  return a / variance * (a / 2 - std::abs(log_ratio));
}

double ShapeBackEvidence(std::span<const int64_t> window, std::span<const int64_t> reference,
                         std::span<const double> incident_delta) {
  const size_t k = std::min({window.size(), reference.size(), incident_delta.size()});
  if (k == 0) return 0;
  double nr = 0;
  for (size_t i = 0; i < k; ++i) nr += static_cast<double>(reference[i]);
  if (!(nr > 0)) return 0;
  const double half = 0.5 * static_cast<double>(k);
  // The "still changed" shares: the reference's plus the incident's change, floored at half a
  // value and renormalized.
  double q_total = 0;
  for (size_t i = 0; i < k; ++i) {
    q_total += std::max(static_cast<double>(reference[i]) / nr + incident_delta[i], 0.5 / nr);
  }
  double llr = 0;
  for (size_t i = 0; i < k; ++i) {
    if (window[i] == 0) continue;
    const double r = (static_cast<double>(reference[i]) + 0.5) / (nr + half);
    const double q =
        std::max(static_cast<double>(reference[i]) / nr + incident_delta[i], 0.5 / nr) / q_total;
    llr += static_cast<double>(window[i]) * std::log(r / q);
  }
  return llr;
}

double ErrorBackEvidence(int64_t n, int64_t errors, double reference_rate,
                         double incident_rate) {
  if (n <= 0) return 0;
  const double pr = std::clamp(reference_rate, 1e-6, 1 - 1e-6);
  const double pi = std::clamp(incident_rate, 1e-6, 1 - 1e-6);
  // An incident whose rate is not above the reference's has nothing left to hold it.
  if (pi <= pr) return std::numeric_limits<double>::infinity();
  const double e = static_cast<double>(errors);
  return e * std::log(pr / pi) + (static_cast<double>(n) - e) * std::log((1 - pr) / (1 - pi));
}

const std::vector<DetectorDefaults>& DetectorDefaultsTable() {
  // The levels are scores (calibration.h): warn 5 is a false-alarm probability of 2.9e-7 per
  // evaluation, alert 5.5 one of 1.9e-8, for every detector and every sample size
  // (engine/drift/README.md has the measured rates, tests/engine/drift_calibration_test.cc checks
  // them against simulated null distributions).
  static const DetectorParamDef kBins{"bins", 10, 2, 1000, true,
                                      "histogram bins frozen from the baseline's quantiles"};
  static const DetectorParamDef kCategories{
      "categories", 30, 2, 1000, true,
      "categories of a string series tracked by name, the baseline's most frequent; the rest "
      "are counted together"};
  static constexpr uint8_t kNumericOrCategorical =
      SeriesBit(SeriesKind::kNumeric) | SeriesBit(SeriesKind::kCategorical);
  static const std::vector<DetectorDefaults> table = {
      {DetectorKind::kMeanShift,
       "mean_shift",
       DetectorFamily::kLocation,
       "|z| of the winsorized mean of the last 1, 2, 4, 8 or 16 windows against the baseline's "
       "(both samples' errors in its variance)",
       5,
       5.5,
       {{"minEffect", 0.1, 0, 1e6, false,
         "smallest |shift| / baseline sd that may raise a level"}},
       false,
       false,
       EvaluateMeanShift,
       {"z", "welch_t", "lookback_windows"}},
      {DetectorKind::kStddevRatio,
       "stddev_ratio",
       DetectorFamily::kSpread,
       "max(s_w / s_ref, s_ref / s_w) of winsorized values, judged on the log variance ratio "
       "with the baseline's kurtosis",
       5,
       5.5,
       {{"minEffect", 1.1, 1, 1e6, false, "smallest ratio that may raise a level"}},
       false,
       false,
       EvaluateStddevRatio,
       {"sd_ratio", "z", "kurtosis", "lookback_windows"}},
      {DetectorKind::kPsi,
       "psi",
       DetectorFamily::kShape,
       "population stability index over the frozen bins; level from Pearson's chi-square test",
       5,
       5.5,
       {{"minEffect", 0.05, 0, 1e6, false, "smallest PSI that may raise a level"}, kBins},
       false,
       false,
       EvaluatePsi,
       {"chi_square", "df"},
       kNumericOrCategorical},
      {DetectorKind::kJensenShannon,
       "js",
       DetectorFamily::kShape,
       "Jensen-Shannon distance (base 2) over the frozen bins; level from the G test",
       5,
       5.5,
       {{"minEffect", 0.05, 0, 1, false, "smallest distance that may raise a level"}, kBins},
       false,
       false,
       EvaluateJs,
       {"g", "df"},
       kNumericOrCategorical},
      {DetectorKind::kKs,
       "ks",
       DetectorFamily::kShape,
       "Kolmogorov-Smirnov D at the bin edges; level from the two-sample Kolmogorov "
       "distribution",
       5,
       5.5,
       {{"minEffect", 0.05, 0, 1, false, "smallest D that may raise a level"}, kBins},
       false,
       false,
       EvaluateKs},
      {DetectorKind::kCusum,
       "cusum",
       DetectorFamily::kLocation,
       "two-sided CUSUM of winsorized values standardized by the baseline, per value; its "
       "levels are false-alarm rates per windowRecords values, baseline error included",
       5,
       5.5,
       {{"allowance", 0.15, 0.01, 10, false,
         "k in baseline sds: the CUSUM is fastest for shifts of 2k (raised for short "
         "baselines)"}},
       true,
       false,
       EvaluateCusum,
       {"upper", "lower", "allowance"}},
      {DetectorKind::kErrorRate,
       "error_rate",
       DetectorFamily::kError,
       "rise of the error rate of the last 1, 2, 4, 8 or 16 label windows over the baseline's "
       "(two-proportion test)",
       5,
       5.5,
       {{"minEffect", 0.02, 0, 1, false, "smallest rise that may raise a level"},
        {"threshold", 0.5, 0, 1e300, false,
         "an error is |prediction - label| > threshold"}},
       false,
       true,
       EvaluateErrorRate,
       {"baseline_error_rate", "window_error_rate", "baseline_mae", "window_mae",
        "error_threshold", "z", "lookback_windows"},
       SeriesBit(SeriesKind::kNumeric)},
      {DetectorKind::kChiSquare,
       "chi_square",
       DetectorFamily::kShape,
       "total variation distance between the window's and the baseline's category shares "
       "(tracked categories and the rest); level from Pearson's chi-square test",
       5,
       5.5,
       {{"minEffect", 0.05, 0, 1, false,
         "smallest total variation distance (share of values that changed category) that may "
         "raise a level"},
        kCategories},
       false,
       false,
       EvaluateChiSquare,
       {"chi_square", "df", "cramers_v"},
       SeriesBit(SeriesKind::kCategorical)},
      {DetectorKind::kUnseenCategories,
       "unseen_categories",
       DetectorFamily::kShape,
       "rise of the window's share of values whose category the baseline never saw over the "
       "baseline's own (held-out) share (two-proportion test)",
       5,
       5.5,
       {{"minEffect", 0.02, 0, 1, false, "smallest rise of the share that may raise a level"},
        kCategories},
       false,
       false,
       EvaluateUnseen,
       {"window_share", "baseline_share", "z"},
       SeriesBit(SeriesKind::kCategorical)},
      {DetectorKind::kMissingRate,
       "missing_rate",
       DetectorFamily::kError,
       "rise of the share of records without a value (null or absent) of the last 1, 2, 4, 8 or "
       "16 windows over the baseline's (two-proportion test); a data-quality alert",
       5,
       5.5,
       {{"minEffect", 0.02, 0, 1, false, "smallest rise of the missing share that may raise a "
                                         "level"}},
       false,
       false,
       EvaluateRate,
       {"baseline_rate", "window_rate", "z", "lookback_windows"},
       SeriesBit(SeriesKind::kMissing)},
      {DetectorKind::kMalformedRate,
       "malformed_rate",
       DetectorFamily::kError,
       "rise of the share of a model's records that were malformed, of the last 1, 2, 4, 8 or "
       "16 windows over the baseline's (two-proportion test); a data-quality alert",
       5,
       5.5,
       {{"minEffect", 0.02, 0, 1, false, "smallest rise of the malformed share that may raise "
                                         "a level"}},
       false,
       false,
       EvaluateRate,
       {"baseline_rate", "window_rate", "z", "lookback_windows"},
       SeriesBit(SeriesKind::kMalformed)},
  };
  return table;
}

const DetectorDefaults& DefaultsFor(DetectorKind kind) {
  return DetectorDefaultsTable()[static_cast<size_t>(kind)];
}

std::optional<DetectorKind> ParseDetectorKind(std::string_view name) {
  for (const auto& d : DetectorDefaultsTable()) {
    if (d.name == name) return d.kind;
  }
  if (name == "jensen_shannon") return DetectorKind::kJensenShannon;
  return std::nullopt;
}

DetectorSpec DefaultDetectorSpec(DetectorKind kind) {
  const DetectorDefaults& d = DefaultsFor(kind);
  DetectorSpec spec;
  spec.kind = kind;
  spec.name = std::string(d.name);
  spec.warn = d.warn;
  spec.alert = d.alert;
  for (const DetectorParamDef& p : d.params) spec.params[std::string(p.name)] = p.default_value;
  return spec;
}

std::vector<DetectorSpec> DefaultDetectorSpecs() {
  std::vector<DetectorSpec> specs;
  for (const auto& d : DetectorDefaultsTable()) specs.push_back(DefaultDetectorSpec(d.kind));
  return specs;
}

double DetectorParam(const DetectorSpec& spec, std::string_view name, double fallback) {
  if (auto it = spec.params.find(std::string(name)); it != spec.params.end()) return it->second;
  if (auto it = spec.params.find(SnakeCase(name)); it != spec.params.end()) return it->second;
  for (const DetectorParamDef& p : DefaultsFor(spec.kind).params) {
    if (p.name == name) return p.default_value;
  }
  return fallback;
}

}  // namespace driftd
