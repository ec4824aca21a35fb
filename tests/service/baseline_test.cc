// Baselines an operator manages: `driftd baseline build` turns reference records (JSON lines
// or CSV) into a reference-statistics file that gives the same alerts as the warm-up on the
// same records, and `driftd baseline reset` starts one model's baselines over in a running
// daemon after a retrain, without a new checkpoint.
#include <signal.h>
#include <sys/wait.h>

#include <cmath>

#include <simdjson.h>
#include <catch2/catch.hpp>

#include "tests/service/drift_data.h"
#include "tests/service/service_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

struct AlertFacts {
  std::string model, series, detector, level;
  double statistic = 0;
  int64_t start_record = 0;
  int64_t n = 0;
  double mean = 0;
};

std::vector<AlertFacts> Alerts(const std::filesystem::path& dir) {
  std::vector<AlertFacts> out;
  simdjson::dom::parser parser;
  for (const std::string& row : FileSinkRows(dir)) {
    simdjson::dom::element e = parser.parse(row);
    AlertFacts a;
    a.model = std::string(std::string_view(e["model"]));
    a.series = std::string(std::string_view(e["series"]));
    a.detector = std::string(std::string_view(e["detector"]));
    a.level = std::string(std::string_view(e["level"]));
    a.statistic = double(e["statistic"]);
    a.start_record = int64_t(e["window"]["start_record"]);
    a.n = int64_t(e["window"]["n"]);
    double mean = 0;
    if (a.n > 0 && e["window"]["mean"].get(mean) == simdjson::SUCCESS) a.mean = mean;
    out.push_back(a);
  }
  std::sort(out.begin(), out.end(), [](const AlertFacts& x, const AlertFacts& y) {
    return std::tie(x.model, x.series, x.start_record, x.level) <
           std::tie(y.model, y.series, y.start_record, y.level);
  });
  return out;
}

std::string WithBaseline(std::string yaml, const std::string& baseline) {
  const std::string warmup = "baseline: {type: warmup, records: 500}";
  yaml.replace(yaml.find(warmup), warmup.size(), baseline);
  return yaml;
}

