// The aggregation and select stages, and CreateStages. The drift stage is drift_stage.cc.
#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>

#include "engine/aggregation.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/performance_stage.h"
#include "engine/executor/status_history.h"
#include "engine/executor/stage.h"
#include "engine/json_writer.h"
#include "engine/row_shape.h"
#include "engine/string_hash.h"

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

// Which shard a row's group belongs to: a hash of its first groupBy value, as the aggregation
// encodes it in the group's key (engine/aggregation.cc), so that a row and a restored key of
// one group go to the same shard. The hash lives only in memory: shards are never persisted.
uint32_t ShardOfValue(std::string_view encoded, uint32_t shards) {
  // A fixed seed: which shard holds a group changes no number and no output order (groups are
  // emitted in key order), but the order of each shard's state writes stays the same from run
  // to run.
  return static_cast<uint32_t>(HashString(encoded, /*seed=*/0) % shards);
}

// group by + aggregates (+ window): the result table, in every output mode a sink asks for.
// With several shards, each holds the groups of its first groupBy values (the drift model, in
// the usual query), folded in input order: the same numbers as one aggregator, to the last bit.
class AggregationStage final : public Stage {
 public:
  AggregationStage(std::vector<std::unique_ptr<Aggregator>> shards, int shard_column,
                   FieldType shard_type, StatsModes modes)
      : shards_(std::move(shards)),
        shard_column_(shard_column),
        shard_type_(shard_type),
        modes_(modes) {
    for (const auto& shard : shards_) parts_.push_back(shard.get());
  }

  std::string_view state_namespace() const override { return "agg"; }

  Status Restore(std::string_view key, std::string_view value) override {
    // Sharded by the group key in memory, as rows are (the checkpoint's key is its codec form).
    if (shards_.size() == 1) return shards_[0]->Restore(key, value);
    return shards_[ShardOfKey(shards_[0]->GroupKeyOf(key))]->Restore(key, value);
  }

  void Process(const RecordBatch& batch, const RowTimes& times, BatchOutput&) override {
    if (shards_.size() == 1) {
      shards_[0]->Add(batch, times);
      return;
    }
    rows_.resize(shards_.size());
    for (auto& rows : rows_) rows.clear();
    Route(batch, rows_);
    for (uint32_t shard = 0; shard < shards_.size(); ++shard) {
      shards_[shard]->AddRows(batch, times, rows_[shard]);
    }
  }

  uint32_t shard_count() const override { return static_cast<uint32_t>(shards_.size()); }

  void Route(const RecordBatch& batch,
             std::span<std::vector<uint32_t>> rows_of_shard) const override {
    const uint32_t shards = shard_count();
    const Column& column = batch.columns[shard_column_];
    for (size_t row = 0; row < batch.num_rows; ++row) {
      uint32_t shard = 0;
      if (!column.IsNull(row)) {
        if (shard_type_ == FieldType::kString) {
          shard = ShardOfValue(column.String(row), shards);
        } else {
          const int64_t value = column.i64[row];
          shard = ShardOfValue(
              std::string_view(reinterpret_cast<const char*>(&value), sizeof value), shards);
        }
      }
      rows_of_shard[shard].push_back(static_cast<uint32_t>(row));
    }
  }

  void ProcessShard(uint32_t shard, const RecordBatch& batch, const RowTimes& times,
                    std::span<const uint32_t> rows) override {
    shards_[shard]->AddRows(batch, times, rows);
  }

  bool HasClosableWindows(int64_t watermark_us) const override {
    for (const auto& shard : shards_) {
      if (shard->HasClosableWindows(watermark_us)) return true;
    }
    return false;
  }

