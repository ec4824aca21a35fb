// Where a query's tasks run and how rows reach them: the seam of the one batch loop
// (engine/executor/executor.cc). The loop is the same in every mode: plan the batch; read it
// and, in one place, decode each chunk, set its dead letters aside, fill the metadata columns,
// apply the derived columns and the filter, and stamp the rows with the clock that read them;
// hand the rows to the placement; finish every task; commit; deliver; report progress. What
// differs between modes is behind this interface, and nothing else does:
//   - LocalPlacement (one process): one task, scope 0, owns every partition of every input.
//     Rows go straight into it, its clock is the one that stamps them, and the checkpoint's
//     commit, with the batch's output in its outbox, is the batch's commit.
//   - ScaledOutPlacement (scaleOut: engine/executor/scale_out.h): the consumer group assigns
//     source partitions and tasks; rows are routed through the repartition topic to the task
//     that owns their model; a task's state changes also go to the changelog; the batch
//     commits as one Kafka transaction, the checkpoint after it as a cache.
//
// Lifecycle: created by the executor once the checkpoint and the sinks are open; Start once,
// then per batch Assign, BeginBatch, Route and TakeTaskInput per chunk, TaskFinished per task,
// EndBatch, PrepareCommit, Committed. The loop's thread only (Route is not called on a batch
// on several threads: that one folds DirectTask's lanes itself).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/checkpoint.h"
#include "engine/executor/event_clock.h"
#include "engine/executor/task.h"
#include "engine/result.h"
#include "engine/sink.h"
#include "engine/source.h"

namespace driftd {

/// The tasks this process runs, by id.
using TaskMap = std::map<uint32_t, std::unique_ptr<QueryTask>>;

class Placement {
 public:
  /// What placing the tasks did before a batch, for its progress record.
  struct Report {
    int64_t tasks = 0;           // tasks this process runs
    int64_t restored_tasks = 0;  // tasks restored before this batch
    int64_t restore_ms = 0;
    int64_t aborted = 0;  // batches not committed (a rebalance) and computed again, so far
  };

  virtual ~Placement() = default;

  /// At start, once the checkpoint is open: the tasks that run from the start, restored from
  /// the checkpoint whose last commit is `last`; `restored` counts the entries.
  virtual Status Start(const std::optional<CommitRecord>& last, TaskMap& tasks,
                       int64_t& restored) = 0;

  /// Between batches: makes `tasks` the tasks this process runs (restoring new ones, dropping
  /// those that went elsewhere) and `position` the next offsets of what it reads. False when it
  /// owns nothing yet.
  virtual Result<bool> Assign(TaskMap& tasks, SourceOffsets& position, Report& report) = 0;

  /// The clock that stamps the rows read from the source's partitions.
  virtual EventClock& ReadClock(TaskMap& tasks) = 0;

  /// After the batch is planned: what the plan says of each clock partition it reads. True when
  /// the batch must run although it reads nothing and no window is due (a reader's clock moved
  /// that tasks elsewhere wait for).
  virtual bool BeginBatch(const std::vector<PartitionActivity>& activity, int64_t now_ms,
                          TaskMap& tasks) = 0;

  /// Whether the offsets key is a task's input (its records are TakeTaskInput's, read after
  /// the source's own).
  virtual bool IsTaskInput(std::string_view key) const {
    (void)key;
    return false;
  }

  /// The task the source's rows go straight into, which a batch on several threads folds
  /// lane by lane; null when rows are routed elsewhere.
  virtual QueryTask* DirectTask(TaskMap& tasks) = 0;

  /// Decoded, stamped rows of the source's partitions (`labels`: of the labels input), for the
  /// tasks that own them.
  virtual Status Route(RecordBatch& rows, RowTimes& times, bool labels, TaskMap& tasks,
                       BatchOutput& output) = 0;

  /// A chunk of the tasks' own inputs.
  virtual Status TakeTaskInput(const InputChunk& chunk, TaskMap& tasks, BatchOutput& output) {
    (void)chunk;
    (void)tasks;
    (void)output;
    return Ok();
  }

  /// `task` finished its batch: its changes are `writes` from puts_from and deletes_from on.
  virtual void TaskFinished(QueryTask& task, StateWrites& writes, size_t puts_from,
                            size_t deletes_from, BatchOutput& output) {
    (void)task;
    (void)writes;
    (void)puts_from;
    (void)deletes_from;
    (void)output;
  }

  /// The batch's end, before its commit: what the placement sends on with the batch.
  virtual void EndBatch(BatchOutput& output) { (void)output; }

  /// Prepares the checkpoint's commit of the batch (the loop writes it next): the outbox, or
  /// the Kafka transaction that is the batch's commit. False: the batch did not commit (the
  /// group rebalanced); the tasks' memory of it is gone, and it is computed again.
  virtual Result<bool> PrepareCommit(BatchWrite& write, BatchOutput& output) = 0;

  /// The batch committed (after every task's Committed).
  virtual void Committed() {}

  /// The sink the commit delivered the batch to, if any: the loop then delivers to the others
  /// once, at best, and marks nothing in the checkpoint. Null: every sink gets the batch from
  /// the outbox, with retries, and is marked delivered.
  virtual const Sink* committed_through() const { return nullptr; }
};

/// One process runs the whole query as one task.
class LocalPlacement final : public Placement {
 public:
  /// The scope of a query's state when one process runs all of it.
  static constexpr uint32_t kScope = 0;

  /// `task_options` for the task (its id is kScope). `store` and `sinks` outlive the placement.
  LocalPlacement(const PipelineSpec& spec, QueryTask::Options task_options,
                 CheckpointStore& store, std::vector<std::unique_ptr<Sink>>& sinks);

  Status Start(const std::optional<CommitRecord>& last, TaskMap& tasks,
               int64_t& restored) override;
  Result<bool> Assign(TaskMap& tasks, SourceOffsets& position, Report& report) override;
  EventClock& ReadClock(TaskMap& tasks) override;
  bool BeginBatch(const std::vector<PartitionActivity>& activity, int64_t now_ms,
                  TaskMap& tasks) override;
  QueryTask* DirectTask(TaskMap& tasks) override;
  Status Route(RecordBatch& rows, RowTimes& times, bool labels, TaskMap& tasks,
               BatchOutput& output) override;
  Result<bool> PrepareCommit(BatchWrite& write, BatchOutput& output) override;

 private:
  const PipelineSpec& spec_;
  QueryTask::Options task_options_;
  CheckpointStore& store_;
  std::vector<std::unique_ptr<Sink>>& sinks_;
};

}  // namespace driftd
