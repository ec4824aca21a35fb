// A broker outage under a running daemon: driftd reads inference logs from Kafka and writes
// per-model statistics and drift alerts back to Kafka while its broker is stopped for a while and
// started again on the same log dir. The test runs a broker of its own (tests/kafka/broker.sh
// with a private port and run dir), never the shared one on 19092, and always stops it again.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <simdjson.h>
#include <catch2/catch.hpp>

#include "tests/kafka/kafka_test_util.h"
#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace std::chrono_literals;
using kafka_test::Admin;
using kafka_test::Consumed;
using kafka_test::ReadAll;
using kafka_test::UniqueName;
using testing::ChildProcess;
using testing::TempDir;
using testing::WaitFor;

constexpr int kModels = 4;
// The backlog of the outage takes several batches, whose progress shows the lag left behind.
constexpr int64_t kMaxOffsetsPerTrigger = 4000;
// How long the broker stays stopped before it is started again (its start-up adds ~10 s).
constexpr auto kOutage = 12s;

bool PortFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return free;
}

// A free port pair (PORT and PORT+1) below the kernel's ephemeral range: while the broker is
// stopped, its ports must not be handed out to outgoing connections (the clients reconnecting
// to it, for one), or it cannot start again.
int PickBrokerPort() {
  int ephemeral_low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> ephemeral_low;
  const int low = 20000;
  const int high = std::max(low + 100, ephemeral_low - 2);
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(low, high);
  for (int attempt = 0; attempt < 200; ++attempt) {
    int port = pick(random);
    if (PortFree(port) && PortFree(port + 1)) return port;
  }
  return 0;
}

// A broker of this test's own: broker.sh on a free port pair (PORT and the controller's PORT+1)
// with its run dir (config, log dir, broker log) inside `run_dir`. The destructor stops it, so a
// failing test does not leave it behind.
class OwnBroker {
 public:
  explicit OwnBroker(const std::string& run_dir) : run_dir_(run_dir), port_(PickBrokerPort()) {}
  ~OwnBroker() {
    if (started_) Run("stop");
  }
  OwnBroker(const OwnBroker&) = delete;
  OwnBroker& operator=(const OwnBroker&) = delete;

  std::string bootstrap() const { return fmt::format("127.0.0.1:{}", port_); }

  /// Runs `broker.sh start [--keep]`; returns its exit code (the script's output is in log()).
  int Start(bool keep) {
    if (port_ == 0) return -2;  // no free port pair found
    started_ = true;
    return Run(keep ? "start --keep" : "start");
  }
  int Stop() { return Run("stop"); }
  /// The broker's process (broker.sh's pid file), or -1.
  pid_t Pid() const {
    std::ifstream file(run_dir_ + "/broker.pid");
    pid_t pid = -1;
    file >> pid;
    return file ? pid : -1;
  }
  std::string log() const { return testing::ReadFile(run_dir_ + "/broker-sh.log"); }