TEST_CASE("a baseline built from reference records gives the same alerts as the warm-up on them",
          "[service][baseline][drift][e2e]") {
  TempDir dir("driftd-baseline-build");
  const DriftData all{.records_per_model = 4000, .drift_after = 2500};
  DriftData reference = all;
  reference.until = 1000;
  DriftData stream = all;
  stream.from = 1000;
  WriteFileAt(dir / "a/input/logs.jsonl", DriftRecords(all));
  WriteFileAt(dir / "ref/reference.jsonl", DriftRecords(reference));
  WriteFileAt(dir / "b/input/logs.jsonl", DriftRecords(stream));
  // The same records as CSV, arrays as one column per element.
  std::string csv = "model_id,event_time,prediction,feature_vector[0],feature_vector[1]\n";
  simdjson::dom::parser parser;
  for (const std::string& line : SplitLines(DriftRecords(reference))) {
    if (line.empty()) continue;
    simdjson::dom::element e = parser.parse(line);
    simdjson::dom::array f = e["feature_vector"];
    csv += fmt::format("{},{},{},{},{}\n", std::string_view(e["model_id"]), int64_t(e["event_time"]),
                       simdjson::to_string(e["prediction"]), simdjson::to_string(f.at(0)),
                       simdjson::to_string(f.at(1)));
  }
  WriteFileAt(dir / "ref/reference.csv", csv);

  const std::string trigger = "{availableNow: true}";
  WriteFileAt(dir / "a.yaml", WithBaseline(DriftPipelineYaml("warm", dir / "a/input", dir / "a/out", trigger),
                                           "baseline: {type: warmup, records: 1000}"));
  WriteFileAt(dir / "b.yaml", WithBaseline(DriftPipelineYaml("file", dir / "b/input", dir / "b/out", trigger),
                                           "baseline: {type: file, path: reference.json}"));

  RunResult built = RunDriftd({"baseline", "build", dir / "b.yaml", "--input",
                               dir / "ref/reference.jsonl", "--output", dir / "reference.json"});
  INFO(built.output);
  REQUIRE(built.exit_code == 0);
  RunResult from_csv = RunDriftd({"baseline", "build", dir / "b.yaml", "-i",
                                  dir / "ref/reference.csv", "-o", dir / "reference-csv.json"});
  INFO(from_csv.output);
  REQUIRE(from_csv.exit_code == 0);
  CHECK(ReadFile(dir / "reference-csv.json") == ReadFile(dir / "reference.json"));
  const std::string statistics = ReadFile(dir / "reference.json");
  CHECK_THAT(statistics, Catch::Contains("\"driftd_reference\": 1"));
  CHECK_THAT(statistics, Catch::Contains("\"feature_vector[1]\""));
  // The fences and moments of the winsorized values, which the mean and CUSUM tests use.
  CHECK_THAT(statistics, Catch::Contains("\"winsorized\":{\"low\":"));

  RunResult warm = RunDriftd({"run", dir / "a.yaml", "--http", "off", "--quiet-progress"});
  INFO(warm.output);
  REQUIRE(warm.exit_code == 0);
  RunResult file = RunDriftd({"run", dir / "b.yaml", "--http", "off", "--quiet-progress"});
  INFO(file.output);
  REQUIRE(file.exit_code == 0);

  std::vector<AlertFacts> a = Alerts(dir / "a/out/alerts");
  std::vector<AlertFacts> b = Alerts(dir / "b/out/alerts");
  REQUIRE(!a.empty());
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].model << " " << a[i].series << " " << a[i].level << " at " << a[i].start_record);
    CHECK(a[i].model == b[i].model);
    CHECK(a[i].series == b[i].series);
    CHECK(a[i].detector == b[i].detector);
    CHECK(a[i].level == b[i].level);
    // The warm-up's values come before the stream's first window; the file's do not.
    CHECK(a[i].start_record == b[i].start_record + 1000);
    CHECK(a[i].n == b[i].n);
    // The window's sums are kept about the baseline's mean, so its mean differs from one
    // baseline to another only in the last bits.
    CHECK(std::abs(a[i].mean - b[i].mean) <= 1e-12 * std::max(1.0, std::abs(a[i].mean)));
    CHECK(std::abs(a[i].statistic - b[i].statistic) <= 1e-9 * std::max(1.0, std::abs(a[i].statistic)));
  }
  CHECK(a.front().model == "model-2");

  // A CSV column the schema does not have is named.
  WriteFileAt(dir / "bad.csv", "model_id,colour\nm,red\n");
  RunResult bad = RunDriftd({"baseline", "build", dir / "b.yaml", "-i", dir / "bad.csv", "-o",
                             dir / "bad.json"});
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Catch::Contains("CSV column 'colour'"));
}

// Records with a categorical feature: each of 4 models logs a device; model-2's shifts from ios
// to android after record 6000, and model-1's device arrives null in 30% of its records after
// record 5000 (none before, so that the warm-up and the reference hold the same values).
std::string DeviceRecords(int from, int until) {
  std::string out;
  uint64_t state = 11;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  const char* devices[] = {"ios", "android", "web", "tv"};
  for (int r = 0; r < 8000; ++r) {
    for (int m = 0; m < 4; ++m) {
      const bool shifted = m == 2 && r >= 6000;
      const double shares[] = {shifted ? 0.25 : 0.45, shifted ? 0.55 : 0.35, 0.15, 0.05};
      double u = uniform();
      int d = 0;
      while (d < 3 && u >= shares[d]) u -= shares[d++];
      const bool null = m == 1 && r >= 5000 && uniform() < 0.3;
      if (r < from || r >= until) continue;
      out += fmt::format("{{\"model_id\":\"model-{}\",\"event_time\":{},\"device\":{}}}\n", m,
                         1'700'000'000'000 + r * 10,
                         null ? std::string("null") : fmt::format("\"{}\"", devices[d]));
    }
  }
  return out;
}

