// One answer however the topic is split: partition-aware execution and scale-out, through the
// daemon against the real broker. Every model's records are in every partition (or, for
// record-count windows, each model in one partition); the tests read the outputs as a user
// would (read_committed) and compare what a user would compare: the alerts (ids, levels,
// windows) and the final statistics of every window.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <simdjson.h>

#include "connectors/inference_generator.h"
#include "connectors/kafka/kafka_group.h"
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

constexpr int64_t kStartTimeMs = 1'796'000'000'000;

// The pipeline every test runs: per-model statistics of 10 s event-time windows (append: each
// window once, final) and drift on them, or on record-count windows (RECORD_WINDOWS=1).
std::string PipelineYaml(bool event_time) {
  return fmt::format(R"(name: ${{PIPELINE_NAME}}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: feature_vector, type: array<double>}}
  - {{name: prediction, type: double}}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: ${{KAFKA_BROKERS}}
    subscribe: ${{INPUT_TOPIC}}
    startingOffsets: earliest
    maxOffsetsPerTrigger: ${{MAX_OFFSETS}}
query:
  groupBy: [model_id]
{query}
drift:
  series: [feature_vector, prediction]
  baseline: {{type: warmup, records: 2000}}
  detectors: [{{type: mean_shift}}, {{type: psi}}]
  minSamples: 200
{drift_window}sinks:
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
                     fmt::arg("query",
                              event_time
                                  ? "  window: {column: event_time, size: 10 seconds}\n"
                                    "  watermark: {column: event_time, delay: 2 seconds, "
                                    "idleTimeout: 0}\n"
                                    "  aggregates: [count, mean(prediction), "
                                    "mean(feature_vector)]"
                                  : "  aggregates: [count, mean(prediction), "
                                    "mean(feature_vector)]"),
                     fmt::arg("mode", event_time ? "append" : "update"),
                     fmt::arg("drift_window", event_time ? "" : "  windowRecords: 2000\n"));
}

struct Input {
  std::string topic = UniqueName("scale-logs");
  int partitions = 8;
  int64_t rows = 0;
  /// Rows of the real models (the flush rows come on top).
  int64_t model_rows = 0;
  /// Each partition's records, the flush row last; produced[p] of them are on the topic.
  std::vector<std::vector<std::string>> records;
  std::vector<size_t> produced;

  /// Produces the next share of every partition's records: up to `fraction` of all of them.
  void ProduceUpTo(double fraction) {
    for (int p = 0; p < partitions; ++p) {
      const auto& all = records[static_cast<size_t>(p)];
      const size_t to = std::min(all.size(), static_cast<size_t>(std::ceil(
                                                 fraction * static_cast<double>(all.size()))));
      size_t& from = produced[static_cast<size_t>(p)];
      if (to <= from) continue;
      Produce(topic, p, std::vector<std::string>(all.begin() + static_cast<long>(from),
                                                 all.begin() + static_cast<long>(to)));
      from = to;
    }
  }
};

// Generated inference logs of 4 models, 1000 rows per second of event time, model-2's feature 3
// shifting by 1.5 sigma halfway. `keyed`: each model in one partition (model m in m % P);
// otherwise each model in every partition, each partition in event-time order. After them, a
// row per partition an hour later (model "flush") moves every partition's clock past the last
// real window, so every window closes.
Input ProduceInput(Admin& admin, int partitions, int64_t rows, bool keyed, int models = 4,
                   double produce_now = 1.0) {
  Input input;
  input.partitions = partitions;
  input.rows = rows;
  input.model_rows = rows;
  admin.CreateTopic(input.topic, partitions);
  InferenceGeneratorOptions options;
  options.models = models;
  options.features = 4;
  options.labels = 0;
  options.rows_per_second = 1000;
  options.start_time_ms = kStartTimeMs;
  auto scenario = ParseDriftScenario(
      fmt::format("model-2 feature 3 shifts by 1.5 sigma after {} s", rows / 2000));
  REQUIRE(scenario);
  options.drift.push_back(*scenario);
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  std::vector<std::vector<std::string>> by_partition(partitions);
  for (int64_t row = 0; row < rows; ++row) {
    std::string record;
    generator->AppendRecord(static_cast<uint64_t>(row), record);
    const int model = generator->ModelOf(static_cast<uint64_t>(row));
    const size_t p = keyed ? static_cast<size_t>(model % partitions)
                           : static_cast<size_t>((row * 7 + row / 5) % partitions);
    by_partition[p].push_back(std::move(record));
  }
  for (int p = 0; p < partitions; ++p) {
    by_partition[p].push_back(fmt::format(
        R"({{"model_id":"flush","event_time":"{}","feature_vector":[0,0,0,0],"prediction":0.5}})",
        "2099-01-01T00:00:00.000Z"));
  }
  input.records = std::move(by_partition);
  input.produced.assign(static_cast<size_t>(partitions), 0);
  input.ProduceUpTo(produce_now);
  return input;
}

