// The `kafka` source (Spark's Kafka source): topics by name, by pattern or by explicit
// partitions. A batch is a planned offset range per partition; reading assigns exactly those
// partitions at exactly those offsets (no group rebalancing decides positions), so a replayed
// range yields the same records. Offsets are keyed "topic-partition". Partitions that appear
// while running are read from their earliest offset. Every partition of a batch is assigned
// at once and stays assigned after it, so librdkafka fetches all of them concurrently, and the
// next batch's records, while the executor decodes and aggregates; partitions caught up with
// their log are paused between batches, so an idle topic is not polled. Offsets that vanished
// (retention, DeleteRecords, a deleted topic) stop the query with kDataLoss, or with
// failOnDataLoss=false are skipped and counted as lost records.
//
// Broker outages: once the source has reached its cluster, losing it is waited out rather than
// ending the query. A health thread probes the brokers about once a second, so IsReady (/readyz)
// follows their reachability even while the executor is busy elsewhere (say, in a sink's
// transaction that waits for the same broker); planning during an outage reports "no new data";
// reading a planned range waits for the brokers (time they are away does not count against
// kafkaConsumer.pollTimeoutMs, and the reader hands back empty chunks meanwhile so that a stop
// is noticed); committing group offsets waits at most 2 s. A cluster never reached is a
// configuration or start-up problem and fails planning at once.
//
// This header holds the source's own parts: its options, the KafkaSource class and its reader
// (its public surface is KafkaSourceDecl and CreateKafkaSource in
// connectors/connector_factories.h, and kafka::GroupOf in kafka_group.h). Included only by the
// source's files:
//   kafka_source.cc             the consumer's start and shutdown, the health thread that follows
//                               the brokers through an outage, and what the source says of its
//                               partitions (lag, names, Describe)
//   kafka_source_options.cc     the options: parsing and checks (Bind), the declaration and the
//                               factory
//   kafka_source_partitions.cc  what the brokers say of the source's partitions: which exist
//                               (metadata), their watermarks, and the data-loss errors
//   kafka_source_plan.cc        planning: initial offsets (startingOffsets), a batch's offset
//                               ranges and maxOffsetsPerTrigger
//   kafka_source_read.cc        reading a planned batch: the partitions' feeds (assignment,
//                               seeks, pauses) and the reader that hands records to the executor
//   kafka_source_group.cc       the consumer group: a scaled-out query's membership (assignment,
//                               committed positions, changelog restore) and the group offsets
//                               committed after each batch
//
// Thread-safety: the executor's thread calls every method. The health thread (HealthLoop, and
// ErrorCallback inside its rd_kafka_poll) touches only the reachability atomics, through
// SetReachable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "connectors/kafka/kafka_common.h"
#include "connectors/kafka/kafka_group.h"
#include "engine/group.h"
#include "engine/source.h"

