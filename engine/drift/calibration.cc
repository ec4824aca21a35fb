#include "engine/drift/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <boost/math/policies/policy.hpp>
#include <boost/math/special_functions/erf.hpp>
#include <boost/math/special_functions/gamma.hpp>

namespace driftd::calibration {

namespace {

// Boost.Math reports domain and range errors through errno instead of exceptions: callers
// clamp the results, and no exception may leave the engine.
using Policy = boost::math::policies::policy<
    boost::math::policies::domain_error<boost::math::policies::errno_on_error>,
    boost::math::policies::pole_error<boost::math::policies::errno_on_error>,
    boost::math::policies::overflow_error<boost::math::policies::errno_on_error>,
    boost::math::policies::underflow_error<boost::math::policies::errno_on_error>,
    boost::math::policies::evaluation_error<boost::math::policies::errno_on_error>>;

constexpr double kSqrt2 = 1.4142135623730951;
// Siegmund's correction: the random walk overshoots both the reflecting barrier at 0 and the
// threshold by about 0.583 standard deviations of an increment.
constexpr double kOvershoot = 1.166;

/// Adjustment coefficient theta of one side: E exp(theta (Z - k)) = 1 for a standardized
/// increment Z with skewness g, to third order in its cumulants: theta / 2 + g theta^2 / 6 = k.
double Theta(double k, double skew) {
  const double g = std::clamp(skew, -2.0, 2.0);
  if (std::abs(g) < 1e-9) return 2 * k;
  const double disc = 0.25 + 2 * g * k / 3;
  // A strongly negative skew (for this side) makes false alarms rarer than for a normal
  // increment; 2k is then the conservative choice.
  if (disc <= 0) return 2 * k;
  const double theta = (-0.5 + std::sqrt(disc)) / (g / 3);
  return g < 0 ? std::max(theta, 2 * k) : std::min(theta, 2 * k);
}

/// log of one side's false-alarm rate per value at b = h + overshoot; +inf when the
/// approximation says the baseline's error alone would make it alarm.
double LogSideRate(double theta, double b, double tau2, double nu) {
  const double kq = theta - 4 * b * tau2;
  if (kq <= 0) return 0;
  // E over the baseline's mean error e ~ N(0, tau2) of (theta_e^2 / 2) exp(-theta_e b), with
  // theta_e = theta - 2e; and over the relative error of its variance (variance nu), which
  // scales the exponent.
  return std::log(0.5 * (kq * kq + 4 * tau2)) - theta * b + 2 * b * b * tau2 +
         0.5 * theta * theta * b * b * nu;
}

struct Sides {
  double theta_up;
  double theta_down;
  double tau2;
  double nu;
};

Sides SidesOf(const CusumModel& m) {
  const double n = std::max(2.0, m.baseline_n);
  const double kurt = std::max(1.0, m.kurtosis);
  return {Theta(m.allowance, m.skewness), Theta(m.allowance, -m.skewness), 1.0 / n,
          (kurt - 1) / n};
}

double RateAt(const Sides& s, double b) {
  const double up = LogSideRate(s.theta_up, b, s.tau2, s.nu);
  const double down = LogSideRate(s.theta_down, b, s.tau2, s.nu);
  return std::min(1.0, std::exp(std::min(0.0, up)) + std::exp(std::min(0.0, down)));
}

/// b where the rate is smallest: beyond it the approximation grows again (a threshold so high
/// that only a badly wrong baseline could reach it), so thresholds are searched below it.
double BestB(const Sides& s) {
  const double theta = std::min(s.theta_up, s.theta_down);
  return theta / (4 * s.tau2 + theta * theta * s.nu);
}

/// A few remembered values of an expensive inverse that evaluations ask for again and again
/// (the same levels and degrees of freedom); per thread, as monitors may run on several.
template <typename F>
double Remembered(int kind, double a, double b, F compute) {
  struct Entry {
    int kind;
    double a;
    double b;
    double value;
  };
  thread_local std::vector<Entry> entries;
  for (const Entry& e : entries) {
    if (e.kind == kind && e.a == a && e.b == b) return e.value;
  }
  const double value = compute();
  if (entries.size() >= 256) entries.erase(entries.begin());
  entries.push_back({kind, a, b, value});
  return value;
}

}  // namespace

double NormalUpperTail(double z) { return 0.5 * std::erfc(z / kSqrt2); }

double ScoreOfTail(double p) {
  if (!(p < 1)) return 0;
  if (!(p > 0)) return kMaxScore;
  if (p >= 0.5) return std::max(0.0, -kSqrt2 * boost::math::erfc_inv(2 * (1 - p), Policy()));
  const double z = kSqrt2 * boost::math::erfc_inv(2 * p, Policy());
  return std::isfinite(z) ? std::clamp(z, 0.0, kMaxScore) : kMaxScore;
}

double TailOfScore(double score) { return NormalUpperTail(score); }

double ChiSquareUpperTail(double x, double df) {
  if (!(df > 0)) return 1;
  if (!(x > 0)) return 1;
  const double q = boost::math::gamma_q(df / 2, x / 2, Policy());
  return std::isfinite(q) ? std::clamp(q, 0.0, 1.0) : 0.0;
}

double ChiSquareCritical(double df, double p) {
  if (!(df > 0)) return 0;
  if (!(p < 1)) return 0;
  if (!(p > 0)) return std::numeric_limits<double>::max();
  return Remembered(2, df, p, [&] {
    const double x = 2 * boost::math::gamma_q_inv(df / 2, p, Policy());
    return std::isfinite(x) ? x : std::numeric_limits<double>::max();
  });
}

namespace {

double KolmogorovTail(double lambda) {
  if (lambda < 0.2) return 1;
  if (lambda < 1.0) {
    // Small lambda: the Jacobi form converges fast where the alternating series does not.
    double s = 0;
    for (int j = 1; j <= 8; ++j) {
      const double a = (2 * j - 1) * M_PI;
      s += std::exp(-a * a / (8 * lambda * lambda));
    }
    return std::clamp(1 - std::sqrt(2 * M_PI) / lambda * s, 0.0, 1.0);
  }
  double q = 0;
  for (int j = 1; j <= 100; ++j) {
    const double term = std::exp(-2.0 * j * j * lambda * lambda);
    q += (j % 2 == 1 ? 2 : -2) * term;
    if (term <= 1e-17 * q) break;
  }
  return std::clamp(q, 0.0, 1.0);
}

double StephensScale(double n1, double n2) {
  const double ne = n1 * n2 / (n1 + n2);
  const double root = std::sqrt(ne);
  return root + 0.12 + 0.11 / root;
}

}  // namespace

double KsUpperTail(double d, double n1, double n2) {
  if (!(d > 0) || !(n1 > 0) || !(n2 > 0)) return 1;
  return KolmogorovTail(StephensScale(n1, n2) * d);
}

double KsCritical(double n1, double n2, double p) {
  if (!(p < 1)) return 0;
  if (!(p > 0)) return 1;
  const double lambda = Remembered(1, p, 0, [&] {
    // Q(lambda) = 2 exp(-2 lambda^2) - 2 exp(-8 lambda^2) + ...: start from the first term and
    // refine by bisection on the full series.
    double lo = 0.2;
    double hi = std::max(1.0, std::sqrt(std::log(2 / p) / 2) + 1);
    for (int i = 0; i < 60; ++i) {
      const double mid = 0.5 * (lo + hi);
      (KolmogorovTail(mid) > p ? lo : hi) = mid;
    }
    return hi;
  });
  return std::min(1.0, lambda / StephensScale(n1, n2));
}

double ScoreOfZ(double z) {
  if (!(z > 0)) return 0;
  return std::min(z, kMaxScore);
}

double ScoreOfTwoSidedZ(double z) {
  const double a = std::abs(z);
  if (!std::isfinite(a)) return std::isnan(a) ? 0 : kMaxScore;
  if (a > kMaxScore) return kMaxScore;
  return ScoreOfTail(2 * NormalUpperTail(a));
}

double CusumFalseAlarmRate(const CusumModel& model, double h) {
  const Sides s = SidesOf(model);
  return RateAt(s, std::max(0.0, h) + kOvershoot);
}

double CusumThreshold(const CusumModel& model, double rate) {
  const Sides s = SidesOf(model);
  const double b_best = BestB(s);
  double lo = kOvershoot;
  double hi = std::max(lo, b_best);
  if (RateAt(s, hi) > rate) return hi - kOvershoot;  // infeasible: the best one can do
  if (RateAt(s, lo) <= rate) return 0;
  for (int i = 0; i < 100 && hi - lo > 1e-9; ++i) {
    const double mid = 0.5 * (lo + hi);
    (RateAt(s, mid) > rate ? lo : hi) = mid;
  }
  return hi - kOvershoot;
}

double CusumFeasibleAllowance(const CusumModel& model, double rate) {
  // Margin: the smallest achievable rate must be 1000 times below the target, so that the
  // threshold sits well inside the region where the approximation holds and a small shift still
  // accumulates.
  const double target = rate * 1e-3;
  auto feasible = [&](double k) {
    CusumModel m = model;
    m.allowance = k;
    const Sides s = SidesOf(m);
    return RateAt(s, BestB(s)) <= target;
  };
  if (feasible(model.allowance)) return model.allowance;
  double lo = model.allowance;
  double hi = std::max(1.0, 2 * model.allowance);
  while (!feasible(hi) && hi < 100) hi *= 2;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (feasible(mid) ? hi : lo) = mid;
  }
  return hi;
}

double CusumAverageRunLength(double allowance, double h, double shift) {
  const double mu = shift - allowance;
  const double b = h + kOvershoot;
  if (std::abs(mu) < 1e-9) return b * b;
  return (std::exp(-2 * mu * b) - 1 + 2 * mu * b) / (2 * mu * mu);
}

}  // namespace driftd::calibration
