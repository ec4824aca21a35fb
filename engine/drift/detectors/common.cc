#include "engine/drift/detectors/common.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/drift/calibration.h"
#include "engine/drift/histogram.h"

namespace driftd::detector_common {

using calibration::ScoreOfTail;
using calibration::TailOfScore;

const DetectorParamDef kBinsParam{"bins", 10, 2, 1000, true,
                                  "histogram bins frozen from the baseline's quantiles"};
const DetectorParamDef kCategoriesParam{
    "categories", 30, 2, 1000, true,
    "categories of a string series tracked by name, the baseline's most frequent; the rest "
    "are counted together"};

double TwoSidedTail(double z) {
  const double a = std::abs(z);
  if (!std::isfinite(a)) return std::isnan(a) ? 1 : 0;
  return std::min(1.0, 2 * calibration::NormalUpperTail(a));
}

namespace {

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

}  // namespace

double TwoSidedCritical(double level, size_t tests) { return Critical(level, tests, true); }
double OneSidedCritical(double level, size_t tests) { return Critical(level, tests, false); }

double BonferroniScore(double p, size_t tests) {
  return ScoreOfTail(std::min(1.0, p * static_cast<double>(std::max<size_t>(1, tests))));
}

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

std::optional<Homogeneity> BeginShareDistance(const EvaluationInput& in,
                                              const DetectorConfig& config, double warn,
                                              double alert, ShareDistance distance,
                                              DetectorReading& out) {
  Begin(config, warn, alert, out);
  const Homogeneity h = TestHomogeneity(in.win_counts, in.ref_counts);
  if (!(h.df > 0)) return std::nullopt;
  thread_local std::vector<double> ref;
  thread_local std::vector<double> win;
  ref.resize(in.ref_counts.size());
  SharesOf(in.ref_counts, ref);
  win.resize(in.win_counts.size());
  SharesOf(in.win_counts, win);
  out.statistic = distance(ref, win);
  out.effect = out.statistic;
  return h;
}

void FinishShape(double warn_threshold, double alert_threshold, double warn, double alert,
                 DetectorReading& out) {
  out.warn_threshold = std::max(warn_threshold, out.min_effect);
  out.alert_threshold = std::max(alert_threshold, out.min_effect);
  Judge(warn, alert, out);
  out.window_level = out.level;
}

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

void EvaluateRateRise(const EvaluationInput& in, const DetectorConfig& config, double warn,
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

}  // namespace driftd::detector_common
