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
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <simdjson.h>

#include "connectors/connector_factories.h"
#include "connectors/kafka/kafka_common.h"
#include "connectors/kafka/kafka_group.h"
#include "engine/group.h"
#include "engine/log.h"

namespace driftd {

namespace {

using kafka::ErrorPtr;
using kafka::Handle;
using kafka::MessagePtr;
using kafka::PartitionList;
using kafka::QueuePtr;

enum class Mode { kSubscribe, kSubscribePattern, kAssign };

// Options the consumer's correctness depends on; the source sets them itself.
constexpr const char* kManagedSettings[] = {"enable.auto.commit", "enable.auto.offset.store",
                                            "auto.offset.reset", "enable.partition.eof"};

constexpr int64_t kEarliest = -2;
constexpr int64_t kLatest = -1;
// Messages taken from the consumer queue per call.
constexpr size_t kConsumeBatch = 1024;
// How long one consume call waits before deadlines are checked again.
constexpr int kConsumeWaitMs = 100;
// Upper bound on one metadata or watermark round trip (lower when pollTimeoutMs is lower).
constexpr int kMaxRequestTimeoutMs = 10'000;
// How often the health thread asks the brokers for metadata, and how long it waits for them.
constexpr auto kProbeInterval = std::chrono::seconds(1);
constexpr int kProbeTimeoutMs = 2'000;
// While the brokers stay unreachable, a reminder is logged this often.
constexpr auto kOutageReminder = std::chrono::seconds(30);
// How long OnCommitted waits for the group coordinator's answer.
constexpr int kCommitWaitMs = 2'000;
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

std::vector<std::string> SplitTopics(const std::string& text) {
  std::vector<std::string> topics;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos) comma = text.size();
    std::string topic = text.substr(begin, comma - begin);
    topic.erase(0, topic.find_first_not_of(" \t"));
    topic.erase(topic.find_last_not_of(" \t") + 1);
    if (!topic.empty()) topics.push_back(topic);
    begin = comma + 1;
  }
  return topics;
}

Result<std::map<std::string, std::vector<int32_t>>> ParseAssign(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(json).get(object)) {
    return MakeError(ErrorCode::kConfig, "assign: expected JSON like {{\"topic\":[0,1]}}, got {}",
                     json);
  }
  std::map<std::string, std::vector<int32_t>> assign;
  for (auto [topic, value] : object) {
    simdjson::dom::array partitions;
    if (value.get(partitions)) {
      return MakeError(ErrorCode::kConfig, "assign: topic '{}' needs an array of partitions",
                       std::string(topic));
    }
    for (simdjson::dom::element element : partitions) {
      int64_t partition = 0;
      if (element.get(partition) || partition < 0 || partition > INT32_MAX) {
        return MakeError(ErrorCode::kConfig, "assign: topic '{}' has an invalid partition",
                         std::string(topic));
      }
      assign[std::string(topic)].push_back(static_cast<int32_t>(partition));
    }
  }
  if (assign.empty()) return MakeError(ErrorCode::kConfig, "assign names no partitions");
  return assign;
}

// {"topic":{"0":23,"1":-2}} -> {"topic-0": 23, "topic-1": -2}
Result<std::map<std::string, int64_t>> ParseStartingOffsetsJson(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(json).get(object)) {
    return MakeError(ErrorCode::kConfig,
                     "startingOffsets: expected earliest, latest or JSON like "
                     "{{\"topic\":{{\"0\":23,\"1\":-2}}}}, got {}",
                     json);
  }
  std::map<std::string, int64_t> offsets;
  for (auto [topic, value] : object) {
    simdjson::dom::object partitions;
    if (value.get(partitions)) {
      return MakeError(ErrorCode::kConfig,
                       "startingOffsets: topic '{}' needs an object of partition to offset",
                       std::string(topic));
    }
    for (auto [partition_text, offset_value] : partitions) {
      int32_t partition = -1;
      auto [ptr, ec] = std::from_chars(partition_text.data(),
                                       partition_text.data() + partition_text.size(), partition);
      int64_t offset = 0;
      if (ec != std::errc() || ptr != partition_text.data() + partition_text.size() ||
          partition < 0 || offset_value.get(offset) || offset < kEarliest) {
        return MakeError(ErrorCode::kConfig,
                         "startingOffsets: topic '{}' partition '{}' needs an offset, -2 "
                         "(earliest) or -1 (latest)",
                         std::string(topic), std::string(partition_text));
      }
      offsets[kafka::PartitionKey(topic, partition)] = offset;
    }
  }
  return offsets;
}

// What a message of ParseAssign or ParseStartingOffsetsJson says after "<option>: ".
std::string AfterOption(const Error& error, std::string_view option) {
  std::string text = error.message();
  if (const std::string lead = std::string(option) + ": "; text.rfind(lead, 0) == 0) {
    text.erase(0, lead.size());
  }
  return text;
}

// The source's options (declared types, ranges and defaults applied) parsed once, with the
// checks across options, each problem tied to its option.
Bound<KafkaSourceOptions> Bind(const PipelineSpec& pipeline, const SourceSpec&,
                               const Options& options) {
  auto problem = [](std::string option, std::string message) -> Bound<KafkaSourceOptions> {
    return tl::unexpected(OptionProblem{std::move(option), std::move(message)});
  };
  KafkaSourceOptions parsed;
  parsed.pipeline_name = pipeline.name;
  for (MetadataColumn column : pipeline.query.metadata) {
    parsed.read_key |= column == MetadataColumn::kKey;
    parsed.read_headers |= column == MetadataColumn::kHeaders;
  }
  std::vector<std::string_view> modes;
  if (std::string subscribe = options.GetString("subscribe"); !subscribe.empty()) {
    modes.push_back("subscribe");
    parsed.mode = Mode::kSubscribe;
    parsed.topics = SplitTopics(subscribe);
    if (parsed.topics.empty()) return problem("subscribe", "names no topic");
  }
  if (std::string pattern = options.GetString("subscribePattern"); !pattern.empty()) {
    modes.push_back("subscribePattern");
    parsed.mode = Mode::kSubscribePattern;
    parsed.pattern = pattern;
    try {
      std::regex check(pattern);
    } catch (const std::regex_error& error) {
      return problem("subscribePattern", fmt::format("'{}' is not a regular expression: {}",
                                                     pattern, error.what()));
    }
  }
  if (std::string assign = options.GetString("assign"); !assign.empty()) {
    modes.push_back("assign");
    parsed.mode = Mode::kAssign;
    auto assigned = ParseAssign(assign);
    if (!assigned) return problem("assign", AfterOption(assigned.error(), "assign"));
    parsed.assign = std::move(*assigned);
  }
  if (modes.size() != 1) {
    return problem(modes.empty() ? "" : std::string(modes.back()),
                   "the kafka source needs exactly one of subscribe, subscribePattern, assign");
  }
  parsed.starting_offsets = options.GetString("startingOffsets");
  if (parsed.starting_offsets != "earliest" && parsed.starting_offsets != "latest") {
    auto offsets = ParseStartingOffsetsJson(parsed.starting_offsets);
    if (!offsets) {
      return problem("startingOffsets", AfterOption(offsets.error(), "startingOffsets"));
    }
    parsed.starting_partitions = std::move(*offsets);
  }
  // Unset: no limit (the declaration's ranges refuse 0 and negative numbers).
  if (options.Has("maxOffsetsPerTrigger")) {
    parsed.max_offsets_per_trigger = options.GetInt("maxOffsetsPerTrigger");
  }
  parsed.fail_on_data_loss = options.GetBool("failOnDataLoss");
  parsed.poll_timeout_ms = options.GetInt("kafkaConsumer.pollTimeoutMs");
  parsed.client = options.WithPrefix("kafka.");
  if (parsed.client["bootstrap.servers"].empty()) {
    return problem("kafka.bootstrap.servers", "the kafka source needs kafka.bootstrap.servers");
  }
  for (const char* managed : kManagedSettings) {
    if (parsed.client.count(managed)) {
      return problem(fmt::format("kafka.{}", managed),
                     fmt::format("kafka.{} is not supported: the kafka source manages offsets "
                                 "itself",
                                 managed));
    }
  }
  if (auto refused = kafka::CheckSettings(parsed.client)) return tl::unexpected(*refused);
  parsed.group_id = kafka::GroupId(pipeline);
  // A kafka sink commits the offsets inside its transaction (the sink kind's own knowledge).
  parsed.commit_offsets = std::none_of(pipeline.sinks.begin(), pipeline.sinks.end(),
                                       [](const SinkSpec& sink) { return sink.format == "kafka"; });
  parsed.scale_out = pipeline.scale_out.enabled;
  parsed.instance = pipeline.scale_out.instance;
  if (parsed.scale_out) {
    if (parsed.mode == Mode::kAssign) {
      return problem("assign",
                     "scaleOut needs subscribe or subscribePattern: with assign the partitions "
                     "are fixed, and the group cannot share them");
    }
    // Offsets go into each batch's transaction; nothing else may commit for the group.
    parsed.commit_offsets = false;
  }
  return parsed;
}

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> logger = GetLogger("kafka");
  return logger;
}

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
  /// Paused at the end of the log (see KafkaSource::PauseCaughtUp).
  bool paused = false;
};

