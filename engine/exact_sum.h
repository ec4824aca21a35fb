// ExactSum: a sum of doubles kept exactly, as a few non-overlapping doubles whose sum is the
// true sum (Shewchuk's expansions; Python's math.fsum keeps the same). Its value is the true sum
// rounded once, so it is the same whatever order the terms came in and however they were split
// among partial sums merged later: the labels' join adds a window's errors on whichever task
// joined each key, and the window's metrics must not depend on which tasks those were.
//
// A term that is not finite is kept apart, in an IEEE sum of its own (inf, -inf or NaN), which the
// value then is. A partial sum past the largest double makes the sum infinite for good (where
// math.fsum raises), so only then can the order of the terms matter.
//
// A value type; thread-compatible.
#pragma once

#include <cstddef>
#include <vector>

namespace driftd {

class ExactSum {
 public:
  ExactSum() = default;
  /// A sum of the one term `value`.
  explicit ExactSum(double value) { Add(value); }

  void Add(double value);
  void Merge(const ExactSum& other);
  /// The sum, rounded to the nearest double (ties to even).
  double Value() const;

  /// The doubles the sum is kept as (for a codec: Restore takes them back).
  const std::vector<double>& parts() const { return parts_; }
  double special() const { return special_; }
  /// A sum from its parts as parts() and special() gave them.
  static ExactSum Restore(const std::vector<double>& parts, double special);

 private:
  // Increasing magnitude, non-overlapping, none zero.
  std::vector<double> parts_;
  // The sum of the terms that are not finite (0 while there are none).
  double special_ = 0;
};

}  // namespace driftd
