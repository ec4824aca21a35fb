#include "engine/executor/order_buffer.h"

#include <algorithm>
#include <numeric>

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
// Up to this many partitions with due rows, Release merges by scanning their heads; more, by a
// heap.
constexpr size_t kScannedHeads = 8;

std::string PageKey(size_t page) { return fmt::format("{}{:08}", kPagePrefix, page); }

}  // namespace

bool OrderBuffer::Applies(const PipelineSpec& spec) { return DriftOrdersByEventTime(spec); }

int OrderBuffer::TimeColumn(const PipelineSpec& spec) { return DriftTimeColumn(spec); }

OrderBuffer::OrderBuffer(Schema schema, std::function<std::string(uint32_t)> key_of,
                         std::shared_ptr<KeyInterner> models)
    : schema_(std::move(schema)), key_of_(std::move(key_of)), models_(std::move(models)) {
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
  const size_t count = batch.num_rows;
  if (count == 0) return;
  changed_ = true;
  for (size_t c = 0; c < rows_.columns.size(); ++c) {
    rows_.columns[c].AppendRows(batch.columns[c], 0, count);
  }
  rows_.positions.insert(rows_.positions.end(), batch.positions.begin(),
                         batch.positions.begin() + static_cast<ptrdiff_t>(count));
  rows_.num_rows += count;
  rows_.Renew();  // what drift derived from the rows before is stale
  times_.event_us.insert(times_.event_us.end(), times.event_us.begin(),
                         times.event_us.begin() + static_cast<ptrdiff_t>(count));
  times_.late_before.insert(times_.late_before.end(), times.late_before.begin(),
                            times.late_before.begin() + static_cast<ptrdiff_t>(count));
  if (models_) {
    const std::vector<uint32_t>& ids = models_->Ids(batch);
    model_ids_.insert(model_ids_.end(), ids.begin(), ids.begin() + static_cast<ptrdiff_t>(count));
  }
  ReserveMore(places_, count);
  uint32_t last_key = 0;
  uint32_t last_index = UINT32_MAX;
  for (size_t row = 0; row < count; ++row) {
    const RecordPosition& position = batch.positions[row];
    if (position.partition != last_index) {
      last_index = position.partition;
      last_key = PartitionId(key_of_(position.partition));
    }
    // A row behind its own partition's watermark (jitter within the partition) takes its place
    // at that watermark: the partition's order decides it, not the batching.
    places_.push_back({std::max(times.event_us[row], times.late_before[row]), last_key,
                       position.offset, arrivals_++});
    least_place_ = std::min(least_place_, places_.back().event_us);
  }
}

void OrderBuffer::ReleaseMost(int64_t watermark, const Take& take) {
  if (watermark == INT64_MIN || least_place_ >= watermark) return;
  // Counts only as far as the answer is open: called at every chunk of a batch, a count over
  // the whole buffer would go over its rows again and again.
  const size_t half = (places_.size() + 1) / 2;
  size_t due = 0;
  size_t left = places_.size();
  for (const Place& place : places_) {
    --left;
    if (place.event_us < watermark && ++due >= half) {
      Release(watermark, take);
      return;
    }
    if (due + left < half) return;
  }
}

bool OrderBuffer::HasDue(int64_t watermark) const {
  // A row without a time has the least place, INT64_MIN, and is always due.
  return least_place_ == INT64_MIN || (watermark != INT64_MIN && least_place_ < watermark);
}

