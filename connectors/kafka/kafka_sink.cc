// The `kafka` sink: every Kafka sink of a pipeline shares one transactional producer, so a
// batch's rows reach all their topics in one transaction or not at all. The transaction also
// carries a progress record {"pipeline":name,"checkpoint":id,"batchId":N,"writer":W} (keyed by
// the pipeline name, on a compacted progress topic; W is a random id of the sink object) and,
// when the source is Kafka, the source's end offsets for its consumer group. A read_committed
// reader of the progress topic therefore knows exactly which batches were delivered, which is
// how recovery decides whether to deliver an outbox entry again.
//
// Batch ids are only unique within one checkpoint: an operator who deletes the checkpoint
// directory starts the pipeline over at batch 0 under the same transactional.id. The newest
// progress record therefore counts only if it names this checkpoint's id
// (CheckpointMetadata::checkpoint_id); a record of another checkpoint, or one written before
// records carried an id (no "checkpoint" field), means that nothing of this checkpoint was
// delivered yet. (A consequence for an upgrade from such a version: a batch whose delivery had
// finished but was not yet marked in the outbox when the old version stopped is delivered once
// more.)
//
// librdkafka sorts transactional errors into three kinds, and each takes its own path here:
// retriable (the call is repeated), abortable (the transaction is aborted and the batch sent
// again) and fatal (the producer is dead). A fatal error that is fencing (a newer instance with
// the same transactional.id took over) ends the query with ErrorCode::kUnrecoverable:
// re-initialising would fence the instance that took over. Any other fatal error met while
// delivering (INVALID_TXN_STATE after an outage longer than transaction.timeout.ms, say) costs
// only the producer: a new one with the same transactional.id replaces it (its
// init_transactions aborts what the old one left open), the progress topic says whether the
// batch was committed, and if not it is delivered again. Before that init_transactions the
// progress topic is read once: a newer record of this checkpoint written by another writer means
// that another instance took over and the broker's answer was fencing in another form (it may
// say INVALID_TXN_STATE to a producer fenced while its transaction was open). Then the query
// ends as fenced: a new producer would fence the instance that took over. A fatal error while
// opening (a transaction timeout the broker refuses, say) still ends the query.
//
// Test hook: DRIFTD_KAFKA_SINK_FAULT=before_commit (or after_commit) makes the process kill
// itself with SIGKILL inside Deliver, just before (after) commit_transaction; crash tests use it
// to stop a delivery half-way. DRIFTD_KAFKA_SINK_FAULT=fatal raises a fabricated fatal producer
// error (rd_kafka_test_fatal_error) that says the producer was fenced just before
// commit_transaction; fatal_txn_state raises a fatal INVALID_TXN_STATE there instead, once per
// process (it models the broker aborting a transaction that outlived its timeout);
// fence_as_txn_state takes a real fencing error for a non-fencing one (as when the broker answers
// a fenced producer with INVALID_TXN_STATE), so that the takeover check above decides;
// commit_gives_up fails one commit_transaction as a call whose retries ran out does, leaving the
// transaction open (once per process);
// stall_in_commit holds the first scaled-out commit for DRIFTD_KAFKA_SINK_STALL_MS (default 25 s)
// before it goes on. A suffix "@N" limits the fault to batches with id >= N ("fatal@3").
#include "connectors/kafka/kafka_sink.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <charconv>
#include <deque>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <simdjson.h>

#include "connectors/connector_factories.h"
#include "connectors/kafka/kafka_common.h"
#include "connectors/kafka/kafka_group.h"
#include "connectors/kafka/progress_reader.h"
#include "engine/json_writer.h"
#include "engine/log.h"
#include "engine/random_id.h"
#include "engine/row_shape.h"
#include "engine/value_decoder.h"

namespace driftd {

namespace {

using kafka::ErrorPtr;
using kafka::GroupMetadataPtr;
using kafka::Handle;
using kafka::Log;
using kafka::MessagePtr;
using kafka::PartitionList;
using kafka::ProgressMark;

// Whole-batch attempts after abortable transaction errors before Deliver gives up.
constexpr int kMaxBatchAttempts = 5;
// Producers replaced after non-fencing fatal errors within one Deliver before it gives up.
constexpr int kMaxReplacements = 3;
// Attempts of one transactional call that failed with a retriable error.
constexpr int kMaxCallAttempts = 10;
// The longest a stop waits for init_transactions while the brokers do not answer.
constexpr int64_t kConnectSliceMs = 500;
constexpr int kRequestTimeoutMs = 10'000;
// Producers lost to stalls in five minutes before a scaled-out query stops (RejoinAfterStall).
constexpr size_t kMaxStallsInFiveMinutes = 5;
// How long Open waits for the topics' size limits (MeasureLimits).
constexpr int kTopicLimitWaitMs = 500;
// librdkafka's message.max.bytes when it is not set.
constexpr size_t kDefaultMessageMaxBytes = 1'000'000;
// What a record batch of one record adds to its key and value: the batch header (61 bytes),
// the record's varints and attributes, with room to spare.
constexpr size_t kRecordOverhead = 128;
struct Target {
  std::string sink_name;
  std::string topic;
  StreamKind stream = StreamKind::kStats;
  OutputMode mode = OutputMode::kAppend;
  /// Turns each row into the record's value (valueFormat: json, the row as it is, or avro).
  std::unique_ptr<ValueEncoder> encoder;
  /// The longest row (JSON and key bytes, OverRowLimit) a record of the topic can carry, and
  /// what sets it (MeasureLimits). An encoded value is never longer than its JSON row.
  size_t max_row_bytes = SIZE_MAX;
  std::string limit_why;
  /// keyColumn, when the record's key is read from the row (RowKey); empty: the key the
  /// stream gives the row (the model, or a stats row's first group column).
  std::string key_column;
};

// The record key a row's member `column` gives: a string's value, a number's or a boolean's
// JSON text; empty (no key) when the member is null or absent. `padded` is scratch space.
std::string RowKey(simdjson::ondemand::parser& parser, std::string& padded, std::string_view row,
                   std::string_view column) {
  padded.assign(row);
  padded.resize(row.size() + simdjson::SIMDJSON_PADDING, ' ');
  simdjson::ondemand::document doc;
  if (parser.iterate(padded.data(), row.size(), padded.size()).get(doc) != simdjson::SUCCESS) {
    return {};
  }
  simdjson::ondemand::value value;
  if (doc.find_field_unordered(column).get(value) != simdjson::SUCCESS) return {};
  simdjson::ondemand::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return {};
  switch (type) {
    case simdjson::ondemand::json_type::string: {
      std::string_view text;
      if (value.get_string().get(text) != simdjson::SUCCESS) return {};
      return std::string(text);
    }
    case simdjson::ondemand::json_type::number:
    case simdjson::ondemand::json_type::boolean: {
      std::string_view token = value.raw_json_token();
      while (!token.empty() && (token.back() == ' ' || token.back() == '\n')) {
        token.remove_suffix(1);
      }
      return std::string(token);
    }
    default:
      return {};
  }
}

struct KafkaSinkOptions {
  std::string pipeline_name;
  std::vector<Target> targets;
  /// Compacted topic holding the pipeline's last delivered batch. Default:
  /// DefaultProgressTopic(pipeline name).
  std::string progress_topic;
  /// librdkafka producer settings, merged from every sink's kafka.* options.
  std::map<std::string, std::string> client;
  std::string transactional_id;
  /// Consumer group whose offsets the transaction commits; empty when the source is not Kafka.
  std::string source_group_id;
  /// How long one transactional call may take. Default: transaction.timeout.ms or 60 s.
  int timeout_ms = 60'000;
  /// Test hook, see the top of this file: "", "before_commit", "after_commit", "fatal" or
  /// "fatal_txn_state".
  std::string fault;
  /// The fault applies to batches with at least this id. Default: 0.
  int64_t fault_from_batch = 0;
  /// stall_in_commit: how long (DRIFTD_KAFKA_SINK_STALL_MS). Default: 25 s.
  int64_t stall_ms = 25'000;
  /// scaleOut: the group whose metadata goes into each transaction, with the internal topics'
  /// records; no progress topic (the group's committed offsets say what was delivered).
  std::shared_ptr<kafka::KafkaGroup> group;
};

// How a failed transactional call is to be handled (librdkafka's classification).
enum class Outcome { kOk, kAbortable, kFailed };

class KafkaSink final : public Sink {
 public:
  explicit KafkaSink(KafkaSinkOptions options) : options_(std::move(options)) {}

