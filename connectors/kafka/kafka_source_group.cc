// The kafka source in its consumer group (kafka_source_impl.h describes the source): a
// scaled-out query's membership (kafka_group.h), with the assignment split into source
// partitions and tasks, the group's committed positions and a task's restore from its changelog;
// and, in one process, the group offsets committed after each batch so that lag tools see them.
#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "connectors/kafka/kafka_source_impl.h"

namespace driftd {

namespace kafka_source_detail {

namespace {

// How long OnCommitted waits for the group coordinator's answer.
constexpr int kCommitWaitMs = 2'000;

}  // namespace

kafka::GroupOptions KafkaSource::GroupSettings() const {
  kafka::GroupOptions group;
  group.pipeline = options_.pipeline_name;
  group.instance = options_.instance;
  group.group_id = options_.group_id;
  group.client = options_.client;
  group.request_timeout_ms = request_timeout_ms_;
  if (options_.mode == Mode::kSubscribe) {
    group.topics = options_.topics;
  } else {
    group.patterns.push_back(options_.pattern);
  }
  return group;
}

Status KafkaSource::ShareGroupOf(Source& first) {
  std::shared_ptr<kafka::KafkaGroup> shared = kafka::GroupOf(first);
  if (!options_.scale_out || !shared) {
    return MakeError(ErrorCode::kConfig,
                     "kafka source: scaleOut shares one consumer group among the inputs, and "
                     "the first input is not a scaled-out kafka source");
  }
  const auto cluster = [](const std::map<std::string, std::string>& client) {
    auto servers = client.find("bootstrap.servers");
    return servers == client.end() ? std::string() : servers->second;
  };
  if (cluster(options_.client) != cluster(shared->client())) {
    return MakeError(ErrorCode::kConfig,
                     "kafka source: scaleOut reads every input through one consumer group on the "
                     "first input's cluster ({}); this input's kafka.bootstrap.servers is {}",
                     cluster(shared->client()), cluster(options_.client));
  }
  if (options_.mode == Mode::kSubscribe) {
    shared->AddSubscription(options_.topics, "");
  } else {
    shared->AddSubscription({}, options_.pattern);
  }
  group_ = std::move(shared);
  owns_group_ = false;
  return Ok();
}

Status KafkaSource::StartGroup() {
  // Count the source's partitions first: they size the internal topics the first time. The
  // repartition topic is not counted: another process starting at the same moment may just
  // have made it, and counting it would make the changelog twice its size.
  DRIFTD_TRY(RefreshPartitions());
  int source_partitions = 0;
  for (uint32_t index : present_) {
    if (partitions_[index].topic != group_->repartition_topic()) ++source_partitions;
  }
  DRIFTD_TRY(group_->Start(source_partitions));
  return Ok();
}

Result<GroupAssignment> KafkaSource::PollAssignment() {
  DRIFTD_TRY(group_->Poll());
  GroupAssignment assignment;
  assignment.generation = group_->generation();
  for (const std::string& key : group_->assigned()) {
    if (auto task = TaskOfInputKey(key)) {
      assignment.tasks.push_back(*task);
    } else {
      assignment.source.push_back(key);
    }
  }
  return assignment;
}

std::vector<std::string> KafkaSource::SourcePartitions() {
  if (present_.empty() && !RefreshPartitions()) return source_partitions_seen_;
  std::vector<std::string> keys;
  for (uint32_t i : present_) {
    if (partitions_[i].topic != group_->repartition_topic()) keys.push_back(partitions_[i].key);
  }
  std::sort(keys.begin(), keys.end());
  source_partitions_seen_ = keys;
  return keys;
}

std::string KafkaSource::TaskInputKey(uint32_t task) const {
  return kafka::PartitionKey(group_->repartition_topic(), static_cast<int32_t>(task));
}

std::optional<uint32_t> KafkaSource::TaskOfInputKey(std::string_view key) const {
  auto parsed = kafka::ParsePartitionKey(key);
  if (!parsed || parsed->first != group_->repartition_topic()) return std::nullopt;
  return static_cast<uint32_t>(parsed->second);
}

Result<std::map<std::string, GroupPosition>> KafkaSource::Committed(
    const std::vector<std::string>& keys) {
  std::map<std::string, GroupPosition> positions;
  if (keys.empty()) return positions;
  PartitionList list{rd_kafka_topic_partition_list_new(static_cast<int>(keys.size()))};
  for (const std::string& key : keys) {
    auto parsed = kafka::ParsePartitionKey(key);
    if (!parsed) return MakeError(ErrorCode::kInternal, "kafka source: bad partition {}", key);
    rd_kafka_topic_partition_list_add(list.get(), parsed->first.c_str(), parsed->second);
  }
  // Waits (librdkafka retries UNSTABLE_OFFSET_COMMIT) while a transaction that holds offsets
  // of these partitions is still deciding: the previous owner's last batch is final first.
  rd_kafka_resp_err_t err =
      rd_kafka_committed(group_->consumer(), list.get(), std::max(request_timeout_ms_, 30'000));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "kafka source: committed offsets of group {}: {}",
                     options_.group_id, rd_kafka_err2str(err));
  }
  DRIFTD_TRY(RefreshPartitions());
  for (int i = 0; i < list->cnt; ++i) {
    const rd_kafka_topic_partition_t& entry = list->elems[i];
    const std::string key = kafka::PartitionKey(entry.topic, entry.partition);
    if (entry.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return MakeError(ErrorCode::kExternal, "kafka source: committed offset of {}: {}", key,
                       rd_kafka_err2str(entry.err));
    }
    GroupPosition position;
    if (entry.metadata && entry.metadata_size > 0) {
      position.metadata.assign(static_cast<const char*>(entry.metadata), entry.metadata_size);
    }
    position.offset = entry.offset;
    if (position.offset < 0) {
      // Nobody committed it yet: a source partition starts as startingOffsets says, a task's
      // input from its beginning.
      auto start = StartingOffsetOf(key, TaskOfInputKey(key).has_value());
      if (!start) return tl::unexpected(start.error());
      position.offset = *start;
    }
    positions[key] = std::move(position);
  }
  return positions;
}

Result<int64_t> KafkaSource::ReadChangelog(
    uint32_t task, int64_t from,
    const std::function<void(std::string_view, std::optional<std::string_view>)>& visit) {
  const std::string& topic = group_->changelog_topic();
  const int32_t partition = static_cast<int32_t>(task);
  if (!changelog_reader_) {
    std::map<std::string, std::string> settings = {
        {"client.id", fmt::format("driftd-{}-{}-restore", options_.pipeline_name,
                                  options_.instance)},
        {"group.id", options_.group_id + "-restore"},
        {"fetch.wait.max.ms", "10"},
    };
    for (const auto& [name, value] : options_.client) {
      if (name == "bootstrap.servers" || name.rfind("security.", 0) == 0 ||
          name.rfind("sasl.", 0) == 0 || name.rfind("ssl.", 0) == 0) {
        settings[name] = value;
      }
    }
    settings["isolation.level"] = "read_committed";
    settings["enable.auto.commit"] = "false";
    settings["enable.partition.eof"] = "true";
    settings["auto.offset.reset"] = "earliest";
    auto conf = kafka::MakeConf(settings);
    if (!conf) return tl::unexpected(conf.error().Wrap("kafka source: changelog reader"));
    auto client = kafka::MakeClient(RD_KAFKA_CONSUMER, std::move(*conf));
    if (!client) return tl::unexpected(client.error().Wrap("kafka source: changelog reader"));
    changelog_reader_ = std::move(*client);
  }
  rd_kafka_t* reader = changelog_reader_.get();
  // Under read_committed the high mark is the last stable offset: everything committed so far
  // (the previous owner's last transaction was decided before Committed() returned).
  int64_t low = 0;
  int64_t high = 0;
  // A changelog created a moment ago (or one whose leader moves) answers "not leader" for a
  // while: wait for it as for the source's own partitions.
  const auto marks_deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.poll_timeout_ms);
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  for (;;) {
    err = rd_kafka_query_watermark_offsets(reader, topic.c_str(), partition, &low, &high,
                                           request_timeout_ms_);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR ||
        std::chrono::steady_clock::now() + kRetryPause >= marks_deadline) {
      break;
    }
    Log()->debug("kafka source: offsets of {} partition {}: {}; retrying", topic, partition,
                 rd_kafka_err2str(err));
    std::this_thread::sleep_for(kRetryPause);
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "kafka source: offsets of {} partition {}: {}", topic,
                     partition, rd_kafka_err2str(err));
  }
  if (from < low) from = low;  // compaction (or retention) removed what came before
  if (from >= high) return std::max(from, high);
  PartitionList list{rd_kafka_topic_partition_list_new(1)};
  rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), partition)->offset = from;
  err = rd_kafka_assign(reader, list.get());
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "kafka source: reading {}: {}", topic,
                     rd_kafka_err2str(err));
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.poll_timeout_ms);
  int64_t next = from;
  Status status = Ok();
  while (next < high && status) {
    if (std::chrono::steady_clock::now() > deadline) {
      status = MakeError(ErrorCode::kExternal,
                         "kafka source: restoring task {} from {} stopped at offset {} of {}",
                         task, topic, next, high);
      break;
    }
    MessagePtr message{rd_kafka_consumer_poll(reader, 100)};
    if (!message) continue;
    if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (message->offset >= high) next = high;
      continue;
    }
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (message->err == RD_KAFKA_RESP_ERR__TRANSPORT ||
          message->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        continue;
      }
      status = MakeError(ErrorCode::kExternal, "kafka source: reading {}: {}", topic,
                         rd_kafka_message_errstr(message.get()));
      break;
    }
    if (message->offset >= high) {
      next = high;
      break;
    }
    std::string_view key(static_cast<const char*>(message->key), message->key_len);
    if (message->payload == nullptr) {
      visit(key, std::nullopt);
    } else {
      visit(key, std::string_view(static_cast<const char*>(message->payload), message->len));
    }
    next = message->offset + 1;
  }
  // Stops the fetch; should it fail, the reader's next assignment replaces this one anyway.
  (void)rd_kafka_assign(reader, nullptr);
  if (!status) return tl::unexpected(status.error());
  return high;
}

