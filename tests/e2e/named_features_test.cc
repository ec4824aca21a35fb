// End to end through the daemon, on inference logs shaped like the ones real serving systems
// write: {"model_id", "event_time", "segment": {"country"}, "features": {20 named features,
// 15 numeric and 5 categorical}, "prediction"}, JSON lines in files -> drift per (model,
// segment) -> the alerts stream on a file sink. The categorical features reach the drift
// stage's categorical seam; their detection is tested where it is built.
#include <filesystem>
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
// m + f and sd 1 + f / 10. From `shift_row` on, model-3's f07 in FR is 1.5 sd higher.
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
        if (model == 3 && country == 1 && k == 7 && row >= shift_row) value += 1.5 * sd;
        content += fmt::format(R"("f{:02}":{:.5f},)", k, value);
      }
      for (int k = 0; k < kCategorical; ++k) {
        content += fmt::format(R"("c{}":"{}"{})", k, devices[(rng() >> 7) % 3],
                               k + 1 < kCategorical ? "," : "");
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

TEST_CASE("a shift of one named feature in one segment of one model alerts naming the model, "
          "the segment and the feature; nothing else alerts",
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
  int raised = 0;
  for (const std::string& row : *rows) {
    INFO(row);
    alerting.insert(fmt::format("{} [{}] {}", JsonField(row, "model"), JsonField(row, "segment"),
                                JsonField(row, "series")));
    raised += JsonField(row, "level") == "ALERT";
  }
  CHECK(alerting == std::set<std::string>{"model-3 [segment.country=FR] features.f07"});
  CHECK(raised == 1);
}

}  // namespace
}  // namespace driftd::testing
