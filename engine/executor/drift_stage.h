// The drift stage of a query: feeds decoded rows to the DriftMonitor per model and series,
// evaluates at the end of each batch, renders alert rows, and persists its state through the
// checkpoint. Owned and called by the executor's thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/sink.h"
#include "engine/batch.h"
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
  void Evaluate(int64_t batch_id, int64_t now_ms, OutputRows& alerts);
  void CollectDirty(std::vector<std::pair<std::string, std::string>>& puts);

 private:
  class Impl;
  explicit DriftStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace driftd
