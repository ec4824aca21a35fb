// Reading the kafka source's planned batches (kafka_source_impl.h describes the source): the
// ranges a batch reads, the partitions' feeds on the reading consumer (assigned, moved, paused
// and resumed as batches need them), and the reader that takes each range's records from its
// partition's queue into the executor's chunks.
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "connectors/kafka/kafka_source_impl.h"

namespace driftd::kafka_source_detail {

namespace {

// How long one consume call waits before deadlines are checked again.
constexpr int kConsumeWaitMs = 100;

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

}  // namespace

Result<std::unique_ptr<SourceReader>> KafkaSource::Read(const SourceOffsets& start,
                                                        const SourceOffsets& end) {
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

Status KafkaSource::PrepareFeeds(std::vector<KafkaReader::Range>& ranges,
                                 const SourceOffsets& end) {
  rd_kafka_t* consumer = consumer_.get();
  // A feed ends when its partition is no longer this source's to read (deleted, or given to
  // another process). The others stay assigned, prefetching, whether or not this read takes
  // them: a scaled-out batch reads the source's partitions and its tasks' partitions in two
  // reads, and each would otherwise end the other's feeds and fetch them anew.
  std::vector<uint32_t> ended;
  for (const auto& [index, feed] : feeds_) {
    if (!end.count(partitions_[index].key) && !MayRead(index)) ended.push_back(index);
  }
  if (!ended.empty()) DRIFTD_TRY(DropFeeds(ended));
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
      feed.eof_at = -1;
      rd_kafka_topic_partition_list_add(added.get(), range.topic.c_str(), range.partition)
          ->offset = range.next;
      // A pause outlives an assignment: a partition dropped while paused (it went to another
      // process and came back) would otherwise never fetch again.
      rd_kafka_topic_partition_list_add(resumed.get(), range.topic.c_str(), range.partition);
      continue;
    }
    if (feed.position != range.next) {
      feed.held.clear();
      feed.eof_at = -1;
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
        it->second.eof_at = -1;
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
    // A seek just after the group handed partitions back can time out while their fetchers
    // start (seen once, after a process stalled 25 s and rejoined). Seeking again to the same
    // offsets changes nothing else, so a timed-out seek is tried kSeekAttempts times before
    // it fails the batch.
    constexpr int kSeekAttempts = 3;
    ErrorPtr error;
    for (int attempt = 1; attempt <= kSeekAttempts; ++attempt) {
      for (int i = 0; i < moved->cnt; ++i) moved->elems[i].err = RD_KAFKA_RESP_ERR_NO_ERROR;
      error.reset(rd_kafka_seek_partitions(consumer, moved.get(), request_timeout_ms_));
      for (int i = 0; !error && i < moved->cnt; ++i) {
        if (moved->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
          error.reset(rd_kafka_error_new(moved->elems[i].err, "topic %s partition %d: %s",
                                         moved->elems[i].topic, moved->elems[i].partition,
                                         rd_kafka_err2str(moved->elems[i].err)));
        }
      }
      if (!error || rd_kafka_error_code(error.get()) != RD_KAFKA_RESP_ERR__TIMED_OUT) break;
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

bool KafkaSource::MayRead(uint32_t index) const {
  if (!present_set_.count(index)) return false;
  return !group_ || group_->assigned().count(partitions_[index].key) > 0;
}

Status KafkaSource::DropFeeds(const std::vector<uint32_t>& indexes) {
  if (indexes.empty()) return Ok();
  PartitionList dropped{rd_kafka_topic_partition_list_new(static_cast<int>(indexes.size()))};
  PartitionList resumed{rd_kafka_topic_partition_list_new(0)};
  for (uint32_t index : indexes) {
    auto it = feeds_.find(index);
    if (it == feeds_.end()) continue;
    Feed& feed = it->second;
    rd_kafka_topic_partition_list_add(dropped.get(), feed.topic.c_str(), feed.partition);
    if (feed.paused) {
      rd_kafka_topic_partition_list_add(resumed.get(), feed.topic.c_str(), feed.partition);
    }
    // The queue stays until the client closes: messages librdkafka still puts in it (errors
    // of a deleted topic's partition) hold the partition, and destroying the client waits for
    // every partition, so it is emptied then (DrainQueues).
    retired_queues_.push_back(std::move(feed.queue));
    feeds_.erase(it);
  }
  // A pause outlives an assignment: lift it, or the partition would never fetch again.
  if (resumed->cnt > 0) rd_kafka_resume_partitions(consumer_.get(), resumed.get());
  if (feeds_.empty()) {
    rd_kafka_resp_err_t err = rd_kafka_assign(consumer_.get(), nullptr);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return MakeError(ErrorCode::kExternal, "kafka source: unassigning partitions: {}",
                       rd_kafka_err2str(err));
    }
    return Ok();
  }
  ErrorPtr error{rd_kafka_incremental_unassign(consumer_.get(), dropped.get())};
  if (error) {
    return MakeError(ErrorCode::kExternal, "kafka source: unassigning partitions: {}",
                     kafka::Describe(error.get()));
  }
  return Ok();
}

Status KafkaSource::DropAllFeeds() {
  std::vector<uint32_t> all;
  for (const auto& [index, feed] : feeds_) all.push_back(index);
  return DropFeeds(all);
}

void KafkaSource::DrainQueues() {
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

void KafkaSource::PauseFeeds(const std::vector<Feed*>& feeds) {
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

void KafkaSource::WakeFetcher(const std::string& topic, int32_t partition) {
  int64_t low = 0;
  int64_t high = 0;
  // The answer is not needed, so it is not waited for long: a broker that does not answer is
  // the read's own timeout to report, and a stop request must not wait behind it.
  (void)rd_kafka_query_watermark_offsets(consumer_.get(), topic.c_str(), partition, &low, &high,
                                         kConsumeWaitMs);
}

KafkaReader::KafkaReader(KafkaSource& source, std::vector<Range> ranges, int64_t lost)
    : source_(source), ranges_(std::move(ranges)), remaining_(ranges_.size()), lost_(lost) {
  messages_.resize(kConsumeBatch);
  for (Range& range : ranges_) range.slice_end = range.next + kSliceOffsets;
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

Status KafkaReader::Take(Range& range, MessagePtr message, InputChunk& chunk) {
  Feed& feed = *range.feed;
  if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      feed.eof_at = std::max(feed.eof_at, message->offset);
    }
    // Errors concern the range being read, not the next one (which an end of partition
    // reaches through feed.eof_at).
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
  feed.eof_at = -1;
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
    // The range whose turn it is: the current one until its slice is read, then the next one
    // not done, round robin (remaining_ > 0: one is left).
    if (ranges_[current_].done || ranges_[current_].next >= ranges_[current_].slice_end) {
      Range& was = ranges_[current_];
      if (!was.done) was.slice_end = was.next + kSliceOffsets;
      do {
        current_ = (current_ + 1) % ranges_.size();
      } while (ranges_[current_].done);
    }
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
    } else if (feed.eof_at >= range.end) {
      // The partition's end came while an earlier range was read, and everything below it was
      // taken: what the range has left are offsets without a record (transaction markers).
      Finish(range);
      continue;
    } else {
      // The call returns once it holds `wanted` messages or the wait is over: asking for no
      // more than the range lacks keeps the end of a range at the end of the log from waiting.
      const size_t wanted = static_cast<size_t>(
          std::clamp<int64_t>(std::min(range.end, range.slice_end) - range.next, 1,
                              static_cast<int64_t>(messages_.size())));
      count = rd_kafka_consume_batch_queue(feed.queue.get(), 0, messages_.data(), wanted);
      if (count == 0) {
        if (source_.ready_.load()) source_.WakeFetcher(range.topic, range.partition);
        count = rd_kafka_consume_batch_queue(feed.queue.get(), kConsumeWaitMs, messages_.data(),
                                             wanted);
      }
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

}  // namespace driftd::kafka_source_detail
