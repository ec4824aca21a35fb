// Mergeable first four central moments of a stream (count, mean, M2, M3, M4), for the drift
// detectors' winsorized values: the baseline's skewness and kurtosis calibrate the spread test and
// the CUSUM, and window summaries merge into trailing and seasonal baselines. Pure code, a value
// type; not thread-safe.
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine/drift/codec.h"

namespace driftd {

class HigherMoments {
 public:
  /// Bytes written by Encode(): count + 4 doubles.
  static constexpr size_t kEncodedSize = 8 * 5;

  /// Terriberry's one-pass update of the central moments.
  void Add(double x) {
    const double n1 = static_cast<double>(n_);
    ++n_;
    const double n = static_cast<double>(n_);
    const double delta = x - mean_;
    const double delta_n = delta / n;
    const double delta_n2 = delta_n * delta_n;
    const double term1 = delta * delta_n * n1;
    mean_ += delta_n;
    m4_ += term1 * delta_n2 * (n * n - 3 * n + 3) + 6 * delta_n2 * m2_ - 4 * delta_n * m3_;
    m3_ += term1 * delta_n * (n - 2) - 3 * delta_n * m2_;
    m2_ += term1;
  }

  /// Pebay's pairwise merge: as if `b`'s values had been added here.
  void Merge(const HigherMoments& b) {
    if (b.n_ == 0) return;
    if (n_ == 0) {
      *this = b;
      return;
    }
    const double na = static_cast<double>(n_);
    const double nb = static_cast<double>(b.n_);
    const double n = na + nb;
    const double delta = b.mean_ - mean_;
    const double d2 = delta * delta;
    const double d3 = d2 * delta;
    const double d4 = d2 * d2;
    const double m2 = m2_ + b.m2_ + d2 * na * nb / n;
    const double m3 = m3_ + b.m3_ + d3 * na * nb * (na - nb) / (n * n) +
                      3 * delta * (na * b.m2_ - nb * m2_) / n;
    const double m4 = m4_ + b.m4_ + d4 * na * nb * (na * na - na * nb + nb * nb) / (n * n * n) +
                      6 * d2 * (na * na * b.m2_ + nb * nb * m2_) / (n * n) +
                      4 * delta * (na * b.m3_ - nb * m3_) / n;
    n_ += b.n_;
    mean_ += delta * nb / n;
    m2_ = m2;
    m3_ = m3;
    m4_ = m4;
  }

  void Clear() { *this = HigherMoments(); }

  int64_t count() const { return n_; }
  double mean() const { return mean_; }
  double m2() const { return m2_; }
  /// Sample variance M2 / (n - 1); 0 for fewer than two values.
  double Variance() const { return n_ > 1 ? m2_ / static_cast<double>(n_ - 1) : 0.0; }
  double Stddev() const { return std::sqrt(Variance()); }
  /// Moment skewness sqrt(n) M3 / M2^1.5; 0 when undefined.
  double Skewness() const {
    if (n_ < 3 || !(m2_ > 0)) return 0;
    return std::sqrt(static_cast<double>(n_)) * m3_ / std::pow(m2_, 1.5);
  }
  /// Moment kurtosis n M4 / M2^2 (3 for a normal); 3 when undefined.
  double Kurtosis() const {
    if (n_ < 4 || !(m2_ > 0)) return 3;
    return static_cast<double>(n_) * m4_ / (m2_ * m2_);
  }

  void Encode(drift::ByteWriter& w) const {
    w.I64(n_);
    w.F64(mean_);
    w.F64(m2_);
    w.F64(m3_);
    w.F64(m4_);
  }
  /// False on short or impossible input.
  bool Decode(drift::ByteReader& r) {
    n_ = r.I64();
    mean_ = r.F64();
    m2_ = r.F64();
    m3_ = r.F64();
    m4_ = r.F64();
    return !r.failed() && n_ >= 0 && std::isfinite(mean_) && m2_ >= 0 && std::isfinite(m3_) &&
           m4_ >= 0;
  }

