// Data loss under the daemon, against the real broker: records deleted below the checkpointed
// offset (Kafka's DeleteRecords, as retention would) and topics deleted, or deleted and
// re-created, while `driftd run` is stopped or running. With failOnDataLoss true the daemon
// stops with exit code 65 and a message naming the topic, the partition and the offsets it
// expected beside those the broker still has; with false it goes on, counts the lost records
// (/metrics, the progress JSON) and processes the records that come later.
//
// "Running" uses SIGSTOP/SIGCONT around the admin operation: the daemon's process, its clients
// and its in-memory position survive, but the change lands between two of its batches, so
// what it must notice does not depend on how fast this machine is.
#include <signal.h>
#include <sys/wait.h>

#include <simdjson.h>

#include <filesystem>
#include <thread>

#include "tests/kafka/kafka_test_util.h"
#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::ReadFile;
using testing::RunDriftd;
using testing::RunResult;
using testing::TempDir;

constexpr int kExitDataError = 65;

struct LossPipeline {
  std::string name = UniqueName("data-loss");
  std::string topic = name + "-in";
  bool fail_on_data_loss = true;
  // "{availableNow: true}", or a processingTime for a daemon that keeps running.
  std::string trigger = "{availableNow: true}";
  int64_t max_offsets_per_trigger = 0;
};

std::string PipelineYaml(const LossPipeline& p, const TempDir& dir) {
  std::string limit = p.max_offsets_per_trigger > 0
                          ? fmt::format("\n    maxOffsetsPerTrigger: {}", p.max_offsets_per_trigger)
                          : "";
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: value, type: double}}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: "{bootstrap}"
    subscribe: {topic}
    startingOffsets: earliest
    failOnDataLoss: {fail}
    kafkaConsumer.pollTimeoutMs: 30000{limit}
query:
  groupBy: [model_id]
  aggregates: [count, sum(value)]
sinks:
  - {{name: stats, format: file, stream: stats, outputMode: update, options: {{path: {output}}}}}
trigger: {trigger}
checkpointLocation: {checkpoint}
)",
                     fmt::arg("name", p.name), fmt::arg("bootstrap", Bootstrap()),
                     fmt::arg("topic", p.topic), fmt::arg("fail", p.fail_on_data_loss),
                     fmt::arg("limit", limit), fmt::arg("trigger", p.trigger),
                     fmt::arg("output", dir / "stats"), fmt::arg("checkpoint", dir / "checkpoint"));
}

std::string WritePipeline(const LossPipeline& p, const TempDir& dir) {
  std::string path = dir / "pipeline.yaml";
  testing::WriteFile(path, PipelineYaml(p, dir));
  return path;
}

// `count` records of model-0 with values first, first+1, ...
std::vector<std::string> Records(int count, int first = 0) {
  std::vector<std::string> records;
  for (int i = first; i < first + count; ++i) {
    records.push_back(fmt::format(R"({{"model_id":"model-0","value":{}}})", i));
  }
  return records;
}

// Sums a field over the progress records a daemon logged ("progress {...}" lines): the
// record's own field, or else its sources' (numLostRecords is per source).
int64_t SumOverProgress(const std::string& log, const char* field) {
  simdjson::dom::parser parser;
  int64_t sum = 0;
  for (const std::string& line : testing::SplitLines(log)) {
    size_t at = line.find("progress {");
    if (at == std::string::npos) continue;
    simdjson::dom::element progress;
    REQUIRE(parser.parse(line.substr(at + 9)).get(progress) == simdjson::SUCCESS);
    int64_t value = 0;
    if (progress[field].get(value) == simdjson::SUCCESS) {
      sum += value;
      continue;
    }
    simdjson::dom::array sources;
    if (progress["sources"].get(sources) == simdjson::SUCCESS) {
      for (simdjson::dom::element source : sources) {
        if (source[field].get(value) == simdjson::SUCCESS) sum += value;
      }
    }
  }
  return sum;
}

