// Row blocks: how a scaled-out query sends decoded rows from the task that read them (a source
// partition's) to the task that owns their model, through the repartition topic
// (engine/group.h). One block per batch, source partition and target task: the rows, each with
// its event time and the watermark it is judged by (RowTimes), and the source partition's
// clock after them, so that the owning task's watermark can wait for every source partition.
//
// Encoding (little-endian, drift/codec.h): u8 version (2) | clock mark | u32 rows | rows, a row
// being i64 late_before | i64 event_us | i64 offset in its source partition | u8 malformed |
// per schema field: u8 valid, then the value (string:
// u32 length + bytes; double: f64; long, int, boolean, timestamp: i64; array<double>: u32
// count + f64 each; array<string> and maps: u32 count + per entry (a map's key: u32 length +
// bytes) u8 valid, the value). Version 1 (written before) has no offset and malformed flag and
// is still read (offset 0, not malformed). Version 3 is version 2's layout for rows only the
// labels' join takes (a prediction's copy for the task that joins its key). Version 4 is not
// rows but a message between two tasks' stages (TaskMessageBlock). Readers refuse other
// versions and truncated blocks (kCorruption).
//
// A value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/result.h"
#include "engine/schema.h"

namespace driftd {

/// A source partition's clock as the rows before it leave it.
struct ClockMark {
  std::string partition;          // offsets key of the source partition ("topic-3")
  int64_t max_event_us = INT64_MIN;  // largest event time read from it
  bool more_available = false;    // it has records not read yet
  bool idle = false;              // nothing to read for the idle timeout
};

/// Collects the rows of one source partition for one task in a batch, as blocks of at most
/// kMaxBlockBytes (a Kafka record's size is limited). A block that more rows follow carries the
/// partition's clock as of its last row (more_available set), so a task's watermark never
/// passes rows still on their way to it.
class RowBlockWriter {
 public:
  /// Block size at which a new block starts. Default: 512 KiB.
  static constexpr size_t kMaxBlockBytes = 512 << 10;

  /// Rows of source partition `partition` (its offsets key). `join_only`: rows only the
  /// labels' join takes (blocks of version 3).
  explicit RowBlockWriter(std::string partition, bool join_only = false)
      : partition_(std::move(partition)), join_only_(join_only) {}

  /// `max_event_after_us`: the partition's largest event time once this row is read.
  void AddRow(const RecordBatch& batch, size_t row, int64_t late_before_us, int64_t event_us,
              int64_t max_event_after_us);
  bool empty() const { return rows_ == 0 && ready_.empty(); }
  /// Bytes of every row added since the last Finish, blocks sealed on the way included.
  size_t bytes() const { return sealed_bytes_ + body_.size(); }
  /// The blocks, the last with `mark` (of this writer's partition) as its clock; the writer is
  /// empty again afterwards.
  std::vector<std::string> Finish(const ClockMark& mark);

 private:
  std::string Seal(const ClockMark& mark);

  std::string body_;
  uint32_t rows_ = 0;
  int64_t max_event_us_ = INT64_MIN;
  std::string partition_;
  bool join_only_ = false;
  std::vector<std::string> ready_;
  size_t sealed_bytes_ = 0;  // of ready_
};

/// The source partition a block's rows come from (its clock mark's), read from its header
/// alone: which schema its rows have depends on it.
Result<std::string> RowBlockPartition(std::string_view block);

/// Appends a block's rows to `batch` (reset for `schema` by the caller) and `times`, each row
/// at position {partition_index, its offset, its malformed flag}; `mark` receives the block's
/// clock, and `join_only` (when given) whether its rows are for the labels' join only.
Status ReadRowBlock(std::string_view block, const Schema& schema, uint32_t partition_index,
                    RecordBatch& batch, RowTimes& times, ClockMark& mark,
                    bool* join_only = nullptr);

/// A message from a task's stage to another task's (the labels' join hands each model's windows
/// to the model's task: engine/executor/performance_stage.h), on the repartition topic beside
/// row blocks: a block of version 4, the stage's bytes after it.
std::string TaskMessageBlock(std::string_view body);
/// The stage's bytes of a task message; nullopt when the block is a row block.
std::optional<std::string_view> TaskMessageBody(std::string_view block);

}  // namespace driftd
