#include "connectors/kafka/progress_reader.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <simdjson.h>

#include "connectors/kafka/kafka_common.h"

namespace driftd::kafka {

namespace {

// Attempts of a watermark query while the partition has no leader.
constexpr int kReaderAttempts = 10;
constexpr int kReaderRequestTimeoutMs = 10'000;
// Records scanned per step when searching the progress topic backwards from its end.
constexpr int64_t kProgressScanWindow = 1000;

Status QueryWatermarks(const std::string& progress_topic, rd_kafka_t* client, int32_t partition,
                      int64_t& low, int64_t& high) {
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  for (int attempt = 1; attempt <= kReaderAttempts; ++attempt) {
    err = rd_kafka_query_watermark_offsets(client, progress_topic.c_str(), partition, &low, &high,
                                           kReaderRequestTimeoutMs);
    if (err != RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE &&
        err != RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION &&
        err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "offsets of {} partition {}: {}",
                     progress_topic, partition, rd_kafka_err2str(err));
  }
  return Ok();
}

// Scans one progress partition backwards in windows from its last stable offset: the
// pipeline's newest record is normally near the end.
Result<ProgressMark> LatestInPartition(const ProgressQuery& query, rd_kafka_t* consumer,
                                       rd_kafka_t* uncommitted, int32_t partition, bool settle) {
  // Our own earlier transaction is settled (init_transactions waited for it), but another
  // pipeline's open transaction on this partition holds the last stable offset back, and our
  // committed record may lie beyond it. Wait until every transaction open now has ended, so
  // that everything up to the current end of the log is decided.
  int64_t low = 0;
  int64_t log_end = 0;
  DRIFTD_TRY(QueryWatermarks(query.topic, uncommitted, partition, low, log_end));
  int64_t high = 0;
  const auto settle_deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(query.settle_timeout_ms);
  for (;;) {
    // Under read_committed the high mark is the last stable offset.
    DRIFTD_TRY(QueryWatermarks(query.topic, consumer, partition, low, high));
    if (high >= log_end || !settle) break;
    if (std::chrono::steady_clock::now() > settle_deadline) {
      return MakeError(ErrorCode::kExternal,
                       "{} partition {}: a transaction stayed open past the transaction "
                       "timeout (last stable offset {}, log end {})",
                       query.topic, partition, high, log_end);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  simdjson::dom::parser parser;
  int64_t window_end = high;
  while (window_end > low) {
    int64_t window_start = std::max(low, window_end - kProgressScanWindow);
    PartitionList list{rd_kafka_topic_partition_list_new(1)};
    rd_kafka_topic_partition_list_add(list.get(), query.topic.c_str(), partition)
        ->offset = window_start;
    err = rd_kafka_assign(consumer, list.get());
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return MakeError(ErrorCode::kExternal, "reading {}: {}", query.topic,
                       rd_kafka_err2str(err));
    }
    std::optional<ProgressMark> latest;
    bool done = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done) {
      if (std::chrono::steady_clock::now() > deadline) {
        return MakeError(ErrorCode::kExternal, "reading {} partition {} timed out",
                         query.topic, partition);
      }
      MessagePtr message{rd_kafka_consumer_poll(consumer, 100)};
      if (!message) continue;
      if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        done = message->offset >= window_end;
        continue;
      }
      if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (message->err == RD_KAFKA_RESP_ERR__TRANSPORT ||
            message->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
          continue;
        }
        return MakeError(ErrorCode::kExternal, "reading {}: {}", query.topic,
                         rd_kafka_message_errstr(message.get()));
      }
      if (message->offset >= window_end - 1) done = true;
      if (message->offset >= window_end) continue;
      std::string_view key(static_cast<const char*>(message->key), message->key_len);
      if (key != query.pipeline_name || message->len == 0) continue;
      simdjson::dom::element record;
      int64_t batch_id = 0;
      if (parser.parse(static_cast<const char*>(message->payload), message->len).get(record) ||
          record["batchId"].get(batch_id)) {
        Log()->warn("kafka sink: ignoring malformed progress record at {} offset {}",
                    query.topic, message->offset);
        continue;
      }
      // The newest record wins. One of another checkpoint (no id: written before ids
      // existed) says nothing about this checkpoint's batches.
      std::string_view checkpoint;
      if (record["checkpoint"].get(checkpoint)) checkpoint = {};
      std::string_view writer;
      if (record["writer"].get(writer)) writer = {};
      latest = checkpoint == query.checkpoint_id ? ProgressMark{batch_id, std::string(writer)}
                                                 : ProgressMark{};
    }
    if (latest) return std::move(*latest);
    window_end = window_start;
  }
  return ProgressMark{};
}

}  // namespace

