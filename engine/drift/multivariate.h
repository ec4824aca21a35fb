// Multivariate drift of one model's numeric features: a change in their joint distribution that
// every marginal hides (a correlation that breaks). The baseline's mean and covariance are kept
// as mergeable co-moments (Welford's update, Chan's merge) over the model's first complete
// feature vectors; when it holds `records` of them it freezes once: the features are
// standardized by the baseline's mean and standard deviation, and a PCA of their correlation
// matrix (Eigen's self-adjoint eigensolver) keeps the fewest components that explain
// `explained_variance` of the variance. From then on each vector's reconstruction error, the
// Euclidean distance between the standardized vector and its projection on the kept
// components, is a value of the model's `multivariate:pca` series, which the drift monitor
// judges as any numeric series (its own baseline, windows, calibrated levels and alerts): a
// window's mean reconstruction error rises when the features stop moving together as they did.
//
// Memory for d features: before the freeze 8 * (d + d(d+1)/2) bytes of co-moments (d = 20:
// 1.7 KB); after it 8 * (2d + k d) bytes for the mean, the scales and k <= d components (d = 20,
// k = 10: 1.9 KB), beside one numeric series of the monitor.
//
// Deterministic: the same vectors in the same order give the same bytes (no threads, no
// randomness; the eigensolver's input is the same doubles), so the drift stage's record order,
// which does not depend on batching, fixes the components and every error.
//
// Thread-compatible value type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace driftd::drift {

/// What the PCA is fitted on and how much of the variance it keeps.
struct MultivariateOptions {
  /// Complete feature vectors of a model that fix its PCA. Default: 5000.
  int64_t records = 5000;
  /// Share of the standardized features' variance the kept components explain. Default: 0.65
  /// (NannyML's default for its PCA reconstruction error).
  double explained_variance = 0.65;
};

class MultivariateState {
 public:
  MultivariateState() = default;
  explicit MultivariateState(size_t dimensions);

  size_t dimensions() const { return mean_.size(); }
  /// Vectors in the baseline (the co-moments), whether the PCA is fitted, and its components.
  int64_t count() const { return n_; }
  bool fitted() const { return fitted_; }
  size_t components() const {
    return fitted_ ? components_.size() / std::max<size_t>(1, mean_.size()) : 0;
  }
  /// The share of the variance the kept components explain (fitted only).
  double explained() const { return explained_; }

  /// One complete vector (dimensions() finite values). Before the fit it joins the co-moments,
  /// and the one that makes `options.records` fits the PCA; both give no error. After the fit:
  /// its reconstruction error.
  std::optional<double> Add(std::span<const double> x, const MultivariateOptions& options);

  /// Adds another state's co-moments (Chan et al.'s pairwise update), as if its vectors had
  /// been added after this one's. Neither may be fitted.
  void Merge(const MultivariateState& other);

  /// The baseline's mean and (sample) covariance, i <= j, for tests and the reference export.
  const std::vector<double>& mean() const { return mean_; }
  double Covariance(size_t i, size_t j) const;

  /// Fits the PCA from the co-moments now (Add does when the baseline is full).
  void Fit(double explained_variance);
  /// The reconstruction error of a vector (fitted only).
  double ReconstructionError(std::span<const double> x) const;

  /// Bytes in memory (the vectors' payloads).
  size_t MemoryBytes() const;

  void Encode(std::string& out) const;
  /// False if `bytes` is not a state of `dimensions` features this version wrote.
  static bool Decode(std::string_view bytes, size_t dimensions, MultivariateState& out);

 private:
  size_t Packed(size_t i, size_t j) const;  // i <= j

  int64_t n_ = 0;
  std::vector<double> mean_;
  /// Before the fit: sums of (x_i - mean_i)(x_j - mean_j), the upper triangle packed by rows.
  std::vector<double> comoments_;
  bool fitted_ = false;
  /// After the fit: each feature's scale (the baseline's standard deviation; 1 for a constant
  /// feature) and the kept components, k rows of d (unit vectors of the correlation matrix).
  std::vector<double> scale_;
  std::vector<double> components_;
  double explained_ = 0;
};

/// Every model's state (by the dense id its caller gives it), and which changed since their
/// last write. Thread-compatible.
class MultivariateModels {
 public:
  MultivariateModels(size_t dimensions, MultivariateOptions options)
      : dimensions_(dimensions), options_(options) {}

  size_t dimensions() const { return dimensions_; }
  const MultivariateOptions& options() const { return options_; }

  /// One complete vector of model `id`: its reconstruction error once the model's PCA is fitted.
  std::optional<double> Add(uint32_t id, std::span<const double> x);
  /// A persisted state of model `id`; false if unreadable.
  bool Restore(uint32_t id, std::string_view bytes);
  /// The model's state, or nullptr.
  const MultivariateState* Find(uint32_t id) const;
  /// The ids changed since the last call, ascending, with their encoded states; clears them.
  std::vector<std::pair<uint32_t, std::string>> TakeDirty();
  /// Bytes in memory over every model.
  size_t MemoryBytes() const;

 private:
  MultivariateState& Of(uint32_t id);

  size_t dimensions_;
  MultivariateOptions options_;
  std::vector<std::unique_ptr<MultivariateState>> states_;
  std::vector<uint32_t> dirty_;
  std::vector<uint8_t> is_dirty_;
};

}  // namespace driftd::drift
