// Drift's record-count windows in a canonical order. A window of drift.windowRecords values
// takes a model's values in the order they come, and with a model's records spread over several
// Kafka partitions that order is the read order, which batching decides: the same topic read
// with maxOffsetsPerTrigger 1,000, 7,777 or 200,000 gave three sets of alert ids. Arrival order
// across partitions is not a fact about the data; event time, partition and offset are. So the
// rows for drift wait here until the watermark (the minimum over the partitions of their largest
// event time: engine/executor/event_clock.h) has passed them, and are handed to drift in
// (event time, partition, offset) order: the order of the data, whatever the batching or the
// read order. The cost is latency: a value waits until every partition with data has gone past
// its event time (an idle partition stops counting after the watermark's idle timeout).
//
// The buffered rows are part of the task's state (namespace "order", in pages of bounded size:
// order_buffer.cc), so a restart neither loses nor repeats them, and scaled out they move with
// the task through its changelog.
//
// Values go to drift as soon as the order allows, not only at the batch's end: while a batch is
// read, the rows stamped so far fix a watermark no later row can come before
// (EventClock::StampedWatermark), and once most of the buffer is before it, drift's lane takes
// those values (ReleaseMost) while the other lanes fold and the source reads. The batch's end
// releases all that is due. Any schedule of releases gives the same order.
//
// Not thread-safe: one lane (drift's) at a time, then the executor's thread at the batch's end.
// One per task (engine/executor/task.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/executor/stage.h"
#include "engine/key_interner.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"

namespace driftd {

class OrderBuffer {
 public:
  /// Namespace of the buffered rows in the checkpoint; persisted, never changes.
  static constexpr std::string_view kNamespace = "order";

  /// Whether the query's drift takes its values through a buffer: drift's record-count windows
  /// on a Kafka input (whose partitions are read in no fixed order), with an event-time column
  /// to order by. Each task has its own; scaled out, its models' rows reach it with their
  /// source partition and offset (engine/executor/row_block.h).
  static bool Applies(const PipelineSpec& spec);
  /// The event-time column drift orders by (QuerySchema index), or -1.
  static int TimeColumn(const PipelineSpec& spec);

  /// `key_of` names a row's partition (its offsets key) for the order's ties. `models`, when
  /// drift has one, is the interner of the model column: each row's id is looked up once, as
  /// it comes (usually from the ids the aggregation looked up already), and handed out with it.
  OrderBuffer(Schema schema, std::function<std::string(uint32_t)> key_of,
              std::shared_ptr<KeyInterner> models = nullptr);

  /// Keeps the rows of `batch` (with their times) until Release.
  void Add(const RecordBatch& batch, const RowTimes& times);

  /// What Release hands the due rows to: the buffer's rows and times, the due rows' indexes in
  /// their order, and every row's model id (empty without an interner). The rows are valid
  /// during the call only.
  using Take = std::function<void(const RecordBatch& rows, const RowTimes& times,
                                  std::span<const uint32_t> order,
                                  std::span<const uint32_t> model_ids)>;
  /// Hands the rows whose place is before `watermark` to `take` and forgets them, in (place,
  /// partition, offset) order, where a row's place is its event time, or its partition's
  /// watermark before it when that is later (a row behind it: jitter within the partition,
  /// which the partition's own order fixes). Rows without either come first, by (partition,
  /// offset). Each partition's rows are in its own order already (or nearly, with a
  /// watermark delay), so they are merged, not sorted as one.
  void Release(int64_t watermark, const Take& take);

  /// As Release, but only when at least half the buffered rows are due: while a batch is read,
  /// releasing a few rows at a time would go over the others again and again.
  void ReleaseMost(int64_t watermark, const Take& take);

  /// Whether Release(watermark) would move rows.
  bool HasDue(int64_t watermark) const;

  Status Restore(std::string_view key, std::string_view value);
  /// The buffer's state after the batch, when it changed.
  void Persist(StateChanges& changes);

  size_t size() const { return rows_.num_rows - dead_; }