namespace driftd::kafka_source_detail {

using kafka::ErrorPtr;
using kafka::Handle;
using kafka::Log;
using kafka::MessagePtr;
using kafka::PartitionList;
using kafka::QueuePtr;

enum class Mode { kSubscribe, kSubscribePattern, kAssign };

constexpr int64_t kEarliest = -2;
constexpr int64_t kLatest = -1;
// Messages taken from a queue per call.
constexpr size_t kConsumeBatch = 1024;
// Pause between watermark requests that a reader repeats while the brokers are unreachable.
constexpr auto kRetryPause = std::chrono::milliseconds(200);

// The source's options as its bind made them, once, at load (their defaults are declared in
// KafkaSourceDecl only).
struct KafkaSourceOptions {
  Mode mode = Mode::kSubscribe;
  /// subscribe: the topics.
  std::vector<std::string> topics;
  /// subscribePattern: a regular expression matched against whole topic names.
  std::string pattern;
  /// assign: the partitions of each topic.
  std::map<std::string, std::vector<int32_t>> assign;
  /// startingOffsets: "earliest", "latest" or per-partition JSON, with the JSON's offsets by
  /// "topic-partition" in starting_partitions.
  std::string starting_offsets;
  std::map<std::string, int64_t> starting_partitions;
  /// maxOffsetsPerTrigger: records per batch over all partitions; 0 when unset (no limit).
  int64_t max_offsets_per_trigger = 0;
  bool fail_on_data_loss = false;
  /// kafkaConsumer.pollTimeoutMs: how long reading a planned range may wait for records.
  int64_t poll_timeout_ms = 0;
  /// librdkafka settings (kafka.* without the prefix).
  std::map<std::string, std::string> client;
  std::string group_id;
  /// Commit consumer-group offsets in OnCommitted. False when a kafka sink commits them inside
  /// its transaction (send_offsets_to_transaction).
  bool commit_offsets = true;
  std::string pipeline_name;
  /// scaleOut.enabled: the group divides partitions among processes (engine/group.h).
  bool scale_out = false;
  std::string instance;
  /// The query reads the `key` / `headers` metadata columns: copy them into each chunk.
  bool read_key = false;
  bool read_headers = false;
};

struct PartitionState {
  std::string topic;
  int32_t partition = 0;
  std::string key;  // "topic-partition"
  /// Watermarks at the last PlanBatch (high is the last stable offset under read_committed).
  int64_t low = 0;
  int64_t high = 0;
};

struct Watermarks {
  int64_t low = 0;
  int64_t high = 0;
  /// The topic or partition no longer exists.
  bool gone = false;
};

class KafkaSource;

// A partition the reading consumer has assigned. Feeds outlive the batch that assigned them:
// while the executor decodes and aggregates one partition's records (or commits the batch),
// librdkafka's broker threads go on fetching every assigned partition into its own queue, so
// the next partition's and the next batch's records are in memory when they are wanted.
struct Feed {
  std::string topic;
  int32_t partition = 0;
  /// The partition's own queue, not forwarded to the consumer queue.
  QueuePtr queue;
  /// The offset the feed hands out next: records below it were read (or skipped) already.
  /// kUnknownPosition after an error took messages from the queue that were not handed out.
  int64_t position = 0;
  /// Taken from the queue beyond the end of the range being read (a batch that asked for more
  /// messages than its range still held, because of offsets without a record): the first
  /// messages of the next range, in offset order.
  std::deque<MessagePtr> held;
  /// The offset of the last end-of-partition event taken from the queue, -1 for none since the
  /// feed was (re)positioned: every record below it was taken already. A range that ends at or
  /// before it is read whole once `held` is, even if the event came while an earlier range was
  /// read (librdkafka sends it once; offsets without a record, transaction markers, would
  /// otherwise be waited for).
  int64_t eof_at = -1;
  /// Paused at the end of the log (see KafkaSource::PauseCaughtUp).
  bool paused = false;
};

constexpr int64_t kUnknownPosition = -1;

// Reads one planned batch round robin over its partitions (in offset-key order), a slice of
// kSliceOffsets offsets of each in turn. The slices are cut by offsets, not by what a fetch
// happened to bring, so a replay yields the records in the same order, not only the same
// records: record-count windows of a model read from several partitions depend on it. Every
// partition moves on through the batch, so the event-time clock's watermark (the minimum over
// the partitions) does too, and drift takes its ordered values while the batch is read
// (engine/executor/order_buffer.h) rather than all at its end. The partitions are fetched
// concurrently: every partition of the batch is assigned (a Feed) before the first is read, so
// while one partition is read the others fill their queues.
class KafkaReader final : public SourceReader {
 public:
  struct Range {
    uint32_t index = 0;  // into the source's partition list
    int32_t partition = 0;
    std::string topic;
    int64_t next = 0;
    int64_t end = 0;
    bool done = false;
    /// Where the slice being read ends (an offset): the reader moves on to the next range there.
    int64_t slice_end = 0;
    /// The range ends at the log's end as planned: its feed is paused when done.
    bool at_log_end = false;
    Feed* feed = nullptr;
  };

  /// Offsets of one partition read before the next partition's turn.
  static constexpr int64_t kSliceOffsets = 16'384;

  KafkaReader(KafkaSource& source, std::vector<Range> ranges, int64_t lost);
  ~KafkaReader() override;

  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override;
  int64_t lost_records() const override { return lost_; }

 private:
  void Finish(Range& range);
  // Hands `message` of `range` to the chunk, holds it for the next range, or drops it.
  Status Take(Range& range, MessagePtr message, InputChunk& chunk);
  Status HandleError(Range& range, const rd_kafka_message_t& message);
  Status SkipTo(Range& range, int64_t offset);
  // Errors that librdkafka reports on the consumer queue rather than a partition's.
  Status ServeConsumerQueue();

  KafkaSource& source_;
  std::vector<Range> ranges_;
  size_t remaining_ = 0;
  int64_t lost_ = 0;
  /// The range being read.
  size_t current_ = 0;
  std::vector<rd_kafka_message_t*> messages_;
  std::chrono::steady_clock::time_point last_progress_;
};

class KafkaSource final : public Source, public GroupMember {
 public:
  explicit KafkaSource(KafkaSourceOptions options);
  ~KafkaSource() override;

  Status Start(const SourceOffsets& committed) override;

  GroupMember* group() override { return group_ ? this : nullptr; }
  Status ShareGroupOf(Source& first) override;