constexpr int64_t kUnknownPosition = -1;

// Reads one planned batch, one partition after the other (in offset-key order) so that a
// replay yields the records in the same order, not only the same records: record-count
// windows of a model read from several partitions depend on it. The partitions are fetched
// concurrently all the same: every partition of the batch is assigned (a Feed) before the
// first is read, so while one partition is read the others fill their queues.
class KafkaReader final : public SourceReader {
 public:
  struct Range {
    uint32_t index = 0;  // into the source's partition list
    int32_t partition = 0;
    std::string topic;
    int64_t next = 0;
    int64_t end = 0;
    bool done = false;
    /// The range ends at the log's end as planned: its feed is paused when done.
    bool at_log_end = false;
    Feed* feed = nullptr;
  };

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
  explicit KafkaSource(KafkaSourceOptions options)
      : options_(std::move(options)),
        request_timeout_ms_(
            static_cast<int>(std::min<int64_t>(kMaxRequestTimeoutMs, options_.poll_timeout_ms))) {
    if (options_.mode == Mode::kSubscribePattern) pattern_ = std::regex(options_.pattern);
    // The group exists from the start, so that the Kafka sink (created before the source
    // starts) shares it; it joins in Start.
    if (options_.scale_out) group_ = std::make_shared<kafka::KafkaGroup>(GroupSettings());
  }

  ~KafkaSource() override {
    {
      std::lock_guard<std::mutex> lock(health_mutex_);
      stopping_ = true;
    }
    health_wake_.notify_all();
    if (health_thread_.joinable()) health_thread_.join();
    // Queues and messages go back to librdkafka before the client is destroyed.
    IgnoreError(DropFeeds());  // best effort on shutdown
    if (consumer_) {
      // Nothing is subscribed, so closing leaves no group to wait for.
      rd_kafka_consumer_close(consumer_.get());
    }
    DrainQueues();
    retired_queues_.clear();
  }

  Status Start(const SourceOffsets& committed) override {
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
    auto conf = kafka::MakeConf(settings);
    if (!conf) return tl::unexpected(conf.error().Wrap("kafka source"));
    rd_kafka_conf_set_opaque(conf->get(), this);
    rd_kafka_conf_set_error_cb(conf->get(), &KafkaSource::ErrorCallback);
    auto client = kafka::MakeClient(RD_KAFKA_CONSUMER, std::move(*conf));
    if (!client) return tl::unexpected(client.error().Wrap("kafka source"));
    consumer_ = std::move(*client);
    queue_.reset(rd_kafka_queue_get_consumer(consumer_.get()));
    // Reachability is reported through IsReady; planning fails with kExternal until the
    // cluster has answered once.
    auto metadata = kafka::FetchMetadata(consumer_.get(), nullptr, request_timeout_ms_);
    SetReachable(metadata.has_value(), metadata ? "" : metadata.error().message());
    health_thread_ = std::thread([this] { HealthLoop(); });
    if (options_.scale_out) DRIFTD_TRY(StartGroup());
    return Ok();
  }

  GroupMember* group() override { return group_ ? this : nullptr; }

  // The group this source is a member of (scaleOut), shared with the Kafka sink.
  const std::shared_ptr<kafka::KafkaGroup>& kafka_group() const { return group_; }

  // ---- GroupMember ----------------------------------------------------------------------

