// End-to-end Kafka throughput of the daemon beside a plain librdkafka consumer, in one run.
//
//   bench_kafka [--records N] [--partitions P] [--rounds R] [--max-offsets M]
//               [--models M] [--features F] [--keep 1] [--kafka name=value]...
//               [--topic EXISTING] [--threads T[,T...]] [--driftd BINARY]
//
// Produces N inference-log records (the project's generator, with one injected drift so that
// alerts are raised) to a fresh input topic on the broker at DRIFTD_KAFKA_BOOTSTRAP (default
// 127.0.0.1:19092; tests/kafka/broker.sh start). Then, for R rounds with the order alternating,
// reads the whole topic with:
//   raw-poll   a plain librdkafka consumer, rd_kafka_consumer_poll loop, library defaults;
//   raw-batch  the same with rd_kafka_consume_batch_queue;
//   source     the KafkaSource alone (plan + read in the executor's chunk size, no decoding);
//   driftd/T   the real daemon, `driftd run` with trigger availableNow and `threads: T` (default
//              1 and 2): Kafka source -> count, mean, stddev per model -> drift detectors -> two
//              Kafka sinks, one transaction per batch, from process start to exit.
// Each daemon round is checked: exit 0, every input record counted in the progress records,
// the consumer group's committed offsets at the end of every partition, stats and alerts on
// the output topics for a read_committed consumer. Prints records per wall-clock second and
// per CPU second of each reader, and the medians of the per-round ratios of driftd to the
// plain consumer. Topics are deleted at the end.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>

#include "connectors/inference_generator.h"
#include "connectors/registry.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Settings {
  int64_t records = 2'000'000;
  int partitions = 4;
  int rounds = 3;
  // The seed pipeline's (deploy/examples/kafka-drift.yaml) batch bound.
  int64_t max_offsets = 200'000;
  int models = 8;
  int features = 8;
  // Keep the daemon's pipelines and logs and the topics (for profiling).
  bool keep = false;
  // The daemon's `threads`, one run per round each.
  std::vector<int> threads = {1, 2};
  // Extra librdkafka settings for the kafka source (driftd and source readers), without the
  // "kafka." prefix: tuning experiments.
  std::map<std::string, std::string> source_client;
  // An existing topic holding `records` records to read instead of producing a new one.
  std::string input_topic;
  // The daemon to run (another build's, to compare two).
  std::string driftd = DRIFTD_BINARY;
};