  void Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
              StageProgress& progress) override {
    EmittedRows rows;
    if (modes_.update) {
      Aggregator::EmitUpdated(parts_, rows);
      MoveRows(rows, output.stats_update);
    }
    if (modes_.complete) {
      Aggregator::EmitAll(parts_, rows);
      MoveRows(rows, output.stats_complete);
    }
    if (modes_.append) {
      Aggregator::EmitClosed(parts_, context.watermark_us, rows);
      MoveRows(rows, output.stats_append);
    }
    const size_t first_put = changes.puts.size();
    for (const auto& shard : shards_) {
      progress.rows_updated += shard->rows_updated_last_batch();
      progress.dropped_by_watermark += shard->TakeRowsDroppedByWatermark();
      progress.without_event_time += shard->TakeRowsWithoutEventTime();
      shard->EndBatch(context.watermark_us, !modes_.complete, changes.puts, changes.deletes);
      progress.num_groups += static_cast<int64_t>(shard->num_groups());
      progress.num_open_windows += static_cast<int64_t>(shard->num_open_windows());
    }
    for (size_t i = first_put; i < changes.puts.size(); ++i) {
      progress.state_dirty_bytes += static_cast<int64_t>(changes.puts[i].second.size());
    }
  }

 private:
  // The shard of a group's key: its first groupBy value as encoded after the key's prefix
  // byte (a validity byte, then a u32 length and the bytes of a string, or 8 bytes).
  uint32_t ShardOfKey(std::string_view key) const {
    if (shards_.size() == 1 || key.size() < 2 || key[1] == '\0') return 0;
    key.remove_prefix(2);
    if (shard_type_ != FieldType::kString) {
      return key.size() < 8 ? 0 : ShardOfValue(key.substr(0, 8), shard_count());
    }
    uint32_t size = 0;
    if (key.size() < 4) return 0;
    std::memcpy(&size, key.data(), 4);
    return ShardOfValue(key.substr(4, size), shard_count());
  }

  std::vector<std::unique_ptr<Aggregator>> shards_;
  std::vector<const Aggregator*> parts_;
  int shard_column_ = -1;
  FieldType shard_type_ = FieldType::kString;
  StatsModes modes_;
  std::vector<std::vector<uint32_t>> rows_;  // Process's routing, reused
};

// A query without aggregation: its input rows (the selected columns) as the stats stream, in
// append and update mode alike. A struct's leaves are written back as a nested object.
class SelectStage final : public Stage {
 public:
  SelectStage(const PipelineSpec& spec, StatsModes modes)
      : schema_(QuerySchema(spec)), modes_(modes) {
    for (int index : SelectOutputColumns(spec)) {
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
  // In step with the stats shape of a query without aggregation (engine/row_shape.cc).
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

Result<StageSet> CreateStageSet(const PipelineSpec& spec, uint32_t shards) {
  StageSet set;
  std::vector<std::unique_ptr<Stage>>& stages = set.all;
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
    // Groups are told apart by their first groupBy value; without one there is one group per
    // window, and one shard.
    const int shard_column =
        spec.query.group_by.empty() ? -1 : schema.IndexOf(spec.query.group_by[0]);
    // The interner is not thread-safe: on several threads drift alone uses it.
    const bool share_keys = shards <= 1;
    if (shard_column < 0) shards = 1;
    std::vector<std::unique_ptr<Aggregator>> aggregators;
    for (uint32_t i = 0; i < std::max<uint32_t>(shards, 1); ++i) {
      auto aggregator = Aggregator::Create(spec.query, schema);
      if (!aggregator) return tl::unexpected(aggregator.error());
      if (share_keys) (*aggregator)->ShareKeys(keys);
      aggregators.push_back(std::move(*aggregator));
    }
    const FieldType shard_type =
        shard_column < 0 ? FieldType::kString : schema.fields[shard_column].type;
    stages.push_back(std::make_unique<AggregationStage>(std::move(aggregators), shard_column,
                                                        shard_type, modes));
  } else {
    stages.push_back(std::make_unique<SelectStage>(spec, modes));
  }
  if (spec.drift.enabled) {
    auto drift = DriftStage::Create(spec, keys, nullptr, shards);
    if (!drift) return tl::unexpected(drift.error());
    set.drift = drift->get();
    stages.push_back(std::move(*drift));
  }
  if (spec.labels.enabled) {
    auto performance = PerformanceStage::Create(spec);
    if (!performance) return tl::unexpected(performance.error());
    set.performance = performance->get();
    stages.push_back(std::move(*performance));
  }
  // Last: it reads what the stages before it evaluated in the batch. A scaled-out query's
  // tasks have no status page of their own to keep a history for.
  if ((set.drift != nullptr || set.performance != nullptr) && !spec.scale_out.enabled) {
    auto history = std::make_unique<HistoryStage>(set.drift, set.performance);
    set.history = history.get();
    stages.push_back(std::move(history));
  }
  return set;
}

Result<std::vector<std::unique_ptr<Stage>>> CreateStages(const PipelineSpec& spec,
                                                         uint32_t shards) {
  auto set = CreateStageSet(spec, shards);
  if (!set) return tl::unexpected(set.error());
  return std::move(set->all);
}

}  // namespace driftd
