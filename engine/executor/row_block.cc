#include "engine/executor/row_block.h"

#include "engine/drift/codec.h"

namespace driftd {

namespace {

// 2 carries each row's offset in its source partition and its malformed flag, so that a task
// orders and judges a routed row as the process that read it would; 1 is still read. 3 is 2's
// layout for rows that only the labels' join takes (a driftd that cannot tell refuses them).
constexpr uint8_t kBlockVersion = 2;
constexpr uint8_t kFirstVersion = 1;
constexpr uint8_t kJoinOnlyVersion = 3;
constexpr uint8_t kTaskMessageVersion = 4;

}  // namespace

void RowBlockWriter::AddRow(const RecordBatch& batch, size_t row, int64_t late_before_us,
                            int64_t event_us, int64_t max_event_after_us) {
  drift::ByteWriter w(body_);
  w.I64(late_before_us);
  w.I64(event_us);
  w.I64(batch.positions[row].offset);
  w.U8(batch.positions[row].malformed ? 1 : 0);
  for (const Column& column : batch.columns) {
    if (column.IsNull(row)) {
      w.U8(0);
      continue;
    }
    w.U8(1);
    switch (column.type) {
      case FieldType::kString: w.Str(column.String(row)); break;
      case FieldType::kDouble: w.F64(column.f64[row]); break;
      case FieldType::kLong:
      case FieldType::kInt:
      case FieldType::kBoolean:
      case FieldType::kTimestamp: w.I64(column.i64[row]); break;
      case FieldType::kDoubleArray: {
        const size_t n = column.ArraySize(row);
        const double* data = column.ArrayData(row);
        w.U32(static_cast<uint32_t>(n));
        for (size_t e = 0; e < n; ++e) w.F64(data[e]);
        break;
      }
      case FieldType::kStringArray:
      case FieldType::kDoubleMap:
      case FieldType::kStringMap: {
        w.U32(static_cast<uint32_t>(column.EntryEnd(row) - column.EntryBegin(row)));
        for (size_t e = column.EntryBegin(row); e < column.EntryEnd(row); ++e) {
          if (IsMap(column.type)) w.Str(column.Key(e));
          w.U8(column.entry_valid[e]);
          if (column.type == FieldType::kDoubleMap) {
            w.F64(column.f64[e]);
          } else {
            w.Str(column.String(e));
          }
        }
        break;
      }
    }
  }
  ++rows_;
  max_event_us_ = max_event_after_us;
  if (body_.size() >= kMaxBlockBytes) {
    ClockMark partial;
    partial.partition = partition_;
    partial.max_event_us = max_event_us_;
    partial.more_available = true;  // the rest of the batch follows
    ready_.push_back(Seal(partial));
    sealed_bytes_ += ready_.back().size();
  }
}

std::vector<std::string> RowBlockWriter::Finish(const ClockMark& mark) {
  std::vector<std::string> blocks = std::move(ready_);
  ready_.clear();
  sealed_bytes_ = 0;
  blocks.push_back(Seal(mark));
  return blocks;
}

std::string RowBlockWriter::Seal(const ClockMark& mark) {
  std::string block;
  block.reserve(body_.size() + mark.partition.size() + 32);
  drift::ByteWriter w(block);
  w.U8(join_only_ ? kJoinOnlyVersion : kBlockVersion);
  w.Str(mark.partition);
  w.I64(mark.max_event_us);
  w.U8(static_cast<uint8_t>((mark.more_available ? 1 : 0) | (mark.idle ? 2 : 0)));
  w.U32(rows_);
  block += body_;
  body_.clear();
  rows_ = 0;
  return block;
}

Result<std::string> RowBlockPartition(std::string_view block) {
  drift::ByteReader r(block);
  const uint8_t version = r.U8();
  if (version != kBlockVersion && version != kFirstVersion && version != kJoinOnlyVersion) {
    return MakeError(ErrorCode::kCorruption, "row block of {} bytes: unknown version",
                     block.size());
  }
  std::string partition(r.Str());
  if (r.failed()) {
    return MakeError(ErrorCode::kCorruption, "row block of {} bytes: truncated header",
                     block.size());
  }
  return partition;
}

Status ReadRowBlock(std::string_view block, const Schema& schema, uint32_t partition_index,
                    RecordBatch& batch, RowTimes& times, ClockMark& mark, bool* join_only) {
  drift::ByteReader r(block);
  auto corrupt = [&](std::string_view what) {
    return MakeError(ErrorCode::kCorruption, "row block of {} bytes: {}", block.size(), what);
  };
  uint8_t version = r.U8();
  if (join_only) *join_only = version == kJoinOnlyVersion;
  if (version == kJoinOnlyVersion) version = kBlockVersion;
  if (version != kBlockVersion && version != kFirstVersion) return corrupt("unknown version");
  mark.partition = std::string(r.Str());
  mark.max_event_us = r.I64();
  const uint8_t flags = r.U8();
  mark.more_available = (flags & 1) != 0;
  mark.idle = (flags & 2) != 0;
  const uint32_t rows = r.U32();
  if (r.failed()) return corrupt("truncated header");
  if (batch.columns.size() != schema.fields.size()) return corrupt("batch not reset");
  for (uint32_t i = 0; i < rows; ++i) {
    times.late_before.push_back(r.I64());
    times.event_us.push_back(r.I64());
    RecordPosition position{partition_index, 0};
    if (version >= 2) {
      position.offset = r.I64();
      position.malformed = r.U8() != 0;
    }
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      Column& column = batch.columns[f];
      const bool valid = r.U8() != 0;
      column.valid.push_back(valid ? 1 : 0);
      switch (column.type) {
        case FieldType::kString: {
          if (valid) column.str_data.append(r.Str());
          column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
          break;
        }
        case FieldType::kDouble: column.f64.push_back(valid ? r.F64() : 0.0); break;
        case FieldType::kLong:
        case FieldType::kInt:
        case FieldType::kBoolean:
        case FieldType::kTimestamp: column.i64.push_back(valid ? r.I64() : 0); break;
        case FieldType::kDoubleArray: {
          if (valid) {
            const uint32_t n = r.U32();
            if (n > r.remaining() / 8) return corrupt("truncated array");
            for (uint32_t e = 0; e < n; ++e) column.f64.push_back(r.F64());
          }
          column.arr_offsets.push_back(static_cast<uint32_t>(column.f64.size()));
          break;
        }
        case FieldType::kStringArray:
        case FieldType::kDoubleMap:
        case FieldType::kStringMap: {
          if (valid) {
            const uint32_t n = r.U32();
            if (n > r.remaining() / 5) return corrupt("truncated entries");
            for (uint32_t e = 0; e < n && !r.failed(); ++e) {
              if (IsMap(column.type)) {
                column.key_data.append(r.Str());
                column.key_offsets.push_back(static_cast<uint32_t>(column.key_data.size()));
              }
              column.entry_valid.push_back(r.U8() != 0 ? 1 : 0);
              if (column.type == FieldType::kDoubleMap) {
                column.f64.push_back(r.F64());
              } else {
                column.str_data.append(r.Str());
                column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
              }
            }
          }
          column.arr_offsets.push_back(static_cast<uint32_t>(column.entry_valid.size()));
          break;
        }
      }
      if (r.failed()) return corrupt("truncated row");
    }
    batch.positions.push_back(position);
    ++batch.num_rows;
  }
  if (!r.at_end()) return corrupt("trailing bytes");
  return Ok();
}

std::string TaskMessageBlock(std::string_view body) {
  std::string block;
  block.reserve(body.size() + 1);
  block.push_back(static_cast<char>(kTaskMessageVersion));
  block += body;
  return block;
}

std::optional<std::string_view> TaskMessageBody(std::string_view block) {
  if (block.empty() || static_cast<uint8_t>(block[0]) != kTaskMessageVersion) return std::nullopt;
  return block.substr(1);
}

}  // namespace driftd
