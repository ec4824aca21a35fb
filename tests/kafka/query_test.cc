// The seed's query through the daemon against the real broker: inference logs from Kafka, a
// filter that drops shadow traffic (query.where), a derived abs_error series (query.select
// with AS) that drift watches per model, and the statistics and alerts out to Kafka topics,
// read back with read_committed as a user would. Then the Kafka metadata columns (key,
// partition, timestamp) driving groupBy, a filter and the event time. Each pipeline runs at two
// batch sizes (maxOffsetsPerTrigger), which must give the same output; the seed's query also
// on one and two threads, which must give the same records byte for byte.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include <simdjson.h>

#include "engine/time_iso8601.h"
#include "tests/kafka/kafka_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using testing::ChildProcess;
using testing::DriftdBinary;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

constexpr int64_t kStartTimeMs = 1'795'000'000'000;

// Produces records with keys (and, when given, Kafka timestamps) to one partition.
struct KeyedRecord {
  std::string key;
  std::string value;
  int64_t timestamp_ms = 0;  // 0: the producer's clock
};

void ProduceKeyed(const std::string& topic, int32_t partition,
                  const std::vector<KeyedRecord>& records) {
  Client producer = MakeClient(RD_KAFKA_PRODUCER, {{"linger.ms", "5"}});
  for (const KeyedRecord& record : records) {
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
          RD_KAFKA_V_KEY(record.key.data(), record.key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(record.value.data()), record.value.size()),
          RD_KAFKA_V_TIMESTAMP(record.timestamp_ms), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_END);
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
        break;
      }
      rd_kafka_poll(producer.get(), 100);  // the queue drains as the broker acknowledges
    }
  }
  REQUIRE(rd_kafka_flush(producer.get(), 60'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
}

// Runs `driftd run` on `yaml` (trigger availableNow) until it exits by itself; its exit code.
int RunToExit(const TempDir& dir, const std::string& yaml, const std::string& name) {
  const std::string file = dir / (name + ".yaml");
  WriteFile(file, yaml);
  const std::string log = dir / (name + ".log");
  ChildProcess daemon = ChildProcess::Start({DriftdBinary(), "run", file, "--http", "off"}, log);
  auto status = daemon.Wait(std::chrono::seconds(240));
  INFO(ReadFile(log));
  REQUIRE(status.has_value());
  CHECK_THAT(ReadFile(log), !Catch::Contains("Sanitizer") && !Catch::Contains("runtime error:"));
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

struct Alert {
  std::string id;
  std::string level;
  std::string model;
  std::string series;
  bool operator==(const Alert&) const = default;
};

std::vector<Alert> AlertsOf(const std::string& topic) {
  std::vector<Alert> alerts;
  simdjson::dom::parser parser;
  for (const Consumed& record : ReadSettled(topic)) {
    simdjson::dom::element root = parser.parse(record.value);
    alerts.push_back({std::string(root["alert_id"].get_string().value()),
                      std::string(root["level"].get_string().value()),
                      std::string(root["model"].get_string().value()),
                      std::string(root["series"].get_string().value())});
  }
  return alerts;
}

// What the test knows of one model's rows that pass the filter.
struct ModelTruth {
  int64_t rows = 0;
  double abs_error_sum = 0;
};

// Three models, keyed by model id, two partitions: "stable" (partition 0) whose error never
// changes; "shifting" (partition 1), whose error grows from its 6000th record on; and shadow
// traffic: a "shadow" deployment (partition 1) that is all shadow, and shadow records of
// "stable" with errors twenty times its own from its 8000th record on. Without the filter the
// shadow rows would make "stable" drift.
struct SeedInput {
  std::string topic = UniqueName("seed-query-logs");
  std::map<std::string, ModelTruth> truth;  // rows that pass model_version != 'shadow'

  explicit SeedInput(Admin& admin) {
    admin.CreateTopic(topic, 2);
    std::mt19937_64 random(20261201);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::normal_distribution<double> noise(0.0, 0.1);
    std::map<int32_t, std::vector<KeyedRecord>> by_partition;
    auto add = [&](int32_t partition, const std::string& model, const std::string& version,
                   int64_t i, double error_shift) {
      const double prediction = uniform(random);
      const double ground_truth = prediction + error_shift + noise(random);
      const std::string value = fmt::format(
          R"({{"model_id":"{}","model_version":"{}","event_time":{},"prediction":{},)"
          R"("ground_truth":{}}})",
          model, version, kStartTimeMs + i, prediction, ground_truth);
      by_partition[partition].push_back({model, value, 0});
      if (version != "shadow") {
        // The value as driftd reads it back from the JSON text.
        double p = 0, g = 0;
        simdjson::dom::parser parser;
        simdjson::dom::element root = parser.parse(value);
        p = double(root["prediction"]);
        g = double(root["ground_truth"]);
        ModelTruth& model_truth = truth[model];
        ++model_truth.rows;
        model_truth.abs_error_sum += std::abs(p - g);
      }
    };
    constexpr int64_t kRows = 16'000;  // per model, one per millisecond of event time
    for (int64_t i = 0; i < kRows; ++i) {
      add(0, "stable", "v3", i, 0.0);
      if (i >= 8'000) add(0, "stable", "shadow", i, 2.0);
      add(1, "shifting", "v7", i, i >= 6'000 ? 0.3 : 0.0);
      if (i % 4 == 0) add(1, "shadow-deployment", "shadow", i, i >= 6'000 ? 2.0 : 0.0);
    }
    for (const auto& [partition, records] : by_partition) ProduceKeyed(topic, partition, records);
  }
};

std::string SeedQueryYaml(const std::string& name, const std::string& input,
                          const std::string& stats, const std::string& alerts,
                          const std::string& checkpoint, int64_t max_offsets, int threads) {
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: model_version, type: string}}
  - {{name: event_time, type: timestamp}}
  - {{name: prediction, type: double}}
  - {{name: ground_truth, type: double}}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: "{bootstrap}"
    subscribe: {input}
    startingOffsets: earliest
    maxOffsetsPerTrigger: {max_offsets}
  malformed: {{policy: drop}}
query:
  where: model_version != 'shadow'
  select:
    - abs(prediction - ground_truth) AS abs_error
  groupBy: [model_id]
  watermark: {{column: event_time, delay: 1 second}}
  aggregates: [count, mean(abs_error)]
drift:
  series: [abs_error, prediction]
  window: 2 seconds
  baseline: {{type: warmup, records: 4000}}
  detectors:
    - {{type: mean_shift}}
  minSamples: 500
sinks:
  - name: stats
    format: kafka
    stream: stats
    outputMode: update
    options: {{kafka.bootstrap.servers: "{bootstrap}", topic: {stats}, keyColumn: model_id}}
  - name: alerts
    format: kafka
    stream: alerts
    options: {{kafka.bootstrap.servers: "{bootstrap}", topic: {alerts}, keyColumn: series}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
threads: {threads}
)",
                     fmt::arg("name", name), fmt::arg("bootstrap", Bootstrap()),
                     fmt::arg("input", input), fmt::arg("stats", stats),
                     fmt::arg("alerts", alerts), fmt::arg("checkpoint", checkpoint),
                     fmt::arg("max_offsets", max_offsets), fmt::arg("threads", threads));
}

// The last statistics row of each model: (count, mean(abs_error)).
std::map<std::string, std::pair<int64_t, double>> FinalStats(const std::string& topic) {
  std::map<std::string, std::pair<int64_t, double>> last;
  simdjson::dom::parser parser;
  for (const Consumed& record : ReadSettled(topic)) {
    simdjson::dom::element root = parser.parse(record.value);
    last[std::string(root["model_id"].get_string().value())] = {
        int64_t(root["count"]), double(root["mean(abs_error)"])};
  }
  return last;
}

TEST_CASE("the seed's query drops shadow traffic and alerts on the model whose error shifts, "
          "whatever the batch size and thread count",
          "[kafka][query][e2e][threads]") {
  Admin admin;
  SeedInput input(admin);
  TempDir dir("driftd-seed-query");
  std::vector<std::vector<Alert>> runs;
  std::vector<std::vector<std::string>> stats_records;  // key and value of each, in order
  for (const auto& [max_offsets, threads] :
       {std::pair{int64_t{1'500}, 1}, std::pair{int64_t{1'500}, 2},
        std::pair{int64_t{100'000}, 2}}) {
    INFO("maxOffsetsPerTrigger " << max_offsets << ", threads " << threads);
    const std::string name = UniqueName("seed-query");
    const std::string stats = UniqueName("seed-query-stats");
    const std::string alerts = UniqueName("seed-query-alerts");
    admin.CreateTopic(stats, 1);
    admin.CreateTopic(alerts, 1);
    REQUIRE(RunToExit(dir,
                      SeedQueryYaml(name, input.topic, stats, alerts, dir / name, max_offsets,
                                    threads),
                      name) == 0);
    std::vector<std::string>& records = stats_records.emplace_back();
    for (const Consumed& record : ReadSettled(stats)) {
      records.push_back(record.key + " " + record.value);
    }

    // Statistics: shadow rows are not counted, and the shadow-only deployment has no row.
    const auto final_stats = FinalStats(stats);
    REQUIRE(final_stats.size() == 2);
    for (const auto& [model, truth] : input.truth) {
      INFO(model);
      REQUIRE(final_stats.count(model) == 1);
      CHECK(final_stats.at(model).first == truth.rows);
      CHECK(final_stats.at(model).second ==
            Approx(truth.abs_error_sum / static_cast<double>(truth.rows)).epsilon(1e-9));
    }
    CHECK(input.truth.at("stable").rows == 16'000);

    // Alerts: abs_error of "shifting" rises to ALERT; its predictions did not change, and
    // neither the stable model nor shadow traffic raises anything.
    const std::vector<Alert> seen = AlertsOf(alerts);
    std::set<std::tuple<std::string, std::string, std::string>> kinds;
    for (const Alert& alert : seen) kinds.insert({alert.model, alert.series, alert.level});
    INFO(fmt::format("{} alert events", seen.size()));
    CHECK(kinds.count({"shifting", "abs_error", "ALERT"}) == 1);
    for (const Alert& alert : seen) {
      CHECK(alert.model == "shifting");
      CHECK(alert.series == "abs_error");
    }
    // The alerts sink keys its records by the column keyColumn names (the series), not by
    // the stream's own key (the model); the stats sink by the model, its first group column.
    for (const Consumed& record : ReadSettled(alerts)) CHECK(record.key == "abs_error");
    for (const Consumed& record : ReadSettled(stats)) {
      CHECK((record.key == "stable" || record.key == "shifting"));
    }
    runs.push_back(seen);
  }
  // The same alerts, ids included, from small and large batches, on one and two threads.
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
  // Batches of the same size give the same statistics records, byte for byte, on one thread
  // and on two.
  REQUIRE(stats_records[0].size() > 10);
  CHECK(stats_records[0] == stats_records[1]);
}

// Records keyed "a", "b", "c" over three partitions with Kafka timestamps one second apart;
// the value says nothing of key, partition or time: only partition 1's records count, grouped
// by key into 10-second windows of their Kafka timestamps.
std::string MetadataYaml(const std::string& name, const std::string& input,
                         const std::string& stats, const std::string& checkpoint,
                         int64_t max_offsets) {
  return fmt::format(R"(name: {name}
schema:
  - {{name: prediction, type: double}}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: "{bootstrap}"
    subscribe: {input}
    startingOffsets: earliest
    maxOffsetsPerTrigger: {max_offsets}
query:
  where: partition = 1
  select:
    - CAST(key AS STRING) AS model
  groupBy: [model]
  window: {{column: timestamp, size: 10 seconds}}
  watermark: {{column: timestamp, delay: 0}}
  aggregates: [count, sum(prediction)]
sinks:
  - name: stats
    format: kafka
    stream: stats
    outputMode: update
    options: {{kafka.bootstrap.servers: "{bootstrap}", topic: {stats}, keyColumn: model}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                     fmt::arg("name", name), fmt::arg("bootstrap", Bootstrap()),
                     fmt::arg("input", input), fmt::arg("stats", stats),
                     fmt::arg("checkpoint", checkpoint), fmt::arg("max_offsets", max_offsets));
}

TEST_CASE("key, partition and timestamp of Kafka records drive groupBy, where and windows",
          "[kafka][query][metadata]") {
  Admin admin;
  const std::string topic = UniqueName("metadata-query");
  admin.CreateTopic(topic, 3);
  // Kafka timestamps of the last hour: older ones fall to the broker's retention (7 days by
  // record time), which would delete the records between the two runs.
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t first_ms = (now_ms / 10'000) * 10'000 - 3'600'000;
  // (key, window start) -> (count, sum) for partition 1, computed here.
  std::map<std::pair<std::string, int64_t>, std::pair<int64_t, double>> expected;
  for (int32_t partition = 0; partition < 3; ++partition) {
    std::vector<KeyedRecord> records;
    for (int i = 0; i < 300; ++i) {
      const std::string key = std::string(1, static_cast<char>('a' + (i * 7 + partition) % 3));
      const int64_t timestamp_ms = first_ms + i * 1'000;
      const double prediction = partition * 100 + i;
      records.push_back({key, fmt::format(R"({{"prediction":{}}})", prediction), timestamp_ms});
      if (partition == 1) {
        auto& [count, sum] = expected[{key, (timestamp_ms / 10'000) * 10'000}];
        ++count;
        sum += prediction;
      }
    }
    ProduceKeyed(topic, partition, records);
  }

  TempDir dir("driftd-metadata-query");
  std::vector<std::map<std::pair<std::string, int64_t>, std::pair<int64_t, double>>> runs;
  for (int64_t max_offsets : {70, 100'000}) {
    INFO("maxOffsetsPerTrigger " << max_offsets);
    const std::string name = UniqueName("metadata-query");
    const std::string stats = UniqueName("metadata-query-stats");
    admin.CreateTopic(stats, 1);
    REQUIRE(RunToExit(dir, MetadataYaml(name, topic, stats, dir / name, max_offsets), name) ==
            0);
    std::map<std::pair<std::string, int64_t>, std::pair<int64_t, double>> last;
    simdjson::dom::parser parser;
    for (const Consumed& record : ReadSettled(stats)) {
      simdjson::dom::element root = parser.parse(record.value);
      const std::string model(root["model"].get_string().value());
      CHECK(record.key == model);
      const std::string start(root["window"]["start"].get_string().value());
      auto micros = ParseIso8601Micros(start);
      REQUIRE(micros);
      last[{model, *micros / 1000}] = {int64_t(root["count"]), double(root["sum(prediction)"])};
    }
    // Every window of partition 1's records, by key: the last one stays open (update mode
    // shows it too), none from partitions 0 and 2.
    CHECK(last == expected);
    runs.push_back(std::move(last));
  }
  CHECK(runs[0] == runs[1]);
}

// availableNow reads what the topic held when the query started: records produced while it
// runs are left for the next run, so a busy topic does not keep it from ending.
TEST_CASE("availableNow reads a topic to where it ended at start, not records produced while "
          "it runs",
          "[kafka][query][available-now]") {
  Admin admin;
  const std::string input = UniqueName("available-now-in");
  const std::string stats = UniqueName("available-now-stats");
  admin.CreateTopic(input, 1);
  admin.CreateTopic(stats, 1);
  constexpr int kAtStart = 200'000;
  // In parts: the producer's queue holds 100,000 records.
  const std::vector<std::string> part(kAtStart / 4, R"({"model":"m","prediction":1})");
  for (int i = 0; i < 4; ++i) Produce(input, 0, part);
  TempDir dir("driftd-available-now");
  const std::string yaml = fmt::format(R"(name: {name}
schema:
  - {{name: model, type: string}}
  - {{name: prediction, type: double}}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: "{bootstrap}"
    subscribe: {input}
    startingOffsets: earliest
    maxOffsetsPerTrigger: 200
query:
  groupBy: [model]
  aggregates: [count]
sinks:
  - name: stats
    format: kafka
    stream: stats
    outputMode: update
    options: {{kafka.bootstrap.servers: "{bootstrap}", topic: {stats}, keyColumn: model}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                                       fmt::arg("name", UniqueName("available-now")),
                                       fmt::arg("bootstrap", Bootstrap()),
                                       fmt::arg("input", input), fmt::arg("stats", stats),
                                       fmt::arg("checkpoint", dir / "checkpoint"));
  WriteFile(dir / "p.yaml", yaml);
  ChildProcess daemon =
      ChildProcess::Start({DriftdBinary(), "run", dir / "p.yaml", "--http", "off"}, dir / "log");
  // Once its first batches are done (its progress log says so), more records come: about 1,000
  // batches of 200 are still to go (15-25 s here).
  REQUIRE(testing::WaitFor(
      [&] { return ReadFile(dir / "log").find(R"("batchId":5,)") != std::string::npos; },
      std::chrono::seconds(60)));
  Produce(input, 0, std::vector<std::string>(50'000, R"({"model":"m","prediction":1})"));
  const bool produced_while_running = !daemon.Exited();
  auto status = daemon.Wait(std::chrono::seconds(240));
  INFO(ReadFile(dir / "log"));
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  // The test means something only if the records came before the daemon had read to the end.
  REQUIRE(produced_while_running);
  const std::vector<Consumed> rows = ReadAll(stats);
  REQUIRE(!rows.empty());
  simdjson::dom::parser parser;
  simdjson::dom::element last = parser.parse(rows.back().value);
  CHECK(int64_t(last["count"]) == kAtStart);
}

}  // namespace
}  // namespace driftd
