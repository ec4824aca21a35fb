#include "engine/drift/detectors.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>

#include "engine/drift/histogram.h"

namespace driftd {

namespace {

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

// The registry: every definition that engine/drift/detectors/registered.inc names.
namespace detectors {
#define DRIFTD_DETECTOR(name) DetectorDefaults name##Detector();
#include "engine/drift/detectors/registered.inc"
#undef DRIFTD_DETECTOR
}  // namespace detectors

const std::vector<DetectorDefaults>& DetectorDefaultsTable() {
  // The levels are scores (calibration.h): warn 5 is a false-alarm probability of 2.9e-7 per
  // evaluation, alert 5.5 one of 1.9e-8, for every detector and every sample size
  // (engine/drift/README.md has the measured rates, tests/engine/drift_calibration_test.cc checks
  // them against simulated null distributions).
  static const std::vector<DetectorDefaults> table = [] {
    std::vector<DetectorDefaults> out = {
#define DRIFTD_DETECTOR(name) detectors::name##Detector(),
#include "engine/drift/detectors/registered.inc"
#undef DRIFTD_DETECTOR
    };
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].kind = static_cast<DetectorKind>(i);
      // A configured detector's state is laid out in the checkpoint: adding or removing it
      // must change the fingerprint, so that a checkpoint is never read with another layout.
      // The categorical series' record (written whole) has no place for detector states.
      assert(out[i].state == nullptr ||
             (out[i].in_fingerprint && !out[i].error_series &&
              (out[i].series & SeriesBit(SeriesKind::kCategorical)) == 0));
    }
    return out;
  }();
  return table;
}

bool DetectorDefaults::Declares(std::string_view param) const {
  return std::any_of(params.begin(), params.end(),
                     [&](const DetectorParamDef& p) { return p.name == param; });
}

double DetectorConfig::Param(std::string_view param, double fallback) const {
  const DetectorDefaults& defaults = DefaultsFor(kind);
  for (size_t i = 0; i < defaults.params.size() && i < params.size(); ++i) {
    if (defaults.params[i].name == param) return params[i];
  }
  return fallback;
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
  for (const auto& d : DetectorDefaultsTable()) {
    if (d.by_default) specs.push_back(DefaultDetectorSpec(d.kind));
  }
  return specs;
}

DetectorConfig ResolveDetector(const DetectorSpec& spec) {
  const DetectorDefaults& defaults = DefaultsFor(spec.kind);
  DetectorConfig d;
  d.kind = spec.kind;
  d.name = defaults.name;
  d.spec_name = spec.name.empty() ? std::string(defaults.name) : spec.name;
  const bool unset = spec.warn == 0 && spec.alert == 0;
  d.warn = unset ? defaults.warn : spec.warn;
  d.alert = unset ? defaults.alert : spec.alert;
  d.min_effect = DetectorParam(spec, "minEffect");
  d.threshold = DetectorParam(spec, "threshold");
  for (const DetectorParamDef& p : defaults.params) d.params.push_back(DetectorParam(spec, p.name));
  return d;
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
