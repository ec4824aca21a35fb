// What scale-out adds to the one batch loop (scaleOut.enabled: several processes run one
// pipeline, and the consumer group divides the work: engine/group.h). It is a Placement
// (engine/executor/placement.h), and adds exactly three things:
//   - assignment: the group says which source partitions this process reads and which tasks
//     (partitions of the internal topics) it runs; a task assigned here is restored from the
//     local checkpoint and then from its changelog past the checkpoint's position;
//   - routing: the rows of a source partition, decoded and stamped by the loop with the
//     partition's own clock, go to the task that owns their model (hash of the model % tasks)
//     in row blocks through the repartition topic, each block with the partition's clock mark;
//     a task takes its blocks, judges their rows by its own watermark too, and folds them. Its
//     clock waits for every source partition's mark, so its windows close by the same
//     watermark wherever they are computed;
//   - the changelog: each task's state changes (and its clock) go to its changelog partition,
//     and the batch commits as one Kafka transaction: the sinks' rows, the row blocks, the
//     changelog and the consumed offsets with the group's metadata. The local checkpoint is
//     written after it, as a cache. A batch whose transaction aborts (the group rebalanced) is
//     dropped with all it changed in memory, and computed again from the committed offsets.
// Everything else (decoding, dead letters, metadata and derived columns, the filter, the tasks'
// stages, progress) is the loop's, the same as one process's. So the output is one process's,
// whatever the number of processes, crashes or rebalances.
//
// Lifecycle: as Placement; created by the executor after the source started. The loop's
// thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/executor/event_clock.h"
#include "engine/executor/placement.h"
#include "engine/executor/row_block.h"
#include "engine/group.h"
#include "engine/pipeline_spec.h"
#include "engine/sink.h"
#include "engine/source.h"

namespace driftd {

class ScaledOutPlacement final : public Placement {
 public:
  struct Parts {
    const PipelineSpec* spec = nullptr;
    Source* source = nullptr;
    GroupMember* group = nullptr;
    /// The sinks; the one whose Deliver commits the transaction is the Kafka sink (the one
    /// that does not report IsDelivered true for every batch: the others are best effort).
    std::vector<Sink*> sinks;
    CheckpointStore* store = nullptr;
    /// The tasks' clocks and the clock that stamps the source partitions' rows.
    EventClockOptions clock;
    /// The prefix of the labels input's offsets keys ("labels/"), when the query has labels.
    std::string labels_prefix;
  };

  explicit ScaledOutPlacement(Parts parts);
  ~ScaledOutPlacement() override;

  Status Start(const std::optional<CommitRecord>& last, TaskMap& tasks,
               int64_t& restored) override;
  Result<bool> Assign(TaskMap& tasks, SourceOffsets& position, Report& report) override;
  EventClock& ReadClock(TaskMap& tasks) override;
  bool BeginBatch(const std::vector<PartitionActivity>& activity, int64_t now_ms,
                  TaskMap& tasks) override;
  bool IsTaskInput(std::string_view key) const override;
  QueryTask* DirectTask(TaskMap& tasks) override;
  Status Route(RecordBatch& rows, RowTimes& times, bool labels, TaskMap& tasks,
               BatchOutput& output) override;
  Status TakeTaskInput(const InputChunk& chunk, TaskMap& tasks, BatchOutput& output) override;
  void TaskFinished(QueryTask& task, StateWrites& writes, size_t puts_from, size_t deletes_from,
                    BatchOutput& output) override;
  void EndBatch(BatchOutput& output) override;
  Result<bool> PrepareCommit(BatchWrite& write, BatchOutput& output) override;
  void Committed() override;
  const Sink* committed_through() const override { return committer_; }

 private:
  struct SourcePartition;
  /// Whether an offsets key is one of the labels input's partitions.
  bool IsLabelsPartition(std::string_view key) const;

  Status AddTask(uint32_t task, TaskMap& tasks, Report& report);
  uint32_t TaskOf(const RecordBatch& batch, size_t row, const std::string& partition) const;
  /// The task that joins the row's key to labels (`column`: its join key); `otherwise` when the
  /// key is null.
  uint32_t JoinTaskOf(const RecordBatch& batch, size_t row, int column, uint32_t otherwise) const;

  Parts parts_;
  int model_column_ = -1;
  /// The labels' join key: in the query's rows (predictions) and in the labels'.
  int prediction_key_column_ = -1;
  int label_key_column_ = -1;
  /// The source partitions this process reads, and their clock.
  std::map<std::string, std::unique_ptr<SourcePartition>> sources_;
  EventClock read_clock_;
  /// Every source partition of the query (tasks' rows name theirs by its index here).
  std::vector<std::string> all_sources_;
  /// The source partitions' clock marks of the batch (BeginBatch, EndBatch).
  std::map<std::string, ClockMark> marks_;
  int32_t generation_ = -1;
  bool assigned_ = false;  // position holds only what the group assigned
  int64_t aborted_ = 0;
  /// Tasks whose memory an aborted batch left behind: dropped at the next Assign.
  bool drop_everything_ = false;
  Sink* committer_ = nullptr;
  /// Reused per block (TakeTaskInput).
  RecordBatch block_rows_;
  RowTimes block_times_;
};

}  // namespace driftd
