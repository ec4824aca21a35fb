// The drift stage's implementation (engine/executor/drift_stage.h is its interface): its
// state and the methods of DriftStage::Impl, whose larger ones are defined in
//   drift_stage.cc            setup, feeding rows to the monitor, models, segments and map keys,
//                             evaluation and alert rows, persisted state
//   drift_stage_reference.cc  the file baseline: parsing reference records and statistics (the
//                             bytes config/ read), and writing reference statistics
// Included by those two files only.
#pragma once

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "engine/executor/drift_stage.h"
#include "engine/codec.h"
#include "engine/drift/codec.h"
#include "engine/drift/evaluation.h"
#include "engine/drift/monitor.h"
#include "engine/executor/drift_multivariate.h"
#include "engine/expr/projection.h"
#include "engine/json_decoder.h"
#include "engine/json_writer.h"
#include "engine/log.h"
#include "engine/string_hash.h"
#include "engine/wall_clock.h"

namespace driftd {

namespace drift_stage_detail {

// Series layout (names after array expansion), persisted so a restart restores the monitor
// with the same series indices. Sorts before DriftMonitor's "drift/" keys in a state scan.
// Version 1 (written before map series and segments): the array widths, "8,1,1". Version 2:
// byte kLayoutVersion2, then (drift/codec.h) u32 columns, per column u32 width and, for a map
// column, u32 keys + each key's name in name order; then u32 segment columns + their names.
constexpr std::string_view kLayoutKey = "drift-layout";
constexpr char kLayoutVersion2 = '\x02';
// What a model was let in to (drift.maxSegmentsPerModel, maxKeysPerModel), per model:
// "drift-admit/<model>" (escaped), u8 version 1, u32 segments + each segment's model name (the
// "<model>\x1f<value>..." the monitor knows it by), u32 keys + (u32 column, key name) each.
constexpr std::string_view kAdmitPrefix = "drift-admit/";
constexpr uint8_t kAdmitVersion = 1;
// Separates a model's name from its segment values in the name the monitor keys state and
// alert ids by; a value's own '%' and separator are escaped, a null value is "%00".
constexpr char kSegmentSeparator = '\x1f';
constexpr std::string_view kNullSegmentValue = "%00";
// Written by versions whose drift stage kept a watermark of its own (event-time windows): the
// largest event time seen and the watermark, "<max>,<watermark>" in microseconds. Read for
// such checkpoints only; the query's clock is in the commit record now.
constexpr std::string_view kClockKey = "drift-watermark";
// The last evaluation of each (model, series), "drift-eval/<model>/<series>" (names escaped
// as in DriftMonitor's keys), so the drift gauges show every series again after a restart.
constexpr std::string_view kEvaluationPrefix = "drift-eval/";
// Multivariate drift: each model's co-moments, then its PCA (engine/drift/multivariate.h),
// "drift-mv/<model>" (escaped as above).
constexpr std::string_view kMultivariatePrefix = "drift-mv/";

// Names in state keys: engine/codec.h's key-path escaping.
using codec::EscapeKeyPart;
using codec::UnescapeKeyPart;

}  // namespace drift_stage_detail

using namespace drift_stage_detail;  // NOLINT(google-build-using-namespace)

class DriftStage::Impl {
 public:
  struct SeriesColumn {
    int column = -1;
    FieldType type = FieldType::kDouble;
    bool is_array = false;  // array<double>: a series per element
    bool is_map = false;    // a series per key
    SeriesKind kind = SeriesKind::kNumeric;
    size_t first_series = 0;  // index of its first series in the monitor
    size_t width = 1;         // 1 for a scalar; array length from the layout; a map's keys
    std::vector<uint32_t> keys;  // a map's watched keys (ids into keys_), in name order
    size_t missing = kNoSeries;  // its missing-value series, when watched
  };
  static constexpr size_t kNoSeries = SIZE_MAX;

  Status Init(const PipelineSpec& spec, std::shared_ptr<KeyInterner> keys);

  // The file baseline: reference statistics (a JSON object marked "driftd_reference") or
  // reference records (JSON lines with the pipeline's schema). engine/drift/README.md
  // documents both formats.
  /// A file baseline's reference (the bytes config/ read), after Init.
  Status LoadBaseline();
  Status LoadReference(const std::string& text);

  Status LoadReferenceRecords(const std::string& text);

  Status LoadReferenceStatistics(simdjson::dom::element root);

  // A categorical series' reference statistics: {"categories": {name: count, ...}, "other":
  // count, "seen": hex fingerprints, "unseen": {"n": values, "count": unseen}} (engine/drift/
  // README.md).
  template <typename Where>
  Status LoadCategoricalStatistics(uint32_t id, const std::string& model, size_t series,
                                   simdjson::dom::element stats, const Where& where);

  Status Restore(std::string_view key, std::string_view value);

  // `order`: the rows to observe, in the order to observe them; empty: every row in order.
  // `model_ids`, with `order`: the rows' ids in model_keys_ (when drift has it), looked up
  // already.
  void Observe(const RecordBatch& batch, const RowTimes& times,
               std::span<const uint32_t> order = {}, std::span<const uint32_t> model_ids = {}) {
    if (batch.num_rows == 0) return;
    if (!monitor_) {
      // Cannot fail: Init built a monitor from the same spec.
      IgnoreError(CreateMonitor(LayoutOf(batch, order)));
      layout_dirty_ = true;
      if (!monitor_) return;
    }
    Feed</*kReference=*/false>(batch, &times, NowUs(), order, model_ids);
  }

