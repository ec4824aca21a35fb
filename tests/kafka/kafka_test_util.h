// Helpers for tests against the real broker that tests/kafka/broker.sh runs: an admin client
// (topics, partitions, DeleteRecords), plain and read_committed clients to produce and check
// data, and pipelines built by hand with the connectors' declared defaults. A broker that does
// not answer fails the test; it is never skipped.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <catch2/catch.hpp>

#include "connectors/registry.h"

namespace driftd::kafka_test {

inline std::string Bootstrap() {
  const char* bootstrap = std::getenv("DRIFTD_KAFKA_BOOTSTRAP");
  return bootstrap && *bootstrap ? bootstrap : "127.0.0.1:19092";
}

/// A name no other test (or earlier run against the same broker) uses.
inline std::string UniqueName(std::string_view prefix) {
  static std::atomic<int> counter{0};
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return fmt::format("{}-{}-{}-{}", prefix, getpid(), counter++, now % 1'000'000);
}

struct RdKafkaDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using Client = std::unique_ptr<rd_kafka_t, RdKafkaDeleter>;

inline Client MakeClient(rd_kafka_type_t type, const std::map<std::string, std::string>& settings) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  std::map<std::string, std::string> all = {{"bootstrap.servers", Bootstrap()}, {"log_level", "3"}};
  // Producers are idempotent: a retry (a broker just started, a machine under load) neither
  // duplicates nor reorders what a test writes; out of order, a partition's event times would
  // make rows late, and the tests' expected counts wrong.
  if (type == RD_KAFKA_PRODUCER) all["enable.idempotence"] = "true";
  for (const auto& [name, value] : settings) all[name] = value;
  for (const auto& [name, value] : all) {
    REQUIRE(rd_kafka_conf_set(conf, name.c_str(), value.c_str(), error, sizeof error) ==
            RD_KAFKA_CONF_OK);
  }
  Client client{rd_kafka_new(type, conf, error, sizeof error)};
  INFO(error);
  REQUIRE(client);
  return client;
}