Status KafkaSource::OnCommitted(const SourceOffsets& end) {
  if (!options_.commit_offsets || end.empty()) return Ok();
  PartitionList list{rd_kafka_topic_partition_list_new(static_cast<int>(end.size()))};
  for (const auto& [key, offset] : end) {
    auto parsed = kafka::ParsePartitionKey(key);
    if (!parsed) continue;
    rd_kafka_topic_partition_list_add(list.get(), parsed->first.c_str(), parsed->second)->offset =
        offset;
  }
  // The result arrives on a queue of our own; librdkafka keeps it alive until it has answered.
  QueuePtr results{rd_kafka_queue_new(consumer_.get())};
  rd_kafka_resp_err_t err =
      rd_kafka_commit_queue(consumer_.get(), list.get(), results.get(), nullptr, nullptr);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    kafka::EventPtr event{rd_kafka_queue_poll(results.get(), kCommitWaitMs)};
    if (!event) {
      return MakeError(ErrorCode::kExternal,
                       "committing offsets of group {}: no answer within {} ms (the broker may "
                       "be down; the commit goes on in the background)",
                       options_.group_id, kCommitWaitMs);
    }
    err = rd_kafka_event_error(event.get());
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
    return MakeError(ErrorCode::kExternal, "committing offsets of group {}: {}",
                     options_.group_id, rd_kafka_err2str(err));
  }
  return Ok();
}

}  // namespace kafka_source_detail

std::shared_ptr<kafka::KafkaGroup> kafka::GroupOf(Source& source) {
  auto* kafka_source = dynamic_cast<kafka_source_detail::KafkaSource*>(&source);
  return kafka_source ? kafka_source->kafka_group() : nullptr;
}

}  // namespace driftd
