// The Source interface (Spark's DataStreamReader side): what the executor asks of every input
// connector; connectors/ implements it. A source plans a batch as an offset range, reads exactly that range again on
// replay, and learns when a batch is durably committed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/group.h"
#include "engine/offsets.h"
#include "engine/result.h"

namespace driftd {

/// Lag of one partition after a batch: records (or bytes) available but not yet read.
struct PartitionLag {
  std::string partition;
  int64_t committed = 0;
  int64_t latest = 0;
  /// The positions count bytes (the file source), not records.
  bool bytes = false;
  int64_t lag() const { return latest > committed ? latest - committed : 0; }
};

/// A Kafka partition: its topic and number.
struct TopicPartition {
  std::string topic;
  int32_t partition = 0;
};

/// One input of a query as its progress record lists it (Spark's `sources` entries).
struct SourceSummary {
  std::string name;    // the input's name ("" for a query's only input)
  std::string prefix;  // of its offsets keys and lag partitions ("" for the first input)
  std::string description;
};

/// Reads the records of one planned batch, in chunks so memory stays bounded.
/// Lifecycle: created by Source::Read, used by the executor's thread, destroyed before the next
/// Source call.
class SourceReader {
 public:
  virtual ~SourceReader() = default;
  /// Appends up to about `max_bytes` of records to `chunk` (which the caller cleared).
  /// Returns false when the range is exhausted (chunk may still hold the last records).
  virtual Result<bool> Next(InputChunk& chunk, size_t max_bytes) = 0;
  /// Records the range could not deliver because they are gone (failOnDataLoss=false), counted.
  virtual int64_t lost_records() const { return 0; }
};

/// Lifecycle: Start once, then any number of PlanBatch / Read / OnCommitted from the executor's
/// thread, then destruction. Not thread-safe unless a method says so.
class Source {
 public:
  virtual ~Source() = default;

  /// Connects and positions the source. `committed` holds the end offsets of the last committed
  /// batch, or is empty on a first start (then startingOffsets applies).
  virtual Status Start(const SourceOffsets& committed) = 0;

  /// The start offsets of the first batch when the checkpoint is empty (after Start).
  virtual Result<SourceOffsets> InitialOffsets() = 0;

  /// End offsets of the next batch beginning at `start`, bounded by the source's rate limits
  /// (maxOffsetsPerTrigger, maxFilesPerTrigger, ...). Returning `start` means: no new data.
  virtual Result<SourceOffsets> PlanBatch(const SourceOffsets& start) = 0;

  /// Trigger availableNow: from now on PlanBatch never plans past the data available at this
  /// moment, so the query drains what exists at start and then sees "no new data".
  virtual Status FreezeAvailable() { return Ok(); }

  /// Reads the records in [start, end). Reading the same range twice yields the same records
  /// (fault-tolerant sources only).
  virtual Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                                     const SourceOffsets& end) = 0;

  /// The batch ending at `end` is in the checkpoint (its output waits in the outbox): a source
  /// that holds read records in memory until then releases them. Called right after the
  /// commit, before the batch is delivered and possibly after the next batch was planned (a
  /// source that waits in PlanBatch for room it makes here would otherwise wait forever).
  virtual void OnCheckpointed(const SourceOffsets& end) { (void)end; }

  /// The batch ending at `end` is durably committed and delivered: the source may commit
  /// consumer-group offsets. Called when the batch's delivery ends, which may be after the
  /// next batch was planned and read. Failure here is logged, never fatal.
  virtual Status OnCommitted(const SourceOffsets& end) { (void)end; return Ok(); }

  /// Lag per partition relative to `position`, for progress and metrics.
  virtual std::vector<PartitionLag> Lag(const SourceOffsets& position) {
    (void)position;
    return {};
  }

  /// Whether each partition of the source is an ordered stream of its own, read in an order
  /// that does not depend on the others (Kafka partitions): each then has its own event-time
  /// clock. False: the source's records form one stream (files read one after the other, the
  /// rate and socket sources). Default: false.
  virtual bool HasIndependentPartitions() const { return false; }

  /// The offsets key ("topic-3") of the partition a RecordPosition::partition index names.
  /// Only called when HasIndependentPartitions().
  virtual std::string PartitionKeyOf(uint32_t partition_index) const {
    (void)partition_index;
    return "";
  }

  /// The event-time clock partition a RecordPosition::partition index belongs to: its offsets
  /// key when the partitions are independent, else "" (the source is one stream).
  virtual std::string ClockPartitionOf(uint32_t partition_index) const {
    return HasIndependentPartitions() ? PartitionKeyOf(partition_index) : std::string();
  }
  /// The clock partition of an offsets key (the same names as ClockPartitionOf).
  virtual std::string ClockPartitionOfKey(std::string_view key) const {
    return HasIndependentPartitions() ? std::string(key) : std::string();
  }

  /// The inputs this source reads, for the progress record. Default: itself.
  virtual std::vector<SourceSummary> Summaries() const { return {{"", "", Describe()}}; }

  /// The topic and partition number a RecordPosition::partition index names, for the `topic`
  /// and `partition` metadata columns (engine/metadata_columns.h); nullopt for a source without
  /// topics (then those columns are null). Default: nullopt.
  virtual std::optional<TopicPartition> TopicPartitionOf(uint32_t partition_index) const {
    (void)partition_index;
    return std::nullopt;
  }

  /// "topic inference-logs partition 3 offset 1742", "file /data/a.jsonl byte 4096".
  virtual std::string DescribePosition(const RecordPosition& position) const = 0;

  /// Spark-like description for progress records, e.g. "FileSource[/data/in]".
  virtual std::string Describe() const = 0;

  /// The consumer group that shares this source among processes (scaleOut), or null.
  virtual GroupMember* group() { return nullptr; }

  /// Scaled out with several inputs: this source (a later input's) joins the group of
  /// `first` (the first input's source) instead of one of its own, so that one group divides
  /// every input's partitions, and the tasks, among the processes. Before Start. A source that
  /// cannot says why.
  virtual Status ShareGroupOf(Source& first) {
    (void)first;
    return MakeError(ErrorCode::kConfig, "{} cannot share a consumer group", Describe());
  }

  /// False for sources that cannot replay a range (socket): exactly-once does not hold.
  virtual bool IsReplayable() const { return true; }

  /// True when the source is connected and able to serve data (for /readyz).
  virtual bool IsReady() const { return true; }

  /// Whether the last PlanBatch could not see the data (brokers unreachable): its "no new data"
  /// is then no fact, and a query that ends once nothing is left (availableNow) waits instead.
  virtual bool PlannedBlind() const { return false; }
};

}  // namespace driftd