  /// Builds a summary of normal-shaped values (skewness 0, kurtosis 3) from its first two
  /// moments: for reference statistics and old state that kept no higher moments.
  static HigherMoments Normal(int64_t n, double mean, double m2) {
    HigherMoments h;
    h.n_ = n;
    h.mean_ = n > 0 ? mean : 0;
    h.m2_ = n > 1 ? m2 : 0;
    h.m4_ = n > 0 ? 3 * h.m2_ * h.m2_ / static_cast<double>(n) : 0;
    return h;
  }

  static HigherMoments FromCentral(int64_t n, double mean, double m2, double m3, double m4) {
    HigherMoments h;
    h.n_ = n;
    h.mean_ = mean;
    h.m2_ = m2;
    h.m3_ = m3;
    h.m4_ = m4;
    return h;
  }

  bool operator==(const HigherMoments&) const = default;

 private:
  int64_t n_ = 0;
  double mean_ = 0;
  double m2_ = 0;
  double m3_ = 0;
  double m4_ = 0;
};

/// Power sums of (x - shift) up to the fourth: the per-value accumulator of a window, with no
/// division on the hot path (HigherMoments::Add needs one per value). `shift` should be near the
/// values' mean (the baseline's) so that the sums do not cancel. Converts to HigherMoments.
class PowerSums {
 public:
  static constexpr size_t kEncodedSize = 8 * 6;

  void Reset(double shift) {
    *this = PowerSums();
    shift_ = std::isfinite(shift) ? shift : 0;
  }
  void Add(double x) {
    const double d = x - shift_;
    const double d2 = d * d;
    ++n_;
    s1_ += d;
    s2_ += d2;
    s3_ += d2 * d;
    s4_ += d2 * d2;
  }
  int64_t count() const { return n_; }
  double shift() const { return shift_; }

  HigherMoments ToMoments() const {
    if (n_ == 0) return HigherMoments();
    const double n = static_cast<double>(n_);
    const double m = s1_ / n;
    const double m2 = std::max(0.0, s2_ - s1_ * m);
    const double m3 = s3_ - 3 * m * s2_ + 2 * n * m * m * m;
    const double m4 = std::max(0.0, s4_ - 4 * m * s3_ + 6 * m * m * s2_ - 3 * n * m * m * m * m);
    return HigherMoments::FromCentral(n_, shift_ + m, m2, m3, m4);
  }

  void Encode(drift::ByteWriter& w) const {
    w.I64(n_);
    w.F64(shift_);
    w.F64(s1_);
    w.F64(s2_);
    w.F64(s3_);
    w.F64(s4_);
  }
  bool Decode(drift::ByteReader& r) {
    n_ = r.I64();
    shift_ = r.F64();
    s1_ = r.F64();
    s2_ = r.F64();
    s3_ = r.F64();
    s4_ = r.F64();
    return !r.failed() && n_ >= 0 && std::isfinite(shift_) && std::isfinite(s1_) && s2_ >= 0 &&
           std::isfinite(s3_) && s4_ >= 0;
  }
  /// From central moments (old state): the sums around the mean.
  static PowerSums FromMoments(const HigherMoments& h) {
    PowerSums p;
    p.n_ = h.count();
    p.shift_ = h.count() > 0 ? h.mean() : 0;
    p.s2_ = h.m2();
    p.s4_ = h.count() > 0 ? h.Kurtosis() * h.m2() * h.m2() / static_cast<double>(h.count()) : 0;
    return p;
  }

  bool operator==(const PowerSums&) const = default;

 private:
  int64_t n_ = 0;
  double shift_ = 0;
  double s1_ = 0;
  double s2_ = 0;
  double s3_ = 0;
  double s4_ = 0;
};

}  // namespace driftd
