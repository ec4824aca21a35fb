// The aggregation and select stages, and CreateStages. The drift stage is drift_stage.cc.
#include <iterator>
#include <memory>

#include "engine/aggregation.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/stage.h"
#include "engine/json_writer.h"
#include "engine/row_shape.h"

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
    const size_t first_put = changes.puts.size();
    aggregator_->EndBatch(context.watermark_us, !modes_.complete, changes.puts, changes.deletes);
    for (size_t i = first_put; i < changes.puts.size(); ++i) {
      progress.state_dirty_bytes += static_cast<int64_t>(changes.puts[i].second.size());
    }
    progress.num_groups += static_cast<int64_t>(aggregator_->num_groups());
    progress.num_open_windows += static_cast<int64_t>(aggregator_->num_open_windows());
  }

 private:
  std::unique_ptr<Aggregator> aggregator_;
  StatsModes modes_;
};

// A query without aggregation: its input rows (the selected columns) as the stats stream, in
// append and update mode alike.
class SelectStage final : public Stage {
 public:
  SelectStage(const PipelineSpec& spec, StatsModes modes)
      : schema_(QuerySchema(spec)), modes_(modes), columns_(SelectOutputColumns(spec)) {}

  std::string_view state_namespace() const override { return ""; }
  Status Restore(std::string_view, std::string_view) override { return Ok(); }

  void Process(const RecordBatch& batch, const RowTimes&, BatchOutput& output) override {
    if (!modes_.append && !modes_.update) return;
    for (size_t row = 0; row < batch.num_rows; ++row) {
      std::string json;
      Render(batch, row, json);
      if (modes_.append) output.stats_append.Add("", json);
      if (modes_.update) output.stats_update.Add("", std::move(json));
    }
  }

  void Finish(const BatchContext&, BatchOutput&, StateChanges&, StageProgress&) override {}

 private:
  // In step with the stats shape of a query without aggregation (engine/row_shape.cc).
  void Render(const RecordBatch& batch, size_t row, std::string& out) const {
    JsonObject object(out);
    for (int index : columns_) {
      const Field& field = schema_.fields[index];
      const Column& column = batch.columns[index];
      if (column.IsNull(row)) {
        object.Null(field.name);
        continue;
      }
      switch (field.type) {
        case FieldType::kString: object.String(field.name, column.String(row)); break;
        case FieldType::kDouble: object.Number(field.name, column.f64[row]); break;
        case FieldType::kLong:
        case FieldType::kInt: object.Int(field.name, column.i64[row]); break;
        case FieldType::kBoolean: object.Bool(field.name, column.i64[row] != 0); break;
        case FieldType::kTimestamp: object.Timestamp(field.name, column.i64[row]); break;
        case FieldType::kDoubleArray: {
          object.Key(field.name);
          out.push_back('[');
          for (size_t e = 0; e < column.ArraySize(row); ++e) {
            if (e > 0) out.push_back(',');
            AppendJsonNumber(out, column.ArrayData(row)[e]);
          }
          out.push_back(']');
          break;
        }
      }
    }
    object.Close();
  }

  Schema schema_;
  StatsModes modes_;
  std::vector<int> columns_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Stage>>> CreateStages(const PipelineSpec& spec) {
  std::vector<std::unique_ptr<Stage>> stages;
  const StatsModes modes(spec);
  // The model column (drift's, else the first group-by column), when it is a string: one id
  // lookup per row for the aggregation and drift, which both key by it.
  const Schema schema = QuerySchema(spec);
  std::string model_column =
      spec.drift.enabled && !spec.drift.model_column.empty() ? spec.drift.model_column : "";
  if (model_column.empty() && !spec.query.group_by.empty()) model_column = spec.query.group_by[0];
  const int model_index = model_column.empty() ? -1 : schema.IndexOf(model_column);
  std::shared_ptr<KeyInterner> keys;
  if (model_index >= 0 &&
      schema.fields[static_cast<size_t>(model_index)].type == FieldType::kString) {
    keys = std::make_shared<KeyInterner>(model_index);
  }
  if (spec.query.IsAggregation()) {
    auto aggregator = Aggregator::Create(spec.query, schema);
    if (!aggregator) return tl::unexpected(aggregator.error());
    (*aggregator)->ShareKeys(keys);
    stages.push_back(std::make_unique<AggregationStage>(std::move(*aggregator), modes));
  } else {
    stages.push_back(std::make_unique<SelectStage>(spec, modes));
  }
  if (spec.drift.enabled) {
    auto drift = DriftStage::Create(spec, keys);
    if (!drift) return tl::unexpected(drift.error());
    stages.push_back(std::move(*drift));
  }
  return stages;
}

}  // namespace driftd