// One deployment: its name (consumer group and internal topics), output topics, checkpoint.
struct Deployment {
  std::string name = UniqueName("scale");
  std::string stats = UniqueName("scale-stats");
  std::string alerts = UniqueName("scale-alerts");
  TempDir dir{"driftd-scale"};
  std::string pipeline;
  std::map<std::string, std::string> env;

  Deployment(Admin& admin, const Input& input, bool event_time, bool scale_out,
             int64_t max_offsets) {
    admin.CreateTopic(stats, 3);
    admin.CreateTopic(alerts, 1);
    pipeline = dir / "pipeline.yaml";
    WriteFile(pipeline, PipelineYaml(event_time));
    env = {{"PIPELINE_NAME", name},          {"KAFKA_BROKERS", Bootstrap()},
           {"INPUT_TOPIC", input.topic},     {"MAX_OFFSETS", std::to_string(max_offsets)},
           {"STATS_TOPIC", stats},           {"ALERTS_TOPIC", alerts},
           {"CHECKPOINT", dir / "checkpoint"}, {"SCALE_OUT", scale_out ? "true" : "false"}};
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
  /// "model window-start" -> (count, mean(prediction)); windows of real models only.
  std::map<std::string, std::pair<int64_t, double>> windows;
  /// alert id, level, model, series, detector, window start: one line per alert.
  std::multiset<std::string> alerts;
  /// Records of the stats topic that repeat an earlier one's window (must be none).
  int64_t duplicate_windows = 0;
};

Outcome Read(const Deployment& deployment, bool event_time) {
  Outcome outcome;
  simdjson::dom::parser parser;
  for (const Consumed& record : ReadAll(deployment.stats)) {
    simdjson::dom::element row = parser.parse(record.value);
    const std::string model{std::string_view(row["model_id"])};
    if (model == "flush") continue;
    std::string key = model;
    if (event_time) key += " " + std::string(std::string_view(row["window"]["start"]));
    const std::pair<int64_t, double> value{int64_t(row["count"]), double(row["mean(prediction)"])};
    if (!event_time) {
      outcome.windows[key] = value;  // update mode: the last row of a model is its total
      continue;
    }
    if (outcome.windows.count(key)) ++outcome.duplicate_windows;
    outcome.windows[key] = value;
  }
  for (const Consumed& record : ReadAll(deployment.alerts)) {
    simdjson::dom::element alert = parser.parse(record.value);
    std::string_view start_time;
    if (alert["window"]["start_time"].get(start_time)) start_time = "-";
    outcome.alerts.insert(fmt::format(
        "{} {} {} {} {} {} {}", std::string_view(alert["alert_id"]),
        std::string_view(alert["level"]), std::string_view(alert["model"]),
        std::string_view(alert["series"]), std::string_view(alert["detector"]),
        int64_t(alert["window"]["start_record"]), start_time));
  }
  return outcome;
}

// Every row of the real models is in exactly one window, and every window has been emitted.
bool Complete(const Outcome& outcome, const Input& input) {
  int64_t rows = 0;
  for (const auto& [key, value] : outcome.windows) rows += value.first;
  return rows >= input.model_rows;
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

// The exit code after SIGTERM; -1000 when the process did not stop within a minute, -N when
// signal N ended it.
int Terminate(ChildProcess& daemon) {
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(std::chrono::seconds(60));
  if (!status) return -1000;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -WTERMSIG(*status);
}

// The end of a log, where a failure shows.
std::string LogTail(const std::string& path) {
  const std::string text = ReadFile(path);
  return text.size() > 20'000 ? text.substr(text.size() - 20'000) : text;
}

// Runs the deployment with `instances` processes until its output is complete; stops them.
Outcome RunUntilComplete(const Deployment& deployment, const Input& input, bool event_time,
                         int instances, std::chrono::seconds timeout = std::chrono::seconds(240)) {
  std::vector<ChildProcess> processes;
  for (int i = 0; i < instances; ++i) processes.push_back(deployment.Start(fmt::format("p{}", i)));
  Outcome outcome;
  const bool complete = testing::WaitFor(
      [&] {
        for (ChildProcess& process : processes) {
          if (process.Exited()) return true;
        }
        outcome = Read(deployment, event_time);
        return Complete(outcome, input);
      },
      timeout);
  for (int i = 0; i < instances; ++i) {
    INFO(LogTail(deployment.Log(fmt::format("p{}", i))));
    CHECK(Terminate(processes[static_cast<size_t>(i)]) == 0);
  }
  REQUIRE(complete);
  return Read(deployment, event_time);  // everything, after the last process stopped
}

TEST_CASE("scale-out: batch sizes and one process against three give the same alerts and "
          "window statistics on a topic whose models span its 8 partitions",
          "[kafka][scale-out][determinism]") {
  Admin admin;
  // Made and run once for the sections (Catch2 enters the test case once per section).
  static const Input input = ProduceInput(admin, 8, 120'000, /*keyed=*/false);
  static const Outcome expected = [&] {
    Deployment reference(admin, input, true, false, 1000);
    return RunUntilComplete(reference, input, true, 1);
  }();
  // The shift is found, in model-2 only; every model's 12 windows are there.
  REQUIRE(!expected.alerts.empty());
  for (const std::string& alert : expected.alerts) CHECK(alert.find(" model-2 ") != std::string::npos);
  CHECK(expected.windows.size() == 4 * 12);

  SECTION("maxOffsetsPerTrigger 7777") {
    Deployment run(admin, input, true, false, 7777);
    RequireSame(RunUntilComplete(run, input, true, 1), expected);
  }
  SECTION("maxOffsetsPerTrigger 200000") {
    Deployment run(admin, input, true, false, 200'000);
    RequireSame(RunUntilComplete(run, input, true, 1), expected);
  }
  SECTION("one scaled-out process") {
    Deployment run(admin, input, true, true, 7777);
    RequireSame(RunUntilComplete(run, input, true, 1), expected);
  }
  SECTION("three scaled-out processes") {
    Deployment run(admin, input, true, true, 7777);
    RequireSame(RunUntilComplete(run, input, true, 3), expected);
  }
}

TEST_CASE("scale-out: record-count windows on input keyed by model give the same alerts and "
          "statistics for any batch size and three processes",
          "[kafka][scale-out][determinism]") {
  Admin admin;
  static const Input input = ProduceInput(admin, 8, 80'000, /*keyed=*/true);
  static const Outcome expected = [&] {
    Deployment reference(admin, input, false, false, 1000);
    return RunUntilComplete(reference, input, false, 1);
  }();
  REQUIRE(!expected.alerts.empty());
  CHECK(expected.windows.size() == 4);
  SECTION("maxOffsetsPerTrigger 200000") {
    Deployment run(admin, input, false, false, 200'000);
    RequireSame(RunUntilComplete(run, input, false, 1), expected);
  }
  SECTION("three scaled-out processes") {
    Deployment run(admin, input, false, true, 7777);
    RequireSame(RunUntilComplete(run, input, false, 3), expected);
  }
}

// Committed batches a process's log shows (one progress record per batch).
int64_t BatchesLogged(const std::string& log) {
  const std::string text = ReadFile(log);
  int64_t batches = 0;
  for (size_t at = text.find("progress {"); at != std::string::npos;
       at = text.find("progress {", at + 1)) {
    ++batches;
  }
  return batches;
}

// "task 3 restored in 45 ms" lines of a log: how long each takeover's restore took.
std::vector<int64_t> RestoreTimes(const std::string& log) {
  std::vector<int64_t> times;
  const std::string text = ReadFile(log);
  static const std::regex pattern("task [0-9]+ restored in ([0-9]+) ms");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    times.push_back(std::stoll((*it)[1].str()));
  }
  return times;
}

TEST_CASE("scale-out takeover: three processes on 12 partitions, one killed 10 times, one paused "
          "past its session, one added and one removed, give one crash-free process's output",
          "[kafka][scale-out][rebalance][takeover]") {
  Admin admin;
  // The input arrives while the processes run, a share per kill, so there is work through all
  // the kills and rebalances.
  Input input = ProduceInput(admin, 12, 1'000'000, /*keyed=*/false, /*models=*/16,
                             /*produce_now=*/0.1);
  Deployment run(admin, input, true, true, 20'000);
  std::map<std::string, ChildProcess> processes;
  for (const char* name : {"a", "b", "c"}) processes.emplace(name, run.Start(name));
  std::mt19937 random(20261201);
  int kills = 0;
  int lives = 0;
  auto complete = [&] { return Complete(Read(run, true), input); };
  while (kills < 10) {
    // "c" makes some progress in each life (it has joined and committed), then dies.
    const std::string log = run.Log("c");
    const int64_t before = BatchesLogged(log);
    testing::WaitFor([&] { return BatchesLogged(log) > before; }, std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 1500));
    processes.at("c").Signal(SIGKILL);
    REQUIRE(processes.at("c").Wait(std::chrono::seconds(10)));
    ++kills;
    input.ProduceUpTo(0.1 + 0.08 * kills);
    processes.erase("c");
    processes.emplace("c", run.Start("c"));
    ++lives;
    if (kills == 3) processes.emplace("d", run.Start("d"));  // one more process joins
    if (kills == 6) {
      // One leaves for good: its partitions move to the others.
      CHECK(Terminate(processes.at("b")) == 0);
      processes.erase("b");
    }
    if (kills == 8) {
      // A zombie: "a" stops past its session timeout while the group moves its partitions on;
      // when it resumes, its batch in flight must be refused, not committed twice.
      processes.at("a").Signal(SIGSTOP);
      std::this_thread::sleep_for(std::chrono::seconds(10));
      processes.at("a").Signal(SIGCONT);
    }
  }
  CHECK(kills >= 10);
  input.ProduceUpTo(1.0);
  const bool done = testing::WaitFor(complete, std::chrono::seconds(600));
  std::vector<int64_t> restores;
  for (auto& [name, process] : processes) {
    INFO(name << ": " << LogTail(run.Log(name)));
    CHECK(Terminate(process) == 0);
  }
  for (const char* name : {"a", "b", "c", "d"}) {
    for (int64_t ms : RestoreTimes(run.Log(name))) restores.push_back(ms);
    // Every copy taken back was current minutes ago, well within the day the changelog keeps
    // deletions: caught up from its position, never read whole again.
    CHECK(ReadFile(run.Log(name)).find("restoring the task whole") == std::string::npos);
  }
  REQUIRE(done);
  // The same topic, read by one process that is never disturbed.
  Deployment reference(admin, input, true, false, 50'000);
  const Outcome expected = RunUntilComplete(reference, input, true, 1, std::chrono::seconds(600));
  REQUIRE(!expected.alerts.empty());
  CHECK(expected.windows.size() == 16 * 100);
  RequireSame(Read(run, true), expected);
  REQUIRE(!restores.empty());
  std::sort(restores.begin(), restores.end());
  std::printf("scale-out takeover: %d kills, %zu task restores, restore time median %lld ms, "
              "max %lld ms\n",
              kills, restores.size(), static_cast<long long>(restores[restores.size() / 2]),
              static_cast<long long>(restores.back()));
}

TEST_CASE("a scaled-out process held 25 s inside its commit drops the batch and rejoins, and "
          "the output stays exactly once",
          "[kafka][scale-out][stall]") {
  Admin admin;
  const Input input = ProduceInput(admin, 8, 60'000, /*keyed=*/false);
  Deployment reference(admin, input, true, false, 5000);
  const Outcome expected = RunUntilComplete(reference, input, true, 1);
  REQUIRE(!expected.alerts.empty());

  Deployment run(admin, input, true, true, 2000);
  // "p0" stops for 25 s just before committing its fourth batch's transaction: past the
  // transaction timeout (10 s scaled out), so the broker aborts it and bumps the producer's
  // epoch, and past the group's session, so its partitions move to "p1".
  std::map<std::string, std::string> stall = run.env;
  stall["INSTANCE"] = "p0";
  stall["DRIFTD_KAFKA_SINK_FAULT"] = "stall_in_commit@3";
  stall["DRIFTD_KAFKA_SINK_STALL_MS"] = "25000";
  ChildProcess stalled = ChildProcess::Start({DriftdBinary(), "run", run.pipeline, "--http", "off"},
                                             run.Log("p0"), stall);
  ChildProcess other = run.Start("p1");
  Outcome outcome;
  const bool complete = testing::WaitFor(
      [&] {
        if (stalled.Exited() || other.Exited()) return true;
        outcome = Read(run, true);
        return Complete(outcome, input) &&
               ReadFile(run.Log("p0")).find("was too slow") != std::string::npos;
      },
      std::chrono::seconds(300));
  INFO("p0: " << LogTail(run.Log("p0")));
  INFO("p1: " << LogTail(run.Log("p1")));
  CHECK_FALSE(stalled.Exited());
  CHECK(Terminate(stalled) == 0);
  CHECK(Terminate(other) == 0);
  REQUIRE(complete);
  const std::string log = ReadFile(run.Log("p0"));
  CHECK(log.find("was too slow") != std::string::npos);
  CHECK(log.find("two daemons") == std::string::npos);
  CHECK(log.find("has fenced this one") == std::string::npos);
  RequireSame(Read(run, true), expected);
}

TEST_CASE("a daemon on a copy of a running pipeline's checkpoint, or on an older backup, "
          "refuses to start and nothing reaches a reader twice",
          "[kafka][checkpoint][stale]") {
  Admin admin;
  const Input input = ProduceInput(admin, 8, 60'000, /*keyed=*/false);
  Deployment run(admin, input, true, false, 1000);
  ChildProcess original = run.Start("solo");
  const std::string log = run.Log("solo");
  REQUIRE(testing::WaitFor([&] { return BatchesLogged(log) >= 5; }, std::chrono::seconds(120)));
  // A copy taken while the pipeline runs (paused for the copy, so its files are whole).
  const std::string copy = run.dir / "copy";
  original.Signal(SIGSTOP);
  std::filesystem::copy(run.dir / "checkpoint", copy, std::filesystem::copy_options::recursive);
  original.Signal(SIGCONT);
  const int64_t at_copy = BatchesLogged(log);
  REQUIRE(testing::WaitFor([&] { return BatchesLogged(log) >= at_copy + 5; },
                           std::chrono::seconds(120)));

  std::map<std::string, std::string> env = run.env;
  env["CHECKPOINT"] = copy;
  env["INSTANCE"] = "solo";
  auto started_on_copy = testing::RunDriftd({"run", run.pipeline, "--http", "off"},
                                            std::chrono::seconds(120), env);
  INFO(started_on_copy.output);
  CHECK(started_on_copy.exit_code == 78);
  CHECK_THAT(started_on_copy.output, Catch::Contains("copy or an older backup"));
  // The running pipeline was not disturbed (a refusal comes before fencing it).
  CHECK_FALSE(original.Exited());

  REQUIRE(testing::WaitFor([&] { return Complete(Read(run, true), input); },
                           std::chrono::seconds(240)));
  CHECK(Terminate(original) == 0);
  // The copy is now an old backup of a pipeline that finished.
  auto started_on_backup = testing::RunDriftd({"run", run.pipeline, "--http", "off"},
                                              std::chrono::seconds(120), env);
  INFO(started_on_backup.output);
  CHECK(started_on_backup.exit_code == 78);
  const Outcome outcome = Read(run, true);
  CHECK(outcome.duplicate_windows == 0);
  std::set<std::string> distinct(outcome.alerts.begin(), outcome.alerts.end());
  CHECK(distinct.size() == outcome.alerts.size());
}

TEST_CASE("scale-out: processes stopped at any moment of their start, before, while and after "
          "they join the group, exit cleanly",
          "[kafka][scale-out][stop]") {
  // Stopped between its join and its first assignment, a member of a cooperative-sticky group
  // used to abort the process (librdkafka 2.0.2 asserts when it destroys such a member). Three
  // processes are started and stopped one after the other, seven times, the first stop 0.3 s
  // later each time: through the group's first join, its assignment and the rebalances the
  // stops cause.
  Admin admin;
  const Input input = ProduceInput(admin, 8, 8'000, /*keyed=*/true);
  for (int round = 0; round < 7; ++round) {
    Deployment run(admin, input, false, true, 2000);
    std::vector<ChildProcess> processes;
    for (int i = 0; i < 3; ++i) processes.push_back(run.Start(fmt::format("p{}", i)));
    // Each has read its pipeline (a signal before that is not the daemon's to handle).
    for (int i = 0; i < 3; ++i) {
      const std::string log = run.Log(fmt::format("p{}", i));
      REQUIRE(testing::WaitFor([&] { return ReadFile(log).find("started") != std::string::npos; },
                               std::chrono::seconds(30)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300 * round));
    for (int i = 0; i < 3; ++i) {
      const std::string name = fmt::format("p{}", i);
      const int code = Terminate(processes[static_cast<size_t>(i)]);
      // The log as the stop left it (-1000: still running 60 s after SIGTERM).
      INFO("round " << round << ", " << name << ": " << LogTail(run.Log(name)));
      CHECK(code == 0);
      CHECK_THAT(ReadFile(run.Log(name)), !Catch::Contains("Assertion"));
    }
  }
}

TEST_CASE("scale-out: a process that finds the repartition topic another process made a moment "
          "ago, and no changelog yet, makes the changelog with as many partitions",
          "[kafka][scale-out]") {
  // Processes starting at once: one had made the repartition topic and not yet the changelog
  // when another counted its input's partitions. That one counted the repartition topic's too,
  // made the changelog with twice as many partitions, and every process stopped with exit 78
  // ("the internal topics of a pipeline must have as many partitions as each other").
  Admin admin;
  const Input input = ProduceInput(admin, 8, 8'000, /*keyed=*/true);
  Deployment run(admin, input, false, true, 2000);
  admin.CreateTopic(kafka::RepartitionTopic(run.name), 8);  // what the other process left
  ChildProcess process = run.Start("p0");
  const std::string log = run.Log("p0");
  REQUIRE(testing::WaitFor([&] { return BatchesLogged(log) > 0 || process.Exited(); },
                           std::chrono::seconds(60)));
  INFO(LogTail(log));
  CHECK_FALSE(process.Exited());
  admin.AwaitPartitions(kafka::ChangelogTopic(run.name), 8);
  CHECK(Terminate(process) == 0);
}

TEST_CASE("scale-out: a model whose state is over a megabyte is committed through the "
          "changelog, or the query stops and says which topic to raise",
          "[kafka][scale-out][changelog]") {
  // A model's open event-time warmup windows keep a sample of up to 10,000 values of each
  // series. With 49 series its state record is over the broker's default limit of 1 MB; the
  // changelog refused it and the batch was computed again, forever, without a word above a
  // warning. The internal topics driftd creates now take records of up to 64 MB; a changelog
  // topic made otherwise, with smaller limits, stops the query with what to raise.
  constexpr int kFeatures = 48;
  Admin admin;
  static const Input input = [&] {
    Input made;
    made.partitions = 1;
    made.rows = 60'000;
    made.model_rows = made.rows;
    admin.CreateTopic(made.topic, 1);
    InferenceGeneratorOptions options;
    options.models = 1;
    options.features = kFeatures;
    options.labels = 0;
    options.rows_per_second = 4000;  // 40,000 values a 10 s window
    options.start_time_ms = kStartTimeMs;
    auto generator = InferenceGenerator::Create(options);
    REQUIRE(generator);
    made.records.resize(1);
    for (int64_t row = 0; row < made.rows; ++row) {
      generator->AppendRecord(static_cast<uint64_t>(row), made.records[0].emplace_back());
    }
    std::string zeros = "0";
    for (int f = 1; f < kFeatures; ++f) zeros += ",0";
    made.records[0].push_back(fmt::format(
        R"({{"model_id":"flush","event_time":"2099-01-01T00:00:00.000Z","feature_vector":[{}],)"
        R"("prediction":0.5}})",
        zeros));
    made.produced.assign(1, 0);
    made.ProduceUpTo(1.0);
    return made;
  }();
  Deployment run(admin, input, /*event_time=*/true, /*scale_out=*/true, 10'000);

  SECTION("internal topics made by driftd") {
    const Outcome outcome = RunUntilComplete(run, input, true, 1, std::chrono::seconds(180));
    CHECK(outcome.duplicate_windows == 0);
    int64_t counted = 0;
    for (const auto& [window, value] : outcome.windows) counted += value.first;
    CHECK(counted == input.rows);
    CHECK(ReadFile(run.Log("p0")).find("not committed") == std::string::npos);
    // The case is the one described: some state record was over 1 MB.
    size_t largest = 0;
    for (const Consumed& record : ReadAll(kafka::ChangelogTopic(run.name))) {
      largest = std::max(largest, record.value.size());
    }
    CHECK(largest > (1u << 20));
  }
  SECTION("a changelog topic made beforehand with the test broker's 1 MB segments") {
    admin.CreateTopic(kafka::ChangelogTopic(run.name), 1);
    ChildProcess daemon = run.Start("p0");
    auto status = daemon.Wait(std::chrono::seconds(120));
    const std::string log = ReadFile(run.Log("p0"));
    INFO(LogTail(run.Log("p0")));
    REQUIRE(status);
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) != 0);
    CHECK(log.find("is over what topic " + kafka::ChangelogTopic(run.name) + " takes") !=
          std::string::npos);
    CHECK(log.find("--add-config max.message.bytes=") != std::string::npos);
  }
}

TEST_CASE("scale-out: a process that takes a task back with a local copy older than the "
          "changelog keeps deletions restores the task whole and emits no window twice",
          "[kafka][scale-out][changelog]") {
  // An emitted event-time window's state is deleted, and the deletion goes to the changelog.
  // Compaction drops a deletion some time after it was written (delete.retention.ms, 0 here).
  // A process that held the task before kept its local copy with the window's state; caught up
  // by replaying the changelog after its position, it missed the dropped deletions, and the
  // windows came back and were emitted again.
  Admin admin;
  Input input = ProduceInput(admin, 1, 40'000, /*keyed=*/false, /*models=*/4,
                             /*produce_now=*/0.3);
  Deployment run(admin, input, true, true, 4'000);
  const std::string changelog = kafka::ChangelogTopic(run.name);
  admin.CreateTopic(changelog, 1,
                    {{"cleanup.policy", "compact"},
                     {"delete.retention.ms", "0"},
                     {"min.compaction.lag.ms", "0"},
                     {"min.cleanable.dirty.ratio", "0.01"},
                     {"segment.ms", "100"}});
  auto windows = [&] { return Read(run, true).windows.size(); };
  // "a" emits the first window of each model (its copy then holds the second one, open).
  ChildProcess a = run.Start("a");
  REQUIRE(testing::WaitFor([&] { return windows() >= 4; }, std::chrono::seconds(120)));
  INFO(LogTail(run.Log("a")));
  REQUIRE(Terminate(a) == 0);
  // "b" takes the task, emits the second window of each model and deletes its state.
  input.ProduceUpTo(0.75);
  ChildProcess b = run.Start("b");
  REQUIRE(testing::WaitFor([&] { return windows() >= 8; }, std::chrono::seconds(120)));
  INFO(LogTail(run.Log("b")));
  REQUIRE(Terminate(b) == 0);
  // Compaction drops the deletions once their segment is closed (a record after segment.ms
  // closes it; one that is not a state entry, which a restore passes over).
  auto deletions = [&] {
    int64_t count = 0;
    for (const Consumed& record : ReadAll(changelog)) count += record.null_value ? 1 : 0;
    return count;
  };
  REQUIRE(testing::WaitFor(
      [&] {
        Produce(changelog, 0, {"not a state entry"}, "filler");
        return deletions() == 0;
      },
      std::chrono::seconds(180)));
  // "a" comes back to its old copy.
  input.ProduceUpTo(1.0);
  ChildProcess again = run.Start("a");
  Outcome outcome;
  testing::WaitFor(
      [&] {
        outcome = Read(run, true);
        return again.Exited() || outcome.duplicate_windows > 0 || Complete(outcome, input);
      },
      std::chrono::seconds(240));
  INFO(LogTail(run.Log("a")));
  CHECK(Terminate(again) == 0);
  // Before the fix: the second window of every model again, from the state "a" had.
  REQUIRE(outcome.duplicate_windows == 0);
  REQUIRE(Complete(outcome, input));
  CHECK(ReadFile(run.Log("a")).find("restoring the task whole from the changelog") !=
        std::string::npos);
  outcome = Read(run, true);
  Deployment reference(admin, input, true, false, 50'000);
  RequireSame(outcome, RunUntilComplete(reference, input, true, 1));
}

}  // namespace
}  // namespace driftd