  ~KafkaSink() override { IgnoreError(Close()); }

  const std::string& name() const override { return name_; }

  void SetCheckpointId(const std::string& checkpoint_id, int64_t last_committed_batch) override {
    checkpoint_id_ = checkpoint_id;
    last_committed_batch_ = last_committed_batch;
  }

  // A stop while Open waits for the brokers ends the wait within a slice (kConnectSliceMs);
  // a delivery under way is left to finish.
  void Cancel() override { cancelled_.store(true); }

  Status Open() override {
    if (producer_) return Ok();
    if (fatal_) return tl::unexpected(*fatal_);
    connecting_ = true;
    Status opened = Connect();
    connecting_ = false;
    return opened;
  }

  Status Connect() {
    auto conf = kafka::MakeConf(ProducerSettings());
    if (!conf) return tl::unexpected(conf.error().Wrap("kafka sink"));
    rd_kafka_conf_set_opaque(conf->get(), this);
    rd_kafka_conf_set_error_cb(conf->get(), &KafkaSink::ErrorCallback);
    if (options_.group) rd_kafka_conf_set_dr_msg_cb(conf->get(), &KafkaSink::DeliveryCallback);
    auto client = kafka::MakeClient(RD_KAFKA_PRODUCER, std::move(*conf));
    if (!client) return tl::unexpected(client.error().Wrap("kafka sink"));
    producer_ = std::move(*client);
    if (Status reached = AwaitCluster(); !reached) return Fail(reached);

    // A checkpoint behind what was already committed is a copy or an old backup of one that is
    // still running, or ran on: refuse it before fencing the instance that may be running
    // (committed records are final whatever the transactions still open).
    if (options_.group) return OpenScaledOut();
    auto progress_listed = TopicListed(options_.progress_topic);
    if (!progress_listed) return Fail(tl::unexpected(progress_listed.error().Wrap("kafka sink")));
    // Only when the query opens: a producer replaced mid-run follows batches this process
    // committed itself.
    if (!stale_checked_ && *progress_listed && !checkpoint_id_.empty()) {
      auto latest = ReadLatestProgress(/*settle=*/false);
      if (!latest) return Fail(tl::unexpected(latest.error().Wrap("kafka sink")));
      const int64_t committed = latest->batch_id;
      if (committed > last_committed_batch_) {
        const Error stale(
            ErrorCode::kIncompatible,
            fmt::format("kafka sink: transactional.id {} has committed batch {} of this "
                        "checkpoint, whose last committed batch is {}: the checkpoint is a copy "
                        "or an older backup of one that kept running, and starting from it "
                        "would deliver batches {} to {} again. Run from the current checkpoint, "
                        "or start over with a new checkpointLocation",
                        options_.transactional_id, committed, last_committed_batch_,
                        last_committed_batch_ + 1, committed));
        producer_.reset();
        return tl::unexpected(stale);
      }
    } else if (replacing_) {
      // The same question for a producer replaced mid-run: has another instance run past us?
      if (Status ours = RefuseIfTakenOver(replacing_batch_); !ours) return Fail(ours);
    }
    stale_checked_ = true;

    // Fences an older producer with our transactional.id and aborts its open transaction, so
    // what the progress topic says afterwards is final.
    Status init = Call("init_transactions", [&] { return InitTransactions(); }).second;
    if (!init) return Fail(init);

    for (const Target& target : options_.targets) {
      auto metadata =
          kafka::FetchMetadata(producer_.get(), target.topic.c_str(), kRequestTimeoutMs);
      if (!metadata) return Fail(tl::unexpected(metadata.error().Wrap("kafka sink")));
      if ((*metadata)->topic_cnt != 1 || (*metadata)->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        // kExternal: it may exist soon (a service directory restarts the query with backoff).
        return Fail(MakeError(ErrorCode::kExternal,
                              "kafka sink '{}': topic {} does not exist; create it "
                              "(run DIR tries the query again with backoff)",
                              target.sink_name, target.topic));
      }
    }
    if (Status opened = OpenEncoders(); !opened) return Fail(opened);
    MeasureLimits();
    // An existing progress topic is used as it is: creating topics needs a permission that a
    // locked-down cluster may not grant, and an API that librdkafka's mock cluster (the demo's
    // embedded stand-in) lacks.
    auto listed = TopicListed(options_.progress_topic);
    if (!listed) return Fail(tl::unexpected(listed.error().Wrap("kafka sink")));
    if (!*listed) {
      Status created = kafka::CreateTopic(producer_.get(), options_.progress_topic, 1,
                                          {{"cleanup.policy", "compact"}}, kRequestTimeoutMs);
      if (!created) return Fail(tl::unexpected(created.error().Wrap("kafka sink")));
    }

    auto latest = ReadLatestProgress();
    if (!latest) return Fail(tl::unexpected(latest.error().Wrap("kafka sink")));
    if (replacing_) {
      // Another instance may have committed between the check above and our
      // init_transactions (which fenced it): its batches are not ours to count as delivered.
      if (Status ours = TakenOverBy(*latest, replacing_batch_); !ours) return Fail(ours);
    }
    delivered_ = latest->batch_id;
    Log()->info("kafka sink: transactional.id={} checkpoint {}: last delivered batch {}",
                options_.transactional_id, checkpoint_id_, delivered_);
    return Ok();
  }

  Result<bool> IsDelivered(int64_t batch_id) override {
    if (!producer_) return MakeError(ErrorCode::kInternal, "kafka sink used before Open");
    // Scaled out there is no outbox: a batch that did not commit is computed again.
    if (options_.group) return false;
    return delivered_ >= batch_id;
  }

  Result<std::optional<int64_t>> LastDelivered() override {
    if (!producer_) return MakeError(ErrorCode::kInternal, "kafka sink used before Open");
    return delivered_ >= 0 ? std::optional<int64_t>(delivered_) : std::nullopt;
  }

  Status Deliver(const BatchOutput& output) override {
    if (fatal_) return tl::unexpected(*fatal_);
    // Scaled out, a producer lost to a stall is replaced there.
    if (options_.group) return DeliverScaledOut(output);
    if (!producer_) {
      if (!replacing_) return MakeError(ErrorCode::kInternal, "kafka sink used before Open");
      // A producer replaced after a fatal error whose successor could not start (the brokers
      // may still be away): try again; the executor's retries pace this.
      DRIFTD_TRY(Replace(output.batch_id));
      if (delivered_ >= output.batch_id) return Ok();
    }
    // No skipping of batch ids at or below delivered_ otherwise: the executor asks IsDelivered
    // on recovery, and a sink given no checkpoint id may see batch ids start over.
    // The producer's event queue holds its error events; serving it here (and not only in
    // Close) logs them while they are news.
    rd_kafka_poll(producer_.get(), 0);
    int replacements = 0;
    for (int attempt = 1;; ++attempt) {
      auto [outcome, status] = DeliverOnce(output);
      rd_kafka_poll(producer_.get(), 0);
      if (outcome == Outcome::kOk) {
        delivered_ = output.batch_id;
        return Ok();
      }
      if (outcome == Outcome::kFailed) {
        if (!status && status.error().code() == ErrorCode::kUnrecoverable) {
          if (!Fenced() && ++replacements <= kMaxReplacements) {
            Log()->warn(
                "kafka sink: batch {}: {}; not fenced, so the producer is replaced and the "
                "batch delivered again unless it was committed",
                output.batch_id, status.error().message());
            replacing_ = true;
            DRIFTD_TRY(Replace(output.batch_id));
            if (delivered_ >= output.batch_id) return Ok();
            continue;
          }
          fatal_ = status.error();
        } else if (!status && status.error().code() != ErrorCode::kConfig) {
          // A call that gave up (its retries spent in an outage) may leave the transaction
          // open, and then begin_transaction refuses every later attempt; a commit that timed
          // out may even have landed. A new producer settles both: its init_transactions ends
          // what is open, and the progress topic then says whether the batch was committed.
          DropForReplacement();
        }
        return status;
      }
      if (attempt >= kMaxBatchAttempts) {
        return tl::unexpected(status.error().Wrap(
            fmt::format("kafka sink: batch {} aborted {} times", output.batch_id, attempt)));
      }
      Log()->warn("kafka sink: batch {} aborted, retrying: {}", output.batch_id,
                  status.error().message());
    }
  }