  // One shard's part of the rows the drift stage is fed (DriftStage with several shards): the
  // rows `order` lists, in its order, each at its place `ordinals` in the whole feed of the
  // batch (AtRecord), so that merged events come out in the order of one monitor.
  void ObserveShard(const RecordBatch& batch, const RowTimes& times,
                    std::span<const uint32_t> order, std::span<const uint32_t> model_ids,
                    std::span<const uint64_t> ordinals) {
    if (order.empty() || !monitor_) return;
    ordinals_ = ordinals.data();
    Feed</*kReference=*/false>(batch, &times, NowUs(), order, model_ids);
    ordinals_ = nullptr;
  }

  // Builds the monitor for the series the rows show (array widths), as the first Observe
  // does; the shards of a stage build theirs from the same rows, so their layouts agree.
  void EnsureMonitor(const RecordBatch& batch, std::span<const uint32_t> order = {}) {
    if (monitor_ || batch.num_rows == 0) return;
    // Cannot fail: Init built a monitor from the same spec.
    IgnoreError(CreateMonitor(LayoutOf(batch, order)));
    layout_dirty_ = true;
  }
  bool has_monitor() const { return monitor_ != nullptr; }

  // The names of models new in the query's interner (before shards read it on other threads).
  void SyncModelNames() {
    if (model_keys_) SyncNames();
  }

  // The model a name the monitor knows (with its segment) is of.
  std::string BaseName(std::string_view monitor_name) const {
    std::string base;
    Name(monitor_name, &base, nullptr);
    return base;
  }
  int model_column() const { return model_column_; }
  bool has_map_series() const { return !key_slots_.empty(); }

  const std::shared_ptr<KeyInterner>& model_keys() const { return model_keys_; }

  bool HasClosableWindows(int64_t watermark_us) const {
    return monitor_ && monitor_->HasClosableWindows(watermark_us);
  }

  int64_t ModelsAcrossPartitions() const { return models_across_partitions_; }

  std::vector<DriftMonitor::ModelStats> ModelStats() const {
    std::vector<DriftMonitor::ModelStats> stats =
        monitor_ ? monitor_->model_stats() : std::vector<DriftMonitor::ModelStats>{};
    // The monitor keeps room for every map key of every model; a model's own series are its
    // other series, the keys it was let in to, and the error series (as the monitor counts).
    size_t fixed = 0;
    for (const SeriesColumn& series : columns_) fixed += series.is_map ? 0 : series.width;
    for (DriftMonitor::ModelStats& model : stats) {
      const std::string monitor_name = model.model;
      Name(monitor_name, &model.model, &model.segment);
      auto base = base_ids_.find(model.model);
      if (!keys_.empty()) {
        model.series = static_cast<int64_t>(fixed) + 1 +
                       (base == base_ids_.end() ? 0 : bases_[base->second].key_count);
      }
    }
    return stats;
  }
  DriftMonitorStats Stats() const { return monitor_ ? monitor_->stats() : DriftMonitorStats{}; }
  const DriftStage::ShapeCounts& Counts() const { return counts_; }
  std::vector<DriftStage::SeriesValues> SeriesValueCounts() const {
    std::vector<DriftStage::SeriesValues> out;
    if (!monitor_) return out;
    const std::vector<std::string>& names = monitor_->series_names();
    for (size_t i = 0; i < names.size(); ++i) {
      out.push_back({names[i], kinds_[i] == SeriesKind::kCategorical, category_values_[i],
                     missing_values_[i]});
    }
    return out;
  }

  void Evaluate(const BatchContext& context, OutputRows& alerts, OutputRows* rows) {
    EvaluateShard(context);
    if (monitor_) Render(events_, packed_, alerts, rows);
  }
  // The monitor's part of Evaluate: the batch's events and evaluations (LastEvents,
  // LastEvaluations), and with merge keys (a shard's) where each goes among other shards'.
  void EvaluateShard(const BatchContext& context);
  // Alert rows of `events`, and evaluation rows of `evaluations` when a sink takes them.
  void Render(std::span<const AlertEvent> events, std::span<const PackedEvaluation> evaluations,
              OutputRows& alerts, OutputRows* rows) const;
  // Where an event or evaluation goes among other shards': its record, and for one of a window
  // the watermark closed, the model as the monitor knows it (DriftMonitor::kClosedWindow).
  struct MergeKey {
    uint64_t record = 0;
    std::string model;
    bool operator<(const MergeKey& o) const {
      return record != o.record ? record < o.record : model < o.model;
    }
  };
  void KeepMergeKeys() { keep_merge_keys_ = true; }
  const std::vector<MergeKey>& event_keys() const { return event_keys_; }
  const std::vector<MergeKey>& evaluation_keys() const { return evaluation_keys_; }

  // Every segment of the model starts over.
  bool ResetBaselines(const std::string& model) {
    if (!monitor_) return false;
    if (segment_columns_.empty()) return monitor_->ResetBaselines(model);
    bool any = false;
    for (const std::string& monitor_name : names_) {
      std::string base;
      Name(monitor_name, &base, nullptr);
      if (base == model) any = monitor_->ResetBaselines(monitor_name) || any;
    }
    return any;
  }

