// One loop for every mode: the same pipelines, with their features, run by one process and
// scaled out (one process, then three), through the daemon against the real broker, give the
// same window statistics and the same alerts, ids included. The features are the ones that
// used to differ between the modes: each model's malformed-record series (a malformed row's
// flag must cross the repartition topic), segments, named features (a map's keys as series)
// and Avro values from a schema registry. Every model's records are spread over every
// partition, in event-time order within each.
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include <simdjson.h>

#include "connectors/kafka/kafka_group.h"
#include "tests/kafka/kafka_test_util.h"
#include "tests/support/avro_records.h"
#include "tests/support/schema_registry_fake.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using testing::ChildProcess;
using testing::DriftdBinary;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

constexpr int64_t kStartMs = 1'796'000'000'000;
constexpr int kPartitions = 4;
constexpr int64_t kRows = 24'000;  // 500 a second of event time: 48 s, 5 windows of 10 s
const std::vector<std::string> kModels = {"model-0", "model-1", "model-2"};
const std::vector<std::string> kCountries = {"DE", "FR"};

// Everything but the record format: drift per model and country (segments), and statistics
// per model. `windowed`: per 10 s event-time window (append: each window once), drift on the
// same windows; otherwise drift's record-count windows, which take each model's values in
// event-time order, and the statistics' running totals (update).
// `inputs`: the pipeline's YAML inputs block, if any.
std::string PipelineYaml(std::string_view schema, std::string_view format,
                         std::string_view segment_by, std::string_view series,
                         std::string_view detectors, bool windowed = true,
                         std::string_view inputs = "") {
  return fmt::format(R"(name: ${{PIPELINE_NAME}}
schema:
{schema}source:
  format: kafka
  options:
    kafka.bootstrap.servers: ${{KAFKA_BROKERS}}
    subscribe: ${{INPUT_TOPIC}}
    startingOffsets: earliest
    maxOffsetsPerTrigger: 3000
{format}  malformed: {{policy: permissive}}
{inputs}query:
  groupBy: [model_id]
{window}  aggregates: [count, mean(prediction)]
drift:
  series: [{series}]
  segmentBy: [{segment_by}]
  baseline: {{type: warmup, records: 800}}
  detectors: [{detectors}]
  minSamples: 200
{records}sinks:
  - {{name: stats, format: kafka, stream: stats, outputMode: {mode},
      options: {{kafka.bootstrap.servers: "${{KAFKA_BROKERS}}", topic: "${{STATS_TOPIC}}"}}}}
  - {{name: alerts, format: kafka, stream: alerts,
      options: {{kafka.bootstrap.servers: "${{KAFKA_BROKERS}}", topic: "${{ALERTS_TOPIC}}"}}}}
trigger: {{processingTime: 100ms}}
checkpointLocation: ${{CHECKPOINT}}
scaleOut:
  enabled: ${{SCALE_OUT}}
  instance: ${{INSTANCE:-solo}}
)",
                     fmt::arg("schema", schema), fmt::arg("format", format),
                     fmt::arg("segment_by", segment_by), fmt::arg("series", series),
                     fmt::arg("detectors", detectors), fmt::arg("inputs", inputs),
                     fmt::arg("window", windowed ? "  window: {column: event_time, size: 10 seconds}\n"
                                                   "  watermark: {column: event_time, delay: 2 "
                                                   "seconds, idleTimeout: 0}\n"
                                                 : ""),
                     fmt::arg("records", windowed ? "" : "  windowRecords: 500\n"),
                     fmt::arg("mode", windowed ? "append" : "update"));
}

// One generated row: its model, country, event time and values. model-2 in DE shifts its
// amount by 1.5 sigma after 24 s; a fifth of model-1's records are malformed after 24 s (a
// prediction that is not a number).
struct Row {
  std::string model;
  std::string country;
  int64_t event_ms = 0;
  double amount = 0;
  double age = 0;
  double prediction = 0;
  bool malformed = false;
};

std::vector<std::vector<Row>> Generate() {
  std::mt19937_64 random(20261204);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::vector<Row>> partitions(kPartitions);
  for (int64_t i = 0; i < kRows; ++i) {
    Row row;
    row.model = kModels[static_cast<size_t>(i % 3)];
    row.country = kCountries[static_cast<size_t>((i / 3) % 2)];
    row.event_ms = kStartMs + i * 2;
    const bool late_half = i >= kRows / 2;
    row.amount = 100 + 15 * normal(random);
    if (late_half && row.model == "model-2" && row.country == "DE") row.amount += 22.5;
    row.age = 40 + 10 * normal(random);
    row.prediction = uniform(random);
    row.malformed = late_half && row.model == "model-1" && uniform(random) < 0.2;
    // Each partition in event-time order; a model's rows in every partition.
    partitions[static_cast<size_t>((i * 7 + i / 5) % kPartitions)].push_back(row);
  }
  return partitions;
}