std::string Bootstrap() {
  const char* bootstrap = std::getenv("DRIFTD_KAFKA_BOOTSTRAP");
  return bootstrap && *bootstrap ? bootstrap : "127.0.0.1:19092";
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_kafka: %s\n", message.c_str());
  std::exit(1);
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double CpuSeconds(const rusage& usage) {
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// CPU seconds (user + system, all threads) this process has used so far.
double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return CpuSeconds(usage);
}

// A reader's throughput: records per wall-clock second, and per CPU second of the reading
// process. The machines are shared, so the CPU figure is the steadier of the two.
struct Rate {
  double wall = 0;
  double cpu = 0;
};

Rate MakeRate(int64_t records, double wall_seconds, double cpu_seconds) {
  return {static_cast<double>(records) / wall_seconds,
          static_cast<double>(records) / std::max(cpu_seconds, 1e-6)};
}

using Config = std::map<std::string, std::string>;

rd_kafka_t* NewClient(rd_kafka_type_t type, const Config& settings) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  Config all = {{"bootstrap.servers", Bootstrap()}, {"log_level", "3"}};
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

// Waits for the admin result on `queue`; topic-level errors other than `tolerated` are fatal.
void AwaitAdmin(rd_kafka_queue_t* queue, const char* what,
                rd_kafka_resp_err_t tolerated = RD_KAFKA_RESP_ERR_NO_ERROR) {
  rd_kafka_event_t* event = rd_kafka_queue_poll(queue, 60'000);
  if (!event) Die(fmt::format("{}: no answer (is the broker up?)", what));
  if (rd_kafka_event_error(event)) Die(fmt::format("{}: {}", what, rd_kafka_event_error_string(event)));
  size_t count = 0;
  const rd_kafka_topic_result_t** results = nullptr;
  if (const auto* created = rd_kafka_event_CreateTopics_result(event)) {
    results = rd_kafka_CreateTopics_result_topics(created, &count);
  } else if (const auto* deleted = rd_kafka_event_DeleteTopics_result(event)) {
    results = rd_kafka_DeleteTopics_result_topics(deleted, &count);
  }
  for (size_t i = 0; i < count; ++i) {
    rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
    if (err && err != tolerated) {
      Die(fmt::format("{} {}: {}", what, rd_kafka_topic_result_name(results[i]),
                      rd_kafka_topic_result_error_string(results[i])));
    }
  }
  rd_kafka_event_destroy(event);
}

void CreateTopic(rd_kafka_t* rk, const std::string& topic, int partitions) {
  char error[512];
  rd_kafka_NewTopic_t* new_topic =
      rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, error, sizeof error);
  if (!new_topic) Die(error);
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &new_topic, 1, nullptr, queue);
  AwaitAdmin(queue, "creating topic");
  rd_kafka_queue_destroy(queue);
  rd_kafka_NewTopic_destroy(new_topic);
  // The controller answers before the partitions have leaders: wait for them, as a topic that
  // was made for a pipeline has them long before it runs.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    rd_kafka_topic_t* handle = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
    const rd_kafka_metadata_t* metadata = nullptr;
    bool ready = false;
    if (rd_kafka_metadata(rk, 0, handle, &metadata, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ready = metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
              metadata->topics[0].partition_cnt == partitions;
      for (int p = 0; ready && p < metadata->topics[0].partition_cnt; ++p) {
        ready = metadata->topics[0].partitions[p].leader >= 0 &&
                metadata->topics[0].partitions[p].err == RD_KAFKA_RESP_ERR_NO_ERROR;
      }
      rd_kafka_metadata_destroy(metadata);
    }
    rd_kafka_topic_destroy(handle);
    if (ready) return;
    if (Clock::now() > deadline) Die(fmt::format("topic {}: no leaders after 30 s", topic));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void DeleteTopics(rd_kafka_t* rk, const std::vector<std::string>& topics) {
  if (topics.empty()) return;
  std::vector<rd_kafka_DeleteTopic_t*> requests;
  for (const auto& topic : topics) requests.push_back(rd_kafka_DeleteTopic_new(topic.c_str()));
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_DeleteTopics(rk, requests.data(), requests.size(), nullptr, queue);
  AwaitAdmin(queue, "deleting topic", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  rd_kafka_queue_destroy(queue);
  rd_kafka_DeleteTopic_destroy_array(requests.data(), requests.size());
}

// The model of a generated record, "model-3", read from its JSON text.
std::string_view ModelOf(std::string_view record) {
  constexpr std::string_view kField = R"("model_id":")";
  size_t begin = record.find(kField);
  if (begin == std::string_view::npos) return {};
  begin += kField.size();
  return record.substr(begin, record.find('"', begin) - begin);
}

struct Produced {
  uint64_t bytes = 0;
  double seconds = 0;
};

Produced ProduceInput(const std::string& topic, const Settings& settings,
                      const driftd::InferenceGenerator& generator) {
  rd_kafka_t* producer = NewClient(RD_KAFKA_PRODUCER, {{"linger.ms", "20"},
                                                       {"batch.size", "1000000"},
                                                       {"compression.codec", "none"},
                                                       {"queue.buffering.max.messages", "1000000"}});
  Produced produced;
  auto start = Clock::now();
  std::string value;
  for (int64_t i = 0; i < settings.records; ++i) {
    value.clear();
    generator.AppendRecord(static_cast<uint64_t>(i), value);
    std::string_view key = ModelOf(value);
    produced.bytes += value.size();
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer, RD_KAFKA_V_TOPIC(topic.c_str()),
          RD_KAFKA_V_PARTITION(static_cast<int32_t>(i % settings.partitions)),
          RD_KAFKA_V_KEY(key.data(), key.size()), RD_KAFKA_V_VALUE(value.data(), value.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer, 10);
        continue;
      }
      if (err) Die(rd_kafka_err2str(err));
      break;
    }
    rd_kafka_poll(producer, 0);
  }
  if (rd_kafka_flush(producer, 120'000)) Die("producing timed out");
  produced.seconds = SecondsSince(start);
  rd_kafka_destroy(producer);
  return produced;
}

// Reads the whole topic from its beginning with librdkafka's defaults: one message per
// rd_kafka_consumer_poll (the classic loop), or up to 1024 per rd_kafka_consume_batch_queue.
// The time runs from the client's creation (connecting included, as for the daemon) to the
// last record.
Rate RawConsume(const std::string& topic, const Settings& settings, bool batch,
                const std::string& group) {
  auto start = Clock::now();
  double cpu_start = SelfCpuSeconds();
  rd_kafka_t* rk =
      NewClient(RD_KAFKA_CONSUMER, {{"group.id", group}, {"enable.auto.commit", "false"}});
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(settings.partitions);
  for (int p = 0; p < settings.partitions; ++p) {
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(rk, list);
  rd_kafka_queue_t* queue = rd_kafka_queue_get_consumer(rk);
  std::vector<rd_kafka_message_t*> messages(batch ? 1024 : 1);
  int64_t seen = 0;
  uint64_t checksum = 0;
  auto deadline = Clock::now() + std::chrono::minutes(5);
  while (seen < settings.records) {
    if (Clock::now() > deadline) Die("the raw consumer stalled");
    ssize_t count = 0;
    if (batch) {
      // The call waits until the batch is full or the timeout passes: a short timeout keeps
      // the last, partial batch from waiting.
      count = rd_kafka_consume_batch_queue(queue, 10, messages.data(), messages.size());
    } else {
      messages[0] = rd_kafka_consumer_poll(rk, 1000);
      count = messages[0] ? 1 : 0;
    }
    for (ssize_t i = 0; i < count; ++i) {
      rd_kafka_message_t* message = messages[i];
      if (!message->err) {
        ++seen;
        // Touch the payload, as any real consumer would.
        checksum += message->len + static_cast<const unsigned char*>(message->payload)[0];
      }
      rd_kafka_message_destroy(message);
    }
  }
  double seconds = SecondsSince(start);
  double cpu = SelfCpuSeconds() - cpu_start;
  if (checksum == 0) Die("no bytes read");
  rd_kafka_queue_destroy(queue);
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return MakeRate(settings.records, seconds, cpu);
}

// The KafkaSource alone, planned like availableNow with the same batch bound, read in the
// executor's 4 MiB chunks: what the daemon's reading costs without decoding and state.
Rate SourceRead(const std::string& topic, const Settings& settings, const std::string& name) {
  auto start_time = Clock::now();
  double cpu_start = SelfCpuSeconds();
  driftd::PipelineSpec pipeline;
  pipeline.name = name;
  pipeline.source.format = "kafka";
  pipeline.source.options.Set("subscribe", topic);
  pipeline.source.options.Set("startingOffsets", "earliest");
  pipeline.source.options.Set("maxOffsetsPerTrigger", std::to_string(settings.max_offsets));
  pipeline.source.options.Set("kafkaConsumer.pollTimeoutMs", "120000");
  pipeline.source.options.Set("kafka.bootstrap.servers", Bootstrap());
  for (const auto& [setting, value] : settings.source_client) {
    pipeline.source.options.Set("kafka." + setting, value);
  }
  auto source = driftd::CreateSource(pipeline);
  if (!source) Die(source.error().message());
  if (auto started = (*source)->Start({}); !started) Die(started.error().message());
  auto position = (*source)->InitialOffsets();
  if (!position) Die(position.error().message());
  if (auto frozen = (*source)->FreezeAvailable(); !frozen) Die(frozen.error().message());
  driftd::InputChunk chunk;
  int64_t seen = 0;
  for (;;) {
    auto end = (*source)->PlanBatch(*position);
    if (!end) Die(end.error().message());
    if (*end == *position) break;
    auto reader = (*source)->Read(*position, *end);
    if (!reader) Die(reader.error().message());
    for (bool more = true; more;) {
      chunk.Clear();
      auto next = (*reader)->Next(chunk, 4 << 20);
      if (!next) Die(next.error().message());
      more = *next;
      seen += static_cast<int64_t>(chunk.size());
    }
    *position = *end;
  }
  double seconds = SecondsSince(start_time);
  double cpu = SelfCpuSeconds() - cpu_start;
  if (seen != settings.records) {
    Die(fmt::format("the source read {} of {} records", seen, settings.records));
  }
  return MakeRate(settings.records, seconds, cpu);
}

std::string PipelineYaml(const std::string& name, const std::string& input,
                         const std::string& stats, const std::string& alerts,
                         const fs::path& checkpoint, const Settings& settings, int threads) {
  std::string extra;
  for (const auto& [setting, value] : settings.source_client) {
    extra += fmt::format("\n    kafka.{}: \"{}\"", setting, value);
  }
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: feature_vector, type: array<double>}}
  - {{name: prediction, type: double}}
  - {{name: ground_truth, type: double}}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: "{bootstrap}"
    subscribe: {input}
    startingOffsets: earliest
    maxOffsetsPerTrigger: {max_offsets}
    failOnDataLoss: true{extra}
  malformed: {{policy: drop}}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction), stddev(prediction), mean(feature_vector)]
