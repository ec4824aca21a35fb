// Scale-out throughput: the same topic read by one process in the default mode, and by 1, 2
// and 3 scaled-out processes (scaleOut.enabled, one consumer group), in one run.
//
//   bench_scale_out [--records N] [--partitions P] [--models M] [--processes 1,2,3]
//                   [--idle SECONDS] [--trigger INTERVAL] [--driftd BINARY]
//
// Produces N generated inference-log records (models spread over every partition, one drift)
// and a last record per partition far ahead in event time, so that every window closes. Each
// configuration gets its own pipeline name (group, internal topics, output topics), and runs
// `driftd run` with trigger processingTime 100 ms (--trigger: another interval): per-model count and means of 10 s event-time
// windows (append) and drift (mean_shift, psi) -> two Kafka sinks. The clock runs from the
// first process's start until a read_committed reader of the stats topic has seen every input
// row counted in a window; then the processes get SIGTERM and their CPU time (user + system,
// from wait4) is added up. Prints records per wall-clock second and CPU-microseconds per record
// of each configuration, and the ratio of each scaled-out configuration's CPU per record to the
// default mode's (the cost of the repartition topic and the changelog). With --idle, the
// processes are left running that many seconds after the output is complete, and the CPU they
// spend with nothing to read is printed per process: each one's fixed cost (its triggers every
// 100 ms, the consumers' fetches and the group's heartbeats). Needs the test broker
// (tests/kafka/broker.sh start; DRIFTD_KAFKA_BOOTSTRAP, default 127.0.0.1:19092).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <simdjson.h>

#include "connectors/inference_generator.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Settings {
  int64_t records = 1'000'000;
  int partitions = 12;
  int models = 16;
  std::vector<int> processes = {1, 2, 3};
  // Seconds the processes stay up, idle, after the output is complete (0: none).
  int idle_seconds = 0;
  // The pipeline's trigger interval.
  std::string trigger = "100ms";
  // The daemon to run (another build's, or a wrapper that profiles it).
  std::string driftd = DRIFTD_BINARY;
};

std::string Bootstrap() {
  const char* bootstrap = std::getenv("DRIFTD_KAFKA_BOOTSTRAP");
  return bootstrap && *bootstrap ? bootstrap : "127.0.0.1:19092";
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_scale_out: %s\n", message.c_str());
  std::exit(1);
}

rd_kafka_t* NewClient(rd_kafka_type_t type, const std::map<std::string, std::string>& settings) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  std::map<std::string, std::string> all = {{"bootstrap.servers", Bootstrap()},
                                            {"log_level", "3"}};
  for (const auto& [name, value] : settings) all[name] = value;
  for (const auto& [name, value] : all) {
    if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), error, sizeof error) !=
        RD_KAFKA_CONF_OK) {
      Die(error);
    }
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf, error, sizeof error);
  if (!rk) Die(error);
  return rk;
}