std::string DevicePipeline(const std::string& name, const std::filesystem::path& input,
                           const std::filesystem::path& out, const std::string& baseline) {
  return fmt::format(R"(name: {}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: long}}
  - {{name: device, type: string}}
source:
  format: file
  options: {{path: {}}}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [device]
  baseline: {}
  windowRecords: 500
sinks:
  - {{name: alerts, format: file, stream: alerts, options: {{path: {}/alerts}}}}
trigger: {{availableNow: true}}
checkpointLocation: {}/checkpoint
)",
                     name, input.string(), baseline, out.string(), out.string());
}

TEST_CASE("a baseline built from reference records of a string feature gives the warm-up's "
          "categorical and missing-value alerts",
          "[service][baseline][drift][categorical][e2e]") {
  TempDir dir("driftd-baseline-categorical");
  // A warm-up of 4000 values counts its first 2000 exactly, as a file baseline does (its first
  // part is at most 2000 values), and holds the other 2000 out for the unseen share.
  WriteFileAt(dir / "a/input/logs.jsonl", DeviceRecords(0, 8000));
  WriteFileAt(dir / "ref/reference.jsonl", DeviceRecords(0, 4000));
  WriteFileAt(dir / "b/input/logs.jsonl", DeviceRecords(4000, 8000));
  WriteFileAt(dir / "a.yaml", DevicePipeline("warm", dir / "a/input", dir / "a/out",
                                             "{type: warmup, records: 4000}"));
  WriteFileAt(dir / "b.yaml", DevicePipeline("file", dir / "b/input", dir / "b/out",
                                             "{type: file, path: reference.json}"));
  RunResult built = RunDriftd({"baseline", "build", dir / "b.yaml", "--input",
                               dir / "ref/reference.jsonl", "--output", dir / "reference.json"});
  INFO(built.output);
  REQUIRE(built.exit_code == 0);
  const std::string statistics = ReadFile(dir / "reference.json");
  INFO(statistics);
  CHECK_THAT(statistics, Catch::Contains("\"device\": {\"n\":4000,\"categories\":{"));
  CHECK_THAT(statistics, Catch::Contains("\"device:missing\": {\"n\":4000,\"rate\":0}"));
  CHECK_THAT(statistics, Catch::Contains("\"unseen\":{\"n\":2000,\"count\":0}"));

  RunResult warm = RunDriftd({"run", dir / "a.yaml", "--http", "off", "--quiet-progress"});
  INFO(warm.output);
  REQUIRE(warm.exit_code == 0);
  RunResult file = RunDriftd({"run", dir / "b.yaml", "--http", "off", "--quiet-progress"});
  INFO(file.output);
  REQUIRE(file.exit_code == 0);

  std::vector<AlertFacts> a = Alerts(dir / "a/out/alerts");
  std::vector<AlertFacts> b = Alerts(dir / "b/out/alerts");
  std::vector<std::string> alerting;
  for (const AlertFacts& x : a) {
    if (x.level == "ALERT") alerting.push_back(x.model + " " + x.series);
  }
  CHECK(alerting == std::vector<std::string>{"model-1 device:missing", "model-2 device"});
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].model << " " << a[i].series << " " << a[i].level << " at " << a[i].start_record);
    CHECK(a[i].model == b[i].model);
    CHECK(a[i].series == b[i].series);
    CHECK(a[i].detector == b[i].detector);
    CHECK(a[i].level == b[i].level);
    CHECK(a[i].start_record == b[i].start_record + 4000);
    CHECK(a[i].n == b[i].n);
    CHECK(std::abs(a[i].statistic - b[i].statistic) <= 1e-9 * std::max(1.0, std::abs(a[i].statistic)));
  }
}

