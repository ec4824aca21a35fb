#include "engine/drift/detectors.h"

#include <algorithm>
#include <cmath>

#include "engine/drift/codec.h"

namespace driftd {

namespace {

double FlooredSigma(double sd, double mean) {
  const double floor = kSigmaFloor * std::max(1.0, std::abs(mean));
  return (std::isfinite(sd) && sd > floor) ? sd : floor;
}

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

}  // namespace

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

MeanShiftResult MeanShift(const Moments& ref, const Moments& window) {
  return MeanShift(static_cast<double>(ref.count()), ref.mean(), ref.Stddev(),
                   static_cast<double>(window.count()), window.mean(), window.Stddev());
}

double StddevRatio(double ref_sd, double win_sd) {
  const double r = std::isfinite(ref_sd) ? ref_sd : 0.0;
  const double w = std::isfinite(win_sd) ? win_sd : 0.0;
  if (r == w) return 1.0;
  const double hi = std::max(r, w);
  const double lo = std::max(std::min(r, w), kSigmaFloor * std::max(1.0, hi));
  return hi / lo;
}

void PageHinkley::Add(double x, double delta) {
  ++n_;
  mean_ += (x - mean_) / static_cast<double>(n_);
  const double dev = x - mean_;
  up_ += dev - delta;
  up_min_ = std::min(up_min_, up_);
  down_ += dev + delta;
  down_max_ = std::max(down_max_, down_);
}

double PageHinkley::Statistic() const { return std::max(up_ - up_min_, down_max_ - down_); }

void PageHinkley::Encode(std::string& out) const {
  drift::ByteWriter w(out);
  w.U8(kEncodingVersion);
  w.I64(n_);
  w.F64(mean_);
  w.F64(up_);
  w.F64(up_min_);
  w.F64(down_);
  w.F64(down_max_);
}

Result<PageHinkley> PageHinkley::Decode(std::string_view bytes) {
  drift::ByteReader r(bytes);
  if (r.U8() != kEncodingVersion) {
    return MakeError(ErrorCode::kCorruption, "page_hinkley: unknown encoding version");
  }
  PageHinkley ph;
  ph.n_ = r.I64();
  ph.mean_ = r.F64();
  ph.up_ = r.F64();
  ph.up_min_ = r.F64();
  ph.down_ = r.F64();
  ph.down_max_ = r.F64();
  if (r.failed() || !r.at_end() || ph.n_ < 0) {
    return MakeError(ErrorCode::kCorruption, "page_hinkley: truncated or malformed state");
  }
  return ph;
}

double ErrorRateRise(const ErrorSummary& reference, const ErrorSummary& window) {
  if (reference.count() == 0 || window.count() == 0) return 0;
  return window.ErrorRate() - reference.ErrorRate();
}

const std::vector<DetectorDefaults>& DetectorDefaultsTable() {
  // Chosen so that stationary streams give no alert (see tests/engine/drift_monitor_test.cc and
  // tests/bench/drift_quality.cc for the measured false-alarm rates and delays).
  static const std::vector<DetectorDefaults> table = {
      {DetectorKind::kMeanShift, "mean_shift", 3, 5, {{"minEffect", 0.2}}},
      {DetectorKind::kStddevRatio, "stddev_ratio", 1.3, 1.5, {}},
      {DetectorKind::kPsi, "psi", 0.1, 0.25, {{"bins", 10}}},
      {DetectorKind::kJensenShannon, "js", 0.1, 0.2, {{"bins", 10}}},
      {DetectorKind::kKs, "ks", 0.1, 0.2, {{"bins", 10}}},
      {DetectorKind::kPageHinkley, "page_hinkley", 25, 50, {{"delta", 0.5}}},
      {DetectorKind::kErrorRate, "error_rate", 0.05, 0.1, {{"threshold", 0.5}}},
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
  for (const auto& [name, value] : d.params) spec.params[std::string(name)] = value;
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
  for (const auto& [pname, value] : DefaultsFor(spec.kind).params) {
    if (pname == name) return value;
  }
  return fallback;
}

}  // namespace driftd
