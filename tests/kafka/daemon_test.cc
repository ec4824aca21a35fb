// Exactly-once through the daemon against the real broker: `driftd run` on the seed pipeline
// (deploy/examples/kafka-drift.yaml, configured by environment) reads generated inference logs
// from a topic and writes per-model stats and drift alerts to two topics. The tests read those
// topics as a user would, with isolation.level=read_committed, and check what the user would
// notice: right numbers, the right alert, and no record lost or repeated across SIGKILLs, a
// zombie instance, and fatal producer errors.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include <simdjson.h>

#include "connectors/inference_generator.h"
#include "state/checkpoint_store.h"
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
using Clock = std::chrono::steady_clock;
struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const {
    rd_kafka_topic_partition_list_destroy(list);
  }
};
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter>;

constexpr int64_t kStartTimeMs = 1'795'000'000'000;
constexpr int kFeatures = 8;

std::string SeedPipeline() {
  return std::string(DRIFTD_SOURCE_DIR) + "/deploy/examples/kafka-drift.yaml";
}

// What the test knows independently of driftd about one model's records.
struct ModelTruth {
  std::vector<double> predictions;
  std::vector<std::vector<double>> features;  // [feature][record]

  int64_t count() const { return static_cast<int64_t>(predictions.size()); }
};

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

double SampleStddev(const std::vector<double>& values) {
  const double mean = Mean(values);
  double m2 = 0;
  for (double v : values) m2 += (v - mean) * (v - mean);
  return std::sqrt(m2 / static_cast<double>(values.size() - 1));
}

struct InputSpec {
  int models = 4;
  int64_t rows = 0;
  int partitions = 3;
  std::string drift;  // InferenceGenerator scenarios
};

// A topic of generated inference logs, all produced before any daemon starts (so that batch
// boundaries under maxOffsetsPerTrigger depend on offsets only). Row r goes to partition
// r % partitions.
struct InferenceInput {
  std::string topic = UniqueName("inference-logs");
  InputSpec spec;
  std::map<int32_t, int64_t> ends;
  std::map<std::string, ModelTruth> truth;  // by model id, from the records as produced

  InferenceInput(Admin& admin, InputSpec input) : spec(std::move(input)) {
    admin.CreateTopic(topic, spec.partitions);
    InferenceGeneratorOptions options;
    options.models = spec.models;
    options.features = kFeatures;
    options.rows_per_second = 1000;
    options.start_time_ms = kStartTimeMs;
    auto scenarios = ParseDriftScenarios(spec.drift);
    REQUIRE(scenarios);
    options.drift = std::move(*scenarios);
    auto generator = InferenceGenerator::Create(options);
    REQUIRE(generator);
    std::vector<std::vector<std::string>> by_partition(spec.partitions);
    simdjson::dom::parser parser;
    for (int64_t row = 0; row < spec.rows; ++row) {
      std::string record;
      generator->AppendRecord(static_cast<uint64_t>(row), record);
      simdjson::dom::element parsed = parser.parse(record);
      ModelTruth& model = truth[std::string(parsed["model_id"].get_string().value())];
      model.predictions.push_back(double(parsed["prediction"]));
      simdjson::dom::array features = parsed["feature_vector"].get_array();
      model.features.resize(features.size());
      size_t f = 0;
      for (simdjson::dom::element value : features) model.features[f++].push_back(double(value));
      by_partition[row % spec.partitions].push_back(std::move(record));
    }
    for (int p = 0; p < spec.partitions; ++p) {
      Produce(topic, p, by_partition[p]);
      ends[p] = static_cast<int64_t>(by_partition[p].size());
    }
  }
};

// One deployment of the seed pipeline: its name (consumer group driftd-<name>, transactional.id
// driftd-<name>), its output topics and its checkpoint.
struct Deployment {
  std::string name;
  std::string stats = UniqueName("driftd-stats");
  std::string alerts = UniqueName("driftd-alerts");
  std::string progress = UniqueName("driftd-progress");
  TempDir checkpoint_root{"driftd-keo"};
  std::map<std::string, std::string> env;
  /// The pipeline file Start runs by default.
  std::string pipeline = SeedPipeline();