// A daemon with a processingTime trigger and the HTTP endpoint on a free port.
class RunningDaemon {
 public:
  RunningDaemon(const std::string& pipeline, const std::string& name, const TempDir& dir)
      : name_(name),
        log_(dir / "driftd.txt"),
        process_(ChildProcess::Start(
            {testing::DriftdBinary(), "run", pipeline, "--http", "127.0.0.1:0"}, log_)) {
    auto port = testing::WaitForHttpPort(log_);
    INFO(ReadFile(log_));
    REQUIRE(port);
    port_ = *port;
  }

  // A metric of this pipeline, or -1 when the endpoint does not answer.
  double Metric(const std::string& metric) const {
    testing::HttpReply reply = testing::HttpGet(port_, "/metrics");
    if (reply.status != 200) return -1;
    return testing::ParsePrometheus(reply.body)
        .Value(metric, {{"pipeline", name_}})
        .value_or(-1);
  }
  double InputRows() const { return Metric("driftd_input_rows_total"); }
  double LostRecords() const { return Metric("driftd_source_lost_records_total"); }
  std::string Progress() const { return testing::HttpGet(port_, "/progress").body; }

  // Waits until `condition` holds; fails the test (with the log) if the daemon exits first or
  // `timeout` passes.
  void Await(const std::function<bool()>& condition, const char* what,
             std::chrono::seconds timeout = 60s) {
    bool held = testing::WaitFor([&] { return condition() || process_.Exited(); }, timeout);
    INFO(what << "\n" << ReadFile(log_));
    REQUIRE(held);
    REQUIRE(condition());
  }

  // Holds the process still while `change` runs: the change lands between two batches.
  void WhileStopped(const std::function<void()>& change) {
    process_.Signal(SIGSTOP);
    change();
    process_.Signal(SIGCONT);
  }

  // The exit code after the daemon ends by itself within `timeout` (-1: it did not).
  int AwaitExit(std::chrono::seconds timeout = 60s) {
    auto status = process_.Wait(timeout);
    if (!status || !WIFEXITED(*status)) return -1;
    return WEXITSTATUS(*status);
  }

  int Terminate() {
    process_.Signal(SIGTERM);
    return AwaitExit(30s);
  }

  std::string log() const { return ReadFile(log_); }

 private:
  std::string name_;
  std::string log_;
  ChildProcess process_;
  int port_ = 0;
};

RunResult RunToEnd(const std::string& pipeline) {
  return RunDriftd({"run", pipeline, "--http", "off"}, 90s);
}

TEST_CASE(
    "records deleted below the checkpoint of a stopped daemon fail the next run, offsets named",
    "[kafka][data-loss][e2e]") {
  TempDir dir("driftd-data-loss");
  Admin admin;
  LossPipeline p;
  admin.CreateTopic(p.topic, 2);
  Produce(p.topic, 0, Records(20));
  Produce(p.topic, 1, Records(20));
  const std::string pipeline = WritePipeline(p, dir);
  RunResult first = RunToEnd(pipeline);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(SumOverProgress(first.output, "numInputRows") == 40);

  // The checkpoint stands at offset 20 of both partitions; partition 1 loses 20..34 unread.
  Produce(p.topic, 0, Records(30, 20));
  Produce(p.topic, 1, Records(30, 20));
  admin.DeleteRecords(p.topic, 1, 35);

  RunResult second = RunToEnd(pipeline);
  INFO(second.output);
  CHECK(second.exit_code == kExitDataError);
  CHECK_THAT(second.output,
             Catch::Contains(fmt::format("topic {} partition 1: offsets 20 to 34 are gone "
                                         "(earliest available is 35",
                                         p.topic)));
  CHECK_THAT(second.output, Catch::Contains("failOnDataLoss=false"));
  CHECK(SumOverProgress(second.output, "numInputRows") == 0);

  // Nothing was committed past the loss: a third run stops the same way.
  RunResult third = RunToEnd(pipeline);
  INFO(third.output);
  CHECK(third.exit_code == kExitDataError);
  CHECK_THAT(third.output, Catch::Contains("offsets 20 to 34 are gone"));
}

