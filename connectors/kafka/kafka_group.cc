#include "connectors/kafka/kafka_group.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/log.h"

namespace driftd::kafka {

namespace {

std::string TopicSafe(std::string_view text) {
  std::string out;
  for (char c : text) {
    const bool legal = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    out.push_back(legal ? c : '_');
  }
  return out;
}

// Settings the membership consumer's correctness depends on, whatever kafka.* says.
void ApplyMembershipSettings(std::map<std::string, std::string>& settings) {
  settings["enable.auto.commit"] = "false";
  settings["enable.auto.offset.store"] = "false";
  // Cooperative: KafkaGroup::OnRebalance assigns and revokes incrementally.
  settings["partition.assignment.strategy"] = "cooperative-sticky";
  // Committed offsets are read with require_stable: an open transaction that holds offsets of
  // a partition is waited for, never read around.
  settings["isolation.level"] = "read_committed";
}

// Keeps a consumer handle that must not be destroyed until the process ends (reachable, so a
// leak checker does not count it).
void KeepUntilExit(rd_kafka_t* rk) {
  static std::mutex mutex;
  static auto* kept = new std::vector<rd_kafka_t*>();
  std::lock_guard lock(mutex);
  kept->push_back(rk);
}

}  // namespace

std::string RepartitionTopic(std::string_view pipeline) {
  return "driftd-" + TopicSafe(pipeline) + "-repartition";
}

std::string ChangelogTopic(std::string_view pipeline) {
  return "driftd-" + TopicSafe(pipeline) + "-changelog";
}

KafkaGroup::KafkaGroup(GroupOptions options)
    : options_(std::move(options)),
      repartition_topic_(RepartitionTopic(options_.pipeline)),
      changelog_topic_(ChangelogTopic(options_.pipeline)) {}

void KafkaGroup::AddSubscription(const std::vector<std::string>& topics,
                                 const std::string& pattern) {
  for (const std::string& topic : topics) {
    if (std::find(options_.topics.begin(), options_.topics.end(), topic) == options_.topics.end()) {
      options_.topics.push_back(topic);
      joined_topics_.push_back(topic);
    }
  }
  if (!pattern.empty()) {
    options_.patterns.push_back(pattern);
    joined_patterns_.emplace_back(pattern);
  }
}

KafkaGroup::~KafkaGroup() {
  if (!consumer_) return;
  // Leaves the group at once, so the others take over this process's partitions now rather
  // than after the session timeout; but never waits longer than that for it: a stop must end.
  rd_kafka_t* rk = consumer_.get();
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  ErrorPtr error{rd_kafka_consumer_close_queue(rk, queue)};
  if (error) Log()->warn("kafka group {}: leaving: {}", options_.group_id, Describe(error.get()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  while (!error && !rd_kafka_consumer_closed(rk) && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_queue_poll_callback(queue, 100);  // serves the revocation (OnRebalance)
  }
  const bool closed = rd_kafka_consumer_closed(rk) != 0;
  rd_kafka_queue_destroy(queue);
  if (!assigned_once_) {
    // librdkafka before 2.3 (Debian 12 has 2.0.2) aborts the process when it destroys a
    // cooperative-sticky member stopped between joining and its first assignment: the
    // assignor's state does not exist yet and its destructor asserts that it does. Such a
    // member has left the group above; its handle is kept until the process ends.
    Log()->debug("kafka group {}: instance {} stopped before its first assignment",
                 options_.group_id, options_.instance);
    KeepUntilExit(consumer_.release());
    return;
  }
  if (!closed) {
    // A member whose leaving did not finish is often one in the middle of a rebalance, and
    // destroying it then can wait on librdkafka's threads without end (a stop during a join
    // took the 30 s of the shutdown's limit and exited 75). The stop goes on without it: its
    // handle is kept until the process ends, like the one above.
    Log()->warn("kafka group {}: instance {} did not leave the group within 6 s; the group "
                "moves its partitions after the session timeout",
                options_.group_id, options_.instance);
    KeepUntilExit(consumer_.release());
  }
}

Status KafkaGroup::Start(int source_partitions) {
  std::map<std::string, std::string> settings = {
      {"client.id", fmt::format("driftd-{}-{}", options_.pipeline, options_.instance)},
      // A process that dies is replaced after this long; Kafka's floor is 6 s.
      {"session.timeout.ms", "6000"},
      {"heartbeat.interval.ms", "1500"},
  };
  for (const auto& [name, value] : options_.client) settings[name] = value;
  settings["group.id"] = options_.group_id;
  ApplyMembershipSettings(settings);
  auto conf = MakeConf(settings);
  if (!conf) return tl::unexpected(conf.error().Wrap("kafka group"));
  rd_kafka_conf_set_opaque(conf->get(), this);
  rd_kafka_conf_set_rebalance_cb(conf->get(), &KafkaGroup::RebalanceCallback);
  auto client = MakeClient(RD_KAFKA_CONSUMER, std::move(*conf));
  if (!client) return tl::unexpected(client.error().Wrap("kafka group"));
  consumer_ = std::move(*client);

  // The internal topics: created once, with as many partitions (tasks) as the inputs have, so
  // that up to that many processes share the work.
  auto metadata = FetchMetadata(consumer_.get(), nullptr, options_.request_timeout_ms);
  if (!metadata) return tl::unexpected(metadata.error().Wrap("kafka group"));
  auto partitions_of = [&](const std::string& topic) -> int {
    for (int t = 0; t < (*metadata)->topic_cnt; ++t) {
      if (topic == (*metadata)->topics[t].topic) return (*metadata)->topics[t].partition_cnt;
    }
    return 0;
  };
  // The other inputs' topics count too: those named, and those their patterns match now.
  int all_partitions = source_partitions;
  for (const std::string& topic : joined_topics_) all_partitions += partitions_of(topic);
  for (int t = 0; t < (*metadata)->topic_cnt && !joined_patterns_.empty(); ++t) {
    const std::string name = (*metadata)->topics[t].topic;
    const bool named = std::find(options_.topics.begin(), options_.topics.end(), name) !=
                       options_.topics.end();
    // Matched as the joined source will (PatternSubscribes), which reads every such topic.
    const bool matched = std::any_of(
        joined_patterns_.begin(), joined_patterns_.end(),
        [&](const std::regex& re) { return PatternSubscribes(name, re); });
    if (matched && !named && name != repartition_topic_) {
      all_partitions += (*metadata)->topics[t].partition_cnt;
    }
  }
  const int tasks = std::max(1, all_partitions);
  // Records as large as kInternalMaxMessageBytes, in segments that hold one.
  const std::string max_bytes = std::to_string(kInternalMaxMessageBytes);
  const std::string segment_bytes = std::to_string(kInternalSegmentBytes);
  if (partitions_of(repartition_topic_) == 0) {
    DRIFTD_TRY(CreateTopic(consumer_.get(), repartition_topic_, tasks,
                           {{"cleanup.policy", "delete"},
                            {"retention.ms", "604800000"},
                            {"max.message.bytes", max_bytes},
                            {"segment.bytes", segment_bytes}},
                           options_.request_timeout_ms));
  }
  if (partitions_of(changelog_topic_) == 0) {
    DRIFTD_TRY(CreateTopic(consumer_.get(), changelog_topic_, tasks,
                           {{"cleanup.policy", "compact"},
                            {"max.message.bytes", max_bytes},
                            {"segment.bytes", segment_bytes}},
                           options_.request_timeout_ms));
  }
  // Wait until both are known with their leaders (a topic created a moment ago may not be).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    auto fresh = FetchMetadata(consumer_.get(), nullptr, options_.request_timeout_ms);
    if (!fresh) return tl::unexpected(fresh.error().Wrap("kafka group"));
    int repartition = 0;
    int changelog = 0;
    bool leaders = true;
    for (int t = 0; t < (*fresh)->topic_cnt; ++t) {
      const rd_kafka_metadata_topic_t& topic = (*fresh)->topics[t];
      const bool internal = repartition_topic_ == topic.topic || changelog_topic_ == topic.topic;
      if (!internal) continue;
      for (int p = 0; p < topic.partition_cnt; ++p) leaders = leaders && topic.partitions[p].leader >= 0;
      (repartition_topic_ == topic.topic ? repartition : changelog) = topic.partition_cnt;
    }
    if (repartition > 0 && changelog > 0 && leaders) {
      if (repartition != changelog) {
        return MakeError(ErrorCode::kConfig,
                         "kafka group: {} has {} partitions and {} has {}: the internal topics "
                         "of a pipeline must have as many partitions as each other (delete "
                         "both to have them created again)",
                         repartition_topic_, repartition, changelog_topic_, changelog);
      }
      task_count_ = static_cast<uint32_t>(repartition);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return MakeError(ErrorCode::kExternal, "kafka group: the internal topics {} and {} have no "
                       "leaders", repartition_topic_, changelog_topic_);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // How long the changelog keeps a deletion (engine/group.h): the topic's setting, which is the
  // broker's log.cleaner.delete.retention.ms unless the topic has its own.
  // Unknown, it is taken as 0: a task's local copy that is behind is then always restored
  // whole, which is slower but never wrong.
  QueuePtr asked =
      AskTopicConfigs(consumer_.get(), {changelog_topic_}, options_.request_timeout_ms);
  const auto described = TopicConfigsAnswer(asked.get(), "delete.retention.ms",
                                            options_.request_timeout_ms + 5000);
  int64_t kept_ms = -1;
  if (described && described->count(changelog_topic_) != 0) {
    const std::string& text = described->at(changelog_topic_);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), kept_ms);
    if (ec != std::errc() || end != text.data() + text.size() || kept_ms < 0) kept_ms = -1;
  }
  changelog_deletions_kept_ms_ = std::max<int64_t>(kept_ms, 0);
  if (kept_ms < 0) {
    Log()->warn("kafka group {}: the broker did not say the delete.retention.ms of {} (may this "
                "client describe its configs?); a task whose local copy is behind its changelog "
                "is restored whole from it",
                options_.group_id, changelog_topic_);
  }

  PartitionList subscription{rd_kafka_topic_partition_list_new(
      static_cast<int>(options_.topics.size() + options_.patterns.size()) + 1)};
  for (const std::string& topic : options_.topics) {
    rd_kafka_topic_partition_list_add(subscription.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
  }
  for (const std::string& pattern : options_.patterns) {
    // librdkafka reads a subscription starting with '^' as a (POSIX) regular expression; the
    // source matches whole topic names.
    const std::string regex = "^(" + pattern + ")$";
    rd_kafka_topic_partition_list_add(subscription.get(), regex.c_str(), RD_KAFKA_PARTITION_UA);
  }
  rd_kafka_topic_partition_list_add(subscription.get(), repartition_topic_.c_str(),
                                    RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t err = rd_kafka_subscribe(consumer_.get(), subscription.get());
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "kafka group {}: subscribing: {}", options_.group_id,
                     rd_kafka_err2str(err));
  }
  Log()->info("kafka group {}: instance {} joining ({} tasks; internal topics {}, {})",
              options_.group_id, options_.instance, task_count_, repartition_topic_,
              changelog_topic_);
  return Ok();
}

Status KafkaGroup::Poll() {
  // The assigned partitions are paused, so nothing but events should come; a message that was
  // fetched before its partition was paused is dropped (the source reads it itself).
  for (int i = 0; i < 1000; ++i) {
    MessagePtr message{rd_kafka_consumer_poll(consumer_.get(), 0)};
    if (!message) break;
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR &&
        message->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (rd_kafka_fatal_error(consumer_.get(), nullptr, 0) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return MakeError(ErrorCode::kUnrecoverable, "kafka group {}: {}", options_.group_id,
                         rd_kafka_message_errstr(message.get()));
      }
      Log()->debug("kafka group {}: {}", options_.group_id,
                   rd_kafka_message_errstr(message.get()));
    }
  }
  return Ok();
}

void KafkaGroup::RebalanceCallback(rd_kafka_t* /*rk*/, rd_kafka_resp_err_t err,
                                   rd_kafka_topic_partition_list_t* partitions, void* opaque) {
  static_cast<KafkaGroup*>(opaque)->OnRebalance(err, partitions);
}

void KafkaGroup::OnRebalance(rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t* partitions) {
  // The protocol is cooperative: ApplyMembershipSettings fixes the assignor. It is not asked
  // of librdkafka (rd_kafka_rebalance_protocol): that waits for the group's thread without a
  // time limit, and a revocation served while the member leaves the group (~KafkaGroup) waited
  // there for good, holding the stop past its 30 s limit (exit 75).
  rd_kafka_t* rk = consumer_.get();
  std::vector<std::string> keys;
  for (int i = 0; i < partitions->cnt; ++i) {
    keys.push_back(PartitionKey(partitions->elems[i].topic, partitions->elems[i].partition));
  }
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    ErrorPtr error{rd_kafka_incremental_assign(rk, partitions)};
    if (error) Log()->warn("kafka group: assigning: {}", Describe(error.get()));
    // Membership only: the source reads the partitions with its own consumer (Poll drops
    // what a partition that failed to pause still fetches).
    if (rd_kafka_resp_err_t failed = rd_kafka_pause_partitions(rk, partitions); failed) {
      Log()->debug("kafka group: pausing: {}", rd_kafka_err2str(failed));
    }
    for (const std::string& key : keys) assigned_.insert(key);
    assigned_once_ = true;
    Log()->info("kafka group {}: instance {} assigned {} partitions: {}", options_.group_id,
                options_.instance, keys.size(), fmt::join(keys, ", "));
  } else {
    const bool lost = rd_kafka_assignment_lost(rk) != 0;
    ErrorPtr error{rd_kafka_incremental_unassign(rk, partitions)};
    if (error) Log()->warn("kafka group: unassigning: {}", Describe(error.get()));
    for (const std::string& key : keys) assigned_.erase(key);
    Log()->info("kafka group {}: instance {} {} {} partitions: {}", options_.group_id,
                options_.instance, lost ? "lost" : "gave up", keys.size(), fmt::join(keys, ", "));
  }
  ++generation_;
}

void KafkaGroup::NoteChangelogOffset(uint32_t task, int64_t offset) {
  int64_t& end = changelog_ends_[task];
  end = std::max(end, offset + 1);
}

}  // namespace driftd::kafka
