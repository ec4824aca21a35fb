// The query's event-time clock: one watermark for aggregation and drift alike, kept per input
// partition so that results do not depend on batching, read order or how many processes read.
//
// Each clock partition (a Kafka partition; a source whose records form one ordered stream, such
// as a directory of files, is one partition) keeps the largest event time read from it. The
// query's watermark is the minimum, over the partitions that have data, of that maximum minus
// the delay (Flink's rule), and it moves only at batch boundaries:
//   - a partition with records not read yet holds the watermark where it is until it is read;
//   - a partition that never had a record does not count;
//   - a partition with nothing left to read for idle_timeout of processing time is idle and does
//     not count until it has records again (so one silent partition does not stop every window
//     from closing; records it brings later may fall into closed windows and are dropped as
//     late: the one case where processing time affects results, as with Flink's idleness).
//
// A row is late when its window (or, without a window, its event time) is at or behind the
// watermark of its own partition just before the row: the partition's largest earlier event time
// minus the delay. That depends only on the partition's own order, which the source fixes, so the
// same rows are late whatever the batching; the query watermark is never ahead of a partition's
// own, so a window closed by the query watermark never receives a row that is not late (idleness
// aside, where the query watermark decides).
//
// Without a declared watermark (delay 0, the window column as the clock) the clock still closes
// drift's event-time windows; the aggregation then drops nothing, as Spark does.
//
// Not thread-safe; the executor's thread uses it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/executor/stage.h"
#include "engine/offsets.h"

namespace driftd {

struct EventClockOptions {
  /// Schema index of the event-time column; -1: the query has no event time (no clock).
  int column = -1;
  /// Watermark delay in microseconds. Default: 0.
  int64_t delay_us = 0;
  /// Processing time after which a partition with nothing to read stops holding the watermark,
  /// in milliseconds; 0: never. Default: 0.
  int64_t idle_timeout_ms = 0;
};

/// What the executor knows of one source partition after planning a batch.
struct PartitionActivity {
  std::string name;  // the clock partition's name ("" for a source that is one stream)
  /// Records exist beyond the batch's end offset (more to read after this batch).
  bool more_available = false;
  /// The batch reads records from it.
  bool read_in_batch = false;
};

class EventClock {
 public:
  explicit EventClock(EventClockOptions options);

  bool enabled() const { return options_.column >= 0; }
  /// The watermark in force for the current batch; INT64_MIN before there is one.
  int64_t watermark_us() const { return watermark_us_; }

  /// Restores the state of the last committed batch: each partition's largest event time and
  /// the watermark.
  void Restore(const std::map<std::string, int64_t>& max_event_us, int64_t watermark_us);

  /// Starts a batch: `activity` lists every partition of the source with what the plan says of
  /// it; `now_ms` is the steady clock in milliseconds (idleness). A known partition it does not
  /// list has nothing to read (and goes idle as an empty one does).
  void BeginBatch(const std::vector<PartitionActivity>& activity, int64_t now_ms);

  /// Scaled out, a task's clock hears of source partitions that other processes read: a
  /// partition the watermark waits for until it reports (it may have records)...
  void Expect(std::string_view name);
  /// ...and a partition's state as its reader reported it (a row block's clock mark).
  void Report(std::string_view name, int64_t max_us, bool more_available, bool idle);
  /// ...and which partitions the source has now (`listed`, whoever reads them): a known one it
  /// no longer lists (its topic deleted, a pattern that stopped matching it) has no reader to
  /// report it any more, so once idle_timeout passed since the source stopped listing it, it
  /// is idle (until then it holds the watermark as before). One listed again is its reader's
  /// to report once more, the time it was away forgotten. `now_ms` as for BeginBatch.
  void Delist(const std::vector<std::string>& listed, int64_t now_ms);

  /// A task's watermark as it was persisted (scale-out): the watermark never goes below it.
  void RaiseWatermark(int64_t watermark_us) {
    watermark_us_ = std::max(watermark_us_, watermark_us);
  }

  /// A partition taken over from another reader (scale-out): its largest event time as that
  /// reader left it, its activity not known yet.
  void Reset(std::string_view name, int64_t max_us);

  struct PartitionState {
    std::string name;
    int64_t max_us = INT64_MIN;
    bool more_available = false;
    bool idle = false;
  };
  /// Every partition's state (a scaled-out task persists it with its state).
  std::vector<PartitionState> Partitions() const;
  /// One partition's state (a default one when it is not known).
  PartitionState StateOf(std::string_view name) const;

