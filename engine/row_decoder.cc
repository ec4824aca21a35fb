#include "engine/row_decoder.h"

#include <fmt/format.h>

namespace driftd {

void RowWriter::SetNull(int field) {
  Column& column = columns_[field];
  column.valid[row_] = 0;
  switch (column.type) {
    case FieldType::kDouble:
      column.f64[row_] = 0;
      break;
    case FieldType::kString:
      column.str_data.resize(column.str_offsets[row_]);
      break;
    case FieldType::kDoubleArray:
      column.f64.resize(column.arr_offsets[row_]);
      break;
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap:
      break;  // no value format fills these (they refuse such schemas)
    default:
      column.i64[row_] = 0;
      break;
  }
  Seen(field);
}

bool RowWriter::FieldProblem(int field, MalformedReason reason, std::string detail) {
  const Field& declared = schema_->fields[field];
  if (permissive_ && declared.nullable && reason != MalformedReason::kMissingField) {
    SetNull(field);
    if (!nulled_) {
      // The first bad field names the record's reason, as in the JSON decoder.
      nulled_ = true;
      reason_ = reason;
    }
    return true;
  }
  reason_ = reason;
  detail_ = fmt::format("field '{}': {}", declared.name, detail);
  return false;
}

bool RowWriter::Reject(MalformedReason reason, std::string detail) {
  reason_ = reason;
  detail_ = std::move(detail);
  return false;
}

RowDecoder::RowDecoder(Schema schema, const MalformedSpec& spec)
    : schema_(std::move(schema)), spec_(spec) {
  writer_.schema_ = &schema_;
  writer_.permissive_ = spec_.policy == MalformedPolicy::kPermissive;
  writer_.max_array_length_ = static_cast<size_t>(spec_.max_array_length);
  writer_.seen_.assign(schema_.fields.size(), 0);
}

void RowDecoder::FinishRow(RecordBatch& out, size_t row) {
  for (size_t f = 0; f < schema_.fields.size(); ++f) {
    Column& column = out.columns[f];
    if (column.type == FieldType::kString) {
      column.str_offsets[row + 1] = static_cast<uint32_t>(column.str_data.size());
    } else if (column.type == FieldType::kDoubleArray) {
      column.arr_offsets[row + 1] = static_cast<uint32_t>(column.f64.size());
    } else if (IsCollection(column.type)) {
      column.arr_offsets[row + 1] = static_cast<uint32_t>(column.entry_valid.size());
    }
  }
}

Status RowDecoder::Decode(const InputChunk& chunk, RecordBatch& out,
                          std::vector<DeadLetter>* dead_letters,
                          const DescribePosition& describe) {
  const size_t num_fields = schema_.fields.size();
  if (out.columns.size() != num_fields) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "record batch has {} columns but the schema has {} fields (call Reset)",
                     out.columns.size(), num_fields);
  }
  for (size_t f = 0; f < num_fields; ++f) {
    if (out.columns[f].type != schema_.fields[f].type ||
        out.columns[f].valid.size() != out.num_rows) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "record batch column {} does not match the schema (call Reset)", f);
    }
  }
  const size_t first_row = out.num_rows;
  out.PrepareColumns(first_row + chunk.size());
  RowWriter& w = writer_;
  w.columns_ = out.columns.data();
  size_t row = first_row;
  for (size_t i = 0; i < chunk.size(); ++i) {
    const InputChunk::Record& record = chunk.records()[i];
    const std::string_view bytes = chunk.record(i);
    ++w.stamp_;
    w.row_ = row;
    w.nulled_ = false;
    bool ok = false;
    Status error = Ok();
    if (record.cut || static_cast<int64_t>(bytes.size()) > spec_.max_record_bytes) {
      w.Reject(MalformedReason::kTooLarge,
               record.cut ? fmt::format("record of more than {} bytes exceeds maxRecordBytes {} "
                                        "(its first {} bytes were kept)",
                                        spec_.max_record_bytes, spec_.max_record_bytes,
                                        bytes.size())
                          : fmt::format("record of {} bytes exceeds maxRecordBytes {}",
                                        bytes.size(), spec_.max_record_bytes));
    } else if (bytes.empty()) {
      w.Reject(MalformedReason::kEmpty, "empty record");
    } else {
      ok = DecodeRecord(bytes, w, error);
      if (!error) {
        out.PrepareColumns(row);
        out.num_rows = row;
        return error;
      }
      if (ok) {
        for (size_t f = 0; f < num_fields; ++f) {
          if (w.seen_[f] == w.stamp_) continue;
          if (!schema_.fields[f].nullable) {
            ok = w.Reject(MalformedReason::kMissingField,
                          fmt::format("field '{}' is missing", schema_.fields[f].name));
            break;
          }
          w.SetNull(static_cast<int>(f));
        }
      }
    }
    if (ok) [[likely]] {
      FinishRow(out, row);
      out.positions[row] = record.position;
      if (w.nulled_) {
        out.positions[row].malformed = true;
        ++counts_.by_reason[static_cast<size_t>(w.reason_)];
      }
      ++row;
      continue;
    }
    for (size_t f = 0; f < num_fields; ++f) w.SetNull(static_cast<int>(f));
    ++counts_.by_reason[static_cast<size_t>(w.reason_)];
    switch (spec_.policy) {
      case MalformedPolicy::kFail: {
        out.PrepareColumns(row);
        out.num_rows = row;
        const std::string where =
            describe ? describe(record.position)
                     : fmt::format("partition {} offset {}", record.position.partition,
                                   record.position.offset);
        return MakeError(ErrorCode::kMalformedRecord, "malformed record at {}: {}: {}", where,
                         ToString(w.reason_), w.detail_);
      }
      case MalformedPolicy::kDeadLetter:
        if (dead_letters != nullptr) {
          dead_letters->push_back(
              DeadLetter{std::string(bytes), w.reason_, w.detail_, record.position, record.cut});
        }
        break;
      case MalformedPolicy::kPermissive:
      case MalformedPolicy::kDrop:
        break;
    }
  }
  out.PrepareColumns(row);
  out.num_rows = row;
  return Ok();
}

}  // namespace driftd
