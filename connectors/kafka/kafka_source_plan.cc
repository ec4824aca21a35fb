// Planning the kafka source's batches (kafka_source_impl.h describes the source): where a new
// query starts (startingOffsets), and a batch's offset range per partition, from the previous
// batch's end to the log's end (the last stable offset), bounded by maxOffsetsPerTrigger.
#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "connectors/kafka/kafka_source_impl.h"

namespace driftd::kafka_source_detail {

namespace {

// The offset that a startingOffsets value (an offset, kEarliest or kLatest) stands for.
int64_t OffsetFor(int64_t wanted, const Watermarks& marks) {
  return wanted == kEarliest ? marks.low : wanted == kLatest ? marks.high : wanted;
}

}  // namespace

Result<SourceOffsets> KafkaSource::InitialOffsets() {
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
    offsets[state.key] = OffsetFor(wanted, *marks);
  }
  return offsets;
}

Result<int64_t> KafkaSource::StartingOffsetOf(const std::string& key, bool task_input) {
  auto index = IndexOf(key);
  if (!index) return tl::unexpected(index.error());
  PartitionState& state = partitions_[*index];
  auto marks = QueryWatermarksWaiting(state);
  if (!marks) return tl::unexpected(marks.error());
  if (task_input || options_.starting_offsets == "earliest") return marks->low;
  if (options_.starting_offsets == "latest") return marks->high;
  // startingOffsets JSON, as Bind parsed it: a partition it leaves out starts at earliest.
  auto it = options_.starting_partitions.find(key);
  return OffsetFor(it == options_.starting_partitions.end() ? kEarliest : it->second, *marks);
}

Result<SourceOffsets> KafkaSource::PlanBatch(const SourceOffsets& start) {
  planned_blind_ = true;
  if (reached_.load() && !ready_.load()) {
    // An outage: requests would only time out. The health thread notices the brokers' return.
    RemindOutage();
    return start;
  }
  auto planned = PlanFrom(start);
  if (planned || planned.error().code() != ErrorCode::kExternal || !reached_.load()) {
    planned_blind_ = false;
    return planned;
  }
  // Brokers that answered before and fail now (unreachable, restarting, partitions without a
  // leader while they load their logs): no new data until they are back.
  SetReachable(false, planned.error().message());
  return start;
}

Result<SourceOffsets> KafkaSource::PlanFrom(const SourceOffsets& start) {
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
    int64_t high = marks->high;
    if (freeze_ && !(group_ && TaskOfInputKey(state.key))) {
      // Rows routed between tasks are not the inputs': they are read to their end.
      high = std::min(high, frozen_end_.try_emplace(state.key, high).first->second);
    }
    int64_t available = std::max<int64_t>(0, high - from);
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

}  // namespace driftd::kafka_source_detail
