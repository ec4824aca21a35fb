#include "engine/executor/drift_stage.h"

namespace driftd {

class DriftStage::Impl {};

Result<std::unique_ptr<DriftStage>> DriftStage::Create(const PipelineSpec&) {
  return MakeError(ErrorCode::kConfig, "drift detection is not available in this build yet");
}

DriftStage::DriftStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DriftStage::~DriftStage() = default;
bool DriftStage::OwnsKey(std::string_view key) { return !key.empty() && key[0] == 'd'; }
Status DriftStage::Restore(std::string_view, std::string_view) { return Ok(); }
void DriftStage::Observe(const RecordBatch&) {}
void DriftStage::Evaluate(int64_t, int64_t, OutputRows&) {}
void DriftStage::CollectDirty(std::vector<std::pair<std::string, std::string>>&) {}

}  // namespace driftd
