// The JSON decoder (engine/json_decoder.h) around its records (json_decoder_record.cc): the
// schema's keys and levels built once, the batch's columns and rows, the chunk loop that applies
// the malformed policy, the message that names a record's problem, and the `json` value format.
#include "engine/json_decoder_impl.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include <fmt/format.h>

namespace driftd {
namespace {

// A field name that can be compared against raw (still escaped) JSON key bytes: JSON spells it
// without escapes.
bool HasPlainSpelling(std::string_view name) {
  for (char c : name) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  }
  return true;
}

}  // namespace

JsonDecoder::Impl::Impl(const Schema& schema, const MalformedSpec& spec)
    : schema_(schema), spec_(spec), permissive_(spec.policy == MalformedPolicy::kPermissive) {
  max_depth_ = spec.max_depth < 1
                   ? 1
                   : (spec.max_depth > kMaxSupportedDepth ? kMaxSupportedDepth : spec.max_depth);
  fields_.resize(schema_.fields.size());
  for (size_t f = 0; f < schema_.fields.size(); ++f) {
    fields_[f].type = schema_.fields[f].type;
    fields_[f].nullable = schema_.fields[f].nullable;
    switch (schema_.fields[f].type) {
      case FieldType::kString: string_columns_.push_back(static_cast<int>(f)); break;
      case FieldType::kDoubleArray: array_columns_.push_back(static_cast<int>(f)); break;
      case FieldType::kStringArray:
      case FieldType::kDoubleMap:
      case FieldType::kStringMap: entry_columns_.push_back(static_cast<int>(f)); break;
      default: break;
    }
  }
  BuildLevel({}, 1);
  nested_ = levels_.size() > 1;
  const Level& top = levels_[0];
  for (int k = top.begin; k < top.end; ++k) {
    if (!keys_[k].nullable) ++num_required_;
  }
  seen_stamp_.assign(keys_.size(), 0);
  // Start with room for typical records; DecodeRecord grows it geometrically up to the limit.
  const auto initial = static_cast<size_t>(std::min<int64_t>(spec_.max_record_bytes, 64 << 10));
  // A failure here is not final: DecodeRecord allocates again when a record needs the room.
  if (initial > 0 && parser_.allocate(initial) != simdjson::SUCCESS) {
    // Nothing to do yet: DecodeRecord allocates again, and reports, when a record needs it.
  }
}

