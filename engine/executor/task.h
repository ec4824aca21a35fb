// A task: the unit of execution of a query, in every mode, as Kafka Streams' StreamTask is. A
// task owns a slice of the query's work (run by one process: every partition of every input;
// scaled out: the models that hash to it, which reach it through the repartition topic), and
// with it the query's stages, a state scope (the u32 in front of each of its state keys), its
// share of the cap on models, drift's event-time order and an event-time clock. The batch loop
// (engine/executor/executor.cc) drives every task the same way, whatever the mode:
//   Admit      rows that reached the task, stamped by the clock that read them: the cap on
//              models applies (engine/executor/model_gate.h);
//   Fold       into its stages (drift through the order buffer when drift takes its values in
//              event-time order: engine/executor/order_buffer.h);
//   Finish     at the batch's end: the stages' rows, and its state changes under its scope;
//   Committed  once the batch committed: its clock moves to the next watermark.
// Which tasks a process runs and how rows reach them is the placement's
// (engine/executor/placement.h), not the task's.
//
// Lifecycle: Create; Restore for every persisted entry of the task's scope, then FinishRestore;
// then batches. The loop's thread; a batch on several threads folds one task's lanes on the
// pipeline's threads (engine/executor/chunk_pipeline.h), one lane on one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/drift/monitor.h"
#include "engine/executor/event_clock.h"
#include "engine/executor/stage.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/sink.h"

namespace driftd {

class ModelGate;
class OrderBuffer;

/// State changes of a batch with their keys encoded (EncodeStateKey: scope, namespace, key), as
/// the checkpoint's commit takes them.
struct StateWrites {
  StatePuts puts;
  std::vector<std::string> deletes;
};

class QueryTask {
 public:
  struct Options {
    /// The task's id, which is its state scope. Default: 0 (a query run by one process).
    uint32_t id = 0;
    /// How many tasks share the query (each admits its share of query.maxModels). Default: 1.
    uint32_t tasks = 1;
    /// Shards of a stage that splits its state (one lane each on several threads). Default: 1.
    uint32_t shards = 1;
    EventClockOptions clock;
    /// The offsets key of the partition a row's RecordPosition::partition names: drift's
    /// event-time order breaks ties by it. May be called from any thread of the batch.
    std::function<std::string(uint32_t)> partition_key;
  };

  static Result<std::unique_ptr<QueryTask>> Create(const PipelineSpec& spec, Options options);
  ~QueryTask();
  QueryTask(const QueryTask&) = delete;
  QueryTask& operator=(const QueryTask&) = delete;

  uint32_t id() const { return id_; }
  EventClock& clock() { return clock_; }
  const EventClock& clock() const { return clock_; }

  /// Namespace of a task's clock in its state: one entry per source partition, kept when the
  /// task may move to another process (PersistClock); a query run by one process keeps its
  /// clock in the commit record instead.
  static constexpr std::string_view kClockNamespace = "clock";
  /// The clock namespace's entry of the task's watermark (no partition's name: '#' is in no
  /// Kafka topic's or input's name).
  static constexpr std::string_view kWatermarkKey = "#watermark";

  /// Loads one persisted entry of the task's scope, by its namespace: a stage's, the admitted
  /// models, drift's waiting values, the clock. Another namespace (a stage the pipeline no
  /// longer has) is left alone.
  Status Restore(std::string_view ns, std::string_view key, std::string_view value);
  /// Called once after every entry was restored.
  Status FinishRestore();

  /// Whether a batch without input is due: the watermark in force, or the one the next batch
  /// will run with, closes a window of a stage or releases drift's waiting values.
  bool HasClosableWindows() const;

  /// Starts `model`'s drift baselines over in this task; false when it does not hold the model.
  bool ResetBaselines(const std::string& model);

