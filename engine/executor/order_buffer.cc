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
  pending_.emplace_back();
  return id;
}

void OrderBuffer::Sort(Pending& pending) {
  std::vector<uint32_t>& rows = pending.rows;
  std::stable_sort(rows.begin(), rows.end(), [&](uint32_t a, uint32_t b) {
    const Place& x = places_[a];
    const Place& y = places_[b];
    return x.event_us < y.event_us || (x.event_us == y.event_us && x.offset < y.offset);
  });
  for (size_t i = 0; i < rows.size(); ++i) pending.places[i] = places_[rows[i]].event_us;
  if (!rows.empty()) pending.last_offset = places_[rows.back()].offset;
  pending.sorted = true;
}

size_t OrderBuffer::DueCount(const Pending& pending, int64_t watermark) {
  if (watermark == INT64_MIN) return 0;
  return static_cast<size_t>(std::partition_point(pending.places.begin(), pending.places.end(),
                                                  [&](int64_t place) { return place < watermark; }) -
                             pending.places.begin());
}

int64_t OrderBuffer::LeastPlace() const {
  if (!untimed_.empty()) return INT64_MIN;
  int64_t least = INT64_MAX;
  for (const Pending& pending : pending_) {
    if (pending.places.empty()) continue;
    least = std::min(least, pending.sorted
                                ? pending.places.front()
                                : *std::min_element(pending.places.begin(), pending.places.end()));
  }
  return least;
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
  const size_t first = places_.size();
  ReserveMore(places_, count);
  uint32_t last_key = 0;
  uint32_t last_index = UINT32_MAX;
  Pending* pending = nullptr;  // last_key's
  for (size_t row = 0; row < count; ++row) {
    const RecordPosition& position = batch.positions[row];
    if (position.partition != last_index) {
      last_index = position.partition;
      last_key = PartitionId(key_of_(position.partition));
      pending = &pending_[last_key];
    }
    // A row behind its own partition's watermark (jitter within the partition) takes its place
    // at that watermark: the partition's order decides it, not the batching.
    const int64_t place = std::max(times.event_us[row], times.late_before[row]);
    const auto index = static_cast<uint32_t>(first + row);
    places_.push_back({place, last_key, position.offset, arrivals_++});
    least_place_ = std::min(least_place_, place);
    File(index, place, position.offset, *pending);
  }
}

void OrderBuffer::ReleaseMost(int64_t watermark, const Take& take) {
  if (watermark == INT64_MIN || least_place_ >= watermark) return;
  size_t due = untimed_.size();
  for (Pending& pending : pending_) {
    if (!pending.sorted) Sort(pending);
    due += DueCount(pending, watermark);
  }
  if (due >= (size() + 1) / 2) ReleaseDue(watermark, take, /*compact=*/false);
}

bool OrderBuffer::HasDue(int64_t watermark) const {
  // A row without a time has the least place, INT64_MIN, and is always due.
  return least_place_ == INT64_MIN || (watermark != INT64_MIN && least_place_ < watermark);
}

void OrderBuffer::Release(int64_t watermark, const Take& take) {
  ReleaseDue(watermark, take, /*compact=*/true);
  if (dead_ > 0) Compact();  // nothing was due: the dead rows of earlier releases
}

