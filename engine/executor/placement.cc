#include "engine/executor/placement.h"

#include "engine/executor/outbox_codec.h"

namespace driftd {

LocalPlacement::LocalPlacement(const PipelineSpec& spec, QueryTask::Options task_options,
                               CheckpointStore& store, std::vector<std::unique_ptr<Sink>>& sinks)
    : spec_(spec), task_options_(std::move(task_options)), store_(store), sinks_(sinks) {
  task_options_.id = kScope;
  task_options_.tasks = 1;
}

Status LocalPlacement::Start(const std::optional<CommitRecord>& last, TaskMap& tasks,
                             int64_t& restored) {
  auto created = QueryTask::Create(spec_, task_options_);
  if (!created) return tl::unexpected(created.error());
  QueryTask& task = **created;
  Status status = Ok();
  DRIFTD_TRY(store_.ScanState([&](std::string_view encoded, std::string_view value) {
    if (!status) return;
    StateKeyView key;
    if (!DecodeStateKey(encoded, key)) {
      status = MakeError(ErrorCode::kCorruption,
                         "checkpoint {}: a state key of {} bytes is unreadable",
                         spec_.checkpoint_location, encoded.size());
      return;
    }
    if (key.scope != kScope) return;
    ++restored;
    status = task.Restore(key.ns, key.key, value);
  }));
  DRIFTD_TRY(status);
  DRIFTD_TRY(task.FinishRestore());
  // One process keeps its clock in the commit record.
  if (last) task.clock().Restore(last->max_event_us, last->watermark_us);
  tasks[kScope] = std::move(*created);
  return Ok();
}

Result<bool> LocalPlacement::Assign(TaskMap& tasks, SourceOffsets& position, Report& report) {
  (void)position;
  report.tasks = static_cast<int64_t>(tasks.size());
  return true;
}

EventClock& LocalPlacement::ReadClock(TaskMap& tasks) { return tasks.at(kScope)->clock(); }

bool LocalPlacement::BeginBatch(const std::vector<PartitionActivity>& activity, int64_t now_ms,
                                TaskMap& tasks) {
  tasks.at(kScope)->clock().BeginBatch(activity, now_ms);
  return false;
}

QueryTask* LocalPlacement::DirectTask(TaskMap& tasks) { return tasks.at(kScope).get(); }

Status LocalPlacement::Route(RecordBatch& rows, RowTimes& times, bool labels, TaskMap& tasks,
                             BatchOutput& output) {
  QueryTask& task = *tasks.at(kScope);
  if (labels) {
    task.FoldLabels(rows, times);
    return Ok();
  }
  task.Admit(rows, times);
  task.Fold(rows, times, output, task.clock().StampedWatermark());
  return Ok();
}

Result<bool> LocalPlacement::PrepareCommit(BatchWrite& write, BatchOutput& output) {
  // The batch's output waits in the outbox until every sink has it.
  write.outbox.batch_id = write.commit.batch_id;
  for (const auto& sink : sinks_) write.outbox.pending_sinks.push_back(sink->name());
  if (!write.outbox.pending_sinks.empty()) write.outbox.payload = EncodeBatchOutput(output);
  return true;
}

}  // namespace driftd