  bool CommitsScaledOutBatches() const override { return options_.group != nullptr; }

  std::vector<RowLimit> RowLimits() override {
    TakeTopicLimits(0);
    std::vector<RowLimit> limits;
    for (const Target& target : options_.targets) {
      if (target.max_row_bytes == SIZE_MAX) continue;
      limits.push_back(
          {target.sink_name, target.stream, target.mode, target.max_row_bytes, target.limit_why});
    }
    return limits;
  }

  Status Close() override {
    if (!producer_) return Ok();
    if (fatal_) {
      // A dead producer delivers nothing more; waiting for its queue would only delay the exit.
      rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    } else if (rd_kafka_flush(producer_.get(), kRequestTimeoutMs) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      Log()->warn("kafka sink: closing: {} records or requests still unsent after {} ms",
                  rd_kafka_outq_len(producer_.get()), kRequestTimeoutMs);
    }
    producer_.reset();
    return Ok();
  }

 private:
  std::map<std::string, std::string> ProducerSettings() const {
    std::map<std::string, std::string> settings = {
        {"client.id", "driftd-" + options_.pipeline_name},
        {"linger.ms", "5"},
    };
    for (const auto& [name, value] : options_.client) settings[name] = value;
    settings["transactional.id"] = options_.transactional_id;
    settings["enable.idempotence"] = "true";
    settings["acks"] = "all";
    if (options_.group && !options_.client.count("transaction.timeout.ms")) {
      // A process that dies mid-transaction holds back every reader of the topics it wrote
      // until the transaction times out (or its successor under the same instance aborts it).
      settings["transaction.timeout.ms"] = "10000";
    }
    if (options_.group && !options_.client.count("message.max.bytes")) {
      // Room for a state value as large as the internal topics take. The rows of the sink's
      // own topics keep their limits (MeasureLimits), and batches their batch.size.
      settings["message.max.bytes"] = std::to_string(kafka::kInternalMaxMessageBytes + 65536);
    }
    return settings;
  }

  // ---- scaleOut ------------------------------------------------------------------------

  Status OpenScaledOut() {
    Status init = Call("init_transactions", [&] {
                    return rd_kafka_init_transactions(producer_.get(), options_.timeout_ms);
                  }).second;
    if (!init) return Fail(init);
    for (const Target& target : options_.targets) {
      auto listed = TopicListed(target.topic);
      if (!listed) return Fail(tl::unexpected(listed.error().Wrap("kafka sink")));
      if (!*listed) {
        // kExternal: it may exist soon (a service directory restarts the query with backoff).
        return Fail(MakeError(ErrorCode::kExternal,
                              "kafka sink '{}': topic {} does not exist; create it "
                              "(run DIR tries the query again with backoff)",
                              target.sink_name, target.topic));
      }
    }
    if (Status opened = OpenEncoders(); !opened) return Fail(opened);
    MeasureLimits();
    Log()->info("kafka sink: transactional.id={} (scaled out, group {})",
                options_.transactional_id, options_.source_group_id);
    return Ok();
  }

  // One transaction: the sinks' rows, the rows and clock marks for other tasks, the state
  // changes, and the consumed offsets with the group's metadata. Any failure aborts it: the
  // group may have moved on (a rebalance), so the executor computes the batch again from the
  // committed offsets instead of sending this one again.
  Status DeliverScaledOut(const BatchOutput& output) {
    options_.group->ClearChangelogOffsets();
    if (!producer_) {
      // The producer was dropped after a stall (below) and its successor could not start yet.
      DRIFTD_TRY(RejoinAfterStall(output.batch_id, "the previous producer was dropped"));
    }
    rd_kafka_poll(producer_.get(), 0);
    too_large_.reset();
    auto [outcome, status] = DeliverScaledOutOnce(output);
    rd_kafka_poll(producer_.get(), 0);
    if (outcome == Outcome::kOk) return Ok();
    if (too_large_) {
      // Computing the batch again would make the same record: the query stops and says why.
      return MakeError(ErrorCode::kUnrecoverable,
                       "kafka sink: batch {}: a record of {} bytes is over what topic {} takes "
                       "(its max.message.bytes or segment.bytes, or the producer's "
                       "message.max.bytes). Raise them (kafka-configs.sh --alter --entity-type "
                       "topics --entity-name {} --add-config max.message.bytes={},segment.bytes="
                       "{}): the internal topics this driftd creates take records of up to {} "
                       "bytes",
                       output.batch_id, too_large_->second, too_large_->first,
                       too_large_->first, kafka::kInternalMaxMessageBytes,
                       kafka::kInternalSegmentBytes, kafka::kInternalMaxMessageBytes);
    }
    if (outcome == Outcome::kFailed && !status &&
        status.error().code() == ErrorCode::kUnrecoverable) {
      // Scaled out, the transactional.id is this instance's own: a fatal error is almost always
      // this process having been too slow (a stall past transaction.timeout.ms made the broker
      // abort the transaction and bump the producer's epoch, or the group moved on), not
      // another daemon. The batch is dropped, a new producer takes the id, and the consumer
      // rejoins; only fencing again and again says a second process runs this instance.
      DRIFTD_TRY(RejoinAfterStall(output.batch_id, status.error().message()));
      return MakeError(ErrorCode::kAborted,
                       "kafka sink: batch {} dropped: this process was too slow (its transaction "
                       "outlived transaction.timeout.ms or its group moved on); it rejoins and "
                       "computes the batch again",
                       output.batch_id);
    }
    // A row that does not fit its sink's value format would fail again however often the
    // batch were computed.
    if (!status && status.error().code() == ErrorCode::kConfig) return status;
    if (outcome == Outcome::kOk || status) return Ok();
    // A call that gave up may leave the transaction open (begin_transaction would refuse the
    // batch computed again): abort it, or when that fails too, start over with a new producer.
    if (outcome == Outcome::kFailed && !Abort()) {
      rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      producer_.reset();
    }
    return MakeError(ErrorCode::kAborted, "kafka sink: batch {} aborted: {}", output.batch_id,
                     status.error().message());
  }

  std::pair<Outcome, Status> DeliverScaledOutOnce(const BatchOutput& output) {
    auto begun =
        Call("begin_transaction", [&] { return rd_kafka_begin_transaction(producer_.get()); });
    if (begun.first != Outcome::kOk) return begun;
    if (auto produced = ProduceRows(output); produced.first != Outcome::kOk) return produced;
    for (const InternalRecord& record : output.repartition) {
      auto produced = ProduceTo(options_.group->repartition_topic(), record);
      if (produced.first != Outcome::kOk) return produced;
    }
    for (const InternalRecord& record : output.changelog) {
      auto produced = ProduceTo(options_.group->changelog_topic(), record);
      if (produced.first != Outcome::kOk) return produced;
    }
    if (!output.source_end.empty()) {
      // The live member's metadata: a process of an older generation is refused here.
      GroupMetadataPtr group{rd_kafka_consumer_group_metadata(options_.group->consumer())};
      if (auto sent = SendOffsets(output, group.get()); sent.first != Outcome::kOk) return sent;
    }
    return CommitTransaction(output.batch_id);
  }

