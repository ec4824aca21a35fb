// Streaming aggregation: group by key columns (and optionally an event-time window), with
// count/sum/mean/stddev/variance/min/max kept as mergeable moments per group and per series,
// and approx_percentile / percentile_approx from a quantile sketch per group, series and
// accuracy (engine/quantile_sketch.h). An array<double> column is aggregated element by element
// ("feature_vector[0]", ...).
//
// Event time (engine/EVENT_TIME.md): a row at event time t belongs to every window
// [start, start + size) with start a multiple of the slide and start <= t < start + size. A
// window is closed once the watermark reaches its end (end <= watermark); a closed window takes
// no more rows, is emitted once in append mode and its state is evicted (kept in complete mode).
// A row is dropped by the watermark when every window it belongs to is closed (without a window:
// when its event time is at or behind the watermark); a row whose window column is null cannot
// be placed and is counted separately. Both counts are exact.
//
// The aggregator owns the result table in memory; the executor persists the groups it reports
// as changed and restores them on start. Not thread-safe; used by the executor's thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/batch.h"
#include "engine/key_interner.h"
#include "engine/pipeline_spec.h"
#include "engine/quantile_sketch.h"
#include "engine/result.h"
#include "engine/state_value.h"
#include "engine/row_shape.h"
#include "engine/stats.h"
#include "engine/string_hash.h"

namespace driftd {

/// Rows of a result table ready for sinks: JSON objects and their message keys.
struct EmittedRows {
  std::vector<std::string> columns;
  std::vector<std::string> rows;
  std::vector<std::string> keys;
};

class Aggregator {
 public:
  /// The query must be an aggregation query that passed validation against `schema`.
  static Result<std::unique_ptr<Aggregator>> Create(const QuerySpec& query, const Schema& schema);

  /// Folds a batch into the groups. With a watermark, rows that are late by `times` (see the
  /// header comment; RowTimes::late_before) are dropped and counted instead.
  void Add(const RecordBatch& batch, const RowTimes& times);
  /// Finds a row's group by the ids `keys` gives the values of its column, shared with the
  /// other stages keyed by it (drift), instead of hashing the row's key: when the query groups
  /// by that column alone and has no window. Call before the first Add.
  void ShareKeys(std::shared_ptr<KeyInterner> keys);
  /// As Add, for the rows `rows` of `batch` only (ascending indexes).
  void AddRows(const RecordBatch& batch, const RowTimes& times, std::span<const uint32_t> rows);
  /// Rows dropped by the watermark since the last call.
  int64_t TakeRowsDroppedByWatermark();
  /// Rows of a windowed query whose window column was null since the last call: they cannot be
  /// placed in a window and are not aggregated (Spark drops them silently; driftd counts them).
  int64_t TakeRowsWithoutEventTime();

  /// Output mode update: the groups changed since the last EndBatch.
  void EmitUpdated(EmittedRows& out) const;
  /// Output mode complete: every group.
  void EmitAll(EmittedRows& out) const;
  /// Output mode append: windows whose end is at or behind the watermark and not yet emitted.
  void EmitClosed(int64_t watermark_us, EmittedRows& out) const;

  /// The shape of the rows Emit* renders (RenderGroup): the key columns, the window, the
  /// aggregates; an aggregate over an array<double> column as numbered members.
  RowShape Shape() const;
  /// Aggregators of one query that hold disjoint groups (shards of one result table, as the
  /// executor keeps them to fold a batch on several threads) emit as one aggregator holding
  /// every group would: the same rows in the same order, under the same columns.
  static void EmitUpdated(std::span<const Aggregator* const> parts, EmittedRows& out);
  static void EmitAll(std::span<const Aggregator* const> parts, EmittedRows& out);
  static void EmitClosed(std::span<const Aggregator* const> parts, int64_t watermark_us,
                         EmittedRows& out);

  /// Ends the batch: windows closed by `watermark_us` are evicted (state deleted) if `evict`
  /// (every output mode but complete), else marked emitted; changed groups and evicted keys are
  /// reported for the checkpoint; the per-batch "updated" marks are cleared.
  void EndBatch(int64_t watermark_us, bool evict, StatePuts& puts,
                std::vector<std::string>& deletes);

  /// Restores one group from the checkpoint (a key and value reported by EndBatch). A group
  /// stored in the layout before engine/codec.h is read, and rewritten in the codec's layout
  /// (its old key deleted) by the next EndBatch.
  Status Restore(std::string_view key, std::string_view value);

  /// True if `key` (from the checkpoint) belongs to this aggregator.
  static bool OwnsKey(std::string_view key);
  /// The group key (the in-memory form, which rows are sorted by) of a key from the checkpoint;
  /// empty when it is unreadable.
  std::string GroupKeyOf(std::string_view stored_key) const;

