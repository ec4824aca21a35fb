// Columnar batches: the raw records a source hands to the decoder (InputChunk) and the typed
// columns the decoder produces (RecordBatch). Both are reused across batches, so steady-state
// decoding allocates nothing per record.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/schema.h"

namespace driftd {

/// Bytes readable past the end of InputChunk::bytes, so a JSON parser may over-read
/// (simdjson needs SIMDJSON_PADDING = 64).
inline constexpr size_t kInputPadding = 64;

/// Makes room for `more` elements after the last, growing the capacity at least twofold when it
/// must grow: vector::reserve(size() + more) alone gives exactly that, so a vector appended to
/// chunk after chunk would be copied whole at every append.
template <typename T>
void ReserveMore(std::vector<T>& to, size_t more) {
  const size_t need = to.size() + more;
  if (need > to.capacity()) to.reserve(std::max(need, 2 * to.capacity()));
}

/// Where a record came from: a source partition index (into the source's partition list) and
/// an offset within it (Kafka offset, byte position in a file, row number of the rate source).
struct RecordPosition {
  uint32_t partition = 0;
  int64_t offset = 0;
  /// Set by the decoder on a row it kept with bad fields nulled (the permissive policy): the
  /// record was malformed and counted so. The drift stage watches each model's share of them.
  bool malformed = false;
};

/// Raw records read from a source, packed into one buffer.
///
/// Sources append with Append(), or read straight into the buffer (Extend, AddRecord); readers
/// see `bytes` (with kInputPadding readable bytes after data().size()) and `records`. Not
/// thread-safe.
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
    /// Kafka's timestamp type: 0 CreateTime, 1 LogAppendTime, -1 none (other sources).
    int8_t timestamp_type = -1;
    /// The record has a key (Kafka; only kept when the query reads `key`).
    bool has_key = false;
    /// The key's bytes, then the headers, in a buffer of their own (key(), ForEachHeader()).
    /// Empty unless the source was asked for them (engine/metadata_columns.h).
    uint32_t key_size = 0;
    uint32_t headers_size = 0;
    uint64_t meta_begin = 0;
  };

  void Clear() {
    bytes_.clear();
    records_.clear();
    meta_.clear();
  }

  void Append(std::string_view record, RecordPosition position,
              int64_t source_timestamp_us = INT64_MIN, bool cut = false) {
    Record& added = records_.emplace_back();
    added.begin = bytes_.size();
    added.size = static_cast<uint32_t>(record.size());
    added.position = position;
    added.source_timestamp_us = source_timestamp_us;
    added.cut = cut;
    bytes_.append(record);
  }

  /// Reading straight into the chunk, without a copy per record: `n` more bytes at the end of
  /// the buffer for the caller to fill (where they start is returned; earlier pointers into the
  /// buffer may be invalidated), then AddRecord for the records among them, and DropBack for
  /// bytes at the end that belong to no record of this chunk.
  char* Extend(size_t n) {
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    return bytes_.data() + at;
  }
  void DropBack(size_t n) { bytes_.resize(bytes_.size() - n); }
  /// A record at [begin, begin + size) of the buffer.
  void AddRecord(uint64_t begin, uint32_t size, RecordPosition position, bool cut = false) {
    Record& added = records_.emplace_back();
    added.begin = begin;
    added.size = size;
    added.position = position;
    added.cut = cut;
  }

  /// Gives the records from `first` on the partition index `map(index)` (a query's inputs
  /// number their partitions apart: engine/executor/inputs.h).
  template <typename Map>
  void MapPartitions(size_t first, Map&& map) {
    for (size_t i = first; i < records_.size(); ++i) {
      records_[i].position.partition = map(records_[i].position.partition);
    }
  }

  /// Metadata of the record appended last: Kafka's timestamp type.
  void SetTimestampType(int8_t type) { records_.back().timestamp_type = type; }
  /// The key of the record appended last (call at most once per record, before AddHeader).
  void SetKey(std::string_view key) {
    Record& last = records_.back();
    last.meta_begin = meta_.size();
    last.has_key = true;
    last.key_size = static_cast<uint32_t>(key.size());
    meta_.append(key);
  }
  /// Adds a header to the record appended last, after its key if it has one. A null value
  /// (a header without one) is kept apart from an empty value.
  void AddHeader(std::string_view name, const char* value, size_t value_size) {
    Record& last = records_.back();
    if (!last.has_key && last.headers_size == 0) last.meta_begin = meta_.size();
    const size_t before = meta_.size();
    AppendU32(static_cast<uint32_t>(name.size()));
    meta_.append(name);
    AppendU32(value ? static_cast<uint32_t>(value_size) : UINT32_MAX);
    if (value) meta_.append(value, value_size);
    last.headers_size += static_cast<uint32_t>(meta_.size() - before);
  }

  /// The key of record i (empty when it has none; see Record::has_key).
  std::string_view key(size_t i) const {
    return std::string_view(meta_.data() + records_[i].meta_begin, records_[i].key_size);
  }
  /// Calls visit(name, value, null) for each header of record i, in the record's order.
  template <typename Visit>
  void ForEachHeader(size_t i, Visit&& visit) const {
    const Record& r = records_[i];
    size_t at = r.meta_begin + r.key_size;
    const size_t end = at + r.headers_size;
    while (at < end) {
      const uint32_t name_size = ReadU32(at);
      std::string_view name(meta_.data() + at + 4, name_size);
      at += 4 + name_size;
      const uint32_t value_size = ReadU32(at);
      at += 4;
      if (value_size == UINT32_MAX) {
        visit(name, std::string_view(), true);
      } else {
        visit(name, std::string_view(meta_.data() + at, value_size), false);
        at += value_size;
      }
    }
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
  void AppendU32(uint32_t v) {
    char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                 static_cast<char>(v >> 8), static_cast<char>(v)};
    meta_.append(b, 4);
  }
  uint32_t ReadU32(size_t at) const {
    const auto* b = reinterpret_cast<const unsigned char*>(meta_.data() + at);
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | uint32_t{b[3]};
  }

  std::string bytes_;
  std::vector<Record> records_;
  /// Keys and headers, apart from the values so that the values' padding contract holds.
  std::string meta_;
};