 private:
  struct Place {
    int64_t event_us = INT64_MIN;
    uint32_t partition = 0;  // into partitions_
    int64_t offset = 0;
    uint64_t arrival = 0;  // for rows without an event time
  };
  // One partition's buffered rows with a time: their indexes into rows_ and their places, in
  // the order the partition hands them out once sorted by (place, offset). Rows come in that
  // order but for a watermark delay's jitter, so a list needs sorting only after a row came out
  // of order (`sorted` false); sorted, its due rows are a prefix of it.
  struct Pending {
    std::vector<uint32_t> rows;
    std::vector<int64_t> places;
    int64_t last_offset = 0;  // the last row's
    bool sorted = true;

    void Push(uint32_t row, int64_t place, int64_t offset) {
      if (sorted && !places.empty()) {
        sorted = places.back() < place || (places.back() == place && last_offset <= offset);
      }
      rows.push_back(row);
      places.push_back(place);
      last_offset = offset;
    }
  };
  // The name's index in partitions_, added if new.
  uint32_t PartitionId(std::string_view name);
  // Files the row at `index` (its place in places_) under its partition, or as untimed; File
  // does it for a row whose place, offset and partition the caller has at hand.
  void Enqueue(uint32_t index) {
    const Place& place = places_[index];
    File(index, place.event_us, place.offset, pending_[place.partition]);
  }
  void File(uint32_t index, int64_t place, int64_t offset, Pending& pending) {
    if (place == INT64_MIN) {
      untimed_.push_back(index);
    } else {
      pending.Push(index, place, offset);
    }
  }
  // Sorts a partition's list by (place, offset), each tie in arrival order.
  void Sort(Pending& pending);
  // How many of a sorted list's rows are before `watermark`.
  static size_t DueCount(const Pending& pending, int64_t watermark);
  // Hands the rows due before `watermark` to `take`; with `compact`, drops them from the buffer
  // (else they stay, dead, until a later compaction: ReleaseMost's).
  void ReleaseDue(int64_t watermark, const Take& take, bool compact);
  // Drops the dead rows and the handed-out ones (order_) from the buffer, keeping the others in
  // their order.
  void Compact();
  int64_t LeastPlace() const;

  Schema schema_;
  std::function<std::string(uint32_t)> key_of_;
  std::shared_ptr<KeyInterner> models_;
  // The partitions' names (offsets keys) rows came from; a row names its own by index, and
  // ties of event time are ordered by the names.
  std::vector<std::string> partitions_;
  std::map<std::string, uint32_t, std::less<>> partition_ids_;
  // The buffered rows in arrival order (which Persist keeps), each with its place.
  RecordBatch rows_;
  RowTimes times_;
  std::vector<Place> places_;
  std::vector<uint32_t> model_ids_;  // by row, with models_
  // Each partition's rows (by its index in partitions_), and the rows without a time.
  std::vector<Pending> pending_;
  std::vector<uint32_t> untimed_;
  // Release's working space: the due rows of each partition's run (merged_, the runs ending
  // at run_ends_, merged two by two through spare_), the order handed out, what stays, rows'
  // new indexes.
  struct Entry {
    int64_t place;
    uint32_t rank;  // of the row's partition (rank_)
    uint32_t row;
  };
  std::vector<Entry> merged_;
  std::vector<Entry> spare_;
  std::vector<size_t> run_ends_;
  std::vector<uint32_t> order_;
  // 0 for a row handed out but not yet dropped (dead), by row; dead_ counts them. Mid-batch
  // releases leave their rows dead until they are most of the buffer: each compaction moves
  // every live row, and a release that hands out half the rows would move the other half.
  std::vector<uint8_t> keep_;
  size_t dead_ = 0;
  std::vector<uint32_t> remap_;
  // Each partition's rank by name (partitions_ only grows).
  std::vector<uint32_t> rank_;
  uint64_t arrivals_ = 0;
  // The least place buffered (INT64_MIN with a row without a time; INT64_MAX when empty).
  int64_t least_place_ = INT64_MAX;
  bool changed_ = false;
  /// Pages the state holds (Persist), and whether it holds the one value written before pages.
  size_t pages_ = 0;
  bool legacy_ = false;
};

}  // namespace driftd
