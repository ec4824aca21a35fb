#include "connectors/inference_generator.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <simdjson.h>
#include <catch2/catch.hpp>

namespace driftd {
namespace {

// 2026-11-29T10:15:02.123Z
constexpr int64_t kStartMs = 1795947302123;

struct Row {
  std::string model;
  std::string event_time;
  std::vector<double> features;
  double prediction = 0;
  std::optional<double> ground_truth;
};

Row ParseRow(const std::string& line) {
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  REQUIRE(parser.parse(line).get_object().get(object) == simdjson::SUCCESS);
  Row row;
  std::string_view text;
  REQUIRE(object["model_id"].get_string().get(text) == simdjson::SUCCESS);
  row.model = std::string(text);
  REQUIRE(object["event_time"].get_string().get(text) == simdjson::SUCCESS);
  row.event_time = std::string(text);
  simdjson::dom::array features;
  REQUIRE(object["feature_vector"].get_array().get(features) == simdjson::SUCCESS);
  for (auto value : features) row.features.push_back(value.get_double().value());
  REQUIRE(object["prediction"].get_double().get(row.prediction) == simdjson::SUCCESS);
  simdjson::dom::element label = object["ground_truth"].value();
  if (!label.is_null()) row.ground_truth = label.get_double().value();
  return row;
}

std::vector<std::string> Lines(const InferenceGenerator& generator, uint64_t first,
                               uint64_t count) {
  std::string text;
  generator.AppendJsonLines(first, count, text);
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

InferenceGenerator Make(InferenceGeneratorOptions options) {
  auto generator = InferenceGenerator::Create(std::move(options));
  REQUIRE(generator);
  return std::move(*generator);
}

InferenceGeneratorOptions Options(std::string_view drift = "", int64_t rows_per_second = 100) {
  InferenceGeneratorOptions options;
  options.start_time_ms = kStartMs;
  options.rows_per_second = rows_per_second;
  auto scenarios = ParseDriftScenarios(drift);
  REQUIRE(scenarios);
  options.drift = *scenarios;
  return options;
}

struct Moments {
  double mean = 0;
  double stddev = 0;
  int64_t n = 0;
};

template <typename Pick>
Moments MomentsOf(const std::vector<Row>& rows, Pick pick) {
  Moments m;
  double sum = 0;
  double sum_sq = 0;
  for (const Row& row : rows) {
    std::optional<double> value = pick(row);
    if (!value) continue;
    sum += *value;
    sum_sq += *value * *value;
    ++m.n;
  }
  REQUIRE(m.n > 1);
  m.mean = sum / m.n;
  m.stddev = std::sqrt((sum_sq - sum * sum / m.n) / (m.n - 1));
  return m;
}

TEST_CASE("the same seed yields byte-identical inference logs and another seed does not",
          "[rate][generator]") {
  InferenceGeneratorOptions options = Options();
  std::string first;
  std::string second;
  Make(options).AppendJsonLines(0, 2000, first);
  Make(options).AppendJsonLines(0, 2000, second);
  CHECK(first == second);

  options.seed = 43;
  std::string other;
  Make(options).AppendJsonLines(0, 2000, other);
  CHECK(other != first);
}

TEST_CASE("a row is the same whether generated alone or within a range", "[rate][generator]") {
  InferenceGenerator generator = Make(Options("model-3 feature 0 shifts by 1.5 sigma after 5 s"));
  std::vector<std::string> lines = Lines(generator, 0, 1000);
  for (uint64_t row : {0u, 1u, 499u, 500u, 999u}) {
    std::string alone;
    generator.AppendRecord(row, alone);
    CHECK(alone == lines[row]);
  }
  // A later range starts where the earlier one would have continued.
  CHECK(Lines(generator, 700, 300) == std::vector<std::string>(lines.begin() + 700, lines.end()));
}

TEST_CASE("inference records carry the documented fields and event times follow the row rate",
          "[rate][generator]") {
  InferenceGenerator generator = Make(Options("", 10));
  std::vector<std::string> lines = Lines(generator, 0, 400);
  Row row0 = ParseRow(lines[0]);
  CHECK(row0.event_time == "2026-11-29T10:15:02.123Z");
  CHECK(ParseRow(lines[10]).event_time == "2026-11-29T10:15:03.123Z");
  CHECK(ParseRow(lines[15]).event_time == "2026-11-29T10:15:03.623Z");
  std::set<std::string> models;
  for (const std::string& line : lines) {
    Row row = ParseRow(line);
    models.insert(row.model);
    CHECK(row.features.size() == 8);
    CHECK(row.prediction >= 0.0);
    CHECK(row.prediction <= 1.0);
    REQUIRE(row.ground_truth.has_value());
    CHECK((*row.ground_truth == 0.0 || *row.ground_truth == 1.0));
  }
  CHECK(models == std::set<std::string>{"model-0", "model-1", "model-2", "model-3", "model-4",
                                        "model-5", "model-6", "model-7"});
}

TEST_CASE("the labels option sets the fraction of rows with ground truth", "[rate][generator]") {
  InferenceGeneratorOptions options = Options();
  options.labels = 0.25;
  InferenceGenerator generator = Make(options);
  int labelled = 0;
  const int rows = 8000;
  for (const std::string& line : Lines(generator, 0, rows)) {
    if (ParseRow(line).ground_truth) ++labelled;
  }
  CHECK(labelled / static_cast<double>(rows) == Approx(0.25).margin(0.03));
}

TEST_CASE("drift scenarios in the documented forms parse", "[rate][generator]") {
  auto shift = ParseDriftScenario("model-3 feature 0 shifts by 1.5 sigma after 60 s");
  REQUIRE(shift);
  CHECK(shift->model == 3);
  CHECK(shift->series == DriftScenario::Series::kFeature);
  CHECK(shift->feature == 0);
  CHECK(shift->change == DriftScenario::Change::kShift);
  CHECK(shift->amount == 1.5);
  CHECK(shift->after_ms == 60'000);

  auto prediction = ParseDriftScenario("  model-1 prediction shifts by -1 sigma after 2 minutes ");
  REQUIRE(prediction);
  CHECK(prediction->model == 1);
  CHECK(prediction->series == DriftScenario::Series::kPrediction);
  CHECK(prediction->amount == -1);
  CHECK(prediction->after_ms == 120'000);

  auto scale = ParseDriftScenario("model-2 feature 4 scales by 2 after 10s");
  REQUIRE(scale);
  CHECK(scale->feature == 4);
  CHECK(scale->change == DriftScenario::Change::kScale);
  CHECK(scale->amount == 2);
  CHECK(scale->after_ms == 10'000);

  auto list = ParseDriftScenarios(
      "model-3 feature 0 shifts by 1.5 sigma after 60 s; model-1 prediction shifts by 1 sigma "
      "after 30 s;\nmodel-2 feature 4 scales by 2 after 10 s;");
  REQUIRE(list);
  REQUIRE(list->size() == 3);
  CHECK((*list)[2].text == "model-2 feature 4 scales by 2 after 10 s");
  auto empty = ParseDriftScenarios(" ; ");
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("malformed drift scenarios are rejected with the text quoted", "[rate][generator]") {
  const char* bad[] = {
      "",
      "model-3",
      "modle-3 feature 0 shifts by 1.5 sigma after 60 s",
      "model-x feature 0 shifts by 1.5 sigma after 60 s",
      "model-3 feature shifts by 1.5 sigma after 60 s",
      "model-3 feature -1 shifts by 1.5 sigma after 60 s",
      "model-3 features 0 shifts by 1.5 sigma after 60 s",
      "model-3 feature 0 moves by 1.5 sigma after 60 s",
      "model-3 feature 0 shifts 1.5 sigma after 60 s",
      "model-3 feature 0 shifts by lots sigma after 60 s",
      "model-3 feature 0 shifts by 1.5 after 60 s",
      "model-3 feature 0 shifts by 1.5 sigma",
      "model-3 feature 0 shifts by 1.5 sigma after",
      "model-3 feature 0 shifts by 1.5 sigma after 60 parsecs",
      "model-3 feature 0 shifts by 1.5 sigma after 60 s and more",
      "model-3 feature 0 scales by 0 after 60 s",
      "model-3 feature 0 scales by -2 after 60 s",
      "model-3 prediction 0 shifts by 1 sigma after 60 s",
  };
  for (const char* text : bad) {
    INFO(text);
    auto scenario = ParseDriftScenario(text);
    REQUIRE_FALSE(scenario);
    CHECK(scenario.error().code() == ErrorCode::kConfig);
    CHECK_THAT(scenario.error().message(), Catch::Contains("drift scenario"));
  }
  auto list = ParseDriftScenarios("model-1 prediction shifts by 1 sigma after 30 s; model-2 oops");
  REQUIRE_FALSE(list);
  CHECK_THAT(list.error().message(), Catch::Contains("model-2 oops"));
}

TEST_CASE("scenarios naming a model or feature that does not exist are rejected",
          "[rate][generator]") {
  auto model = InferenceGenerator::Create(Options("model-8 feature 0 shifts by 1 sigma after 1 s"));
  REQUIRE_FALSE(model);
  CHECK_THAT(model.error().message(), Catch::Contains("no model-8"));
  auto feature = InferenceGenerator::Create(Options("model-0 feature 8 scales by 2 after 1 s"));
  REQUIRE_FALSE(feature);
  CHECK_THAT(feature.error().message(), Catch::Contains("no feature 8"));
}

TEST_CASE("a feature shift changes exactly the rows at or after the stated event time",
          "[rate][generator][drift]") {
  // 100 rows/s: "after 60 s" starts at row 6000.
  InferenceGenerator clean = Make(Options());
  InferenceGenerator drifted = Make(Options("model-3 feature 0 shifts by 1.5 sigma after 60 s"));
  const double sigma = clean.FeatureSigma(3, 0);
  std::vector<std::string> before = Lines(clean, 0, 12000);
  std::vector<std::string> after = Lines(drifted, 0, 12000);
  int shifted_rows = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    if (i < 6000 || clean.ModelOf(i) != 3) {
      REQUIRE(before[i] == after[i]);
      continue;
    }
    Row a = ParseRow(before[i]);
    Row b = ParseRow(after[i]);
    REQUIRE(b.features[0] - a.features[0] == Approx(1.5 * sigma).margin(2e-4));
    for (size_t f = 1; f < a.features.size(); ++f) REQUIRE(b.features[f] == a.features[f]);
    ++shifted_rows;
  }
  CHECK(shifted_rows > 500);
}

TEST_CASE("drift is visible in the statistics of generated data after the stated time",
          "[rate][generator][drift]") {
  InferenceGenerator generator = Make(Options(
      "model-1 prediction shifts by 1 sigma after 30 s; model-2 feature 4 scales by 2 after 10 s"));
  std::vector<Row> rows;
  for (const std::string& line : Lines(generator, 0, 16000)) rows.push_back(ParseRow(line));
  auto of = [&](const std::string& model, bool late, int64_t boundary_row) {
    std::vector<Row> out;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].model == model && (static_cast<int64_t>(i) >= boundary_row) == late) {
        out.push_back(rows[i]);
      }
    }
    return out;
  };
  auto prediction = [](const Row& r) { return std::optional<double>(r.prediction); };
  auto feature4 = [](const Row& r) { return std::optional<double>(r.features[4]); };

  Moments early_prediction = MomentsOf(of("model-1", false, 3000), prediction);
  Moments late_prediction = MomentsOf(of("model-1", true, 3000), prediction);
  CHECK(early_prediction.mean == Approx(generator.PredictionMean(1)).margin(0.01));
  CHECK(late_prediction.mean - early_prediction.mean ==
        Approx(generator.PredictionSigma(1)).margin(0.25 * generator.PredictionSigma(1)));

  Moments early_spread = MomentsOf(of("model-2", false, 1000), feature4);
  Moments late_spread = MomentsOf(of("model-2", true, 1000), feature4);
  CHECK(early_spread.stddev == Approx(generator.FeatureSigma(2, 4)).epsilon(0.15));
  CHECK(late_spread.stddev / generator.FeatureSigma(2, 4) == Approx(2.0).epsilon(0.1));
  CHECK(late_spread.mean == Approx(generator.FeatureMean(2, 4)).margin(0.2));

  // A model without scenarios keeps its distribution.
  Moments untouched = MomentsOf(of("model-5", true, 3000), prediction);
  CHECK(untouched.mean == Approx(generator.PredictionMean(5)).margin(0.01));
}

}  // namespace
}  // namespace driftd