  /// Rows that reached the task, stamped: applies the cap on models. Returns whether rows were
  /// dropped or renamed (lanes routed before must be routed again).
  bool Admit(RecordBatch& rows, RowTimes& times);
  /// Folds admitted rows into every stage, in the order the rows come. `stamped_watermark`:
  /// the watermark of the clock that stamped them, once it had stamped them; drift's waiting
  /// values before it go to drift at once (no row read later can come before them in their
  /// order: engine/executor/order_buffer.h). Without it (scaled out, where rows reach the task
  /// from other processes), they wait for Finish.
  void Fold(const RecordBatch& rows, const RowTimes& times, BatchOutput& output,
            std::optional<int64_t> stamped_watermark = std::nullopt);
  /// Rows of the labels input (its schema), for the stage that joins them.
  void FoldLabels(const RecordBatch& labels, const RowTimes& times);
  /// Predictions for the labels' join only, as they reached the task, before its model gate:
  /// scaled out, copies of other tasks' predictions whose join key this task joins, and its
  /// own rows before Admit (the join then sees every model's name as the copies do).
  void FoldForJoin(const RecordBatch& predictions, const RowTimes& times, BatchOutput& output);
  /// Whether the labels' join takes the task's own rows through FoldForJoin, before Admit, and
  /// Fold leaves it out (scaled out over several tasks).
  bool joins_before_gate() const { return joins_before_gate_; }
  /// A message from another task's stage (TaskMessageBody of a repartition block).
  Status Receive(std::string_view message);

  /// Lanes, for a batch on several threads: a lane folds one stage, or one shard of a stage
  /// with several; each sees the rows a sequential Fold would hand it, in their order.
  size_t lane_count() const { return lanes_.size(); }
  /// The rows of each sharded lane (`lane_rows` has lane_count() lists; the others are left
  /// alone). Reads only what the task was created with: any thread.
  void RouteToLanes(const RecordBatch& rows, std::vector<std::vector<uint32_t>>& lane_rows) const;
  /// Folds a chunk's rows into one lane: `lane_rows` are the lane's rows when it is sharded.
  /// `labels`: the rows are the labels input's.
  void FoldLane(size_t lane, const RecordBatch& rows, const RowTimes& times,
                std::span<const uint32_t> lane_rows, bool labels, BatchOutput& output,
                std::optional<int64_t> stamped_watermark = std::nullopt);

  /// Ends the batch: drift's values the watermark passed go to drift in their order, every
  /// stage appends its rows to `output`, and the task's state changes go to `writes` under its
  /// scope; counters add to `progress`.
  void Finish(const BatchContext& context, BatchOutput& output, StateWrites& writes,
              StageProgress& progress);
  /// At a clean stop: the state its stages kept back from their batches (Stage::FlushKept),
  /// under the task's scope.
  void FlushKept(int64_t now_ms, StateWrites& writes);
  /// The clock's entries that changed since the last commit (kClockNamespace), for a task that
  /// may move to another process.
  void PersistClock(StateWrites& writes);
  /// The batch committed: the clock runs the next batch with its next watermark.
  void Committed();

  /// Drift's values waiting for the watermark, or -1 when drift does not order them.
  int64_t order_buffered() const;
  /// Models admitted and the cap (0: no gate).
  int64_t models() const;
  int64_t max_models() const;

  /// The stages the metrics read (null: the query has none).
  const DriftStage* drift() const { return stages_.drift; }
  const PerformanceStage* performance() const { return stages_.performance; }
  /// The status page's history (one process only), whose restored part the metrics take.
  HistoryStage* history() { return stages_.history; }

 private:
  QueryTask(uint32_t id, EventClockOptions clock);

  struct Lane {
    Stage* stage = nullptr;
    uint32_t shard = 0;
    bool sharded = false;
  };

  const uint32_t id_;
  EventClock clock_;
  StageSet stages_;
  std::unique_ptr<ModelGate> gate_;
  // Scaled out with labels: the join takes the task's rows before the gate (FoldForJoin), and
  // Fold leaves the performance stage out.
  bool joins_before_gate_ = false;
  std::unique_ptr<OrderBuffer> order_;
  // Drift's released values to drift (an OrderBuffer::Take).
  std::function<void(const RecordBatch&, const RowTimes&, std::span<const uint32_t>,
                     std::span<const uint32_t>)>
      to_drift_;
  // Rows for drift into the order buffer, and out of it to drift those before `watermark`.
  void Order(const RecordBatch& rows, const RowTimes& times,
             std::optional<int64_t> watermark);
  std::vector<Lane> lanes_;
  /// The clock namespace's entry of the next batch's watermark (kWatermarkKey), if it has one.
  std::optional<EventClock::PartitionState> WatermarkEntry() const;
  /// Clock entries as last persisted (PersistClock), to write only what changed.
  std::map<std::string, std::string> saved_clock_;
  bool clock_persisted_ = false;
};

}  // namespace driftd