  // The batch's consumed offsets (with their metadata, scaled out) into the transaction, for
  // `group`. Another input's keys carry its name ("late/topic-0", engine/executor/inputs.h).
  // In one process they may be of another cluster and stay out (the checkpoint holds them);
  // scaled out, every input is a member of the one group on this cluster (validation
  // says so), whose committed offsets are where each partition resumes.
  std::pair<Outcome, Status> SendOffsets(const BatchOutput& output,
                                         rd_kafka_consumer_group_metadata_t* group) {
    PartitionList offsets{
        rd_kafka_topic_partition_list_new(static_cast<int>(output.source_end.size()))};
    for (const auto& [key, offset] : output.source_end) {
      std::string_view partition = key;
      if (const size_t slash = key.rfind('/'); slash != std::string::npos) {
        if (!options_.group) continue;
        partition = partition.substr(slash + 1);  // topic names hold no '/'
      }
      auto parsed = kafka::ParsePartitionKey(partition);
      if (!parsed) continue;
      rd_kafka_topic_partition_t* entry = rd_kafka_topic_partition_list_add(
          offsets.get(), parsed->first.c_str(), parsed->second);
      entry->offset = offset;
      if (auto it = output.offset_metadata.find(key); it != output.offset_metadata.end()) {
        // The list owns (and frees) its entries' metadata.
        entry->metadata = std::malloc(it->second.size());
        std::memcpy(entry->metadata, it->second.data(), it->second.size());
        entry->metadata_size = it->second.size();
      }
    }
    return Call("send_offsets_to_transaction", [&] {
      return rd_kafka_send_offsets_to_transaction(producer_.get(), offsets.get(), group,
                                                  options_.timeout_ms);
    });
  }

  // Commits the open transaction, with the faults a test may inject around the commit
  // (DRIFTD_KAFKA_SINK_FAULT).
  std::pair<Outcome, Status> CommitTransaction(int64_t batch_id) {
    const bool fault = !options_.fault.empty() && batch_id >= options_.fault_from_batch;
    if (fault && options_.fault == "before_commit") {
      (void)rd_kafka_flush(producer_.get(), options_.timeout_ms);
      raise(SIGKILL);
    }
    if (fault && options_.fault == "stall_in_commit" && !fault_fired_) {
      // A process held up inside its commit (a long GC-like pause, a stopped VM).
      fault_fired_ = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.stall_ms));
    }
    if (fault && options_.fault == "commit_gives_up" && !fault_fired_) {
      fault_fired_ = true;
      return {Outcome::kFailed,
              MakeError(ErrorCode::kExternal,
                        "kafka sink: commit_transaction failed: retries spent (injected by "
                        "DRIFTD_KAFKA_SINK_FAULT=commit_gives_up)")};
    }
    const bool inject_fatal = fault && options_.fault == "fatal";
    const bool inject_txn_state = fault && options_.fault == "fatal_txn_state" && !fault_fired_;
    if (inject_fatal || inject_txn_state) {
      fault_fired_ = fault_fired_ || inject_txn_state;
      rd_kafka_test_fatal_error(
          producer_.get(),
          inject_fatal ? RD_KAFKA_RESP_ERR_PRODUCER_FENCED : RD_KAFKA_RESP_ERR_INVALID_TXN_STATE,
          inject_fatal ? "injected by DRIFTD_KAFKA_SINK_FAULT=fatal"
                       : "injected by DRIFTD_KAFKA_SINK_FAULT=fatal_txn_state");
      // The fatal error is the producer's at once, but reaches its transaction manager through
      // librdkafka's own thread: a commit called now may still succeed, and the fault would hit
      // a later batch than the one it names. Fail this batch's commit, as librdkafka does once
      // the error has arrived.
      if (auto fatal = ProducerFatalError("commit_transaction")) {
        return {Outcome::kFailed, tl::unexpected(*fatal)};
      }
    }
    auto committed = Call("commit_transaction", [&] {
      return rd_kafka_commit_transaction(producer_.get(), options_.timeout_ms);
    });
    if (committed.first == Outcome::kOk && fault && options_.fault == "after_commit") {
      raise(SIGKILL);
    }
    return committed;
  }