// A row per partition an hour later (model "flush") moves every partition's clock past the
// last window, so every window closes.
Row FlushRow() {
  Row row;
  row.model = "flush";
  row.country = "DE";
  row.event_ms = kStartMs + 3'600'000;
  return row;
}

std::string IsoTime(int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

// JSON records with a struct segment and a map of named features.
std::string JsonRecord(const Row& row) {
  const std::string prediction =
      row.malformed ? std::string("\"n/a\"") : fmt::format("{:.6f}", row.prediction);
  return fmt::format(
      R"({{"model_id":"{}","event_time":"{}","segment":{{"country":"{}"}},)"
      R"("features":{{"amount":{:.4f},"age":{:.4f}}},"prediction":{}}})",
      row.model, IsoTime(row.event_ms), row.country, row.amount, row.age, prediction);
}

constexpr std::string_view kAvroSchema = R"({"type": "record", "name": "Inference",
  "namespace": "acme", "fields": [
    {"name": "model_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"},
    {"name": "feature_vector", "type": {"type": "array", "items": "double"}},
    {"name": "prediction", "type": "double"}]})";

// A topic of the rows, one partition per list, `encode` making each record.
std::string ProduceTopic(Admin& admin, const std::vector<std::vector<Row>>& partitions,
                         const std::function<std::string(const Row&)>& encode) {
  const std::string topic = UniqueName("modes-logs");
  const int count = static_cast<int>(partitions.size());
  admin.CreateTopic(topic, count);
  for (int p = 0; p < count; ++p) {
    std::vector<std::string> records;
    for (const Row& row : partitions[static_cast<size_t>(p)]) records.push_back(encode(row));
    records.push_back(encode(FlushRow()));
    Produce(topic, p, records);
  }
  return topic;
}

// One run of a pipeline: its name (consumer group and internal topics), outputs, checkpoint.
struct Deployment {
  std::string name = UniqueName("modes");
  std::string stats = UniqueName("modes-stats");
  std::string alerts = UniqueName("modes-alerts");
  TempDir dir{"driftd-modes"};
  std::string pipeline;
  std::map<std::string, std::string> env;

  Deployment(Admin& admin, const std::string& yaml, const std::string& input, bool scale_out,
             const std::string& second_input = "") {
    admin.CreateTopic(stats, 3);
    admin.CreateTopic(alerts, 1);
    pipeline = dir / "pipeline.yaml";
    WriteFile(pipeline, yaml);
    env = {{"PIPELINE_NAME", name},   {"KAFKA_BROKERS", Bootstrap()},
           {"INPUT_TOPIC", input},    {"STATS_TOPIC", stats},
           {"ALERTS_TOPIC", alerts},  {"CHECKPOINT", dir / "checkpoint"},
           {"SCALE_OUT", scale_out ? "true" : "false"}, {"SECOND_TOPIC", second_input}};
  }

  ChildProcess Start(const std::string& instance) const {
    std::map<std::string, std::string> all = env;
    all["INSTANCE"] = instance;
    return ChildProcess::Start({DriftdBinary(), "run", pipeline, "--http", "off"},
                               dir / ("log-" + instance), all);
  }
  std::string Log(const std::string& instance) const { return dir / ("log-" + instance); }
};

// What a user compares between two runs.
struct Outcome {
  /// "model window-start" (or "model" without windows: its running total) -> (count,
  /// mean(prediction)), real models only.
  std::map<std::string, std::pair<int64_t, double>> windows;
  /// One line per alert: id, level, model, segment, series, detector, window start.
  std::multiset<std::string> alerts;
  int64_t duplicate_windows = 0;
  int64_t rows = 0;
  /// Rows of the model "flush" (one per partition) the statistics count.
  int64_t flush_rows = 0;
};

Outcome Read(const Deployment& deployment, bool windowed) {
  Outcome outcome;
  simdjson::dom::parser parser;
  for (const Consumed& record : ReadAll(deployment.stats)) {
    simdjson::dom::element row = parser.parse(record.value);
    const std::string model{std::string_view(row["model_id"])};
    if (model == "flush") {
      outcome.flush_rows += int64_t(row["count"]);
      continue;
    }
    // Without windows (update) each model's last row holds its totals.
    const std::string key =
        windowed ? model + " " + std::string(std::string_view(row["window"]["start"])) : model;
    if (windowed && outcome.windows.count(key)) ++outcome.duplicate_windows;
    double mean = NAN;
    if (row["mean(prediction)"].get(mean) != simdjson::SUCCESS) mean = NAN;
    outcome.windows[key] = {int64_t(row["count"]), mean};
  }
  for (const auto& [key, value] : outcome.windows) outcome.rows += value.first;
  for (const Consumed& record : ReadAll(deployment.alerts)) {
    simdjson::dom::element alert = parser.parse(record.value);
    std::string_view segment = "-";
    if (alert["segment"].get(segment) != simdjson::SUCCESS) segment = "-";
    std::string_view start = "-";
    if (alert["window"]["start_time"].get(start) != simdjson::SUCCESS) start = "-";
    outcome.alerts.insert(fmt::format(
        "{} {} {} {} {} {} {}", std::string_view(alert["alert_id"]),
        std::string_view(alert["level"]), std::string_view(alert["model"]), segment,
        std::string_view(alert["series"]), std::string_view(alert["detector"]), start));
  }
  return outcome;
}