  // The group this source is a member of (scaleOut), shared with the Kafka sink.
  const std::shared_ptr<kafka::KafkaGroup>& kafka_group() const { return group_; }

  // ---- GroupMember (kafka_source_group.cc) ------------------------------------------------

  Result<GroupAssignment> PollAssignment() override;
  uint32_t task_count() const override { return group_->task_count(); }
  // As the last metadata request (each batch's planning makes one) found them.
  std::vector<std::string> SourcePartitions() override;
  std::string TaskInputKey(uint32_t task) const override;
  std::optional<uint32_t> TaskOfInputKey(std::string_view key) const override;
  Result<std::map<std::string, GroupPosition>> Committed(
      const std::vector<std::string>& keys) override;
  Result<int64_t> ReadChangelog(
      uint32_t task, int64_t from,
      const std::function<void(std::string_view, std::optional<std::string_view>)>& visit)
      override;
  std::map<uint32_t, int64_t> LastChangelogEnds() override { return group_->ChangelogEnds(); }
  int64_t changelog_deletions_kept_ms() const override {
    return group_->changelog_deletions_kept_ms();
  }

  // ---- Planning (kafka_source_plan.cc) ----------------------------------------------------

  Result<SourceOffsets> InitialOffsets() override;
  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override;

  // ---- Reading (kafka_source_read.cc) -----------------------------------------------------

  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override;

  // Commits the group offsets (kafka_source_group.cc). Waits a bounded time: the group
  // coordinator may be unreachable, and the executor must not wait for it (the checkpoint, not
  // the group, is the source of truth). An unanswered commit goes on in the background; the
  // next batch's commit supersedes it.
  Status OnCommitted(const SourceOffsets& end) override;

  // ---- The partitions as the source names them (kafka_source.cc) --------------------------

  std::vector<PartitionLag> Lag(const SourceOffsets& position) override;
  bool HasIndependentPartitions() const override { return true; }
  std::string PartitionKeyOf(uint32_t partition_index) const override;
  std::optional<TopicPartition> TopicPartitionOf(uint32_t partition_index) const override;
  std::string DescribePosition(const RecordPosition& position) const override;
  std::string Describe() const override;

  bool IsReady() const override { return ready_.load(std::memory_order_relaxed); }
  bool PlannedBlind() const override { return planned_blind_; }
  /// availableNow: each partition of the inputs is read up to its end as the first plan that
  /// reaches it sees it (at start, or when the partition first appears), not to records
  /// produced since.
  Status FreezeAvailable() override {
    freeze_ = true;
    return Ok();
  }

 private:
  friend class KafkaReader;

  // kafka_source_group.cc
  kafka::GroupOptions GroupSettings() const;
  Status StartGroup();

  // kafka_source_plan.cc
  Result<SourceOffsets> PlanFrom(const SourceOffsets& start);
  // Where a partition nobody has committed starts.
  Result<int64_t> StartingOffsetOf(const std::string& key, bool task_input);

  // kafka_source_read.cc
  // Assigns every partition of `ranges` that is not assigned yet, at the range's start, and
  // moves a feed whose position is not the range's start there (a replay, a skip after data
  // loss, an error). Feeds of partitions this source may no longer read (MayRead) are
  // unassigned; those of partitions it may read stay, in this read or not. Points each range at
  // its feed.
  Status PrepareFeeds(std::vector<KafkaReader::Range>& ranges, const SourceOffsets& end);
  // The partition exists and, scaled out, is assigned to this process.
  bool MayRead(uint32_t index) const;
  // Unassigns the partitions of these feeds and lets go of their queues and held messages.
  Status DropFeeds(const std::vector<uint32_t>& indexes);
  Status DropAllFeeds();
  // Destroys whatever the partition queues of dropped feeds still hold.
  void DrainQueues();
  // Stops fetching partitions whose range ended at the end of their log: an idle topic is not
  // polled between batches. Their queues are emptied; the next batch resumes them where the
  // reader stopped. Best effort: a partition left fetching only costs requests.
  void PauseFeeds(const std::vector<Feed*>& feeds);
  // Wakes the consumer's fetcher for a partition whose queue the reader found empty.
  // librdkafka (2.0) stops fetching a partition once its queue is full and looks again only when
  // its broker thread wakes: on a request or response, or after a second. A queue emptied
  // meanwhile would wait out the rest of that second. A request to the partition's leader on
  // the consumer's own connections wakes that thread at once.
  void WakeFetcher(const std::string& topic, int32_t partition);

  // kafka_source.cc: the brokers' reachability
  // Called on the health thread (rd_kafka_poll).
  static void ErrorCallback(rd_kafka_t* rk, int err, const char* reason, void* opaque);
  // The health thread: serves librdkafka's callbacks and probes the brokers, so that readiness
  // follows them whatever the executor's thread is doing.
  void HealthLoop();
  // Records whether the brokers answer; logs the moments an outage begins and ends.
  void SetReachable(bool reachable, std::string_view reason);
  void RemindOutage();