drift:
  series: [feature_vector, prediction]
  baseline: {{type: warmup, records: 5000}}
  detectors:
    - {{type: mean_shift, warn: 5, alert: 5.5, minEffect: 0.1}}
    - {{type: psi, warn: 5, alert: 5.5, bins: 10}}
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
    options: {{kafka.bootstrap.servers: "{bootstrap}", topic: {alerts}}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
threads: {threads}
)",
                     fmt::arg("name", name), fmt::arg("bootstrap", Bootstrap()),
                     fmt::arg("input", input), fmt::arg("max_offsets", settings.max_offsets),
                     fmt::arg("stats", stats), fmt::arg("alerts", alerts),
                     fmt::arg("checkpoint", checkpoint.string()), fmt::arg("extra", extra),
                     fmt::arg("threads", threads));
}

// The integer after `"key":` in `text` (0 when absent).
int64_t IntAfter(std::string_view text, std::string_view key) {
  std::string pattern = fmt::format("\"{}\":", key);
  size_t at = text.find(pattern);
  if (at == std::string_view::npos) return 0;
  return std::strtoll(std::string(text.substr(at + pattern.size(), 24)).c_str(), nullptr, 10);
}

struct DaemonRun {
  double seconds = 0;
  double cpu_seconds = 0;
  int batches = 0;
  int64_t input_rows = 0;
  // Sums of the progress records' durationMs phases.
  int64_t plan_ms = 0, read_process_ms = 0, commit_ms = 0, delivery_ms = 0, batch_ms = 0;
};

