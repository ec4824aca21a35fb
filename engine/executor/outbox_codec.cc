#include "engine/executor/outbox_codec.h"

#include <charconv>
#include <cstring>
#include <initializer_list>

namespace driftd {

namespace {

// Format 2 adds the evaluations stream after the dead letters; format 1 is still read.
constexpr uint8_t kFormat = 2;
constexpr uint8_t kFormatWithoutEvaluations = 1;

void PutU32(std::string& out, uint32_t v) {
  char bytes[4];
  std::memcpy(bytes, &v, 4);
  out.append(bytes, 4);
}
void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}
void PutRows(std::string& out, const OutputRows& rows) {
  PutU32(out, static_cast<uint32_t>(rows.columns.size()));
  for (const auto& column : rows.columns) PutString(out, column);
  PutU32(out, static_cast<uint32_t>(rows.rows.size()));
  for (size_t i = 0; i < rows.rows.size(); ++i) {
    PutString(out, i < rows.keys.size() ? rows.keys[i] : std::string_view());
    PutString(out, rows.rows[i]);
  }
}

/// What PutRows appends.
size_t EncodedSize(const OutputRows& rows) {
  size_t size = 8;
  for (const auto& column : rows.columns) size += 4 + column.size();
  for (size_t i = 0; i < rows.rows.size(); ++i) {
    size += 8 + rows.rows[i].size() + (i < rows.keys.size() ? rows.keys[i].size() : 0);
  }
  return size;
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U32(uint32_t& v) {
    if (in_.size() < 4) return false;
    std::memcpy(&v, in_.data(), 4);
    in_.remove_prefix(4);
    return true;
  }
  bool String(std::string& s) {
    uint32_t size = 0;
    if (!U32(size) || in_.size() < size) return false;
    s.assign(in_.data(), size);
    in_.remove_prefix(size);
    return true;
  }
  bool Rows(OutputRows& rows) {
    uint32_t columns = 0;
    if (!U32(columns) || columns > in_.size()) return false;
    rows.columns.resize(columns);
    for (auto& column : rows.columns) {
      if (!String(column)) return false;
    }
    uint32_t count = 0;
    if (!U32(count) || count > in_.size()) return false;
    rows.keys.resize(count);
    rows.rows.resize(count);
    for (uint32_t i = 0; i < count; ++i) {
      if (!String(rows.keys[i]) || !String(rows.rows[i])) return false;
    }
    return true;
  }
  bool Byte(uint8_t& b) {
    if (in_.empty()) return false;
    b = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

}  // namespace

std::string EncodeBatchOutput(const BatchOutput& output) {
  const std::initializer_list<const OutputRows*> streams = {
      &output.stats_append, &output.stats_update, &output.stats_complete,
      &output.alerts,       &output.dead_letters, &output.evaluations};
  const std::string batch_id = std::to_string(output.batch_id);
  const std::string offsets = OffsetsToJson(output.source_end);
  // Sized once: a batch's rows can be tens of megabytes, and growing by doubling would hold
  // up to twice that while the old copy moves.
  size_t size = 1 + 4 + batch_id.size() + 4 + offsets.size();
  for (const OutputRows* rows : streams) size += EncodedSize(*rows);
  std::string out;
  out.reserve(size);
  out.push_back(static_cast<char>(kFormat));
  PutString(out, batch_id);
  PutString(out, offsets);
  for (const OutputRows* rows : streams) PutRows(out, *rows);
  return out;
}

Result<BatchOutput> DecodeBatchOutput(std::string_view bytes) {
  Reader reader(bytes);
  BatchOutput output;
  uint8_t format = 0;
  std::string batch_id;
  std::string offsets;
  bool ok = reader.Byte(format) &&
            (format == kFormat || format == kFormatWithoutEvaluations) &&
            reader.String(batch_id) && reader.String(offsets);
  for (OutputRows* rows : {&output.stats_append, &output.stats_update, &output.stats_complete,
                           &output.alerts, &output.dead_letters}) {
    ok = ok && reader.Rows(*rows);
  }
  if (ok && format == kFormat) ok = reader.Rows(output.evaluations);
  if (!ok || !reader.done()) {
    return MakeError(ErrorCode::kCorruption, "outbox entry of {} bytes is unreadable",
                     bytes.size());
  }
  const auto [end_of_id, ec] =
      std::from_chars(batch_id.data(), batch_id.data() + batch_id.size(), output.batch_id);
  if (batch_id.empty() || ec != std::errc() || end_of_id != batch_id.data() + batch_id.size()) {
    return MakeError(ErrorCode::kCorruption, "outbox entry with an unreadable batch id");
  }
  auto end = OffsetsFromJson(offsets);
  if (!end) return tl::unexpected(end.error());
  output.source_end = std::move(*end);
  return output;
}

}  // namespace driftd
