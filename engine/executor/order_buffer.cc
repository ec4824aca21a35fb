#include "engine/executor/order_buffer.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "engine/drift/codec.h"
#include "engine/executor/row_block.h"
#include "engine/expr/projection.h"

namespace driftd {

namespace {

// The buffered rows are kept in pages of about kPageBytes, so that no one state value (nor,
// scaled out, one changelog record) grows with the buffer: keys "page/00000000" on, each
// value u8 version (2) | varint places | per row: zigzag event_us, bytes partition, zigzag
// offset, varint arrival | varint blocks | bytes row block (engine/executor/row_block.h).
// Version 1, written before, kept every row in one value under the key "rows", in the same
// shape; it is still read, and replaced by pages at the next write.
constexpr uint8_t kVersion = 2;
constexpr uint8_t kFirstVersion = 1;
constexpr std::string_view kLegacyKey = "rows";
constexpr std::string_view kPagePrefix = "page/";
constexpr size_t kPageBytes = 256 << 10;

std::string PageKey(size_t page) { return fmt::format("{}{:08}", kPagePrefix, page); }

}  // namespace

bool OrderBuffer::Applies(const PipelineSpec& spec) { return DriftOrdersByEventTime(spec); }

int OrderBuffer::TimeColumn(const PipelineSpec& spec) { return DriftTimeColumn(spec); }

OrderBuffer::OrderBuffer(Schema schema, std::function<std::string(uint32_t)> key_of)
    : schema_(std::move(schema)), key_of_(std::move(key_of)) {
  rows_.Reset(schema_);
}

uint32_t OrderBuffer::PartitionId(std::string_view name) {
  auto found = partition_ids_.find(name);
  if (found != partition_ids_.end()) return found->second;
  const uint32_t id = static_cast<uint32_t>(partitions_.size());
  partitions_.emplace_back(name);
  partition_ids_.emplace(std::string(name), id);
  return id;
}

void OrderBuffer::Add(const RecordBatch& batch, const RowTimes& times) {
  if (batch.num_rows == 0) return;
  changed_ = true;
  uint32_t last_key = 0;
  uint32_t last_index = UINT32_MAX;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    for (size_t c = 0; c < rows_.columns.size(); ++c) {
      rows_.columns[c].AppendRow(batch.columns[c], row);
    }
    rows_.positions.push_back(batch.positions[row]);
    ++rows_.num_rows;
    times_.event_us.push_back(times.event_us[row]);
    times_.late_before.push_back(times.late_before[row]);
    const RecordPosition& position = batch.positions[row];
    if (position.partition != last_index) {
      last_index = position.partition;
      last_key = PartitionId(key_of_(position.partition));
    }
    // A row behind its own partition's watermark (jitter within the partition) takes its place
    // at that watermark: the partition's order decides it, not the batching.
    places_.push_back({std::max(times.event_us[row], times.late_before[row]), last_key,
                       position.offset, arrivals_++});
  }
}

bool OrderBuffer::HasDue(int64_t watermark) const {
  return std::any_of(places_.begin(), places_.end(), [&](const Place& p) {
    return p.event_us == INT64_MIN || (watermark != INT64_MIN && p.event_us < watermark);
  });
}

void OrderBuffer::Release(int64_t watermark, RecordBatch& out, RowTimes& times) {
  out.Reset(schema_);
  times.event_us.clear();
  times.late_before.clear();
  std::vector<size_t> due;
  std::vector<uint8_t> keep(places_.size(), 1);
  for (size_t i = 0; i < places_.size(); ++i) {
    const int64_t t = places_[i].event_us;
    if (t == INT64_MIN || (watermark != INT64_MIN && t < watermark)) {
      due.push_back(i);
      keep[i] = 0;
    }
  }
  if (due.empty()) return;
  changed_ = true;
  // Sorted as compact keys side by side (a partition by its name's rank), not through the
  // places: a batch's rows are hundreds of thousands.
  std::vector<uint32_t> rank(partitions_.size());
  {
    std::vector<uint32_t> by_name(partitions_.size());
    std::iota(by_name.begin(), by_name.end(), 0u);
    std::sort(by_name.begin(), by_name.end(),
              [&](uint32_t a, uint32_t b) { return partitions_[a] < partitions_[b]; });
    for (uint32_t r = 0; r < by_name.size(); ++r) rank[by_name[r]] = r;
  }
  struct Key {
    bool timed;
    int64_t event_us;  // timed rows
    uint32_t partition;
    int64_t offset;
    uint64_t arrival;  // untimed rows, which come first, as they came
    size_t index;
    bool operator<(const Key& o) const {
      if (timed != o.timed) return !timed;
      if (!timed) return arrival < o.arrival;
      return std::tie(event_us, partition, offset, index) <
             std::tie(o.event_us, o.partition, o.offset, o.index);
    }
  };
  std::vector<Key> keys;
  keys.reserve(due.size());
  for (size_t i : due) {
    const Place& place = places_[i];
    keys.push_back({place.event_us != INT64_MIN, place.event_us, rank[place.partition],
                    place.offset, place.arrival, i});
  }
  std::sort(keys.begin(), keys.end());
  for (size_t k = 0; k < keys.size(); ++k) due[k] = keys[k].index;
  for (size_t i : due) {
    for (size_t c = 0; c < out.columns.size(); ++c) out.columns[c].AppendRow(rows_.columns[c], i);
    out.positions.push_back(rows_.positions[i]);
    ++out.num_rows;
    times.event_us.push_back(times_.event_us[i]);
    times.late_before.push_back(times_.late_before[i]);
  }
  // What stays, in its order.
  KeepRows(rows_, keep);
  size_t kept = 0;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    times_.event_us[kept] = times_.event_us[i];
    times_.late_before[kept] = times_.late_before[i];
    places_[kept] = places_[i];
    ++kept;
  }
  times_.event_us.resize(kept);
  times_.late_before.resize(kept);
  places_.resize(kept);
}