  Result<std::string> ExportReference() const;

  const std::vector<AlertEvent>& LastEvents() const { return events_; }
  const std::vector<PackedEvaluation>& LastEvaluations() const { return packed_; }
  std::vector<PackedEvaluation> LatestEvaluations() const {
    std::vector<PackedEvaluation> out;
    out.reserve(latest_.size());
    for (const auto& [key, latest] : latest_) out.push_back(latest.evaluation);
    return out;
  }

  Status FinishRestore() {
    if (!restored_admits_.empty() && !monitor_) {
      return MakeError(ErrorCode::kCorruption,
                       "drift: the checkpoint has models' admitted segments and keys but no "
                       "series layout");
    }
    for (const auto& [key, value] : restored_admits_) DRIFTD_TRY(RestoreAdmit(key, value));
    restored_admits_.clear();
    return monitor_ ? monitor_->FinishRestore() : Ok();
  }

  // The evaluations newer than the checkpoint's copies (`all`: every one; otherwise those
  // whose level changed, and the rest once kEvaluationFlushMs has passed since the last time).
  void CollectEvaluations(int64_t now_ms, bool all, StatePuts& puts);

  void CollectDirty(int64_t now_ms, StatePuts& puts, std::vector<std::string>& deletes,
                    StageProgress& progress);

 private:
  // What the series are: array widths, map keys, and the segment columns state is keyed by.
  struct Layout {
    std::vector<size_t> widths;                  // per series column (arrays)
    std::vector<std::vector<std::string>> keys;  // per series column (maps), in name order
    std::vector<std::string> segments;
    bool versioned = true;  // false: read from a version-1 layout (no keys, no segments)
  };

  Result<Layout> ParseLayout(std::string_view value) const;

  // Whether the checkpoint's segments fit the pipeline's. A checkpoint written before drift
  // had segments keeps drift per model when segments would only come from groupBy (so that
  // its state and alert ids carry on); segments the file names must match.
  Status SegmentsOf(const Layout& layout) {
    if (layout.segments == spec_.segment_by) return Ok();
    if (!layout.versioned && !spec_.segment_by_given) {
      GetLogger("engine")->warn(
          "drift: the checkpoint keeps drift per model, written before drift was kept per "
          "(model, segment); it stays per model. Drift per ({}) needs a new checkpoint (or set "
          "drift.segmentBy: [] to say per model)",
          fmt::join(spec_.segment_by, ", "));
      segment_columns_.clear();
      active_segments_.clear();
      return Ok();
    }
    auto show = [](const std::vector<std::string>& columns) {
      return columns.empty() ? std::string("none")
                             : fmt::format("{}", fmt::join(columns, ", "));
    };
    return MakeError(ErrorCode::kIncompatible,
                     "the checkpoint's drift state is kept per model and segment of ({}), the "
                     "pipeline's per ({}); start a new checkpoint",
                     show(layout.segments), show(spec_.segment_by));
  }

  std::string EncodeLayout() const {
    std::string out(1, kLayoutVersion2);
    drift::ByteWriter w(out);
    w.U32(static_cast<uint32_t>(columns_.size()));
    for (const SeriesColumn& column : columns_) {
      w.U32(static_cast<uint32_t>(column.width));
      if (!column.is_map) continue;
      w.U32(static_cast<uint32_t>(column.keys.size()));
      for (uint32_t key : column.keys) w.Str(keys_[key].name);
    }
    w.U32(static_cast<uint32_t>(active_segments_.size()));
    for (const std::string& name : active_segments_) w.Str(name);
    return out;
  }

  // The array lengths come from the data: the first non-null value of each array column, in
  // the order drift takes the rows (`order`, the canonical one of the order buffer, whose
  // batch holds rows not due yet as well; empty: the batch's order), so that the layout does
  // not depend on the order the rows were read in.
  Layout LayoutOf(const RecordBatch& batch, std::span<const uint32_t> order = {}) const {
    Layout layout;
    layout.keys.resize(columns_.size());
    layout.segments = active_segments_;
    const size_t count = order.empty() ? batch.num_rows : order.size();
    for (const SeriesColumn& series : columns_) {
      size_t width = 1;
      if (series.is_array) {
        width = 0;
        const Column& column = batch.columns[series.column];
        for (size_t i = 0; i < count && width == 0; ++i) {
          const size_t row = order.empty() ? i : order[i];
          if (!column.IsNull(row)) width = column.ArraySize(row);
        }
      }
      layout.widths.push_back(series.is_map ? 0 : width);
    }
    return layout;
  }

  // ---- Models and segments ------------------------------------------------------------------

  // The name the monitor knows a row's model by: the model's, or with segments
  // "<model>\x1f<value>\x1f<value>..." (values escaped, null "%00"), so that each segment has
  // state and alert ids of its own while a pipeline without segments keeps its names.
  void MonitorName(const RecordBatch& batch, size_t row, std::string_view model,
                   std::string& out) const;

  // The model and the segment ("region=eu,channel=app"; empty without segments) of a name the
  // monitor knows.
  void Name(std::string_view monitor_name, std::string* model, std::string* segment) const;

