// End to end through the daemon, on inference logs shaped like the ones real serving systems
// write: {"model_id", "event_time", "segment": {"country"}, "features": {20 named features,
// 15 numeric and 5 categorical}, "prediction"}, JSON lines in files -> drift per (model,
// segment) -> the alerts stream on a file sink. Four changes, each in one segment of one
// model: a numeric feature's shift, a categorical feature's shares moving, a new category
// taking 10% of a feature, and a feature arriving null in 30% of records; every other series
// of every (model, segment) stays quiet.
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include <catch2/catch.hpp>

#include "tests/e2e/e2e_util.h"

namespace driftd::testing {
namespace {

constexpr int kModels = 8;
constexpr int kNumeric = 15;
constexpr int kCategorical = 5;
const char* const kCountries[] = {"DE", "FR", "US", "GB"};

// Rows of every (model, country) in turn, 1 ms apart; numeric feature f of model m has mean
// m + f and sd 1 + f / 10, each categorical one is ios, android or web with equal shares. From
// `shift_row` on: model-3's f07 in FR is 1.5 sd higher; model-5's c2 in DE is android in 60% of
// records and ios in 10%; model-1's c4 in GB is a category never seen before ("tv") in 10%;
// model-6's f03 in US is null in 30%.
void WriteNamedFeatureFiles(const std::filesystem::path& dir, int files, int rows_per_file,
                            int shift_row) {
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(17);
  std::normal_distribution<double> normal(0, 1);
  const char* const devices[] = {"ios", "android", "web"};
  int row = 0;
  for (int f = 0; f < files; ++f) {
    std::string content;
    for (int r = 0; r < rows_per_file; ++r, ++row) {
      const int model = row % kModels;
      const int country = (row / kModels) % 4;
      content += fmt::format(
          R"({{"model_id":"model-{}","event_time":{},"segment":{{"country":"{}"}},"features":{{)",
          model, 1'795'000'000'000 + row, kCountries[country]);
      for (int k = 0; k < kNumeric; ++k) {
        const double sd = 1 + k / 10.0;
        double value = model + k + sd * normal(rng);
        const bool after = row >= shift_row;
        if (model == 3 && country == 1 && k == 7 && after) value += 1.5 * sd;
        if (model == 6 && country == 2 && k == 3 && after && (rng() >> 11) % 10 < 3) {
          content += fmt::format(R"("f{:02}":null,)", k);
          continue;
        }
        content += fmt::format(R"("f{:02}":{:.5f},)", k, value);
      }
      for (int k = 0; k < kCategorical; ++k) {
        const uint64_t draw = (rng() >> 11) % 100;
        std::string_view device = devices[draw % 3];
        if (row >= shift_row && model == 5 && country == 0 && k == 2) {
          device = draw < 60 ? "android" : draw < 70 ? "ios" : "web";
        }
        if (row >= shift_row && model == 1 && country == 3 && k == 4 && draw < 10) device = "tv";
        content += fmt::format(R"("c{}":"{}"{})", k, device, k + 1 < kCategorical ? "," : "");
      }
      content += fmt::format(R"(}},"prediction":{:.4f}}})", 0.5 + 0.1 * normal(rng));
      content += '\n';
    }
    WriteFile(dir / fmt::format("input-{:04}.jsonl", f), content);
  }
}

std::string FeaturesType() {
  std::string type = "struct<";
  for (int k = 0; k < kNumeric; ++k) type += fmt::format("f{:02}:double, ", k);
  for (int k = 0; k < kCategorical; ++k) {
    type += fmt::format("c{}:string{}", k, k + 1 < kCategorical ? ", " : ">");
  }
  return type;
}

TEST_CASE("named, nested and categorical features: a numeric shift, categories moving, a new "
          "category and a feature going null, each in one segment of one model, alert naming the "
          "model, the segment, the series and the categories, and nothing else alerts",
          "[e2e][drift][segments]") {
  TempDir dir;
  // 8 models x 4 countries: 4,000 rows each, the shift after the first 2,000 of each.
  WriteNamedFeatureFiles(dir / "input", 8, 16'000, 64'000);
  const std::string pipeline = dir / "pipeline.yaml";
  WriteFile(pipeline, fmt::format(R"(name: named-features
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - name: segment
    type: struct<country:string>
  - name: features
    type: "{features}"
  - {{name: prediction, type: double}}
source:
  format: file
  options: {{path: {input}, maxFilesPerTrigger: 2}}
query:
  groupBy: [model_id, segment.country]
  aggregates: [count]
drift:
  series: [features, prediction]
  baseline: {{type: warmup, records: 1000}}
  windowRecords: 500
sinks:
  - name: alerts
    format: file
    stream: alerts
    options: {{path: {alerts}}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                                  fmt::arg("features", FeaturesType()),
                                  fmt::arg("input", dir / "input"),
                                  fmt::arg("alerts", dir / "alerts"),
                                  fmt::arg("checkpoint", dir / "checkpoint")));
  RunResult run = RunDriftd({"run", pipeline, "--quiet-progress"}, std::chrono::seconds(240));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto rows = ReadCommittedFileSinkRows(dir / "alerts");
  REQUIRE(rows);
  std::set<std::string> alerting;
  std::map<std::string, std::string> alert_of;  // series -> its ALERT row
  for (const std::string& row : *rows) {
    INFO(row);
    alerting.insert(fmt::format("{} [{}] {} {}", JsonField(row, "model"),
                                JsonField(row, "segment"), JsonField(row, "series"),
                                JsonField(row, "kind")));
    if (JsonField(row, "level") == "ALERT") {
      CHECK(alert_of.emplace(JsonField(row, "series"), row).second);  // one ALERT a series
    }
  }
  CHECK(alerting == std::set<std::string>{
                        "model-3 [segment.country=FR] features.f07 drift",
                        "model-5 [segment.country=DE] features.c2 drift",
                        "model-1 [segment.country=GB] features.c4 drift",
                        "model-6 [segment.country=US] features.f03:missing data_quality"});
  CHECK(alert_of.size() == 4);
  // The categories that moved, and the new one, are named with their shares.
  CHECK_THAT(alert_of["features.c2"], Catch::Contains(R"("top_categories":[{"category":")"));
  CHECK_THAT(alert_of["features.c2"], Catch::Contains(R"({"category":"android")"));
  CHECK_THAT(alert_of["features.c2"], Catch::Contains(R"({"category":"ios")"));
  CHECK_THAT(alert_of["features.c4"], Catch::Contains(R"("new_categories":[{"category":"tv")"));
  CHECK(JsonField(alert_of["features.f03:missing"], "detector") == "missing_rate");
}

}  // namespace
}  // namespace driftd::testing