  size_t num_groups() const { return live_groups_; }
  /// Windowed groups not yet closed by the watermark.
  size_t num_open_windows() const { return open_windows_; }
  int64_t rows_updated_last_batch() const { return updated_.size(); }
  /// Whether some window not yet closed ends at or before `watermark_us`: a no-data batch is due
  /// to emit (append) or evict (update) it. Cheap: looks at the earliest open window only.
  bool HasClosableWindows(int64_t watermark_us) const;

 private:
  struct Series {
    int column = -1;  // schema field index
    bool is_array = false;
  };
  // A column's values kept in a quantile sketch of one accuracy (several percentile aggregates
  // of a column and accuracy share it).
  struct QuantileSeries {
    int column = -1;
    bool is_array = false;
    int64_t accuracy = 0;
  };
  struct Group {
    std::string key;  // encoded key columns + window start
    int64_t window_start_us = INT64_MIN;
    int64_t count = 0;                         // count(*)
    std::vector<Moments> scalars;              // one per scalar series
    std::vector<std::vector<Moments>> arrays;  // one vector per array series
    // One vector per quantile series: one sketch for a scalar column, one per element of an
    // array column.
    std::vector<std::vector<QuantileSketch>> sketches;
    bool live = true;
    bool emitted = false;  // append mode: already emitted
  };

  Aggregator(const QuerySpec& query, const Schema& schema);
  static size_t ArrayWidth(const Group& group);
  uint32_t FindOrAddGroup(std::string_view key, int64_t window_start_us);
  void AddRow(Group& group, const RecordBatch& batch, size_t row);
  void EncodeGroup(const Group& group, std::string& out) const;
  // The checkpoint's key of a group key: the key columns in the codec's order-preserving form.
  std::string StoredKey(std::string_view group_key) const;
  // Restore's reading of a group's value after its format byte, in either byte order.
  template <typename Reader>
  Status RestoreGroup(std::string_view key, uint8_t format, Reader value);
  void RenderGroup(const Group& group, EmittedRows& out) const;
  void BuildColumns(const Group* sample, std::vector<std::string>& columns) const;
  // A group of one of several aggregators (parts of one result table).
  struct PartGroup {
    const Aggregator* part = nullptr;
    uint32_t slot = 0;
    const Group& group() const { return part->groups_[slot]; }
  };
  static void Render(std::span<const PartGroup> order, EmittedRows& out);
  template <typename Rows>
  void AddEach(const RecordBatch& batch, const RowTimes& times, const Rows& rows);
  void TrackOpenWindow(uint32_t slot);

  QuerySpec query_;
  Schema schema_;
  std::vector<int> key_columns_;
  int window_column_ = -1;
  int64_t window_size_us_ = 0;
  int64_t window_slide_us_ = 0;
  int watermark_column_ = -1;
  std::vector<Series> scalar_series_;
  std::vector<Series> array_series_;
  std::vector<QuantileSeries> quantile_series_;
  // For each aggregate of query_.aggregates: its quantile series, or -1.
  std::vector<int> aggregate_quantile_series_;
  // For each aggregate of query_.aggregates with a column: whether the column is an array and
  // (but percentiles, whose sketches are aggregate_quantile_series_) its series in
  // scalar_series_ or array_series_ and its output columns' names as JSON strings (one for a
  // scalar column; one per element of an array column, as many as the widest array seen).
  struct Output {
    size_t series = 0;
    bool is_array = false;
    std::vector<std::string> json_keys;
  };
  std::vector<Output> outputs_;
  // The names of the array aggregates' elements up to `width`.
  void NameElements(size_t width);

  StringMap<uint32_t> index_;
  /// The group of each key id, of keys_ or own_keys_ (kNoSlot: not looked up yet).
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  std::shared_ptr<KeyInterner> keys_;
  /// Without shared keys, when the groups are told apart by one string column alone: the ids
  /// of its values, looked up row by row (a shard folds only its own rows), so that a row's
  /// group is found without building its key.
  std::unique_ptr<KeyInterner> own_keys_;
  std::vector<uint32_t> slot_of_key_;
  std::vector<Group> groups_;
  std::vector<uint32_t> free_slots_;
  size_t live_groups_ = 0;
  std::vector<uint32_t> updated_;  // groups touched this batch (unique)
  std::vector<uint8_t> is_updated_;
  std::string key_buffer_;
  std::string last_key_buffer_;
  // Windows not yet closed, by window end: closing them in end order touches only the windows
  // that close, not every group.
  std::map<int64_t, std::vector<uint32_t>> open_by_end_;
  size_t open_windows_ = 0;
  int64_t dropped_by_watermark_ = 0;
  int64_t without_event_time_ = 0;
  // Groups restored from keys and values of the layout before engine/codec.h: the next EndBatch
  // writes them anew and deletes their old keys.
  std::vector<uint32_t> rewrite_;
  std::vector<std::string> legacy_keys_;
};

/// Expands the aggregate specs to output column names for a given array length of each array
/// series, e.g. mean(feature_vector) -> mean(feature_vector[0]) ... mean(feature_vector[7]).
std::string AggregateColumnName(AggregateFn fn, std::string_view column, int element);

}  // namespace driftd