void OrderBuffer::Release(int64_t watermark, const Take& take) {
  // Rows without a time first, as they came (the buffer keeps rows in arrival order); the
  // others by partition, each partition's in the order they came.
  order_.clear();
  runs_.resize(partitions_.size());
  for (std::vector<uint32_t>& run : runs_) run.clear();
  keep_.assign(places_.size(), 1);
  for (size_t i = 0; i < places_.size(); ++i) {
    const Place& place = places_[i];
    if (place.event_us == INT64_MIN) {
      order_.push_back(static_cast<uint32_t>(i));
    } else if (watermark != INT64_MIN && place.event_us < watermark) {
      runs_[place.partition].push_back(static_cast<uint32_t>(i));
    } else {
      continue;
    }
    keep_[i] = 0;
  }
  // Each partition's run by (place, offset), usually in that order already (a watermark delay
  // lets a partition's places step back); stable, so equal places keep their arrival order.
  auto before = [&](uint32_t a, uint32_t b) {
    const Place& x = places_[a];
    const Place& y = places_[b];
    return x.event_us < y.event_us || (x.event_us == y.event_us && x.offset < y.offset);
  };
  // The runs merged by (place, partition by its name's rank).
  if (rank_.size() != partitions_.size()) {
    std::vector<uint32_t> by_name(partitions_.size());
    std::iota(by_name.begin(), by_name.end(), 0u);
    std::sort(by_name.begin(), by_name.end(),
              [&](uint32_t a, uint32_t b) { return partitions_[a] < partitions_[b]; });
    rank_.resize(partitions_.size());
    for (uint32_t r = 0; r < by_name.size(); ++r) rank_[by_name[r]] = r;
  }
  struct Head {
    int64_t event_us;
    uint32_t rank;
    uint32_t partition;
    size_t next;
    bool operator>(const Head& o) const {
      return event_us > o.event_us || (event_us == o.event_us && rank > o.rank);
    }
  };
  std::vector<Head> heads;
  for (uint32_t partition = 0; partition < runs_.size(); ++partition) {
    std::vector<uint32_t>& run = runs_[partition];
    if (run.empty()) continue;
    if (!std::is_sorted(run.begin(), run.end(), before)) {
      std::stable_sort(run.begin(), run.end(), before);
    }
    heads.push_back({places_[run[0]].event_us, rank_[partition], partition, 0});
  }
  // Hands out `head`'s rows before the next head's place, (bound, bound_rank); false once its
  // run is done.
  auto advance = [&](Head& head, int64_t bound, uint32_t bound_rank) {
    const std::vector<uint32_t>& run = runs_[head.partition];
    size_t next = head.next;
    for (;;) {
      order_.push_back(run[next++]);
      if (next == run.size()) break;
      const int64_t place = places_[run[next]].event_us;
      if (place > bound || (place == bound && head.rank >= bound_rank)) break;
    }
    if (next == run.size()) return false;
    head.next = next;
    head.event_us = places_[run[next]].event_us;
    return true;
  };
  if (heads.size() <= kScannedHeads) {
    // Few partitions, the usual case: the least head and the next one by a scan. Partitions
    // whose times interleave hand out a row or two per step, which a heap would pay twice for.
    while (!heads.empty()) {
      size_t least = 0;
      size_t second = heads.size();
      for (size_t i = 1; i < heads.size(); ++i) {
        if (heads[least] > heads[i]) {
          second = least;
          least = i;
        } else if (second == heads.size() || heads[second] > heads[i]) {
          second = i;
        }
      }
      const bool more = second == heads.size()
                            ? advance(heads[least], INT64_MAX, UINT32_MAX)
                            : advance(heads[least], heads[second].event_us, heads[second].rank);
      if (!more) {
        heads[least] = heads.back();
        heads.pop_back();
      }
    }
  } else {
    std::make_heap(heads.begin(), heads.end(), std::greater<>());
    while (!heads.empty()) {
      std::pop_heap(heads.begin(), heads.end(), std::greater<>());
      const bool more = heads.size() > 1
                            ? advance(heads.back(), heads.front().event_us, heads.front().rank)
                            : advance(heads.back(), INT64_MAX, UINT32_MAX);
      if (more) {
        std::push_heap(heads.begin(), heads.end(), std::greater<>());
      } else {
        heads.pop_back();
      }
    }
  }
  if (order_.empty()) return;
  changed_ = true;
  take(rows_, times_, order_, model_ids_);
  // What stays, in its order.
  if (order_.size() == places_.size()) {
    rows_.Reset(schema_);
    times_.event_us.clear();
    times_.late_before.clear();
    places_.clear();
    model_ids_.clear();
    least_place_ = INT64_MAX;
    return;
  }
  KeepRows(rows_, keep_);
  rows_.Renew();
  size_t kept = 0;
  least_place_ = INT64_MAX;
  for (size_t i = 0; i < keep_.size(); ++i) {
    if (!keep_[i]) continue;
    times_.event_us[kept] = times_.event_us[i];
    times_.late_before[kept] = times_.late_before[i];
    places_[kept] = places_[i];
    if (models_) model_ids_[kept] = model_ids_[i];
    least_place_ = std::min(least_place_, places_[i].event_us);
    ++kept;
  }
  times_.event_us.resize(kept);
  times_.late_before.resize(kept);
  places_.resize(kept);
  if (models_) model_ids_.resize(kept);
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
    least_place_ = std::min(least_place_, place.event_us);
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
  rows_.Renew();
  if (models_) {
    const Column& models = rows_.columns[static_cast<size_t>(models_->column())];
    for (size_t row = rows_before; row < rows_.num_rows; ++row) {
      model_ids_.push_back(models.IsNull(row) ? KeyInterner::kNull
                                              : models_->Intern(models.String(row)));
    }
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