 private:
  int Run(const std::string& command) {
    std::string line = fmt::format(
        "DRIFTD_KAFKA_PORT={} DRIFTD_KAFKA_RUN_DIR='{}' bash '{}/kafka/broker.sh' {} "
        ">>'{}/broker-sh.log' 2>&1",
        port_, run_dir_, DRIFTD_TESTS_DIR, command, run_dir_);
    int status = std::system(line.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string run_dir_;
  int port_ = 0;
  bool started_ = false;
};

// Points kafka_test's clients (Admin, ReadAll, ...) at another broker for one scope.
class ScopedBootstrap {
 public:
  explicit ScopedBootstrap(const std::string& bootstrap) {
    if (const char* old = std::getenv("DRIFTD_KAFKA_BOOTSTRAP")) old_ = old;
    setenv("DRIFTD_KAFKA_BOOTSTRAP", bootstrap.c_str(), 1);
  }
  ~ScopedBootstrap() {
    if (old_) {
      setenv("DRIFTD_KAFKA_BOOTSTRAP", old_->c_str(), 1);
    } else {
      unsetenv("DRIFTD_KAFKA_BOOTSTRAP");
    }
  }

 private:
  std::optional<std::string> old_;
};

// Produces inference records without pause until stopped, through one idempotent producer, so
// that records sent while the broker is away are retried and land exactly once. Counts the
// records the broker acknowledged, per model.
class InputWriter {
 public:
  explicit InputWriter(std::string topic) : topic_(std::move(topic)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~InputWriter() {
    abandon_.store(true);  // a test that failed half-way does not wait for a broker
    Finish();
  }

  /// Stops producing and waits until every record is acknowledged (or failed).
  void Finish() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t sent() const { return sent_.load(); }
  std::map<std::string, int64_t> acknowledged() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return acknowledged_;
  }
  int64_t failed() const { return failed_.load(); }
  std::string first_error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_error_;
  }

 private:
  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* message, void* opaque) {
    auto* self = static_cast<InputWriter*>(opaque);
    std::lock_guard<std::mutex> lock(self->mutex_);
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      self->failed_.fetch_add(1);
      if (self->first_error_.empty()) self->first_error_ = rd_kafka_err2str(message->err);
      return;
    }
    ++self->acknowledged_[std::string(static_cast<const char*>(message->key), message->key_len)];
  }

  void Fail(std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_.fetch_add(1);
    if (first_error_.empty()) first_error_ = std::move(what);
  }

  // Runs on its own thread: no Catch2 assertions here, failures are counted for the test.
  void Run() {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char error[512];
    for (const auto& [name, value] :
         std::map<std::string, std::string>{{"bootstrap.servers", kafka_test::Bootstrap()},
                                            {"enable.idempotence", "true"},
                                            {"linger.ms", "5"},
                                            {"log_level", "2"},
                                            {"message.timeout.ms", "300000"}}) {
      if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), error, sizeof error) !=
          RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return Fail(error);
      }
    }
    rd_kafka_conf_set_dr_msg_cb(conf, &InputWriter::OnDelivery);
    rd_kafka_conf_set_opaque(conf, this);
    kafka_test::Client producer{rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error)};
    if (!producer) {
      rd_kafka_conf_destroy(conf);
      return Fail(error);
    }
    std::string value;
    int64_t id = 0;
    while (!stop_.load()) {
      // 40 records every 50 ms: a steady stream whose batches keep the daemon busy.
      for (int i = 0; i < 40; ++i, ++id) {
        std::string model = fmt::format("m{}", id % kModels);
        int64_t seen = id / kModels;  // this model's record number
        // Model m0 drifts after its first 2000 records: its predictions move up by 0.4.
        double noise = static_cast<double>((id * 2654435761LL) % 1000) / 1000.0 - 0.5;
        double prediction = 0.5 + 0.2 * noise + (model == "m0" && seen >= 2000 ? 0.4 : 0.0);
        value = fmt::format(R"({{"model_id":"{}","id":{},"prediction":{:.4f}}})", model, id,
                            prediction);
        rd_kafka_resp_err_t err =
            rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(topic_.c_str()),
                              RD_KAFKA_V_KEY(model.data(), model.size()),
                              RD_KAFKA_V_VALUE(value.data(), value.size()),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
          rd_kafka_poll(producer.get(), 100);
          --id;
          --i;
          continue;
        }
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return Fail(rd_kafka_err2str(err));
        sent_.fetch_add(1);
      }
      rd_kafka_poll(producer.get(), 50);
    }
    // Records queued during an outage are delivered once the broker is back.
    auto deadline = std::chrono::steady_clock::now() + 120s;
    while (rd_kafka_outq_len(producer.get()) > 0 && !abandon_.load()) {
      if (std::chrono::steady_clock::now() > deadline) return Fail("flush timed out");
      rd_kafka_poll(producer.get(), 100);
    }
    if (abandon_.load()) rd_kafka_purge(producer.get(), RD_KAFKA_PURGE_F_QUEUE);
    rd_kafka_flush(producer.get(), 1000);
  }

  std::string topic_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> abandon_{false};
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> failed_{0};
  mutable std::mutex mutex_;
  std::map<std::string, int64_t> acknowledged_;
  std::string first_error_;
  std::thread thread_;
};

