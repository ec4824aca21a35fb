#include "connectors/kafka/embedded_cluster.h"

#include <chrono>

#include <librdkafka/rdkafka.h>
// rdkafka_mock.h needs rdkafka.h first.
#include <librdkafka/rdkafka_mock.h>

#include "connectors/kafka/kafka_common.h"
#include "engine/log.h"

namespace driftd {

namespace {

// How long one poll of a client waits for events; also the feeder's pacing tick and the
// longest a Stop waits for a thread to notice.
constexpr int kPollMs = 10;
constexpr int kTailPollMs = 50;
constexpr int kMetadataTimeoutMs = 5'000;
// Records in flight a stopping feeder still waits for.
constexpr int kFlushOnStopMs = 1'000;

using kafka::Log;

}  // namespace

// ---------------------------------------------------------------------------------------------
// EmbeddedKafkaCluster

// The mock cluster belongs to the client that `test.mock.num.brokers` made create it: it lives
// exactly as long as that handle.
struct EmbeddedKafkaCluster::Handles {
  kafka::Handle owner;
  rd_kafka_mock_cluster_t* cluster = nullptr;  // owned by `owner`
};

EmbeddedKafkaCluster::EmbeddedKafkaCluster(std::unique_ptr<Handles> handles)
    : handles_(std::move(handles)),
      bootstrap_servers_(rd_kafka_mock_cluster_bootstraps(handles_->cluster)) {}

EmbeddedKafkaCluster::~EmbeddedKafkaCluster() = default;

Result<std::unique_ptr<EmbeddedKafkaCluster>> EmbeddedKafkaCluster::Start(int brokers) {
  if (brokers < 1 || brokers > 16) {
    return MakeError(ErrorCode::kConfig, "embedded Kafka cluster: brokers must be 1..16, got {}",
                     brokers);
  }
  // log_level 4 (warnings): the notice that this client's own bootstrap.servers is replaced
  // by the mock's would only confuse a reader of the demo's log.
  auto conf = kafka::MakeConf({{"test.mock.num.brokers", std::to_string(brokers)},
                               {"client.id", "driftd-embedded-cluster"},
                               {"log_level", "4"}});
  if (!conf) return tl::unexpected(conf.error().Wrap("embedded Kafka cluster"));
  auto owner = kafka::MakeClient(RD_KAFKA_PRODUCER, std::move(*conf));
  if (!owner) return tl::unexpected(owner.error().Wrap("embedded Kafka cluster"));
  auto handles = std::make_unique<Handles>();
  handles->owner = std::move(*owner);
  handles->cluster = rd_kafka_handle_mock_cluster(handles->owner.get());
  if (handles->cluster == nullptr) {
    return MakeError(ErrorCode::kExternal,
                     "embedded Kafka cluster: librdkafka did not create a mock cluster");
  }
  return std::unique_ptr<EmbeddedKafkaCluster>(new EmbeddedKafkaCluster(std::move(handles)));
}

Status EmbeddedKafkaCluster::CreateTopic(const std::string& topic, int partitions) {
  if (topic.empty() || partitions < 1) {
    return MakeError(ErrorCode::kConfig, "embedded Kafka cluster: topic '{}' with {} partitions",
                     topic, partitions);
  }
  rd_kafka_resp_err_t err =
      rd_kafka_mock_topic_create(handles_->cluster, topic.c_str(), partitions, 1);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "embedded Kafka cluster: creating topic {}: {}", topic,
                     rd_kafka_err2str(err));
  }
  return Ok();
}

// ---------------------------------------------------------------------------------------------
// TopicFeeder

struct TopicFeeder::Client {
  kafka::Handle producer;