TEST_CASE(
    "records deleted below the checkpoint of a stopped daemon are counted lost when allowed",
    "[kafka][data-loss][e2e]") {
  TempDir dir("driftd-data-loss");
  Admin admin;
  LossPipeline p;
  p.fail_on_data_loss = false;
  admin.CreateTopic(p.topic, 2);
  Produce(p.topic, 0, Records(20));
  Produce(p.topic, 1, Records(20));
  const std::string pipeline = WritePipeline(p, dir);
  RunResult first = RunToEnd(pipeline);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(SumOverProgress(first.output, "numInputRows") == 40);

  Produce(p.topic, 0, Records(30, 20));
  Produce(p.topic, 1, Records(30, 20));
  admin.DeleteRecords(p.topic, 1, 35);

  RunResult second = RunToEnd(pipeline);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  // 30 records of partition 0 and 35..49 of partition 1 are read; 20..34 are lost.
  CHECK(SumOverProgress(second.output, "numInputRows") == 45);
  CHECK(SumOverProgress(second.output, "numLostRecords") == 15);
  CHECK_THAT(second.output, Catch::Contains(fmt::format("topic {} partition 1", p.topic)));
}

TEST_CASE(
    "records deleted under a running daemon stop it with exit code 65, offsets named",
    "[kafka][data-loss][e2e]") {
  TempDir dir("driftd-data-loss");
  Admin admin;
  LossPipeline p;
  p.trigger = "{processingTime: 200 milliseconds}";
  admin.CreateTopic(p.topic, 1);
  Produce(p.topic, 0, Records(20));
  RunningDaemon daemon(WritePipeline(p, dir), p.name, dir);
  daemon.Await([&] { return daemon.InputRows() == 20; }, "the first 20 records");

  daemon.WhileStopped([&] {
    Produce(p.topic, 0, Records(30, 20));
    admin.DeleteRecords(p.topic, 0, 35);
  });
  int exit_code = daemon.AwaitExit();
  const std::string log = daemon.log();
  INFO(log);
  CHECK(exit_code == kExitDataError);
  CHECK_THAT(log, Catch::Contains(fmt::format("topic {} partition 0: offsets 20 to 34 are gone "
                                              "(earliest available is 35",
                                              p.topic)));
}

TEST_CASE(
    "records deleted under a running daemon are counted in metrics and progress when allowed",
    "[kafka][data-loss][e2e]") {
  TempDir dir("driftd-data-loss");
  Admin admin;
  LossPipeline p;
  p.fail_on_data_loss = false;
  p.trigger = "{processingTime: 200 milliseconds}";
  admin.CreateTopic(p.topic, 1);
  Produce(p.topic, 0, Records(20));
  RunningDaemon daemon(WritePipeline(p, dir), p.name, dir);
  daemon.Await([&] { return daemon.InputRows() == 20; }, "the first 20 records");
  CHECK(daemon.LostRecords() == 0);

  daemon.WhileStopped([&] {
    Produce(p.topic, 0, Records(30, 20));
    admin.DeleteRecords(p.topic, 0, 35);
  });
  daemon.Await([&] { return daemon.InputRows() == 35 && daemon.LostRecords() == 15; },
               "records 35..49 read, 20..34 counted lost");
  {
    const std::string progress = daemon.Progress();
    INFO(progress);
    CHECK_THAT(progress, Catch::Contains("\"numLostRecords\":15"));
  }

  Produce(p.topic, 0, Records(10, 50));
  daemon.Await([&] { return daemon.InputRows() == 45; }, "the 10 records produced later");
  CHECK(daemon.LostRecords() == 15);
  CHECK(daemon.Terminate() == 0);
  CHECK_THAT(daemon.log(), Catch::Contains(fmt::format("topic {} partition 0", p.topic)));
}

