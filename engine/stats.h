// Mergeable summary statistics (count, mean, variance, min, max, sum) for aggregation state and
// drift baselines. Pure code: no I/O, no allocation.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "engine/result.h"

namespace driftd {

/// Running moments of a stream of doubles: Welford's update for one value, Chan et al.'s
/// pairwise formula for merging two summaries, a compensated (Neumaier) sum, min and max.
///
/// Callers skip NaN (and usually infinite) inputs before Add(): a NaN would poison mean and M2
/// for good, and which records to skip is the caller's policy (and the caller's counter).
/// Not thread-safe; a value type (copy freely).
class Moments {
 public:
  /// Bytes written by Encode(): version (1) + count + 6 doubles.
  static constexpr size_t kEncodedSize = 1 + 8 * 7;
  /// Layout version written by Encode().
  static constexpr uint8_t kEncodingVersion = 1;

  void Add(double x) {
    ++count_;
    const double delta = x - mean_;
    mean_ += delta / static_cast<double>(count_);
    m2_ += delta * (x - mean_);
    if (x < min_) min_ = x;
    if (x > max_) max_ = x;
    AddToSum(x);
  }

  /// Folds `other` into this summary as if its values had been added here.
  void Merge(const Moments& other);

  void Clear() { *this = Moments(); }

  int64_t count() const { return count_; }
  double mean() const { return count_ > 0 ? mean_ : std::numeric_limits<double>::quiet_NaN(); }
  /// Sum of squared deviations from the mean.
  double m2() const { return m2_; }
  /// +inf / -inf while empty.
  double min() const { return min_; }
  double max() const { return max_; }
  /// Compensated sum: exact to about one rounding for sums that do not cancel catastrophically.
  double sum() const { return sum_ + sum_compensation_; }

  /// M2 / (n - 1); NaN for fewer than two values.
  double SampleVariance() const {
    return count_ > 1 ? m2_ / static_cast<double>(count_ - 1)
                      : std::numeric_limits<double>::quiet_NaN();
  }
  /// M2 / n; NaN when empty.
  double PopulationVariance() const {
    return count_ > 0 ? m2_ / static_cast<double>(count_)
                      : std::numeric_limits<double>::quiet_NaN();
  }
  /// Sample standard deviation (sqrt of SampleVariance()).
  double Stddev() const;

  /// Appends kEncodedSize bytes: u8 version, i64 count, f64 mean, m2, min, max, sum,
  /// sum compensation, all little-endian.
  void Encode(std::string& out) const;
  /// Reads what Encode() wrote; rejects other versions, short input and impossible values.
  static Result<Moments> Decode(std::string_view bytes);

  /// Builds a summary from its parts (reference statistics loaded from elsewhere, tests).
  static Moments FromParts(int64_t count, double mean, double m2, double min, double max,
                           double sum);

  bool operator==(const Moments&) const = default;

 private:
  void AddToSum(double x) {
    // Neumaier's variant of Kahan summation: also right when |x| > |sum|.
    const double t = sum_ + x;
    if ((sum_ >= 0 ? sum_ : -sum_) >= (x >= 0 ? x : -x)) {
      sum_compensation_ += (sum_ - t) + x;
    } else {
      sum_compensation_ += (x - t) + sum_;
    }
    sum_ = t;
  }

  int64_t count_ = 0;
  double mean_ = 0;
  double m2_ = 0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  double sum_ = 0;
  double sum_compensation_ = 0;
};

}  // namespace driftd