/// Waits for one admin result event on `queue` and fails the test on any error in it.
inline void RequireAdminResult(rd_kafka_queue_t* queue, const char* what) {
  rd_kafka_event_t* event = rd_kafka_queue_poll(queue, 30'000);
  REQUIRE(event != nullptr);
  INFO(what << ": "
            << (rd_kafka_event_error_string(event) ? rd_kafka_event_error_string(event) : ""));
  rd_kafka_resp_err_t err = rd_kafka_event_error(event);
  std::string detail;
  if (const auto* created = rd_kafka_event_CreateTopics_result(event)) {
    size_t count = 0;
    auto** topics = rd_kafka_CreateTopics_result_topics(created, &count);
    for (size_t i = 0; i < count && !err; ++i) err = rd_kafka_topic_result_error(topics[i]);
  } else if (const auto* deleted = rd_kafka_event_DeleteTopics_result(event)) {
    size_t count = 0;
    auto** topics = rd_kafka_DeleteTopics_result_topics(deleted, &count);
    for (size_t i = 0; i < count && !err; ++i) err = rd_kafka_topic_result_error(topics[i]);
  } else if (const auto* partitions = rd_kafka_event_CreatePartitions_result(event)) {
    size_t count = 0;
    auto** topics = rd_kafka_CreatePartitions_result_topics(partitions, &count);
    for (size_t i = 0; i < count && !err; ++i) err = rd_kafka_topic_result_error(topics[i]);
  } else if (const auto* records = rd_kafka_event_DeleteRecords_result(event)) {
    const rd_kafka_topic_partition_list_t* offsets = rd_kafka_DeleteRecords_result_offsets(records);
    for (int i = 0; i < offsets->cnt && !err; ++i) err = offsets->elems[i].err;
  }
  rd_kafka_event_destroy(event);
  INFO(rd_kafka_err2str(err));
  REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
}

/// The broker's admin operations the tests need (librdkafka's Admin API).
class Admin {
 public:
  Admin() : client_(MakeClient(RD_KAFKA_PRODUCER, {})), queue_(rd_kafka_queue_new(client_.get())) {
    // A broker that is down fails here, with a message saying how to start it.
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(client_.get(), 0, nullptr, &metadata, 10'000);
    INFO("no Kafka broker answers at " << Bootstrap()
                                       << "; start one with tests/kafka/broker.sh start");
    REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_metadata_destroy(metadata);
  }
  ~Admin() { rd_kafka_queue_destroy(queue_); }

  void CreateTopic(const std::string& topic, int partitions,
                   const std::map<std::string, std::string>& configs = {}) {
    char error[512];
    rd_kafka_NewTopic_t* new_topic =
        rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, error, sizeof error);
    REQUIRE(new_topic != nullptr);
    for (const auto& [name, value] : configs) {
      rd_kafka_NewTopic_set_config(new_topic, name.c_str(), value.c_str());
    }
    rd_kafka_CreateTopics(client_.get(), &new_topic, 1, Options(RD_KAFKA_ADMIN_OP_CREATETOPICS),
                          queue_);
    rd_kafka_NewTopic_destroy(new_topic);
    RequireAdminResult(queue_, "CreateTopics");
    AwaitPartitions(topic, partitions);
  }

  void DeleteTopic(const std::string& topic) {
    rd_kafka_DeleteTopic_t* deleted = rd_kafka_DeleteTopic_new(topic.c_str());
    rd_kafka_DeleteTopics(client_.get(), &deleted, 1, Options(RD_KAFKA_ADMIN_OP_DELETETOPICS),
                          queue_);
    rd_kafka_DeleteTopic_destroy(deleted);
    RequireAdminResult(queue_, "DeleteTopics");
    AwaitPartitions(topic, 0);
  }

  void CreatePartitions(const std::string& topic, int total) {
    char error[512];
    rd_kafka_NewPartitions_t* parts =
        rd_kafka_NewPartitions_new(topic.c_str(), total, error, sizeof error);
    rd_kafka_CreatePartitions(client_.get(), &parts, 1, Options(RD_KAFKA_ADMIN_OP_CREATEPARTITIONS),
                              queue_);
    rd_kafka_NewPartitions_destroy(parts);
    RequireAdminResult(queue_, "CreatePartitions");
    AwaitPartitions(topic, total);
  }

  /// Kafka's DeleteRecords: the partition's earliest offset becomes `before`.
  void DeleteRecords(const std::string& topic, int32_t partition, int64_t before) {
    rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(offsets, topic.c_str(), partition)->offset = before;
    rd_kafka_DeleteRecords_t* request = rd_kafka_DeleteRecords_new(offsets);
    rd_kafka_topic_partition_list_destroy(offsets);
    rd_kafka_DeleteRecords(client_.get(), &request, 1, Options(RD_KAFKA_ADMIN_OP_DELETERECORDS),
                           queue_);
    rd_kafka_DeleteRecords_destroy(request);
    RequireAdminResult(queue_, "DeleteRecords");
  }

  /// The group's committed offset of a partition, or -1001 (none).
  int64_t CommittedOffset(const std::string& group, const std::string& topic, int32_t partition) {
    Client consumer = MakeClient(RD_KAFKA_CONSUMER, {{"group.id", group}});
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic.c_str(), partition);
    REQUIRE(rd_kafka_committed(consumer.get(), list, 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    int64_t offset = list->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_consumer_close(consumer.get());
    return offset;
  }

  rd_kafka_t* client() { return client_.get(); }

  // Metadata catches up with admin changes asynchronously; wait until it shows `count`.
  void AwaitPartitions(const std::string& topic, int count) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      rd_kafka_topic_t* rkt = rd_kafka_topic_new(client_.get(), topic.c_str(), nullptr);
      const rd_kafka_metadata_t* metadata = nullptr;
      rd_kafka_resp_err_t err = rd_kafka_metadata(client_.get(), 0, rkt, &metadata, 5'000);
      rd_kafka_topic_destroy(rkt);
      int seen = -1;
      bool leaders = true;
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const rd_kafka_metadata_topic_t& t = metadata->topics[0];
        seen = t.err == RD_KAFKA_RESP_ERR_NO_ERROR ? t.partition_cnt : 0;
        for (int p = 0; p < t.partition_cnt; ++p) leaders &= t.partitions[p].leader >= 0;
        rd_kafka_metadata_destroy(metadata);
      }
      if (seen == count && leaders) return;
      INFO("topic " << topic << " has " << seen << " partitions; awaiting " << count);
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      usleep(50'000);
    }
  }

 private:
  rd_kafka_AdminOptions_t* Options(rd_kafka_admin_op_t op) {
    options_.reset(rd_kafka_AdminOptions_new(client_.get(), op));
    char error[512];
    rd_kafka_AdminOptions_set_operation_timeout(options_.get(), 30'000, error, sizeof error);
    return options_.get();
  }

  struct OptionsDeleter {
    void operator()(rd_kafka_AdminOptions_t* options) const {
      rd_kafka_AdminOptions_destroy(options);
    }
  };
  Client client_;
  rd_kafka_queue_t* queue_;
  std::unique_ptr<rd_kafka_AdminOptions_t, OptionsDeleter> options_;
};

/// Produces `values` to one partition (not transactional) and waits until all are acknowledged.
inline void Produce(const std::string& topic, int32_t partition,
                    const std::vector<std::string>& values, const std::string& key = "") {
  Client producer = MakeClient(RD_KAFKA_PRODUCER, {{"linger.ms", "1"}});
  for (const std::string& value : values) {
    rd_kafka_resp_err_t err =
        rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                          RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(key.data(), key.size()),
                          RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
}

/// "prefix-0" ... "prefix-(n-1)".
inline std::vector<std::string> Values(const std::string& prefix, int n, int first = 0) {
  std::vector<std::string> values;
  for (int i = first; i < first + n; ++i) values.push_back(fmt::format("{}-{}", prefix, i));
  return values;
}

struct Consumed {
  std::string key;
  std::string value;
  int32_t partition = 0;
  int64_t offset = 0;
  /// A record without a value (a deletion, on a compacted topic).
  bool null_value = false;
};

/// Every record of `topic` that a consumer with `isolation` ("read_committed" or
/// "read_uncommitted") can see now, by partition and offset.
inline std::vector<Consumed> ReadAll(const std::string& topic,
                                     const std::string& isolation = "read_committed") {
  Client consumer = MakeClient(RD_KAFKA_CONSUMER, {{"group.id", UniqueName("reader")},
                                                   {"isolation.level", isolation},
                                                   {"enable.partition.eof", "true"},
                                                   {"enable.auto.commit", "false"}});
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(consumer.get(), topic.c_str(), nullptr);
  const rd_kafka_metadata_t* metadata = nullptr;
  REQUIRE(rd_kafka_metadata(consumer.get(), 0, rkt, &metadata, 10'000) ==
          RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_destroy(rkt);
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  std::map<int32_t, int64_t> ends;
  for (int p = 0; p < metadata->topics[0].partition_cnt; ++p) {
    int32_t id = metadata->topics[0].partitions[p].id;
    int64_t low = 0, high = 0;
    REQUIRE(rd_kafka_query_watermark_offsets(consumer.get(), topic.c_str(), id, &low, &high,
                                             10'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    if (high > low) {
      rd_kafka_topic_partition_list_add(list, topic.c_str(), id)->offset = low;
      ends[id] = high;
    }
  }
  rd_kafka_metadata_destroy(metadata);
  std::vector<Consumed> records;
  if (!ends.empty()) {
    REQUIRE(rd_kafka_assign(consumer.get(), list) == RD_KAFKA_RESP_ERR_NO_ERROR);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ends.empty()) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      rd_kafka_message_t* message = rd_kafka_consumer_poll(consumer.get(), 100);
      if (!message) continue;
      auto it = ends.find(message->partition);
      if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (it != ends.end() && message->offset >= it->second) ends.erase(it);
      } else if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR && it != ends.end() &&
                 message->offset < it->second) {
        records.push_back({std::string(static_cast<const char*>(message->key), message->key_len),
                           std::string(static_cast<const char*>(message->payload), message->len),
                           message->partition, message->offset, message->payload == nullptr});
        if (message->offset + 1 >= it->second) ends.erase(it);
      }
      rd_kafka_message_destroy(message);
    }
  }
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_consumer_close(consumer.get());
  return records;
}

/// Reads `topic` read_committed until it shows at least `count` records or 15 s pass: the
/// markers that make a transaction visible land a moment after commit_transaction returns.
inline std::vector<Consumed> ReadCommitted(const std::string& topic, size_t count) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (;;) {
    std::vector<Consumed> records = ReadAll(topic);
    if (records.size() >= count || std::chrono::steady_clock::now() > deadline) return records;
    usleep(50'000);
  }
}

inline std::vector<std::string> ValuesOf(const std::vector<Consumed>& records) {
  std::vector<std::string> values;
  for (const auto& record : records) values.push_back(record.value);
  return values;
}

/// Waits until no transaction is open on `topic` and reads it with read_committed, in
/// (partition, offset) order.
inline std::vector<Consumed> ReadSettled(const std::string& topic) {
  Client committed = MakeClient(RD_KAFKA_CONSUMER, {{"isolation.level", "read_committed"}});
  Client uncommitted = MakeClient(RD_KAFKA_CONSUMER, {{"isolation.level", "read_uncommitted"}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int32_t partition = 0;; ++partition) {
    int64_t low = 0, stable = 0, end = 0;
    if (rd_kafka_query_watermark_offsets(committed.get(), topic.c_str(), partition, &low,
                                         &stable, 10'000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      break;  // no such partition: all seen
    }
    REQUIRE(rd_kafka_query_watermark_offsets(uncommitted.get(), topic.c_str(), partition, &low,
                                             &end, 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    if (stable < end) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      --partition;  // ask again
    }
  }
  std::vector<Consumed> records = ReadAll(topic, "read_committed");
  std::stable_sort(records.begin(), records.end(), [](const Consumed& a, const Consumed& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
  return records;
}

/// Options with the declared defaults of a kafka connector, overridden by `given`.
inline Options KafkaOptions(ConnectorRole role, const std::map<std::string, std::string>& given) {
  Options options;
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    if (decl.format != "kafka" || decl.role != role) continue;
    for (const OptionDecl& option : decl.options) {
      if (!option.default_value.empty()) options.Set(option.name, option.default_value);
    }
  }
  options.Set("kafka.bootstrap.servers", Bootstrap());
  for (const auto& [name, value] : given) options.Set(name, value);
  return options;
}

/// A pipeline reading Kafka with `source` options (startingOffsets earliest unless given).
inline PipelineSpec SourcePipeline(const std::string& name,
                                   std::map<std::string, std::string> source) {
  PipelineSpec pipeline;
  pipeline.name = name;
  pipeline.source.format = "kafka";
  pipeline.source.traits = FindSourceKind("kafka")->traits;
  source.emplace("startingOffsets", "earliest");
  pipeline.source.options = KafkaOptions(ConnectorRole::kSource, source);
  return pipeline;
}

inline SinkSpec KafkaSinkSpec(const std::string& name, const std::string& topic,
                              StreamKind stream = StreamKind::kStats,
                              OutputMode mode = OutputMode::kUpdate,
                              std::map<std::string, std::string> options = {}) {
  SinkSpec spec;
  spec.name = name;
  spec.format = "kafka";
  spec.stream = stream;
  spec.output_mode = mode;
  options["topic"] = topic;
  spec.options = KafkaOptions(ConnectorRole::kSink, options);
  return spec;
}

struct ReadRecord {
  std::string text;
  RecordPosition position;
  int64_t timestamp_us = INT64_MIN;
};

struct ReadResult {
  std::vector<ReadRecord> records;
  int64_t lost = 0;
};

/// Reads [start, end) in chunks of about `max_bytes`; the reader's errors fail the test.
inline ReadResult ReadRange(Source& source, const SourceOffsets& start, const SourceOffsets& end,
                            size_t max_bytes = 1 << 20) {
  auto reader = source.Read(start, end);
  INFO((reader ? "" : reader.error().message()));
  REQUIRE(reader);
  ReadResult result;
  InputChunk chunk;
  bool more = true;
  while (more) {
    chunk.Clear();
    auto next = (*reader)->Next(chunk, max_bytes);
    INFO((next ? "" : next.error().message()));
    REQUIRE(next);
    more = *next;
    for (size_t i = 0; i < chunk.size(); ++i) {
      result.records.push_back({std::string(chunk.record(i)), chunk.records()[i].position,
                                chunk.records()[i].source_timestamp_us});
    }
  }
  result.lost = (*reader)->lost_records();
  return result;
}

inline std::vector<std::string> Texts(const ReadResult& result) {
  std::vector<std::string> texts;
  for (const auto& record : result.records) texts.push_back(record.text);
  return texts;
}

/// Reading [start, end) fails; returns the error (from Read or from a later Next).
inline Error ReadError(Source& source, const SourceOffsets& start, const SourceOffsets& end) {
  auto reader = source.Read(start, end);
  if (!reader) return reader.error();
  InputChunk chunk;
  for (;;) {
    chunk.Clear();
    auto next = (*reader)->Next(chunk, 1 << 20);
    if (!next) return next.error();
    REQUIRE(*next);  // the range must not complete
  }
}

inline std::unique_ptr<Source> StartSource(const PipelineSpec& pipeline,
                                           const SourceOffsets& committed = {}) {
  auto source = CreateSource(pipeline);
  INFO((source ? "" : source.error().message()));
  REQUIRE(source);
  auto started = (*source)->Start(committed);
  INFO((started ? "" : started.error().message()));
  REQUIRE(started);
  return std::move(*source);
}

template <typename T>
T Require(Result<T> result) {
  INFO((result ? "" : result.error().message()));
  REQUIRE(result);
  return std::move(*result);
}

inline void RequireOk(const Status& status) {
  INFO((status ? "" : status.error().message()));
  REQUIRE(status);
}

}  // namespace driftd::kafka_test
