// Kafka read throughput: produces N inference records to a fresh topic on the test broker
// (tests/kafka/broker.sh start), then in one run reads them with a plain librdkafka consumer
// and with the KafkaSource (Read in 1 MiB chunks), and prints records/s and the ratio.
//   bench_kafka [records=300000] [partitions=4]
// The broker comes from DRIFTD_KAFKA_BOOTSTRAP (default 127.0.0.1:19092).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>

#include "connectors/registry.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string Bootstrap() {
  const char* bootstrap = std::getenv("DRIFTD_KAFKA_BOOTSTRAP");
  return bootstrap && *bootstrap ? bootstrap : "127.0.0.1:19092";
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_kafka: %s\n", message.c_str());
  std::exit(1);
}

rd_kafka_t* NewClient(rd_kafka_type_t type, const std::map<std::string, std::string>& settings) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  std::map<std::string, std::string> all = {{"bootstrap.servers", Bootstrap()}};
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
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &new_topic, 1, nullptr, queue);
  rd_kafka_event_t* event = rd_kafka_queue_poll(queue, 30'000);
  if (!event || rd_kafka_event_error(event)) Die("creating the topic failed (is the broker up?)");
  size_t count = 0;
  const rd_kafka_topic_result_t** results =
      rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(event), &count);
  if (count != 1 || rd_kafka_topic_result_error(results[0])) {
    Die(fmt::format("creating the topic: {}", rd_kafka_topic_result_error_string(results[0])));
  }
  rd_kafka_event_destroy(event);
  rd_kafka_queue_destroy(queue);
  rd_kafka_NewTopic_destroy(new_topic);
}

// About 215 bytes, like the inference records of the engine's decode benchmark.
std::string InferenceRecord(std::mt19937_64& rng, int64_t i) {
  std::normal_distribution<double> feature(0.5, 0.1);
  std::string record = fmt::format(
      R"({{"model_id":"model-{}","event_time":"2026-11-29T10:00:{:02}.{:03}Z","feature_vector":[)",
      i % 8, (i / 1000) % 60, i % 1000);
  for (int f = 0; f < 8; ++f) record += fmt::format("{}{:.6f}", f ? "," : "", feature(rng));
  record += fmt::format(R"(],"prediction":{:.6f},"ground_truth":{}}})", feature(rng), i % 2);
  return record;
}

double RawConsume(const std::string& topic, int partitions, int64_t records) {
  rd_kafka_t* rk = NewClient(RD_KAFKA_CONSUMER,
                             {{"group.id", "bench-raw-" + topic}, {"enable.auto.commit", "false"}});
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  auto start = Clock::now();
  rd_kafka_assign(rk, list);
  int64_t seen = 0;
  uint64_t bytes = 0;
  while (seen < records) {
    rd_kafka_message_t* message = rd_kafka_consumer_poll(rk, 1000);
    if (!message) continue;
    if (!message->err) {
      ++seen;
      bytes += message->len;
    }
    rd_kafka_message_destroy(message);
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (bytes == 0) Die("no bytes read");
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return static_cast<double>(records) / seconds;
}

struct SourceRates {
  double read = 0;     // records/s of Read + Next alone
  double overall = 0;  // records/s including Start, InitialOffsets and PlanBatch
};

SourceRates SourceRead(const std::string& topic, int64_t records) {
  driftd::PipelineSpec pipeline;
  pipeline.name = "bench-" + topic;
  pipeline.source.format = "kafka";
  pipeline.source.options.Set("subscribe", topic);
  pipeline.source.options.Set("startingOffsets", "earliest");
  pipeline.source.options.Set("kafka.bootstrap.servers", Bootstrap());
  auto source = driftd::CreateSource(pipeline);
  if (!source) Die(source.error().message());
  auto start_time = Clock::now();
  if (auto started = (*source)->Start({}); !started) Die(started.error().message());
  auto start = (*source)->InitialOffsets();
  if (!start) Die(start.error().message());
  auto end = (*source)->PlanBatch(*start);
  if (!end) Die(end.error().message());
  auto read_time = Clock::now();
  auto reader = (*source)->Read(*start, *end);
  if (!reader) Die(reader.error().message());
  driftd::InputChunk chunk;
  int64_t seen = 0;
  for (bool more = true; more;) {
    chunk.Clear();
    auto next = (*reader)->Next(chunk, 1 << 20);
    if (!next) Die(next.error().message());
    more = *next;
    seen += static_cast<int64_t>(chunk.size());
  }
  auto done = Clock::now();
  if (seen != records) Die(fmt::format("the source read {} of {} records", seen, records));
  SourceRates rates;
  rates.read =
      static_cast<double>(records) / std::chrono::duration<double>(done - read_time).count();
  rates.overall =
      static_cast<double>(records) / std::chrono::duration<double>(done - start_time).count();
  return rates;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t records = argc > 1 ? std::atoll(argv[1]) : 300'000;
  const int partitions = argc > 2 ? std::atoi(argv[2]) : 4;
  const std::string topic = fmt::format("bench-kafka-{}-{}", getpid(), time(nullptr));

  rd_kafka_t* producer =
      NewClient(RD_KAFKA_PRODUCER, {{"linger.ms", "20"},
                                    {"compression.codec", "none"},
                                    {"queue.buffering.max.messages", "1000000"}});
  CreateTopic(producer, topic, partitions);
  std::mt19937_64 rng(42);
  auto produce_start = Clock::now();
  for (int64_t i = 0; i < records; ++i) {
    std::string value = InferenceRecord(rng, i);
    std::string key = fmt::format("model-{}", i % 8);
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer, RD_KAFKA_V_TOPIC(topic.c_str()),
          RD_KAFKA_V_PARTITION(static_cast<int32_t>(i % partitions)),
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
  if (rd_kafka_flush(producer, 60'000)) Die("producing timed out");
  double produce_seconds = std::chrono::duration<double>(Clock::now() - produce_start).count();
  rd_kafka_destroy(producer);
  std::printf("produced %lld records to %s (%d partitions) in %.2f s\n",
              static_cast<long long>(records), topic.c_str(), partitions, produce_seconds);

  // Alternate the two readers so that neither alone enjoys a warm broker cache.
  double raw = 0, source = 0, overall = 0;
  const int rounds = 2;
  for (int round = 0; round < rounds; ++round) {
    raw += RawConsume(topic, partitions, records) / rounds;
    SourceRates rates = SourceRead(topic, records);
    source += rates.read / rounds;
    overall += rates.overall / rounds;
  }
  std::printf("plain librdkafka consumer:        %12.0f records/s\n", raw);
  std::printf("KafkaSource Read:                 %12.0f records/s\n", source);
  std::printf("KafkaSource Start+Plan+Read:      %12.0f records/s\n", overall);
  std::printf("ratio Read/raw:                   %12.2f\n", source / raw);
  std::printf("ratio Start+Plan+Read/raw:        %12.2f\n", overall / raw);
  return 0;
}
