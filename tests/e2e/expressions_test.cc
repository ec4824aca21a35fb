// query.where and derived columns through the daemon: a filter that drops shadow traffic and a
// derived abs_error series that drift watches and alerts on, read from JSON-lines files; and
// `validate` naming the line and column of a misspelt function and of a type mismatch.
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/window_test_util.h"

namespace driftd::testing {
namespace {

constexpr int kModels = 4;
constexpr int kFiles = 8;
constexpr int kRowsPerFile = 10'000;
constexpr uint64_t kChangeRow = 30'000;

InferenceGenerator Generator() {
  InferenceGeneratorOptions options;
  options.models = kModels;
  options.features = 8;
  options.seed = 42;
  options.rows_per_second = 1000;
  options.start_time_ms = 1'795'000'000'000;
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  return std::move(*generator);
}

bool IsShadow(uint64_t row) { return SplitMix64(row ^ 0x5eed) % 4 == 0; }

// Flips a record's 0/1 label.
void InvertLabel(std::string& record) {
  const size_t at = record.rfind("\"ground_truth\":");
  REQUIRE(at != std::string::npos);
  const std::string label = record.substr(at + 15);
  record.resize(at + 15);
  record += label == "1.0}" ? "0.0}" : "1.0}";
}

struct Input {
  int target = 0;                      // the model whose served predictions go wrong
  std::map<std::string, int64_t> served;  // non-shadow records per model
  int64_t shadow = 0;
};

// A quarter of the records are a shadow deployment (model_version "shadow"). After kChangeRow
// the target model's served labels stop agreeing with its predictions (80% inverted), and so
// do every shadow record's of every other model: if shadow traffic leaked into the series,
// those models would alert too.
Input WriteInput(const std::filesystem::path& dir) {
  InferenceGenerator generator = Generator();
  Input input;
  input.target = 1;
  std::filesystem::create_directories(dir);
  uint64_t row = 0;
  for (int f = 0; f < kFiles; ++f) {
    std::string content;
    for (int r = 0; r < kRowsPerFile; ++r, ++row) {
      std::string record;
      generator.AppendRecord(row, record);
      const int model = static_cast<int>(generator.ModelOf(row));
      const bool shadow = IsShadow(row);
      const bool changed = row >= kChangeRow && SplitMix64(row) % 10 < 8;
      if (changed && (shadow ? model != input.target : model == input.target)) {
        InvertLabel(record);
      }
      record.pop_back();
      record += fmt::format(R"(,"model_version":"{}"}})", shadow ? "shadow" : "v7");
      if (shadow) {
        ++input.shadow;
      } else {
        ++input.served[fmt::format("model-{}", model)];
      }
      content += record;
      content += '\n';
    }
    WriteFile(dir / fmt::format("input-{:04}.jsonl", f), content);
  }
  return input;
}

std::string Pipeline(const TempDir& dir, std::string_view query) {
  return fmt::format(R"(name: expressions-e2e
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: model_version, type: string}}
  - {{name: event_time, type: timestamp}}
  - {{name: feature_vector, type: array<double>}}
  - {{name: prediction, type: double}}
  - {{name: ground_truth, type: double}}
source:
  format: file
  options:
    path: {input}
    maxFilesPerTrigger: 2
query:
{query}
drift:
  series: [abs_error]
sinks:
  - {{name: stats, format: file, stream: stats, outputMode: update, options: {{path: {stats}}}}}
  - {{name: alerts, format: file, stream: alerts, options: {{path: {alerts}}}}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                     fmt::arg("input", dir / "input"), fmt::arg("query", query),
                     fmt::arg("stats", dir / "stats"), fmt::arg("alerts", dir / "alerts"),
                     fmt::arg("checkpoint", dir / "checkpoint"));
}

TEST_CASE("a filter drops shadow traffic and a derived abs_error series alerts on the one "
          "model whose errors grew",
          "[e2e][expr]") {
  TempDir dir;
  const Input input = WriteInput(dir / "input");
  const std::string path = dir / "pipeline.yaml";
  WriteFile(path, Pipeline(dir, R"(  where: model_version != 'shadow'
  select:
    - abs(prediction - ground_truth) AS abs_error
  groupBy: [model_id]
  aggregates: [count, mean(abs_error)])"));
  RunResult run = RunDriftd({"run", path}, std::chrono::seconds(240));
  INFO(run.output.substr(0, 4000));
  REQUIRE(run.exit_code == 0);

  // Every shadow record was counted as filtered, none as malformed.
  int64_t filtered = 0;
  int64_t malformed = 0;
  int64_t read = 0;
  for (const std::string& record : ProgressRecords(run.output)) {
    simdjson::dom::parser parser;
    simdjson::dom::element root = parser.parse(record);
    read += int64_t(root["numInputRows"]);
    filtered += int64_t(root["filter"]["numRowsFiltered"]);
    malformed += int64_t(root["malformed"]["numRows"]);
  }
  CHECK(read == kFiles * kRowsPerFile);
  CHECK(filtered == input.shadow);
  CHECK(malformed == 0);

  // The stats count only served records.
  std::map<std::string, int64_t> counted;
  for (const std::string& row : CommittedRows(dir / "stats")) {
    counted[JsonField(row, "model_id")] = int64_t(JsonNumber(row, "count"));
  }
  CHECK(counted == input.served);

  // The derived series alerts for the target model only.
  auto rows = ReadCommittedFileSinkRows(dir / "alerts");
  REQUIRE(rows);
  std::set<std::pair<std::string, std::string>> alerted;
  std::string all;
  for (const std::string& row : *rows) {
    all += row + "\n";
    if (JsonField(row, "level") == "ALERT") {
      alerted.insert({JsonField(row, "model"), JsonField(row, "series")});
    }
  }
  INFO(all);
  const std::string target = fmt::format("model-{}", input.target);
  CHECK(alerted.count({target, "abs_error"}) == 1);
  // The labels default to prediction and ground_truth, so the error rate may alert too; but
  // only for the target: the other models' changed records were all shadow traffic.
  for (const auto& [model, series] : alerted) CHECK(model == target);
}

TEST_CASE("validate names the line and column of a misspelt function and of a type mismatch",
          "[e2e][expr]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "input");
  const std::string path = dir / "pipeline.yaml";
  // Line 15 is the where clause, line 17 the select item (query: is line 14).
  WriteFile(path, Pipeline(dir, R"(  where: model_version != 'shadow' AND prediction > '0.5'
  select:
    - asb(prediction - ground_truth) AS abs_error
  groupBy: [model_id]
  aggregates: [count])"));
  RunResult run = RunDriftd({"validate", path});
  INFO(run.output);
  CHECK(run.exit_code == 78);
  CHECK(run.output.find(
            "pipeline.yaml:17:7: query.select[0]: select item 'asb(prediction - ground_truth) AS "
            "abs_error': unknown function 'asb'; did you mean 'abs'?") != std::string::npos);
  CHECK(run.output.find("pipeline.yaml:15:53: query.where: condition") != std::string::npos);
  CHECK(run.output.find("type mismatch: '>' cannot compare double with string") !=
        std::string::npos);
}

}  // namespace
}  // namespace driftd::testing