  Result<GroupAssignment> PollAssignment() override {
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

  uint32_t task_count() const override { return group_->task_count(); }

  // As the last metadata request (each batch's planning makes one) found them.
  std::vector<std::string> SourcePartitions() override {
    if (present_.empty() && !RefreshPartitions()) return source_partitions_seen_;
    std::vector<std::string> keys;
    for (uint32_t i : present_) {
      if (partitions_[i].topic != group_->repartition_topic()) keys.push_back(partitions_[i].key);
    }
    std::sort(keys.begin(), keys.end());
    source_partitions_seen_ = keys;
    return keys;
  }

  std::string TaskInputKey(uint32_t task) const override {
    return kafka::PartitionKey(group_->repartition_topic(), static_cast<int32_t>(task));
  }

  std::optional<uint32_t> TaskOfInputKey(std::string_view key) const override {
    auto parsed = kafka::ParsePartitionKey(key);
    if (!parsed || parsed->first != group_->repartition_topic()) return std::nullopt;
    return static_cast<uint32_t>(parsed->second);
  }

  Result<std::map<std::string, GroupPosition>> Committed(
      const std::vector<std::string>& keys) override {
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

  Result<int64_t> ReadChangelog(
      uint32_t task, int64_t from,
      const std::function<void(std::string_view, std::optional<std::string_view>)>& visit)
      override;

  std::map<uint32_t, int64_t> LastChangelogEnds() override { return group_->ChangelogEnds(); }

  Result<SourceOffsets> InitialOffsets() override {
    DRIFTD_TRY(RefreshPartitions());
    const std::map<std::string, int64_t>& specific = options_.starting_partitions;
    const bool is_json =
        options_.starting_offsets != "earliest" && options_.starting_offsets != "latest";
    if (is_json) {
      for (const auto& [key, offset] : specific) {
        if (!index_.count(key)) {
          return MakeError(ErrorCode::kConfig,
                           "startingOffsets names {}, which is not among the source's partitions",
                           key);
        }
      }
    }
    SourceOffsets offsets;
    for (uint32_t i : present_) {
      PartitionState& state = partitions_[i];
      auto marks = QueryWatermarks(state);
      if (!marks) return tl::unexpected(marks.error());
      int64_t wanted = options_.starting_offsets == "earliest" ? kEarliest : kLatest;
      if (is_json) {
        auto it = specific.find(state.key);
        if (it == specific.end()) {
          return MakeError(ErrorCode::kConfig,
                           "startingOffsets has no offset for topic {} partition {} (give every "
                           "partition: an offset, -2 for earliest or -1 for latest)",
                           state.topic, state.partition);
        }
        wanted = it->second;
      }
      offsets[state.key] = wanted == kEarliest ? marks->low
                           : wanted == kLatest ? marks->high
                                               : wanted;
    }
    return offsets;
  }

  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    if (reached_.load() && !ready_.load()) {
      // An outage: requests would only time out. The health thread notices the brokers' return.
      RemindOutage();
      return start;
    }
    auto planned = PlanFrom(start);
    if (planned || planned.error().code() != ErrorCode::kExternal || !reached_.load()) {
      return planned;
    }
    // Brokers that answered before and fail now (unreachable, restarting, partitions without a
    // leader while they load their logs): no new data until they are back.
    SetReachable(false, planned.error().message());
    return start;
  }

  Result<SourceOffsets> PlanFrom(const SourceOffsets& start) {
    DRIFTD_TRY(RefreshPartitions());

    // Partitions of the previous batch that no longer exist.
    for (const auto& [key, offset] : start) {
      auto it = index_.find(key);
      if (it != index_.end() && present_set_.count(it->second)) continue;
      if (options_.fail_on_data_loss) {
        auto parsed = kafka::ParsePartitionKey(key);
        return MakeError(
            ErrorCode::kDataLoss,
            "{} no longer exists (the query was at offset {}); some data may have "
            "been lost. Set failOnDataLoss=false to continue without it",
            parsed ? fmt::format("topic {} partition {}", parsed->first, parsed->second) : key,
            offset);
      }
      Log()->warn("kafka source: {} no longer exists at offset {}; continuing without it", key,
                  offset);
    }

    struct Plan {
      uint32_t index;
      int64_t from;
      int64_t available;
    };
    std::vector<Plan> plans;
    int64_t total = 0;
    // Scaled out: the partitions the group gave this process, and only those.
    std::vector<uint32_t> planned;
    for (uint32_t i : present_) {
      if (!group_ || group_->assigned().count(partitions_[i].key)) planned.push_back(i);
    }
    std::vector<Result<Watermarks>> all_marks = QueryAllWatermarks(planned, /*waiting=*/false);
    for (size_t p = 0; p < planned.size(); ++p) {
      const uint32_t i = planned[p];
      PartitionState& state = partitions_[i];
      const Result<Watermarks>& marks = all_marks[p];
      if (!marks) return tl::unexpected(marks.error());
      if (marks->gone) {
        // Deleted between the metadata and the watermarks: the position stays, so that the next
        // batch, whose metadata no longer lists the partition, reports or counts the loss.
        if (auto it = start.find(state.key); it != start.end()) plans.push_back({i, it->second, 0});
        continue;
      }
      int64_t from = 0;
      auto it = start.find(state.key);
      if (it == start.end()) {
        // A partition new to the query starts at its earliest offset.
        from = marks->low;
        new_partition_start_[state.key] = from;
      } else {
        from = it->second;
      }
      if (from < marks->low || from > marks->high) {
        if (options_.fail_on_data_loss) return DataLossError(state, from, *marks);
        from = marks->low;  // Read counts what was skipped
      }
      int64_t available = std::max<int64_t>(0, marks->high - from);
      plans.push_back({i, from, available});
      total += available;
    }

    SourceOffsets end;
    const int64_t limit = options_.max_offsets_per_trigger;
    if (limit <= 0 || total <= limit) {
      for (const Plan& plan : plans) end[partitions_[plan.index].key] = plan.from + plan.available;
      return end;
    }
    // Split the limit in proportion to each partition's lag; the largest remainders take the
    // records left over by rounding down, so the batch holds exactly `limit` records.
    std::vector<int64_t> take(plans.size());
    std::vector<std::pair<double, size_t>> remainders;
    int64_t taken = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
      double share = static_cast<double>(limit) * static_cast<double>(plans[i].available) /
                     static_cast<double>(total);
      take[i] = std::min(plans[i].available, static_cast<int64_t>(share));
      taken += take[i];
      remainders.push_back({share - static_cast<double>(take[i]), i});
    }
    std::stable_sort(remainders.begin(), remainders.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t r = 0; taken < limit && r < remainders.size(); ++r) {
      size_t i = remainders[r].second;
      if (take[i] < plans[i].available) {
        ++take[i];
        ++taken;
      }
    }
    for (size_t i = 0; i < plans.size(); ++i) {
      end[partitions_[plans[i].index].key] = plans[i].from + take[i];
    }
    return end;
  }

  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    std::vector<KafkaReader::Range> ranges;
    int64_t lost = 0;
    // A partition of `start` missing from `end` vanished with its topic (failOnDataLoss=false):
    // the records it was last seen to hold beyond the position are lost.
    for (const auto& [key, from] : start) {
      if (end.count(key)) continue;
      if (auto it = index_.find(key); it != index_.end()) {
        lost += std::max<int64_t>(0, partitions_[it->second].high - from);
      }
    }
    // The partitions with something to read, from where, and their watermarks (asked of all
    // at once).
    struct ToRead {
      int64_t end_offset;
      uint32_t index;
      int64_t from;
    };
    std::vector<ToRead> to_read;
    std::vector<uint32_t> indexes;
    for (const auto& [key, end_offset] : end) {
      auto index = IndexOf(key);
      if (!index) return tl::unexpected(index.error());
      int64_t from = 0;
      if (auto it = start.find(key); it != start.end()) {
        from = it->second;
      } else if (auto found = new_partition_start_.find(key); found != new_partition_start_.end()) {
        from = found->second;
      } else {
        from = -1;  // new partition planned before a restart: its earliest offset
      }
      if (from == end_offset) continue;  // nothing to read
      to_read.push_back({end_offset, *index, from});
      indexes.push_back(*index);
    }
    std::vector<Result<Watermarks>> all_marks = QueryAllWatermarks(indexes, /*waiting=*/true);
    for (size_t r = 0; r < to_read.size(); ++r) {
      const int64_t end_offset = to_read[r].end_offset;
      PartitionState& state = partitions_[to_read[r].index];
      int64_t from = to_read[r].from;
      const Result<Watermarks>& marks = all_marks[r];
      if (!marks) return tl::unexpected(marks.error());
      if (from < 0) from = marks->low;
      if (marks->gone) {
        if (options_.fail_on_data_loss) {
          return MakeError(ErrorCode::kDataLoss,
                           "{} no longer exists; offsets {} to {} of the batch are lost. Set "
                           "failOnDataLoss=false to continue without them",
                           Name(state), from, end_offset);
        }
        lost += std::max<int64_t>(0, end_offset - from);
        continue;
      }
      if (from < marks->low || from > end_offset) {
        if (options_.fail_on_data_loss) return DataLossError(state, from, *marks);
        if (from < marks->low) lost += std::min(marks->low, end_offset) - from;
        Log()->warn("kafka source: {} offsets from {} are gone (earliest now {}); skipping ahead",
                    Name(state), from, marks->low);
        from = marks->low;
      }
      if (from >= end_offset) continue;
      KafkaReader::Range range;
      range.index = to_read[r].index;
      range.partition = state.partition;
      range.topic = state.topic;
      range.next = from;
      range.end = end_offset;
      range.at_log_end = end_offset >= marks->high;
      ranges.push_back(std::move(range));
    }
    DRIFTD_TRY(PrepareFeeds(ranges, end));
    return std::unique_ptr<SourceReader>(
        std::make_unique<KafkaReader>(*this, std::move(ranges), lost));
  }

  // Waits a bounded time: the group coordinator may be unreachable, and the executor must not
  // wait for it (the checkpoint, not the group, is the source of truth). An unanswered commit
  // goes on in the background; the next batch's commit supersedes it.
  Status OnCommitted(const SourceOffsets& end) override {
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

  std::vector<PartitionLag> Lag(const SourceOffsets& position) override {
    std::vector<PartitionLag> lags;
    for (const auto& [key, offset] : position) {
      auto it = index_.find(key);
      if (it == index_.end()) continue;
      lags.push_back({key, offset, partitions_[it->second].high});
    }
    return lags;
  }

  bool HasIndependentPartitions() const override { return true; }

  std::string PartitionKeyOf(uint32_t partition_index) const override {
    return partition_index < partitions_.size() ? partitions_[partition_index].key : "";
  }

  std::optional<TopicPartition> TopicPartitionOf(uint32_t partition_index) const override {
    if (partition_index >= partitions_.size()) return std::nullopt;
    const PartitionState& state = partitions_[partition_index];
    return TopicPartition{state.topic, state.partition};
  }

  std::string DescribePosition(const RecordPosition& position) const override {
    if (position.partition >= partitions_.size()) {
      return fmt::format("partition #{} offset {}", position.partition, position.offset);
    }
    const PartitionState& state = partitions_[position.partition];
    return fmt::format("topic {} partition {} offset {}", state.topic, state.partition,
                       position.offset);
  }

  std::string Describe() const override {
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

  bool IsReady() const override { return ready_.load(std::memory_order_relaxed); }

 private:
  friend class KafkaReader;

  kafka::GroupOptions GroupSettings() const {
    kafka::GroupOptions group;
    group.pipeline = options_.pipeline_name;
    group.instance = options_.instance;
    group.group_id = options_.group_id;
    group.client = options_.client;
    group.request_timeout_ms = request_timeout_ms_;
    if (options_.mode == Mode::kSubscribe) {
      group.topics = options_.topics;
    } else {
      group.pattern = options_.pattern;
    }
    return group;
  }

  Status StartGroup() {
    // Count the source's partitions first: they size the internal topics the first time.
    DRIFTD_TRY(RefreshPartitions());
    DRIFTD_TRY(group_->Start(static_cast<int>(present_.size())));
    return Ok();
  }

  // Assigns every partition of `ranges` that is not assigned yet, at the range's start, and
  // moves a feed whose position is not the range's start there (a replay, a skip after data
  // loss, an error). Feeds of partitions that are not in `end` any more (deleted, or given to
  // another process) are unassigned. Points each range at its feed.
  Status PrepareFeeds(std::vector<KafkaReader::Range>& ranges, const SourceOffsets& end) {
    rd_kafka_t* consumer = consumer_.get();
    // A partition that is not in the batch any more (deleted, or given to another process)
    // ends every feed: the assignment starts afresh, as rarely as partitions come and go.
    const bool dropped = std::any_of(feeds_.begin(), feeds_.end(), [&](const auto& entry) {
      return !end.count(partitions_[entry.first].key);
    });
    if (dropped) DRIFTD_TRY(DropFeeds());
    PartitionList added{rd_kafka_topic_partition_list_new(0)};
    PartitionList moved{rd_kafka_topic_partition_list_new(0)};
    PartitionList resumed{rd_kafka_topic_partition_list_new(0)};
    for (KafkaReader::Range& range : ranges) {
      auto [it, is_new] = feeds_.try_emplace(range.index);
      Feed& feed = it->second;
      range.feed = &feed;
      if (is_new) {
        feed.topic = range.topic;
        feed.partition = range.partition;
        feed.queue.reset(
            rd_kafka_queue_get_partition(consumer, range.topic.c_str(), range.partition));
        if (!feed.queue) {
          feeds_.erase(it);
          return MakeError(ErrorCode::kInternal, "kafka source: no queue for {}",
                           Name(partitions_[range.index]));
        }
        // Before the assignment: once the application has set a partition queue's
        // forwarding, librdkafka's fetch start leaves it alone.
        rd_kafka_queue_forward(feed.queue.get(), nullptr);
        feed.position = range.next;
        rd_kafka_topic_partition_list_add(added.get(), range.topic.c_str(), range.partition)
            ->offset = range.next;
        // A pause outlives an assignment: a partition dropped while paused (it went to another
        // process and came back) would otherwise never fetch again.
        rd_kafka_topic_partition_list_add(resumed.get(), range.topic.c_str(), range.partition);
        continue;
      }
      if (feed.position != range.next) {
        feed.held.clear();
        feed.position = range.next;
        rd_kafka_topic_partition_list_add(moved.get(), range.topic.c_str(), range.partition)
            ->offset = range.next;
      }
      if (feed.paused) {
        feed.paused = false;
        rd_kafka_topic_partition_list_add(resumed.get(), range.topic.c_str(), range.partition);
      }
    }
    auto forget = [&](const rd_kafka_topic_partition_list_t& list) {
      for (int i = 0; i < list.cnt; ++i) {
        auto index = IndexOf(kafka::PartitionKey(list.elems[i].topic, list.elems[i].partition));
        if (auto it = feeds_.find(*index); it != feeds_.end()) {
          it->second.position = kUnknownPosition;
        }
      }
    };
    if (added->cnt > 0) {
      ErrorPtr error{rd_kafka_incremental_assign(consumer, added.get())};
      if (error) {
        for (int i = 0; i < added->cnt; ++i) {
          feeds_.erase(*IndexOf(kafka::PartitionKey(added->elems[i].topic,
                                                    added->elems[i].partition)));
        }
        return MakeError(ErrorCode::kExternal, "kafka source: assigning partitions: {}",
                         kafka::Describe(error.get()));
      }
    }
    if (moved->cnt > 0) {
      ErrorPtr error{rd_kafka_seek_partitions(consumer, moved.get(), request_timeout_ms_)};
      for (int i = 0; !error && i < moved->cnt; ++i) {
        if (moved->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
          error.reset(rd_kafka_error_new(moved->elems[i].err, "topic %s partition %d: %s",
                                         moved->elems[i].topic, moved->elems[i].partition,
                                         rd_kafka_err2str(moved->elems[i].err)));
        }
      }
      if (error) {
        forget(*moved);
        return MakeError(ErrorCode::kExternal, "kafka source: seeking: {}",
                         kafka::Describe(error.get()));
      }
    }
    if (resumed->cnt > 0) {
      rd_kafka_resp_err_t err = rd_kafka_resume_partitions(consumer, resumed.get());
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        forget(*resumed);
        return MakeError(ErrorCode::kExternal, "kafka source: resuming partitions: {}",
                         rd_kafka_err2str(err));
      }
    }
    return Ok();
  }

  // Unassigns every partition and lets go of their queues and held messages.
  Status DropFeeds() {
    if (feeds_.empty()) return Ok();
    PartitionList resumed{rd_kafka_topic_partition_list_new(0)};
    for (const auto& [index, feed] : feeds_) {
      if (feed.paused) {
        rd_kafka_topic_partition_list_add(resumed.get(), feed.topic.c_str(), feed.partition);
      }
    }
    // The queues stay until the client closes: messages librdkafka still puts in them (errors
    // of a deleted topic's partition) hold the partition, and destroying the client waits for
    // every partition, so they are emptied then (DrainQueues).
    for (auto& [index, feed] : feeds_) retired_queues_.push_back(std::move(feed.queue));
    feeds_.clear();
    // A pause outlives an assignment: lift it, or the partition would never fetch again.
    if (resumed->cnt > 0) rd_kafka_resume_partitions(consumer_.get(), resumed.get());
    rd_kafka_resp_err_t err = rd_kafka_assign(consumer_.get(), nullptr);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return MakeError(ErrorCode::kExternal, "kafka source: unassigning partitions: {}",
                       rd_kafka_err2str(err));
    }
    return Ok();
  }

  // Destroys whatever the partition queues of dropped feeds still hold.
  void DrainQueues() {
    std::vector<rd_kafka_message_t*> messages(kConsumeBatch);
    for (QueuePtr& queue : retired_queues_) {
      for (;;) {
        ssize_t count =
            rd_kafka_consume_batch_queue(queue.get(), 0, messages.data(), messages.size());
        for (ssize_t i = 0; i < count; ++i) rd_kafka_message_destroy(messages[i]);
        if (count <= 0) break;
      }
    }
  }

  // Stops fetching partitions whose range ended at the end of their log: an idle topic is not
  // polled between batches. Their queues are emptied; the next batch resumes them where the
  // reader stopped. Best effort: a partition left fetching only costs requests.
  void PauseFeeds(const std::vector<Feed*>& feeds) {
    PartitionList list{rd_kafka_topic_partition_list_new(0)};
    for (Feed* feed : feeds) {
      if (feed->paused) continue;
      feed->paused = true;
      rd_kafka_topic_partition_list_add(list.get(), feed->topic.c_str(), feed->partition);
    }
    if (list->cnt == 0) return;
    rd_kafka_resp_err_t err = rd_kafka_pause_partitions(consumer_.get(), list.get());
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      Log()->debug("kafka source: pausing partitions: {}", rd_kafka_err2str(err));
    }
  }

  // Where a partition nobody has committed starts.
  Result<int64_t> StartingOffsetOf(const std::string& key, bool task_input) {
    auto index = IndexOf(key);
    if (!index) return tl::unexpected(index.error());
    PartitionState& state = partitions_[*index];
    auto marks = QueryWatermarksWaiting(state);
    if (!marks) return tl::unexpected(marks.error());
    if (task_input || options_.starting_offsets == "earliest") return marks->low;
    if (options_.starting_offsets == "latest") return marks->high;
    auto parsed = ParseStartingOffsetsJson(options_.starting_offsets);
    if (!parsed) return tl::unexpected(parsed.error());
    auto it = parsed->find(key);
    if (it == parsed->end() || it->second == kEarliest) return marks->low;
    return it->second == kLatest ? marks->high : it->second;
  }

  // Called on the health thread (rd_kafka_poll).
  static void ErrorCallback(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
    auto* source = static_cast<KafkaSource*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) source->SetReachable(false, reason);
    // Connection failures are in librdkafka's own log and in the outage message already.
    const bool connection =
        err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN;
    Log()->log(connection ? spdlog::level::debug : spdlog::level::warn, "kafka source {}: {}: {}",
               rd_kafka_name(rk), rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason);
  }

  // The health thread: serves librdkafka's callbacks and probes the brokers, so that readiness
  // follows them whatever the executor's thread is doing.
  void HealthLoop() {
    std::unique_lock<std::mutex> lock(health_mutex_);
    while (!health_wake_.wait_for(lock, kProbeInterval, [this] { return stopping_; })) {
      lock.unlock();
      rd_kafka_poll(consumer_.get(), 0);
      // Brokers only (and the topics this client knows): cheap, and it needs a live broker.
      const rd_kafka_metadata_t* metadata = nullptr;
      rd_kafka_resp_err_t err = rd_kafka_metadata(consumer_.get(), 0, nullptr, &metadata,
                                                  std::min(kProbeTimeoutMs, request_timeout_ms_));
      if (metadata) rd_kafka_metadata_destroy(metadata);
      SetReachable(err == RD_KAFKA_RESP_ERR_NO_ERROR, rd_kafka_err2str(err));
      lock.lock();
    }
  }

  // Records whether the brokers answer; logs the moments an outage begins and ends.
  void SetReachable(bool reachable, std::string_view reason) {
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

  void RemindOutage() {
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

  static std::string Name(const PartitionState& state) {
    return fmt::format("topic {} partition {}", state.topic, state.partition);
  }

  Error DataLossErrorValue(const PartitionState& state, int64_t from,
                           const Watermarks& marks) const {
    if (from > marks.high) {
      return Error(ErrorCode::kDataLoss,
                   fmt::format("{}: offset {} is beyond the latest offset {} (was the topic "
                               "deleted and re-created?); some data may have been lost. Set "
                               "failOnDataLoss=false to continue from offset {}",
                               Name(state), from, marks.high, marks.low));
    }
    return Error(ErrorCode::kDataLoss,
                 fmt::format("{}: offsets {} to {} are gone (earliest available is {}; "
                             "retention or record deletion removed them). Set "
                             "failOnDataLoss=false to skip them",
                             Name(state), from, marks.low - 1, marks.low));
  }

  tl::unexpected<Error> DataLossError(const PartitionState& state, int64_t from,
                                      const Watermarks& marks) const {
    return tl::unexpected(DataLossErrorValue(state, from, marks));
  }

  uint32_t AddPartition(const std::string& topic, int32_t partition) {
    std::string key = kafka::PartitionKey(topic, partition);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    uint32_t index = static_cast<uint32_t>(partitions_.size());
    partitions_.push_back({topic, partition, key, 0, 0});
    index_.emplace(std::move(key), index);
    return index;
  }

  Result<uint32_t> IndexOf(const std::string& key) {
    if (auto it = index_.find(key); it != index_.end()) return it->second;
    auto parsed = kafka::ParsePartitionKey(key);
    if (!parsed) return MakeError(ErrorCode::kCorruption, "'{}' is not a Kafka partition", key);
    return AddPartition(parsed->first, parsed->second);
  }

  // Brings partitions_ / present_ up to date with the broker's metadata.
  Status RefreshPartitions() {
    present_.clear();
    present_set_.clear();
    if (options_.mode == Mode::kAssign) {
      // Explicit partitions are always part of the query; watermarks tell whether they exist.
      auto metadata = kafka::FetchMetadata(consumer_.get(), nullptr, request_timeout_ms_);
      if (!metadata) return tl::unexpected(metadata.error().Wrap("kafka source"));
      SetReachable(true, "");
      std::set<std::string> existing;
      for (int t = 0; t < (*metadata)->topic_cnt; ++t) {
        const rd_kafka_metadata_topic_t& topic = (*metadata)->topics[t];
        if (options_.assign.count(topic.topic)) DRIFTD_TRY(CheckTopic(topic));
        for (int p = 0; p < topic.partition_cnt; ++p) {
          existing.insert(kafka::PartitionKey(topic.topic, topic.partitions[p].id));
        }
      }
      for (const auto& [topic, partitions] : options_.assign) {
        for (int32_t partition : partitions) {
          uint32_t index = AddPartition(topic, partition);
          if (existing.count(partitions_[index].key)) Mark(index);
        }
      }
      return Ok();
    }
    auto metadata = kafka::FetchMetadata(consumer_.get(), nullptr, request_timeout_ms_);
    if (!metadata) return tl::unexpected(metadata.error().Wrap("kafka source"));
    SetReachable(true, "");
    std::vector<std::pair<std::string, int32_t>> found;
    for (int t = 0; t < (*metadata)->topic_cnt; ++t) {
      const rd_kafka_metadata_topic_t& topic = (*metadata)->topics[t];
      std::string name = topic.topic;
      bool wanted = false;
      if (group_ && name == group_->repartition_topic()) {
        wanted = true;  // the tasks' input
      } else if (options_.mode == Mode::kSubscribe) {
        wanted = std::find(options_.topics.begin(), options_.topics.end(), name) !=
                 options_.topics.end();
      } else {
        wanted = name.rfind("__", 0) != 0 && std::regex_match(name, pattern_);
        if (name.rfind("driftd-", 0) == 0 && name.ends_with("-changelog")) wanted = false;
      }
      if (!wanted) continue;
      DRIFTD_TRY(CheckTopic(topic));
      if (topic.err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
      for (int p = 0; p < topic.partition_cnt; ++p) found.push_back({name, topic.partitions[p].id});
    }
    // Deterministic order: the index of a partition is its position in partitions_.
    std::sort(found.begin(), found.end());
    for (const auto& [topic, partition] : found) Mark(AddPartition(topic, partition));
    return Ok();
  }

  // A topic that exists but whose metadata is momentarily incomplete (no leader during an
  // election or creation) must not look deleted: that would be reported as data loss.
  static Status CheckTopic(const rd_kafka_metadata_topic_t& topic) {
    rd_kafka_resp_err_t err = topic.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                                  ? RD_KAFKA_RESP_ERR_NO_ERROR
                                  : topic.err;
    for (int p = 0; !err && p < topic.partition_cnt; ++p) {
      if (topic.partitions[p].err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE) {
        err = topic.partitions[p].err;
      }
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return MakeError(ErrorCode::kExternal, "kafka source: metadata of topic {}: {}", topic.topic,
                       rd_kafka_err2str(err));
    }
    return Ok();
  }

  void Mark(uint32_t index) {
    if (present_set_.insert(index).second) present_.push_back(index);
  }

  Result<Watermarks> QueryWatermarks(PartitionState& state) {
    Watermarks marks;
    rd_kafka_resp_err_t err =
        rd_kafka_query_watermark_offsets(consumer_.get(), state.topic.c_str(), state.partition,
                                         &marks.low, &marks.high, request_timeout_ms_);
    if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
        err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
      // librdkafka answers from its metadata cache, which a broker outage or restart can leave
      // without the partition for a moment: only the broker's own metadata says it is gone.
      auto listed = ListsPartition(state);
      if (!listed) return tl::unexpected(listed.error());
      if (!*listed) {
        marks.gone = true;
        return marks;
      }
      return MakeError(ErrorCode::kExternal,
                       "kafka source: offsets of {}: {} (the broker lists it: not gone)",
                       Name(state), rd_kafka_err2str(err));
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return MakeError(ErrorCode::kExternal, "kafka source: offsets of {}: {}", Name(state),
                       rd_kafka_err2str(err));
    }
    state.low = marks.low;
    state.high = marks.high;
    return marks;
  }

  // Whether the broker's metadata, asked now, lists the partition. kExternal when the broker
  // cannot be asked or does not know yet (a leader being elected).
  Result<bool> ListsPartition(const PartitionState& state) {
    auto metadata = kafka::FetchMetadata(consumer_.get(), state.topic.c_str(), request_timeout_ms_);
    if (!metadata) return tl::unexpected(metadata.error().Wrap("kafka source"));
    for (int t = 0; t < (*metadata)->topic_cnt; ++t) {
      const rd_kafka_metadata_topic_t& topic = (*metadata)->topics[t];
      if (state.topic != topic.topic) continue;
      if (topic.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) return false;
      if (topic.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return MakeError(ErrorCode::kExternal, "kafka source: metadata of topic {}: {}",
                         state.topic, rd_kafka_err2str(topic.err));
      }
      for (int p = 0; p < topic.partition_cnt; ++p) {
        if (topic.partitions[p].id == state.partition) return true;
      }
      return false;
    }
    return false;
  }

  // The watermarks of partitions_[i] for each i of `indexes`, in that order. Two ListOffsets
  // requests for all of them (the earliest and the latest offsets; librdkafka sends one per
  // leader), not two per partition: a batch asks them of every partition, and a thread per
  // partition made an idle query start and end dozens of threads a second. A partition the
  // batched request could not answer is asked on its own, as QueryWatermarks(Waiting) does.
  std::vector<Result<Watermarks>> QueryAllWatermarks(const std::vector<uint32_t>& indexes,
                                                     bool waiting) {
    std::vector<std::optional<Watermarks>> found(indexes.size());
    if (indexes.size() > 1) {
      auto ask = [&](int64_t which, bool high) {
        kafka::PartitionList list{
            rd_kafka_topic_partition_list_new(static_cast<int>(indexes.size()))};
        for (uint32_t i : indexes) {
          rd_kafka_topic_partition_list_add(list.get(), partitions_[i].topic.c_str(),
                                            partitions_[i].partition)
              ->offset = which;
        }
        const rd_kafka_resp_err_t err =
            rd_kafka_offsets_for_times(consumer_.get(), list.get(), request_timeout_ms_);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
        for (size_t k = 0; k < indexes.size(); ++k) {
          const rd_kafka_topic_partition_t& element = list->elems[k];
          if (element.err != RD_KAFKA_RESP_ERR_NO_ERROR || element.offset < 0) {
            found[k].reset();
            continue;
          }
          if (!high) {
            found[k] = Watermarks{element.offset, 0, false};
          } else if (found[k]) {
            found[k]->high = element.offset;
          }
        }
        return true;
      };
      if (!ask(RD_KAFKA_OFFSET_BEGINNING, false) || !ask(RD_KAFKA_OFFSET_END, true)) {
        for (auto& marks : found) marks.reset();
      }
    }
    std::vector<Result<Watermarks>> marks;
    marks.reserve(indexes.size());
    for (size_t k = 0; k < indexes.size(); ++k) {
      PartitionState& state = partitions_[indexes[k]];
      if (found[k] && found[k]->high >= found[k]->low) {
        state.low = found[k]->low;
        state.high = found[k]->high;
        marks.push_back(*found[k]);
      } else {
        marks.push_back(waiting ? QueryWatermarksWaiting(state) : QueryWatermarks(state));
      }
    }
    return marks;
  }

  // For a range being read: a broker that is away (or a partition whose leader is moving) is
  // waited for, up to kafkaConsumer.pollTimeoutMs, as the records themselves are.
  Result<Watermarks> QueryWatermarksWaiting(PartitionState& state) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.poll_timeout_ms);
    for (;;) {
      auto marks = QueryWatermarks(state);
      if (marks || marks.error().code() != ErrorCode::kExternal ||
          std::chrono::steady_clock::now() + kRetryPause >= deadline) {
        return marks;
      }
      Log()->debug("{}; retrying", marks.error().message());
      std::this_thread::sleep_for(kRetryPause);
    }
  }

  KafkaSourceOptions options_;
  const int request_timeout_ms_;
  std::regex pattern_;
  Handle consumer_;
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
  /// The source partitions at the last successful metadata request (scaleOut).
  std::vector<std::string> source_partitions_seen_;
  /// Reads the changelog (scaleOut; created on first use).
  Handle changelog_reader_;
  /// The partitions the consumer has assigned, by partition index (stable addresses).
  std::map<uint32_t, Feed> feeds_;
  /// Partition queues of feeds that ended, kept until the client closes (DropFeeds).
  std::vector<QueuePtr> retired_queues_;
};

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
  rd_kafka_assign(reader, nullptr);
  if (!status) return tl::unexpected(status.error());
  return high;
}

