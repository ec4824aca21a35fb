// The drift stage of a query: feeds decoded rows to the DriftMonitor per model and series,
// evaluates at the end of each batch, renders alert rows, and persists its state through the
// checkpoint. Owned and called by the executor's thread. A file baseline
// (drift.baseline {type: file, path}) is loaded in Create, so a missing or malformed reference
// fails the start with its path named.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/sink.h"
#include "engine/batch.h"
#include "engine/drift/monitor.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"

namespace driftd {

class DriftStage {
 public:
  static Result<std::unique_ptr<DriftStage>> Create(const PipelineSpec& spec);
  ~DriftStage();

  static bool OwnsKey(std::string_view key);
  Status Restore(std::string_view key, std::string_view value);

  void Observe(const RecordBatch& batch);
  /// End of a batch: alert rows into `alerts`, and, when some sink takes the evaluations
  /// stream, one row per closed window into `evaluations` (may be null).
  void Evaluate(int64_t batch_id, int64_t now_ms, OutputRows& alerts,
                OutputRows* evaluations = nullptr);
  void CollectDirty(std::vector<std::pair<std::string, std::string>>& puts);

  /// Per-model drift state (series in WARN / ALERT, values seen, roll-up) for the metrics
  /// endpoint; call on the executor's thread, e.g. after Evaluate. Empty before the first
  /// records.
  std::vector<DriftMonitor::ModelStats> ModelStats() const;
  /// Totals: models, series in ALERT, windows evaluated, skipped values.
  DriftMonitorStats Stats() const;

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
  const std::vector<Evaluation>& LastEvaluations() const;
  /// The latest evaluation of every (model, series) evaluated so far, restored ones included
  /// (they are persisted with the state, "drift-eval/<model>/<series>").
  std::vector<Evaluation> LatestEvaluations() const;

 private:
  class Impl;
  explicit DriftStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace driftd