  std::pair<Outcome, Status> ProduceTo(const std::string& topic, const InternalRecord& record) {
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer_.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
          RD_KAFKA_V_PARTITION(static_cast<int32_t>(record.partition)),
          RD_KAFKA_V_KEY(const_cast<char*>(record.key.data()), record.key.size()),
          RD_KAFKA_V_VALUE(record.tombstone ? nullptr : const_cast<char*>(record.value.data()),
                           record.tombstone ? 0 : record.value.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return {Outcome::kOk, Ok()};
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer_.get(), 100);
        continue;
      }
      if (err == RD_KAFKA_RESP_ERR__FATAL) {
        auto fatal = ProducerFatalError(fmt::format("producing to {}", topic));
        if (fatal) return {Outcome::kFailed, tl::unexpected(*fatal)};
      }
      if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) NoteTooLarge(topic, record.value.size());
      Status aborted = Abort();
      if (!aborted) return {Outcome::kFailed, aborted};
      return {Outcome::kAbortable, MakeError(ErrorCode::kExternal, "kafka sink: producing to {}: {}",
                                             topic, rd_kafka_err2str(err))};
    }
  }

  // Delivery reports (rd_kafka_poll / flush on the executor's thread): the changelog offsets
  // the local checkpoint records as each task's restore position.
  static void DeliveryCallback(rd_kafka_t* /*rk*/, const rd_kafka_message_t* message,
                               void* opaque) {
    auto* sink = static_cast<KafkaSink*>(opaque);
    if ((message->err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
         message->err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE) &&
        message->rkt) {
      sink->NoteTooLarge(rd_kafka_topic_name(message->rkt), message->len);
    }
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR || !message->rkt) return;
    if (sink->options_.group->changelog_topic() != rd_kafka_topic_name(message->rkt)) return;
    sink->options_.group->NoteChangelogOffset(static_cast<uint32_t>(message->partition),
                                              message->offset);
  }

  // Called from rd_kafka_poll (Deliver, Close) on the executor's thread. librdkafka repeats an
  // error for as long as it lasts (a broker down: every reconnect attempt), so each distinct
  // error is logged once per kErrorLogInterval, with the number of repeats left out.
  static void ErrorCallback(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
    static constexpr auto kErrorLogInterval = std::chrono::seconds(30);
    auto* sink = static_cast<KafkaSink*>(opaque);
    const auto now = std::chrono::steady_clock::now();
    RepeatedError& seen = sink->errors_seen_[err];
    if (seen.last_logged != std::chrono::steady_clock::time_point{} &&
        now - seen.last_logged < kErrorLogInterval) {
      ++seen.suppressed;
      return;
    }
    const auto code = static_cast<rd_kafka_resp_err_t>(err);
    const bool connection = code == RD_KAFKA_RESP_ERR__TRANSPORT ||
                            code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ||
                            code == RD_KAFKA_RESP_ERR__RESOLVE;
    Log()->log(connection ? spdlog::level::warn : spdlog::level::err,
               "kafka sink {}: producer error {}: {}{}", rd_kafka_name(rk), rd_kafka_err2name(code),
               reason,
               seen.suppressed > 0
                   ? fmt::format(" ({} more like it since it was last logged)", seen.suppressed)
                   : "");
    seen.last_logged = now;
    seen.suppressed = 0;
  }

  // Whether the producer's fatal error says that another instance took over.
  bool Fenced() const {
    if (options_.fault == "fence_as_txn_state") return false;
    char reason[512];
    return IsFencing(rd_kafka_fatal_error(producer_.get(), reason, sizeof reason));
  }

  static bool IsFencing(rd_kafka_resp_err_t code) {
    return code == RD_KAFKA_RESP_ERR__FENCED || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
           code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;
  }

  // Replaces a producer that hit a fatal error other than fencing (librdkafka treats some
  // broker answers as fatal, e.g. INVALID_TXN_STATE when an outage outlasted
  // transaction.timeout.ms and the broker aborted the transaction under us). The successor has
  // the same transactional.id: its init_transactions ends whatever the old one left open, and
  // the progress topic then says whether batch `batch_id` was committed before the error.
  Status Replace(int64_t batch_id) {
    if (producer_) {
      rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      producer_.reset();
    }
    replacing_batch_ = batch_id;
    Status opened = Open();
    if (!opened) {
      if (opened.error().code() == ErrorCode::kUnrecoverable) fatal_ = opened.error();
      return tl::unexpected(opened.error().Wrap(
          fmt::format("kafka sink: replacing the producer for batch {}", batch_id)));
    }
    replacing_ = false;
    Log()->info("kafka sink: producer replaced (transactional.id {}); batch {} {}",
                options_.transactional_id, batch_id,
                delivered_ >= batch_id ? "was committed before the error" : "is delivered again");
    return Ok();
  }

  // Drops the producer; the next Deliver replaces it (Replace).
  void DropForReplacement() {
    rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    producer_.reset();
    replacing_ = true;
  }

  // Before a replacement's init_transactions fences whoever holds our transactional.id (Connect
  // asks, once the cluster is reachable, so that a stop still ends the wait for it): a
  // committed progress record of this checkpoint past the last batch we committed, written by
  // another writer, means that another instance runs this checkpoint (a failover onto a copy of
  // it) and fenced us. Then this instance stops. The read does not wait for open transactions
  // (`settle`): our own may still be open, and the records we must see are committed already.
  Status RefuseIfTakenOver(int64_t batch_id) {
    auto latest = ReadLatestProgress(/*settle=*/false);
    if (!latest) return tl::unexpected(latest.error().Wrap("kafka sink"));
    return TakenOverBy(*latest, batch_id);
  }

  // Stops the sink as fenced when `latest`, the newest committed progress record of this
  // checkpoint, is past the last batch this sink committed and was written by another writer.
  Status TakenOverBy(const ProgressMark& latest, int64_t batch_id) {
    if (latest.batch_id <= delivered_ || latest.writer == writer_) return Ok();
    fatal_ = Error(
        ErrorCode::kUnrecoverable,
        fmt::format("kafka sink: batch {}: another instance of pipeline '{}' has fenced this one "
                    "(transactional.id {}): it committed batch {} of this checkpoint, and this "
                    "one had committed up to batch {}. This one stops without a new producer, "
                    "which would fence the instance that took over: two daemons must not run one "
                    "pipeline",
                    batch_id, options_.pipeline_name, options_.transactional_id,
                    latest.batch_id, delivered_));
    return tl::unexpected(*fatal_);
  }

  // A scaled-out producer lost to a stall: a successor with the same transactional.id (its
  // init_transactions ends what the old one left). Fenced again and again within minutes means
  // another process runs this instance: that stops the query.
  Status RejoinAfterStall(int64_t batch_id, std::string_view why) {
    const auto now = std::chrono::steady_clock::now();
    while (!stalls_.empty() && now - stalls_.front() > std::chrono::minutes(5)) stalls_.pop_front();
    stalls_.push_back(now);
    if (stalls_.size() > kMaxStallsInFiveMinutes) {
      fatal_ = Error(ErrorCode::kUnrecoverable,
                     fmt::format("kafka sink: the producer of transactional.id {} was fenced {} "
                                 "times in five minutes: another process runs instance '{}' of "
                                 "pipeline '{}' (give each process its own scaleOut.instance): {}",
                                 options_.transactional_id, stalls_.size(),
                                 options_.transactional_id, options_.pipeline_name, why));
      return tl::unexpected(*fatal_);
    }
    Log()->warn("kafka sink: batch {}: the producer cannot go on ({}); this process was too slow, "
                "so it drops the batch, starts a new producer and rejoins the group",
                batch_id, why);
    if (producer_) {
      rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      producer_.reset();
    }
    fatal_.reset();
    Status opened = Open();
    if (!opened) {
      // Refused settings end the query; anything else (the brokers away) is tried again with
      // the next batch, which counts as one more stall.
      if (opened.error().code() == ErrorCode::kUnrecoverable) {
        fatal_ = opened.error();
        return tl::unexpected(*fatal_);
      }
      return MakeError(ErrorCode::kAborted, "kafka sink: a new producer after a stall: {}",
                       opened.error().message());
    }
    return Ok();
  }

  // Keeps the first fatal error's message: after it the producer can do nothing else.
  Status Fail(Status status) {
    producer_.reset();
    return status;
  }

  // The error of a fatal librdkafka error: the producer can do nothing more. `code` tells
  // whether another instance took over. Scaled out, the transactional.id is this instance's
  // own, and fencing almost always means this process stalled (the broker aborted its
  // transaction past transaction.timeout.ms and bumped the epoch): DeliverScaledOut rejoins.
  Error FatalError(std::string_view what, rd_kafka_resp_err_t code, std::string_view detail) const {
    std::string consequence;
    if (!IsFencing(code)) {
      consequence = fmt::format("The transactional producer (transactional.id {}) cannot go on",
                                options_.transactional_id);
    } else if (options_.group) {
      consequence = fmt::format("The broker fenced this producer (transactional.id {}): its "
                                "transaction outlived transaction.timeout.ms, or another "
                                "process took this instance's id",
                                options_.transactional_id);
    } else {
      consequence = fmt::format("Another instance of pipeline '{}' (transactional.id {}) has "
                                "fenced this one, which stops: two daemons must not run one "
                                "pipeline",
                                options_.pipeline_name, options_.transactional_id);
    }
    return Error(ErrorCode::kUnrecoverable,
                 fmt::format("kafka sink: {} failed with a fatal producer error: {} ({}). {}",
                             what, detail, rd_kafka_err2name(code), consequence));
  }

  // The producer's own fatal error, if it has one: librdkafka may report the consequences of a
  // fatal error (a call in the wrong state) rather than the error itself.
  std::optional<Error> ProducerFatalError(std::string_view what) const {
    char reason[512];
    rd_kafka_resp_err_t code = rd_kafka_fatal_error(producer_.get(), reason, sizeof reason);
    if (code == RD_KAFKA_RESP_ERR_NO_ERROR) return std::nullopt;
    return FatalError(what, code, reason);
  }

  // Waits, in slices so that a stop (Cancel) is noticed, for the cluster to answer a metadata
  // request: the checks before init_transactions need it.
  Status AwaitCluster() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.timeout_ms);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      const int slice = static_cast<int>(std::clamp<int64_t>(left, 1, kConnectSliceMs));
      auto metadata = kafka::FetchMetadata(producer_.get(), nullptr, slice);
      if (metadata) return Ok();
      if (cancelled_.load()) {
        return MakeError(ErrorCode::kCancelled,
                         "kafka sink: stopped while connecting (waiting for the brokers)");
      }
      if (left <= kConnectSliceMs) return tl::unexpected(metadata.error().Wrap("kafka sink"));
    }
  }

  // init_transactions within the transactional timeout, in slices, so that a stop (Cancel)
  // is noticed while the brokers do not answer: librdkafka lets a timed-out call be repeated.
  rd_kafka_error_t* InitTransactions() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.timeout_ms);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      const int slice = static_cast<int>(std::clamp<int64_t>(left, 1, kConnectSliceMs));
      rd_kafka_error_t* error = rd_kafka_init_transactions(producer_.get(), slice);
      if (error == nullptr || rd_kafka_error_code(error) != RD_KAFKA_RESP_ERR__TIMED_OUT ||
          left <= kConnectSliceMs || cancelled_.load()) {
        return error;
      }
      rd_kafka_error_destroy(error);
    }
  }

  // Runs one transactional API call, repeating it while librdkafka says the error is
  // retriable. An abortable error aborts the transaction.
  template <typename Fn>
  std::pair<Outcome, Status> Call(std::string_view what, Fn&& fn) {
    for (int attempt = 1;; ++attempt) {
      ErrorPtr error{fn()};
      if (!error) return {Outcome::kOk, Ok()};
      if (connecting_ && cancelled_.load()) {
        return {Outcome::kFailed,
                MakeError(ErrorCode::kCancelled, "kafka sink: stopped while connecting ({})",
                          what)};
      }
      const std::string message =
          fmt::format("kafka sink: {} failed: {}", what, kafka::Describe(error.get()));
      if (rd_kafka_error_is_fatal(error.get())) {
        return {Outcome::kFailed, tl::unexpected(FatalError(what, rd_kafka_error_code(error.get()),
                                                            rd_kafka_error_string(error.get())))};
      }
      if (auto fatal = ProducerFatalError(what)) return {Outcome::kFailed, tl::unexpected(*fatal)};
      if (rd_kafka_error_txn_requires_abort(error.get())) {
        Status aborted = Abort();
        if (!aborted) return {Outcome::kFailed, aborted};
        return {Outcome::kAbortable, MakeError(ErrorCode::kExternal, "{}", message)};
      }
      if (rd_kafka_error_is_retriable(error.get()) && attempt < kMaxCallAttempts) {
        Log()->debug("{}; retrying", message);
        std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
        continue;
      }
      return {Outcome::kFailed, MakeError(ErrorCode::kExternal, "{}", message)};
    }
  }

  Status Abort() {
    for (int attempt = 1;; ++attempt) {
      ErrorPtr error{rd_kafka_abort_transaction(producer_.get(), options_.timeout_ms)};
      if (!error) return Ok();
      if (rd_kafka_error_is_fatal(error.get())) {
        return tl::unexpected(FatalError("abort_transaction", rd_kafka_error_code(error.get()),
                                         rd_kafka_error_string(error.get())));
      }
      if (auto fatal = ProducerFatalError("abort_transaction")) return tl::unexpected(*fatal);
      if (rd_kafka_error_is_retriable(error.get()) && attempt < kMaxCallAttempts) continue;
      return MakeError(ErrorCode::kExternal, "kafka sink: abort_transaction failed: {}",
                       kafka::Describe(error.get()));
    }
  }

  // What a record of each target may hold: the producer's message.max.bytes and the topic's
  // max.message.bytes (as the broker reports it), less a record batch's own bytes. A row over
  // it would abort every transaction of its batch, so the executor sets such rows aside before
  // they are committed. The topics' limits are asked for at Open and waited for a moment; a
  // cluster that answers later (or never: the demo's embedded stand-in has no DescribeConfigs)
  // leaves the producer's limit until the answer comes (TakeTopicLimits, before each batch).
  void MeasureLimits() {
    producer_limit_ = kDefaultMessageMaxBytes;
    if (auto it = options_.client.find("message.max.bytes"); it != options_.client.end()) {
      size_t parsed = 0;
      auto [end, ec] =
          std::from_chars(it->second.data(), it->second.data() + it->second.size(), parsed);
      if (ec == std::errc() && end == it->second.data() + it->second.size()) {
        producer_limit_ = parsed;
      }
    }
    for (Target& target : options_.targets) {
      target.max_row_bytes = producer_limit_ > kRecordOverhead ? producer_limit_ - kRecordOverhead : 0;
      target.limit_why = fmt::format("the producer's message.max.bytes is {}", producer_limit_);
    }
    std::vector<std::string> topics;
    for (const Target& target : options_.targets) topics.push_back(target.topic);
    if (topics.empty()) return;
    limits_asked_ = kafka::AskTopicConfigs(producer_.get(), topics, kRequestTimeoutMs);
    TakeTopicLimits(kTopicLimitWaitMs);
  }

  // Applies the topics' limits once the answer to MeasureLimits' question is there.
  void TakeTopicLimits(int wait_ms) {
    if (!limits_asked_) return;
    auto answer = kafka::TopicConfigsAnswer(limits_asked_.get(), "max.message.bytes", wait_ms);
    if (!answer) return;
    limits_asked_.reset();
    for (Target& target : options_.targets) {
      auto it = answer->find(target.topic);
      if (it == answer->end()) continue;
      size_t parsed = 0;
      auto [end, ec] =
          std::from_chars(it->second.data(), it->second.data() + it->second.size(), parsed);
      if (ec != std::errc() || end != it->second.data() + it->second.size() ||
          parsed >= producer_limit_) {
        continue;
      }
      target.max_row_bytes = parsed > kRecordOverhead ? parsed - kRecordOverhead : 0;
      target.limit_why =
          fmt::format("topic {} takes records of up to {} bytes (max.message.bytes)", target.topic,
                      parsed);
    }
  }

  // Registers the targets' writer schemas where they have a registry, before the first
  // transaction; a registry that cannot be reached fails the Open, which is tried again.
  Status OpenEncoders() {
    for (Target& target : options_.targets) {
      if (Status opened = target.encoder->Open(); !opened) {
        return tl::unexpected(opened.error().Wrap(
            fmt::format("kafka sink '{}' (topic {})", target.sink_name, target.topic)));
      }
    }
    return Ok();
  }

  // Produces every target's rows of the batch, each encoded by the target's value format
  // into one buffer (librdkafka copies it). A row that does not fit the format's schema aborts
  // the transaction and fails the delivery (kConfig: trying again cannot help; the rows wait in
  // the outbox, and a corrected schema delivers them).
  std::pair<Outcome, Status> ProduceRows(const BatchOutput& output) {
    for (const Target& target : options_.targets) {
      const OutputRows& rows = output.For(target.stream, target.mode);
      for (size_t i = 0; i < rows.rows.size(); ++i) {
        // Set aside by the executor before the batch committed (engine/executor/
        // output_limits.h); a batch from an older outbox is delivered without it too.
        if (OverRowLimit(rows, i, target.max_row_bytes)) [[unlikely]] {
          Log()->warn("kafka sink '{}': batch {} row {} ({} stream) is over what topic {} takes "
                      "({} bytes, {}); not produced",
                      target.sink_name, output.batch_id, i, ToString(target.stream),
                      target.topic, target.max_row_bytes, target.limit_why);
          continue;
        }
        std::string_view key = i < rows.keys.size() ? std::string_view(rows.keys[i]) : "";
        if (!target.key_column.empty()) {
          row_key_ = RowKey(key_parser_, key_scratch_, rows.rows[i], target.key_column);
          key = row_key_;
          // The row's own member as its key: the limit the executor measured with the
          // stream's key is measured again with this one.
          if (rows.rows[i].size() + key.size() > target.max_row_bytes) [[unlikely]] {
            Log()->warn("kafka sink '{}': batch {} row {} ({} stream) with its key is over "
                        "what topic {} takes ({} bytes, {}); not produced",
                        target.sink_name, output.batch_id, i, ToString(target.stream),
                        target.topic, target.max_row_bytes, target.limit_why);
            continue;
          }
        }
        if (Status encoded = target.encoder->Encode(rows.rows[i], value_buffer_); !encoded) {
          Status aborted = Abort();
          if (!aborted) return {Outcome::kFailed, aborted};
          return {Outcome::kFailed,
                  tl::unexpected(encoded.error().Wrap(fmt::format(
                      "kafka sink '{}': batch {} row {} ({} stream)", target.sink_name,
                      output.batch_id, i, ToString(target.stream))))};
        }
        auto produced = Produce(target.topic, key, value_buffer_);
        if (produced.first != Outcome::kOk) return produced;
      }
    }
    return {Outcome::kOk, Ok()};
  }

  // Produces one record; a full local queue is drained by serving delivery events.
  std::pair<Outcome, Status> Produce(const std::string& topic, std::string_view key,
                                     std::string_view value) {
    for (;;) {
      rd_kafka_resp_err_t err =
          rd_kafka_producev(producer_.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                            RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                            RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return {Outcome::kOk, Ok()};
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer_.get(), 100);
        continue;
      }
      std::string message =
          fmt::format("kafka sink: producing to {}: {}", topic, rd_kafka_err2str(err));
      if (err == RD_KAFKA_RESP_ERR__FATAL) {
        auto fatal = ProducerFatalError(fmt::format("producing to {}", topic));
        if (fatal) return {Outcome::kFailed, tl::unexpected(*fatal)};
      }
      if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) NoteTooLarge(topic, value.size());
      Status aborted = Abort();
      if (!aborted) return {Outcome::kFailed, aborted};
      return {Outcome::kAbortable, MakeError(ErrorCode::kExternal, "{}", message)};
    }
  }

  std::pair<Outcome, Status> DeliverOnce(const BatchOutput& output) {
    auto begun =
        Call("begin_transaction", [&] { return rd_kafka_begin_transaction(producer_.get()); });
    if (begun.first != Outcome::kOk) return begun;

    if (auto produced = ProduceRows(output); produced.first != Outcome::kOk) return produced;
    std::string progress = "{\"pipeline\":";
    AppendJsonString(progress, options_.pipeline_name);
    progress += ",\"checkpoint\":";
    AppendJsonString(progress, checkpoint_id_);
    fmt::format_to(std::back_inserter(progress), ",\"batchId\":{},\"writer\":\"{}\"}}",
                   output.batch_id, writer_);
    auto produced = Produce(options_.progress_topic, options_.pipeline_name, progress);
    if (produced.first != Outcome::kOk) return produced;

    if (!options_.source_group_id.empty() && !output.source_end.empty()) {
      GroupMetadataPtr group{
          rd_kafka_consumer_group_metadata_new(options_.source_group_id.c_str())};
      if (auto sent = SendOffsets(output, group.get()); sent.first != Outcome::kOk) return sent;
    }
    return CommitTransaction(output.batch_id);
  }

  // Whether the cluster lists `topic`. Listing all topics never auto-creates one, as asking
  // for a topic by name may (without the progress topic's compaction).
  Result<bool> TopicListed(const std::string& topic) {
    auto metadata = kafka::FetchMetadata(producer_.get(), nullptr, kRequestTimeoutMs);
    if (!metadata) return tl::unexpected(metadata.error());
    for (int i = 0; i < (*metadata)->topic_cnt; ++i) {
      const rd_kafka_metadata_topic_t& listed = (*metadata)->topics[i];
      if (listed.err == RD_KAFKA_RESP_ERR_NO_ERROR && topic == listed.topic) return true;
    }
    return false;
  }

  // This pipeline's newest committed progress record (kafka::ReadLatestProgress).
  Result<ProgressMark> ReadLatestProgress(bool settle = true) {
    kafka::ProgressQuery query;
    query.topic = options_.progress_topic;
    query.pipeline_name = options_.pipeline_name;
    query.checkpoint_id = checkpoint_id_;
    query.group_id = options_.transactional_id + "-progress-reader";
    query.client = options_.client;
    query.settle_timeout_ms = options_.timeout_ms + 10'000;
    return kafka::ReadLatestProgress(query, settle);
  }

  KafkaSinkOptions options_;
  // The format's name: the Kafka sinks deliver together under it (the outbox's pending sink),
  // which config keeps any other sink from taking (config/loader_source.cc).
  const std::string name_ = "kafka";
  /// The producer's message.max.bytes, and the question for the topics' limits while it has no
  /// answer (MeasureLimits).
  size_t producer_limit_ = kDefaultMessageMaxBytes;
  kafka::QueuePtr limits_asked_;
  /// The record value being produced (encoded row); reused.
  std::string value_buffer_;
  // keyColumn: the key read from the row, and the parser and padded copy that read it.
  std::string row_key_;
  std::string key_scratch_;
  simdjson::ondemand::parser key_parser_;
  Handle producer_;
  /// CheckpointMetadata::checkpoint_id of the batches delivered; empty when nobody said.
  std::string checkpoint_id_;
  /// This sink's writer id in the progress records it commits: tells its records from those of
  /// another instance running the same checkpoint.
  const std::string writer_ = RandomHexId();
  /// Highest batch id of this checkpoint known committed. Only the executor's thread touches it.
  int64_t delivered_ = -1;
  /// The checkpoint's last committed batch (SetCheckpointId); -1: none.
  int64_t last_committed_batch_ = -1;
  /// Whether the checkpoint was checked against the progress topic (at the first Open).
  bool stale_checked_ = false;
  /// Set by a fatal producer error; every later call returns it.
  std::optional<Error> fatal_;
  /// A record of the batch under way the producer or the broker refused as too large (its
  /// topic and bytes): set on the executor's thread, by ProduceTo or a delivery report.
  std::optional<std::pair<std::string, size_t>> too_large_;
  void NoteTooLarge(std::string topic, size_t bytes) {
    if (!too_large_ || bytes > too_large_->second) too_large_.emplace(std::move(topic), bytes);
  }
  /// The producer was dropped after a non-fencing fatal error and has no successor yet.
  bool replacing_ = false;
  /// The batch being delivered when the producer was lost (while replacing_).
  int64_t replacing_batch_ = -1;
  /// The one-shot fault (fatal_txn_state) has been raised.
  bool fault_fired_ = false;
  /// When scaled-out producers were lost to stalls (RejoinAfterStall), the last five minutes'.
  std::deque<std::chrono::steady_clock::time_point> stalls_;
  /// Open is under way (executor's thread), and a stop asked it to give up (any thread).
  bool connecting_ = false;
  std::atomic<bool> cancelled_{false};
  struct RepeatedError {
    std::chrono::steady_clock::time_point last_logged{};
    int64_t suppressed = 0;
  };
  /// By librdkafka error code: when ErrorCallback last logged it. Executor's thread only.
  std::map<int, RepeatedError> errors_seen_;
};

}  // namespace

