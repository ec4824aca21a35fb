#include "engine/batch.h"

#include <atomic>
#include "engine/json_writer.h"

namespace driftd {

void Column::Clear() {
  valid.clear();
  f64.clear();
  i64.clear();
  str_offsets.clear();
  str_data.clear();
  arr_offsets.clear();
  key_offsets.clear();
  key_data.clear();
  entry_valid.clear();
  if (type == FieldType::kString || type == FieldType::kStringArray ||
      type == FieldType::kStringMap) {
    str_offsets.push_back(0);
  }
  if (IsCollection(type)) arr_offsets.push_back(0);
  if (IsMap(type)) key_offsets.push_back(0);
}

void Column::AppendRow(const Column& from, size_t row) {
  const bool present = !from.IsNull(row);
  valid.push_back(present ? 1 : 0);
  switch (type) {
    case FieldType::kDouble:
      f64.push_back(present ? from.f64[row] : 0);
      return;
    case FieldType::kString:
      if (present) str_data.append(from.String(row));
      str_offsets.push_back(static_cast<uint32_t>(str_data.size()));
      return;
    case FieldType::kDoubleArray:
      if (present) f64.insert(f64.end(), from.ArrayData(row), from.ArrayData(row) + from.ArraySize(row));
      arr_offsets.push_back(static_cast<uint32_t>(f64.size()));
      return;
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap:
      if (present) {
        for (size_t e = from.EntryBegin(row); e < from.EntryEnd(row); ++e) {
          entry_valid.push_back(from.entry_valid[e]);
          if (IsMap(type)) {
            key_data.append(from.Key(e));
            key_offsets.push_back(static_cast<uint32_t>(key_data.size()));
          }
          if (type == FieldType::kDoubleMap) {
            f64.push_back(from.f64[e]);
          } else {
            str_data.append(from.String(e));
            str_offsets.push_back(static_cast<uint32_t>(str_data.size()));
          }
        }
      }
      arr_offsets.push_back(static_cast<uint32_t>(entry_valid.size()));
      return;
    case FieldType::kLong:
    case FieldType::kInt:
    case FieldType::kBoolean:
    case FieldType::kTimestamp:
      i64.push_back(present ? from.i64[row] : 0);
      return;
  }
}

namespace {

// Appends from[begin + 1 .. end] (offsets of rows or entries), moved so that from[begin]
// becomes `base`.
void AppendOffsets(std::vector<uint32_t>& to, const std::vector<uint32_t>& from, size_t begin,
                   size_t end, size_t base) {
  const uint32_t shift = static_cast<uint32_t>(base) - from[begin];
  ReserveMore(to, end - begin);
  for (size_t i = begin + 1; i <= end; ++i) to.push_back(from[i] + shift);
}

template <typename T>
void AppendRange(std::vector<T>& to, const std::vector<T>& from, size_t begin, size_t end) {
  to.insert(to.end(), from.begin() + static_cast<ptrdiff_t>(begin),
            from.begin() + static_cast<ptrdiff_t>(end));
}

// Appends from's bytes [offsets[begin], offsets[end]) to `data`, and the offsets after
// `begin`.
void AppendBytes(std::string& data, std::vector<uint32_t>& offsets, const std::string& from_data,
                 const std::vector<uint32_t>& from_offsets, size_t begin, size_t end) {
  const size_t base = data.size();
  data.append(from_data, from_offsets[begin], from_offsets[end] - from_offsets[begin]);
  AppendOffsets(offsets, from_offsets, begin, end, base);
}

}  // namespace

void Column::AppendRows(const Column& from, size_t begin, size_t end) {
  if (begin >= end) return;
  AppendRange(valid, from.valid, begin, end);
  switch (type) {
    case FieldType::kDouble:
      AppendRange(f64, from.f64, begin, end);
      return;
    case FieldType::kString:
      AppendBytes(str_data, str_offsets, from.str_data, from.str_offsets, begin, end);
      return;
    case FieldType::kDoubleArray: {
      const size_t base = f64.size();
      AppendRange(f64, from.f64, from.arr_offsets[begin], from.arr_offsets[end]);
      AppendOffsets(arr_offsets, from.arr_offsets, begin, end, base);
      return;
    }
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap: {
      const size_t first = from.arr_offsets[begin];
      const size_t last = from.arr_offsets[end];
      AppendOffsets(arr_offsets, from.arr_offsets, begin, end, entry_valid.size());
      AppendRange(entry_valid, from.entry_valid, first, last);
      if (IsMap(type)) AppendBytes(key_data, key_offsets, from.key_data, from.key_offsets, first, last);
      if (type == FieldType::kDoubleMap) {
        AppendRange(f64, from.f64, first, last);
      } else {
        AppendBytes(str_data, str_offsets, from.str_data, from.str_offsets, first, last);
      }
      return;
    }
    case FieldType::kLong:
    case FieldType::kInt:
    case FieldType::kBoolean:
    case FieldType::kTimestamp:
      AppendRange(i64, from.i64, begin, end);
      return;
  }
}

void Column::AppendNull() {
  valid.push_back(0);
  switch (type) {
    case FieldType::kDouble:
      f64.push_back(0);
      return;
    case FieldType::kString:
      str_offsets.push_back(static_cast<uint32_t>(str_data.size()));
      return;
    case FieldType::kDoubleArray:
      arr_offsets.push_back(static_cast<uint32_t>(f64.size()));
      return;
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap:
      arr_offsets.push_back(static_cast<uint32_t>(entry_valid.size()));
      return;
    case FieldType::kLong:
    case FieldType::kInt:
    case FieldType::kBoolean:
    case FieldType::kTimestamp:
      i64.push_back(0);
      return;
  }
}

void AppendJsonValue(std::string& out, const Column& column, size_t row) {
  if (column.IsNull(row)) {
    out += "null";
    return;
  }
  switch (column.type) {
    case FieldType::kString:
      AppendJsonString(out, column.String(row));
      return;
    case FieldType::kDouble:
      AppendJsonNumber(out, column.f64[row]);
      return;
    case FieldType::kLong:
    case FieldType::kInt:
      AppendJsonNumber(out, column.i64[row]);
      return;
    case FieldType::kBoolean:
      out += column.i64[row] != 0 ? "true" : "false";
      return;
    case FieldType::kTimestamp:
      out.push_back('"');
      AppendTimestampUs(out, column.i64[row]);
      out.push_back('"');
      return;
    case FieldType::kDoubleArray:
      out.push_back('[');
      for (size_t e = 0; e < column.ArraySize(row); ++e) {
        if (e > 0) out.push_back(',');
        AppendJsonNumber(out, column.ArrayData(row)[e]);
      }
      out.push_back(']');
      return;
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap: {
      const bool map = IsMap(column.type);
      out.push_back(map ? '{' : '[');
      for (size_t e = column.EntryBegin(row); e < column.EntryEnd(row); ++e) {
        if (e > column.EntryBegin(row)) out.push_back(',');
        if (map) {
          AppendJsonString(out, column.Key(e));
          out.push_back(':');
        }
        if (column.EntryNull(e)) {
          out += "null";
        } else if (column.type == FieldType::kDoubleMap) {
          AppendJsonNumber(out, column.f64[e]);
        } else {
          AppendJsonString(out, column.String(e));
        }
      }
      out.push_back(map ? '}' : ']');
      return;
    }
  }
}

void RecordBatch::Reset(const Schema& schema) {
  columns.resize(schema.fields.size());
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    columns[i].type = schema.fields[i].type;
    columns[i].Clear();
  }
  positions.clear();
  num_rows = 0;
  Renew();
}

void RecordBatch::Renew() {
  static std::atomic<uint64_t> generations{0};
  generation = generations.fetch_add(1, std::memory_order_relaxed) + 1;
}

void RecordBatch::PrepareColumns(size_t rows) {
  for (Column& column : columns) {
    column.valid.resize(rows);
    switch (column.type) {
      case FieldType::kDouble:
        column.f64.resize(rows);
        break;
      case FieldType::kString:
        column.str_offsets.resize(rows + 1);
        break;
      case FieldType::kDoubleArray:
      case FieldType::kStringArray:
      case FieldType::kDoubleMap:
      case FieldType::kStringMap:
        column.arr_offsets.resize(rows + 1);
        break;
      default:
        column.i64.resize(rows);
        break;
    }
  }
  positions.resize(rows);
}

}  // namespace driftd
