#include "engine/drift/multivariate.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Eigenvalues>

#include "engine/drift/codec.h"

namespace driftd::drift {

namespace {

constexpr uint8_t kVersion = 1;

}  // namespace

MultivariateState::MultivariateState(size_t dimensions)
    : mean_(dimensions, 0.0), comoments_(dimensions * (dimensions + 1) / 2, 0.0) {}

size_t MultivariateState::Packed(size_t i, size_t j) const {
  const size_t d = mean_.size();
  // Rows i of the upper triangle before row i hold d + (d-1) + ... + (d-i+1) entries.
  return i * d - i * (i - 1) / 2 + (j - i);
}

double MultivariateState::Covariance(size_t i, size_t j) const {
  if (i > j) std::swap(i, j);
  if (n_ < 2 || fitted_) return NAN;
  return comoments_[Packed(i, j)] / static_cast<double>(n_ - 1);
}

std::optional<double> MultivariateState::Add(std::span<const double> x,
                                             const MultivariateOptions& options) {
  if (fitted_) return ReconstructionError(x);
  const size_t d = mean_.size();
  ++n_;
  const double n = static_cast<double>(n_);
  // Welford: C += (x - mean_old)(x - mean_new)^T, symmetric in exact arithmetic; the delta
  // before the update times the one after keeps it so in floating point to the last bits that
  // matter here.
  thread_local std::vector<double> before;
  before.resize(d);
  for (size_t i = 0; i < d; ++i) {
    before[i] = x[i] - mean_[i];
    mean_[i] += before[i] / n;
  }
  size_t at = 0;
  for (size_t i = 0; i < d; ++i) {
    const double after = x[i] - mean_[i];
    for (size_t j = i; j < d; ++j) comoments_[at++] += after * before[j];
  }
  if (n_ >= options.records) Fit(options.explained_variance);
  return std::nullopt;
}

void MultivariateState::Merge(const MultivariateState& other) {
  if (other.n_ == 0 || fitted_ || other.fitted_ || other.mean_.size() != mean_.size()) return;
  const size_t d = mean_.size();
  const double na = static_cast<double>(n_);
  const double nb = static_cast<double>(other.n_);
  const double n = na + nb;
  std::vector<double> delta(d);
  for (size_t i = 0; i < d; ++i) delta[i] = other.mean_[i] - mean_[i];
  size_t at = 0;
  for (size_t i = 0; i < d; ++i) {
    for (size_t j = i; j < d; ++j, ++at) {
      comoments_[at] += other.comoments_[at] + delta[i] * delta[j] * na * nb / n;
    }
  }
  for (size_t i = 0; i < d; ++i) mean_[i] += delta[i] * nb / n;
  n_ += other.n_;
}

void MultivariateState::Fit(double explained_variance) {
  const size_t d = mean_.size();
  if (fitted_ || d == 0 || n_ < 2) return;
  const double n1 = static_cast<double>(n_ - 1);
  scale_.assign(d, 1.0);
  for (size_t i = 0; i < d; ++i) {
    const double variance = comoments_[Packed(i, i)] / n1;
    // A feature constant in the baseline keeps unit scale: any change of it is an error of
    // its own size.
    if (variance > 0 && std::isfinite(variance)) scale_[i] = std::sqrt(variance);
  }
  Eigen::MatrixXd correlation(static_cast<Eigen::Index>(d), static_cast<Eigen::Index>(d));
  for (size_t i = 0; i < d; ++i) {
    for (size_t j = i; j < d; ++j) {
      const double r = comoments_[Packed(i, j)] / n1 / (scale_[i] * scale_[j]);
      correlation(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = r;
      correlation(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(i)) = r;
    }
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(correlation);
  // Eigenvalues come in increasing order: keep the largest until they explain enough.
  const Eigen::VectorXd& values = solver.eigenvalues();
  double total = 0;
  for (Eigen::Index i = 0; i < values.size(); ++i) total += std::max(0.0, values(i));
  components_.clear();
  double kept = 0;
  for (Eigen::Index c = values.size() - 1; c >= 0; --c) {
    if (total > 0 && kept >= explained_variance * total) break;
    kept += std::max(0.0, values(c));
    for (size_t i = 0; i < d; ++i) {
      components_.push_back(solver.eigenvectors()(static_cast<Eigen::Index>(i), c));
    }
  }
  components_.shrink_to_fit();
  explained_ = total > 0 ? kept / total : 1.0;
  fitted_ = true;
  comoments_.clear();
  comoments_.shrink_to_fit();
}

double MultivariateState::ReconstructionError(std::span<const double> x) const {
  const size_t d = mean_.size();
  const size_t k = components();
  thread_local std::vector<double> z;
  thread_local std::vector<double> residual;
  z.resize(d);
  for (size_t i = 0; i < d; ++i) z[i] = (x[i] - mean_[i]) / scale_[i];
  residual = z;
  for (size_t c = 0; c < k; ++c) {
    const double* v = components_.data() + c * d;
    double p = 0;
    for (size_t i = 0; i < d; ++i) p += v[i] * z[i];
    for (size_t i = 0; i < d; ++i) residual[i] -= p * v[i];
  }
  double sum = 0;
  for (double r : residual) sum += r * r;
  return std::sqrt(sum);
}

size_t MultivariateState::MemoryBytes() const {
  return sizeof(double) *
         (mean_.capacity() + comoments_.capacity() + scale_.capacity() + components_.capacity());
}

void MultivariateState::Encode(std::string& out) const {
  ByteWriter w(out);
  w.U8(kVersion);
  w.Varint(mean_.size());
  w.Varint(static_cast<uint64_t>(n_));
  w.U8(fitted_ ? 1 : 0);
  for (double v : mean_) w.F64(v);
  if (!fitted_) {
    for (double v : comoments_) w.F64(v);
    return;
  }
  w.F64(explained_);
  for (double v : scale_) w.F64(v);
  w.Varint(components());
  for (double v : components_) w.F64(v);
}

bool MultivariateState::Decode(std::string_view bytes, size_t dimensions,
                               MultivariateState& out) {
  ByteReader r(bytes);
  if (r.U8() != kVersion || r.Varint() != dimensions) return false;
  MultivariateState state(dimensions);
  state.n_ = static_cast<int64_t>(r.Varint());
  state.fitted_ = r.U8() != 0;
  for (double& v : state.mean_) v = r.F64();
  if (!state.fitted_) {
    for (double& v : state.comoments_) v = r.F64();
  } else {
    state.comoments_.clear();
    state.explained_ = r.F64();
    state.scale_.resize(dimensions);
    for (double& v : state.scale_) v = r.F64();
    const uint64_t k = r.Varint();
    if (k > dimensions) return false;
    state.components_.resize(static_cast<size_t>(k) * dimensions);
    for (double& v : state.components_) v = r.F64();
  }
  if (r.failed() || !r.at_end()) return false;
  out = std::move(state);
  return true;
}

MultivariateState& MultivariateModels::Of(uint32_t id) {
  if (id >= states_.size()) {
    states_.resize(id + 1);
    is_dirty_.resize(id + 1, 0);
  }
  if (!states_[id]) states_[id] = std::make_unique<MultivariateState>(dimensions_);
  return *states_[id];
}

std::optional<double> MultivariateModels::Add(uint32_t id, std::span<const double> x) {
  MultivariateState& state = Of(id);
  // A fitted state does not change: only the baseline's vectors are written.
  if (!state.fitted()) {
    if (!is_dirty_[id]) dirty_.push_back(id);
    is_dirty_[id] = 1;
  }
  return state.Add(x, options_);
}

bool MultivariateModels::Restore(uint32_t id, std::string_view bytes) {
  MultivariateState restored;
  if (!MultivariateState::Decode(bytes, dimensions_, restored)) return false;
  Of(id) = std::move(restored);
  return true;
}

const MultivariateState* MultivariateModels::Find(uint32_t id) const {
  return id < states_.size() ? states_[id].get() : nullptr;
}

std::vector<std::pair<uint32_t, std::string>> MultivariateModels::TakeDirty() {
  std::sort(dirty_.begin(), dirty_.end());
  std::vector<std::pair<uint32_t, std::string>> out;
  out.reserve(dirty_.size());
  for (uint32_t id : dirty_) {
    std::string bytes;
    states_[id]->Encode(bytes);
    out.emplace_back(id, std::move(bytes));
    is_dirty_[id] = 0;
  }
  dirty_.clear();
  return out;
}

size_t MultivariateModels::MemoryBytes() const {
  size_t bytes = 0;
  for (const auto& state : states_) {
    if (state) bytes += sizeof(MultivariateState) + state->MemoryBytes();
  }
  return bytes;
}

}  // namespace driftd::drift