KafkaReader::KafkaReader(KafkaSource& source, std::vector<Range> ranges, int64_t lost)
    : source_(source), ranges_(std::move(ranges)), remaining_(ranges_.size()), lost_(lost) {
  messages_.resize(kConsumeBatch);
  last_progress_ = std::chrono::steady_clock::now();
}

KafkaReader::~KafkaReader() {
  // Partitions that reached the end of their log stop fetching until a batch needs them; the
  // others go on prefetching the next batch.
  std::vector<Feed*> caught_up;
  for (const Range& range : ranges_) {
    if (range.done && range.at_log_end) caught_up.push_back(range.feed);
  }
  source_.PauseFeeds(caught_up);
}

void KafkaReader::Finish(Range& range) {
  if (range.done) return;
  range.done = true;
  --remaining_;
  if (range.feed->position != kUnknownPosition) {
    range.feed->position = std::max(range.feed->position, range.end);
  }
}

// The record's headers into the chunk, for the `headers` metadata column.
void AppendHeaders(rd_kafka_message_t& message, InputChunk& chunk) {
  rd_kafka_headers_t* headers = nullptr;  // owned by the message
  if (rd_kafka_message_headers(&message, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return;
  const char* name = nullptr;
  const void* value = nullptr;
  size_t size = 0;
  for (size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &value, &size) ==
                     RD_KAFKA_RESP_ERR_NO_ERROR;
       ++i) {
    chunk.AddHeader(name, static_cast<const char*>(value), size);
  }
}

Status KafkaReader::Take(Range& range, MessagePtr message, InputChunk& chunk) {
  Feed& feed = *range.feed;
  if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    // Errors (end of partition included) concern the range being read, not the next one.
    return range.done ? Ok() : HandleError(range, *message);
  }
  if (message->offset < range.next) return Ok();  // before the range: read already
  if (range.done || message->offset >= range.end) {
    // The next range's first records: kept, so that its read need not fetch them again.
    Finish(range);
    feed.held.push_back(std::move(message));
    return Ok();
  }
  rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
  int64_t timestamp_ms = rd_kafka_message_timestamp(message.get(), &type);
  int64_t timestamp_us = type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || timestamp_ms < 0
                             ? INT64_MIN
                             : timestamp_ms * 1000;
  chunk.Append(std::string_view(static_cast<const char*>(message->payload), message->len),
               RecordPosition{range.index, message->offset}, timestamp_us);
  chunk.SetTimestampType(type == RD_KAFKA_TIMESTAMP_CREATE_TIME       ? 0
                         : type == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? 1
                                                                      : -1);
  if (source_.options_.read_key && message->key) {
    chunk.SetKey(std::string_view(static_cast<const char*>(message->key), message->key_len));
  }
  if (source_.options_.read_headers) AppendHeaders(*message, chunk);
  range.next = message->offset + 1;
  feed.position = range.next;
  if (range.next >= range.end) Finish(range);
  return Ok();
}