  // A model as the caps count it, whatever its segments.
  struct Base {
    std::string name;
    std::vector<uint32_t> segments;  // monitor ids of its segments
    std::vector<uint8_t> keys;       // by key id: watched for this model
    int64_t key_count = 0;
    bool warned_segments = false;
    bool warned_keys = false;
    bool dirty = false;
  };

  uint32_t BaseOf(std::string_view name) {
    auto it = base_ids_.find(name);
    if (it != base_ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(bases_.size());
    base_ids_.emplace(std::string(name), id);
    bases_.push_back(Base{std::string(name), {}, {}, 0, false, false, false});
    return id;
  }

  void MarkBaseDirty(uint32_t base) {
    if (!bases_[base].dirty) {
      bases_[base].dirty = true;
      dirty_bases_.push_back(base);
    }
  }

  // Lets a new segment of `base` in (true), or counts it out once the model has
  // maxSegmentsPerModel.
  bool AdmitSegment(uint32_t base, const std::string& monitor_name) {
    Base& b = bases_[base];
    if (static_cast<int64_t>(b.segments.size()) >= spec_.max_segments_per_model) {
      if (!b.warned_segments) {
        b.warned_segments = true;
        GetLogger("engine")->warn(
            "drift: model '{}' has drift.maxSegmentsPerModel ({}) segments; rows of its further "
            "segments are counted (driftRowsOverSegmentCap), not watched",
            b.name, spec_.max_segments_per_model);
      }
      return false;
    }
    const uint32_t id = Intern(monitor_name);
    b.segments.push_back(id);
    if (id >= monitor_base_.size()) monitor_base_.resize(id + 1, UINT32_MAX);
    monitor_base_[id] = base;
    MarkBaseDirty(base);
    return true;
  }

  // ---- Map keys -----------------------------------------------------------------------------

  static constexpr uint32_t kNoKey = UINT32_MAX;
  // A key of a map series column, watched: a series of its own ("features.amount").
  struct MapKey {
    size_t column = 0;  // into columns_
    std::string name;
    size_t series = 0;  // its monitor series
  };
  // A map series column's keys by name, and the key last seen at each position of a record's
  // map (producers write their keys in one order, so most lookups compare one string).
  struct KeySlot {
    size_t column = 0;
    StringMap<uint32_t> ids;
    std::vector<uint32_t> at_position;
  };

  KeySlot& SlotOf(size_t column) {
    for (KeySlot& slot : key_slots_) {
      if (slot.column == column) return slot;
    }
    return key_slots_.front();  // unreachable: every map column has a slot
  }

  uint32_t KeyId(size_t column, std::string_view name) {
    KeySlot& slot = SlotOf(column);
    auto it = slot.ids.find(name);
    return it == slot.ids.end() ? kNoKey : it->second;
  }

  // The key at `position` of a row's map, by the position's last key or by name.
  uint32_t LookupKey(KeySlot& slot, size_t position, std::string_view name) {
    if (position < slot.at_position.size()) {
      const uint32_t cached = slot.at_position[position];
      if (cached != kNoKey && keys_[cached].name == name) return cached;
    }
    auto it = slot.ids.find(name);
    if (it == slot.ids.end()) return kNoKey;
    if (position >= slot.at_position.size()) slot.at_position.resize(position + 1, kNoKey);
    slot.at_position[position] = it->second;
    return it->second;
  }

  // Makes `name` a series of map column `column`, placed among the column's keys by name, so
  // that the order of series does not depend on the order keys came in.
  uint32_t WatchKey(size_t column, const std::string& name) {
    SeriesColumn& series = columns_[column];
    const auto id = static_cast<uint32_t>(keys_.size());
    keys_.push_back(MapKey{column, name, 0});
    SlotOf(column).ids.emplace(name, id);
    const auto at = std::lower_bound(
        series.keys.begin(), series.keys.end(), name,
        [&](uint32_t key, const std::string& n) { return keys_[key].name < n; });
    const size_t position = static_cast<size_t>(at - series.keys.begin());
    series.keys.insert(at, id);
    const std::string series_name =
        fmt::format("{}.{}", schema_.fields[series.column].name, name);
    const size_t index = series.first_series + position;
    monitor_->InsertSeries(index, series_name, series.kind);
    kinds_.insert(kinds_.begin() + static_cast<ptrdiff_t>(index), series.kind);
    missing_values_.insert(missing_values_.begin() + static_cast<ptrdiff_t>(index), 0);
    category_values_.insert(category_values_.begin() + static_cast<ptrdiff_t>(index), 0);
    Relayout();
    layout_dirty_ = true;
    return id;
  }

  // Series indices after a key was added: each column's first series and each key's.
  void Relayout() {
    size_t next = 0;
    for (SeriesColumn& series : columns_) {
      series.first_series = next;
      if (series.is_map) {
        series.width = series.keys.size();
        for (size_t k = 0; k < series.keys.size(); ++k) keys_[series.keys[k]].series = next + k;
      }
      next += series.width;
    }
    // The data-quality series follow the value series (CreateMonitor).
    for (SeriesColumn& series : columns_) {
      if (series.missing != kNoSeries) series.missing = next++;
    }
    if (malformed_series_ != kNoSeries) malformed_series_ = next++;
    if (mv_series_ != kNoSeries) mv_series_ = next++;  // [multivariate]
  }

  bool Watched(uint32_t base, uint32_t key) const {
    const std::vector<uint8_t>& keys = bases_[base].keys;
    return key < keys.size() && keys[key] != 0;
  }

  // Lets key `name` of map column `column` in for model `base` (true), or counts it out once
  // the model has maxKeysPerModel keys, or the pipeline maxKeys.
  bool AdmitKey(uint32_t base, size_t column, std::string_view name) {
    Base& b = bases_[base];
    uint32_t key = KeyId(column, name);
    if (key != kNoKey && Watched(base, key)) return true;
    const bool over_model = b.key_count >= spec_.max_keys_per_model;
    const bool over_pipeline =
        key == kNoKey && static_cast<int64_t>(keys_.size()) >= spec_.max_keys;
    if (over_model || over_pipeline) {
      if (!b.warned_keys) {
        b.warned_keys = true;
        GetLogger("engine")->warn(
            "drift: model '{}' has {} map keys ({}); values of its further keys are counted "
            "(driftValuesOverKeyCap), not watched",
            b.name, over_model ? b.key_count : static_cast<int64_t>(keys_.size()),
            over_model ? "drift.maxKeysPerModel" : "drift.maxKeys over all models");
      }
      return false;
    }
    if (key == kNoKey) key = WatchKey(column, std::string(name));
    if (key >= b.keys.size()) b.keys.resize(key + 1, 0);
    b.keys[key] = 1;
    ++b.key_count;
    MarkBaseDirty(base);
    return true;
  }

  std::string EncodeAdmit(Base& base) const {
    base.dirty = false;
    std::string out;
    drift::ByteWriter w(out);
    w.U8(kAdmitVersion);
    w.U32(static_cast<uint32_t>(base.segments.size()));
    for (uint32_t id : base.segments) w.Str(names_[id]);
    w.U32(static_cast<uint32_t>(base.key_count));
    for (uint32_t key = 0; key < base.keys.size(); ++key) {
      if (base.keys[key] == 0) continue;
      w.U32(static_cast<uint32_t>(keys_[key].column));
      w.Str(keys_[key].name);
    }
    return out;
  }

  Status RestoreAdmit(std::string_view escaped, std::string_view value);

  // ---- Categorical values and null values -------------------------------------------------
  // Categorical values (string columns, array<string> elements, map<string,string> values) go
  // to the monitor's categorical series; null values of a series are counted per series (a
  // column's missing-value series is fed in Feed, per record). SeriesValueCounts reports both.
  template <bool kReference>
  void ObserveCategory(uint32_t model, const std::string& model_name, size_t series,
                       std::string_view category, int64_t event_time_us,
                       int64_t late_before_us) {
    if constexpr (kReference) {
      monitor_->ObserveReferenceCategory(model, model_name, series, category);
    } else {
      ++category_values_[series];
      monitor_->ObserveCategory(model, model_name, series, category, event_time_us,
                                late_before_us);
    }
  }

  template <bool kReference>
  void ObserveMissing(uint32_t, const std::string&, size_t series, int64_t, int64_t) {
    if constexpr (!kReference) ++missing_values_[series];
  }

  // ---- Feeding the monitor ------------------------------------------------------------------

  // Each row's monitor model id (kNoModel: no model, or a segment over the cap). New segments
  // are let in by name within the batch, so which ones a capped model keeps does not depend on
  // the order of a batch's rows.
  static constexpr uint32_t kNoModel = UINT32_MAX;
  void ModelsOf(const RecordBatch& batch, std::span<const uint32_t> order = {},
                std::span<const uint32_t> model_ids = {});

  uint32_t BaseOfModel(uint32_t model) {
    if (model < monitor_base_.size() && monitor_base_[model] != UINT32_MAX) {
      return monitor_base_[model];
    }
    std::string base_name;
    Name(names_[model], &base_name, nullptr);
    const uint32_t base = BaseOf(base_name);
    if (model >= monitor_base_.size()) monitor_base_.resize(model + 1, UINT32_MAX);
    monitor_base_[model] = base;
    return base;
  }

  // The keys of the batch's maps that their models do not watch yet, let in by name (per
  // model, column and key), so that the series a capped model gets do not depend on the order
  // of a batch's rows, and every value of this batch reaches its series.
  void KeysOf(const RecordBatch& batch);

  // The batch's rows grouped by model when it has many models (more than kGroupAbove): the
  // models in the order their first rows come, each model's rows in order, linked by
  // next_row_. Feed then observes a model's rows one after another, while its state is in
  // cache (with thousands of models, state read once a row costs a cache miss a series).
  // Models are independent and the monitor puts events back in record order (AtRecord), so
  // the results are those of observing the rows in order. False: feed in row order.
  static constexpr size_t kGroupAbove = 64;
  static constexpr uint32_t kNoRow = UINT32_MAX;
  // Over the rows' ordinals (their places in the feeding order, `row_at` giving each one's
  // row): model_first_rows_ and next_row_ hold ordinals.
  template <typename RowAt>
  bool GroupRowsByModel(size_t count, RowAt&& row_at) {
    model_first_rows_.clear();
    next_row_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t model = row_models_[row_at(i)];
      if (model == kNoModel) continue;
      if (model >= last_row_of_.size()) last_row_of_.resize(static_cast<size_t>(model) + 1, kNoRow);
      next_row_[i] = kNoRow;
      uint32_t& last = last_row_of_[model];
      if (last == kNoRow) {
        model_first_rows_.push_back(static_cast<uint32_t>(i));
      } else {
        next_row_[last] = static_cast<uint32_t>(i);
      }
      last = static_cast<uint32_t>(i);
    }
    for (uint32_t first : model_first_rows_) last_row_of_[row_models_[row_at(first)]] = kNoRow;
    return model_first_rows_.size() > kGroupAbove;
  }