// The keys of the object at `path` (the record's when empty), in the order their columns come
// in the schema, then the levels of its structs. For a schema without structs, key i is
// column i.
void JsonDecoder::Impl::BuildLevel(const std::vector<std::string>& path, int depth) {
  const size_t level_index = levels_.size();
  levels_.emplace_back();
  levels_[level_index].depth = depth;
  levels_[level_index].begin = static_cast<int>(keys_.size());
  levels_[level_index].first_byte_head.fill(-1);
  auto under = [&](const std::vector<std::string>& keys) {
    return keys.size() > path.size() && std::equal(path.begin(), path.end(), keys.begin());
  };
  std::vector<std::string> structs;  // the keys of this object's structs, in order
  for (size_t f = 0; f < schema_.fields.size(); ++f) {
    const Field& field = schema_.fields[f];
    const std::vector<std::string> keys =
        field.path.empty() ? std::vector<std::string>{field.name} : field.path;
    if (!under(keys)) continue;
    const std::string& name = keys[path.size()];
    if (keys.size() == path.size() + 1) {
      KeyInfo& key = keys_.emplace_back();
      key.name = name;
      key.path = field.name;
      key.column = static_cast<int>(f);
      key.nullable = field.nullable;
    } else if (std::find(structs.begin(), structs.end(), name) == structs.end()) {
      structs.push_back(name);
      KeyInfo& key = keys_.emplace_back();
      key.name = name;
      std::vector<std::string> struct_path = path;
      struct_path.push_back(name);
      for (const std::string& part : struct_path) key.path += (key.path.empty() ? "" : ".") + part;
      for (const StructField& declared : schema_.structs) {
        if (declared.path == struct_path) key.nullable = declared.nullable;
      }
    }
  }
  const int end = static_cast<int>(keys_.size());
  levels_[level_index].end = end;
  // Walk backwards so that each first-byte chain lists keys in schema order.
  for (int k = end - 1; k >= levels_[level_index].begin; --k) {
    KeyInfo& info = keys_[k];
    const std::string& name = info.name;
    info.plain_name = HasPlainSpelling(name);
    if (info.plain_name && name.size() < 16) {
      std::array<char, 16> pattern{};
      std::array<unsigned char, 16> mask{};
      std::memcpy(pattern.data(), name.data(), name.size());
      pattern[name.size()] = '"';
      std::fill(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(name.size()) + 1, 0xff);
      std::memcpy(info.words.data(), pattern.data(), 16);
      std::memcpy(info.masks.data(), mask.data(), 16);
      info.short_name = true;
    }
    if (info.plain_name) {
      // An empty name's raw key starts with the closing quote.
      const auto first = static_cast<unsigned char>(name.empty() ? '"' : name[0]);
      info.next_same_first_byte = levels_[level_index].first_byte_head[first];
      levels_[level_index].first_byte_head[first] = static_cast<int16_t>(k);
    }
  }
  for (int k = levels_[level_index].begin; k < end; ++k) {
    if (keys_[k].column >= 0) continue;
    std::vector<std::string> struct_path = path;
    struct_path.push_back(keys_[k].name);
    keys_[k].level = static_cast<int>(levels_.size());
    BuildLevel(struct_path, depth + 1);
  }
}

void JsonDecoder::Impl::TrimColumns(RecordBatch& out, size_t rows) {
  out.PrepareColumns(rows);
  out.num_rows = rows;
}

void JsonDecoder::Impl::FinishRow(size_t row) {
  for (int f : string_columns_) {
    Column& column = columns_[f];
    column.str_offsets[row + 1] = static_cast<uint32_t>(column.str_data.size());
  }
  for (int f : array_columns_) {
    Column& column = columns_[f];
    column.arr_offsets[row + 1] = static_cast<uint32_t>(column.f64.size());
  }
  for (int f : entry_columns_) {
    Column& column = columns_[f];
    column.arr_offsets[row + 1] = static_cast<uint32_t>(column.entry_valid.size());
  }
}

void JsonDecoder::Impl::SetNull(int field, size_t row) {
  Column& column = columns_[field];
  column.valid[row] = 0;
  switch (fields_[field].type) {
    case FieldType::kDouble:
      column.f64[row] = 0;
      break;
    case FieldType::kString:
      column.str_data.resize(column.str_offsets[row]);
      break;
    case FieldType::kDoubleArray:
      column.f64.resize(column.arr_offsets[row]);
      break;
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap: {
      // Drops the entries this row appended so far.
      const size_t begin = column.arr_offsets[row];
      column.entry_valid.resize(begin);
      if (column.type == FieldType::kDoubleMap) {
        column.f64.resize(begin);
      } else {
        column.str_data.resize(column.str_offsets[begin]);
        column.str_offsets.resize(begin + 1);
      }
      if (column.type != FieldType::kStringArray) {
        column.key_data.resize(column.key_offsets[begin]);
        column.key_offsets.resize(begin + 1);
      }
      break;
    }
    default:
      column.i64[row] = 0;
      break;
  }
}

void JsonDecoder::Impl::ClearRow(size_t row) {
  for (size_t f = 0; f < fields_.size(); ++f) SetNull(static_cast<int>(f), row);
}