void OrderBuffer::ReleaseDue(int64_t watermark, const Take& take, bool compact) {
  // Ties of place go by partition name: each partition's rank.
  if (rank_.size() != partitions_.size()) {
    std::vector<uint32_t> by_name(partitions_.size());
    std::iota(by_name.begin(), by_name.end(), 0u);
    std::sort(by_name.begin(), by_name.end(),
              [&](uint32_t a, uint32_t b) { return partitions_[a] < partitions_[b]; });
    rank_.resize(partitions_.size());
    for (uint32_t r = 0; r < by_name.size(); ++r) rank_[by_name[r]] = r;
  }
  // Rows without a time first, by (partition name, offset): not in the order they came, which
  // the read order across partitions decides.
  order_.assign(untimed_.begin(), untimed_.end());
  untimed_.clear();
  std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
    const Place& x = places_[a];
    const Place& y = places_[b];
    return std::tie(rank_[x.partition], x.offset) < std::tie(rank_[y.partition], y.offset);
  });
  // Each partition's due rows (the head of its sorted list) as a run of entries, the runs one
  // after another.
  merged_.clear();
  run_ends_.clear();
  for (uint32_t partition = 0; partition < pending_.size(); ++partition) {
    Pending& pending = pending_[partition];
    if (pending.rows.empty()) continue;
    if (!pending.sorted) Sort(pending);
    const size_t count = DueCount(pending, watermark);
    if (count == 0) continue;
    for (size_t i = 0; i < count; ++i) {
      merged_.push_back({pending.places[i], rank_[partition], pending.rows[i]});
    }
    run_ends_.push_back(merged_.size());
    // The run is handed out below (it is not empty): it leaves the partition's list.
    pending.rows.erase(pending.rows.begin(), pending.rows.begin() + static_cast<ptrdiff_t>(count));
    pending.places.erase(pending.places.begin(),
                         pending.places.begin() + static_cast<ptrdiff_t>(count));
  }
  // Runs merged two by two until one is left: each row is moved log2(runs) times, with one
  // comparison each, where picking the least of all the runs' heads would compare them all for
  // each row (partitions whose times interleave give one row per head). Stable, so a
  // partition's rows keep their order among equal places.
  auto before = [](const Entry& a, const Entry& b) {
    return a.place < b.place || (a.place == b.place && a.rank < b.rank);
  };
  while (run_ends_.size() > 1) {
    spare_.resize(merged_.size());
    size_t begin = 0;
    size_t runs = 0;
    for (size_t r = 0; r < run_ends_.size(); r += 2) {
      const size_t middle = run_ends_[r];
      const size_t end = r + 1 < run_ends_.size() ? run_ends_[r + 1] : middle;
      std::merge(merged_.begin() + static_cast<ptrdiff_t>(begin),
                 merged_.begin() + static_cast<ptrdiff_t>(middle),
                 merged_.begin() + static_cast<ptrdiff_t>(middle),
                 merged_.begin() + static_cast<ptrdiff_t>(end),
                 spare_.begin() + static_cast<ptrdiff_t>(begin), before);
      run_ends_[runs++] = end;
      begin = end;
    }
    run_ends_.resize(runs);
    merged_.swap(spare_);
  }
  if (order_.empty() && merged_.empty()) return;
  for (const Entry& entry : merged_) order_.push_back(entry.row);
  changed_ = true;
  take(rows_, times_, order_, model_ids_);
  if (compact || (dead_ + order_.size()) * 4 >= places_.size() * 3) {
    Compact();
    return;
  }
  if (keep_.size() != places_.size()) keep_.resize(places_.size(), 1);
  for (uint32_t row : order_) keep_[row] = 0;
  dead_ += order_.size();
  least_place_ = LeastPlace();
}

void OrderBuffer::Compact() {
  if (dead_ + order_.size() == places_.size()) {
    rows_.Reset(schema_);
    times_.event_us.clear();
    times_.late_before.clear();
    places_.clear();
    model_ids_.clear();
    keep_.clear();
    dead_ = 0;
    least_place_ = INT64_MAX;
    return;
  }
  // keep_ holds the dead rows' zeros (rows added since are kept).
  keep_.resize(places_.size(), 1);
  for (uint32_t row : order_) keep_[row] = 0;
  KeepRows(rows_, keep_);
  rows_.Renew();
  remap_.resize(keep_.size());
  uint32_t kept = 0;
  for (size_t i = 0; i < keep_.size(); ++i) {
    remap_[i] = kept;
    if (!keep_[i]) continue;
    times_.event_us[kept] = times_.event_us[i];
    times_.late_before[kept] = times_.late_before[i];
    places_[kept] = places_[i];
    if (models_) model_ids_[kept] = model_ids_[i];
    ++kept;
  }
  times_.event_us.resize(kept);
  times_.late_before.resize(kept);
  places_.resize(kept);
  if (models_) model_ids_.resize(kept);
  for (Pending& pending : pending_) {
    for (uint32_t& row : pending.rows) row = remap_[row];
  }
  keep_.clear();
  dead_ = 0;
  least_place_ = LeastPlace();
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
  for (size_t index = first; index < places_.size(); ++index) {
    Enqueue(static_cast<uint32_t>(index));
  }
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
  if (dead_ > 0) {
    order_.clear();
    Compact();  // Release does at a batch's end; the state holds live rows only
  }
  changed_ = false;
  if (legacy_) changes.deletes.emplace_back(kLegacyKey);
  legacy_ = false;
  size_t pages = 0;
  size_t row = 0;
  while (row < rows_.num_rows) {
    // One page: rows until their blocks reach kPageBytes (a row larger than that alone).
    RowBlockWriter writer("");
    const size_t first = row;
    while (row < rows_.num_rows && writer.bytes() < kPageBytes) {
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
