// A query of two Kafka topics read as one stream, against the real broker: its output, read
// with read_committed, is exactly a crash-free run's after 20+ SIGKILLs, each input's offsets
// are checkpointed apart, and the progress record lists both topics.
#include <signal.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <simdjson.h>

#include "tests/kafka/kafka_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using testing::ChildProcess;
using testing::DriftdBinary;
using testing::KillRepeatedly;
using testing::ReadFile;
using testing::RunDriftd;
using testing::RunResult;
using testing::TempDir;
using testing::WriteFile;

constexpr int kRecordsPerPartition = 2000;

// Records of models m0..m3 in event-time order, 10 ms apart; topic `which` is 5 ms behind.
std::vector<std::string> Records(int which, int partition) {
  std::vector<std::string> values;
  for (int i = 0; i < kRecordsPerPartition; ++i) {
    const int64_t ms = 1'795'946'400'000 + i * 10 + which * 5 + partition;
    values.push_back(fmt::format(R"({{"model_id":"m{}","event_time":{},"value":{}}})",
                                 (i + partition + which) % 4, ms, (i * 13 + which) % 97));
  }
  return values;
}

// `scale_out`: the pipeline scaled out (instance ${INSTANCE}), on a processing-time trigger.
std::string Pipeline(const std::string& name, const std::string& first, const std::string& second,
                     const std::string& out, const std::string& checkpoint,
                     bool scale_out = false) {
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: value, type: double}}
source:
  format: kafka
  options:
    subscribe: {first}
    startingOffsets: earliest
    maxOffsetsPerTrigger: 40
    kafka.bootstrap.servers: "{bootstrap}"
inputs:
  - name: late-topic
    format: kafka
    options:
      subscribe: {second}
      startingOffsets: earliest
      maxOffsetsPerTrigger: 30
      kafka.bootstrap.servers: "{bootstrap}"
query:
  groupBy: [model_id]
  window: {{column: event_time, size: 2 seconds}}
  watermark: {{column: event_time, delay: 1 second}}
  aggregates: [count, sum(value)]
sinks:
  - name: windows
    format: kafka
    stream: stats
    outputMode: append
    options: {{topic: {out}, kafka.bootstrap.servers: "{bootstrap}"}}
{trigger}checkpointLocation: {checkpoint}
)",
                     fmt::arg("name", name), fmt::arg("first", first), fmt::arg("second", second),
                     fmt::arg("out", out), fmt::arg("checkpoint", checkpoint),
                     fmt::arg("bootstrap", Bootstrap()),
                     fmt::arg("trigger", scale_out ? "trigger: {processingTime: 100ms}\n"
                                                     "scaleOut: {enabled: true, instance: "
                                                     "\"${INSTANCE}\"}\n"
                                                   : "trigger: {availableNow: true}\n"));
}

// The two topics, 2 partitions each; `share` of each partition's records produced (more of
// them on a later call).
struct TwoTopics {
  std::string first = UniqueName("inputs-first");
  std::string second = UniqueName("inputs-second");
  int produced = 0;

  explicit TwoTopics(Admin& admin) {
    admin.CreateTopic(first, 2);
    admin.CreateTopic(second, 2);
  }
  void ProduceUpTo(double share) {
    const int upto = static_cast<int>(share * kRecordsPerPartition);
    if (upto <= produced) return;
    for (int partition = 0; partition < 2; ++partition) {
      for (int which = 0; which < 2; ++which) {
        const std::vector<std::string> all = Records(which, partition);
        Produce(which == 0 ? first : second, partition,
                std::vector<std::string>(all.begin() + produced, all.begin() + upto));
      }
    }
    produced = upto;
  }
};

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

}  // namespace