int Terminate(ChildProcess& daemon) {
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(std::chrono::seconds(60));
  if (!status) return -1000;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -WTERMSIG(*status);
}

std::string LogTail(const std::string& path) {
  const std::string text = ReadFile(path);
  return text.size() > 20'000 ? text.substr(text.size() - 20'000) : text;
}

// Runs the deployment with `instances` processes until every row is counted (without windows,
// the flush rows too: in one process drift has then taken every value, the flush rows moving
// the watermark past them in the batch that reads the last one), and, given `expected`, as
// many alerts are there (scaled out, a task's clock hears of the flush rows a batch later).
Outcome RunUntilComplete(const Deployment& deployment, int instances, bool windowed,
                         const Outcome* expected = nullptr) {
  std::vector<ChildProcess> processes;
  for (int i = 0; i < instances; ++i) processes.push_back(deployment.Start(fmt::format("p{}", i)));
  const bool complete = testing::WaitFor(
      [&] {
        for (ChildProcess& process : processes) {
          if (process.Exited()) return true;
        }
        const Outcome outcome = Read(deployment, windowed);
        // Windowed, the flush rows' own window never closes.
        return outcome.rows >= kRows && (windowed || outcome.flush_rows >= kPartitions) &&
               (expected == nullptr || outcome.alerts.size() >= expected->alerts.size());
      },
      std::chrono::seconds(240));
  for (int i = 0; i < instances; ++i) {
    const int code = Terminate(processes[static_cast<size_t>(i)]);
    // The log as the stop left it (-1000: still running 60 s after SIGTERM).
    INFO(LogTail(deployment.Log(fmt::format("p{}", i))));
    CHECK(code == 0);
  }
  REQUIRE(complete);
  return Read(deployment, windowed);
}

void RequireSame(const Outcome& actual, const Outcome& expected) {
  CHECK(actual.duplicate_windows == 0);
  CHECK(actual.alerts == expected.alerts);
  REQUIRE(actual.windows.size() == expected.windows.size());
  for (const auto& [key, value] : expected.windows) {
    INFO(key);
    REQUIRE(actual.windows.count(key) == 1);
    CHECK(actual.windows.at(key).first == value.first);
    CHECK(std::abs(actual.windows.at(key).second - value.second) <= 1e-9);
  }
}

// Whether some alert line has every one of `parts`.
bool HasAlert(const Outcome& outcome, std::initializer_list<std::string_view> parts) {
  for (const std::string& alert : outcome.alerts) {
    bool all = true;
    for (std::string_view part : parts) all = all && alert.find(part) != std::string::npos;
    if (all) return true;
  }
  return false;
}

// The pipeline in one process, then scaled out with one process and with three, each run on a
// deployment of its own (consumer group, internal topics, outputs, checkpoints).
// `tasks`: when given, the partitions the scaled-out runs' internal topics must have (one a
// task: every input's partitions).
void RunInEveryMode(Admin& admin, const std::string& yaml, const std::string& topic,
                    bool windowed, const std::function<void(const Outcome&)>& check_reference,
                    const std::string& second_topic = "", int tasks = 0) {
  Deployment reference(admin, yaml, topic, /*scale_out=*/false, second_topic);
  const Outcome expected = RunUntilComplete(reference, 1, windowed);
  CHECK(expected.duplicate_windows == 0);
  CHECK(expected.rows == kRows);
  // Every model's 5 windows, or its totals.
  CHECK(expected.windows.size() == kModels.size() * (windowed ? 5 : 1));
  INFO("alerts:\n" << fmt::format("{}", fmt::join(expected.alerts, "\n")));
  check_reference(expected);
  for (int processes : {1, 3}) {
    INFO("scaled out, " << processes << " process(es)");
    Deployment run(admin, yaml, topic, /*scale_out=*/true, second_topic);
    RequireSame(RunUntilComplete(run, processes, windowed, &expected), expected);
    if (tasks > 0) admin.AwaitPartitions(kafka::RepartitionTopic(run.name), tasks);
  }
}