  // Every record of `batch` to the monitor, or those `order` lists in its order: as stream
  // values, or (kReference) as reference values of a file baseline.
  template <bool kReference>
  void Feed(const RecordBatch& batch, const RowTimes* times, int64_t now_us,
            std::span<const uint32_t> order = {}, std::span<const uint32_t> model_ids = {}) {
    ModelsOf(batch, order, model_ids);
    KeysOf(batch);
    if (order.empty()) {
      FeedOrdinals<kReference>(batch, batch.num_rows, [](size_t i) { return i; }, times, now_us);
    } else {
      FeedOrdinals<kReference>(batch, order.size(), [&](size_t i) { return order[i]; }, times,
                               now_us);
    }
    if constexpr (!kReference) records_fed_ += order.empty() ? batch.num_rows : order.size();
  }

  template <bool kReference, typename RowAt>
  void FeedOrdinals(const RecordBatch& batch, size_t count, RowAt&& row_at, const RowTimes* times,
                    int64_t now_us) {
    if (!GroupRowsByModel(count, row_at)) {
      for (size_t i = 0; i < count; ++i) {
        const size_t row = row_at(i);
        if (row_models_[row] != kNoModel) FeedRow<kReference>(batch, row, i, times, now_us);
      }
      return;
    }
    const size_t models = model_first_rows_.size();
    for (size_t m = 0; m < models; ++m) {
      // The state of the next three models on its way into cache.
      for (int step = 0; step < 3; ++step) {
        if (m + 3 - step < models) {
          monitor_->Prefetch(row_models_[row_at(model_first_rows_[m + 3 - step])], step);
        }
      }
      for (uint32_t i = model_first_rows_[m]; i != kNoRow; i = next_row_[i]) {
        FeedRow<kReference>(batch, row_at(i), i, times, now_us);
      }
    }
  }