std::string PipelineYaml(const std::string& name, const std::string& bootstrap,
                         const std::string& input, const std::string& stats,
                         const std::string& alerts, const std::string& checkpoint,
                         const std::string& trigger = "processingTime: 500 milliseconds",
                         int64_t limit = kMaxOffsetsPerTrigger) {
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: id, type: long}}
  - {{name: prediction, type: double}}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: "{bootstrap}"
    subscribe: {input}
    startingOffsets: earliest
    maxOffsetsPerTrigger: {limit}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
drift:
  series: [prediction]
  baseline: {{type: warmup, records: 500}}
  windowRecords: 500
  minSamples: 200
  detectors:
    - {{type: mean_shift, warn: 5, alert: 5.5, minEffect: 0.1}}
sinks:
  - name: stats
    format: kafka
    stream: stats
    outputMode: update
    options:
      kafka.bootstrap.servers: "{bootstrap}"
      topic: {stats}
      keyColumn: model_id
  - name: alerts
    format: kafka
    stream: alerts
    options:
      kafka.bootstrap.servers: "{bootstrap}"
      topic: {alerts}
trigger:
  {trigger}
checkpointLocation: {checkpoint}
)",
                     fmt::arg("name", name), fmt::arg("limit", limit),
                     fmt::arg("trigger", trigger),
                     fmt::arg("bootstrap", bootstrap), fmt::arg("input", input),
                     fmt::arg("stats", stats), fmt::arg("alerts", alerts),
                     fmt::arg("checkpoint", checkpoint));
}

double Metric(int port, const std::string& name, const std::map<std::string, std::string>& labels) {
  testing::HttpReply reply = testing::HttpGet(port, "/metrics");
  if (reply.status != 200) return -1;
  return testing::ParsePrometheus(reply.body).Value(name, labels).value_or(-1);
}

int ReadyStatus(int port) { return testing::HttpGet(port, "/readyz").status; }

// Whether /progress holds a batch cut short by maxOffsetsPerTrigger whose per-partition lag
// says how much was left behind (positive: the backlog of the outage).
bool SawLimitedBatchWithLag(int port) {
  const std::string progress = testing::HttpGet(port, "/progress").body;
  simdjson::dom::parser parser;
  simdjson::dom::array records;
  if (parser.parse(progress).get(records) != simdjson::SUCCESS) return false;
  for (simdjson::dom::element record : records) {
    simdjson::dom::element source = record["sources"].at(0);
    int64_t rows = 0;
    simdjson::dom::object lag;
    if (source["numInputRows"].get(rows) || rows != kMaxOffsetsPerTrigger ||
        source["lag"].get(lag)) {
      continue;
    }
    // Nested as Spark writes Kafka positions: {"topic":{"0":n,"1":m}}.
    int64_t behind = 0;
    for (auto [topic, partitions] : lag) {
      simdjson::dom::object by_partition;
      if (partitions.get(by_partition)) continue;
      for (auto [partition, value] : by_partition) behind += value.get_int64().value_unsafe();
    }
    if (behind > 0) return true;
  }
  return false;
}