  // Delivery reports, served by rd_kafka_poll on the feeder's thread.
  static void OnDelivery(rd_kafka_t* /*rk*/, const rd_kafka_message_t* message, void* opaque) {
    auto* feeder = static_cast<TopicFeeder*>(opaque);
    if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      feeder->delivered_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (feeder->failed_.fetch_add(1, std::memory_order_relaxed) == 0) {
      Log()->warn("feeder: a record for {} was not delivered: {} (further failures are counted)",
                  feeder->options_.topic, rd_kafka_err2str(message->err));
    }
  }
};

TopicFeeder::TopicFeeder(TopicFeederOptions options, std::unique_ptr<Client> client)
    : options_(std::move(options)), client_(std::move(client)) {}

TopicFeeder::~TopicFeeder() { Stop(); }

Result<std::unique_ptr<TopicFeeder>> TopicFeeder::Start(TopicFeederOptions options) {
  if (options.bootstrap_servers.empty() || options.topic.empty() || !options.make_record ||
      options.records_per_second < 1) {
    return MakeError(ErrorCode::kConfig,
                     "feeder: needs bootstrap servers, a topic, a record maker and a positive "
                     "rate");
  }
  auto conf = kafka::MakeConf({{"bootstrap.servers", options.bootstrap_servers},
                               {"client.id", "driftd-feeder"},
                               {"linger.ms", "5"}});
  if (!conf) return tl::unexpected(conf.error().Wrap("feeder"));
  rd_kafka_conf_set_dr_msg_cb(conf->get(), &Client::OnDelivery);
  // The feeder's address is the delivery callback's opaque, so it is created first.
  auto feeder =
      std::unique_ptr<TopicFeeder>(new TopicFeeder(std::move(options), std::make_unique<Client>()));
  rd_kafka_conf_set_opaque(conf->get(), feeder.get());
  auto producer = kafka::MakeClient(RD_KAFKA_PRODUCER, std::move(*conf));
  if (!producer) return tl::unexpected(producer.error().Wrap("feeder"));
  feeder->client_->producer = std::move(*producer);

  auto metadata = kafka::FetchMetadata(feeder->client_->producer.get(),
                                       feeder->options_.topic.c_str(), kMetadataTimeoutMs);
  if (!metadata) return tl::unexpected(metadata.error().Wrap("feeder"));
  if ((*metadata)->topic_cnt != 1 || (*metadata)->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kConfig, "feeder: topic {} does not exist", feeder->options_.topic);
  }
  feeder->thread_ = std::thread([raw = feeder.get()] { raw->Run(); });
  return feeder;
}

void TopicFeeder::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (client_ && client_->producer) {
    rd_kafka_flush(client_->producer.get(), kFlushOnStopMs);
    client_->producer.reset();
  }
}

void TopicFeeder::Run() {
  using Clock = std::chrono::steady_clock;
  rd_kafka_t* producer = client_->producer.get();
  const auto rate = static_cast<uint64_t>(options_.records_per_second);
  const Clock::time_point start = Clock::now();
  std::string key;
  std::string value;
  uint64_t next = 0;
  bool produce_error_logged = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    const auto elapsed_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
    // Split so that a long run cannot overflow elapsed_us * rate.
    const uint64_t due =
        (elapsed_us / 1'000'000) * rate + (elapsed_us % 1'000'000) * rate / 1'000'000;
    while (next < due && !stop_.load(std::memory_order_relaxed)) {
      key.clear();
      value.clear();
      options_.make_record(next, key, value);
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer, RD_KAFKA_V_TOPIC(options_.topic.c_str()),
          RD_KAFKA_V_KEY(key.data(), key.size()), RD_KAFKA_V_VALUE(value.data(), value.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer, kPollMs);  // let deliveries drain, then retry record `next`
        continue;
      }
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        failed_.fetch_add(1, std::memory_order_relaxed);
        if (!produce_error_logged) {
          produce_error_logged = true;
          Log()->warn("feeder: producing to {}: {} (further failures are counted)", options_.topic,
                      rd_kafka_err2str(err));
        }
      }
      ++next;
    }
    // Serves delivery reports and waits for the next tick.
    rd_kafka_poll(producer, kPollMs);
  }
}