  // One record (of a model) to the monitor.
  template <bool kReference>
  void FeedRow(const RecordBatch& batch, size_t row, size_t ordinal, const RowTimes* times,
               int64_t now_us) {
    const uint32_t model = row_models_[row];
    const std::string& name = names_[model];
    if constexpr (!kReference) {
      monitor_->AtRecord(ordinals_ != nullptr ? ordinals_[ordinal] : records_fed_ + ordinal);
    }
    if (track_partitions_ && !kReference) NotePartition(model, batch.positions[row].partition);
    const int64_t late_before = times ? times->late_before[row] : INT64_MIN;
    // Event-time windows need the record's own time; record-count windows date a record
    // without one by the batch's processing time.
    int64_t event_time = window_ms_ > 0 ? INT64_MIN : now_us;
    if (time_column_ >= 0 && !batch.columns[time_column_].IsNull(row)) {
      event_time = batch.columns[time_column_].i64[row];
    }
    auto observe = [&](size_t series, double value) {
      if constexpr (kReference) {
        monitor_->ObserveReference(model, name, series, value);
      } else {
        monitor_->Observe(model, name, series, value, event_time, late_before);
      }
    };
    auto flag = [&](size_t series, bool flagged) {
      if constexpr (kReference) {
        monitor_->ObserveReferenceFlag(model, name, series, flagged);
      } else {
        monitor_->ObserveFlag(model, name, series, flagged, event_time, late_before);
      }
    };
    for (size_t c = 0; c < columns_.size(); ++c) {
      const SeriesColumn& series = columns_[c];
      const Column& column = batch.columns[series.column];
      if (column.IsNull(row)) {
        if (series.missing != kNoSeries) flag(series.missing, true);
        if (!series.is_array && !series.is_map) {
          ObserveMissing<kReference>(model, name, series.first_series, event_time, late_before);
        }
        continue;
      }
      if (series.is_map) {
        if (series.missing != kNoSeries) flag(series.missing, false);
        FeedMap<kReference>(c, column, row, model, name, event_time, late_before, observe);
        continue;
      }
      switch (series.type) {
        case FieldType::kDouble:
          if (series.missing != kNoSeries) flag(series.missing, false);
          observe(series.first_series, column.f64[row]);
          break;
        case FieldType::kString:
          if (series.missing != kNoSeries) flag(series.missing, false);
          ObserveCategory<kReference>(model, name, series.first_series, column.String(row),
                                      event_time, late_before);
          break;
        case FieldType::kBoolean:
          if (series.missing != kNoSeries) flag(series.missing, false);
          ObserveCategory<kReference>(model, name, series.first_series,
                                      column.i64[row] != 0 ? "true" : "false", event_time,
                                      late_before);
          break;
        case FieldType::kStringArray:
          if (series.missing != kNoSeries) flag(series.missing, false);
          for (size_t e = column.EntryBegin(row); e < column.EntryEnd(row); ++e) {
            if (column.EntryNull(e)) {
              ObserveMissing<kReference>(model, name, series.first_series, event_time,
                                         late_before);
            } else {
              ObserveCategory<kReference>(model, name, series.first_series, column.String(e),
                                          event_time, late_before);
            }
          }
          break;
        case FieldType::kDoubleArray: {
          // An array shorter than its series' width misses its last elements.
          const size_t size = std::min(column.ArraySize(row), series.width);
          if (series.missing != kNoSeries) flag(series.missing, size < series.width);
          const double* data = column.ArrayData(row);
          if constexpr (kReference) {
            for (size_t e = 0; e < size; ++e) observe(series.first_series + e, data[e]);
          } else {
            monitor_->Observe(model, name, series.first_series,
                              std::span<const double>(data, size), event_time, late_before);
          }
          break;
        }
        default:  // long, int
          if (series.missing != kNoSeries) flag(series.missing, false);
          observe(series.first_series, static_cast<double>(column.i64[row]));
          break;
      }
    }
    // Reference records are never malformed (they are read with the fail policy): the
    // malformed series warms up on the stream.
    if (!kReference && malformed_series_ != kNoSeries) {
      flag(malformed_series_, batch.positions[row].malformed);
    }
    if (!kReference && mv_) {  // [multivariate]
      if (auto error = mv_->Observe(batch, row, model)) observe(mv_series_, *error);
    }
    if (prediction_column_ >= 0 && label_column_ >= 0) {
      const Column& prediction = batch.columns[prediction_column_];
      const Column& label = batch.columns[label_column_];
      if (!prediction.IsNull(row) && !label.IsNull(row)) {
        auto value = [&](const Column& c) {
          return c.type == FieldType::kDouble ? c.f64[row] : static_cast<double>(c.i64[row]);
        };
        if constexpr (kReference) {
          monitor_->ObserveReferenceLabel(model, name, value(prediction), value(label));
        } else {
          monitor_->ObserveLabel(model, value(prediction), value(label), event_time);
        }
      }
    }
  }

