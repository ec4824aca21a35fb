// The drift detectors' statistics (mean shift, standard-deviation ratio, Page-Hinkley, error
// rate) and the table of their default thresholds and parameters. Histogram distances (PSI, JS,
// KS) are in engine/drift/histogram.h. Pure code; see engine/drift/README.md for the formulas.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/stats.h"

namespace driftd {

/// Mean shift of a window against a reference.
struct MeanShiftResult {
  /// (mean_w - mu_ref) / (sigma_ref / sqrt(n_w)): the window mean in reference standard errors.
  double z = 0;
  /// Welch's t: (mean_w - mu_ref) / sqrt(sigma_ref^2 / n_ref + s_w^2 / n_w).
  double welch_t = 0;
  /// |mean_w - mu_ref| / sigma_ref: the size of the shift in reference standard deviations.
  double effect = 0;
};

/// A reference standard deviation of exactly 0 (a constant baseline) would make every change
/// infinitely significant; it is floored to this fraction of max(1, |mu_ref|) instead, so any
/// real change still scores huge but finite (JSON-safe) statistics.
inline constexpr double kSigmaFloor = 1e-9;

MeanShiftResult MeanShift(double ref_n, double ref_mean, double ref_sd, double win_n,
                          double win_mean, double win_sd);
MeanShiftResult MeanShift(const Moments& ref, const Moments& window);

/// max(s_w / s_ref, s_ref / s_w) >= 1: a rise and a fall in spread score alike.
/// Both zero: 1. One zero: the other over kSigmaFloor (huge).
double StddevRatio(double ref_sd, double win_sd);

/// Two-sided Page-Hinkley test on a sequence of standardized values x_t (driftd feeds one per
/// closed window: the window's z statistic against the baseline).
///   m_t = sum (x_i - xbar_i - delta),  PH_up   = m_t - min m
///   n_t = sum (x_i - xbar_i + delta),  PH_down = max n - n_t
/// where xbar_i is the running mean of x up to i. Statistic() = max(PH_up, PH_down).
/// Measuring against its own running mean (not the baseline) makes it immune to the fixed error
/// of a finite baseline, which otherwise accumulates into a false alarm on any long stream.
class PageHinkley {
 public:
  static constexpr uint8_t kEncodingVersion = 1;

  void Add(double x, double delta);
  double Statistic() const;
  /// Restarts the test (after it has raised an alert, so that it measures from the new level).
  void Reset() { *this = PageHinkley(); }
  int64_t count() const { return n_; }

  void Encode(std::string& out) const;
  static Result<PageHinkley> Decode(std::string_view bytes);
  bool operator==(const PageHinkley&) const = default;

 private:
  int64_t n_ = 0;
  double mean_ = 0;
  double up_ = 0;
  double up_min_ = 0;
  double down_ = 0;
  double down_max_ = 0;
};

/// Labeled-outcome summary of a window or a baseline: how many predictions missed their label
/// by more than a threshold, and the absolute error's moments (mean = MAE).
struct ErrorSummary {
  int64_t errors = 0;
  Moments abs_error;

  void Add(double prediction, double label, double threshold) {
    const double e = prediction > label ? prediction - label : label - prediction;
    abs_error.Add(e);
    errors += e > threshold ? 1 : 0;
  }
  int64_t count() const { return abs_error.count(); }
  double ErrorRate() const {
    return count() > 0 ? static_cast<double>(errors) / static_cast<double>(count()) : 0.0;
  }
  void Clear() { *this = ErrorSummary(); }
};

/// Error-rate drift: the rise of the window's error share over the baseline's
/// (rate_w - rate_ref); a fall in errors is not drift and scores <= 0.
double ErrorRateRise(const ErrorSummary& reference, const ErrorSummary& window);

/// Default thresholds and parameters of one detector kind.
struct DetectorDefaults {
  DetectorKind kind;
  std::string_view name;
  double warn;
  double alert;
  /// (name, value) pairs; names as written in pipeline files (camelCase).
  std::vector<std::pair<std::string_view, double>> params;
};

/// The defaults table, one entry per DetectorKind, in DetectorKind order:
///   mean_shift   warn 3    alert 5    minEffect 0.2   (z, gated by effect size)
///   stddev_ratio warn 1.3  alert 1.5
///   psi          warn 0.1  alert 0.25 bins 10
///   js           warn 0.1  alert 0.2  bins 10
///   ks           warn 0.1  alert 0.2  bins 10
///   page_hinkley warn 25   alert 50   delta 0.5       (x = window z; see PageHinkley)
///   error_rate   warn 0.05 alert 0.1  threshold 0.5   (|prediction - label| > threshold)
const std::vector<DetectorDefaults>& DetectorDefaultsTable();
const DetectorDefaults& DefaultsFor(DetectorKind kind);
std::optional<DetectorKind> ParseDetectorKind(std::string_view name);

/// A DetectorSpec with every default filled in (what config/ produces for `{type: psi}`).
DetectorSpec DefaultDetectorSpec(DetectorKind kind);
/// The detectors a drift section without a `detectors:` list gets: all seven kinds.
std::vector<DetectorSpec> DefaultDetectorSpecs();

/// A detector parameter: spec.params[name] (also accepting the snake_case spelling), else the
/// kind's default, else `fallback`.
double DetectorParam(const DetectorSpec& spec, std::string_view name, double fallback = 0);

}  // namespace driftd
