// Columnar batches: the raw records a source hands to the decoder (InputChunk) and the typed
// columns the decoder produces (RecordBatch). Both are reused across batches, so steady-state
// decoding allocates nothing per record.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/schema.h"

namespace driftd {

/// Bytes readable past the end of InputChunk::bytes, so a JSON parser may over-read
/// (simdjson needs SIMDJSON_PADDING = 64).
inline constexpr size_t kInputPadding = 64;

/// Where a record came from: a source partition index (into the source's partition list) and
/// an offset within it (Kafka offset, byte position in a file, row number of the rate source).
struct RecordPosition {
  uint32_t partition = 0;
  int64_t offset = 0;
};

/// Raw records read from a source, packed into one buffer.
///
/// Sources append with Append(); readers see `bytes` (with kInputPadding readable bytes after
/// data().size()) and `records`. Not thread-safe.
class InputChunk {
 public:
  struct Record {
    uint64_t begin = 0;  // into bytes()
    uint32_t size = 0;
    RecordPosition position;
    /// Event time the source knows of its own (Kafka timestamp), or INT64_MIN.
    int64_t source_timestamp_us = INT64_MIN;
    /// The source cut a longer record to these first bytes (a line over maxRecordBytes, whose
    /// rest it did not read into memory).
    bool cut = false;
  };

  void Clear() {
    bytes_.clear();
    records_.clear();
  }

  void Append(std::string_view record, RecordPosition position,
              int64_t source_timestamp_us = INT64_MIN, bool cut = false) {
    records_.push_back({bytes_.size(), static_cast<uint32_t>(record.size()), position,
                        source_timestamp_us, cut});
    bytes_.append(record);
  }

  /// Makes the padding after the last record readable; call once after appending.
  void Seal() {
    bytes_.reserve(bytes_.size() + kInputPadding);
  }

  size_t size() const { return records_.size(); }
  bool empty() const { return records_.empty(); }
  const std::vector<Record>& records() const { return records_; }
  std::string_view record(size_t i) const {
    return std::string_view(bytes_.data() + records_[i].begin, records_[i].size);
  }
  /// The whole buffer; capacity() - size() >= kInputPadding after Seal().
  const std::string& bytes() const { return bytes_; }
  size_t byte_size() const { return bytes_.size(); }

 private:
  std::string bytes_;
  std::vector<Record> records_;
};

/// One typed column. Only the vectors matching `type` are used:
///  - kDouble: f64; kLong, kInt, kTimestamp (microseconds): i64; kBoolean: i64 (0/1);
///  - kString: str_offsets (size rows + 1) into str_data;
///  - kDoubleArray: arr_offsets (size rows + 1) into f64.
/// `valid[i]` is 0 for a null value.
struct Column {
  FieldType type = FieldType::kString;
  std::vector<uint8_t> valid;
  std::vector<double> f64;
  std::vector<int64_t> i64;
  std::vector<uint32_t> str_offsets;
  std::string str_data;
  std::vector<uint32_t> arr_offsets;

  void Clear();
  bool IsNull(size_t row) const { return valid[row] == 0; }
  std::string_view String(size_t row) const {
    return std::string_view(str_data.data() + str_offsets[row],
                            str_offsets[row + 1] - str_offsets[row]);
  }
  /// Elements of an array<double> value.
  const double* ArrayData(size_t row) const { return f64.data() + arr_offsets[row]; }
  size_t ArraySize(size_t row) const { return arr_offsets[row + 1] - arr_offsets[row]; }
};

/// Decoded records in columns, one Column per schema field, plus where each row came from.
struct RecordBatch {
  std::vector<Column> columns;
  std::vector<RecordPosition> positions;
  size_t num_rows = 0;

  /// Sets up empty columns for `schema`, keeping allocated capacity.
  void Reset(const Schema& schema);
};

/// Event time of each row of a RecordBatch as the query's clock judges it: one clock for every
/// stage (engine/executor/event_clock.h).
struct RowTimes {
  /// The row's event time (the clock's column), or INT64_MIN when null or without a clock.
  std::vector<int64_t> event_us;
  /// The row is late for an event-time window [start, end) when end <= late_before[row], and
  /// late without a window when its event time <= late_before[row]. INT64_MIN: never late.
  std::vector<int64_t> late_before;
};

}  // namespace driftd