  // One row's map: each watched key's value to its series (a null value is missing); values of
  // keys the model does not watch (over a cap) are counted.
  template <bool kReference, typename Observe>
  void FeedMap(size_t c, const Column& column, size_t row, uint32_t model,
               const std::string& name, int64_t event_time, int64_t late_before,
               Observe& observe) {
    KeySlot& slot = SlotOf(c);
    const uint32_t base = BaseOfModel(model);
    const size_t begin = column.EntryBegin(row);
    for (size_t e = begin; e < column.EntryEnd(row); ++e) {
      const uint32_t key = LookupKey(slot, e - begin, column.Key(e));
      if (key == kNoKey || !Watched(base, key)) {
        ++batch_counts_.values_over_key_cap;
        ++counts_.values_over_key_cap;
        continue;
      }
      const size_t series = keys_[key].series;
      if (column.EntryNull(e)) {
        ObserveMissing<kReference>(model, name, series, event_time, late_before);
      } else if (column.type == FieldType::kDoubleMap) {
        observe(series, column.f64[e]);
      } else {
        ObserveCategory<kReference>(model, name, series, column.String(e), event_time,
                                    late_before);
      }
    }
  }

  Status CreateMonitor(const Layout& layout);

  // Multivariate drift (drift_stage.cc): set up, its series, restore and persist.
  Status InitMultivariate(const PipelineSpec& spec);
  void CreateMultivariate(std::vector<SeriesDef>& defs);
  Status RestoreMultivariate(std::string_view key, std::string_view value);
  void CollectMultivariate(StatePuts& puts);

  // Record-count windows of a model read from two partitions depend on how reads interleave.
  void NotePartition(uint32_t model, uint32_t partition) {
    if (model >= model_partition_.size()) model_partition_.resize(model + 1, UINT32_MAX);
    uint32_t& first = model_partition_[model];
    if (first == UINT32_MAX) {
      first = partition;
    } else if (first != partition && first != kSpansPartitions) {
      first = kSpansPartitions;
      ++models_across_partitions_;
      GetLogger("engine")->warn(
          "drift: model '{}' has records in more than one Kafka partition: its record-count "
          "windows (drift.windowRecords) then depend on batching and read order. Key the input "
          "records by model, or use event-time windows (query.window) for results that do not",
          names_[model]);
    }
  }

  // The model's dense id: one hash lookup of the record's bytes (no copy), none when the
  // record is of the same model as the one before. With `model_keys_`, its ids: the monitor's
  // ids must come from one place.
  uint32_t Intern(std::string_view name) {
    if (model_keys_) {
      const uint32_t id = model_keys_->Intern(name);
      SyncNames();
      return id;
    }
    if (last_id_ != UINT32_MAX && name == names_[last_id_]) return last_id_;
    auto it = ids_.find(name);
    if (it == ids_.end()) {
      it = ids_.emplace(std::string(name), static_cast<uint32_t>(names_.size())).first;
      names_.emplace_back(name);
    }
    last_id_ = it->second;
    return last_id_;
  }

