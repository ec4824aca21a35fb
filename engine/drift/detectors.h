// The drift detectors: one table entry per kind (name, statistic, default levels, parameters with
// their ranges, behaviour), read by the monitor, by config/ (keys, ranges, defaults) and by the
// docs. Every detector turns its statistic into a calibrated score (engine/drift/calibration.h):
// the z-equivalent of the probability of so extreme a reading when nothing changed, for the
// window's and the baseline's sample sizes, baseline error included. A level (warn, alert) is a
// score, so it means the same false-alarm rate for every detector and every n; an effect-size
// floor (minEffect) then keeps huge samples from paging on trivial changes.
// Pure code; see engine/drift/README.md for the formulas and what each default catches.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/drift/alert_state.h"
#include "engine/drift/calibration.h"
#include "engine/drift/higher_moments.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/stats.h"

namespace driftd {

namespace drift {
class ByteReader;
class ByteWriter;
}  // namespace drift

/// Which aspect of a series a detector watches. An incident remembers the families that raised
/// it, and leaves only on each one's own evidence that the series is back.
enum class DetectorFamily : uint8_t { kLocation = 0, kSpread = 1, kShape = 2, kError = 3 };
inline constexpr int kDetectorFamilies = 4;
std::string_view ToString(DetectorFamily family);

/// What a drift series holds, which decides the detectors that watch it (engine/drift/README.md,
/// "Series"). The numbering is persisted.
enum class SeriesKind : uint8_t {
  /// Numbers: a numeric column or an element of an array<double> (DriftMonitor::Observe).
  kNumeric = 0,
  /// Strings: a category per value, watched by its frequencies (DriftMonitor::ObserveCategory).
  kCategorical = 1,
  /// Whether another series' value was null or absent in a record (DriftMonitor::ObserveFlag):
  /// a data-quality series.
  kMissing = 2,
  /// Whether a record of the model was malformed (DriftMonitor::ObserveFlag): a data-quality
  /// series.
  kMalformed = 3,
};
inline constexpr int kSeriesKinds = 4;
std::string_view ToString(SeriesKind kind);
/// The bit of a kind in DetectorDefaults::series.
constexpr uint8_t SeriesBit(SeriesKind kind) { return uint8_t(1u << static_cast<int>(kind)); }
/// Missing-value and malformed-record series are data quality, the others distribution drift
/// (the alert payload's "kind").
constexpr bool IsDataQuality(SeriesKind kind) {
  return kind == SeriesKind::kMissing || kind == SeriesKind::kMalformed;
}

/// Mean shift of a window against a reference (the reference example of DESIGN.md).
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
double FlooredSigma(double sd, double mean);

MeanShiftResult MeanShift(double ref_n, double ref_mean, double ref_sd, double win_n,
                          double win_mean, double win_sd);

/// max(s_w / s_ref, s_ref / s_w) >= 1: a rise and a fall in spread score alike.
/// Both zero: 1. One zero: the other over kSigmaFloor (huge).
double StddevRatio(double ref_sd, double win_sd);

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

/// Two-proportion test of a rise from `ref_errors`/`ref_n` to `errors`/`n` on the variance-
/// stabilized (Anscombe arcsine) scale: one-sided z, N(0, 1) when the rate did not change.
double ErrorRiseZ(int64_t ref_errors, int64_t ref_n, int64_t errors, int64_t n);

/// One detector's reading at one evaluation.
struct DetectorReading {
  std::string_view detector;  // "mean_shift", "psi", ... (static storage)
  /// The detector's own statistic: |z|, a ratio, PSI, a distance, the CUSUM sum, a rise.
  double statistic = 0;
  /// Calibrated z-equivalent of the reading's false-alarm probability.
  double score = 0;
  /// Levels (scores) of this series for WARN and ALERT.
  double warn = 0;
  double alert = 0;
  /// The statistic at which each level is reached for this evaluation's sample sizes, floor
  /// included (exact for mean_shift, stddev_ratio, ks, cusum and error_rate; for psi and js the
  /// level is judged on the chi-square and G statistics, and these are their PSI and JS
  /// equivalents).
  double warn_threshold = 0;
  double alert_threshold = 0;
  /// The change's size in the detector's own unit and the floor it must reach to raise a level.
  double effect = 0;
  double min_effect = 0;
  /// Level this reading alone indicates (before hysteresis).
  AlertLevel level = AlertLevel::kOk;
  /// The level the score reached when the effect floor held it down (kOk when it did not).
  AlertLevel held_from = AlertLevel::kOk;
  /// Level of the current window alone (without the longer look-backs; kOk for the CUSUM): an
  /// incident leaves only when no detector reads WARN on the current window.
  AlertLevel window_level = AlertLevel::kOk;
  /// Detector-specific extras, e.g. mean_shift: z, welch_t, lookback_windows; error_rate: rates.
  std::vector<std::pair<std::string_view, double>> extras;
};

/// Winsorized values of the last few windows merged: look-back 1 is the current window.
struct Lookback {
  int windows = 0;
  int64_t n = 0;
  double mean = 0;
  /// Pooled within-window variance (each window around its own mean, so a change of the mean
  /// across windows does not read as spread) and its degrees of freedom.
  double pooled_variance = 0;
  int64_t dof = 0;
};

struct ErrorLookback {
  int windows = 0;
  int64_t n = 0;
  int64_t errors = 0;
};

/// What the detectors see at one evaluation of a series.
struct EvaluationInput {
  /// Winsorized reference: the warmup, file, trailing or seasonal-phase baseline.
  HigherMoments reference;
  /// [0] is the current window; further entries merge 2, 4, 8, ... windows.
  std::span<const Lookback> lookbacks;
  /// Reference and window histogram counts over the same bins (empty: no histogram).
  std::span<const int64_t> ref_counts;
  std::span<const int64_t> win_counts;
  /// The detector's own state of this series, for a detector that keeps one
  /// (DetectorDefaults::state; the State type StateOps was made from), else null.
  const void* state = nullptr;
  /// Values per evaluation (windowRecords): what a per-value false-alarm rate is scaled by.
  double values_per_evaluation = 1000;
  /// Error series.
  ErrorSummary error_reference;
  ErrorSummary error_window;
  std::span<const ErrorLookback> error_lookbacks;
  double error_threshold = 0.5;
  /// Categorical series: ref_counts / win_counts are category cells (tracked categories and the
  /// rest). Values of categories the baseline never saw: `unseen` of the window's `unseen_n`,
  /// and the baseline's own rate of them, `ref_unseen` of `ref_unseen_n` (its held-out part).
  int64_t unseen = 0;
  int64_t unseen_n = 0;
  int64_t ref_unseen = 0;
  int64_t ref_unseen_n = 0;
  /// Rate series (missing values, malformed records): the baseline's flagged records of its
  /// records, and the windows' look-backs (n records, `errors` flagged).
  int64_t rate_ref_k = 0;
  int64_t rate_ref_n = 0;
  std::span<const ErrorLookback> rate_lookbacks;
};

/// One configured detector with its parameters resolved.
struct DetectorConfig {
  DetectorKind kind = DetectorKind::kMeanShift;
  std::string_view name;  // canonical, static storage
  std::string spec_name;  // as written in the pipeline, for overrides
  double warn = 0;
  double alert = 0;
  double min_effect = 0;
  double threshold = 0;  // error_rate
  /// Every parameter of the detector's definition (DetectorDefaults::params, in that order),
  /// as configured or defaulted.
  std::vector<double> params;
  /// The parameter `name` of the definition; `fallback` for a name it does not declare.
  double Param(std::string_view name, double fallback = 0) const;
};

// ---- A detector's state of each series ----------------------------------------------------
// A detector that remembers more than the window it reads (the CUSUM: its two sums) keeps a state
// of each series it watches. Its own file says what that state is, how it is set up and fed, and
// how it is persisted: a State type, registered as DetectorDefaults::state by StateOps. The
// monitor holds the state in a slot of each series, calls it at the points below, persists it in
// the series' records, and hands it to the detector's evaluate (EvaluationInput::state). Value
// series only (not the error series).

/// What a state is set up from: the reference its series is judged against, and the detector's
/// levels for that series.
struct StateReference {
  /// Winsorized values of the reference: the frozen baseline (warmup or file), or at a window's
  /// end the trailing or seasonal reference.
  const HigherMoments& reference;
  /// The series' levels (scores) of the detector, overrides applied.
  double warn;
  double alert;
  /// The detector as configured (its parameters: DetectorConfig::Param).
  const DetectorConfig& config;
  /// Values per evaluation (windowRecords): what a per-value false-alarm rate is scaled by.
  double values_per_evaluation;
};

/// A window that closed, as its series' state is told of it (before the detectors read it).
struct ClosedWindow {
  /// Its winsorized values.
  const HigherMoments& values;
  /// Whether they came one by one through AddValue first: record windows against a fixed
  /// reference (warmup or file baselines). Otherwise this is the first the state hears of them:
  /// an event-time window takes values in any order, and a trailing or seasonal reference moves.
  bool fed_per_value;
};

/// The parts of a state, by what changes them: each is persisted with what changes with it
/// (engine/drift/monitor_layout.h), and only when it differs from a new series'.
enum class StatePart : uint8_t {
  /// What values change: written with the model record of every batch that fed the series.
  kValues,
  /// What only a window's end changes: written with the series record.
  kWindows,
};

/// A state type's operations, type-erased (StateOps makes them): what the monitor calls.
/// Optional ones are null when the type lacks them.
struct DetectorStateOps {
  size_t size = 0;
  size_t align = 0;
  void (*construct)(void* state) = nullptr;
  void (*prepare)(void* state, const StateReference& reference) = nullptr;  // optional
  AlertLevel (*add_value)(void* state, double value) = nullptr;             // optional
  void (*start_window)(void* state) = nullptr;                              // optional
  void (*close_window)(void* state, const StateReference& reference,
                       const ClosedWindow& window) = nullptr;
  void (*end_incident)(void* state) = nullptr;  // optional
  bool (*is_new)(const void* state, StatePart part) = nullptr;
  void (*encode)(const void* state, StatePart part, drift::ByteWriter& w) = nullptr;
  bool (*decode)(void* state, StatePart part, drift::ByteReader& r) = nullptr;
  /// Versions 3 to 5 of the persisted layout kept a series whole in one record, with
  /// kOneRecordStateBytes of detector state (the CUSUM's: its sums and the last window's sd);
  /// a state that reads them says so.
  bool (*decode_one_record)(void* state, std::string_view bytes) = nullptr;  // optional
};
inline constexpr size_t kOneRecordStateBytes = 24;

/// The operations of `State`, a detector's state of one series. It is a flat struct of numbers
/// (trivially copyable; no allocation: the per-value path is the hottest there is), and has:
///   State{}                            a new series' state
///   void Prepare(const StateReference&)
///                                      optional: the series' reference is fixed (a warmup or
///                                      file baseline froze, or was restored): set up what feeding
///                                      values one by one needs
///   AlertLevel AddValue(double value)  optional: one winsorized value, in record order, of a
///                                      series fed per value (after Prepare); returns the level
///                                      the state reached when that is above any it reached in
///                                      the current window (the monitor raises it at once,
///                                      between window ends), else kOk
///   void StartWindow()                 optional: a new window starts
///   void CloseWindow(const StateReference&, const ClosedWindow&)
///                                      a window closed with enough values to be evaluated
///   void EndIncident()                 optional: the series' incident ended: forget the
///                                      evidence of the change
///   bool IsNew(StatePart) const        whether that part is a new series' (then not written)
///   void Encode(StatePart, drift::ByteWriter&) const
///   bool Decode(StatePart, drift::ByteReader&)
///                                      false: the bytes hold no valid state
///   bool DecodeOneRecord(std::string_view)
///                                      optional: DetectorStateOps::decode_one_record
template <typename State>
const DetectorStateOps* StateOps() {
  static_assert(std::is_trivially_copyable_v<State> && std::is_trivially_destructible_v<State>,
                "a detector's state of a series is a flat struct of numbers");
  static_assert(alignof(State) <= alignof(std::max_align_t));
  static constexpr DetectorStateOps kOps = [] {
    DetectorStateOps ops;
    ops.size = sizeof(State);
    ops.align = alignof(State);
    ops.construct = [](void* s) { new (s) State{}; };
    if constexpr (requires(State& s, const StateReference& r) { s.Prepare(r); }) {
      ops.prepare = [](void* s, const StateReference& r) { static_cast<State*>(s)->Prepare(r); };
    }
    if constexpr (requires(State& s) { s.AddValue(0.0); }) {
      ops.add_value = [](void* s, double v) { return static_cast<State*>(s)->AddValue(v); };
    }
    if constexpr (requires(State& s) { s.StartWindow(); }) {
      ops.start_window = [](void* s) { static_cast<State*>(s)->StartWindow(); };
    }
    ops.close_window = [](void* s, const StateReference& r, const ClosedWindow& w) {
      static_cast<State*>(s)->CloseWindow(r, w);
    };
    if constexpr (requires(State& s) { s.EndIncident(); }) {
      ops.end_incident = [](void* s) { static_cast<State*>(s)->EndIncident(); };
    }
    ops.is_new = [](const void* s, StatePart p) { return static_cast<const State*>(s)->IsNew(p); };
    ops.encode = [](const void* s, StatePart p, drift::ByteWriter& w) {
      static_cast<const State*>(s)->Encode(p, w);
    };
    ops.decode = [](void* s, StatePart p, drift::ByteReader& r) {
      return static_cast<State*>(s)->Decode(p, r);
    };
    if constexpr (requires(State& s, std::string_view b) { s.DecodeOneRecord(b); }) {
      ops.decode_one_record = [](void* s, std::string_view b) {
        return static_cast<State*>(s)->DecodeOneRecord(b);
      };
    }
    return ops;
  }();
  return &kOps;
}

/// In a detector's evaluate: its state of the series (the State its StateOps were made from).
template <typename State>
const State& StateOf(const EvaluationInput& in) {
  assert(in.state != nullptr);
  return *static_cast<const State*>(in.state);
}

/// A parameter of a detector kind, as written in pipeline files (camelCase).
struct DetectorParamDef {
  std::string_view name;
  double default_value = 0;
  double min = 0;
  double max = 0;
  bool integer = false;
  std::string_view doc;
};

/// A detector's definition: everything config/ (keys, ranges, defaults), the fingerprint, the
/// docs (`driftd reference`), the row shapes (alerts, evaluations, their Avro schemas) and the
/// monitor need to know of it. One file per detector in engine/drift/detectors/ returns it,
/// and one line of engine/drift/detectors/registered.inc registers it.
struct DetectorDefaults {
  /// Its position in the registry, set by the registry (definitions leave it).
  DetectorKind kind = DetectorKind::kMeanShift;
  /// The stable spelling: the `type` in pipeline files, `detector` in alerts and evaluations.
  std::string_view name;
  DetectorFamily family = DetectorFamily::kLocation;
  /// What the statistic is, for docs.
  std::string_view statistic;
  /// Default levels (scores).
  double warn = 5;
  double alert = 5.5;
  /// Its parameters. Two names have a meaning for the monitor: `bins` (it reads the frozen
  /// histogram of a numeric series: the monitor keeps one when some detector declares it) and
  /// `categories` (it reads a categorical series' cells, of which that many are tracked by
  /// name). `minEffect` is the floor of DetectorReading::min_effect.
  std::vector<DetectorParamDef> params;
  /// Integrates evidence already: its level needs no hysteresis.
  bool immediate = false;
  /// Watches the error series (fed by labels) instead of the value series.
  bool error_series = false;
  /// Behaviour: fills `out` (statistic, score, thresholds, effect, level, extras).
  void (*evaluate)(const EvaluationInput& in, const DetectorConfig& config, double warn,
                   double alert, DetectorReading& out) = nullptr;
  /// The extras its readings carry (DetectorReading::extras), by name, in the order written:
  /// the alert and evaluation rows' shapes (AlertRowShape, engine/row_shape.h) hold them all.
  std::vector<std::string_view> extras = {};
  /// The kinds of value series it watches (SeriesBit of each; not the error series).
  uint8_t series = SeriesBit(SeriesKind::kNumeric);
  /// Its state of each series it watches, when it keeps one (StateOps of a State type in its
  /// file; null: it reads the window and baseline alone). The state is laid out in the
  /// checkpoint only where the detector is configured, so a detector with state is part of the
  /// fingerprint (in_fingerprint).
  const DetectorStateOps* state = nullptr;
  /// Among the detectors a drift section without a `detectors:` list gets.
  bool by_default = true;
  /// Part of the pipeline's fingerprint (config/fingerprint.cc): false for a detector whose
  /// series' state starts afresh when it is added, so that adding it keeps old checkpoints.
  bool in_fingerprint = true;

