// Is the model still right? Ground truth arrives later, on an input of its own (labels), keyed
// by a request id. This stage joins each prediction to its label within an event-time bound,
// as Spark's stream-stream join with a watermark does, and judges each model's performance per
// event-time window of the predictions:
//
//   - The join. A prediction waits in state until the watermark passes its event time plus the
//     bound (labels.within); a label waits until the watermark passes its own time plus the
//     bound for a prediction to come. A label belongs to the prediction with its key whose event
//     time is within the bound of its own; of several, the earliest (then the smallest value)
//     counts, the others are duplicates. Every outcome is counted: labelled, never labelled, a
//     label without a prediction, a label outside the bound or behind the watermark, a
//     duplicate label or prediction. An entry's outcome is decided when the watermark passes
//     its deadline, from what arrived by then, so it does not depend on the batching or on
//     the order the two inputs are read in; state holds bound x rate entries.
//   - Coverage. Per model and window: predictions, the share labelled by the window's end (of
//     event time) and in the end, the label delay distribution. Realized performance is judged
//     only for a window whose coverage reached performance.minCoverage; one whose labels never
//     came says so ("labels_missing"), never "no drift".
//   - Realized performance, from mergeable sums: classification (confusion counts at the
//     threshold: accuracy, precision, recall, F1; ROC AUC from per-class score histograms,
//     with the error its bins allow; log loss; expected calibration error), regression (MAE,
//     RMSE, MAPE, bias).
//   - Estimated performance, before labels: each window's predictions are counted per score bin
//     (per prediction bucket for regression) as they arrive; a bin's probability of a positive
//     is calibrated on the baseline's labelled predictions (CBPE's idea), giving the expected
//     confusion matrix and so accuracy, F1 and ROC AUC with a confidence band; for regression
//     each bucket's mean absolute error on the baseline gives the expected MAE (DLE's idea,
//     binned). Emitted when the window closes (watermark past its end), again beside the
//     realized values once the labels are in.
//   - Judging. The first performance.baselineWindows windows with coverage form a model's
//     baseline (its accuracy or MAE, its calibration). Later windows' realized and estimated
//     values are judged against it with calibrated levels (a one-sided z at the window's and
//     the baseline's n, as a score: engine/drift/calibration.h) and an effect floor
//     (performance.minDrop), through the alert state machine; alert ids are deterministic.
//
// Output: one row per model and window on the performance stream ("estimated" when the window
// closes, "final" once its labels are in), and alerts on the alerts stream.
//
// Two sides, one task each when scaled out (one process plays both for every key and model):
//   - The joining task of a key (StableHash(key) % tasks): engine/executor/scale_out.cc routes
//     each label there, and a copy of each prediction whose model another task owns. It joins,
//     keeps its part of each model's windows, and hands each part to the model's task when the
//     window closes (what arrived) and when its labels are in (the whole part), in a message on
//     the repartition topic (row_block.h's TaskMessageBlock) in the batch's transaction. The
//     message also says up to which due point (a window's end, or its end plus the bound) its
//     watermark has handed everything over.
//   - The model's task merges the parts (every sum exact: ExactSum, so the merged window is the
//     one a single task would have summed) and judges a window only once every task has handed
//     over up to its due point. The judged sequence is then the one of one process, whatever
//     the number of tasks or processes and the batching.
//
// Lifecycle and threading: a Stage (engine/executor/stage.h); one lane, the executor's thread or
// one worker at a time.
#pragma once

#include <memory>
#include <vector>

#include "engine/drift/monitor.h"
#include "engine/executor/stage.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/row_shape.h"

namespace driftd {

class PerformanceStage final : public Stage {
 public:
  /// `spec.labels.enabled` must hold and the spec have passed validation.
  static Result<std::unique_ptr<PerformanceStage>> Create(const PipelineSpec& spec);
  ~PerformanceStage() override;

  std::string_view state_namespace() const override { return "perf"; }
  Status Restore(std::string_view key, std::string_view value) override;
  /// Predictions (the query's rows).
  void Process(const RecordBatch& batch, const RowTimes& times, BatchOutput& output) override;
  /// Scaled out: the stage's task and how many tasks share the query (before Restore).
  /// Default: task 0 of 1.
  void SetTask(uint32_t id, uint32_t tasks);
  /// A message another task's stage sent this task (TaskMessageBody of a repartition block).
  Status Receive(std::string_view message);
  bool TakesLabels() const override { return true; }
  /// Rows of the labels input (its schema).
  void ProcessLabels(const RecordBatch& labels, const RowTimes& times) override;
  bool HasClosableWindows(int64_t watermark_us) const override;
  void Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
              StageProgress& progress) override;

  /// The alert events and judged values of the last Finish, for metrics and the status page.
  const std::vector<AlertEvent>& last_events() const;
  const std::vector<SharedEvaluation>& last_evaluations() const;
  JoinCounts counts() const;

 private:
  class Impl;
  explicit PerformanceStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The pipeline as the labels input's decoder and connector see it: the labels' schema and
/// source in the query's place, scaled out as the query is.
PipelineSpec LabelsPipeline(const PipelineSpec& spec);

}  // namespace driftd