  // names_ and ids_ for the ids model_keys_ gave since the last call.
  void SyncNames() {
    while (names_.size() < model_keys_->size()) {
      const auto id = static_cast<uint32_t>(names_.size());
      names_.push_back(model_keys_->Name(id));
      ids_.emplace(names_.back(), id);
    }
  }

  DriftSpec spec_;
  std::vector<MetadataColumn> metadata_columns_;  // the metadata columns of schema_
  Schema schema_;        // the query's columns (engine/pipeline_spec.h QuerySchema)
  Schema input_schema_;  // the declared schema, for reference records
  std::unique_ptr<Projection> projection_;
  int64_t max_array_length_ = 4096;
  int model_column_ = -1;
  int time_column_ = -1;
  int prediction_column_ = -1;
  int label_column_ = -1;
  // Event-time windows (the query's tumbling window); 0: record-count windows.
  int64_t window_ms_ = 0;
  int64_t restored_max_us_ = INT64_MIN;
  int64_t restored_watermark_us_ = INT64_MIN;
  bool track_partitions_ = false;
  static constexpr uint32_t kSpansPartitions = UINT32_MAX - 1;
  /// Record position partition of each model's first record, kSpansPartitions once it had two.
  std::vector<uint32_t> model_partition_;
  int64_t models_across_partitions_ = 0;
  std::vector<SeriesColumn> columns_;
  bool watch_missing_ = false;
  bool watch_malformed_ = false;
  size_t malformed_series_ = kNoSeries;
  // [multivariate] The features and every model's state, and the series of the error.
  std::unique_ptr<DriftMultivariate> mv_;
  size_t mv_series_ = kNoSeries;
  /// Per monitor series: numeric or categorical, and (until the monitor watches them) the
  /// categorical values and the null values the seams above took.
  std::vector<SeriesKind> kinds_;
  std::vector<int64_t> category_values_;
  std::vector<int64_t> missing_values_;
  std::vector<MapKey> keys_;       // watched map keys, by id
  std::vector<KeySlot> key_slots_;  // one per map series column
  /// Segments: the columns (indices into schema_) and their names as the state was keyed by
  /// (empty: per model, also for a checkpoint written before segments).
  std::vector<int> segment_columns_;
  std::vector<std::string> active_segments_;
  StringMap<uint32_t> base_ids_;
  std::vector<Base> bases_;
  std::vector<uint32_t> monitor_base_;  // by monitor id
  std::vector<uint32_t> dirty_bases_;
  std::vector<std::pair<std::string, std::string>> restored_admits_;
  std::vector<uint32_t> row_models_;  // per row of the batch being fed
  // GroupRowsByModel: the first ordinal of each model, the next ordinal of an ordinal's model,
  // and (by model, kNoRow between batches) the last ordinal seen.
  std::vector<uint32_t> model_first_rows_;
  std::vector<uint32_t> next_row_;
  // Records fed in the batch so far (several calls: chunks, releases of the order buffer), so
  // that the monitor's record order (AtRecord) runs across them.
  uint64_t records_fed_ = 0;
  // A shard's rows' places in the whole feed (ObserveShard), by ordinal; null: records_fed_ on.
  const uint64_t* ordinals_ = nullptr;
  bool keep_merge_keys_ = false;
  std::vector<MergeKey> event_keys_;
  std::vector<MergeKey> evaluation_keys_;
  std::vector<uint32_t> last_row_of_;
  std::string composite_;
  DriftStage::ShapeCounts counts_;        // since start
  DriftStage::ShapeCounts batch_counts_;  // this batch
  std::unique_ptr<DriftMonitor> monitor_;
  bool layout_dirty_ = false;
  /// The query's model ids, shared with the aggregation (per model only, no segments): ids_
  /// and names_ follow its ids.
  std::shared_ptr<KeyInterner> model_keys_;
  StringMap<uint32_t> ids_;
  std::vector<std::string> names_;  // by id
  uint32_t last_id_ = UINT32_MAX;
  std::string name_;
  std::vector<AlertEvent> events_;
  std::vector<PackedEvaluation> packed_;  // the last Evaluate's (latest_ shares them)
  bool want_evaluation_rows_ = false;
  /// The latest evaluation of a series, and what the checkpoint holds of it. Only the status
  /// page, the metrics and `driftd report` read persisted evaluations (nothing a batch
  /// computes does), so one that keeps its series' level is written at most every
  /// kEvaluationFlushMs and at a clean stop; a changed level is written with its batch.
  struct Latest {
    PackedEvaluation evaluation;
    bool saved = false;  // the checkpoint holds an evaluation of the series
    AlertLevel saved_level = AlertLevel::kOk;
    bool saved_evaluated = false;
    bool waiting = false;  // newer than the checkpoint's, in unsaved_evaluations_
  };
  static constexpr int64_t kEvaluationFlushMs = 30'000;
  /// By (the model as the monitor knows it, series); entries are never removed, so the lists
  /// may hold iterators.
  using LatestMap = std::map<std::pair<std::string, std::string>, Latest>;
  LatestMap latest_;
  std::vector<LatestMap::iterator> dirty_evaluations_;    // evaluated in this batch
  std::vector<LatestMap::iterator> unsaved_evaluations_;  // same level as the checkpoint's
  int64_t evaluations_flushed_ms_ = INT64_MIN;
};

}  // namespace driftd