Status KafkaReader::SkipTo(Range& range, int64_t offset) {
  Feed& feed = *range.feed;
  lost_ += std::min(offset, range.end) - range.next;
  range.next = offset;
  feed.held.clear();
  if (range.next >= range.end) {
    // Where the fetcher stands now is unknown: the next range of this partition seeks first.
    feed.position = kUnknownPosition;
    Finish(range);
    return Ok();
  }
  PartitionList list{rd_kafka_topic_partition_list_new(1)};
  rd_kafka_topic_partition_list_add(list.get(), range.topic.c_str(), range.partition)->offset =
      offset;
  ErrorPtr error{
      rd_kafka_seek_partitions(source_.consumer_.get(), list.get(), source_.request_timeout_ms_)};
  if (!error && list->elems[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    error.reset(rd_kafka_error_new(list->elems[0].err, "%s", rd_kafka_err2str(list->elems[0].err)));
  }
  if (error) {
    feed.position = kUnknownPosition;
    return MakeError(ErrorCode::kExternal, "kafka source: seeking {} partition {}: {}", range.topic,
                     range.partition, kafka::Describe(error.get()));
  }
  feed.position = offset;
  return Ok();
}

Status KafkaReader::HandleError(Range& range, const rd_kafka_message_t& message) {
  switch (message.err) {
    case RD_KAFKA_RESP_ERR__PARTITION_EOF:
      // Everything up to the end of the log (or the last stable offset) was delivered; offsets
      // not seen were transaction markers or aborted records.
      if (message.offset >= range.end) Finish(range);
      return Ok();
    case RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE:
    case RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC: {
      if (range.done) return Ok();
      PartitionState& state = source_.partitions_[range.index];
      auto marks = source_.QueryWatermarksWaiting(state);
      if (!marks) return tl::unexpected(marks.error());
      if (marks->gone) {
        if (source_.options_.fail_on_data_loss) {
          return MakeError(ErrorCode::kDataLoss,
                           "{} was deleted while offsets {} to {} were being read. Set "
                           "failOnDataLoss=false to continue without them",
                           KafkaSource::Name(state), range.next, range.end - 1);
        }
        return SkipTo(range, range.end);
      }
      if (range.next >= marks->low) {
        // Nothing was deleted below us: a transient reset; read on from where we are.
        return SkipTo(range, range.next);
      }
      if (source_.options_.fail_on_data_loss) {
        return source_.DataLossError(state, range.next, *marks);
      }
      return SkipTo(range, marks->low);
    }
    default:
      // Transport and broker errors are retried by librdkafka; the poll timeout bounds them.
      Log()->debug("kafka source: {}", rd_kafka_message_errstr(&message));
      return Ok();
  }
}

Status KafkaReader::ServeConsumerQueue() {
  ssize_t count =
      rd_kafka_consume_batch_queue(source_.queue_.get(), 0, messages_.data(), messages_.size());
  Status status = Ok();
  for (ssize_t i = 0; i < count; ++i) {
    MessagePtr message{messages_[i]};
    if (!status) continue;
    Range* range = nullptr;
    if (message->rkt) {
      const char* topic = rd_kafka_topic_name(message->rkt);
      for (Range& candidate : ranges_) {
        if (candidate.partition == message->partition && candidate.topic == topic) {
          range = &candidate;
          break;
        }
      }
    }
    if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) continue;  // not expected here
    if (range) {
      status = HandleError(*range, *message);
    } else {
      Log()->debug("kafka source: {}", rd_kafka_message_errstr(message.get()));
    }
  }
  return status;
}