  Deployment(Admin& admin, const InferenceInput& input, std::string_view prefix,
             int64_t max_offsets_per_trigger)
      : name(UniqueName(prefix)) {
    admin.CreateTopic(stats, 2);
    admin.CreateTopic(alerts, 1);
    env = {
        {"PIPELINE_NAME", name},
        {"KAFKA_BROKERS", Bootstrap()},
        {"INPUT_TOPIC", input.topic},
        {"STATS_TOPIC", stats},
        {"ALERTS_TOPIC", alerts},
        {"PROGRESS_TOPIC", progress},
        {"TRIGGER_INTERVAL", "0"},
        {"MAX_OFFSETS_PER_TRIGGER", std::to_string(max_offsets_per_trigger)},
        // Windows and watermark to the test input's scale (seconds of event time).
        {"DRIFT_WINDOW", "2 seconds"},
        {"WATERMARK_DELAY", "1 second"},
        {"DRIFTD_CHECKPOINT_DIR", checkpoint_root.path().string()},
    };
  }

  std::string group() const { return "driftd-" + name; }
  std::string checkpoint() const { return checkpoint_root / name; }

  ChildProcess Start(const std::string& log, const std::map<std::string, std::string>& extra = {},
                     const std::string& file = "") const {
    std::map<std::string, std::string> all = env;
    for (const auto& [key, value] : extra) all[key] = value;
    return ChildProcess::Start(
        {DriftdBinary(), "run", file.empty() ? pipeline : file, "--http", "off"}, log, all);
  }
  /// Runs the seed pipeline with `threads: N` (a copy of the file in the checkpoint root).
  void UseThreads(int threads) {
    pipeline = checkpoint_root / fmt::format("kafka-drift-{}-threads.yaml", threads);
    WriteFile(pipeline, ReadFile(SeedPipeline()) + fmt::format("\nthreads: {}\n", threads));
  }
};

// A daemon that ended by itself must not have done so through a sanitizer report (in
// sanitizer builds a failing exit code would hide one).
void CheckNoSanitizerReport(const std::string& output) {
  CHECK_THAT(output, !Catch::Contains("Sanitizer") && !Catch::Contains("runtime error:"));
}

// Batches a daemon's life logged (one progress record per batch).
int64_t BatchesLogged(const std::string& log) {
  const std::string text = ReadFile(log);
  int64_t batches = 0;
  for (size_t at = text.find("progress {"); at != std::string::npos;
       at = text.find("progress {", at + 1)) {
    ++batches;
  }
  return batches;
}

