// The aggregation and select stages, and CreateStages. The drift stage is drift_stage.cc.
#include <algorithm>
#include <iterator>
#include <memory>

#include "engine/aggregation.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/stage.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

// Appends: a scaled-out process runs one aggregation per task, all into one batch output.
void MoveRows(EmittedRows& from, OutputRows& to) {
  if (to.columns.empty() || to.columns.size() < from.columns.size()) {
    to.columns = std::move(from.columns);
  }
  if (to.rows.empty()) {
    to.rows = std::move(from.rows);
    to.keys = std::move(from.keys);
  } else {
    std::move(from.rows.begin(), from.rows.end(), std::back_inserter(to.rows));
    std::move(from.keys.begin(), from.keys.end(), std::back_inserter(to.keys));
  }
  from = EmittedRows{};
}

/// Which result-table forms the pipeline's stats sinks ask for.
struct StatsModes {
  bool append = false;
  bool update = false;
  bool complete = false;

  explicit StatsModes(const PipelineSpec& spec) {
    for (const SinkSpec& sink : spec.sinks) {
      if (sink.stream != StreamKind::kStats) continue;
      switch (sink.output_mode) {
        case OutputMode::kAppend: append = true; break;
        case OutputMode::kUpdate: update = true; break;
        case OutputMode::kComplete: complete = true; break;
      }
    }
  }
};

// group by + aggregates (+ window): the result table, in every output mode a sink asks for.
class AggregationStage final : public Stage {
 public:
  AggregationStage(std::unique_ptr<Aggregator> aggregator, StatsModes modes)
      : aggregator_(std::move(aggregator)), modes_(modes) {}

  std::string_view state_namespace() const override { return "agg"; }

  Status Restore(std::string_view key, std::string_view value) override {
    return aggregator_->Restore(key, value);
  }

  void Process(const RecordBatch& batch, const RowTimes& times, BatchOutput&) override {
    aggregator_->Add(batch, times);
  }

  bool HasClosableWindows(int64_t watermark_us) const override {
    return aggregator_->HasClosableWindows(watermark_us);
  }

  void Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
              StageProgress& progress) override {
    EmittedRows rows;
    if (modes_.update) {
      aggregator_->EmitUpdated(rows);
      MoveRows(rows, output.stats_update);
    }
    if (modes_.complete) {
      aggregator_->EmitAll(rows);
      MoveRows(rows, output.stats_complete);
    }
    if (modes_.append) {
      aggregator_->EmitClosed(context.watermark_us, rows);
      MoveRows(rows, output.stats_append);
    }
    progress.rows_updated += aggregator_->rows_updated_last_batch();
    progress.dropped_by_watermark += aggregator_->TakeRowsDroppedByWatermark();
    progress.without_event_time += aggregator_->TakeRowsWithoutEventTime();
    aggregator_->EndBatch(context.watermark_us, !modes_.complete, changes.puts, changes.deletes);
    progress.num_groups += static_cast<int64_t>(aggregator_->num_groups());
    progress.num_open_windows += static_cast<int64_t>(aggregator_->num_open_windows());
  }

 private:
  std::unique_ptr<Aggregator> aggregator_;
  StatsModes modes_;
};

// A query without aggregation: its input rows (the selected columns) as the stats stream, in
// append and update mode alike. A struct's leaves are written back as a nested object.
class SelectStage final : public Stage {
 public:
  SelectStage(const PipelineSpec& spec, StatsModes modes)
      : schema_(QuerySchema(spec)), modes_(modes) {
    std::vector<int> columns;
    for (const std::string& name : spec.query.select) columns.push_back(schema_.IndexOf(name));
    if (columns.empty()) {
      for (size_t i = 0; i < spec.schema.fields.size(); ++i) columns.push_back(static_cast<int>(i));
    }
    for (int index : columns) {
      const Field& field = schema_.fields[static_cast<size_t>(index)];
      const std::vector<std::string> keys =
          field.path.empty() ? std::vector<std::string>{field.name} : field.path;
      OutNode* node = &root_;
      for (size_t k = 0; k + 1 < keys.size(); ++k) {
        auto it = std::find_if(node->children.begin(), node->children.end(),
                               [&](const OutNode& child) {
                                 return child.column < 0 && child.key == keys[k];
                               });
        if (it == node->children.end()) {
          node->children.push_back(OutNode{keys[k], -1, {}});
          it = node->children.end() - 1;
        }
        node = &*it;
      }
      node->children.push_back(OutNode{keys.back(), index, {}});
    }
  }

  std::string_view state_namespace() const override { return ""; }
  Status Restore(std::string_view, std::string_view) override { return Ok(); }

  void Process(const RecordBatch& batch, const RowTimes&, BatchOutput& output) override {
    if (!modes_.append && !modes_.update) return;
    for (size_t row = 0; row < batch.num_rows; ++row) {
      std::string json;
      Render(root_, batch, row, json);
      if (modes_.append) output.stats_append.Add("", json);
      if (modes_.update) output.stats_update.Add("", std::move(json));
    }
  }

  void Finish(const BatchContext&, BatchOutput&, StateChanges&, StageProgress&) override {}

 private:
  // The output object: a column's value, or (column < 0) an object of its children.
  struct OutNode {
    std::string key;
    int column = -1;
    std::vector<OutNode> children;
  };

  static void Render(const OutNode& node, const RecordBatch& batch, size_t row, std::string& out) {
    JsonObject object(out);
    for (const OutNode& child : node.children) {
      object.Key(child.key);
      if (child.column >= 0) {
        AppendJsonValue(out, batch.columns[static_cast<size_t>(child.column)], row);
      } else {
        Render(child, batch, row, out);
      }
    }
    object.Close();
  }

  Schema schema_;
  StatsModes modes_;
  OutNode root_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Stage>>> CreateStages(const PipelineSpec& spec) {
  std::vector<std::unique_ptr<Stage>> stages;
  const StatsModes modes(spec);
  if (spec.query.IsAggregation()) {
    auto aggregator = Aggregator::Create(spec.query, QuerySchema(spec));
    if (!aggregator) return tl::unexpected(aggregator.error());
    stages.push_back(std::make_unique<AggregationStage>(std::move(*aggregator), modes));
  } else {
    stages.push_back(std::make_unique<SelectStage>(spec, modes));
  }
  if (spec.drift.enabled) {
    auto drift = DriftStage::Create(spec);
    if (!drift) return tl::unexpected(drift.error());
    stages.push_back(std::move(*drift));
  }
  return stages;
}

}  // namespace driftd