TEST_CASE("driftd baseline build reads map features and struct fields from JSON lines and CSV "
          "alike",
          "[service][baseline][drift][types]") {
  TempDir dir("driftd-baseline-named");
  WriteFileAt(dir / "named.yaml", fmt::format(R"(name: named
schema:
  - {{name: model_id, type: string}}
  - name: segment
    type: struct<country:string>
  - name: features
    type: map<string,double>
source:
  format: file
  options: {{path: {}}}
query: {{groupBy: [model_id], aggregates: [count]}}
drift:
  series: [features]
  baseline: {{type: warmup, records: 200}}
  minSamples: 100
  windowRecords: 100
sinks: [{{name: alerts, format: console, stream: alerts}}]
)",
                                              dir / "input"));
  std::string jsonl;
  std::string csv = "model_id,segment.country,features.amount,features.score\n";
  for (int i = 0; i < 400; ++i) {
    const double amount = 40 + (i * 37 % 23);
    const double score = (i * 13 % 17) / 17.0;
    // Key order varies in the JSON; in the CSV, each key is a column.
    jsonl += i % 2 ? fmt::format(R"({{"model_id":"m","segment":{{"country":"DE"}},"features":{{"score":{},"amount":{}}}}})",
                                 score, amount)
                   : fmt::format(R"({{"model_id":"m","segment":{{"country":"DE"}},"features":{{"amount":{},"score":{}}}}})",
                                 amount, score);
    jsonl += "\n";
    csv += fmt::format("m,DE,{},{}\n", amount, score);
  }
  WriteFileAt(dir / "reference.jsonl", jsonl);
  WriteFileAt(dir / "reference.csv", csv);
  RunResult from_json = RunDriftd({"baseline", "build", dir / "named.yaml", "-i",
                                   dir / "reference.jsonl", "-o", dir / "from-json.json"});
  INFO(from_json.output);
  REQUIRE(from_json.exit_code == 0);
  RunResult from_csv = RunDriftd({"baseline", "build", dir / "named.yaml", "-i",
                                  dir / "reference.csv", "-o", dir / "from-csv.json"});
  INFO(from_csv.output);
  REQUIRE(from_csv.exit_code == 0);
  const std::string statistics = ReadFile(dir / "from-json.json");
  CHECK(ReadFile(dir / "from-csv.json") == statistics);
  CHECK_THAT(statistics, Catch::Contains("\"features.amount\": {\"n\":400,"));
  CHECK_THAT(statistics, Catch::Contains("\"features.score\": {\"n\":400,"));
}

TEST_CASE("driftd baseline build takes what pandas writes by default, to_csv and to_json alike, "
          "and the logs of the same model raise no alert against it",
          "[service][baseline][drift][pandas]") {
  // tests/service/data/pandas/make_fixtures.py says how pandas wrote these: the CSV with its
  // unnamed index column, True/False, lists of numpy numbers, numpy arrays and an int column
  // with a missing value written as floats.
  const std::string data = std::string(DRIFTD_TESTS_DIR) + "/service/data/pandas";
  TempDir dir("driftd-baseline-pandas");
  WriteFileAt(dir / "input/stream.jsonl", ReadFile(data + "/stream.jsonl"));
  WriteFileAt(dir / "p.yaml", fmt::format(R"(name: pandas
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: amount, type: double}}
  - {{name: scores, type: array<double>}}
  - {{name: embedding, type: array<double>}}
  - {{name: is_mobile, type: string}}
  - {{name: country, type: string}}
  - {{name: clicks, type: long}}
source:
  format: file
  options: {{path: {input}}}
query: {{groupBy: [model_id], aggregates: [count]}}
drift:
  series: [amount, scores, embedding, is_mobile, country, clicks]
  baseline: {{type: file, path: {dir}/from-csv.json}}
  minSamples: 50
  windowRecords: 50
sinks:
  - {{name: alerts, format: file, stream: alerts, options: {{path: {dir}/out/alerts}}}}
trigger: {{availableNow: true}}
checkpointLocation: {dir}/out/checkpoint
)",
                                          fmt::arg("input", dir / "input"),
                                          fmt::arg("dir", dir.path().string())));
  RunResult from_csv = RunDriftd({"baseline", "build", dir / "p.yaml", "--input",
                                  data + "/reference.csv", "--output", dir / "from-csv.json"});
  INFO(from_csv.output);
  REQUIRE(from_csv.exit_code == 0);
  RunResult from_json = RunDriftd({"baseline", "build", dir / "p.yaml", "--input",
                                   data + "/reference.jsonl", "--output", dir / "from-json.json"});
  INFO(from_json.output);
  REQUIRE(from_json.exit_code == 0);
  const std::string statistics = ReadFile(dir / "from-csv.json");
  INFO(statistics);
  CHECK(ReadFile(dir / "from-json.json") == statistics);
  CHECK_THAT(statistics, Catch::Contains("\"scores[1]\": {\"n\":200,"));
  CHECK_THAT(statistics, Catch::Contains("\"embedding[1]\": {\"n\":200,"));
  // The booleans are the JSON stream's spelling, the missing clicks missing.
  CHECK_THAT(statistics, Catch::Contains("\"true\"") && Catch::Contains("\"false\""));
  CHECK_THAT(statistics, !Catch::Contains("\"True\"") && !Catch::Contains("\"False\""));
  CHECK_THAT(statistics, Catch::Contains("\"clicks\": {\"n\":"));

  // Logs of the same distributions, as a serving system writes them (true/false): no alert,
  // in particular no new category "true" against a baseline of "True".
  RunResult run = RunDriftd({"run", dir / "p.yaml", "--http", "off", "--quiet-progress"});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("200 input rows"));
  CHECK(FileSinkRows(dir / "out/alerts").empty());
}

