// End-to-end drift detection through the daemon: generated inference logs (the rate source's
// inference mode, or JSON-lines files) -> drift stage -> the `alerts` stream on a file sink.
// Each test states what a user watching the alert file would see.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <catch2/catch.hpp>

#include "tests/e2e/e2e_util.h"

namespace driftd::testing {
namespace {

constexpr int64_t kStartTimeMs = 1'795'000'000'000;
constexpr int64_t kRowsPerSecond = 1000;  // row r has event time start + r ms
constexpr int kFeatures = 8;

struct DriftPipeline {
  int models = 8;
  int64_t rows = 0;  // rate source: total rows
  int64_t rows_per_batch = 100'000;
  uint64_t seed = 42;
  std::string scenarios;  // rate source `drift` option
  /// Extra lines of the drift section (indented two spaces).
  std::string drift_extra;
  /// Source block instead of the rate source (file source tests).
  std::string source;
  std::string query = "groupBy: [model_id]\n  aggregates: [count]";
};

std::string PipelineYaml(const TempDir& dir, const DriftPipeline& p) {
  std::string source = p.source;
  if (source.empty()) {
    source = fmt::format(R"(source:
  format: rate
  options:
    mode: inference
    realTime: false
    totalRows: {}
    maxRowsPerTrigger: {}
    rowsPerSecond: {}
    startTimeMs: {}
    models: {}
    features: {}
    seed: {}
    drift: "{}")",
                         p.rows, p.rows_per_batch, kRowsPerSecond, kStartTimeMs, p.models,
                         kFeatures, p.seed, p.scenarios);
  }
  return fmt::format(R"(name: drift-e2e
{schema}
{source}
query:
  {query}
drift:
  series: [feature_vector, prediction]
{drift_extra}
sinks:
  - name: alerts
    format: file
    stream: alerts
    options: {{path: {alerts}}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                     fmt::arg("schema", kInferenceSchema), fmt::arg("source", source),
                     fmt::arg("query", p.query), fmt::arg("drift_extra", p.drift_extra),
                     fmt::arg("alerts", dir / "alerts"),
                     fmt::arg("checkpoint", dir / "checkpoint"));
}

std::string WriteDriftPipeline(const TempDir& dir, const DriftPipeline& p) {
  std::string path = dir / "pipeline.yaml";
  WriteFile(path, PipelineYaml(dir, p));
  return path;
}

/// The fields of an alert row the tests look at.
struct Alert {
  std::string level;
  std::string model;
  std::string series;
  std::string detector;
  int64_t window_end_record = 0;
  std::map<std::string, std::string> detector_levels;  // detector -> level of its reading
  std::string json;
};

/// Level of one detector's reading in an event, "<none>" if the event has no such reading.
std::string ReadingLevel(const Alert& alert, const std::string& detector) {
  auto it = alert.detector_levels.find(detector);
  return it == alert.detector_levels.end() ? "<none>" : it->second;
}

std::vector<Alert> ParseAlerts(const std::vector<std::string>& rows) {
  std::vector<Alert> alerts;
  simdjson::dom::parser parser;
  for (const std::string& row : rows) {
    simdjson::dom::element root = parser.parse(row);
    Alert a;
    a.level = std::string(root["level"].get_string().value());
    a.model = std::string(root["model"].get_string().value());
    a.series = std::string(root["series"].get_string().value());
    a.detector = std::string(root["detector"].get_string().value());
    a.window_end_record = int64_t(root["window"]["end_record"]);
    simdjson::dom::array detectors;
    if (root["detectors"].get_array().get(detectors) == simdjson::SUCCESS) {
      for (simdjson::dom::element d : detectors) {
        a.detector_levels[std::string(d["detector"].get_string().value())] =
            std::string(d["level"].get_string().value());
      }
    }
    a.json = row;
    alerts.push_back(std::move(a));
  }
  return alerts;
}

std::vector<Alert> RunAndReadAlerts(const TempDir& dir, const DriftPipeline& p) {
  RunResult run =
      RunDriftd({"run", WriteDriftPipeline(dir, p), "--quiet-progress"}, std::chrono::seconds(240));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto rows = ReadCommittedFileSinkRows(dir / "alerts");
  // A run without any alert may leave no committed file at all: that is "no alert line".
  return rows ? ParseAlerts(*rows) : std::vector<Alert>{};
}

std::string Describe(const std::vector<Alert>& alerts) {
  std::string out;
  for (const Alert& a : alerts) out += a.json + "\n";
  return out;
}

std::set<std::pair<std::string, std::string>> SeriesWithEvents(const std::vector<Alert>& alerts) {
  std::set<std::pair<std::string, std::string>> out;
  for (const Alert& a : alerts) out.insert({a.model, a.series});
  return out;
}

/// Values of `model`'s series before event time `after_ms` (since the start): the series
/// value index at which a scenario switches on.
int64_t ValuesBefore(const InferenceGenerator& generator, int model, int64_t after_ms) {
  int64_t count = 0;
  const uint64_t rows = static_cast<uint64_t>(after_ms * kRowsPerSecond / 1000);
  for (uint64_t row = 0; row < rows; ++row) count += generator.ModelOf(row) == model ? 1 : 0;
  return count;
}

InferenceGenerator Generator(int models, uint64_t seed) {
  InferenceGeneratorOptions options;
  options.models = models;
  options.features = kFeatures;
  options.seed = seed;
  options.rows_per_second = kRowsPerSecond;
  options.start_time_ms = kStartTimeMs;
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  return std::move(*generator);
}

TEST_CASE("stationary inference logs of 8 models x 8 features raise no alert line at all",
          "[e2e][drift]") {
  TempDir dir;
  DriftPipeline p;
  p.rows = 8 * 100'000;  // 100k records per model, 10 series each (with the error series)
  p.drift_extra = "  predictionColumn: prediction\n  labelColumn: ground_truth";
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO(Describe(alerts));
  CHECK(alerts.empty());
}

TEST_CASE(
    "a 0.5 sigma shift on one feature gives exactly one ALERT there and RESOLVED after "
    "it reverts",
    "[e2e][drift]") {
  TempDir dir;
  DriftPipeline p;
  p.rows = 8 * 40'000;
  // On at 100 s of event time (row 100'000), off again at 200 s.
  p.scenarios =
      "model-3 feature 2 shifts by 0.5 sigma after 100 s; "
      "model-3 feature 2 shifts by -0.5 sigma after 200 s";
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO(Describe(alerts));

  CHECK(SeriesWithEvents(alerts) ==
        std::set<std::pair<std::string, std::string>>{{"model-3", "feature_vector[2]"}});
  std::vector<Alert> raised;
  std::vector<Alert> resolved;
  for (const Alert& a : alerts) {
    if (a.level == "ALERT") raised.push_back(a);
    if (a.level == "RESOLVED") resolved.push_back(a);
  }
  REQUIRE(raised.size() == 1);
  REQUIRE(resolved.size() == 1);

  // The stated bounds (engine/drift/README.md): the CUSUM ALERTs a 0.5 sigma shift within 500
  // values of the series, and the change resolves within 2000 values of its end.
  InferenceGenerator generator = Generator(8, 42);
  const int64_t change = ValuesBefore(generator, 3, 100'000);
  const int64_t revert = ValuesBefore(generator, 3, 200'000);
  CHECK(raised[0].window_end_record > change);
  CHECK(raised[0].window_end_record <= change + 500);
  CHECK(resolved[0].window_end_record > revert);
  CHECK(resolved[0].window_end_record <= revert + 2000);
  // A location detector raised it, its own reading at ALERT level, and the RESOLVED names it.
  CHECK((raised[0].detector == "cusum" || raised[0].detector == "mean_shift"));
  CHECK(ReadingLevel(raised[0], raised[0].detector) == "ALERT");
  CHECK(resolved[0].detector == raised[0].detector);
}

TEST_CASE("a variance-only change is found by the spread detectors, not by mean shift",
          "[e2e][drift]") {
  TempDir dir;
  DriftPipeline p;
  p.rows = 8 * 25'000;
  p.scenarios = "model-5 feature 1 scales by 2 after 100 s";
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO(Describe(alerts));

  CHECK(SeriesWithEvents(alerts) ==
        std::set<std::pair<std::string, std::string>>{{"model-5", "feature_vector[1]"}});
  int raised = 0;
  for (const Alert& a : alerts) {
    if (a.level != "ALERT") continue;
    ++raised;
    // A spread or shape detector: the CUSUM standardizes by the wider spread, so a change of
    // spread alone does not read as a shift.
    CHECK((a.detector == "stddev_ratio" || a.detector == "psi" || a.detector == "js" ||
           a.detector == "ks"));
    CHECK(ReadingLevel(a, "stddev_ratio") == "ALERT");
    CHECK(ReadingLevel(a, "mean_shift") == "OK");
  }
  CHECK(raised == 1);
}

TEST_CASE("a shift of the prediction score alerts on the prediction series only", "[e2e][drift]") {
  TempDir dir;
  DriftPipeline p;
  p.rows = 8 * 25'000;
  p.scenarios = "model-2 prediction shifts by 1 sigma after 100 s";
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO(Describe(alerts));

  // The generator draws labels from the (shifted) score, so the error rate moves too: with
  // ground_truth in the schema the error series is watched without being configured.
  const auto with_events = SeriesWithEvents(alerts);
  CHECK(with_events.count({"model-2", "prediction"}) == 1);
  for (const auto& [model, series] : with_events) {
    CHECK(model == "model-2");
    CHECK((series == "prediction" || series == "error"));
  }
  CHECK(std::count_if(alerts.begin(), alerts.end(), [](const Alert& a) {
          return a.level == "ALERT" && a.series == "prediction";
        }) == 1);
}

// Concept drift: inputs and predictions stay as they were, the labels stop agreeing.
TEST_CASE("labels that stop agreeing with predictions raise an error-rate ALERT", "[e2e][drift]") {
  TempDir dir;
  const int models = 4;
  const int files = 8;
  const int rows_per_file = 10'000;
  const uint64_t change_row = 30'000;
  InferenceGenerator generator = Generator(models, 42);
  // The model whose predictions sit furthest from 0.5 has the most room for its error rate
  // to rise.
  int target = 0;
  for (int m = 1; m < models; ++m) {
    if (std::abs(generator.PredictionMean(m) - 0.5) >
        std::abs(generator.PredictionMean(target) - 0.5)) {
      target = m;
    }
  }
  std::filesystem::create_directories(dir / "input");
  uint64_t row = 0;
  for (int f = 0; f < files; ++f) {
    std::string content;
    for (int r = 0; r < rows_per_file; ++r, ++row) {
      std::string record;
      generator.AppendRecord(row, record);
      // After the change, 80% of the target model's labels are inverted.
      if (row >= change_row && generator.ModelOf(row) == target && SplitMix64(row) % 10 < 8) {
        const size_t at = record.rfind("\"ground_truth\":");
        REQUIRE(at != std::string::npos);
        const std::string label = record.substr(at + 15);
        record.resize(at + 15);
        record += label == "1.0}" ? "0.0}" : "1.0}";
      }
      content += record;
      content += '\n';
    }
    WriteFile(std::filesystem::path(dir / "input") / fmt::format("input-{:04}.jsonl", f), content);
  }
  DriftPipeline p;
  p.source = fmt::format(R"(source:
  format: file
  options:
    path: {}
    maxFilesPerTrigger: 2)",
                         dir / "input");
  p.drift_extra = "  predictionColumn: prediction\n  labelColumn: ground_truth";
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO("target model-" << target << "\n" << Describe(alerts));

  const std::string model = fmt::format("model-{}", target);
  CHECK(SeriesWithEvents(alerts) ==
        std::set<std::pair<std::string, std::string>>{{model, "error"}});
  int raised = 0;
  for (const Alert& a : alerts) {
    if (a.level == "ALERT") {
      ++raised;
      CHECK(a.detector == "error_rate");
    }
  }
  CHECK(raised == 1);
}

TEST_CASE("a drift pipeline killed with SIGKILL 20+ times writes the alerts of a crash-free run",
          "[e2e][drift][crash]") {
  TempDir reference_dir;
  TempDir crash_dir;
  DriftPipeline p;
  p.rows = 8 * 12'000;
  p.rows_per_batch = 1500;  // 64 batches
  // Short warmups, so that the changes (from 30 s, 3750 records of a model) are watched.
  p.drift_extra = "  baseline: {type: warmup, records: 1000}";
  p.scenarios =
      "model-1 feature 4 shifts by 1 sigma after 30 s; "
      "model-1 feature 4 shifts by -1 sigma after 60 s; "
      "model-6 prediction scales by 2 after 40 s";
  std::vector<Alert> reference = RunAndReadAlerts(reference_dir, p);
  REQUIRE(reference.size() >= 3);

  const std::string pipeline = WriteDriftPipeline(crash_dir, p);
  auto batches = [&] {
    auto manifest = ReadFileSinkManifest(crash_dir / "alerts");
    return manifest ? static_cast<int64_t>(manifest->size()) : 0;
  };
  const int kills = KillRepeatedly({DriftdBinary(), "run", pipeline, "--quiet-progress"},
                                   crash_dir / "log.txt", batches, [] { return false; });
  INFO("kills " << kills);
  CHECK(kills >= 20);
  RunResult finish = RunDriftd({"run", pipeline, "--quiet-progress"});
  INFO(finish.output);
  REQUIRE(finish.exit_code == 0);

  std::vector<std::string> expected;
  for (const Alert& a : reference) expected.push_back(a.json);
  const std::vector<std::string> actual = CommittedRows(crash_dir / "alerts");
  CHECK(actual == expected);
  std::set<std::string> ids;
  for (const std::string& row : actual) ids.insert(JsonField(row, "alert_id"));
  CHECK(ids.size() == actual.size());
}

TEST_CASE(
    "with a windowed query, drift is evaluated per event-time window against the "
    "previous windows",
    "[e2e][drift][window]") {
  TempDir dir;
  DriftPipeline p;
  p.rows = 8 * 15'000;  // 120 s of event time, 1250 values per series and 10 s window
  p.rows_per_batch = 7'000;
  p.scenarios = "model-4 feature 6 shifts by 1 sigma after 60 s";
  p.query =
      "groupBy: [model_id]\n"
      "  window: {column: event_time, size: 10 seconds}\n"
      "  watermark: {column: event_time, delay: 1 second}\n"
      "  aggregates: [count]";
  p.drift_extra = "  baseline: {type: trailing, windows: 3}";
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO(Describe(alerts));

  CHECK(SeriesWithEvents(alerts) ==
        std::set<std::pair<std::string, std::string>>{{"model-4", "feature_vector[6]"}});
  std::vector<Alert> raised;
  std::vector<Alert> resolved;
  for (const Alert& a : alerts) {
    if (a.level == "ALERT") raised.push_back(a);
    if (a.level == "RESOLVED") resolved.push_back(a);
  }
  REQUIRE(raised.size() == 1);
  // The shift starts with window [60 s, 70 s); the CUSUM, fed per window, needs no hysteresis,
  // so that window raises the ALERT.
  simdjson::dom::parser parser;
  simdjson::dom::element window = parser.parse(raised[0].json)["window"];
  CHECK(std::string(window["start_time"].get_string().value()) == "2026-11-18T11:07:40.000Z");
  CHECK(std::string(window["end_time"].get_string().value()) == "2026-11-18T11:07:50.000Z");
  CHECK(JsonField(raised[0].json, "baseline").find("\"type\":\"trailing\"") != std::string::npos);
  // Once the new level fills the K previous windows it is the norm again.
  REQUIRE(resolved.size() == 1);
}

// ---- file baseline ---------------------------------------------------------------------------

/// JSON lines of `rows` reference records drawn from the undrifted generator, from a row range
/// the stream never uses (independent draws of the same distributions).
std::string ReferenceRecords(int models, int64_t rows) {
  InferenceGenerator generator = Generator(models, 42);
  std::string out;
  generator.AppendJsonLines(10'000'000, static_cast<uint64_t>(rows), out);
  return out;
}

TEST_CASE("a file baseline of reference records catches a model that drifted before the start",
          "[e2e][drift][baseline]") {
  const std::string scenarios = "model-1 feature 0 shifts by 0.5 sigma after 0 s";
  // With a warmup baseline the shifted data is its own reference: nothing to see.
  {
    TempDir dir;
    DriftPipeline p;
    p.models = 4;
    p.rows = 4 * 10'000;
    p.scenarios = scenarios;
    std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
    INFO(Describe(alerts));
    CHECK(alerts.empty());
  }
  TempDir dir;
  // A path relative to the pipeline file.
  WriteFile(dir / "reference.jsonl", ReferenceRecords(4, 4 * 5000));
  DriftPipeline p;
  p.models = 4;
  p.rows = 4 * 10'000;
  p.scenarios = scenarios;
  p.drift_extra = "  baseline: {type: file, path: reference.jsonl}";
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO(Describe(alerts));
  CHECK(SeriesWithEvents(alerts) ==
        std::set<std::pair<std::string, std::string>>{{"model-1", "feature_vector[0]"}});
  std::vector<Alert> raised;
  for (const Alert& a : alerts) {
    if (a.level == "ALERT") raised.push_back(a);
  }
  REQUIRE(raised.size() == 1);
  // From the first record: the CUSUM finds 0.5 sigma within 500 values.
  CHECK(raised[0].window_end_record <= 500);
  CHECK(JsonField(raised[0].json, "baseline").find("\"type\":\"file\"") != std::string::npos);
}

TEST_CASE("a file baseline of reference statistics is compared with from the first window",
          "[e2e][drift][baseline]") {
  TempDir dir;
  InferenceGenerator generator = Generator(4, 42);
  std::string json = R"({"driftd_reference": 1, "models": {)";
  for (int m = 0; m < 4; ++m) {
    if (m > 0) json += ",";
    json += fmt::format(R"("model-{}": {{)", m);
    for (int f = 0; f < kFeatures; ++f) {
      if (f > 0) json += ",";
      json += fmt::format(R"("feature_vector[{}]": {{"n": 100000, "mean": {}, "stddev": {}}})", f,
                          generator.FeatureMean(m, f), generator.FeatureSigma(m, f));
    }
    json += "}";
  }
  json += "}}";
  WriteFile(dir / "reference.json", json);
  DriftPipeline p;
  p.models = 4;
  p.rows = 4 * 10'000;
  p.scenarios = "model-2 feature 5 shifts by 0.5 sigma after 0 s";
  p.drift_extra = fmt::format(
      "  baseline: {{type: file, path: {}}}\n"
      "  detectors: [{{type: mean_shift}}, {{type: stddev_ratio}}]",
      dir / "reference.json");
  std::vector<Alert> alerts = RunAndReadAlerts(dir, p);
  INFO(Describe(alerts));
  // The prediction series is not in the file: it warms up and, being stationary, stays quiet.
  CHECK(SeriesWithEvents(alerts) ==
        std::set<std::pair<std::string, std::string>>{{"model-2", "feature_vector[5]"}});
  REQUIRE(std::count_if(alerts.begin(), alerts.end(),
                        [](const Alert& a) { return a.level == "ALERT"; }) == 1);
}

TEST_CASE("a missing or malformed baseline file stops start and validate with its path named",
          "[e2e][drift][baseline]") {
  TempDir dir;
  DriftPipeline p;
  p.models = 2;
  p.rows = 1000;
  const std::string path = dir / "reference.jsonl";
  p.drift_extra = fmt::format("  baseline: {{type: file, path: {}}}", path);
  const std::string pipeline = WriteDriftPipeline(dir, p);

  RunResult missing = RunDriftd({"run", pipeline});
  INFO(missing.output);
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find(path) != std::string::npos);
  // `validate` loads the baseline too, so the problem shows before any start.
  RunResult validate_missing = RunDriftd({"validate", pipeline});
  INFO(validate_missing.output);
  CHECK(validate_missing.exit_code == 78);
  CHECK(validate_missing.output.find(path) != std::string::npos);

  std::string records = ReferenceRecords(2, 3);
  records.insert(records.find('\n') + 1, "{\"model_id\":\"model-0\",\"prediction\":\n");
  WriteFile(path, records);
  RunResult malformed = RunDriftd({"run", pipeline});
  INFO(malformed.output);
  CHECK(malformed.exit_code != 0);
  CHECK(malformed.output.find(path) != std::string::npos);
  CHECK(malformed.output.find("line 2") != std::string::npos);

  WriteFile(path, R"({"driftd_reference": 1, "models": {"model-0": {"speed": {"n": 10}}}})");
  RunResult unknown = RunDriftd({"run", pipeline});
  INFO(unknown.output);
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.output.find("'speed' is not a drift series") != std::string::npos);
  RunResult validate_unknown = RunDriftd({"validate", pipeline});
  CHECK(validate_unknown.exit_code == 78);
  CHECK(validate_unknown.output.find("'speed' is not a drift series") != std::string::npos);
  // The problem is reported at the baseline's key, not at the drift section.
  CHECK(validate_unknown.output.find(": drift.baseline.path: ") != std::string::npos);
  WriteFile(path, R"({"driftd_reference": 1, "models": {"model-0": {"prediction":
      {"n": 1000, "mean": 0.5, "stddev": 0.1, "winsorized": {"stddev": 0.1}}}}})");
  RunResult winsorized = RunDriftd({"validate", pipeline});
  INFO(winsorized.output);
  CHECK(winsorized.exit_code == 78);
  CHECK(winsorized.output.find("model 'model-0' series 'prediction': winsorized needs \"mean\"") !=
        std::string::npos);
  WriteFile(path, ReferenceRecords(2, 2 * 1000));
  RunResult validate_good = RunDriftd({"validate", pipeline});
  INFO(validate_good.output);
  CHECK(validate_good.exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "alerts"));
}

}  // namespace
}  // namespace driftd::testing