  bool Watches(SeriesKind of) const { return !error_series && (series & SeriesBit(of)) != 0; }
  /// Whether it declares the parameter `name`.
  bool Declares(std::string_view name) const;
};

/// The registry, in registration order (engine/drift/detectors/registered.inc):
///   mean_shift   warn 5  alert 5.5  minEffect 0.1    (winsorized mean, look-backs 1..16 windows)
///   stddev_ratio warn 5  alert 5.5  minEffect 1.1    (winsorized sd ratio, kurtosis-calibrated)
///   psi          warn 5  alert 5.5  minEffect 0.05   bins 10 (level: Pearson chi-square)
///   js           warn 5  alert 5.5  minEffect 0.05   bins 10 (level: G test)
///   ks           warn 5  alert 5.5  minEffect 0.05   bins 10 (level: Kolmogorov distribution)
///   cusum        warn 5  alert 5.5  allowance 0.15   (per value; levels per windowRecords values)
///   error_rate   warn 5  alert 5.5  minEffect 0.02   threshold 0.5 (two-proportion test)
///   chi_square   warn 5  alert 5.5  minEffect 0.05   categories 30 (categorical; TVD, level:
///                                                    Pearson chi-square)
///   unseen_categories warn 5 alert 5.5 minEffect 0.02 categories 30 (categorical; share of
///                                                    new categories, two-proportion test)
///   missing_rate warn 5  alert 5.5  minEffect 0.02   (missing-value series; two-proportion)
///   malformed_rate warn 5 alert 5.5 minEffect 0.02   (malformed-record series; two-proportion)
/// and the detectors registered after them (engine/drift/README.md lists every one).
/// psi and js watch categorical series too (over the category cells).
const std::vector<DetectorDefaults>& DetectorDefaultsTable();
/// The definition of a registered kind (every DetectorKind a DetectorSpec holds is one).
const DetectorDefaults& DefaultsFor(DetectorKind kind);
std::optional<DetectorKind> ParseDetectorKind(std::string_view name);

/// A DetectorSpec with every default filled in (what config/ produces for `{type: psi}`).
DetectorSpec DefaultDetectorSpec(DetectorKind kind);
/// The detectors a drift section without a `detectors:` list gets: every kind registered
/// `by_default`.
std::vector<DetectorSpec> DefaultDetectorSpecs();
/// The detector a configured spec makes: levels (the kind's when warn == alert == 0) and every
/// parameter resolved.
DetectorConfig ResolveDetector(const DetectorSpec& spec);

/// A detector parameter: spec.params[name] (also accepting the snake_case spelling), else the
/// kind's default, else `fallback`.
double DetectorParam(const DetectorSpec& spec, std::string_view name, double fallback = 0);

/// Level of a score against the levels (ALERT if score >= alert, WARN if >= warn).
AlertLevel LevelOfScore(double score, double warn, double alert);

/// Total variation distance of two count vectors' shares: half the sum of |share_a - share_b|,
/// the share of values that would have to change cell to turn one into the other.
double TotalVariation(std::span<const int64_t> a, std::span<const int64_t> b);

// ---- Evidence that a series is back (engine/drift/README.md, "Incidents") -----------------
// Log-likelihood ratios of "back at the reference" against "still changed as much as during the
// incident", from one window: positive favours back. Each is exact for its model (normal mean,
// normal log-variance, multinomial shares, binomial rate).

/// Location: `u` the window's shift (winsorized mean - reference mean, in reference sds) over
/// `n` values; `d` the incident's shift. Either sign of d counts as still changed.
double LocationBackEvidence(int64_t n, double u, double d);
/// Spread: `log_ratio` ln(s_w^2 / s_ref^2) of the window with variance `variance`; the
/// incident's log ratio `incident`.
double SpreadBackEvidence(double log_ratio, double variance, double incident);
/// Shape: the window's counts under the reference's shares against the reference's shares moved
/// by the incident's mean change of share per bin (`incident_delta`; smoothed by half a value per
/// bin).
double ShapeBackEvidence(std::span<const int64_t> window, std::span<const int64_t> reference,
                         std::span<const double> incident_delta);
/// Error rate: `errors` of `n` under the reference's rate against the incident's.
double ErrorBackEvidence(int64_t n, int64_t errors, double reference_rate,
                         double incident_rate);

}  // namespace driftd
