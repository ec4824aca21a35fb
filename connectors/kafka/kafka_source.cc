// The kafka source's client (kafka_source_impl.h describes the source and lists its files): the
// consumer's start and shutdown, the health thread that follows the brokers' reachability
// through an outage (kafka_source_impl.h says what each step does meanwhile), and what the
// source says of its partitions: lag, names and Describe.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "connectors/kafka/kafka_source_impl.h"

namespace driftd::kafka_source_detail {

namespace {

// Upper bound on one metadata or watermark round trip (lower when pollTimeoutMs is lower).
constexpr int kMaxRequestTimeoutMs = 10'000;
// How often the health thread asks the brokers for metadata, and how long it waits for them.
constexpr auto kProbeInterval = std::chrono::seconds(1);
constexpr int kProbeTimeoutMs = 2'000;
// While the brokers stay unreachable, a reminder is logged this often.
constexpr auto kOutageReminder = std::chrono::seconds(30);

}  // namespace

KafkaSource::KafkaSource(KafkaSourceOptions options)
    : options_(std::move(options)),
      request_timeout_ms_(
          static_cast<int>(std::min<int64_t>(kMaxRequestTimeoutMs, options_.poll_timeout_ms))) {
  if (options_.mode == Mode::kSubscribePattern) pattern_ = std::regex(options_.pattern);
  // The group exists from the start, so that the Kafka sink (created before the source
  // starts) shares it; it joins in Start.
  if (options_.scale_out) group_ = std::make_shared<kafka::KafkaGroup>(GroupSettings());
}

KafkaSource::~KafkaSource() {
  {
    std::lock_guard<std::mutex> lock(health_mutex_);
    stopping_ = true;
  }
  health_wake_.notify_all();
  if (health_thread_.joinable()) health_thread_.join();
  // Queues and messages go back to librdkafka before the client is destroyed.
  IgnoreError(DropAllFeeds());  // best effort on shutdown
  if (consumer_) {
    // Nothing is subscribed, so closing leaves no group to wait for.
    rd_kafka_consumer_close(consumer_.get());
  }
  DrainQueues();
  retired_queues_.clear();
}

Status KafkaSource::Start(const SourceOffsets& committed) {
  (void)committed;  // positions come with every PlanBatch/Read; startingOffsets needs none
  std::map<std::string, std::string> settings = {
      {"client.id", "driftd-" + options_.pipeline_name},
      {"group.id", options_.group_id},
      // Read-your-committed: ranges end at the last stable offset, aborted data is skipped.
      {"isolation.level", "read_committed"},
      // Partitions are read one at a time while all of them are fetched: a fetch brings a
      // large share of a batch of each.
      {"max.partition.fetch.bytes", "8388608"},
      // Prefetched records per partition (librdkafka's default is 64 MB per partition queue):
      // enough to keep the reader busy while the next fetch is on its way.
      {"queued.max.messages.kbytes", "16384"},
      // Partitions at the end of their log are paused between batches, so a fetch long-polls
      // only when a batch waits for records (the end of a range at the end of the log, or one
      // that ends in a transaction marker): it waits at most this long.
      {"fetch.wait.max.ms", "10"},
  };
  for (const auto& [name, value] : options_.client) settings[name] = value;
  settings["enable.auto.commit"] = "false";
  settings["enable.auto.offset.store"] = "false";
  settings["enable.partition.eof"] = "true";
  // A vanished start offset must surface as an error, never as a silent jump.
  settings["auto.offset.reset"] = "error";
  auto make = [this](const std::map<std::string, std::string>& config) -> Result<Handle> {
    auto conf = kafka::MakeConf(config);
    if (!conf) return tl::unexpected(conf.error().Wrap("kafka source"));
    rd_kafka_conf_set_opaque(conf->get(), this);
    rd_kafka_conf_set_error_cb(conf->get(), &KafkaSource::ErrorCallback);
    auto client = kafka::MakeClient(RD_KAFKA_CONSUMER, std::move(*conf));
    if (!client) return tl::unexpected(client.error().Wrap("kafka source"));
    return std::move(*client);
  };
  auto consumer = make(settings);
  if (!consumer) return tl::unexpected(consumer.error());
  consumer_ = std::move(*consumer);
  settings.erase("group.id");
  settings["client.id"] += "-offsets";
  auto planner = make(settings);
  if (!planner) return tl::unexpected(planner.error());
  planner_ = std::move(*planner);
  queue_.reset(rd_kafka_queue_get_consumer(consumer_.get()));
  // Reachability is reported through IsReady; planning fails with kExternal until the
  // cluster has answered once.
  auto metadata = kafka::FetchMetadata(consumer_.get(), nullptr, request_timeout_ms_);
  SetReachable(metadata.has_value(), metadata ? "" : metadata.error().message());
  health_thread_ = std::thread([this] { HealthLoop(); });
  if (options_.scale_out && owns_group_) DRIFTD_TRY(StartGroup());
  return Ok();
}

void KafkaSource::ErrorCallback(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
  auto* source = static_cast<KafkaSource*>(opaque);
  if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) source->SetReachable(false, reason);
  // Connection failures are in librdkafka's own log and in the outage message already.
  const bool connection =
      err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN;
  Log()->log(connection ? spdlog::level::debug : spdlog::level::warn, "kafka source {}: {}: {}",
             rd_kafka_name(rk), rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason);
}