  /// Fills `times` for the rows of `batch`, in row order (which is each partition's order), and
  /// advances each partition's largest event time. `partition_name` maps a record position's
  /// partition index to its clock partition's name.
  template <typename NameOf>
  void Stamp(const RecordBatch& batch, NameOf&& partition_name, RowTimes& times) {
    Stamp(batch, options_.column, partition_name, times);
  }
  /// As above, for rows whose event time is column `column` of their own schema (the labels
  /// input's).
  template <typename NameOf>
  void Stamp(const RecordBatch& batch, int column, NameOf&& partition_name, RowTimes& times);

  /// The watermark for the next batch (call after the batch's rows were stamped); it never
  /// moves back. Does not change watermark_us() until CommitBatch.
  int64_t NextWatermark() const { return Watermark(/*batch_read=*/true); }
  /// While the batch is read: the watermark the rows stamped so far allow. As NextWatermark,
  /// but a partition the batch reads that has no event time yet holds it: its rows, still to
  /// come, may be older than every row stamped so far. No row stamped later comes before it
  /// (a row's own partition's time, less the delay, bounds it below).
  int64_t StampedWatermark() const { return Watermark(/*batch_read=*/false); }

  /// The batch committed: the next batch runs with NextWatermark().
  void CommitBatch() { watermark_us_ = NextWatermark(); }

  /// Each partition's largest event time, for the commit record.
  std::map<std::string, int64_t> MaxEventTimes() const;
  /// Largest event time over every partition (progress), INT64_MIN if none.
  int64_t MaxEventTime() const;

 private:
  struct Partition {
    std::string name;
    int64_t max_us = INT64_MIN;
    bool more_available = false;
    int64_t last_active_ms = INT64_MIN;  // steady clock; INT64_MIN until first seen
    /// Scaled out (Delist): since when the source has not listed it; INT64_MIN while it does.
    int64_t delisted_since_ms = INT64_MIN;
    bool reported_idle = false;  // what its reader's last mark said (Report)
    bool idle = false;
    bool read_in_batch = false;  // the batch reads it (BeginBatch)
  };
  Partition& Slot(std::string_view name);
  /// `max_us` less the watermark delay, saturating: an event time near the smallest one a
  /// producer can write must not wrap around to the largest.
  int64_t LessDelay(int64_t max_us) const {
    return max_us < INT64_MIN + 1 + options_.delay_us ? INT64_MIN + 1 : max_us - options_.delay_us;
  }
  int64_t Watermark(bool batch_read) const;
  int64_t SlotIndexFor(uint32_t partition_index, std::string_view name);

  EventClockOptions options_;
  std::vector<Partition> partitions_;
  std::map<std::string, size_t, std::less<>> by_name_;
  /// Record position partition index -> slot (cache), -1 unknown.
  std::vector<int64_t> slot_of_index_;
  /// BeginBatch's scratch: which slots the plan listed.
  std::vector<uint8_t> listed_;
  int64_t watermark_us_ = INT64_MIN;
};

template <typename NameOf>
void EventClock::Stamp(const RecordBatch& batch, int column_index, NameOf&& partition_name,
                       RowTimes& times) {
  times.event_us.assign(batch.num_rows, INT64_MIN);
  times.late_before.assign(batch.num_rows, INT64_MIN);
  if (!enabled() || column_index < 0) return;
  const Column& column = batch.columns[static_cast<size_t>(column_index)];
  uint32_t last_index = UINT32_MAX;
  Partition* partition = nullptr;  // last_index's: rows come in runs of one partition
  for (size_t row = 0; row < batch.num_rows; ++row) {
    const uint32_t index = batch.positions[row].partition;
    if (index != last_index) {
      if (index >= slot_of_index_.size()) slot_of_index_.resize(index + 1, -1);
      int64_t slot = slot_of_index_[index];
      if (slot < 0) {
        slot = SlotIndexFor(index, partition_name(index));
        slot_of_index_[index] = slot;
      }
      partition = &partitions_[static_cast<size_t>(slot)];
      last_index = index;
    }
    const int64_t own = partition->max_us == INT64_MIN ? INT64_MIN : LessDelay(partition->max_us);
    times.late_before[row] = std::max(own, watermark_us_);
    if (column.IsNull(row)) continue;
    const int64_t t = column.i64[row];
    times.event_us[row] = t;
    if (t > partition->max_us) partition->max_us = t;
  }
}

}  // namespace driftd
