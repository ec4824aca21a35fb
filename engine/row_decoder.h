// The shared half of the value formats that decode one record at a time (Avro, Protobuf): the
// chunk loop with the malformed policies, counts and dead letters exactly as the JSON decoder
// applies them, and a RowWriter through which a format puts typed values into the row.
//
// A format derives from RowDecoder and implements DecodeRecord; it never touches the policy.
//
// Thread-safety: as ValueDecoder, one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/value_decoder.h"

namespace driftd {

/// Typed writes into the row being decoded. A field written twice keeps the last value; a
/// field never written is null (and, if not nullable, the record is missing_field).
class RowWriter {
 public:
  void SetDouble(int field, double value) {
    Column& column = columns_[field];
    column.f64[row_] = value;
    column.valid[row_] = 1;
    Seen(field);
  }
  /// long, int (already range-checked), boolean (0 / 1) and timestamp (microseconds) columns.
  void SetInt(int field, int64_t value) {
    Column& column = columns_[field];
    column.i64[row_] = value;
    column.valid[row_] = 1;
    Seen(field);
  }
  void SetString(int field, std::string_view value) {
    Column& column = columns_[field];
    column.str_data.resize(column.str_offsets[row_]);
    column.str_data.append(value);
    column.valid[row_] = 1;
    Seen(field);
  }
  /// Starts (or restarts) an array<double> value; elements follow with AppendElement.
  void BeginArray(int field) {
    Column& column = columns_[field];
    column.f64.resize(column.arr_offsets[row_]);
    column.valid[row_] = 1;
    Seen(field);
  }
  /// False (and nothing appended) once the array has MalformedSpec::max_array_length elements:
  /// the caller reports kTooLarge for the field.
  bool AppendElement(int field, double value) {
    Column& column = columns_[field];
    if (column.f64.size() - column.arr_offsets[row_] >= max_array_length_) return false;
    column.f64.push_back(value);
    return true;
  }
  void SetNull(int field);

  /// A bad value for `field`. Under permissive, a nullable field becomes null and the record
  /// goes on (returns true); otherwise the record is rejected with `reason` (returns false,
  /// and DecodeRecord should return false at once). `detail` follows "field 'name': ".
  bool FieldProblem(int field, MalformedReason reason, std::string detail);
  /// The record as a whole is bad; DecodeRecord returns the false this returns.
  bool Reject(MalformedReason reason, std::string detail);

  int64_t max_array_length() const { return static_cast<int64_t>(max_array_length_); }

 private:
  friend class RowDecoder;
  void Seen(int field) { seen_[field] = stamp_; }

  Column* columns_ = nullptr;
  const Schema* schema_ = nullptr;
  bool permissive_ = false;
  size_t row_ = 0;
  size_t max_array_length_ = 0;
  std::vector<uint64_t> seen_;  // == stamp_ when written in this record
  uint64_t stamp_ = 0;
  bool nulled_ = false;  // permissive kept a bad field as null
  MalformedReason reason_ = MalformedReason::kUndecodable;
  std::string detail_;
};

class RowDecoder : public ValueDecoder {
 public:
  Status Decode(const InputChunk& chunk, RecordBatch& out, std::vector<DeadLetter>* dead_letters,
                const DescribePosition& describe = {}) final;
  const MalformedCounts& counts() const final { return counts_; }
  void ResetCounts() final { counts_ = MalformedCounts{}; }
  const Schema& schema() const final { return schema_; }

 protected:
  RowDecoder(Schema schema, const MalformedSpec& spec);

  /// Decodes one record (never empty, never over maxRecordBytes) into the row through `row`.
  /// Returns false after row.Reject / a false row.FieldProblem. A Status error (not a
  /// malformed record: a schema registry out of reach) is returned through `error` with false.
  virtual bool DecodeRecord(std::string_view bytes, RowWriter& row, Status& error) = 0;

  const MalformedSpec& spec() const { return spec_; }

 private:
  void FinishRow(RecordBatch& out, size_t row);

  Schema schema_;
  MalformedSpec spec_;
  MalformedCounts counts_;
  RowWriter writer_;
};

}  // namespace driftd