Status OrderBuffer::Restore(std::string_view key, std::string_view value) {
  if (key == kLegacyKey) {
    legacy_ = true;
  } else if (key.starts_with(kPagePrefix)) {
    ++pages_;
  } else {
    return Ok();
  }
  // Entries come in key order: pages in their order, appended to what is restored so far.
  drift::ByteReader r(value);
  const uint8_t version = r.U8();
  if (version != kVersion && version != kFirstVersion) {
    return MakeError(ErrorCode::kCorruption, "order buffer: unknown version");
  }
  const uint64_t count = r.Varint();
  if (count > value.size()) {
    return MakeError(ErrorCode::kCorruption, "order buffer: {} bytes are unreadable",
                     value.size());
  }
  const size_t first = places_.size();
  for (uint64_t i = 0; i < count && !r.failed(); ++i) {
    Place place;
    place.event_us = r.Zigzag();
    place.partition = PartitionId(r.Bytes());
    place.offset = r.Zigzag();
    place.arrival = r.Varint();
    arrivals_ = std::max(arrivals_, place.arrival + 1);
    places_.push_back(std::move(place));
  }
  const uint64_t block_count = r.Varint();
  if (block_count > value.size()) {
    return MakeError(ErrorCode::kCorruption, "order buffer: {} bytes are unreadable",
                     value.size());
  }
  std::vector<std::string_view> blocks(block_count);
  for (std::string_view& block : blocks) block = r.Bytes();
  if (r.failed() || !r.at_end()) {
    return MakeError(ErrorCode::kCorruption, "order buffer: {} bytes are unreadable",
                     value.size());
  }
  const size_t rows_before = rows_.num_rows;
  for (std::string_view block : blocks) {
    ClockMark mark;
    DRIFTD_TRY(ReadRowBlock(block, schema_, 0, rows_, times_, mark));
  }
  if (rows_.num_rows - rows_before != places_.size() - first) {
    return MakeError(ErrorCode::kCorruption, "order buffer: {} rows for {} places",
                     rows_.num_rows - rows_before, places_.size() - first);
  }
  // The rows' partitions by index are this process's own: a restored row keeps its name only.
  return Ok();
}

void OrderBuffer::Persist(StateChanges& changes) {
  if (!changed_ && !legacy_) return;
  changed_ = false;
  if (legacy_) changes.deletes.emplace_back(kLegacyKey);
  legacy_ = false;
  size_t pages = 0;
  size_t row = 0;
  while (row < rows_.num_rows) {
    // One page: rows until their block reaches kPageBytes.
    RowBlockWriter writer("");
    const size_t first = row;
    while (row < rows_.num_rows && writer.pending_bytes() < kPageBytes) {
      writer.AddRow(rows_, row, times_.late_before[row], times_.event_us[row], INT64_MIN);
      ++row;
    }
    std::string value;
    drift::ByteWriter w(value);
    w.U8(kVersion);
    w.Varint(row - first);
    for (size_t i = first; i < row; ++i) {
      const Place& place = places_[i];
      w.Zigzag(place.event_us);
      w.Bytes(partitions_[place.partition]);
      w.Zigzag(place.offset);
      w.Varint(place.arrival);
    }
    const std::vector<std::string> blocks = writer.Finish(ClockMark{});
    w.Varint(blocks.size());
    for (const std::string& block : blocks) w.Bytes(block);
    changes.puts.emplace_back(PageKey(pages++), std::move(value));
  }
  // Pages the buffer no longer fills.
  for (size_t page = pages; page < pages_; ++page) changes.deletes.push_back(PageKey(page));
  pages_ = pages;
}

}  // namespace driftd