// Prints the end of the daemon's and the broker's logs when the test ends, for ctest's
// --output-on-failure (the files go away with the test's temporary directory).
class LogTails {
 public:
  explicit LogTails(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  ~LogTails() {
    for (const std::string& path : paths_) {
      std::vector<std::string> lines = testing::SplitLines(testing::ReadFile(path));
      size_t from = lines.size() > 80 ? lines.size() - 80 : 0;
      std::fprintf(stderr, "---- last lines of %s\n", path.c_str());
      for (size_t i = from; i < lines.size(); ++i) std::fprintf(stderr, "%s\n", lines[i].c_str());
    }
  }

 private:
  std::vector<std::string> paths_;
};

int64_t JsonInt(const std::string& json, const char* key) {
  simdjson::dom::parser parser;
  int64_t value = -1;
  if (parser.parse(json).at_key(key).get(value) != simdjson::SUCCESS) return -1;
  return value;
}

std::string JsonString(const std::string& json, const char* key) {
  simdjson::dom::parser parser;
  std::string_view value;
  if (parser.parse(json).at_key(key).get(value) != simdjson::SUCCESS) return "";
  return std::string(value);
}

void RequireStarted(OwnBroker& broker, bool keep) {
  int code = broker.Start(keep);
  INFO("the outage test's own broker did not start on " << broker.bootstrap() << ":\n"
                                                        << broker.log());
  REQUIRE(code == 0);
}

void RequireStopped(OwnBroker& broker) {
  int code = broker.Stop();
  INFO("broker.sh:\n" << broker.log());
  REQUIRE(code == 0);
}

// A test's own broker, started, with a daemon's topics on it: input (2 partitions), stats and
// alerts, named after `prefix`. Clients of kafka_test point at the broker while it lives.
struct OwnBrokerTopics {
  explicit OwnBrokerTopics(const std::string& prefix)
      : dir("driftd-" + prefix), broker(BrokerDir(dir)), name(UniqueName(prefix)) {
    RequireStarted(broker, /*keep=*/false);
    scoped.emplace(broker.bootstrap());
    Admin admin;
    admin.CreateTopic(input, 2);
    admin.CreateTopic(stats, 1);
    admin.CreateTopic(alerts, 1);
  }
  static std::string BrokerDir(TempDir& dir) {
    std::filesystem::create_directories(dir.Sub("broker"));
    return dir.Sub("broker");
  }

  TempDir dir;
  OwnBroker broker;
  std::optional<ScopedBootstrap> scoped;
  std::string name;
  std::string input = name + "-in";
  std::string stats = name + "-stats";
  std::string alerts = name + "-alerts";
};

// `driftd run` on `yaml`, written as the pipeline in the test's dir, with an HTTP port; its log
// and the broker's are printed at the end of the test.
struct DaemonRun {
  DaemonRun(TempDir& dir, const std::string& yaml)
      : log(dir / "driftd.txt"),
        daemon(Start(dir, yaml, log)),
        tails({log, dir.Sub("broker") + "/broker-sh.log"}),
        port(testing::WaitForHttpPort(log)) {}
  static ChildProcess Start(TempDir& dir, const std::string& yaml, const std::string& log) {
    const std::string pipeline = dir / "pipeline.yaml";
    testing::WriteFile(pipeline, yaml);
    return ChildProcess::Start(
        {testing::DriftdBinary(), "run", pipeline, "--http", "127.0.0.1:0", "--quiet-progress"},
        log);
  }

