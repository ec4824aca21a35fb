#include "engine/executor/model_gate.h"

#include <algorithm>
#include <cstring>

#include "engine/expr/projection.h"
#include "engine/log.h"

namespace driftd {

std::unique_ptr<ModelGate> ModelGate::Create(const PipelineSpec& spec, uint32_t tasks) {
  std::string column =
      spec.drift.enabled && !spec.drift.model_column.empty() ? spec.drift.model_column : "";
  if (column.empty() && !spec.query.group_by.empty()) column = spec.query.group_by[0];
  if (column.empty()) return nullptr;
  const Schema schema = QuerySchema(spec);
  const int index = schema.IndexOf(column);
  if (index < 0 || schema.fields[static_cast<size_t>(index)].type != FieldType::kString) {
    return nullptr;
  }
  const int64_t share =
      (spec.query.max_models + static_cast<int64_t>(tasks) - 1) / static_cast<int64_t>(tasks);
  return std::unique_ptr<ModelGate>(
      new ModelGate(index, share, spec.query.model_overflow, spec.name));
}

Status ModelGate::Restore(std::string_view key, std::string_view value) {
  (void)value;
  admitted_.emplace(key);
  return Ok();
}

bool ModelGate::Apply(RecordBatch& batch, RowTimes* times) {
  Column& models = batch.columns[static_cast<size_t>(column_)];
  size_t over = 0;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    if (models.IsNull(row)) continue;
    const std::string_view model = models.String(row);
    const Sketch sketch = SketchOf(model);
    Recent& recent = recent_[SlotOf(sketch)];
    if (recent.sketch == sketch && (model.size() <= 16 || recent.name == model)) [[likely]] {
      continue;
    }
    bool admitted = true;
    if (admitted_.find(model) != admitted_.end() || model == kOtherModel) {
      // admitted before, or the overflow's own name
    } else if (static_cast<int64_t>(admitted_.size()) < max_models_) {
      admitted_.emplace(model);
      fresh_.emplace_back(model);
    } else {
      admitted = false;
      if (!warned_) {
        warned_ = true;
        GetLogger("engine")->warn(
            "pipeline {}: {} models, the cap (query.maxModels); rows of further models "
            "(first '{}') are {} and counted (rowsOverModelCap)",
            pipeline_, admitted_.size(), model.substr(0, 200),
            overflow_ == ModelOverflow::kDrop ? "dropped" : "kept under the model \"(other)\"");
      }
    }
    if (admitted) {
      recent.sketch = sketch;
      recent.name.assign(model.size() > 16 ? model : std::string_view());
      continue;
    }
    if (keep_.empty()) keep_.assign(batch.num_rows, 1);
    keep_[row] = 0;
    ++over;
  }
  if (over == 0) return false;
  over_in_batch_ += static_cast<int64_t>(over);
  if (overflow_ == ModelOverflow::kDrop) {
    if (times != nullptr) {
      size_t out = 0;
      for (size_t row = 0; row < keep_.size(); ++row) {
        if (keep_[row] == 0) continue;
        times->event_us[out] = times->event_us[row];
        times->late_before[out] = times->late_before[row];
        ++out;
      }
      times->event_us.resize(out);
      times->late_before.resize(out);
    }
    KeepRows(batch, keep_);
  } else {
    // The column is rebuilt with "(other)" for the rows over the cap.
    Column renamed;
    renamed.type = models.type;
    renamed.str_offsets.push_back(0);
    for (size_t row = 0; row < batch.num_rows; ++row) {
      if (keep_[row] == 0) {
        renamed.valid.push_back(1);
        renamed.str_data.append(kOtherModel);
        renamed.str_offsets.push_back(static_cast<uint32_t>(renamed.str_data.size()));
      } else {
        renamed.AppendRow(models, row);
      }
    }
    models = std::move(renamed);
  }
  keep_.clear();
  return true;
}

void ModelGate::Finish(StateChanges& changes, StageProgress& progress) {
  for (std::string& model : fresh_) changes.puts.emplace_back(std::move(model), std::string());
  fresh_.clear();
  progress.rows_over_model_cap += over_in_batch_;
  progress.models += models();
  over_in_batch_ = 0;
}

}  // namespace driftd