// Whether the deployment's consumer group has committed the end of every input partition: the
// transaction of the last batch is committed. A broker that does not answer in time (it is
// shared and may be busy) means "not yet".
bool Drained(const Deployment& deployment, const InferenceInput& input) {
  Client consumer = MakeClient(RD_KAFKA_CONSUMER, {{"group.id", deployment.group()}});
  PartitionList list{rd_kafka_topic_partition_list_new(static_cast<int>(input.ends.size()))};
  for (const auto& [partition, end] : input.ends) {
    rd_kafka_topic_partition_list_add(list.get(), input.topic.c_str(), partition);
  }
  bool drained =
      rd_kafka_committed(consumer.get(), list.get(), 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR;
  for (int i = 0; drained && i < list->cnt; ++i) {
    drained = list->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
              list->elems[i].offset == input.ends.at(list->elems[i].partition);
  }
  rd_kafka_consumer_close(consumer.get());
  return drained;
}

// Polls `condition` every 200 ms until it holds, `daemon` exits, or `timeout` passes.
bool AwaitWhileRunning(ChildProcess& daemon, const std::function<bool()>& condition,
                       std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    if (daemon.Exited()) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

// SIGTERM, then the exit within `timeout`: the exit code, or -1 after a signal or a timeout.
int Terminate(ChildProcess& daemon, std::chrono::seconds timeout = std::chrono::seconds(30)) {
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(timeout);
  if (!status) return -1;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

// Runs the deployment until the input is drained, then stops it with SIGTERM.
void RunToEnd(Admin& /*admin*/, const Deployment& deployment, const InferenceInput& input,
              const std::string& log) {
  ChildProcess daemon = deployment.Start(log);
  bool drained = AwaitWhileRunning(
      daemon, [&] { return Drained(deployment, input); }, std::chrono::seconds(100));
  INFO(ReadFile(log));
  REQUIRE(drained);
  REQUIRE(Terminate(daemon) == 0);
  CheckNoSanitizerReport(ReadFile(log));
}

// Waits until no transaction is open on `topic`, so read_committed sees everything committed.
void AwaitSettled(const std::string& topic) {
  Client committed = MakeClient(RD_KAFKA_CONSUMER, {{"isolation.level", "read_committed"}});
  Client uncommitted = MakeClient(RD_KAFKA_CONSUMER, {{"isolation.level", "read_uncommitted"}});
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(committed.get(), topic.c_str(), nullptr);
  const rd_kafka_metadata_t* metadata = nullptr;
  REQUIRE(rd_kafka_metadata(committed.get(), 0, rkt, &metadata, 10'000) ==
          RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_destroy(rkt);
  std::vector<int32_t> partitions;
  for (int p = 0; p < metadata->topics[0].partition_cnt; ++p) {
    partitions.push_back(metadata->topics[0].partitions[p].id);
  }
  rd_kafka_metadata_destroy(metadata);
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (int32_t partition : partitions) {
    for (;;) {
      int64_t low = 0, stable = 0, end = 0;
      REQUIRE(rd_kafka_query_watermark_offsets(committed.get(), topic.c_str(), partition, &low,
                                               &stable, 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
      REQUIRE(rd_kafka_query_watermark_offsets(uncommitted.get(), topic.c_str(), partition, &low,
                                               &end, 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
      if (stable >= end) break;
      REQUIRE(Clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

// (key, value) records of a topic as read_committed sees them, in offset order per partition.
using PartitionedRecords = std::map<int32_t, std::vector<std::pair<std::string, std::string>>>;

PartitionedRecords ReadCommittedByPartition(const std::string& topic) {
  AwaitSettled(topic);
  PartitionedRecords out;
  std::vector<Consumed> records = ReadAll(topic, "read_committed");
  std::stable_sort(records.begin(), records.end(), [](const Consumed& a, const Consumed& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
  for (const Consumed& record : records) {
    out[record.partition].emplace_back(record.key, record.value);
  }
  return out;
}

std::vector<std::string> ValuesIn(const PartitionedRecords& records) {
  std::vector<std::string> values;
  for (const auto& [partition, list] : records) {
    for (const auto& [key, value] : list) values.push_back(value);
  }
  return values;
}

// "" when equal, else where `actual` first departs from `expected`.
std::string Difference(const PartitionedRecords& actual, const PartitionedRecords& expected) {
  std::set<int32_t> partitions;
  for (const auto& [partition, list] : actual) partitions.insert(partition);
  for (const auto& [partition, list] : expected) partitions.insert(partition);
  static const std::vector<std::pair<std::string, std::string>> kNone;
  for (int32_t partition : partitions) {
    auto a = actual.find(partition);
    auto e = expected.find(partition);
    const auto& got = a == actual.end() ? kNone : a->second;
    const auto& want = e == expected.end() ? kNone : e->second;
    for (size_t i = 0; i < std::max(got.size(), want.size()); ++i) {
      if (i < got.size() && i < want.size() && got[i] == want[i]) continue;
      return fmt::format("partition {} record {}: got {}, expected {} ({} records, expected {})",
                         partition, i, i < got.size() ? got[i].first + " " + got[i].second : "none",
                         i < want.size() ? want[i].first + " " + want[i].second : "none",
                         got.size(), want.size());
    }
  }
  return "";
}

size_t Count(const PartitionedRecords& records) { return ValuesIn(records).size(); }

// The fields of an alert event the tests look at.
struct AlertEvent {
  std::string id;
  std::string level;
  std::string model;
  std::string series;
};

std::vector<AlertEvent> ParseAlerts(const PartitionedRecords& records) {
  std::vector<AlertEvent> alerts;
  simdjson::dom::parser parser;
  for (const std::string& json : ValuesIn(records)) {
    simdjson::dom::element root = parser.parse(json);
    alerts.push_back({std::string(root["alert_id"].get_string().value()),
                      std::string(root["level"].get_string().value()),
                      std::string(root["model"].get_string().value()),
                      std::string(root["series"].get_string().value())});
  }
  return alerts;
}

// Checks that a deployment's read_committed output holds every batch once: the progress
// records (one per committed transaction) number the batches 0, 1, 2, ... without a repeat or
// a gap, each model's running count only grows and ends at the number of its input records,
// and no alert appears twice.
void RequireEachBatchOnce(const Deployment& deployment, const InferenceInput& input) {
  simdjson::dom::parser parser;
  std::vector<int64_t> batch_ids;
  for (const std::string& json : ValuesIn(ReadCommittedByPartition(deployment.progress))) {
    batch_ids.push_back(int64_t(parser.parse(json)["batchId"]));
  }
  REQUIRE_FALSE(batch_ids.empty());
  std::vector<int64_t> expected(batch_ids.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<int64_t>(i);
  CHECK(batch_ids == expected);

  std::map<std::string, std::vector<int64_t>> counts;
  for (const auto& [partition, list] : ReadCommittedByPartition(deployment.stats)) {
    for (const auto& [key, json] : list)
      counts[key].push_back(int64_t(parser.parse(json)["count"]));
  }
  REQUIRE(counts.size() == input.truth.size());
  for (const auto& [model, series] : counts) {
    INFO(model << " counts " << fmt::format("{}", fmt::join(series, ",")));
    CHECK(std::adjacent_find(series.begin(), series.end(), std::greater_equal<int64_t>()) ==
          series.end());
    CHECK(series.back() == input.truth.at(model).count());
  }

  std::set<std::string> ids;
  for (const AlertEvent& alert : ParseAlerts(ReadCommittedByPartition(deployment.alerts))) {
    CHECK(ids.insert(alert.id).second);
  }
}

std::map<std::string, std::string> StateOf(const std::string& checkpoint) {
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(checkpoint, options);
  INFO((store ? "" : store.error().message()));
  REQUIRE(store);
  std::map<std::string, std::string> state;
  REQUIRE((*store)->ScanState([&](std::string_view key, std::string_view value) {
    state.emplace(std::string(key), std::string(value));
  }));
  return state;
}

bool Near(double actual, double expected) {
  return std::abs(actual - expected) <= 1e-9 * std::max(1.0, std::abs(expected));
}

TEST_CASE(
    "the seed pipeline turns inference logs on Kafka into per-model stats and one "
    "drifted series' alert on Kafka",
    "[kafka][daemon]") {
  Admin admin;
  // 12000 records per model, 1000 per second of event time: model-2's feature 3 moves by one
  // sigma after 30 s, about 7500 records into the model (the warmup baseline is its first 5000).
  InferenceInput input(admin, {.models = 4,
                               .rows = 48'000,
                               .partitions = 3,
                               .drift = "model-2 feature 3 shifts by 1 sigma after 30 s"});
  Deployment deployment(admin, input, "seed", 10'000);
  TempDir logs("driftd-keo-logs");
  RunToEnd(admin, deployment, input, logs / "driftd.log");

  // The last stats record of each model (update mode) holds the totals.
  std::map<std::string, std::string> last;
  for (const auto& [partition, list] : ReadCommittedByPartition(deployment.stats)) {
    for (const auto& [key, json] : list) last[key] = json;
  }
  REQUIRE(last.size() == input.truth.size());
  simdjson::dom::parser parser;
  for (const auto& [model, truth] : input.truth) {
    INFO(model << ": " << last[model]);
    REQUIRE(last.count(model) == 1);
    simdjson::dom::element row = parser.parse(last[model]);
    CHECK(std::string(row["model_id"].get_string().value()) == model);
    CHECK(int64_t(row["count"]) == truth.count());
    CHECK(Near(double(row["mean(prediction)"]), Mean(truth.predictions)));
    CHECK(Near(double(row["stddev(prediction)"]), SampleStddev(truth.predictions)));
    REQUIRE(truth.features.size() == static_cast<size_t>(kFeatures));
    for (int f = 0; f < kFeatures; ++f) {
      CHECK(Near(double(row[fmt::format("mean(feature_vector[{}])", f)]), Mean(truth.features[f])));
    }
  }

  std::vector<AlertEvent> alerts = ParseAlerts(ReadCommittedByPartition(deployment.alerts));
  std::string described;
  for (const AlertEvent& a : alerts) described += a.level + " " + a.model + " " + a.series + "\n";
  INFO(described);
  int raised = 0;
  for (const AlertEvent& alert : alerts) {
    if (alert.level != "ALERT") continue;
    ++raised;
    CHECK(alert.model == "model-2");
    CHECK(alert.series == "feature_vector[3]");
  }
  CHECK(raised >= 1);
  RequireEachBatchOnce(deployment, input);
}

TEST_CASE(
    "the daemon killed with SIGKILL 20+ times writes exactly the records and state of a "
    "crash-free run",
    "[kafka][daemon][crash][threads]") {
  Admin admin;
  // 8000 records per model; model-1's feature 2 moves after 10 s (its record 5000), so the
  // output holds alerts as well as stats. 100 records per batch: 160 batches.
  InferenceInput input(admin, {.models = 2,
                               .rows = 16'000,
                               .partitions = 3,
                               .drift = "model-1 feature 2 shifts by 1 sigma after 10 s"});
  TempDir logs("driftd-keo-logs");

  // The reference runs on one thread, the crashed lives on two.
  Deployment reference(admin, input, "reference", 100);
  reference.UseThreads(1);
  RunToEnd(admin, reference, input, logs / "reference.log");
  const PartitionedRecords reference_stats = ReadCommittedByPartition(reference.stats);
  const PartitionedRecords reference_alerts = ReadCommittedByPartition(reference.alerts);
  REQUIRE(Count(reference_stats) >= 160);
  REQUIRE(Count(reference_alerts) >= 1);

  Deployment crashed(admin, input, "crashed", 100);
  crashed.UseThreads(2);
  // Lives that stop themselves inside a delivery, after the batch is committed to the
  // checkpoint: before commit_transaction (the batch must be delivered again) and after it (it
  // must not be).
  const std::map<int, std::string> fault_lives = {
      {2, "before_commit"}, {7, "after_commit"}, {12, "before_commit"}, {17, "before_commit"}};
  std::mt19937 random(20261129);
  int kills = 0;
  int faults = 0;
  for (int life = 0; life < 120 && (kills < 25 || faults < 4); ++life) {
    if (life % 5 == 0 && Drained(crashed, input)) break;
    const std::string log = logs / fmt::format("life-{}.log", life);
    auto fault = fault_lives.find(life);
    if (fault != fault_lives.end()) {
      ChildProcess daemon = crashed.Start(log, {{"DRIFTD_KAFKA_SINK_FAULT", fault->second}});
      auto status = daemon.Wait(std::chrono::seconds(60));
      INFO("life " << life << " (" << fault->second << "): " << ReadFile(log));
      REQUIRE(status);
      REQUIRE(WIFSIGNALED(*status));
      REQUIRE(WTERMSIG(*status) == SIGKILL);
      ++faults;
      continue;
    }
    ChildProcess daemon = crashed.Start(log);
    if (life % 4 == 3) {
      // Blind: at a random moment from the start, while it recovers or soon after.
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(random)));
    } else {
      // After this life has committed and delivered a batch, plus a random delay.
      bool progressed = testing::WaitFor([&] { return BatchesLogged(log) > 0 || daemon.Exited(); },
                                         std::chrono::seconds(60));
      INFO("life " << life << ": " << ReadFile(log));
      REQUIRE(progressed);
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 60)(random)));
    }
    if (daemon.Exited()) {
      INFO("life " << life << " ended by itself: " << ReadFile(log));
      FAIL("the daemon is not meant to stop before SIGTERM");
    }
    daemon.Signal(SIGKILL);
    REQUIRE(daemon.Wait(std::chrono::seconds(10)));
    ++kills;
  }
  // Every delivery stopped before its commit was finished by a later life.
  int redelivered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(logs.path())) {
    const std::string text = ReadFile(entry.path());
    for (size_t at = text.find("finishing delivery"); at != std::string::npos;
         at = text.find("finishing delivery", at + 1)) {
      ++redelivered;
    }
  }
  INFO("kills " << kills << ", fault lives " << faults << ", redeliveries " << redelivered);
  CHECK(kills >= 20);
  CHECK(faults == 4);
  CHECK(redelivered >= 3);
  RunToEnd(admin, crashed, input, logs / "final.log");

  CHECK(Difference(ReadCommittedByPartition(crashed.stats), reference_stats) == "");
  CHECK(Difference(ReadCommittedByPartition(crashed.alerts), reference_alerts) == "");
  CHECK(StateOf(crashed.checkpoint()) == StateOf(reference.checkpoint()));
  RequireEachBatchOnce(crashed, input);
}

// The first instance hangs (SIGSTOP); its checkpoint is taken over as it is, as a failover of
// a replicated volume would, and a second instance starts on it. The first then wakes up, tries
// to deliver, learns that it was fenced and stops with `first_says` in its log; the second
// drains the input.
void FailOverPausedFirst(Deployment& deployment, const InferenceInput& input, const TempDir& logs,
                         ChildProcess& first, std::string_view first_says) {
  first.Signal(SIGSTOP);
  TempDir failover("driftd-keo-failover");
  std::filesystem::copy(deployment.checkpoint(), failover / deployment.name,
                        std::filesystem::copy_options::recursive);
  // Same name, topics and transactional.id; the checkpoint copy.
  const std::string second_log = logs / "second.log";
  ChildProcess second =
      deployment.Start(second_log, {{"DRIFTD_CHECKPOINT_DIR", failover.path().string()}});
  REQUIRE(testing::WaitFor([&] { return BatchesLogged(second_log) >= 1 || second.Exited(); },
                           std::chrono::seconds(60)));
  REQUIRE_FALSE(second.Exited());

  first.Signal(SIGCONT);
  auto status = first.Wait(std::chrono::seconds(60));
  const std::string first_output = ReadFile(logs / "first.log");
  INFO(first_output);
  REQUIRE(status);
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) != 0);
  CHECK_THAT(first_output, Catch::Contains("fenced") && Catch::Contains(std::string(first_says)));
  CheckNoSanitizerReport(first_output);

  bool drained = AwaitWhileRunning(
      second, [&] { return Drained(deployment, input); }, std::chrono::seconds(100));
  INFO(ReadFile(second_log));
  REQUIRE(drained);
  CHECK(Terminate(second) == 0);
}

TEST_CASE(
    "a second daemon on the same pipeline is refused or fences the first, and no batch "
    "is delivered twice",
    "[kafka][daemon][zombie]") {
  Admin admin;
  InferenceInput input(admin, {.models = 2, .rows = 12'000, .partitions = 2, .drift = ""});
  Deployment deployment(admin, input, "zombie", 100);
  TempDir logs("driftd-keo-logs");
  const std::string first_log = logs / "first.log";
  ChildProcess first = deployment.Start(first_log);
  REQUIRE(testing::WaitFor([&] { return BatchesLogged(first_log) >= 3 || first.Exited(); },
                           std::chrono::seconds(60)));
  REQUIRE_FALSE(first.Exited());

  SECTION("on the same checkpoint, the second is refused") {
    const std::string second_log = logs / "second.log";
    ChildProcess second = deployment.Start(second_log);
    auto status = second.Wait(std::chrono::seconds(60));
    INFO(ReadFile(second_log));
    REQUIRE(status);
    REQUIRE(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) != 0);
    CHECK_THAT(ReadFile(second_log), Catch::Contains("lock", Catch::CaseSensitive::No));
    CheckNoSanitizerReport(ReadFile(second_log));
    CHECK_FALSE(first.Exited());
    bool drained = AwaitWhileRunning(
        first, [&] { return Drained(deployment, input); }, std::chrono::seconds(100));
    INFO(ReadFile(first_log));
    REQUIRE(drained);
    CHECK(Terminate(first) == 0);
  }

  SECTION("on a copy of its checkpoint (a failover), the second fences the paused first") {
    FailOverPausedFirst(deployment, input, logs, first, "fenced");
  }
  RequireEachBatchOnce(deployment, input);
}

TEST_CASE(
    "a paused daemon taken over on a copy of its checkpoint stops even when the broker does not "
    "say fenced, and fences nobody",
    "[kafka][daemon][zombie]") {
  // The broker may answer a producer fenced while its transaction was open with
  // INVALID_TXN_STATE, which on its own asks for a new producer; a new producer's
  // init_transactions would fence the instance that took over. fence_as_txn_state makes the
  // first take its fencing error for such an answer.
  Admin admin;
  InferenceInput input(admin, {.models = 2, .rows = 12'000, .partitions = 2, .drift = ""});
  Deployment deployment(admin, input, "zombie-txn-state", 100);
  TempDir logs("driftd-keo-logs");
  ChildProcess first =
      deployment.Start(logs / "first.log", {{"DRIFTD_KAFKA_SINK_FAULT", "fence_as_txn_state"}});
  REQUIRE(testing::WaitFor([&] { return BatchesLogged(logs / "first.log") >= 3 || first.Exited(); },
                           std::chrono::seconds(60)));
  REQUIRE_FALSE(first.Exited());
  FailOverPausedFirst(deployment, input, logs, first, "this one had committed up to batch");
  CHECK_THAT(ReadFile(logs / "first.log"), !Catch::Contains("producer replaced"));
  RequireEachBatchOnce(deployment, input);
}

// Records of `records` from the `skip`-th of each partition on.
PartitionedRecords After(const PartitionedRecords& records, const std::map<int32_t, size_t>& skip) {
  PartitionedRecords out;
  for (const auto& [partition, list] : records) {
    auto from = skip.find(partition);
    size_t first = from == skip.end() ? 0 : std::min(from->second, list.size());
    out[partition].assign(list.begin() + static_cast<std::ptrdiff_t>(first), list.end());
  }
  return out;
}

TEST_CASE(
    "a pipeline started over with a deleted checkpoint delivers all of its batches, even those "
    "numbered like the old checkpoint's",
    "[kafka][daemon][checkpoint]") {
  Admin admin;
  InferenceInput first_input(admin, {.models = 2, .rows = 3'000, .partitions = 2, .drift = ""});
  InferenceInput second_input(admin, {.models = 2, .rows = 2'000, .partitions = 2, .drift = ""});
  TempDir logs("driftd-keo-logs");

  // What a fresh pipeline writes for the second input.
  Deployment reference(admin, second_input, "reset-reference", 100);
  RunToEnd(admin, reference, second_input, logs / "reference.log");
  const PartitionedRecords reference_stats = ReadCommittedByPartition(reference.stats);
  REQUIRE(Count(reference_stats) >= 20);

  // The first checkpoint delivers 30 batches.
  Deployment deployment(admin, first_input, "reset", 100);
  RunToEnd(admin, deployment, first_input, logs / "first.log");
  std::map<int32_t, size_t> first_run;
  for (const auto& [partition, list] : ReadCommittedByPartition(deployment.stats)) {
    first_run[partition] = list.size();
  }

  // An operator resets the pipeline and points it at new input. The new checkpoint's batch 0
  // is committed, then its delivery dies before commit_transaction: recovery must deliver it,
  // although the newest progress record under the same transactional.id says batch 29 (of the
  // old checkpoint) was delivered.
  std::filesystem::remove_all(deployment.checkpoint());
  deployment.env["INPUT_TOPIC"] = second_input.topic;
  {
    const std::string log = logs / "crash.log";
    ChildProcess daemon = deployment.Start(log, {{"DRIFTD_KAFKA_SINK_FAULT", "before_commit"}});
    auto status = daemon.Wait(std::chrono::seconds(60));
    INFO(ReadFile(log));
    REQUIRE(status);
    REQUIRE(WIFSIGNALED(*status));
    REQUIRE(WTERMSIG(*status) == SIGKILL);
  }
  RunToEnd(admin, deployment, second_input, logs / "second.log");
  CHECK_THAT(ReadFile(logs / "second.log"), Catch::Contains("batch 0: finishing delivery"));

  CHECK(Difference(After(ReadCommittedByPartition(deployment.stats), first_run), reference_stats) ==
        "");
  // The progress records: the old checkpoint's batches, then the new one's, each from 0 on.
  simdjson::dom::parser parser;
  std::vector<std::string> checkpoints;
  std::map<std::string, std::vector<int64_t>> batches;
  for (const std::string& json : ValuesIn(ReadCommittedByPartition(deployment.progress))) {
    simdjson::dom::element record = parser.parse(json);
    std::string checkpoint(record["checkpoint"].get_string().value());
    if (batches.count(checkpoint) == 0) checkpoints.push_back(checkpoint);
    batches[checkpoint].push_back(int64_t(record["batchId"]));
  }
  REQUIRE(checkpoints.size() == 2);
  // The id is the one in the new checkpoint's metadata.
  {
    CheckpointOptions options;
    options.read_only = true;
    auto store = OpenCheckpointStore(deployment.checkpoint(), options);
    REQUIRE(store);
    auto metadata = (*store)->ReadMetadata();
    REQUIRE(metadata);
    REQUIRE(*metadata);
    CHECK((*metadata)->checkpoint_id.size() == 32);
    CHECK((*metadata)->checkpoint_id == checkpoints[1]);
  }
  CHECK(checkpoints[0].size() == 32);
  for (const std::string& checkpoint : checkpoints) {
    const std::vector<int64_t>& ids = batches[checkpoint];
    INFO("checkpoint " << checkpoint << ": " << fmt::format("{}", fmt::join(ids, ",")));
    std::vector<int64_t> expected(ids.size());
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<int64_t>(i);
    CHECK(ids == expected);
  }
  CHECK(batches[checkpoints[0]].size() == 30);
  CHECK(batches[checkpoints[1]].size() == 20);
}

TEST_CASE("a pipeline that died with a transaction open does not delay another pipeline's start",
          "[kafka][daemon][progress]") {
  Admin admin;
  InferenceInput input(admin, {.models = 2, .rows = 2'000, .partitions = 2, .drift = ""});
  TempDir logs("driftd-keo-logs");
  // Both pipelines leave progressTopic unset: each gets the default topic of its own.
  Deployment dead(admin, input, "dead", 100);
  Deployment next(admin, input, "next", 100);
  for (Deployment* deployment : {&dead, &next}) {
    deployment->env.erase("PROGRESS_TOPIC");
    deployment->progress = "driftd-progress." + deployment->name;
  }

  // The first dies inside its batch 1's transaction, which stays open on the broker for
  // transaction.timeout.ms (60 s) since nobody with its transactional.id comes back.
  {
    const std::string log = logs / "dead.log";
    ChildProcess daemon = dead.Start(log, {{"DRIFTD_KAFKA_SINK_FAULT", "before_commit@1"}});
    auto status = daemon.Wait(std::chrono::seconds(60));
    INFO(ReadFile(log));
    REQUIRE(status);
    REQUIRE(WIFSIGNALED(*status));
    REQUIRE(WTERMSIG(*status) == SIGKILL);
  }
  CHECK(ReadAll(dead.progress, "read_uncommitted").size() == 2);

  // The other starts and finishes its input long before that transaction times out.
  const auto start = Clock::now();
  const std::string log = logs / "next.log";
  ChildProcess daemon = next.Start(log);
  bool drained = AwaitWhileRunning(
      daemon, [&] { return Drained(next, input); }, std::chrono::seconds(25));
  const auto took = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
  INFO(ReadFile(log));
  INFO("drained after " << took.count() << " s");
  CHECK(drained);
  CHECK(Terminate(daemon) == 0);
  CheckNoSanitizerReport(ReadFile(log));
  RequireEachBatchOnce(next, input);
}

TEST_CASE("a fatal producer error stops the daemon with a non-zero exit and a clear message",
          "[kafka][daemon][fatal]") {
  Admin admin;
  InferenceInput input(admin, {.models = 2, .rows = 4'000, .partitions = 2, .drift = ""});
  Deployment deployment(admin, input, "fatal", 200);
  TempDir logs("driftd-keo-logs");

  SECTION("a fatal error in the middle of a run; a restart then finishes the input once") {
    const std::string log = logs / "fatal.log";
    ChildProcess daemon = deployment.Start(log, {{"DRIFTD_KAFKA_SINK_FAULT", "fatal@3"}});
    // Retrying a dead producer's batch would take the executor's whole backoff (over 30 s).
    auto status = daemon.Wait(std::chrono::seconds(20));
    const std::string output = ReadFile(log);
    INFO(output);
    REQUIRE(status);
    REQUIRE(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) != 0);
    CHECK_THAT(output, Catch::Contains("fatal producer error"));
    CHECK_THAT(output, Catch::Contains("batch 3"));
    CheckNoSanitizerReport(output);
    CHECK(BatchesLogged(log) == 3);

    RunToEnd(admin, deployment, input, logs / "restart.log");
    RequireEachBatchOnce(deployment, input);
  }

  SECTION("a fatal error that is not fencing costs only the producer; the daemon goes on") {
    // INVALID_TXN_STATE, as the broker answers after an outage outlasted the transaction
    // timeout, just before batch 3's commit: a new producer aborts batch 3's transaction and
    // delivers the batch again.
    const std::string log = logs / "txn-state.log";
    ChildProcess daemon = deployment.Start(log, {{"DRIFTD_KAFKA_SINK_FAULT", "fatal_txn_state@3"}});
    bool drained = AwaitWhileRunning(
        daemon, [&] { return Drained(deployment, input); }, std::chrono::seconds(60));
    const std::string output = ReadFile(log);
    INFO(output);
    CHECK(drained);
    CHECK(Terminate(daemon) == 0);
    CHECK_THAT(output, Catch::Contains("INVALID_TXN_STATE") &&
                           Catch::Contains("producer replaced") &&
                           Catch::Contains("batch 3 is delivered again"));
    CheckNoSanitizerReport(output);
    RequireEachBatchOnce(deployment, input);
  }

  SECTION("a commit that gave up (its retries spent in an outage) costs only the producer") {
    // The transaction stays open: a new producer's init_transactions ends it, and batch 3 is
    // delivered again, once.
    const std::string log = logs / "gives-up.log";
    ChildProcess daemon = deployment.Start(log, {{"DRIFTD_KAFKA_SINK_FAULT", "commit_gives_up@3"}});
    bool drained = AwaitWhileRunning(
        daemon, [&] { return Drained(deployment, input); }, std::chrono::seconds(60));
    const std::string output = ReadFile(log);
    INFO(output);
    CHECK(drained);
    CHECK(Terminate(daemon) == 0);
    CHECK_THAT(output, Catch::Contains("retries spent") && Catch::Contains("producer replaced") &&
                           Catch::Contains("batch 3 is delivered again"));
    CheckNoSanitizerReport(output);
    RequireEachBatchOnce(deployment, input);
  }

  SECTION("a transaction timeout the broker refuses stops the daemon at start") {
    // The broker caps transaction.timeout.ms (transaction.max.timeout.ms, 15 minutes).
    std::string yaml = ReadFile(SeedPipeline());
    const std::string sink_servers =
        "      kafka.bootstrap.servers: ${KAFKA_BROKERS:-localhost:9092}\n";
    size_t replaced = 0;
    for (size_t at = yaml.find(sink_servers); at != std::string::npos;
         at = yaml.find(sink_servers, at + 1)) {
      yaml.insert(at + sink_servers.size(), "      kafka.transaction.timeout.ms: 3600000\n");
      ++replaced;
    }
    REQUIRE(replaced == 2);
    const std::string pipeline = logs / "refused.yaml";
    WriteFile(pipeline, yaml);
    const std::string log = logs / "refused.log";
    ChildProcess daemon = deployment.Start(log, {}, pipeline);
    auto status = daemon.Wait(std::chrono::seconds(20));
    const std::string output = ReadFile(log);
    INFO(output);
    REQUIRE(status);
    REQUIRE(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) != 0);
    CHECK_THAT(output, Catch::Contains("init_transactions"));
    CheckNoSanitizerReport(output);
    CHECK(BatchesLogged(log) == 0);
  }
}

}  // namespace
}  // namespace driftd