// The progress topic of a pipeline that names none: its own, "driftd-progress.<name>". Opening
// a sink waits until the progress topic has no open transaction (its last stable offset reaches
// the log end), so on a topic shared by pipelines one pipeline that died mid-transaction would
// delay every other pipeline's start by up to its transaction timeout. On a topic of its own only
// the pipeline's own producer writes, and init_transactions has ended its transaction already.
// Characters Kafka does not allow in topic names become '_'; a name too long for a topic is cut
// and made unique again by a hash of the whole name.
std::string DefaultKafkaProgressTopic(std::string_view pipeline) {
  constexpr size_t kMaxTopicLength = 249;
  std::string topic = "driftd-progress.";
  for (char c : pipeline) {
    const bool legal = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    topic.push_back(legal ? c : '_');
  }
  if (topic.size() > kMaxTopicLength) {
    uint64_t hash = 14695981039346656037ull;  // FNV-1a: stable across builds and platforms
    for (char c : pipeline) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    topic = fmt::format("{}-{:016x}", topic.substr(0, kMaxTopicLength - 17), hash);
  }
  return topic;
}

namespace {

// One kafka sink's options as BindKafkaSink made them.
struct KafkaSinkBound {
  std::string topic;
  /// keyColumn when the key is read from the row; empty when the stream's own key is that
  /// column (or keyColumn is unset).
  std::string key_column;
  /// progressTopic, or the pipeline's own (DefaultKafkaProgressTopic) when unset or empty.
  std::string progress_topic;
  /// librdkafka producer settings (kafka.* without the prefix).
  std::map<std::string, std::string> client;
};

// The progress topic a kafka sink's options name.
std::string ProgressTopicOf(const PipelineSpec& pipeline, const Options& options) {
  std::string topic = options.GetString("progressTopic");
  return topic.empty() ? DefaultKafkaProgressTopic(pipeline.name) : topic;
}

// The options (declared types and defaults applied) parsed once. The kafka sinks of a pipeline
// share one producer and one transaction, so each must agree with the kafka sinks before it:
// a disagreement is the later sink's, at its option.
Bound<KafkaSinkBound> BindKafkaSink(const PipelineSpec& pipeline, const SinkSpec& sink,
                                    const Options& options) {
  auto problem = [](std::string option, std::string message) -> Bound<KafkaSinkBound> {
    return tl::unexpected(OptionProblem{std::move(option), std::move(message)});
  };
  KafkaSinkBound bound;
  bound.topic = options.GetString("topic");
  if (bound.topic.empty()) return problem("topic", "must not be empty");
  bound.progress_topic = ProgressTopicOf(pipeline, options);
  if (const std::string column = options.GetString("keyColumn"); !column.empty()) {
    // A scalar member of the stream's rows. A query that is not valid is reported as such.
    if (auto shape = StreamRowShape(pipeline, sink.stream); shape) {
      const auto& fields = shape->fields;
      auto field = std::find_if(fields.begin(), fields.end(),
                                [&](const ShapeField& f) { return f.name == column; });
      if (field == fields.end() || field->type.kind == ShapeType::Kind::kRecord ||
          field->type.kind == ShapeType::Kind::kArray) {
        std::string names;
        for (const ShapeField& f : fields) {
          if (f.type.kind == ShapeType::Kind::kRecord || f.type.kind == ShapeType::Kind::kArray) {
            continue;
          }
          names += names.empty() ? f.name : ", " + f.name;
        }
        return problem("keyColumn",
                       fmt::format("'{}' is not a column of the {} stream's rows that can key a "
                                   "record (a string, number or boolean): {}",
                                   column, ToString(sink.stream), names));
      }
    }
    // A stats row's key is its first group column already.
    const bool stream_key = sink.stream == StreamKind::kStats &&
                            !pipeline.query.group_by.empty() &&
                            pipeline.query.group_by[0] == column;
    if (!stream_key) bound.key_column = column;
  }
  bound.client = options.WithPrefix("kafka.");
  if (auto servers = bound.client.find("bootstrap.servers");
      servers == bound.client.end() || servers->second.empty()) {
    return problem("kafka.bootstrap.servers", "the kafka sink needs kafka.bootstrap.servers");
  }
  std::map<std::string, std::string> shared = bound.client;
  for (const SinkSpec* other : SinksBefore(pipeline, sink)) {
    if (other->format != sink.format) continue;
    if (ProgressTopicOf(pipeline, other->options) != bound.progress_topic) {
      return problem("progressTopic",
                     fmt::format("kafka sinks '{}' and '{}' name different progressTopic "
                                 "values; the sinks of one pipeline share one transaction and "
                                 "one progress topic",
                                 other->name, sink.name));
    }
    for (const auto& [name, value] : other->options.WithPrefix("kafka.")) {
      auto [it, inserted] = shared.emplace(name, value);
      if (inserted || it->second == value) continue;
      return problem(fmt::format("kafka.{}", name),
                     fmt::format("kafka sinks of one pipeline share one producer, but '{}' "
                                 "sets kafka.{} differently from kafka sink '{}'",
                                 sink.name, name, other->name));
    }
  }
  // librdkafka's check of the settings this sink adds to the shared producer's, now rather
  // than at the first connection, so that validate refuses what the start would.
  if (auto refused = kafka::CheckSettings(shared)) return tl::unexpected(*refused);
  return bound;
}

tl::expected<std::unique_ptr<Sink>, SinkFailure> CreateKafkaSink(
    const PipelineSpec& pipeline, std::vector<BoundSink<KafkaSinkBound>> sinks, Source* source,
    const ValueFormatCatalog& formats) {
  // A problem of the one producer, not of a sink.
  auto failure = [](Error error) { return tl::unexpected(SinkFailure{std::move(error), nullptr}); };
  if (sinks.empty() && !pipeline.scale_out.enabled) {
    return failure(Error(ErrorCode::kInternal, "kafka sink without sinks"));
  }
  KafkaSinkOptions options;
  options.pipeline_name = pipeline.name;
  for (BoundSink<KafkaSinkBound>& sink : sinks) {
    Target target;
    target.sink_name = sink.spec->name;
    target.topic = sink.options.topic;
    target.stream = sink.spec->stream;
    target.mode = sink.spec->output_mode;
    target.key_column = sink.options.key_column;
    auto encoder = CreateValueEncoder(formats, pipeline, *sink.spec, target.topic + "-value");
    if (!encoder) return tl::unexpected(SinkFailure{std::move(encoder.error()), sink.spec});
    target.encoder = std::move(*encoder);
    options.targets.push_back(std::move(target));
    // The binds made every sink agree on these.
    options.progress_topic = sink.options.progress_topic;
    options.client.insert(sink.options.client.begin(), sink.options.client.end());
  }
  if (sinks.empty()) {
    // Scaled out without Kafka sinks: the producer writes the internal topics only, on the
    // source's cluster.
    options.client = pipeline.source.options.WithPrefix("kafka.");
    options.progress_topic = DefaultKafkaProgressTopic(pipeline.name);
  }
  auto transactional_id = options.client.find("transactional.id");
  options.transactional_id = transactional_id != options.client.end() ? transactional_id->second
                                                                      : "driftd-" + pipeline.name;
  if (auto timeout = options.client.find("transaction.timeout.ms");
      timeout != options.client.end()) {
    int timeout_ms = 0;
    const std::string& text = timeout->second;
    std::from_chars(text.data(), text.data() + text.size(), timeout_ms);
    options.timeout_ms = std::max(1000, timeout_ms);
  }
  if (pipeline.source.format == "kafka") options.source_group_id = kafka::GroupId(pipeline);
  if (pipeline.scale_out.enabled) {
    if (source) options.group = kafka::GroupOf(*source);
    if (!options.group) return failure(Error(ErrorCode::kConfig, "scaleOut needs a kafka source"));
    // One producer per process (EOS v2), named by the instance so that a restarted process
    // aborts what its predecessor left open.
    if (transactional_id == options.client.end()) {
      options.transactional_id =
          fmt::format("driftd-{}-{}", pipeline.name, pipeline.scale_out.instance);
    }
  }
  if (const char* fault = std::getenv("DRIFTD_KAFKA_SINK_FAULT")) {
    std::string_view text(fault);
    if (size_t at = text.find('@'); at != std::string_view::npos) {
      options.fault_from_batch = std::atoll(std::string(text.substr(at + 1)).c_str());
      text = text.substr(0, at);
    }
    options.fault = std::string(text);
    if (options.fault != "before_commit" && options.fault != "after_commit" &&
        options.fault != "fatal" && options.fault != "fatal_txn_state" &&
        options.fault != "fence_as_txn_state" && options.fault != "commit_gives_up" &&
        options.fault != "stall_in_commit") {
      return failure(Error(ErrorCode::kConfig,
                           fmt::format("DRIFTD_KAFKA_SINK_FAULT={}: expected before_commit, "
                                       "after_commit, fatal, fatal_txn_state, "
                                       "fence_as_txn_state, commit_gives_up or "
                                       "stall_in_commit, optionally with @<batch id>",
                                       fault)));
    }
    if (const char* stall = std::getenv("DRIFTD_KAFKA_SINK_STALL_MS")) {
      options.stall_ms = std::max<int64_t>(0, std::atoll(stall));
    }
  }
  return std::unique_ptr<Sink>(std::make_unique<KafkaSink>(std::move(options)));
}

}  // namespace