Result<bool> KafkaReader::Next(InputChunk& chunk, size_t max_bytes) {
  const auto timeout = std::chrono::milliseconds(source_.options_.poll_timeout_ms);
  while (remaining_ > 0 && chunk.byte_size() < max_bytes) {
    while (current_ < ranges_.size() && ranges_[current_].done) ++current_;
    if (current_ >= ranges_.size()) break;
    Range& range = ranges_[current_];
    Feed& feed = *range.feed;
    Status status = Ok();
    ssize_t count = 0;
    if (!feed.held.empty()) {
      // Taken from the queue by the previous batch: this range's first messages.
      while (!feed.held.empty() && !range.done && status) {
        if (feed.held.front()->offset >= range.end) {
          Finish(range);  // all of it belongs to a later range
          break;
        }
        MessagePtr message = std::move(feed.held.front());
        feed.held.pop_front();
        status = Take(range, std::move(message), chunk);
        ++count;
      }
    } else {
      // The call returns once it holds `wanted` messages or the wait is over: asking for no
      // more than the range lacks keeps the end of a range at the end of the log from waiting.
      const size_t wanted = static_cast<size_t>(std::clamp<int64_t>(
          range.end - range.next, 1, static_cast<int64_t>(messages_.size())));
      count = rd_kafka_consume_batch_queue(feed.queue.get(), kConsumeWaitMs, messages_.data(),
                                           wanted);
      if (count < 0) {
        return MakeError(ErrorCode::kExternal, "kafka source: consuming {} partition {}: {}",
                         range.topic, range.partition,
                         rd_kafka_err2str(rd_kafka_last_error()));
      }
      // Every message taken must be handled (and destroyed) even after an error.
      for (ssize_t i = 0; i < count; ++i) {
        MessagePtr message{messages_[i]};
        if (!status) continue;
        status = Take(range, std::move(message), chunk);
      }
      if (!status) feed.position = kUnknownPosition;  // messages taken were not handed out
    }
    if (!status) return tl::unexpected(status.error());
    if (count > 0) {
      last_progress_ = std::chrono::steady_clock::now();
      continue;
    }
    DRIFTD_TRY(ServeConsumerQueue());
    if (!source_.ready_.load()) {
      // The brokers are away: not a delay of the records, so it does not count against
      // pollTimeoutMs. Hand back what there is (maybe nothing) so that the executor, between
      // chunks, can notice a stop request.
      last_progress_ = std::chrono::steady_clock::now();
      break;
    }
    if (std::chrono::steady_clock::now() - last_progress_ > timeout) {
      return MakeError(ErrorCode::kExternal,
                       "kafka source: no records from topic {} partition {} at offset {} "
                       "(planned up to {}) within kafkaConsumer.pollTimeoutMs={}",
                       range.topic, range.partition, range.next, range.end,
                       source_.options_.poll_timeout_ms);
    }
  }
  chunk.Seal();
  return remaining_ > 0;
}

}  // namespace

