// The drift stage of a query: feeds decoded rows to the DriftMonitor per model and series,
// evaluates at the end of each batch (event-time windows close by the query clock's watermark),
// renders alert rows, and persists its state through the checkpoint. Owned and called by the
// executor's thread. It does no file I/O: a file baseline's reference (drift.baseline {type:
// file, path}) is read by config/ when the pipeline loads (BaselineSpec::reference) and parsed
// in Create, so a malformed reference fails `validate` and the start with its path named.
//
// Record-count windows number a model's values in the order they arrive, which is a fixed order
// only within one input partition: the stage reports models whose records come through more
// than one Kafka partition (a warning once per model, and ModelsAcrossPartitions()), since
// their windows then depend on batching and read order.
//
// On several threads (the pipeline's `threads`) the models are split over as many shards by a
// hash of their names, as the aggregation splits its groups: each shard is a monitor of its
// own with its models' state, and the stage feeds and evaluates the shards on a thread each
// (engine/executor/shard_pool.h), from the one lane the batch pipeline gives drift. A model's
// values reach its shard in the order one monitor would see them, each at its place in the
// batch's feed, so the shards' events and evaluations merge into one monitor's order (records
// first, then event-time windows by model name), and the rows, their order and the state are
// those of one thread, whatever the number. Shards live only in memory: a restart on another
// number of threads routes each persisted model's state to its shard there.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/batch.h"
#include "engine/drift/monitor.h"
#include "engine/executor/shard_pool.h"
#include "engine/executor/stage.h"
#include "engine/key_interner.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/sink.h"

namespace driftd {

class DriftStage final : public Stage {
 public:
  /// `keys`: ids of the values of the query's model column, shared with the aggregation, so a
  /// row's model is looked up once; used when it interns drift's model column (a string).
  /// `failed`, when given, says which part of the drift section a failure concerns, for
  /// `validate` to point at its key: the baseline's reference file (drift.baseline.path) or the
  /// rest of the section.
  enum class SetupPart { kSection, kBaseline };
  /// `shards` > 1: the models are split over that many shards by a hash of their names, each
  /// with a monitor of its own, fed and evaluated on threads of their own (ShardPool), with
  /// results (rows, their order, state) those of one shard. One shard when drift watches map
  /// keys (their caps count over all models) or has a file baseline.
  static Result<std::unique_ptr<DriftStage>> Create(const PipelineSpec& spec,
                                                    std::shared_ptr<KeyInterner> keys = nullptr,
                                                    SetupPart* failed = nullptr,
                                                    uint32_t shards = 1);
  /// How many shards hold the models.
  size_t shards() const { return shards_.size(); }
  ~DriftStage() override;

  std::string_view state_namespace() const override { return "drift"; }
  Status Restore(std::string_view key, std::string_view value) override;
  Status FinishRestore() override;
  void Process(const RecordBatch& batch, const RowTimes& times, BatchOutput& output) override;
  /// As Process, for the rows `order` lists, in its order (the order buffer's release:
  /// engine/executor/order_buffer.h). `model_ids`: each row's id in model_keys(), looked up
  /// already (empty when model_keys() is null).
  void ProcessInOrder(const RecordBatch& batch, const RowTimes& times,
                      std::span<const uint32_t> order, std::span<const uint32_t> model_ids);
  /// The interner drift looks its models up in (the `keys` given to Create, when drift uses
  /// it), or null.
  const std::shared_ptr<KeyInterner>& model_keys() const;
  bool HasClosableWindows(int64_t watermark_us) const override;
  void Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
              StageProgress& progress) override;
  void FlushKept(int64_t now_ms, StateChanges& changes) override;

  /// Per-model drift state (series in WARN / ALERT, values seen, roll-up) for the metrics
  /// endpoint; call on the executor's thread, e.g. after Finish. Empty before the first
  /// records. In (model, segment) order.
  std::vector<DriftMonitor::ModelStats> ModelStats() const;
  /// Totals: models, series in ALERT, windows evaluated, skipped values.
  DriftMonitorStats Stats() const;
  /// Record-count windows: models seen in more than one input partition so far.
  int64_t ModelsAcrossPartitions() const;

  /// What drift could not watch since start: values of map keys a model was not let in to
  /// (drift.maxKeysPerModel, maxKeys), and rows of segments it was not let in to
  /// (maxSegmentsPerModel). The batch's own counts are in its StageProgress.
  struct ShapeCounts {
    int64_t values_over_key_cap = 0;
    int64_t rows_over_segment_cap = 0;
  };
  const ShapeCounts& Counts() const;

  /// Per series, in the monitor's order: its name, whether it is categorical, and the
  /// categorical values and null values handed to the categorical and missing-value seams
  /// since start (drift_stage.cc, ObserveCategory / ObserveMissing).
  struct SeriesValues {
    std::string series;
    bool categorical = false;
    int64_t categories = 0;
    int64_t missing = 0;
  };
  std::vector<SeriesValues> SeriesValueCounts() const;

  /// Starts the model's baselines over (DriftMonitor::ResetBaselines); persisted with the
  /// next CollectDirty. False for an unknown model.
  bool ResetBaselines(const std::string& model);

  /// `driftd baseline build`: the reference statistics file (engine/drift/README.md) of the
  /// given reference records (JSON lines with the pipeline's schema), baselines computed as
  /// a `file` baseline of those records would be.
  static Result<std::string> BuildReferenceStatistics(const PipelineSpec& spec,
                                                      const std::string& records);

  /// The alert events and the evaluations of the last Evaluate (for the metrics).
  const std::vector<AlertEvent>& LastEvents() const;
  /// Packed as their windows closed (DriftMonitor::PackEvaluations): at 10,000 models a batch
  /// may close a window of every series, 130,000 of ~1.7 KB each as objects.
  const std::vector<PackedEvaluation>& LastEvaluations() const;
  /// The latest evaluation of every (model, series) evaluated so far, restored ones included
  /// (they are persisted with the state, "drift-eval/<model>/<series>").
  std::vector<PackedEvaluation> LatestEvaluations() const;

 private:
  class Impl;
  explicit DriftStage(std::vector<std::unique_ptr<Impl>> shards);
  // Rows to the shards: each shard's rows in feeding order, at their places in the batch's
  // whole feed, on the shards' threads when there are enough of them.
  void FeedShards(const RecordBatch& batch, const RowTimes& times,
                  std::span<const uint32_t> order, std::span<const uint32_t> model_ids);
  uint32_t ShardOfName(std::string_view model) const;
  // The shard a persisted key belongs to; shards_.size() for a key every shard reads.
  Result<size_t> ShardOfKey(std::string_view key) const;
  void RunShards(size_t rows, const std::function<void(size_t)>& work);

  std::vector<std::unique_ptr<Impl>> shards_;
  std::unique_ptr<ShardPool> pool_;
  // With several shards: the batch's events and evaluations merged, records fed in the
  // batch, the shard of each id of the model interner, and per-shard scratch.
  std::vector<AlertEvent> events_;
  std::vector<PackedEvaluation> evaluations_;
  mutable ShapeCounts counts_;
  uint64_t records_fed_ = 0;
  std::vector<uint32_t> shard_of_id_;
  std::vector<std::vector<uint32_t>> shard_rows_;
  std::vector<std::vector<uint64_t>> shard_ordinals_;
  std::vector<uint32_t> all_rows_;
  // What the shards write alike, as last written (Finish writes it once).
  std::string written_layout_;
  std::string written_table_;
};

}  // namespace driftd