  // kafka_source_partitions.cc
  static std::string Name(const PartitionState& state) {
    return fmt::format("topic {} partition {}", state.topic, state.partition);
  }
  Error DataLossErrorValue(const PartitionState& state, int64_t from,
                           const Watermarks& marks) const;
  tl::unexpected<Error> DataLossError(const PartitionState& state, int64_t from,
                                      const Watermarks& marks) const;
  uint32_t AddPartition(const std::string& topic, int32_t partition);
  Result<uint32_t> IndexOf(const std::string& key);
  // Brings partitions_ / present_ up to date with the broker's metadata.
  Status RefreshPartitions();
  // A topic that exists but whose metadata is momentarily incomplete (no leader during an
  // election or creation) must not look deleted: that would be reported as data loss.
  static Status CheckTopic(const rd_kafka_metadata_topic_t& topic);
  void Mark(uint32_t index);
  Result<Watermarks> QueryWatermarks(PartitionState& state);
  // Whether the broker's metadata, asked now, lists the partition. kExternal when the broker
  // cannot be asked or does not know yet (a leader being elected).
  Result<bool> ListsPartition(const PartitionState& state);
  // The watermarks of partitions_[i] for each i of `indexes`, in that order. Two ListOffsets
  // requests for all of them (the earliest and the latest offsets; librdkafka sends one per
  // leader), not two per partition: a batch asks them of every partition, and a thread per
  // partition made an idle query start and end dozens of threads a second. A partition the
  // batched request could not answer is asked on its own, as QueryWatermarks(Waiting) does.
  std::vector<Result<Watermarks>> QueryAllWatermarks(const std::vector<uint32_t>& indexes,
                                                     bool waiting);
  // For a range being read: a broker that is away (or a partition whose leader is moving) is
  // waited for, up to kafkaConsumer.pollTimeoutMs, as the records themselves are.
  Result<Watermarks> QueryWatermarksWaiting(PartitionState& state);

  KafkaSourceOptions options_;
  const int request_timeout_ms_;
  std::regex pattern_;
  Handle consumer_;
  // Metadata and offset requests (planning, data-loss checks) go through a client of their
  // own, on connections of their own: on the consumer's, a request waits behind the fetch
  // responses the broker is sending for the next batch (8 to 22 ms a plan, measured, against
  // 1 ms here). It fetches nothing and joins no group.
  Handle planner_;
  QueuePtr queue_;
  std::vector<PartitionState> partitions_;
  std::unordered_map<std::string, uint32_t> index_;
  /// Partitions that exist now, in discovery order.
  std::vector<uint32_t> present_;
  std::set<uint32_t> present_set_;
  /// Start offsets chosen for partitions that joined after the previous batch was planned.
  std::map<std::string, int64_t> new_partition_start_;
  /// The brokers answered the last request or probe (IsReady).
  std::atomic<bool> ready_{false};
  // The last PlanBatch met an outage and planned nothing without seeing the partitions (the
  // executor's thread only).
  bool planned_blind_ = false;
  /// FreezeAvailable: the end offset each input partition is read to (the executor's thread).
  bool freeze_ = false;
  std::map<std::string, int64_t> frozen_end_;
  /// The brokers have answered at least once: from then on an outage is waited out.
  std::atomic<bool> reached_{false};
  /// steady_clock ticks: when the current outage began (0: none), when it was last logged.
  std::atomic<int64_t> outage_since_{0};
  std::atomic<int64_t> last_reminder_{0};

  std::mutex health_mutex_;
  std::condition_variable health_wake_;
  bool stopping_ = false;  // guarded by health_mutex_
  std::thread health_thread_;

  /// scaleOut: the group membership, shared with the Kafka sink; null otherwise.
  std::shared_ptr<kafka::KafkaGroup> group_;
  /// Whether this source made group_ (and so joins it, and reads the tasks' input): a later
  /// input's source shares the first input's (ShareGroupOf).
  bool owns_group_ = true;
  /// The source partitions at the last successful metadata request (scaleOut).
  std::vector<std::string> source_partitions_seen_;
  /// Reads the changelog (scaleOut; created on first use).
  Handle changelog_reader_;
  /// The partitions the consumer has assigned, by partition index (stable addresses).
  std::map<uint32_t, Feed> feeds_;
  /// Partition queues of feeds that ended, kept until the client closes (DropFeeds).
  std::vector<QueuePtr> retired_queues_;
};

}  // namespace driftd::kafka_source_detail