std::string JsonDecoder::Impl::Detail() const {
  const Problem& p = problem_;
  std::string detail;
  if (p.field >= 0) {
    detail = fmt::format("field '{}'", schema_.fields[p.field].name);
  } else if (p.key >= 0) {
    detail = fmt::format("field '{}'", keys_[p.key].path);
  }
  auto append = [&detail](std::string_view text) {
    if (!detail.empty()) detail += ": ";
    detail += text;
  };
  switch (p.reason) {
    case MalformedReason::kTooLarge:
      // By content: the decoding files' copies of a literal need not share an address (an
      // unoptimized build keeps one per file).
      if (p.text != nullptr && std::string_view(p.text) == kArrayTooLong) {
        append(fmt::format("{} of {} {} exceeds maxArrayLength {}",
                           p.field >= 0 && IsMap(schema_.fields[p.field].type) ? "map" : "array",
                           array_elements_,
                           p.field >= 0 && IsMap(schema_.fields[p.field].type) ? "entries"
                                                                                : "elements",
                           spec_.max_array_length));
      } else if (p.text) {
        append(p.text);
      } else if (record_cut_) {
        // The source read no further than one byte past the limit: the true size is unknown.
        append(fmt::format("record of more than {} bytes exceeds maxRecordBytes {} (its first "
                           "{} bytes were kept)",
                           spec_.max_record_bytes, spec_.max_record_bytes, p.record_size));
      } else {
        append(fmt::format("record of {} bytes exceeds maxRecordBytes {}", p.record_size,
                           spec_.max_record_bytes));
      }
      return detail;
    case MalformedReason::kTooDeep:
      append(fmt::format("nesting deeper than maxDepth {}", max_depth_));
      return detail;
    case MalformedReason::kEmpty:
      append("empty record");
      return detail;
    case MalformedReason::kInvalidUtf8:
      append("invalid UTF-8");
      return detail;
    case MalformedReason::kTruncated:
      append("record ends inside an object, array or string");
      return detail;
    case MalformedReason::kMissingField:
      detail += p.field >= 0 || p.key >= 0 ? " " : "";
      detail += p.text ? p.text : "is missing";
      return detail;
    case MalformedReason::kDuplicateField:
      if (p.text != nullptr && std::string_view(p.text) == kDuplicateKey) {
        append(fmt::format("key '{}' appears more than once", duplicate_key_));
        return detail;
      }
      detail += " ";
      detail += p.text ? p.text : "appears more than once";
      return detail;
    case MalformedReason::kWrongType:
    case MalformedReason::kNumberOutOfRange: {
      const std::string_view type =
          p.field >= 0 ? FieldTypeName(schema_.fields[p.field].type)
                       : (p.key >= 0 ? std::string_view("struct") : std::string_view("?"));
      if (p.text && p.reason == MalformedReason::kNumberOutOfRange) {
        append(fmt::format("{} {}", p.text, type));
      } else if (p.text && p.got) {
        append(fmt::format("{} {}", p.text, p.got));
      } else if (p.text) {
        append(p.text);
      } else {
        append(fmt::format("expected {}, got {}", type, p.got ? p.got : "another type"));
      }
      return detail;
    }
    default:
      break;
  }
  if (p.text) append(p.text);
  if (p.error != simdjson::SUCCESS) append(simdjson::error_message(p.error));
  if (detail.empty()) append(ToString(p.reason));
  return detail;
}