void KafkaSource::HealthLoop() {
  std::unique_lock<std::mutex> lock(health_mutex_);
  while (!health_wake_.wait_for(lock, kProbeInterval, [this] { return stopping_; })) {
    lock.unlock();
    rd_kafka_poll(consumer_.get(), 0);
    rd_kafka_poll(planner_.get(), 0);
    // Brokers only (and the topics this client knows): cheap, and it needs a live broker.
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(consumer_.get(), 0, nullptr, &metadata,
                                                std::min(kProbeTimeoutMs, request_timeout_ms_));
    if (metadata) rd_kafka_metadata_destroy(metadata);
    SetReachable(err == RD_KAFKA_RESP_ERR_NO_ERROR, rd_kafka_err2str(err));
    lock.lock();
  }
}

void KafkaSource::SetReachable(bool reachable, std::string_view reason) {
  if (reachable) reached_.store(true);
  bool was = ready_.exchange(reachable);
  if (was == reachable) return;
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (!reachable) {
    outage_since_.store(now);
    last_reminder_.store(now);
    Log()->warn(
        "kafka source: brokers {} are not reachable ({}); the query waits for them and "
        "reports not ready",
        options_.client.at("bootstrap.servers"), reason);
    return;
  }
  int64_t since = outage_since_.exchange(0);
  if (since != 0) {
    Log()->info("kafka source: brokers {} reachable again after {} ms",
                options_.client.at("bootstrap.servers"),
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::duration(now - since))
                    .count());
  }
}

void KafkaSource::RemindOutage() {
  const auto now = std::chrono::steady_clock::now();
  const auto last = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(last_reminder_.load()));
  if (now - last < kOutageReminder) return;
  last_reminder_.store(now.time_since_epoch().count());
  const int64_t began = outage_since_.load();
  if (began == 0) return;  // ended a moment ago
  const auto since =
      std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(began));
  Log()->warn("kafka source: brokers {} still unreachable after {} s; waiting",
              options_.client.at("bootstrap.servers"),
              std::chrono::duration_cast<std::chrono::seconds>(now - since).count());
}

std::vector<PartitionLag> KafkaSource::Lag(const SourceOffsets& position) {
  std::vector<PartitionLag> lags;
  for (const auto& [key, offset] : position) {
    auto it = index_.find(key);
    if (it == index_.end()) continue;
    lags.push_back({key, offset, partitions_[it->second].high});
  }
  return lags;
}

std::string KafkaSource::PartitionKeyOf(uint32_t partition_index) const {
  return partition_index < partitions_.size() ? partitions_[partition_index].key : "";
}

std::optional<TopicPartition> KafkaSource::TopicPartitionOf(uint32_t partition_index) const {
  if (partition_index >= partitions_.size()) return std::nullopt;
  const PartitionState& state = partitions_[partition_index];
  return TopicPartition{state.topic, state.partition};
}

std::string KafkaSource::DescribePosition(const RecordPosition& position) const {
  if (position.partition >= partitions_.size()) {
    return fmt::format("partition #{} offset {}", position.partition, position.offset);
  }
  const PartitionState& state = partitions_[position.partition];
  return fmt::format("topic {} partition {} offset {}", state.topic, state.partition,
                     position.offset);
}

std::string KafkaSource::Describe() const {
  switch (options_.mode) {
    case Mode::kSubscribe:
      return fmt::format("KafkaV2[Subscribe[{}]]", fmt::join(options_.topics, ","));
    case Mode::kSubscribePattern:
      return fmt::format("KafkaV2[SubscribePattern[{}]]", options_.pattern);
    case Mode::kAssign: {
      std::vector<std::string> keys;
      for (const auto& [topic, partitions] : options_.assign) {
        for (int32_t partition : partitions)
          keys.push_back(kafka::PartitionKey(topic, partition));
      }
      return fmt::format("KafkaV2[Assign[{}]]", fmt::join(keys, ", "));
    }
  }
  return "KafkaV2";
}

}  // namespace driftd::kafka_source_detail