TEST_CASE("driftd baseline reset starts one model's baselines over in a running daemon",
          "[service][baseline][drift][e2e]") {
  TempDir dir("driftd-rebaseline");
  WriteFileAt(dir / "input/a.jsonl", DriftRecords({.records_per_model = 3000}));
  WriteFileAt(dir / "p.yaml", DriftPipelineYaml("rebase", dir / "input", dir / "out"));
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "p.yaml", "--http", "127.0.0.1:0", "--quiet-progress"}, log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  auto level = [&](const char* model) {
    return ParsePrometheus(HttpGet(*port, "/metrics").body)
        .Value("driftd_drift_series_level",
               {{"pipeline", "rebase"}, {"model", model}, {"series", "prediction"}})
        .value_or(-1);
  };
  REQUIRE(WaitFor([&] { return level("model-2") == 2; }, 60s));
  const std::string address = "127.0.0.1:" + std::to_string(*port);

  RunResult unknown = RunDriftd({"baseline", "reset", "--http", address, "--pipeline", "rebase",
                                 "--model", "model-9"});
  CHECK(unknown.exit_code == 1);
  CHECK_THAT(unknown.output, Catch::Contains("no model 'model-9'"));

  // The retrained model-2 lives at the new level: it becomes its baseline.
  RunResult reset = RunDriftd({"baseline", "reset", "--http", address, "--pipeline", "rebase",
                               "--model", "model-2"});
  INFO(reset.output);
  REQUIRE(reset.exit_code == 0);
  REQUIRE(WaitFor([&] { return ReadFile(log).find("model model-2 warms up a new baseline") != std::string::npos; }));
  WriteFileAt(dir / "input/b.jsonl", DriftRecords({.records_per_model = 6000,
                                                    .drift_after = 0,
                                                    .seed = 11,
                                                    .only_model = "model-2",
                                                    .from = 3000}));
  CHECK(WaitFor([&] { return level("model-2") == 0; }, 60s));
  CHECK(level("model-0") == 0);
  bool resolved = false;
  simdjson::dom::parser parser;
  for (const std::string& row : FileSinkRows(dir / "out/alerts")) {
    simdjson::dom::element e = parser.parse(row);
    resolved |= std::string_view(e["model"]) == "model-2" && std::string_view(e["level"]) == "RESOLVED";
  }
  CHECK(resolved);
  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait(30s).has_value());
}

}  // namespace
}  // namespace driftd::testing
