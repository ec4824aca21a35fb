// The synthetic inference-log generator behind the rate source's `mode: inference`, also used
// directly by tests and benchmarks to write JSON-lines files. Every row is a pure function of
// (seed, row number), so a replay or a second process produces byte-identical records, and
// drift scenarios ("model-3 feature 0 shifts by 1.5 sigma after 60 s") switch on at a stated
// event time.
//
// Thread-safety: a constructed generator is immutable; any number of threads may call its
// const methods.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace driftd {

/// One injected drift, parsed from the compact form
///   "model-<m> feature <f> shifts by <x> sigma after <duration>"
///   "model-<m> feature <f> scales by <x> after <duration>"
///   "model-<m> prediction shifts by <x> sigma after <duration>"
///   "model-<m> prediction scales by <x> after <duration>"
/// where <duration> is anything ParseDurationMs accepts ("60 s", "2 minutes").
struct DriftScenario {
  enum class Series { kFeature, kPrediction };
  enum class Change {
    kShift,  // adds amount × the series' sigma to every value
    kScale,  // multiplies the deviation from the mean by amount (sigma × amount)
  };

  int model = 0;  // "model-3" -> 3
  Series series = Series::kFeature;
  int feature = 0;  // index into feature_vector, for Series::kFeature
  Change change = Change::kShift;
  double amount = 0;
  /// Active for rows whose event time is >= start time + after_ms.
  int64_t after_ms = 0;
  std::string text;  // as written, for messages
};

/// Parses one scenario strictly; errors (kConfig) quote the text and say what was expected.
Result<DriftScenario> ParseDriftScenario(std::string_view text);

/// Parses scenarios separated by ';' or newlines; blank entries are ignored.
Result<std::vector<DriftScenario>> ParseDriftScenarios(std::string_view text);

struct InferenceGeneratorOptions {
  /// Number of models, named model-0 .. model-<models-1>. Default: 8.
  int models = 8;
  /// Length of feature_vector. Default: 8.
  int features = 8;
  /// Seeds every random draw and every model's feature means and sigmas. Default: 42.
  uint64_t seed = 42;
  /// Fraction of rows that carry ground_truth (the others have null). Default: 1.0.
  double labels = 1.0;
  /// Rows per second of event time: row i has event time start + i / rows_per_second.
  /// Default: 1.
  int64_t rows_per_second = 1;
  /// Event time of row 0, milliseconds since the Unix epoch. Default: 0.
  int64_t start_time_ms = 0;
  std::vector<DriftScenario> drift;
};

/// Writes inference-log records like
///   {"model_id":"model-3","event_time":"2026-11-29T10:15:02.123Z",
///    "feature_vector":[0.1234,...],"prediction":0.7312,"ground_truth":1.0}
/// Feature f of model m is normal with a per-model mean in [-2, 2] and sigma in [0.5, 2];
/// the prediction is normal with a mean in [0.3, 0.7] and sigma in [0.05, 0.12], clamped to
/// [0, 1]; ground_truth is 1.0 with probability prediction (a calibrated model), else 0.0.
class InferenceGenerator {
 public:
  /// Fails (kConfig) when counts are out of range or a scenario names a model or feature that
  /// does not exist.
  static Result<InferenceGenerator> Create(InferenceGeneratorOptions options);

  /// Appends row `row` as one JSON object, without a newline. Allocates nothing once `out`
  /// has capacity.
  void AppendRecord(uint64_t row, std::string& out) const;

  /// Appends rows [first, first + count) as JSON lines, each ending in '\n'.
  void AppendJsonLines(uint64_t first, uint64_t count, std::string& out) const;

  /// Event time of `row`, microseconds since the Unix epoch.
  int64_t EventTimeUs(uint64_t row) const;

  /// Model index of `row` (uniform over models).
  int ModelOf(uint64_t row) const;

  /// The undrifted distribution of each series, for tests that check drift.
  double FeatureMean(int model, int feature) const;
  double FeatureSigma(int model, int feature) const;
  double PredictionMean(int model) const;
  double PredictionSigma(int model) const;

  const InferenceGeneratorOptions& options() const { return options_; }

 private:
  explicit InferenceGenerator(InferenceGeneratorOptions options);

  InferenceGeneratorOptions options_;
  uint64_t seed_key_ = 0;
  // Per model: `features` means and sigmas, row-major [model * features + feature].
  std::vector<double> feature_mean_;
  std::vector<double> feature_sigma_;
  std::vector<double> prediction_mean_;
  std::vector<double> prediction_sigma_;
  // Scenario indices per model, so a row only looks at the scenarios of its model.
  std::vector<std::vector<int>> scenarios_by_model_;
};

/// splitmix64's output function applied to x + golden gamma: a counter-based hash, so the
/// n-th draw of a stream seeded with k is SplitMix64(k + n * 0x9E3779B97F4A7C15).
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace driftd