// JSON records with a struct segment and a map of named features; a fifth of model-1's
// records malformed in the second half.
// `inputs`: a YAML inputs block (the records of a second topic).
std::string JsonPipeline(bool windowed, std::string_view inputs = "") {
  return PipelineYaml(
      "  - {name: model_id, type: string, nullable: false}\n"
      "  - {name: event_time, type: timestamp}\n"
      "  - {name: segment, type: \"struct<country:string>\"}\n"
      "  - {name: features, type: \"map<string,double>\"}\n"
      "  - {name: prediction, type: double}\n",
      "", "segment.country", "features, prediction",
      "{type: mean_shift}, {type: psi}, {type: malformed_rate}", windowed, inputs);
}

void CheckJsonAlerts(const Outcome& expected) {
  // The shift of a named feature in one segment, and the malformed records of one model.
  CHECK(HasAlert(expected, {" model-2 ", "segment.country=DE", "features.amount"}));
  CHECK_FALSE(HasAlert(expected, {" model-2 ", "segment.country=FR"}));
  CHECK(HasAlert(expected, {" model-1 ", " malformed ", "malformed_rate"}));
  CHECK_FALSE(HasAlert(expected, {" model-0 "}));
}

TEST_CASE("one process and scaled-out processes give the same statistics and alerts on JSON "
          "records with malformed ones, segments and named features",
          "[kafka][scale-out][modes]") {
  Admin admin;
  const std::string topic = ProduceTopic(admin, Generate(), JsonRecord);
  RunInEveryMode(admin, JsonPipeline(/*windowed=*/true), topic, true, CheckJsonAlerts);
}

TEST_CASE("drift's record-count windows over partitions give one process's alerts scaled out: "
          "each task takes its models' values in event-time order",
          "[kafka][scale-out][modes][order]") {
  Admin admin;
  const std::string topic = ProduceTopic(admin, Generate(), JsonRecord);
  RunInEveryMode(admin, JsonPipeline(/*windowed=*/false), topic, false, CheckJsonAlerts);
}

TEST_CASE("scale-out: a query of two topics gives the same statistics and alerts in one process "
          "and scaled out, one consumer group dividing both topics' partitions among the processes",
          "[kafka][scale-out][modes][inputs]") {
  Admin admin;
  const std::vector<std::vector<Row>> partitions = Generate();
  // Half the partitions on each topic; a model's records on both. The second input subscribes
  // by pattern: its topic's partitions make tasks too (2 + 2).
  const std::string first = ProduceTopic(admin, {partitions[0], partitions[1]}, JsonRecord);
  const std::string second = ProduceTopic(admin, {partitions[2], partitions[3]}, JsonRecord);
  const std::string inputs = R"(inputs:
  - name: second
    format: kafka
    options:
      kafka.bootstrap.servers: ${KAFKA_BROKERS}
      subscribePattern: ${SECOND_TOPIC}
      startingOffsets: earliest
      maxOffsetsPerTrigger: 2000
    malformed: {policy: permissive}
)";
  RunInEveryMode(admin, JsonPipeline(/*windowed=*/true, inputs), first, true, CheckJsonAlerts,
                 second, /*tasks=*/4);
}

TEST_CASE("one process and scaled-out processes give the same statistics and alerts on Avro "
          "records from a schema registry, with segments",
          "[kafka][scale-out][modes][avro]") {
  testing::FakeSchemaRegistry registry;
  REQUIRE(registry.running());
  const auto schema_id = static_cast<uint32_t>(registry.Add(std::string(kAvroSchema)));
  Admin admin;
  testing::AvroRecordWriter writer(kAvroSchema);
  const std::string topic = ProduceTopic(admin, Generate(), [&](const Row& row) {
    return writer.Write({{"model_id", row.model},
                         {"event_time", row.event_ms},
                         {"country", row.country},
                         {"feature_vector", std::vector<double>{row.amount, row.age}},
                         {"prediction", row.prediction}},
                        schema_id);
  });
  const std::string yaml = PipelineYaml(
      "  - {name: model_id, type: string, nullable: false}\n"
      "  - {name: event_time, type: timestamp}\n"
      "  - {name: country, type: string}\n"
      "  - {name: feature_vector, type: array<double>}\n"
      "  - {name: prediction, type: double}\n",
      "  valueFormat: avro\n  valueOptions: {schemaRegistryUrl: \"" + registry.url() + "\"}\n",
      "country", "feature_vector, prediction", "{type: mean_shift}, {type: psi}");
  RunInEveryMode(admin, yaml, topic, true, [](const Outcome& expected) {
    CHECK(HasAlert(expected, {" model-2 ", "country=DE", "feature_vector[0]"}));
    CHECK_FALSE(HasAlert(expected, {" model-0 "}));
    CHECK_FALSE(HasAlert(expected, {" model-1 "}));
  });
}

}  // namespace
}  // namespace driftd