Result<ProgressMark> ReadLatestProgress(const ProgressQuery& query, bool settle) {
  std::map<std::string, std::string> settings = {
      {"client.id", "driftd-" + query.pipeline_name + "-progress"},
      {"group.id", query.group_id},
      {"isolation.level", "read_committed"},
      {"enable.auto.commit", "false"},
      {"enable.partition.eof", "true"},
      {"auto.offset.reset", "earliest"},
      // The scan ends on end-of-partition events, which come with a fetch that, at the end of
      // the log, long-polls for fetch.wait.max.ms (default 500 ms) on every start.
      {"fetch.wait.max.ms", "10"},
  };
  for (const auto& [name, value] : query.client) {
    if (name == "bootstrap.servers" || name.rfind("security.", 0) == 0 ||
        name.rfind("sasl.", 0) == 0 || name.rfind("ssl.", 0) == 0) {
      settings[name] = value;
    }
  }
  auto conf = MakeConf(settings);
  if (!conf) return tl::unexpected(conf.error());
  auto client = MakeClient(RD_KAFKA_CONSUMER, std::move(*conf));
  if (!client) return tl::unexpected(client.error());
  Handle consumer = std::move(*client);

  // A topic created a moment ago may not have a leader yet; an answer read from a partial
  // view would make recovery deliver batches again, so wait for the whole topic.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  MetadataPtr metadata;
  for (;;) {
    auto fetched =
        FetchMetadata(consumer.get(), query.topic.c_str(), kReaderRequestTimeoutMs);
    if (!fetched) return tl::unexpected(fetched.error());
    const rd_kafka_metadata_topic_t& topic = (*fetched)->topics[0];
    bool complete = (*fetched)->topic_cnt == 1 && topic.err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                    topic.partition_cnt > 0;
    for (int p = 0; complete && p < topic.partition_cnt; ++p) {
      complete = topic.partitions[p].leader >= 0;
    }
    if (complete) {
      metadata = std::move(*fetched);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return MakeError(ErrorCode::kExternal, "progress topic {} has no leader",
                       query.topic);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Watermarks as read_uncommitted sees them: the end of the log, open transactions included.
  settings["isolation.level"] = "read_uncommitted";
  auto uncommitted_conf = MakeConf(settings);
  if (!uncommitted_conf) return tl::unexpected(uncommitted_conf.error());
  auto uncommitted = MakeClient(RD_KAFKA_CONSUMER, std::move(*uncommitted_conf));
  if (!uncommitted) return tl::unexpected(uncommitted.error());

  ProgressMark latest;
  const rd_kafka_metadata_topic_t& topic = metadata->topics[0];
  for (int p = 0; p < topic.partition_cnt; ++p) {
    auto found =
        LatestInPartition(query, consumer.get(), uncommitted->get(), topic.partitions[p].id,
                          settle);
    if (!found) {
      rd_kafka_consumer_close(consumer.get());
      return tl::unexpected(found.error());
    }
    if (found->batch_id > latest.batch_id) latest = std::move(*found);
  }
  rd_kafka_consumer_close(consumer.get());
  return latest;
}

}  // namespace driftd::kafka
