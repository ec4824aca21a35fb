#include "connectors/inference_generator.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <numbers>

#include <fmt/format.h>

#include "engine/json_writer.h"
#include "engine/options.h"

namespace driftd {

namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;
constexpr std::string_view kScenarioForms =
    "expected \"model-<m> feature <f> shifts by <x> sigma after <duration>\", \"model-<m> "
    "feature <f> scales by <x> after <duration>\", \"model-<m> prediction shifts by <x> sigma "
    "after <duration>\" or \"model-<m> prediction scales by <x> after <duration>\"";

// A uniform double in [0, 1) from the top 53 bits.
double Uniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// A uniform double in (0, 1], safe for log().
double UniformOpen(uint64_t bits) { return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53; }

std::vector<std::string_view> SplitWords(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t begin = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > begin) words.push_back(text.substr(begin, i - begin));
  }
  return words;
}

template <typename T>
bool ParseNumber(std::string_view word, T& value) {
  auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  return ec == std::errc() && ptr == word.data() + word.size();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<DriftScenario> ParseDriftScenario(std::string_view text) {
  std::vector<std::string_view> words = SplitWords(text);
  auto fail = [&](std::string_view problem) {
    return MakeError(ErrorCode::kConfig, "drift scenario \"{}\": {}; {}", Trim(text), problem,
                     kScenarioForms);
  };
  auto word = [&](size_t i) { return i < words.size() ? words[i] : std::string_view(); };

  DriftScenario scenario;
  scenario.text = std::string(Trim(text));
  size_t at = 0;
  std::string_view model = word(at++);
  if (model.substr(0, 6) != "model-" || !ParseNumber(model.substr(6), scenario.model) ||
      scenario.model < 0) {
    return fail(fmt::format("\"{}\" is not a model name like model-3", model));
  }
  std::string_view series = word(at++);
  if (series == "feature") {
    scenario.series = DriftScenario::Series::kFeature;
    std::string_view index = word(at++);
    if (!ParseNumber(index, scenario.feature) || scenario.feature < 0) {
      return fail(fmt::format("\"{}\" is not a feature index (0, 1, ...)", index));
    }
  } else if (series == "prediction") {
    scenario.series = DriftScenario::Series::kPrediction;
  } else {
    return fail(fmt::format("expected \"feature\" or \"prediction\" after \"{}\", got \"{}\"",
                            model, series));
  }
  std::string_view change = word(at++);
  if (change == "shifts") {
    scenario.change = DriftScenario::Change::kShift;
  } else if (change == "scales") {
    scenario.change = DriftScenario::Change::kScale;
  } else {
    return fail(fmt::format("expected \"shifts\" or \"scales\", got \"{}\"", change));
  }
  if (word(at++) != "by") return fail(fmt::format("expected \"by\" after \"{}\"", change));
  std::string_view amount = word(at++);
  if (!ParseNumber(amount, scenario.amount) || !std::isfinite(scenario.amount)) {
    return fail(fmt::format("\"{}\" is not a number", amount));
  }
  if (scenario.change == DriftScenario::Change::kShift) {
    if (word(at++) != "sigma") {
      return fail("a shift is measured in sigma: \"shifts by 1.5 sigma\"");
    }
  } else if (scenario.amount <= 0) {
    return fail(fmt::format("a scale factor must be positive, got {}", amount));
  }
  if (word(at++) != "after") return fail("expected \"after <duration>\"");
  if (at >= words.size()) return fail("expected a duration after \"after\"");
  // The duration is the rest of the text ("60 s", "2 minutes").
  size_t duration_begin = static_cast<size_t>(words[at].data() - text.data());
  auto after = ParseDurationMs(Trim(text.substr(duration_begin)));
  if (!after) return fail(after.error().message());
  if (*after < 0) return fail("the duration must not be negative");
  scenario.after_ms = *after;
  return scenario;
}

Result<std::vector<DriftScenario>> ParseDriftScenarios(std::string_view text) {
  std::vector<DriftScenario> scenarios;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find_first_of(";\n", begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = Trim(text.substr(begin, end - begin));
    if (!item.empty()) {
      auto scenario = ParseDriftScenario(item);
      if (!scenario) return tl::unexpected(scenario.error());
      scenarios.push_back(std::move(*scenario));
    }
    begin = end + 1;
  }
  return scenarios;
}

InferenceGenerator::InferenceGenerator(InferenceGeneratorOptions options)
    : options_(std::move(options)) {}

Result<InferenceGenerator> InferenceGenerator::Create(InferenceGeneratorOptions options) {
  if (options.models < 1 || options.models > 1'000'000) {
    return MakeError(ErrorCode::kConfig, "models must be between 1 and 1000000, got {}",
                     options.models);
  }
  if (options.features < 1 || options.features > 4096) {
    return MakeError(ErrorCode::kConfig, "features must be between 1 and 4096, got {}",
                     options.features);
  }
  if (!(options.labels >= 0 && options.labels <= 1)) {
    return MakeError(ErrorCode::kConfig, "labels is a fraction between 0 and 1, got {}",
                     options.labels);
  }
  if (options.rows_per_second < 1) {
    return MakeError(ErrorCode::kConfig, "rowsPerSecond must be at least 1, got {}",
                     options.rows_per_second);
  }
  for (const DriftScenario& scenario : options.drift) {
    if (scenario.model >= options.models) {
      return MakeError(ErrorCode::kConfig,
                       "drift scenario \"{}\": there is no model-{} (models is {}, so model-0 "
                       "to model-{})",
                       scenario.text, scenario.model, options.models, options.models - 1);
    }
    if (scenario.series == DriftScenario::Series::kFeature &&
        scenario.feature >= options.features) {
      return MakeError(ErrorCode::kConfig,
                       "drift scenario \"{}\": there is no feature {} (features is {})",
                       scenario.text, scenario.feature, options.features);
    }
  }

  InferenceGenerator generator(std::move(options));
  const InferenceGeneratorOptions& o = generator.options_;
  generator.seed_key_ = SplitMix64(o.seed);
  // Model parameters come from their own hash streams (tagged), independent of row draws.
  auto param = [&](uint64_t tag, uint64_t model, uint64_t index) {
    return Uniform(
        SplitMix64(generator.seed_key_ ^ SplitMix64((tag << 56) ^ (model << 20) ^ index)));
  };
  size_t cells = static_cast<size_t>(o.models) * static_cast<size_t>(o.features);
  generator.feature_mean_.resize(cells);
  generator.feature_sigma_.resize(cells);
  generator.prediction_mean_.resize(static_cast<size_t>(o.models));
  generator.prediction_sigma_.resize(static_cast<size_t>(o.models));
  generator.scenarios_by_model_.resize(static_cast<size_t>(o.models));
  for (int m = 0; m < o.models; ++m) {
    for (int f = 0; f < o.features; ++f) {
      size_t cell = static_cast<size_t>(m) * static_cast<size_t>(o.features) + f;
      generator.feature_mean_[cell] = -2.0 + 4.0 * param(1, m, f);
      generator.feature_sigma_[cell] = 0.5 + 1.5 * param(2, m, f);
    }
    generator.prediction_mean_[m] = 0.3 + 0.4 * param(3, m, 0);
    generator.prediction_sigma_[m] = 0.05 + 0.07 * param(4, m, 0);
  }
  for (size_t i = 0; i < o.drift.size(); ++i) {
    generator.scenarios_by_model_[o.drift[i].model].push_back(static_cast<int>(i));
  }
  return generator;
}

int64_t InferenceGenerator::EventTimeUs(uint64_t row) const {
  const auto rate = static_cast<uint64_t>(options_.rows_per_second);
  // Split to keep row * 1e6 from overflowing for very long runs.
  uint64_t offset_us = (row / rate) * 1'000'000 + (row % rate) * 1'000'000 / rate;
  return options_.start_time_ms * 1000 + static_cast<int64_t>(offset_us);
}

int InferenceGenerator::ModelOf(uint64_t row) const {
  uint64_t key = SplitMix64(seed_key_ ^ SplitMix64(row));
  return static_cast<int>(SplitMix64(key) % static_cast<uint64_t>(options_.models));
}

double InferenceGenerator::FeatureMean(int model, int feature) const {
  return feature_mean_[static_cast<size_t>(model) * options_.features + feature];
}
double InferenceGenerator::FeatureSigma(int model, int feature) const {
  return feature_sigma_[static_cast<size_t>(model) * options_.features + feature];
}
double InferenceGenerator::PredictionMean(int model) const { return prediction_mean_[model]; }
double InferenceGenerator::PredictionSigma(int model) const { return prediction_sigma_[model]; }

void InferenceGenerator::AppendRecord(uint64_t row, std::string& out) const {
  // Draw n of this row is SplitMix64(key + n * gamma): draw 0 picks the model, draws 1, 2, ...
  // feed Box-Muller pairs (features, then the prediction), the last two decide the label.
  const uint64_t key = SplitMix64(seed_key_ ^ SplitMix64(row));
  auto draw = [key](uint64_t n) { return SplitMix64(key + n * kGamma); };
  const int model = static_cast<int>(draw(0) % static_cast<uint64_t>(options_.models));
  const int features = options_.features;
  const int64_t event_time_us = EventTimeUs(row);
  const int64_t since_start_us = event_time_us - options_.start_time_ms * 1000;
  const std::vector<int>& scenarios = scenarios_by_model_[model];

  double spare = 0;
  bool have_spare = false;
  uint64_t next_draw = 1;
  auto normal = [&]() {
    if (have_spare) {
      have_spare = false;
      return spare;
    }
    double radius = std::sqrt(-2.0 * std::log(UniformOpen(draw(next_draw))));
    double angle = 2.0 * std::numbers::pi * Uniform(draw(next_draw + 1));
    next_draw += 2;
    spare = radius * std::sin(angle);
    have_spare = true;
    return radius * std::cos(angle);
  };
  auto apply_drift = [&](DriftScenario::Series series, int feature, double value, double mean,
                         double sigma) {
    for (int index : scenarios) {
      const DriftScenario& s = options_.drift[index];
      if (s.series != series ||
          (series == DriftScenario::Series::kFeature && s.feature != feature) ||
          since_start_us < s.after_ms * 1000) {
        continue;
      }
      if (s.change == DriftScenario::Change::kShift) {
        value += s.amount * sigma;
      } else {
        value = mean + (value - mean) * s.amount;
      }
    }
    return value;
  };

  auto sink = std::back_inserter(out);
  fmt::format_to(sink, "{{\"model_id\":\"model-{}\",\"event_time\":\"", model);
  AppendTimestampUs(out, event_time_us);
  out += "\",\"feature_vector\":[";
  const double* means = feature_mean_.data() + static_cast<size_t>(model) * features;
  const double* sigmas = feature_sigma_.data() + static_cast<size_t>(model) * features;
  for (int f = 0; f < features; ++f) {
    double value = means[f] + sigmas[f] * normal();
    if (!scenarios.empty()) {
      value = apply_drift(DriftScenario::Series::kFeature, f, value, means[f], sigmas[f]);
    }
    if (f > 0) out.push_back(',');
    fmt::format_to(sink, "{:.4f}", value);
  }
  double prediction = prediction_mean_[model] + prediction_sigma_[model] * normal();
  if (!scenarios.empty()) {
    prediction = apply_drift(DriftScenario::Series::kPrediction, 0, prediction,
                             prediction_mean_[model], prediction_sigma_[model]);
  }
  prediction = std::clamp(prediction, 0.0, 1.0);
  fmt::format_to(sink, "],\"prediction\":{:.4f},\"ground_truth\":", prediction);
  // Label draws sit after every normal draw a row can make, so they never depend on features.
  const uint64_t label_draw = 1 + 2 * (static_cast<uint64_t>(features) / 2 + 1);
  if (Uniform(draw(label_draw)) < options_.labels) {
    out += Uniform(draw(label_draw + 1)) < prediction ? "1.0}" : "0.0}";
  } else {
    out += "null}";
  }
}

void InferenceGenerator::AppendJsonLines(uint64_t first, uint64_t count, std::string& out) const {
  for (uint64_t row = first; row < first + count; ++row) {
    AppendRecord(row, out);
    out.push_back('\n');
  }
}

}  // namespace driftd