std::shared_ptr<kafka::KafkaGroup> kafka::GroupOf(Source& source) {
  auto* kafka_source = dynamic_cast<KafkaSource*>(&source);
  return kafka_source ? kafka_source->kafka_group() : nullptr;
}

ConnectorDecl KafkaSourceDecl() {
  ConnectorDecl decl;
  decl.format = "kafka";
  decl.role = ConnectorRole::kSource;
  decl.doc =
      "Reads JSON records from Kafka topics, like Spark's Kafka source. Batches are offset "
      "ranges read by explicit partition assignment, so replays are exact. Consumer-group "
      "offsets are committed after each batch (inside the sink's transaction when the pipeline "
      "also writes to Kafka), so standard lag tools see the progress.";
  decl.passthrough_prefix = "kafka.";
  decl.options = {
      OptionDecl{"subscribe", OptionType::kString, "", "Comma-separated topics to read."}
          .Identity(),
      OptionDecl{"subscribePattern", OptionType::kString, "",
                 "Regular expression; every topic whose whole name matches is read (topics "
                 "created later too)."}
          .Identity(),
      OptionDecl{"assign", OptionType::kJson, "",
                 "Explicit partitions, as JSON: {\"topic\":[0,1]}. Exactly one of subscribe, "
                 "subscribePattern and assign is required."}
          .Identity(),
      {"startingOffsets", OptionType::kJson, "latest",
       "Where a new query starts: earliest, latest, or JSON per partition "
       "{\"topic\":{\"0\":23,\"1\":-2}} (-2 earliest, -1 latest). Ignored when resuming from a "
       "checkpoint; partitions discovered later start at earliest."},
      OptionDecl{"maxOffsetsPerTrigger", OptionType::kInt, "",
                 "Upper bound on records per batch, split across partitions in proportion to "
                 "their lag (unset: no limit)."}
          .AtLeast(1),
      {"failOnDataLoss", OptionType::kBool, "true",
       "Stop when offsets to read are gone (retention, deleted records or topics). false: skip "
       "them and count them as lost."},
      OptionDecl{"kafkaConsumer.pollTimeoutMs", OptionType::kInt, "120000",
                 "How long reading a planned range waits for its records before failing, "
                 "milliseconds (it also bounds each metadata and offset request, to at most "
                 "10 s)."}
          .AtLeast(1),
      {"kafka.bootstrap.servers", OptionType::kString, "", "Brokers to connect to, host:port,...",
       true},
  };
  decl.traits = {.topic_partitions = true,
                 .unordered_partitions = true,
                 .whole_messages = true,
                 .group_shared = true};
  BindSource<KafkaSourceOptions>(
      decl, &Bind, [](const PipelineSpec&, KafkaSourceOptions options) {
        return Result<std::unique_ptr<Source>>(std::make_unique<KafkaSource>(std::move(options)));
      });
  return decl;
}

Result<std::unique_ptr<Source>> CreateKafkaSource(const PipelineSpec& pipeline) {
  static const ConnectorDecl decl = KafkaSourceDecl();
  return decl.create_source(pipeline);
}

}  // namespace driftd
