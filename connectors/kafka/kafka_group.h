// Membership of a scaled-out query's consumer group (engine/group.h): a consumer that
// subscribes to the source topics and the query's repartition topic with the cooperative-sticky
// assignor, so that the group divides source partitions and tasks among the processes running
// the pipeline. It never fetches: the partitions it is assigned are paused, and the Kafka source
// reads planned offset ranges with a consumer of its own, as in a query run by one process. Its
// group metadata goes into every batch's transaction (send_offsets_to_transaction), which is
// what fences a process that kept running after the group moved on (EOS v2).
//
// Also: the internal topics' names and creation, and the changelog offsets the sink's delivery
// reports saw in the last transaction.
//
// Thread-safety: the executor's thread only (the rebalance callback runs inside Poll).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "connectors/kafka/kafka_common.h"
#include "engine/result.h"
#include "engine/source.h"

namespace driftd::kafka {

struct GroupOptions {
  std::string pipeline;
  /// This process's name in the group (scaleOut.instance).
  std::string instance;
  std::string group_id;
  /// The sources' subscription: topics, and patterns (each matching whole topic names).
  std::vector<std::string> topics;
  std::vector<std::string> patterns;
  /// librdkafka settings of the source (kafka.* without the prefix).
  std::map<std::string, std::string> client;
  int request_timeout_ms = 10'000;
};

/// The largest record the internal topics take (their max.message.bytes when this driftd
/// creates them, and the scaled-out producer's message.max.bytes unless set). A changelog
/// record is one state value: a model's open event-time warmup windows keep a sample of up to
/// 10,000 values of each series, well over the broker's default of 1 MB for a model of a dozen
/// series. A record over it ends the query with an error that says so, rather than the batch
/// being computed again and again.
inline constexpr size_t kInternalMaxMessageBytes = 64 << 20;
/// The internal topics' segment.bytes when this driftd creates them: a record batch over a
/// segment is refused too, and a cluster's default may be small.
inline constexpr size_t kInternalSegmentBytes = 2 * kInternalMaxMessageBytes;

/// "driftd-<pipeline>-repartition" and "driftd-<pipeline>-changelog", with characters Kafka
/// refuses in topic names replaced.
std::string RepartitionTopic(std::string_view pipeline);
std::string ChangelogTopic(std::string_view pipeline);

class KafkaGroup {
 public:
  explicit KafkaGroup(GroupOptions options);
  ~KafkaGroup();
  KafkaGroup(const KafkaGroup&) = delete;
  KafkaGroup& operator=(const KafkaGroup&) = delete;

  /// Adds the topics (or a pattern) of another input of the query, whose Kafka source shares
  /// this group: one group divides every input's partitions and the tasks among the
  /// processes. Before Start.
  void AddSubscription(const std::vector<std::string>& topics, const std::string& pattern);

  /// Creates the internal topics if missing (as many partitions as the inputs' topics have in
  /// all, the first time: `source_partitions` of the first input's, and the added topics'),
  /// then joins the group.
  Status Start(int source_partitions);

  /// Serves the group protocol; afterwards assigned() is what this process owns.
  Status Poll();
  /// Partition keys ("topic-3") this process owns, source and repartition alike.
  const std::set<std::string>& assigned() const { return assigned_; }
  /// Counts rebalances seen (a new value means a new assignment).
  int32_t generation() const { return generation_; }

  /// The membership consumer (its group metadata goes into transactions, and it reads the
  /// committed offsets).
  rd_kafka_t* consumer() const { return consumer_.get(); }
  uint32_t task_count() const { return task_count_; }
  /// The librdkafka settings the group was made with (the first input source's kafka.*).
  const std::map<std::string, std::string>& client() const { return options_.client; }
  const std::string& repartition_topic() const { return repartition_topic_; }
  const std::string& changelog_topic() const { return changelog_topic_; }
  /// The changelog topic's delete.retention.ms as Start found it (0 when the broker did not
  /// say).
  int64_t changelog_deletions_kept_ms() const { return changelog_deletions_kept_ms_; }

  /// The sink's delivery reports of the current transaction's changelog records.
  void NoteChangelogOffset(uint32_t task, int64_t offset);
  void ClearChangelogOffsets() { changelog_ends_.clear(); }
  std::map<uint32_t, int64_t> ChangelogEnds() const { return changelog_ends_; }

 private:
  static void RebalanceCallback(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                rd_kafka_topic_partition_list_t* partitions, void* opaque);
  void OnRebalance(rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* partitions);

  GroupOptions options_;
  std::string repartition_topic_;
  std::string changelog_topic_;
  uint32_t task_count_ = 0;
  int64_t changelog_deletions_kept_ms_ = 0;
  Handle consumer_;
  std::set<std::string> assigned_;
  int32_t generation_ = 0;
  /// An assignment came (the assignor has its state: see ~KafkaGroup).
  bool assigned_once_ = false;
  std::map<uint32_t, int64_t> changelog_ends_;
  /// The topics and patterns other inputs' sources added (AddSubscription).
  std::vector<std::string> joined_topics_;
  std::vector<std::regex> joined_patterns_;
};

/// The group a Kafka source configured with scaleOut is a member of; null for any other
/// source.
std::shared_ptr<KafkaGroup> GroupOf(Source& source);

}  // namespace driftd::kafka