Status JsonDecoder::Impl::Decode(
    const InputChunk& chunk, RecordBatch& out, std::vector<DeadLetter>* dead_letters,
    const std::function<std::string(const RecordPosition&)>& describe) {
  if (out.columns.size() != fields_.size()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "record batch has {} columns but the schema has {} fields (call Reset)",
                     out.columns.size(), fields_.size());
  }
  for (size_t f = 0; f < fields_.size(); ++f) {
    if (out.columns[f].type != fields_[f].type || out.columns[f].valid.size() != out.num_rows) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "record batch column {} does not match the schema (call Reset)", f);
    }
  }
  const size_t first_row = out.num_rows;
  out.PrepareColumns(first_row + chunk.size());
  columns_ = out.columns.data();

  const std::string& bytes = chunk.bytes();
  const size_t capacity = bytes.capacity();
  size_t row = first_row;
  for (size_t i = 0; i < chunk.size(); ++i) {
    const InputChunk::Record& record = chunk.records()[i];
    ++stamp_;
    record_cut_ = record.cut;
    const Verdict verdict =
        DecodeRecord(bytes.data() + record.begin, record.size, capacity - record.begin, row);
    if (verdict != Verdict::kRejected) [[likely]] {
      FinishRow(row);
      out.positions[row] = record.position;
      if (verdict == Verdict::kKeptNulled) {
        out.positions[row].malformed = true;
        ++counts.by_reason[static_cast<size_t>(problem_.reason)];
      }
      ++row;
      continue;
    }
    ClearRow(row);
    ++counts.by_reason[static_cast<size_t>(problem_.reason)];
    switch (spec_.policy) {
      case MalformedPolicy::kFail: {
        TrimColumns(out, row);
        const std::string where =
            describe ? describe(record.position)
                     : fmt::format("partition {} offset {}", record.position.partition,
                                   record.position.offset);
        return MakeError(ErrorCode::kMalformedRecord, "malformed record at {}: {}: {}", where,
                         ToString(problem_.reason), Detail());
      }
      case MalformedPolicy::kDeadLetter:
        if (dead_letters != nullptr) {
          dead_letters->push_back(DeadLetter{std::string(chunk.record(i)), problem_.reason,
                                             Detail(), record.position, record.cut});
        }
        break;
      case MalformedPolicy::kPermissive:
      case MalformedPolicy::kDrop:
        break;
    }
  }
  TrimColumns(out, row);
  return Ok();
}

JsonDecoder::JsonDecoder(const Schema& schema, const MalformedSpec& spec)
    : impl_(std::make_unique<Impl>(schema, spec)) {}
JsonDecoder::~JsonDecoder() = default;
JsonDecoder::JsonDecoder(JsonDecoder&&) noexcept = default;
JsonDecoder& JsonDecoder::operator=(JsonDecoder&&) noexcept = default;

Status JsonDecoder::Decode(const InputChunk& chunk, RecordBatch& out,
                           std::vector<DeadLetter>* dead_letters,
                           const DescribePosition& describe) {
  return impl_->Decode(chunk, out, dead_letters, describe);
}

void JsonDecoder::Project(const std::vector<bool>& used) { impl_->Project(used); }

const MalformedCounts& JsonDecoder::counts() const { return impl_->counts; }
void JsonDecoder::ResetCounts() { impl_->counts = MalformedCounts{}; }
const Schema& JsonDecoder::schema() const { return impl_->schema(); }

namespace {

// Output rows are JSON already: the message is the row.
class JsonEncoder final : public ValueEncoder {
 public:
  Status Encode(std::string_view row, std::string& out) override {
    out.assign(row);
    return Ok();
  }
  const std::string& schema_text() const override { return schema_; }

 private:
  const std::string schema_;
};

}  // namespace

ValueFormatDecl JsonDecoder::Declaration() {
  ValueFormatDecl decl;
  decl.name = "json";
  decl.doc = "One JSON object per record, its keys the schema's field names (the default). Sinks "
      "write each row as the JSON object it is.";
  auto no_options = [](const Options&) -> Bound<NoValueOptions> { return NoValueOptions{}; };
  DeclareDecoder<NoValueOptions>(decl, no_options,
                                 [](const Schema& schema, const MalformedSpec& malformed,
                                    const NoValueOptions&) -> ValueDecoderResult {
                                   return std::make_unique<JsonDecoder>(schema, malformed);
                                 });
  DeclareEncoder<NoValueOptions>(
      decl, no_options,
      [](const ValueEncoderContext&, const NoValueOptions&) -> ValueEncoderResult {
        return std::make_unique<JsonEncoder>();
      });
  return decl;
}

}  // namespace driftd