TEST_CASE(
    "a topic deleted under a running daemon stops it with the partition and offset named",
    "[kafka][data-loss][e2e]") {
  TempDir dir("driftd-data-loss");
  Admin admin;
  LossPipeline p;
  p.trigger = "{processingTime: 200 milliseconds}";
  admin.CreateTopic(p.topic, 1);
  Produce(p.topic, 0, Records(20));
  RunningDaemon daemon(WritePipeline(p, dir), p.name, dir);
  daemon.Await([&] { return daemon.InputRows() == 20; }, "the first 20 records");

  daemon.WhileStopped([&] { admin.DeleteTopic(p.topic); });
  int exit_code = daemon.AwaitExit();
  const std::string log = daemon.log();
  INFO(log);
  CHECK(exit_code == kExitDataError);
  CHECK_THAT(log, Catch::Contains(fmt::format("topic {} partition 0 no longer exists (the query "
                                              "was at offset 20)",
                                              p.topic)));
}

TEST_CASE(
    "a topic deleted and re-created under a running daemon counts the unread records as lost",
    "[kafka][data-loss][e2e]") {
  TempDir dir("driftd-data-loss");
  Admin admin;
  LossPipeline p;
  p.fail_on_data_loss = false;
  // Ten records a batch, one batch a second: the daemon has seen all 100 records on the broker
  // but read only some when the topic goes.
  p.trigger = "{processingTime: 1 second}";
  p.max_offsets_per_trigger = 10;
  admin.CreateTopic(p.topic, 1);
  Produce(p.topic, 0, Records(100));
  RunningDaemon daemon(WritePipeline(p, dir), p.name, dir);
  daemon.Await([&] { return daemon.InputRows() >= 10; }, "the first batch");

  daemon.WhileStopped([&] { admin.DeleteTopic(p.topic); });
  // Every record is either read or counted lost, and some were lost.
  daemon.Await([&] { return daemon.InputRows() + daemon.LostRecords() == 100; },
               "read + lost = 100");
  const double read = daemon.InputRows();
  CHECK(read < 100);
  CHECK(daemon.LostRecords() == 100 - read);
  CHECK_THAT(daemon.log(), Catch::Contains(fmt::format("{}-0 no longer exists", p.topic)));

  // The topic comes back with new records: the daemon reads it from its start.
  admin.CreateTopic(p.topic, 1);
  Produce(p.topic, 0, Records(30, 1000));
  daemon.Await([&] { return daemon.InputRows() == read + 30; }, "the re-created topic's records");
  CHECK(daemon.LostRecords() == 100 - read);
  CHECK(daemon.Terminate() == 0);
}

TEST_CASE(
    "a topic deleted and re-created while the daemon was stopped is named or read anew",
    "[kafka][data-loss][e2e]") {
  TempDir dir("driftd-data-loss");
  Admin admin;
  LossPipeline p;
  admin.CreateTopic(p.topic, 1);
  Produce(p.topic, 0, Records(50));
  std::string pipeline = WritePipeline(p, dir);
  RunResult first = RunToEnd(pipeline);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(SumOverProgress(first.output, "numInputRows") == 50);

  admin.DeleteTopic(p.topic);
  admin.CreateTopic(p.topic, 1);
  Produce(p.topic, 0, Records(10, 1000));

  RunResult strict = RunToEnd(pipeline);
  INFO(strict.output);
  CHECK(strict.exit_code == kExitDataError);
  CHECK_THAT(strict.output,
             Catch::Contains(fmt::format("topic {} partition 0: offset 50 is beyond the latest "
                                         "offset 10",
                                         p.topic)));

  // The same checkpoint, now told to go on: the new topic is read from its start.
  p.fail_on_data_loss = false;
  pipeline = WritePipeline(p, dir);
  RunResult lenient = RunToEnd(pipeline);
  INFO(lenient.output);
  CHECK(lenient.exit_code == 0);
  CHECK(SumOverProgress(lenient.output, "numInputRows") == 10);
}

}  // namespace
}  // namespace driftd
