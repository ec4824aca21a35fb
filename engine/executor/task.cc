#include "engine/executor/task.h"

#include <charconv>

#include <fmt/format.h>

#include "engine/checkpoint.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/model_gate.h"
#include "engine/executor/order_buffer.h"
#include "engine/executor/performance_stage.h"

namespace driftd {

namespace {

// A clock partition as the task's state keeps it: "max_us,more,idle".
std::string EncodeClockEntry(const EventClock::PartitionState& partition) {
  return fmt::format("{},{},{}", partition.max_us, partition.more_available ? 1 : 0,
                     partition.idle ? 1 : 0);
}

bool DecodeClockEntry(std::string_view value, int64_t& max_us, bool& more, bool& idle) {
  const size_t a = value.find(',');
  const size_t b = a == std::string_view::npos ? a : value.find(',', a + 1);
  if (b == std::string_view::npos) return false;
  const std::string_view max = value.substr(0, a);
  auto [end, ec] = std::from_chars(max.data(), max.data() + max.size(), max_us);
  if (ec != std::errc() || end != max.data() + max.size()) return false;
  more = value.substr(a + 1, b - a - 1) == "1";
  idle = value.substr(b + 1) == "1";
  return true;
}

// Appends a stage's changes to `writes` under the task's scope and the stage's namespace.
void Scope(uint32_t scope, std::string_view ns, StateChanges& changes, StateWrites& writes) {
  for (auto& [key, value] : changes.puts) {
    writes.puts.emplace_back(EncodeStateKey(scope, ns, key), std::move(value));
  }
  for (const std::string& key : changes.deletes) {
    writes.deletes.push_back(EncodeStateKey(scope, ns, key));
  }
}

}  // namespace

Result<std::unique_ptr<QueryTask>> QueryTask::Create(const PipelineSpec& spec, Options options) {
  std::unique_ptr<QueryTask> task(new QueryTask(options.id, options.clock));
  auto stages = CreateStageSet(spec, std::max<uint32_t>(1, options.shards));
  if (!stages) return tl::unexpected(stages.error());
  task->stages_ = std::move(*stages);
  if (task->stages_.performance != nullptr) {
    task->stages_.performance->SetTask(options.id, std::max<uint32_t>(1, options.tasks));
    task->joins_before_gate_ = options.tasks > 1;
  }
  task->gate_ = ModelGate::Create(spec, std::max<uint32_t>(1, options.tasks));
  if (task->stages_.drift != nullptr && OrderBuffer::Applies(spec)) {
    DriftStage* drift = task->stages_.drift;
    task->order_ = std::make_unique<OrderBuffer>(QuerySchema(spec), options.partition_key,
                                                 drift->model_keys());
    task->to_drift_ = [drift](const RecordBatch& rows, const RowTimes& times,
                              std::span<const uint32_t> order,
                              std::span<const uint32_t> model_ids) {
      drift->ProcessInOrder(rows, times, order, model_ids);
    };
  }
  for (auto& stage : task->stages_.all) {
    const uint32_t shards = stage->shard_count();
    for (uint32_t shard = 0; shard < shards; ++shard) {
      task->lanes_.push_back({stage.get(), shard, shards > 1});
    }
  }
  return task;
}

QueryTask::QueryTask(uint32_t id, EventClockOptions clock) : id_(id), clock_(clock) {}
QueryTask::~QueryTask() = default;

Status QueryTask::Restore(std::string_view ns, std::string_view key, std::string_view value) {
  if (ns == ModelGate::kNamespace) return gate_ ? gate_->Restore(key, value) : Ok();
  if (ns == OrderBuffer::kNamespace) return order_ ? order_->Restore(key, value) : Ok();
  if (ns == kClockNamespace) {
    int64_t max_us = INT64_MIN;
    bool more = false;
    bool idle = false;
    if (!DecodeClockEntry(value, max_us, more, idle)) {
      return MakeError(ErrorCode::kCorruption, "task {}: bad clock entry '{}'", id_, value);
    }
    if (key == kWatermarkKey) {
      clock_.RaiseWatermark(max_us);
    } else {
      clock_.Report(key, max_us, more, idle);
    }
    saved_clock_[std::string(key)] = std::string(value);
    return Ok();
  }
  for (auto& stage : stages_.all) {
    if (stage->state_namespace() == ns) return stage->Restore(key, value);
  }
  // A stage the pipeline no longer has (drift removed, say): its state is left alone.
  return Ok();
}

Status QueryTask::FinishRestore() {
  for (auto& stage : stages_.all) DRIFTD_TRY(stage->FinishRestore());
  return Ok();
}

bool QueryTask::HasClosableWindows() const {
  for (const int64_t watermark : {clock_.watermark_us(), clock_.NextWatermark()}) {
    if (order_ && order_->HasDue(watermark)) return true;
    for (const auto& stage : stages_.all) {
      if (stage->HasClosableWindows(watermark)) return true;
    }
  }
  return false;
}

bool QueryTask::ResetBaselines(const std::string& model) {
  return stages_.drift != nullptr && stages_.drift->ResetBaselines(model);
}

bool QueryTask::Admit(RecordBatch& rows, RowTimes& times) {
  return gate_ && gate_->Apply(rows, &times);
}

void QueryTask::Fold(const RecordBatch& rows, const RowTimes& times, BatchOutput& output,
                     std::optional<int64_t> stamped_watermark) {
  for (auto& stage : stages_.all) {
    if (joins_before_gate_ && stage.get() == stages_.performance) continue;
    if (order_ && stage.get() == stages_.drift) {
      Order(rows, times, stamped_watermark);  // drift takes them in event-time order
    } else {
      stage->Process(rows, times, output);
    }
  }
}

void QueryTask::FoldLabels(const RecordBatch& labels, const RowTimes& times) {
  for (auto& stage : stages_.all) {
    if (stage->TakesLabels()) stage->ProcessLabels(labels, times);
  }
}

void QueryTask::FoldForJoin(const RecordBatch& predictions, const RowTimes& times,
                            BatchOutput& output) {
  if (stages_.performance != nullptr) stages_.performance->Process(predictions, times, output);
}

Status QueryTask::Receive(std::string_view message) {
  // A pipeline whose labels were removed: what the join sent before is left, as its state is.
  if (stages_.performance == nullptr) return Ok();
  return stages_.performance->Receive(message);
}

void QueryTask::RouteToLanes(const RecordBatch& rows,
                             std::vector<std::vector<uint32_t>>& lane_rows) const {
  lane_rows.resize(lanes_.size());
  for (size_t lane = 0; lane < lanes_.size(); ++lane) {
    const Lane& at = lanes_[lane];
    if (!at.sharded || at.shard != 0) continue;
    const std::span<std::vector<uint32_t>> shards(lane_rows.data() + lane,
                                                  at.stage->shard_count());
    for (std::vector<uint32_t>& shard_rows : shards) shard_rows.clear();
    at.stage->Route(rows, shards);
  }
}

void QueryTask::FoldLane(size_t lane, const RecordBatch& rows, const RowTimes& times,
                         std::span<const uint32_t> lane_rows, bool labels, BatchOutput& output,
                         std::optional<int64_t> stamped_watermark) {
  const Lane& at = lanes_[lane];
  if (labels) {
    if (at.stage->TakesLabels() && at.shard == 0) at.stage->ProcessLabels(rows, times);
    return;
  }
  if (joins_before_gate_ && at.stage == stages_.performance) return;
  if (at.sharded) {
    at.stage->ProcessShard(at.shard, rows, times, lane_rows);
  } else if (order_ && at.stage == stages_.drift) {
    Order(rows, times, stamped_watermark);  // drift takes them in event-time order
  } else {
    // Only the select stage writes rows here, and no other lane writes them.
    at.stage->Process(rows, times, output);
  }
}

void QueryTask::Order(const RecordBatch& rows, const RowTimes& times,
                      std::optional<int64_t> watermark) {
  order_->Add(rows, times);
  if (watermark) order_->ReleaseMost(*watermark, to_drift_);
}

void QueryTask::Finish(const BatchContext& context, BatchOutput& output, StateWrites& writes,
                       StageProgress& progress) {
  if (order_) {
    // Drift's values that every partition has gone past, in their order.
    order_->Release(context.next_watermark_us, to_drift_);
    StateChanges changes;
    order_->Persist(changes);
    Scope(id_, OrderBuffer::kNamespace, changes, writes);
  }
  for (auto& stage : stages_.all) {
    StateChanges changes;
    stage->Finish(context, output, changes, progress);
    Scope(id_, stage->state_namespace(), changes, writes);
  }
  if (gate_) {
    StateChanges changes;
    gate_->Finish(changes, progress);
    Scope(id_, ModelGate::kNamespace, changes, writes);
  }
}

void QueryTask::FlushKept(int64_t now_ms, StateWrites& writes) {
  for (auto& stage : stages_.all) {
    StateChanges changes;
    stage->FlushKept(now_ms, changes);
    Scope(id_, stage->state_namespace(), changes, writes);
  }
}

void QueryTask::PersistClock(StateWrites& writes) {
  clock_persisted_ = true;
  auto put = [&](const std::string& name, std::string value) {
    auto saved = saved_clock_.find(name);
    if (saved != saved_clock_.end() && saved->second == value) return;
    writes.puts.emplace_back(EncodeStateKey(id_, kClockNamespace, name), std::move(value));
  };
  for (const EventClock::PartitionState& partition : clock_.Partitions()) {
    if (partition.max_us == INT64_MIN && partition.more_available && !partition.idle) {
      continue;  // still waiting for its first mark: nothing to keep
    }
    put(partition.name, EncodeClockEntry(partition));
  }
  // The watermark the next batch runs with: the partitions' marks alone may give an earlier
  // one (an idle partition that came back behind it), and it never moves back.
  if (const std::optional<EventClock::PartitionState> mark = WatermarkEntry()) {
    put(mark->name, EncodeClockEntry(*mark));
  }
}

std::optional<EventClock::PartitionState> QueryTask::WatermarkEntry() const {
  const int64_t watermark = clock_.NextWatermark();
  if (watermark == INT64_MIN) return std::nullopt;
  // As an idle partition's entry: a driftd before this one restores it as one, which never
  // holds its watermark.
  return EventClock::PartitionState{std::string(kWatermarkKey), watermark, false, true};
}

void QueryTask::Committed() {
  clock_.CommitBatch();
  if (!clock_persisted_) return;
  for (const EventClock::PartitionState& partition : clock_.Partitions()) {
    saved_clock_[partition.name] = EncodeClockEntry(partition);
  }
  if (const std::optional<EventClock::PartitionState> mark = WatermarkEntry()) {
    saved_clock_[mark->name] = EncodeClockEntry(*mark);
  }
}

int64_t QueryTask::order_buffered() const {
  return order_ ? static_cast<int64_t>(order_->size()) : -1;
}

int64_t QueryTask::models() const { return gate_ ? gate_->models() : 0; }
int64_t QueryTask::max_models() const { return gate_ ? gate_->max_models() : 0; }

}  // namespace driftd