void CreateTopic(rd_kafka_t* rk, const std::string& topic, int partitions) {
  char error[512];
  rd_kafka_NewTopic_t* new_topic =
      rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, error, sizeof error);
  if (!new_topic) Die(error);
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &new_topic, 1, nullptr, queue);
  rd_kafka_event_t* event = rd_kafka_queue_poll(queue, 60'000);
  if (!event || rd_kafka_event_error(event)) Die("creating topic " + topic);
  rd_kafka_event_destroy(event);
  rd_kafka_queue_destroy(queue);
  rd_kafka_NewTopic_destroy(new_topic);
  // Wait until the topic has its leaders.
  for (int attempt = 0; attempt < 100; ++attempt) {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
    const rd_kafka_metadata_t* metadata = nullptr;
    bool ready = rd_kafka_metadata(rk, 0, rkt, &metadata, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                 metadata->topic_cnt == 1 && metadata->topics[0].partition_cnt == partitions;
    for (int p = 0; ready && p < partitions; ++p) {
      ready = metadata->topics[0].partitions[p].leader >= 0;
    }
    if (metadata) rd_kafka_metadata_destroy(metadata);
    rd_kafka_topic_destroy(rkt);
    if (ready) return;
    usleep(100'000);
  }
  Die("topic without leaders: " + topic);
}

void Produce(const std::string& topic, const Settings& settings) {
  driftd::InferenceGeneratorOptions options;
  options.models = settings.models;
  options.features = 4;
  options.labels = 0;
  options.rows_per_second = 1000;
  options.start_time_ms = 1'797'000'000'000;
  auto scenario = driftd::ParseDriftScenario(
      fmt::format("model-2 feature 3 shifts by 1.5 sigma after {} s", settings.records / 2000));
  if (!scenario) Die(scenario.error().message());
  options.drift.push_back(*scenario);
  auto generator = driftd::InferenceGenerator::Create(options);
  if (!generator) Die(generator.error().message());
  rd_kafka_t* producer = NewClient(RD_KAFKA_PRODUCER, {{"linger.ms", "20"},
                                                       {"batch.size", "1000000"},
                                                       {"queue.buffering.max.messages", "1000000"}});
  std::string value;
  auto send = [&](int32_t partition, const std::string& record) {
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
          RD_KAFKA_V_VALUE(const_cast<char*>(record.data()), record.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer, 10);
        continue;
      }
      if (err) Die(rd_kafka_err2str(err));
      return;
    }
  };
  for (int64_t row = 0; row < settings.records; ++row) {
    value.clear();
    generator->AppendRecord(static_cast<uint64_t>(row), value);
    send(static_cast<int32_t>((row * 7 + row / 5) % settings.partitions), value);
    rd_kafka_poll(producer, 0);
  }
  for (int p = 0; p < settings.partitions; ++p) {
    send(p, R"({"model_id":"flush","event_time":"2099-01-01T00:00:00.000Z",)"
            R"("feature_vector":[0,0,0,0],"prediction":0.5})");
  }
  if (rd_kafka_flush(producer, 120'000)) Die("producing timed out");
  rd_kafka_destroy(producer);
}

const char* kPipeline = R"(name: ${PIPELINE_NAME}
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: ${KAFKA_BROKERS}
    subscribe: ${INPUT_TOPIC}
    startingOffsets: earliest
    maxOffsetsPerTrigger: 50000
query:
  groupBy: [model_id]
  window: {column: event_time, size: 10 seconds}
  watermark: {column: event_time, delay: 2 seconds, idleTimeout: 0}
  aggregates: [count, mean(prediction), mean(feature_vector)]
drift:
  series: [feature_vector, prediction]
  baseline: {type: warmup, records: 2000}
  detectors: [{type: mean_shift}, {type: psi}]
  minSamples: 200
sinks:
  - {name: stats, format: kafka, stream: stats, outputMode: append,
     options: {kafka.bootstrap.servers: "${KAFKA_BROKERS}", topic: "${STATS_TOPIC}"}}
  - {name: alerts, format: kafka, stream: alerts,
     options: {kafka.bootstrap.servers: "${KAFKA_BROKERS}", topic: "${ALERTS_TOPIC}"}}
trigger: {processingTime: "${TRIGGER}"}
checkpointLocation: ${CHECKPOINT}
scaleOut:
  enabled: ${SCALE_OUT}
  instance: ${INSTANCE}
)";

struct Result {
  double seconds = 0;
  double cpu_seconds = 0;
  // CPU milliseconds per wall-clock second of each process while idle (--idle), or -1.
  double idle_ms_per_s = -1;
};

// CPU seconds (user + system) a running process has used, from /proc/PID/stat.
double CpuSecondsOf(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The fields after the command's name, which ends at the last ')': state is field 3, utime
  // and stime fields 14 and 15.
  const size_t end = stat.rfind(')');
  if (end == std::string::npos) Die(fmt::format("cannot read /proc/{}/stat", pid));
  std::istringstream fields(stat.substr(end + 2));
  std::string field;
  long long utime = 0;
  long long stime = 0;
  for (int index = 3; fields >> field && index <= 15; ++index) {
    if (index == 14) utime = std::atoll(field.c_str());
    if (index == 15) stime = std::atoll(field.c_str());
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Rows of real models counted in the stats windows a read_committed reader sees so far. The
// reader is assigned the topic's partitions from their start: a group subscription made right
// after the topic's creation could be given no partition and wait for the next metadata
// refresh (5 minutes), which once stalled a run.
class StatsReader {
 public:
  StatsReader(const std::string& topic, int partitions) {
    consumer_ = NewClient(RD_KAFKA_CONSUMER, {{"group.id", "bench-reader-" + topic},
                                              {"isolation.level", "read_committed"},
                                              {"enable.auto.commit", "false"}});
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; ++p) {
      rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset =
          RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_assign(consumer_, list);
    rd_kafka_topic_partition_list_destroy(list);
  }
  ~StatsReader() {
    rd_kafka_consumer_close(consumer_);
    rd_kafka_destroy(consumer_);
  }
  int64_t Poll() {
    while (rd_kafka_message_t* message = rd_kafka_consumer_poll(consumer_, 50)) {
      if (!message->err) {
        simdjson::dom::element row;
        if (!parser_.parse(static_cast<const char*>(message->payload), message->len).get(row)) {
          std::string_view model;
          int64_t count = 0;
          if (!row["model_id"].get(model) && model != "flush" && !row["count"].get(count)) {
            rows_ += count;
          }
        }
      }
      rd_kafka_message_destroy(message);
    }
    return rows_;
  }

 private:
  rd_kafka_t* consumer_ = nullptr;
  simdjson::dom::parser parser_;
  int64_t rows_ = 0;
};

Result Run(rd_kafka_t* admin, const fs::path& dir, const std::string& input, const Settings& settings,
           int processes, bool scale_out) {
  const std::string name = fmt::format("bench-so-{}-{}-{}", getpid(), processes,
                                       scale_out ? "group" : "solo");
  const std::string stats = name + "-stats";
  const std::string alerts = name + "-alerts";
  constexpr int kStatsPartitions = 3;
  CreateTopic(admin, stats, kStatsPartitions);
  CreateTopic(admin, alerts, 1);
  const fs::path yaml = dir / (name + ".yaml");
  std::ofstream(yaml) << kPipeline;
  StatsReader reader(stats, kStatsPartitions);
  const auto start = Clock::now();
  std::vector<pid_t> pids;
  for (int i = 0; i < processes; ++i) {
    std::fflush(nullptr);  // the child must not print the parent's buffered lines again
    pid_t pid = fork();
    if (pid == 0) {
      setenv("PIPELINE_NAME", name.c_str(), 1);
      setenv("KAFKA_BROKERS", Bootstrap().c_str(), 1);
      setenv("INPUT_TOPIC", input.c_str(), 1);
      setenv("STATS_TOPIC", stats.c_str(), 1);
      setenv("ALERTS_TOPIC", alerts.c_str(), 1);
      setenv("CHECKPOINT", (dir / name).c_str(), 1);
      setenv("SCALE_OUT", scale_out ? "true" : "false", 1);
      setenv("TRIGGER", settings.trigger.c_str(), 1);
      setenv("INSTANCE", fmt::format("p{}", i).c_str(), 1);
      const std::string log = (dir / fmt::format("{}-p{}.log", name, i)).string();
      freopen(log.c_str(), "w", stdout);
      freopen(log.c_str(), "a", stderr);
      execl(settings.driftd.c_str(), settings.driftd.c_str(), "run", yaml.c_str(), "--http", "off",
            "--quiet-progress", static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + std::chrono::minutes(15);
  while (reader.Poll() < settings.records) {
    if (Clock::now() > deadline) Die(fmt::format("{}: the output stalled", name));
  }
  Result result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // CPU spent after the output was complete, while idle (--idle): not the records'.
  double idle_cpu = 0;
  if (settings.idle_seconds > 0) {
    auto total = [&] {
      double cpu = 0;
      for (pid_t pid : pids) cpu += CpuSecondsOf(pid);
      return cpu;
    };
    const double complete = total();
    // The last batches' commits settle first.
    std::this_thread::sleep_for(std::chrono::seconds(5));
    const double before = total();
    const auto idle_start = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(settings.idle_seconds));
    const double wall = std::chrono::duration<double>(Clock::now() - idle_start).count();
    const double after = total();
    result.idle_ms_per_s = (after - before) * 1000 / wall / static_cast<double>(processes);
    idle_cpu = after - complete;
  }
  for (pid_t pid : pids) kill(pid, SIGTERM);
  for (pid_t pid : pids) {
    int status = 0;
    rusage usage{};
    wait4(pid, &status, 0, &usage);
    result.cpu_seconds += static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                          static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  }
  result.cpu_seconds -= idle_cpu;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--records") {
      settings.records = std::atoll(value.c_str());
    } else if (flag == "--partitions") {
      settings.partitions = std::atoi(value.c_str());
    } else if (flag == "--models") {
      settings.models = std::atoi(value.c_str());
    } else if (flag == "--processes") {
      settings.processes.clear();
      for (size_t at = 0; at < value.size();) {
        size_t comma = value.find(',', at);
        if (comma == std::string::npos) comma = value.size();
        settings.processes.push_back(std::atoi(value.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    } else if (flag == "--trigger") {
      settings.trigger = value;
    } else if (flag == "--idle") {
      settings.idle_seconds = std::atoi(value.c_str());
    } else if (flag == "--driftd") {
      settings.driftd = value;
    } else {
      Die("unknown flag " + flag);
    }
  }
  const fs::path dir = fs::temp_directory_path() / fmt::format("bench-scale-out-{}", getpid());
  fs::create_directories(dir);
  rd_kafka_t* admin = NewClient(RD_KAFKA_PRODUCER, {});
  const std::string input = fmt::format("bench-so-input-{}", getpid());
  CreateTopic(admin, input, settings.partitions);
  std::printf("producing %lld records to %d partitions (%d models in every partition)\n",
              static_cast<long long>(settings.records), settings.partitions, settings.models);
  Produce(input, settings);

  const Result solo = Run(admin, dir, input, settings, 1, false);
  std::printf("%-24s %9s %14s %18s\n", "configuration", "seconds", "records/s", "CPU-us/record");
  auto print = [&](const std::string& what, const Result& result) {
    std::printf("%-24s %9.2f %14.0f %18.2f\n", what.c_str(), result.seconds,
                static_cast<double>(settings.records) / result.seconds,
                result.cpu_seconds * 1e6 / static_cast<double>(settings.records));
    if (result.idle_ms_per_s >= 0) {
      std::printf("  idle for %d s after the input, trigger every %s: %.1f ms of CPU per second "
                  "per process\n",
                  settings.idle_seconds, settings.trigger.c_str(), result.idle_ms_per_s);
    }
  };
  print("default mode, 1 process", solo);
  for (int processes : settings.processes) {
    const Result group = Run(admin, dir, input, settings, processes, true);
    print(fmt::format("scaleOut, {} process{}", processes, processes == 1 ? "" : "es"), group);
    std::printf("  CPU per record vs the default mode: %.2fx; wall-clock throughput: %.2fx\n",
                group.cpu_seconds / solo.cpu_seconds, solo.seconds / group.seconds);
  }
  rd_kafka_destroy(admin);
  fs::remove_all(dir);
  return 0;
}