TEST_CASE("a query of two topics killed with SIGKILL 20+ times writes exactly the windows of a "
          "crash-free run",
          "[kafka][inputs][crash]") {
  Admin admin;
  const std::string first = UniqueName("inputs-first");
  const std::string second = UniqueName("inputs-second");
  admin.CreateTopic(first, 2);
  admin.CreateTopic(second, 2);
  for (int partition = 0; partition < 2; ++partition) {
    Produce(first, partition, Records(0, partition));
    Produce(second, partition, Records(1, partition));
  }

  // The crash-free reference.
  TempDir reference("driftd-inputs-reference");
  const std::string reference_out = UniqueName("inputs-reference-out");
  admin.CreateTopic(reference_out, 1);
  WriteFile(reference / "p.yaml", Pipeline(UniqueName("inputs-ref"), first, second, reference_out,
                                           reference / "checkpoint"));
  RunResult run = RunDriftd({"run", reference / "p.yaml", "--http", "off"},
                            std::chrono::seconds(120));
  INFO(run.output.substr(0, 3000));
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("\"name\":\"late-topic\""));
  const std::vector<std::string> expected = ValuesOf(ReadSettled(reference_out));
  // 20 s of event time in 2 s windows: every model's windows but the last (still open at the
  // final watermark).
  REQUIRE(expected.size() >= 4 * 6);
  int64_t counted = 0;
  simdjson::dom::parser parser;
  for (const std::string& row : expected) counted += parser.parse(row)["count"].get_int64().value();
  CHECK(counted > 2 * 2 * kRecordsPerPartition * 3 / 4);

  // The same pipeline, killed again and again.
  TempDir dir("driftd-inputs-crashed");
  const std::string out = UniqueName("inputs-crashed-out");
  admin.CreateTopic(out, 1);
  WriteFile(dir / "p.yaml", Pipeline(UniqueName("inputs-crashed"), first, second, out,
                                     dir / "checkpoint"));
  const std::string log = dir / "lives.log";
  testing::CrashLoopOptions options;
  options.max_blind_delay = std::chrono::milliseconds(800);
  const int kills = KillRepeatedly(
      {DriftdBinary(), "run", dir / "p.yaml", "--http", "off"}, log,
      [&] { return static_cast<int64_t>(Occurrences(ReadFile(log), "\"batchId\":")); },
      [] { return false; }, options);
  INFO("kills " << kills);
  CHECK(kills >= 20);
  RunResult finish = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120));
  INFO(finish.output.substr(0, 3000));
  REQUIRE(finish.exit_code == 0);
  CHECK(ValuesOf(ReadSettled(out)) == expected);
}

TEST_CASE("scale-out: a query of two topics whose two processes are killed with SIGKILL 10 "
          "times writes exactly the windows of a crash-free run",
          "[kafka][inputs][scale-out][crash]") {
  Admin admin;
  TwoTopics input(admin);
  // The input arrives while the processes run, a share per kill, so there is work in every life.
  input.ProduceUpTo(0.05);

  TempDir dir("driftd-inputs-scaled");
  const std::string out = UniqueName("inputs-scaled-out");
  admin.CreateTopic(out, 1);
  WriteFile(dir / "p.yaml", Pipeline(UniqueName("inputs-scaled"), input.first, input.second, out,
                                     dir / "checkpoint", /*scale_out=*/true));
  auto start = [&](const std::string& instance) {
    return ChildProcess::Start({DriftdBinary(), "run", dir / "p.yaml", "--http", "off"},
                               dir / ("log-" + instance), {{"INSTANCE", instance}});
  };
  std::map<std::string, ChildProcess> processes;
  for (const char* name : {"a", "b"}) processes.emplace(name, start(name));
  std::mt19937 random(20261205);
  int kills = 0;
  // Each restart waits for the group to drop the killed member (its 6 s session): 10 kills
  // (the query of two topics in one process is killed 20+ times above).
  while (kills < 10) {
    // Either process, once it has committed a batch in this life, dies.
    const std::string name = random() % 2 == 0 ? "a" : "b";
    const std::string log = dir / ("log-" + name);
    const size_t before = Occurrences(ReadFile(log), "\"batchId\":");
    REQUIRE(testing::WaitFor([&] { return Occurrences(ReadFile(log), "\"batchId\":") > before; },
                             std::chrono::seconds(90)));
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 800));
    processes.at(name).Signal(SIGKILL);
    REQUIRE(processes.at(name).Wait(std::chrono::seconds(10)));
    ++kills;
    processes.erase(name);
    processes.emplace(name, start(name));
    input.ProduceUpTo(0.05 + 0.09 * kills);
  }
  input.ProduceUpTo(1.0);

  // The crash-free reference: one process, both topics whole.
  TempDir reference("driftd-inputs-scaled-reference");
  const std::string reference_out = UniqueName("inputs-scaled-reference-out");
  admin.CreateTopic(reference_out, 1);
  WriteFile(reference / "p.yaml", Pipeline(UniqueName("inputs-scaled-ref"), input.first,
                                           input.second, reference_out, reference / "checkpoint"));
  RunResult run = RunDriftd({"run", reference / "p.yaml", "--http", "off"},
                            std::chrono::seconds(120));
  INFO(run.output.substr(0, 3000));
  REQUIRE(run.exit_code == 0);
  std::vector<std::string> expected = ValuesOf(ReadSettled(reference_out));
  REQUIRE(expected.size() >= 4 * 6);

  const bool complete = testing::WaitFor(
      [&] { return ReadAll(out, "read_committed").size() >= expected.size(); },
      std::chrono::seconds(180));
  for (auto& [name, process] : processes) {
    const std::string text = ReadFile(dir / ("log-" + name));
    INFO(name << ": " << text.substr(text.size() > 6000 ? text.size() - 6000 : 0));
    process.Signal(SIGTERM);
    CHECK(process.Wait(std::chrono::seconds(60)));
  }
  INFO("kills " << kills);
  REQUIRE(complete);
  // The tasks write their windows in an order of their own: the same rows, each once.
  std::vector<std::string> actual = ValuesOf(ReadSettled(out));
  std::sort(actual.begin(), actual.end());
  std::sort(expected.begin(), expected.end());
  CHECK(actual == expected);
}

}  // namespace driftd
