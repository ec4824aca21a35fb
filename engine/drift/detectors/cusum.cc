// cusum: a two-sided CUSUM of winsorized values standardized by the baseline, S = max(0, S + z - k)
// and its mirror. Its sums are its state of each numeric series (CusumState): fed per value with
// record windows against a fixed baseline (warmup, file), so that it may raise a level between
// window ends, and per window otherwise. Its levels are false-alarm rates per windowRecords
// values, solved per series from the baseline's size and shape (engine/drift/calibration.h).
#include <algorithm>
#include <limits>
#include <string_view>

#include "engine/drift/calibration.h"
#include "engine/drift/codec.h"
#include "engine/drift/detectors/common.h"

namespace driftd::detectors {
namespace {

using namespace detector_common;
using calibration::ScoreOfTail;

/// A series' CUSUM. Persisted: the sums, which every value changes, and the last window's sd,
/// which a window's end changes. The rest is derived from the reference (Prepare, SetUp), and
/// the level reached in the current window is not kept.
struct CusumState {
  /// Sums (baseline sds) of the upper and lower side.
  double up = 0;
  double down = 0;
  /// Standardization of a value: (value - mean) * inv_sd.
  double mean = 0;
  double inv_sd = 1;
  /// Thresholds of the series' levels.
  double warn_h = std::numeric_limits<double>::infinity();
  double alert_h = std::numeric_limits<double>::infinity();
  /// The last window's own (winsorized) sd: values are standardized by the larger of it and the
  /// baseline's, so that a change of spread alone does not read as a change of location.
  double sd = 0;
  /// What the thresholds were solved for; its allowance is the k the sums use (the configured
  /// one, raised for short baselines).
  calibration::CusumModel model;
  /// The highest level the sums reached in the current window: a crossing is raised once.
  AlertLevel seen = AlertLevel::kOk;

  /// The thresholds of this reference's levels.
  void SetUp(const StateReference& ref) {
    const HigherMoments& r = ref.reference;
    calibration::CusumModel m{ref.config.Param("allowance"), static_cast<double>(r.count()),
                              r.Kurtosis(), r.Skewness()};
    const double rate_alert = calibration::TailOfScore(ref.alert) / ref.values_per_evaluation;
    const double rate_warn = calibration::TailOfScore(ref.warn) / ref.values_per_evaluation;
    m.allowance = calibration::CusumFeasibleAllowance(m, rate_alert);
    model = m;
    warn_h = calibration::CusumThreshold(m, rate_warn);
    alert_h = std::max(warn_h, calibration::CusumThreshold(m, rate_alert));
  }

  void Prepare(const StateReference& ref) {
    const HigherMoments& r = ref.reference;
    mean = r.mean();
    inv_sd = 1 / std::max(FlooredSigma(r.Stddev(), r.mean()), sd);
    SetUp(ref);
  }

  AlertLevel AddValue(double value) {
    const double z = (value - mean) * inv_sd;
    const double cap = 4 * alert_h;
    up = std::min(cap, std::max(0.0, up + z - model.allowance));
    down = std::min(cap, std::max(0.0, down - z - model.allowance));
    if (up < warn_h && down < warn_h) return AlertLevel::kOk;
    const AlertLevel level = std::max(up, down) >= alert_h ? AlertLevel::kAlert : AlertLevel::kWarn;
    if (level <= seen) return AlertLevel::kOk;
    seen = level;
    return level;
  }

  void StartWindow() { seen = AlertLevel::kOk; }

  void CloseWindow(const StateReference& ref, const ClosedWindow& window) {
    const HigherMoments& r = ref.reference;
    const HigherMoments& w = window.values;
    const double sigma = FlooredSigma(r.Stddev(), r.mean());
    if (window.fed_per_value) {
      // The next window's values are standardized by this window's spread if it is wider.
      sd = w.Stddev();
      inv_sd = 1 / std::max(sigma, sd);
      return;
    }
    // Fed per window: the reference may have moved (trailing, seasonal), and an event-time
    // window's values came in any order.
    SetUp(ref);
    const double n = static_cast<double>(w.count());
    const double u = (w.mean() - r.mean()) / std::max(sigma, w.Stddev());
    const double cap = 4 * alert_h;
    up = std::min(cap, std::max(0.0, up + n * (u - model.allowance)));
    down = std::min(cap, std::max(0.0, down + n * (-u - model.allowance)));
  }

  // The evidence the sums held was the incident's: they start afresh with the series back.
  void EndIncident() { up = down = 0; }

  bool IsNew(StatePart part) const {
    return part == StatePart::kValues ? up == 0 && down == 0 : sd == 0;
  }

  void Encode(StatePart part, drift::ByteWriter& w) const {
    if (part == StatePart::kValues) {
      w.F64(up);
      w.F64(down);
    } else {
      w.F64(sd);
    }
  }

  bool Decode(StatePart part, drift::ByteReader& r) {
    if (part == StatePart::kWindows) {
      sd = r.F64();
      return sd >= 0;
    }
    up = r.F64();
    down = r.F64();
    return up >= 0 && down >= 0;
  }

  // Versions 3 to 5: the sums and the sd.
  bool DecodeOneRecord(std::string_view bytes) {
    drift::ByteReader r(bytes);
    up = r.F64();
    down = r.F64();
    sd = r.F64();
    return !r.failed() && r.at_end() && up >= 0 && down >= 0 && sd >= 0;
  }
};

void EvaluateCusum(const EvaluationInput& in, const DetectorConfig& config, double warn,
                   double alert, DetectorReading& out) {
  const CusumState& s = StateOf<CusumState>(in);
  const double sum = std::max(s.up, s.down);
  Begin(config, warn, alert, out);
  out.statistic = sum;
  const double rate = calibration::CusumFalseAlarmRate(s.model, sum);
  out.score = ScoreOfTail(std::min(1.0, rate * in.values_per_evaluation));
  out.warn_threshold = s.warn_h;
  out.alert_threshold = s.alert_h;
  out.min_effect = 0;
  out.effect = 0;
  // The thresholds were solved from the same rate, so the level follows the sum exactly.
  out.level = sum >= s.alert_h  ? AlertLevel::kAlert
              : sum >= s.warn_h ? AlertLevel::kWarn
                                : AlertLevel::kOk;
  out.score = out.level == AlertLevel::kAlert  ? std::max(out.score, alert)
              : out.level == AlertLevel::kWarn ? std::clamp(out.score, warn, alert)
                                               : std::min(out.score, warn);
  out.window_level = AlertLevel::kOk;
  out.extras = {{"upper", s.up}, {"lower", s.down}, {"allowance", s.model.allowance}};
}

}  // namespace

DetectorDefaults CusumDetector() {
  return {.name = "cusum",
          .family = DetectorFamily::kLocation,
          .statistic = "two-sided CUSUM of winsorized values standardized by the baseline, per "
                       "value; its levels are false-alarm rates per windowRecords values, "
                       "baseline error included",
          .params = {{"allowance", 0.15, 0.01, 10, false,
                      "k in baseline sds: the CUSUM is fastest for shifts of 2k (raised for "
                      "short baselines)"}},
          .immediate = true,
          .evaluate = EvaluateCusum,
          .extras = {"upper", "lower", "allowance"},
          .state = StateOps<CusumState>()};
}

}  // namespace driftd::detectors