ConnectorDecl KafkaSinkDecl() {
  ConnectorDecl decl;
  decl.format = "kafka";
  decl.role = ConnectorRole::kSink;
  decl.doc =
      "Writes rows to a Kafka topic, one record per row, exactly once: all Kafka sinks of a "
      "pipeline share one transactional producer (transactional.id driftd-<pipeline>), and each "
      "batch is one transaction that also holds a progress record and, with a Kafka source, the "
      "source offsets of the batch. Records are the rows' JSON objects, or Avro with "
      "`valueFormat: avro` (see the value formats below). The sinks of one pipeline must agree "
      "on `progressTopic` and on every `kafka.*` setting they both give.";
  decl.passthrough_prefix = "kafka.";
  decl.value_formats = true;
  // Each batch is one transaction: every process of a scaled-out pipeline may write, and the
  // sink carries the query's internal topics there.
  decl.shared_by_processes = true;
  decl.carries_scale_out = true;
  decl.options = {
      {"topic", OptionType::kString, "", "Topic to write to (it must exist).", true},
      {"keyColumn", OptionType::kString, "",
       "Column of the stream's rows whose value keys each record (a string's value, a "
       "number's or a boolean's text; no key when null). Unset: the model id (a stats row's "
       "first group column)."},
      {"progressTopic", OptionType::kString, "",
       "Compacted topic recording the pipeline's last delivered batch (created if missing). "
       "Unset or empty: `driftd-progress.<pipeline name>`, one per pipeline. A sink starting "
       "waits for open transactions on this topic to end, so pipelines sharing one may delay "
       "each other's start by up to kafka.transaction.timeout.ms when one dies "
       "mid-transaction."},
      {"kafka.bootstrap.servers", OptionType::kString, "", "Brokers to connect to, host:port,...",
       true},
  };
  BindSharedSink<KafkaSinkBound>(decl, &BindKafkaSink, &CreateKafkaSink);
  return decl;
}

}  // namespace driftd