/// One typed column. Only the vectors matching `type` are used:
///  - kDouble: f64; kLong, kInt, kTimestamp (microseconds): i64; kBoolean: i64 (0/1);
///  - kString: str_offsets (size rows + 1) into str_data;
///  - kDoubleArray: arr_offsets (size rows + 1) into f64;
///  - kStringArray, kDoubleMap, kStringMap (collections of entries): arr_offsets (size rows
///    + 1) into the entries; entry_valid (one per entry, 0 for a null element or value); the
///    elements or values in str_offsets (size entries + 1) into str_data (strings) or in f64
///    (doubles); a map's keys in key_offsets (size entries + 1) into key_data.
/// `valid[i]` is 0 for a null value.
struct Column {
  FieldType type = FieldType::kString;
  std::vector<uint8_t> valid;
  std::vector<double> f64;
  std::vector<int64_t> i64;
  std::vector<uint32_t> str_offsets;
  std::string str_data;
  std::vector<uint32_t> arr_offsets;
  std::vector<uint32_t> key_offsets;
  std::string key_data;
  std::vector<uint8_t> entry_valid;

  void Clear();
  bool IsNull(size_t row) const { return valid[row] == 0; }
  /// A kString row's value; for array<string> and map<string,string>, entry `i`'s.
  std::string_view String(size_t i) const {
    return std::string_view(str_data.data() + str_offsets[i], str_offsets[i + 1] - str_offsets[i]);
  }
  /// Elements of an array<double> value.
  const double* ArrayData(size_t row) const { return f64.data() + arr_offsets[row]; }
  size_t ArraySize(size_t row) const { return arr_offsets[row + 1] - arr_offsets[row]; }
  /// The entries of a collection's row (array<string>, maps): [EntryBegin, EntryEnd).
  size_t EntryBegin(size_t row) const { return arr_offsets[row]; }
  size_t EntryEnd(size_t row) const { return arr_offsets[row + 1]; }
  /// A map entry's key.
  std::string_view Key(size_t entry) const {
    return std::string_view(key_data.data() + key_offsets[entry],
                            key_offsets[entry + 1] - key_offsets[entry]);
  }
  bool EntryNull(size_t entry) const { return entry_valid[entry] == 0; }
  /// Entries so far (the end of the last row's).
  size_t NumEntries() const { return entry_valid.size(); }

  /// Appends row `row` of `from` (a column of the same type) as this column's next row; for
  /// columns built row by row (str_offsets, arr_offsets and key_offsets hold their leading 0).
  void AppendRow(const Column& from, size_t row);
  /// Appends rows [begin, end) of `from` (a column of the same type), as AppendRow would one
  /// by one, each buffer copied in one piece.
  void AppendRows(const Column& from, size_t begin, size_t end);
  /// Appends a null row to a column built row by row.
  void AppendNull();
};

/// Appends row `row` of `column` as a JSON value: null, a number, a string, a boolean, a
/// timestamp as an RFC 3339 string, an array, or an object for a map.
void AppendJsonValue(std::string& out, const Column& column, size_t row);

/// Decoded records in columns, one Column per schema field, plus where each row came from.
struct RecordBatch {
  std::vector<Column> columns;
  std::vector<RecordPosition> positions;
  size_t num_rows = 0;
  /// New at every Reset (unique in the process; 0 for a batch never reset), so that what is
  /// derived from a batch's rows can be kept until it changes (KeyInterner).
  uint64_t generation = 0;

  /// Sets up empty columns for `schema`, keeping allocated capacity.
  void Reset(const Schema& schema);
  /// A new generation, for a batch whose rows changed other than by Reset.
  void Renew();
  /// Sizes every column and `positions` for `rows` rows that a decoder writes in place: the
  /// values and validity of fixed-width columns, the offsets of variable-width ones (their data
  /// grows as the rows are written). Called again with the rows kept, it trims to them;
  /// num_rows is the caller's to set.
  void PrepareColumns(size_t rows);
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
