// The batch loop of a scaled-out query (scaleOut.enabled): several processes run one pipeline,
// the consumer group divides the work (engine/group.h), and every process runs two kinds of
// task on what it owns:
//   - for each source partition: decode its records, judge each row by the partition's own
//     watermark (engine/executor/event_clock.h), and route it to the task that owns its model
//     (hash of the model % tasks), in a row block with the partition's clock mark;
//   - for each task (a partition of the internal topics): the query's stages (aggregation,
//     drift) for its models, fed by the row blocks of every source partition, with a clock that
//     waits for every source partition's mark, so its windows close by the same watermark
//     wherever they are computed.
// A batch is one Kafka transaction: the sinks' rows, the row blocks, the tasks' state changes
// (changelog) and the consumed offsets with the group's metadata. The local checkpoint is
// written after it commits, as a cache: a task assigned to this process is restored from it
// and then from the changelog past its position. A batch whose transaction aborts (the group
// rebalanced) is dropped with all it changed in memory, and computed again from the committed
// offsets. So the output is the same as one process's, whatever the number of processes,
// crashes or rebalances.
//
// Lifecycle: created by the executor after Start; RunBatch from the executor's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/executor/event_clock.h"
#include "engine/executor/progress.h"
#include "engine/executor/row_block.h"
#include "engine/executor/stage.h"
#include "engine/group.h"
#include "engine/expr/projection.h"
#include "engine/value_decoder.h"
#include "engine/pipeline_spec.h"
#include "engine/sink.h"
#include "engine/source.h"

namespace driftd {

class ScaleOutRunner {
 public:
  struct Parts {
    const PipelineSpec* spec = nullptr;
    Source* source = nullptr;
    GroupMember* group = nullptr;
    /// The sinks; the one whose Deliver commits the transaction is the Kafka sink (the one
    /// that does not report IsDelivered true for every batch: the others are best effort).
    std::vector<Sink*> sinks;
    CheckpointStore* store = nullptr;
    ValueDecoder* decoder = nullptr;
    /// query.where and the derived columns, applied to the source's rows before they are
    /// routed to tasks (not owned).
    Projection* projection = nullptr;
    /// Fills the metadata columns the query reads, right after decoding (not owned).
    MetadataFiller* metadata = nullptr;
    size_t chunk_bytes = 4 << 20;
    std::function<bool()> stop_requested;
  };

  explicit ScaleOutRunner(Parts parts);
  ~ScaleOutRunner();

  /// What a batch did, for the executor's progress record and counters.
  struct BatchReport {
    int64_t input_rows = 0;
    int64_t output_rows = 0;
    int64_t lost_records = 0;
    SourceOffsets start;
    SourceOffsets end;
    std::vector<PartitionLag> lag;
    StageProgress stages;
    int64_t watermark_us = INT64_MIN;  // the lowest over the owned tasks
    int64_t max_event_us = INT64_MIN;
    int64_t tasks = 0;
    int64_t restored_tasks = 0;
    int64_t restore_ms = 0;
    int64_t filtered_rows = 0;  // removed by query.where
    int64_t aborted = 0;  // transactions aborted (a rebalance) before this batch committed
    int64_t state_keys_written = 0;
    int64_t state_bytes_written = 0;
    int64_t state_keys_deleted = 0;
  };

  /// Runs one batch with id `batch_id`. False when there was nothing to do (or the batch was
  /// aborted and will run again). `output` receives what the batch delivered.
  Result<bool> RunBatch(int64_t batch_id, BatchOutput& output, BatchReport& report);

 private:
  struct Task;
  struct SourcePartition;

  Status Reconcile(BatchReport& report);
  Status AddTask(uint32_t task, BatchReport& report);
  void DropEverything();
  uint32_t TaskOf(const RecordBatch& batch, size_t row, const std::string& partition) const;

  Parts parts_;
  EventClockOptions clock_options_;
  int model_column_ = -1;
  std::map<std::string, int64_t> position_;  // owned partitions' next offsets, both kinds
  std::map<uint32_t, std::unique_ptr<Task>> tasks_;
  std::map<std::string, std::unique_ptr<SourcePartition>> sources_;
  int32_t generation_ = -1;
  int64_t aborted_ = 0;
  InputChunk chunk_;
  RecordBatch records_;
  RowTimes times_;
  std::vector<DeadLetter> dead_letters_;
};

}  // namespace driftd
