#include "engine/executor/outbox_codec.h"

#include <initializer_list>

#include "engine/codec.h"

namespace driftd {

namespace {

// A batch's output in the outbox (engine/codec.h): u8 format (4) | i64 batch id | source end
// offsets (codec::PutOffsets) | per stream (stats append, update, complete, alerts, dead
// letters, evaluations, performance): u32 columns, each a String; u32 rows, each its message
// key and its row as Strings. Big-endian.
constexpr uint8_t kFormat = 4;
// Written before the codec, little-endian, with the batch id as decimal text and the offsets
// as JSON: format 3 (the performance stream after the evaluations), 2 (the evaluations after
// the dead letters) and 1. Still read, so a batch pending delivery at an upgrade is delivered.
constexpr uint8_t kLegacyWithPerformance = 3;
constexpr uint8_t kLegacyWithEvaluations = 2;
constexpr uint8_t kLegacyFirst = 1;

void PutRows(codec::Writer& out, const OutputRows& rows) {
  out.U32(static_cast<uint32_t>(rows.columns.size()));
  for (const auto& column : rows.columns) out.String(column);
  out.U32(static_cast<uint32_t>(rows.rows.size()));
  for (size_t i = 0; i < rows.rows.size(); ++i) {
    out.String(i < rows.keys.size() ? rows.keys[i] : std::string_view());
    out.String(rows.rows[i]);
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

// Rows in either byte order: Reader is codec::Reader or codec::LegacyReader. A count larger
// than the bytes left is refused before anything is allocated for it.
template <typename Reader>
bool GetRows(Reader& in, OutputRows& rows) {
  auto string = [&](std::string& s) {
    std::string_view view;
    if (!in.String(view)) return false;
    s.assign(view);
    return true;
  };
  uint32_t columns = 0;
  if (!in.U32(columns) || columns > in.rest().size()) return false;
  rows.columns.resize(columns);
  for (auto& column : rows.columns) {
    if (!string(column)) return false;
  }
  uint32_t count = 0;
  if (!in.U32(count) || count > in.rest().size()) return false;
  rows.keys.resize(count);
  rows.rows.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (!string(rows.keys[i]) || !string(rows.rows[i])) return false;
  }
  return true;
}

Result<BatchOutput> DecodeLegacy(uint8_t format, codec::LegacyReader& in, size_t size) {
  BatchOutput output;
  std::string_view batch_id;
  std::string_view offsets;
  bool ok = in.String(batch_id) && in.String(offsets);
  for (OutputRows* rows : {&output.stats_append, &output.stats_update, &output.stats_complete,
                           &output.alerts, &output.dead_letters}) {
    ok = ok && GetRows(in, *rows);
  }
  if (ok && format != kLegacyFirst) ok = GetRows(in, output.evaluations);
  if (ok && format == kLegacyWithPerformance) ok = GetRows(in, output.performance);
  if (!ok || !in.done()) {
    return MakeError(ErrorCode::kCorruption, "outbox entry of {} bytes is unreadable", size);
  }
  auto id = codec::ParseDecimal(batch_id);
  if (!id) return MakeError(ErrorCode::kCorruption, "outbox entry with an unreadable batch id");
  output.batch_id = *id;
  auto end = OffsetsFromJson(std::string(offsets));
  if (!end) return tl::unexpected(end.error());
  output.source_end = std::move(*end);
  return output;
}

}  // namespace

std::string EncodeBatchOutput(const BatchOutput& output) {
  const std::initializer_list<const OutputRows*> streams = {
      &output.stats_append, &output.stats_update, &output.stats_complete,
      &output.alerts,       &output.dead_letters, &output.evaluations,
      &output.performance};
  // Sized once: a batch's rows can be tens of megabytes, and growing by doubling would hold
  // up to twice that while the old copy moves.
  size_t size = 1 + 8 + 4;
  for (const auto& [key, offset] : output.source_end) size += 4 + key.size() + 8;
  for (const OutputRows* rows : streams) size += EncodedSize(*rows);
  std::string out;
  out.reserve(size);
  codec::Writer writer(out);
  writer.U8(kFormat);
  writer.I64(output.batch_id);
  codec::PutOffsets(writer, output.source_end);
  for (const OutputRows* rows : streams) PutRows(writer, *rows);
  return out;
}

Result<BatchOutput> DecodeBatchOutput(std::string_view bytes) {
  uint8_t format = 0;
  if (!bytes.empty()) format = static_cast<uint8_t>(bytes[0]);
  if (format == kLegacyFirst || format == kLegacyWithEvaluations ||
      format == kLegacyWithPerformance) {
    codec::LegacyReader legacy(bytes.substr(1));
    return DecodeLegacy(format, legacy, bytes.size());
  }
  codec::Reader in(bytes);
  BatchOutput output;
  bool ok = in.U8(format) && format == kFormat && in.I64(output.batch_id) &&
            codec::GetOffsets(in, output.source_end);
  for (OutputRows* rows : {&output.stats_append, &output.stats_update, &output.stats_complete,
                           &output.alerts, &output.dead_letters, &output.evaluations,
                           &output.performance}) {
    ok = ok && GetRows(in, *rows);
  }
  if (!ok || !in.done()) {
    return MakeError(ErrorCode::kCorruption, "outbox entry of {} bytes is unreadable",
                     bytes.size());
  }
  return output;
}

}  // namespace driftd
