#include "engine/exact_sum.h"

#include <cmath>
#include <utility>

namespace driftd {

void ExactSum::Add(double value) {
  if (!std::isfinite(value)) {
    special_ += value;
    return;
  }
  // Adds the term to each part in turn, from the smallest: each step's rounding error is exact
  // (two-sum, the larger operand first) and stays behind as a part unless it is zero.
  size_t kept = 0;
  for (double part : parts_) {
    double big = value;
    double small = part;
    if (std::fabs(big) < std::fabs(small)) std::swap(big, small);
    const double sum = big + small;
    if (!std::isfinite(sum)) {
      special_ += sum;  // past the largest double: the sum is infinite from here on
      parts_.clear();
      return;
    }
    const double error = small - (sum - big);
    if (error != 0) parts_[kept++] = error;
    value = sum;
  }
  parts_.resize(kept);
  if (value != 0) parts_.push_back(value);
}

void ExactSum::Merge(const ExactSum& other) {
  for (double part : other.parts_) Add(part);
  special_ += other.special_;
}

double ExactSum::Value() const {
  if (special_ != 0 || std::isnan(special_)) return special_;
  if (parts_.empty()) return 0;
  // From the largest part down, until a step rounds; then the half-way case: when what was
  // rounded away is exactly half an ulp and the parts below it lean the same way, the sum is
  // past the half and rounds away from `high`.
  size_t n = parts_.size() - 1;
  double high = parts_[n];
  double low = 0;
  while (n > 0) {
    const double above = high;
    const double next = parts_[--n];
    high = above + next;
    low = next - (high - above);
    if (low != 0) break;
  }
  if (n > 0 && ((low < 0 && parts_[n - 1] < 0) || (low > 0 && parts_[n - 1] > 0))) {
    const double twice = low * 2;
    const double rounded = high + twice;
    if (rounded - high == twice) high = rounded;
  }
  return high;
}

ExactSum ExactSum::Restore(const std::vector<double>& parts, double special) {
  ExactSum sum;
  for (double part : parts) sum.Add(part);
  sum.special_ = special;
  return sum;
}

}  // namespace driftd