  std::string log;
  ChildProcess daemon;
  LogTails tails;
  decltype(testing::WaitForHttpPort(std::string())) port;
};

TEST_CASE(
    "a broker outage under a running daemon is waited out: not ready meanwhile "
    "then resumed by itself with nothing lost or repeated",
    "[kafka][outage][e2e]") {
  OwnBrokerTopics setup("outage");
  auto& [dir, broker, scoped, name, input, stats, alerts] = setup;
  InputWriter writer(input);
  DaemonRun run(dir, PipelineYaml(name, broker.bootstrap(), input, stats, alerts,
                                  dir / "checkpoint"));
  auto& [log, daemon, tails, port] = run;
  REQUIRE(port);
  const std::map<std::string, std::string> labels = {{"pipeline", name}};

  // Running normally: ready, batches committed with input.
  REQUIRE(WaitFor(
      [&] {
        return Metric(*port, "driftd_batches_total", labels) >= 4 &&
               Metric(*port, "driftd_input_rows_total", labels) >= 2000;
      },
      60s));
  CHECK(ReadyStatus(*port) == 200);
  CHECK(Metric(*port, "driftd_query_ready", labels) == 1);

  // The outage.
  RequireStopped(broker);
  const auto stopped_at = std::chrono::steady_clock::now();
  bool saw_not_ready = false;
  bool saw_ready_metric_zero = false;
  std::string not_ready_detail;
  while (std::chrono::steady_clock::now() - stopped_at < kOutage) {
    REQUIRE_FALSE(daemon.Exited());
    testing::HttpReply ready = testing::HttpGet(*port, "/readyz");
    if (ready.status == 503) {
      saw_not_ready = true;
      not_ready_detail = ready.body;
    }
    if (Metric(*port, "driftd_query_ready", labels) == 0) saw_ready_metric_zero = true;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(saw_not_ready);
  CHECK(saw_ready_metric_zero);
  // The daemon stays up and says why it is not ready.
  CHECK_THAT(not_ready_detail, Catch::Contains("pipeline " + name + ": source not ready"));
  CHECK(testing::HttpGet(*port, "/healthz").status == 200);
  CHECK(Metric(*port, "driftd_query_state", {{"pipeline", name}, {"state", "running"}}) == 1);
  const double batches_in_outage = Metric(*port, "driftd_batches_total", labels);

  RequireStarted(broker, /*keep=*/true);
  // Back by itself: ready again, and batches with input committed after the outage.
  CHECK(WaitFor([&] { return ReadyStatus(*port) == 200; }, 60s));
  // The backlog drains in batches of maxOffsetsPerTrigger, each reporting the lag it leaves;
  // a few more batches, then the input stops.
  bool saw_lag = false;
  CHECK(WaitFor(
      [&] {
        saw_lag = saw_lag || SawLimitedBatchWithLag(*port);
        return saw_lag && Metric(*port, "driftd_batches_total", labels) >= batches_in_outage + 4;
      },
      60s));
  CHECK(saw_lag);
  REQUIRE_FALSE(daemon.Exited());
  writer.Finish();
  {
    INFO("input records not acknowledged: " << writer.first_error());
    REQUIRE(writer.failed() == 0);
  }
  const std::map<std::string, int64_t> produced = writer.acknowledged();
  int64_t total = 0;
  for (const auto& [model, count] : produced) total += count;
  CHECK(total == writer.sent());
  REQUIRE(WaitFor(
      [&] {
        return Metric(*port, "driftd_input_rows_total", labels) == static_cast<double>(total);
      },
      60s));

  // Per-partition lag, in /metrics and /progress: nothing left to read in either partition.
  for (int partition = 0; partition < 2; ++partition) {
    CHECK(Metric(*port, "driftd_source_lag_records",
                 {{"pipeline", name}, {"topic", input}, {"partition", std::to_string(partition)}}) ==
          0);
  }
  {
    // The newest progress record: its end offsets are the partitions' ends on the broker.
    const std::string progress = testing::HttpGet(*port, "/progress").body;
    INFO(progress);
    simdjson::dom::parser parser;
    simdjson::dom::array records;
    REQUIRE(parser.parse(progress).get(records) == simdjson::SUCCESS);
    REQUIRE(records.size() > 0);
    simdjson::dom::element source = records.at(records.size() - 1)["sources"].at(0);
    Admin admin;
    for (int partition = 0; partition < 2; ++partition) {
      const std::string key = std::to_string(partition);
      int64_t low = 0;
      int64_t high = 0;
      REQUIRE(rd_kafka_query_watermark_offsets(admin.client(), input.c_str(), partition, &low,
                                               &high, 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
      int64_t end = -1;
      int64_t lag = -1;
      CHECK(source["endOffset"][input][key].get(end) == simdjson::SUCCESS);
      CHECK(source["lag"][input][key].get(lag) == simdjson::SUCCESS);
      CHECK(end == high);
      CHECK(lag == 0);
    }
  }

  const double output_rows = Metric(*port, "driftd_output_rows_total", labels);
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(60s);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);

  // What a read_committed consumer sees: every input record counted exactly once.
  std::vector<Consumed> stats_rows;
  std::vector<Consumed> alert_rows;
  WaitFor(
      [&] {
        stats_rows = ReadAll(stats);
        alert_rows = ReadAll(alerts);
        return static_cast<double>(stats_rows.size() + alert_rows.size()) >= output_rows;
      },
      15s);
  // No delivered batch is missing or repeated: the topics hold what the daemon says it wrote.
  CHECK(static_cast<double>(stats_rows.size() + alert_rows.size()) == output_rows);
  std::map<std::string, int64_t> last_count;
  int64_t not_increasing = 0;
  for (const Consumed& row : stats_rows) {
    const std::string model = JsonString(row.value, "model_id");
    const int64_t count = JsonInt(row.value, "count");
    CHECK(row.key == model);
    // A batch delivered twice would repeat a count; a lost record would leave the final count
    // short, a record read twice would push it over.
    if (count <= last_count[model]) ++not_increasing;
    last_count[model] = count;
  }
  CHECK(not_increasing == 0);
  CHECK(last_count == produced);
  std::set<std::string> alert_ids;
  for (const Consumed& row : alert_rows) alert_ids.insert(JsonString(row.value, "alert_id"));
  CHECK(alert_ids.size() == alert_rows.size());
  CHECK_FALSE(alert_rows.empty());  // m0 drifted
}

TEST_CASE(
    "an availableNow query that meets a broker outage waits it out and reads everything before "
    "it ends",
    "[kafka][outage][e2e]") {
  // Planning during an outage finds "no new data"; availableNow took that for "all read" and
  // ended with most of the topic unread (exit 0). The broker is paused (SIGSTOP) rather than
  // stopped: its requests time out at once as they would on an overloaded machine.
  OwnBrokerTopics setup("outage-now");
  auto& [dir, broker, scoped, name, input, stats, alerts] = setup;
  const pid_t broker_pid = broker.Pid();
  REQUIRE(broker_pid > 0);
  // Batches of 500 records, each its own transaction: the query takes several seconds, and the
  // outage comes after its first batches.
  constexpr int kPerPartition = 60'000;
  std::map<std::string, int64_t> produced;
  for (int partition = 0; partition < 2; ++partition) {
    std::vector<std::string> values;
    for (int i = 0; i < kPerPartition; ++i) {
      const std::string model = fmt::format("m{}", i % kModels);
      ++produced[model];
      values.push_back(
          fmt::format(R"({{"model_id":"{}","id":{},"prediction":0.5}})", model, i));
    }
    kafka_test::Produce(input, partition, values);
  }
  DaemonRun run(dir, PipelineYaml(name, broker.bootstrap(), input, stats, alerts,
                                  dir / "checkpoint", "availableNow: true", 500));
  auto& [log, daemon, tails, port] = run;
  REQUIRE(port);
  const std::map<std::string, std::string> labels = {{"pipeline", name}};
  REQUIRE(WaitFor([&] { return Metric(*port, "driftd_batches_total", labels) >= 2; }, 60s));
  REQUIRE(kill(broker_pid, SIGSTOP) == 0);
  // Paused until the daemon has found its brokers unreachable (or has ended: the defect).
  const bool not_ready =
      WaitFor([&] { return daemon.Exited() || ReadyStatus(*port) == 503; }, 60s);
  REQUIRE(kill(broker_pid, SIGCONT) == 0);
  CHECK(not_ready);
  CHECK_FALSE(daemon.Exited());

  // The query ends by itself once the topic is read.
  auto status = daemon.Wait(120s);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  // Every record counted: each model's last count is all of its records.
  std::map<std::string, int64_t> last_count;
  for (const Consumed& row : ReadAll(stats)) {
    last_count[JsonString(row.value, "model_id")] = JsonInt(row.value, "count");
  }
  CHECK(last_count == produced);
  CHECK_THAT(testing::ReadFile(log), Catch::Contains("reachable again"));
}

TEST_CASE(
    "the kafka source and sink wait out a broker outage: planning finds no new data, a planned "
    "range and a transaction complete once the broker is back",
    "[kafka][outage][source][sink]") {
  TempDir dir("driftd-outage-connectors");
  std::filesystem::create_directories(dir.Sub("broker"));
  OwnBroker broker(dir.Sub("broker"));
  RequireStarted(broker, /*keep=*/false);
  ScopedBootstrap scoped(broker.bootstrap());

  const std::string input = UniqueName("outage-in");
  const std::string output = UniqueName("outage-out");
  Admin admin;
  admin.CreateTopic(input, 1);
  admin.CreateTopic(output, 1);
  const std::vector<std::string> values = kafka_test::Values("record", 200);
  kafka_test::Produce(input, 0, values);

  // The source's pipeline has no kafka sink, so it commits group offsets itself (OnCommitted).
  PipelineSpec reading = kafka_test::SourcePipeline(UniqueName("reader"), {{"subscribe", input}});
  auto source = kafka_test::StartSource(reading);
  const SourceOffsets start = kafka_test::Require(source->InitialOffsets());
  const SourceOffsets end = kafka_test::Require(source->PlanBatch(start));
  REQUIRE(end.at(input + "-0") == 200);
  CHECK(source->IsReady());

  PipelineSpec writing;
  writing.name = UniqueName("writer");
  writing.source.format = "kafka";  // the transaction also carries the source offsets
  writing.source.options = kafka_test::KafkaOptions(ConnectorRole::kSource, {{"subscribe", input}});
  writing.sinks.push_back(kafka_test::KafkaSinkSpec("out", output));
  auto sinks = CreateSinks(writing);
  REQUIRE(sinks);
  std::unique_ptr<Sink> sink = std::move(sinks->front());
  kafka_test::RequireOk(sink->Open());
  BatchOutput batch;
  batch.batch_id = 0;
  for (const std::string& value : values) batch.stats_update.Add("k", value);
  batch.source_end = end;

  RequireStopped(broker);
  const auto stopped_at = std::chrono::steady_clock::now();
  // Readiness follows the broker without any call from the executor's side.
  CHECK(WaitFor([&] { return !source->IsReady(); }, 15s));
  // Planning during the outage: no new data, at once, not an error that ends the query.
  auto planned = source->PlanBatch(end);
  INFO((planned ? "" : planned.error().message()));
  REQUIRE(planned);
  CHECK(*planned == end);
  // Committing group offsets gives up waiting for the unreachable coordinator after a moment
  // (a failure the executor only logs).
  const auto commit_start = std::chrono::steady_clock::now();
  IgnoreError(source->OnCommitted(end));
  CHECK(std::chrono::steady_clock::now() - commit_start < 4s);

  // A planned range read and a transaction delivered while the broker is away: both wait.
  std::atomic<bool> read_done{false};
  std::atomic<bool> deliver_done{false};
  kafka_test::ReadResult read;
  std::string read_error;
  Status delivered = Ok();
  std::thread reader([&] {
    auto opened = source->Read(start, end);
    if (!opened) {
      read_error = opened.error().message();
    } else {
      InputChunk chunk;
      for (bool more = true; more;) {
        chunk.Clear();
        auto next = (*opened)->Next(chunk, 1 << 20);
        if (!next) {
          read_error = next.error().message();
          break;
        }
        more = *next;
        for (size_t i = 0; i < chunk.size(); ++i) {
          read.records.push_back({std::string(chunk.record(i)), chunk.records()[i].position,
                                  chunk.records()[i].source_timestamp_us});
        }
      }
    }
    read_done.store(true);
  });
  std::thread deliverer([&] {
    delivered = sink->Deliver(batch);
    deliver_done.store(true);
  });
  std::this_thread::sleep_until(stopped_at + kOutage);
  CHECK_FALSE(read_done.load());
  CHECK_FALSE(deliver_done.load());

  RequireStarted(broker, /*keep=*/true);
  reader.join();
  deliverer.join();
  INFO(read_error);
  CHECK(read_error.empty());
  CHECK(kafka_test::Texts(read) == values);
  INFO((delivered ? "" : delivered.error().message()));
  CHECK(delivered);
  CHECK(kafka_test::ValuesOf(kafka_test::ReadCommitted(output, values.size())) == values);
  CHECK(WaitFor([&] { return source->IsReady(); }, 30s));
  CHECK(WaitFor([&] { return admin.CommittedOffset("driftd-" + writing.name, input, 0) == 200; },
                30s));

  // Planning resumes: records produced after the outage are planned.
  kafka_test::Produce(input, 0, kafka_test::Values("after", 5));
  SourceOffsets next;
  CHECK(WaitFor(
      [&] {
        auto again = source->PlanBatch(end);
        if (again) next = *again;
        return again && next != end;
      },
      30s));
  CHECK(next.at(input + "-0") == 205);
  // The group offsets of the reading pipeline land once the coordinator is back.
  kafka_test::RequireOk(source->OnCommitted(next));
  CHECK(WaitFor([&] { return admin.CommittedOffset("driftd-" + reading.name, input, 0) == 205; },
                30s));
  sink.reset();
  source.reset();
}

}  // namespace
}  // namespace driftd