// ---------------------------------------------------------------------------------------------
// TopicTail

struct TopicTail::Client {
  kafka::Handle consumer;
};

TopicTail::TopicTail(TopicTailOptions options, std::unique_ptr<Client> client)
    : options_(std::move(options)), client_(std::move(client)) {}

TopicTail::~TopicTail() { Stop(); }

Result<std::unique_ptr<TopicTail>> TopicTail::Start(TopicTailOptions options) {
  if (options.bootstrap_servers.empty() || options.topic.empty() || !options.on_record) {
    return MakeError(ErrorCode::kConfig, "tail: needs bootstrap servers, a topic and a callback");
  }
  // The group id is never joined (partitions are assigned directly); librdkafka wants one.
  auto conf = kafka::MakeConf({{"bootstrap.servers", options.bootstrap_servers},
                               {"client.id", "driftd-tail"},
                               {"group.id", "driftd-tail-" + options.topic},
                               {"enable.auto.commit", "false"},
                               {"enable.partition.eof", "false"},
                               {"isolation.level", "read_committed"},
                               {"fetch.wait.max.ms", "100"}});
  if (!conf) return tl::unexpected(conf.error().Wrap("tail"));
  auto consumer = kafka::MakeClient(RD_KAFKA_CONSUMER, std::move(*conf));
  if (!consumer) return tl::unexpected(consumer.error().Wrap("tail"));
  auto client = std::make_unique<Client>();
  client->consumer = std::move(*consumer);
  rd_kafka_t* rk = client->consumer.get();

  auto metadata = kafka::FetchMetadata(rk, options.topic.c_str(), kMetadataTimeoutMs);
  if (!metadata) return tl::unexpected(metadata.error().Wrap("tail"));
  const rd_kafka_metadata_t& md = **metadata;
  if (md.topic_cnt != 1 || md.topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
      md.topics[0].partition_cnt < 1) {
    return MakeError(ErrorCode::kConfig, "tail: topic {} does not exist", options.topic);
  }
  kafka::PartitionList partitions{rd_kafka_topic_partition_list_new(md.topics[0].partition_cnt)};
  for (int p = 0; p < md.topics[0].partition_cnt; ++p) {
    rd_kafka_topic_partition_list_add(partitions.get(), options.topic.c_str(),
                                      md.topics[0].partitions[p].id)
        ->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  if (rd_kafka_resp_err_t err = rd_kafka_assign(rk, partitions.get());
      err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "tail: assigning {}: {}", options.topic,
                     rd_kafka_err2str(err));
  }
  auto tail = std::unique_ptr<TopicTail>(new TopicTail(std::move(options), std::move(client)));
  tail->thread_ = std::thread([raw = tail.get()] { raw->Run(); });
  return tail;
}

void TopicTail::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (client_ && client_->consumer) {
    rd_kafka_consumer_close(client_->consumer.get());
    client_->consumer.reset();
  }
}

void TopicTail::Run() {
  rd_kafka_t* consumer = client_->consumer.get();
  bool error_logged = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    kafka::MessagePtr message{rd_kafka_consumer_poll(consumer, kTailPollMs)};
    if (!message) continue;
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (!error_logged) {
        error_logged = true;
        Log()->warn("tail: reading {}: {}", options_.topic, rd_kafka_message_errstr(message.get()));
      }
      continue;
    }
    TailRecord record;
    record.topic = options_.topic;
    record.partition = message->partition;
    record.offset = message->offset;
    if (message->key != nullptr) {
      record.key = std::string_view(static_cast<const char*>(message->key), message->key_len);
    }
    if (message->payload != nullptr) {
      record.value = std::string_view(static_cast<const char*>(message->payload), message->len);
    }
    options_.on_record(record);
    records_.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace driftd
