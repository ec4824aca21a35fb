// What the brokers say of the kafka source's partitions (kafka_source_impl.h describes the
// source): which exist (metadata, in a deterministic order that gives each its index), their
// watermarks, asked of all at once or of one while waiting for its broker, and the errors that
// report offsets lost to retention or deletion.
#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "connectors/kafka/kafka_source_impl.h"

namespace driftd::kafka_source_detail {

Error KafkaSource::DataLossErrorValue(const PartitionState& state, int64_t from,
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

tl::unexpected<Error> KafkaSource::DataLossError(const PartitionState& state, int64_t from,
                                                 const Watermarks& marks) const {
  return tl::unexpected(DataLossErrorValue(state, from, marks));
}

uint32_t KafkaSource::AddPartition(const std::string& topic, int32_t partition) {
  std::string key = kafka::PartitionKey(topic, partition);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  uint32_t index = static_cast<uint32_t>(partitions_.size());
  partitions_.push_back({topic, partition, key, 0, 0});
  index_.emplace(std::move(key), index);
  return index;
}

Result<uint32_t> KafkaSource::IndexOf(const std::string& key) {
  if (auto it = index_.find(key); it != index_.end()) return it->second;
  auto parsed = kafka::ParsePartitionKey(key);
  if (!parsed) return MakeError(ErrorCode::kCorruption, "'{}' is not a Kafka partition", key);
  return AddPartition(parsed->first, parsed->second);
}

Status KafkaSource::RefreshPartitions() {
  present_.clear();
  present_set_.clear();
  auto metadata = kafka::FetchMetadata(planner_.get(), nullptr, request_timeout_ms_);
  if (!metadata) return tl::unexpected(metadata.error().Wrap("kafka source"));
  SetReachable(true, "");
  if (options_.mode == Mode::kAssign) {
    // Explicit partitions are always part of the query; watermarks tell whether they exist.
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
  std::vector<std::pair<std::string, int32_t>> found;
  for (int t = 0; t < (*metadata)->topic_cnt; ++t) {
    const rd_kafka_metadata_topic_t& topic = (*metadata)->topics[t];
    std::string name = topic.topic;
    bool wanted = false;
    if (group_ && name == group_->repartition_topic()) {
      if (!owns_group_) continue;  // read by the first input's source
      wanted = true;               // the tasks' input
    } else if (options_.mode == Mode::kSubscribe) {
      wanted = std::find(options_.topics.begin(), options_.topics.end(), name) !=
               options_.topics.end();
    } else {
      wanted = kafka::PatternSubscribes(name, pattern_);
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

Status KafkaSource::CheckTopic(const rd_kafka_metadata_topic_t& topic) {
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

void KafkaSource::Mark(uint32_t index) {
  if (present_set_.insert(index).second) present_.push_back(index);
}

Result<Watermarks> KafkaSource::QueryWatermarks(PartitionState& state) {
  Watermarks marks;
  rd_kafka_resp_err_t err =
      rd_kafka_query_watermark_offsets(planner_.get(), state.topic.c_str(), state.partition,
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

Result<bool> KafkaSource::ListsPartition(const PartitionState& state) {
  auto metadata = kafka::FetchMetadata(planner_.get(), state.topic.c_str(), request_timeout_ms_);
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

std::vector<Result<Watermarks>> KafkaSource::QueryAllWatermarks(
    const std::vector<uint32_t>& indexes, bool waiting) {
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
          rd_kafka_offsets_for_times(planner_.get(), list.get(), request_timeout_ms_);
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

Result<Watermarks> KafkaSource::QueryWatermarksWaiting(PartitionState& state) {
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

}  // namespace driftd::kafka_source_detail