DaemonRun RunDaemon(const std::string& driftd, const fs::path& yaml, const fs::path& log_path) {
  auto start = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    FILE* log = std::fopen(log_path.c_str(), "w");
    if (log) {
      dup2(fileno(log), 1);
      dup2(fileno(log), 2);
    }
    execl(driftd.c_str(), driftd.c_str(), "run", yaml.c_str(), "--http", "off", nullptr);
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  DaemonRun run;
  run.seconds = SecondsSince(start);
  run.cpu_seconds = CpuSeconds(usage);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die(fmt::format("driftd failed (status {}); see {}", status, log_path.string()));
  }
  std::ifstream in(log_path);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"batchId\":") == std::string::npos) continue;
    ++run.batches;
    run.input_rows += IntAfter(line, "numInputRows");
    run.plan_ms += IntAfter(line, "latestOffset");
    run.read_process_ms += IntAfter(line, "addBatch");
    run.commit_ms += IntAfter(line, "walCommit");
    run.delivery_ms += IntAfter(line, "delivery");
    run.batch_ms += IntAfter(line, "triggerExecution");
  }
  return run;
}

// A broker makes its internal topics (the transaction log, the consumer groups' offsets) on
// their first use, which takes a second or more: one transaction and one group commit here,
// before anything is timed, as a broker in service has made them long ago.
void WarmBroker(const std::string& topic) {
  rd_kafka_t* producer =
      NewClient(RD_KAFKA_PRODUCER, {{"transactional.id", "bench-kafka-warm-up"}});
  auto check = [](rd_kafka_error_t* error, const char* what) {
    if (!error) return;
    Die(fmt::format("warming the broker up: {}: {}", what, rd_kafka_error_string(error)));
  };
  check(rd_kafka_init_transactions(producer, 60'000), "init_transactions");
  check(rd_kafka_begin_transaction(producer), "begin_transaction");
  check(rd_kafka_commit_transaction(producer, 60'000), "commit_transaction");
  rd_kafka_destroy(producer);
  rd_kafka_t* consumer = NewClient(RD_KAFKA_CONSUMER, {{"group.id", "bench-kafka-warm-up"}});
  rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(offsets, topic.c_str(), 0)->offset = 0;
  const rd_kafka_resp_err_t err = rd_kafka_commit(consumer, offsets, /*async=*/0);
  if (err) {
    Die(fmt::format("warming the broker up: committing an offset: {}", rd_kafka_err2str(err)));
  }
  rd_kafka_topic_partition_list_destroy(offsets);
  rd_kafka_consumer_close(consumer);
  rd_kafka_destroy(consumer);
}

// Records a read_committed consumer sees in partition 0 of `topic`.
int64_t CountCommitted(const std::string& topic) {
  rd_kafka_t* rk = NewClient(RD_KAFKA_CONSUMER, {{"group.id", "bench-check-" + topic},
                                                 {"isolation.level", "read_committed"},
                                                 {"enable.partition.eof", "true"},
                                                 {"enable.auto.commit", "false"}});
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  int64_t count = 0;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  for (bool eof = false; !eof;) {
    if (Clock::now() > deadline) Die("reading the output timed out");
    rd_kafka_message_t* message = rd_kafka_consumer_poll(rk, 200);
    if (!message) continue;
    if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      eof = true;
    } else if (!message->err) {
      ++count;
    }
    rd_kafka_message_destroy(message);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return count;
}

// The group's committed offsets must stand at the end of every input partition: the last
// batch's transaction (which carries them) committed, so the whole topic went through.
void CheckCommittedOffsets(const std::string& group, const std::string& topic,
                           const Settings& settings) {
  rd_kafka_t* rk = NewClient(RD_KAFKA_CONSUMER, {{"group.id", group}});
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(settings.partitions);
  for (int p = 0; p < settings.partitions; ++p) {
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p);
  }
  if (rd_kafka_committed(rk, list, 30'000)) Die("reading the group's committed offsets failed");
  int64_t total = 0;
  for (int i = 0; i < list->cnt; ++i) {
    int64_t low = 0, high = 0;
    rd_kafka_query_watermark_offsets(rk, topic.c_str(), list->elems[i].partition, &low, &high,
                                     30'000);
    if (list->elems[i].offset != high) {
      Die(fmt::format("group {} committed offset {} for partition {}, the end is {}", group,
                      list->elems[i].offset, list->elems[i].partition, high));
    }
    total += high - low;
  }
  if (total != settings.records) Die(fmt::format("the input topic holds {} records", total));
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    std::string text = argv[i + 1];
    int64_t value = std::atoll(text.c_str());
    if (flag == "--kafka") {
      size_t eq = text.find('=');
      if (eq == std::string::npos) Die("--kafka needs name=value");
      settings.source_client[text.substr(0, eq)] = text.substr(eq + 1);
    } else if (flag == "--topic") {
      settings.input_topic = text;
    } else if (flag == "--records") {
      settings.records = value;
    } else if (flag == "--partitions") {
      settings.partitions = static_cast<int>(value);
    } else if (flag == "--rounds") {
      settings.rounds = static_cast<int>(value);
    } else if (flag == "--max-offsets") {
      settings.max_offsets = value;
    } else if (flag == "--models") {
      settings.models = static_cast<int>(value);
    } else if (flag == "--features") {
      settings.features = static_cast<int>(value);
    } else if (flag == "--driftd") {
      settings.driftd = text;
    } else if (flag == "--keep") {
      settings.keep = value != 0;
    } else if (flag == "--threads") {
      settings.threads.clear();
      std::stringstream list(text);
      for (std::string item; std::getline(list, item, ',');) {
        settings.threads.push_back(std::atoi(item.c_str()));
      }
      if (settings.threads.empty()) Die("--threads needs a list of thread counts");
    } else {
      Die("unknown flag " + flag);
    }
  }
  if (settings.records <= 0 || settings.partitions <= 0 || settings.rounds <= 0) {
    Die("records, partitions and rounds must be positive");
  }

  // One record per millisecond of event time; model-1's feature 0 shifts halfway through, so
  // the detectors raise alerts while the other models stay quiet.
  driftd::InferenceGeneratorOptions generator_options;
  generator_options.models = settings.models;
  generator_options.features = settings.features;
  generator_options.rows_per_second = 1000;
  generator_options.start_time_ms = 1'795'000'000'000;
  auto drift = driftd::ParseDriftScenarios(fmt::format(
      "model-1 feature 0 shifts by 1.5 sigma after {} s", settings.records / 2000));
  if (!drift) Die(drift.error().message());
  generator_options.drift = *drift;
  auto generator = driftd::InferenceGenerator::Create(generator_options);
  if (!generator) Die(generator.error().message());

  const std::string run_id = fmt::format("{}-{}", getpid(), time(nullptr));
  const std::string input =
      settings.input_topic.empty() ? "bench-kafka-in-" + run_id : settings.input_topic;
  const fs::path dir = fs::temp_directory_path() / ("driftd-bench-kafka-" + run_id);
  fs::create_directories(dir);
  rd_kafka_t* admin = NewClient(RD_KAFKA_PRODUCER, {});
  std::vector<std::string> topics;
  if (settings.input_topic.empty()) {
    topics.push_back(input);
    CreateTopic(admin, input, settings.partitions);
    Produced produced = ProduceInput(input, settings, *generator);
    std::printf("produced %lld records (%.1f MB, %d models x %d features) to %s, %d partitions, "
                "in %.1f s\n",
                static_cast<long long>(settings.records), produced.bytes / 1e6, settings.models,
                settings.features, input.c_str(), settings.partitions, produced.seconds);
  } else {
    std::printf("reading %lld records of the existing topic %s (%d partitions)\n",
                static_cast<long long>(settings.records), input.c_str(), settings.partitions);
  }

  WarmBroker(input);
  std::printf("the broker's transaction log and group offsets topics made before timing\n");
  std::printf("settings: broker %s; every client with librdkafka's defaults except:\n",
              Bootstrap().c_str());
  std::printf("  raw-poll   rd_kafka_consumer_poll loop, all partitions assigned\n");
  std::printf("  raw-batch  rd_kafka_consume_batch_queue loop (1024), all partitions assigned\n");
  std::printf("  source     KafkaSource alone (its settings: isolation.level=read_committed, "
              "max.partition.fetch.bytes=8388608, queued.max.messages.kbytes=16384, "
              "fetch.wait.max.ms=10; every partition of a batch assigned and fetched at once, "
              "read round robin in slices of 16,384 offsets), availableNow plan + read in 4 "
              "MiB chunks, no decoding\n");
  std::printf("  driftd/T   `driftd run` with threads: T: the same source, maxOffsetsPerTrigger "
              "%lld -> count, mean, stddev per model, mean_shift + PSI on %d features + "
              "prediction -> 2 kafka sinks, one transaction per batch; availableNow, process "
              "start to exit\n",
              static_cast<long long>(settings.max_offsets), settings.features);
  std::printf("load average at start: %s\n", LoadAverage().c_str());
  for (const auto& [name, value] : settings.source_client) {
    std::printf("  source and driftd also: kafka.%s=%s\n", name.c_str(), value.c_str());
  }
  std::printf("%5s %-10s %12s %12s  %s\n", "round", "reader", "rec/s", "rec/CPU-s",
              "driftd: batches; ms in plan / read+process / commit / deliver / outside batches");
  std::fflush(stdout);

  std::vector<std::string> readers = {"raw-poll", "raw-batch", "source"};
  for (int threads : settings.threads) readers.push_back(fmt::format("driftd/{}", threads));
  std::map<std::string, std::vector<Rate>> rates;
  // Per thread count: driftd / raw-poll (wall, CPU), driftd / raw-batch, driftd / driftd/1.
  std::map<int, std::vector<double>> wall_ratios, cpu_ratios, batch_ratios, thread_ratios;
  for (int round = 0; round < settings.rounds; ++round) {
    std::map<std::string, Rate> rate;
    std::map<std::string, DaemonRun> daemons;
    const std::string round_name = fmt::format("bench-kafka-{}-r{}", run_id, round);
    auto run_daemon = [&](int threads) {
      const std::string name = fmt::format("{}-t{}", round_name, threads);
      const std::string reader = fmt::format("driftd/{}", threads);
      DaemonRun& daemon = daemons[reader];
      const std::string stats = name + "-stats";
      const std::string alerts = name + "-alerts";
      CreateTopic(admin, stats, 1);
      CreateTopic(admin, alerts, 1);
      topics.push_back(stats);
      topics.push_back(alerts);
      const fs::path yaml = dir / (name + ".yaml");
      std::ofstream(yaml) << PipelineYaml(name, input, stats, alerts, dir / (name + "-checkpoint"),
                                          settings, threads);
      daemon = RunDaemon(settings.driftd, yaml, dir / (name + ".log"));
      if (daemon.input_rows != settings.records) {
        Die(fmt::format("driftd's progress counts {} input rows of {}", daemon.input_rows,
                        settings.records));
      }
      CheckCommittedOffsets("driftd-" + name, input, settings);
      if (CountCommitted(stats) == 0) Die("no committed stats rows");
      if (CountCommitted(alerts) == 0) Die("no committed alerts");
      rate[reader] = MakeRate(settings.records, daemon.seconds, daemon.cpu_seconds);
    };
    auto run_daemons = [&] {
      // The thread counts' order alternates too.
      if (round % 2 == 0) {
        for (int threads : settings.threads) run_daemon(threads);
      } else {
        for (auto it = settings.threads.rbegin(); it != settings.threads.rend(); ++it) {
          run_daemon(*it);
        }
      }
    };
    auto run_readers = [&] {
      rate["raw-poll"] = RawConsume(input, settings, false, round_name + "-poll");
      rate["raw-batch"] = RawConsume(input, settings, true, round_name + "-batch");
      rate["source"] = SourceRead(input, settings, round_name + "-source");
    };
    // Alternate the order so that neither side alone enjoys warm caches or a quiet moment.
    if (round % 2 == 0) {
      run_readers();
      run_daemons();
    } else {
      run_daemons();
      run_readers();
    }
    for (const std::string& reader : readers) {
      rates[reader].push_back(rate[reader]);
      std::printf("%5d %-10s %12.0f %12.0f", round, reader.c_str(), rate[reader].wall,
                  rate[reader].cpu);
      if (daemons.count(reader)) {
        const DaemonRun& daemon = daemons[reader];
        std::printf("  %d; %lld / %lld / %lld / %lld / %.0f", daemon.batches,
                    static_cast<long long>(daemon.plan_ms),
                    static_cast<long long>(daemon.read_process_ms),
                    static_cast<long long>(daemon.commit_ms),
                    static_cast<long long>(daemon.delivery_ms),
                    daemon.seconds * 1000 - static_cast<double>(daemon.batch_ms));
      }
      std::printf("\n");
    }
    std::fflush(stdout);
    const Rate& poll = rate["raw-poll"];
    const Rate& batch = rate["raw-batch"];
    for (int threads : settings.threads) {
      const Rate& driftd = rate[fmt::format("driftd/{}", threads)];
      wall_ratios[threads].push_back(driftd.wall / poll.wall);
      cpu_ratios[threads].push_back(driftd.cpu / poll.cpu);
      batch_ratios[threads].push_back(driftd.wall / batch.wall);
      if (rate.count("driftd/1")) thread_ratios[threads].push_back(driftd.wall / rate["driftd/1"].wall);
    }
  }
  std::printf("median over %d rounds:\n", settings.rounds);
  for (const std::string& reader : readers) {
    std::vector<double> wall, cpu;
    for (const Rate& r : rates[reader]) {
      wall.push_back(r.wall);
      cpu.push_back(r.cpu);
    }
    std::printf("      %-10s %12.0f %12.0f\n", reader.c_str(), Median(wall), Median(cpu));
  }
  for (int threads : settings.threads) {
    std::printf("driftd/%d end to end / batch consumer (raw-batch), records/s: %.0f%% (target "
                "70%%)\n",
                threads, 100 * Median(batch_ratios[threads]));
    std::printf("driftd/%d end to end / plain consumer (raw-poll), records/s:  %.0f%%\n", threads,
                100 * Median(wall_ratios[threads]));
    std::printf("driftd/%d end to end / plain consumer (raw-poll), per CPU-s:  %.0f%%\n", threads,
                100 * Median(cpu_ratios[threads]));
    if (!thread_ratios[threads].empty() && threads != 1) {
      std::printf("driftd/%d / driftd/1, records/s: %.2fx\n", threads,
                  Median(thread_ratios[threads]));
    }
  }
  std::printf("load average at the end: %s\n", LoadAverage().c_str());
  std::printf("(ratios are medians of per-round ratios; driftd is the whole process: start-up, "
              "checkpoint, transactions, shutdown)\n");

  if (settings.keep) {
    std::printf("kept: pipelines and daemon logs in %s, topic %s\n", dir.c_str(), input.c_str());
  } else {
    DeleteTopics(admin, topics);
    fs::remove_all(dir);
  }
  rd_kafka_destroy(admin);
  return 0;
}
