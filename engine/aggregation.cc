#include "engine/aggregation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <span>
#include <type_traits>

#include "engine/aggregates.h"
#include "engine/codec.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

// Group keys in memory start with 'a': then per key column '\0' (null) or '\1' and the value
// (a string as its u32 size and bytes, any other type as an i64, in host byte order), then for
// a windowed query the window start (OrderedI64, big-endian). Rows are emitted in the order of
// these keys. The checkpoint's keys (StoredKey) start with 'A' and use engine/codec.h: per key
// column a u8 0 (null) or 1 and the value (String, or OrderedI64), then the window start.
// Keys starting with 'a' in a checkpoint are the layout before the codec: the in-memory form.
constexpr char kStatePrefix = 'a';
constexpr char kStoredPrefix = 'A';
// A group's value (engine/codec.h): u8 format (3) | i64 window start | i64 count | bool emitted
// | u32 scalar series, each a Moments body (its own version byte, stats.h) | u32 array series,
// each a u32 element count and that many Moments bodies | u32 quantile series, each a u32
// sketch count and that many sketch bodies (quantile_sketch.h).
constexpr uint8_t kGroupFormat = 3;
// The layout before the codec, still read (host byte order, which was little-endian): format 1
// (count, emitted, moments) and 2 (the quantile sketches after the moments), with u64 counts.
constexpr uint8_t kLegacyFormatMoments = 1;
constexpr uint8_t kLegacyFormatSketches = 2;

void PutU64(std::string& out, uint64_t v) {
  char bytes[8];
  std::memcpy(bytes, &v, 8);
  out.append(bytes, 8);
}
void PutI64(std::string& out, int64_t v) { PutU64(out, static_cast<uint64_t>(v)); }

// An i64 of an in-memory group key (host byte order: it never leaves the process).
bool GetI64(std::string_view& in, int64_t& v) {
  if (in.size() < 8) return false;
  std::memcpy(&v, in.data(), 8);
  in.remove_prefix(8);
  return true;
}

template <typename Reader>
bool ReadMoments(Reader& in, Moments& m) {
  std::string_view bytes;
  if (!in.Raw(Moments::kEncodedSize, bytes)) return false;
  auto decoded = Moments::Decode(bytes);
  if (!decoded) return false;
  m = *decoded;
  return true;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::string_view FnName(AggregateFn fn) { return ToString(fn); }

// The column name of a percentile aggregate over one element of an array column: the name as
// written with the column replaced, approx_percentile(feature_vector[2], 0.5, 10000).
std::string PercentileColumnName(const AggregateSpec& aggregate, int element) {
  if (element < 0) return aggregate.output_name;
  std::string name = aggregate.output_name;
  const size_t at = name.find('(') + 1;
  name.replace(at, aggregate.column.size(), fmt::format("{}[{}]", aggregate.column, element));
  return name;
}

// A percentile aggregate's value over one sketch: a number, or an array of numbers when the
// percentages were given as array(...); null when the sketch is empty (Spark's rule).
void RenderPercentile(const AggregateSpec& aggregate, const QuantileSketch& sketch,
                      std::string_view name, JsonObject& object) {
  if (sketch.count() == 0) {
    object.Null(name);
    return;
  }
  double values[64];
  std::vector<double> heap;
  double* out = values;
  if (aggregate.percentages.size() > std::size(values)) {
    heap.resize(aggregate.percentages.size());
    out = heap.data();
  }
  sketch.Quantiles(aggregate.percentages, std::span<double>(out, aggregate.percentages.size()));
  if (!aggregate.percentage_array) {
    object.Number(name, out[0]);
    return;
  }
  std::string array = "[";
  for (size_t i = 0; i < aggregate.percentages.size(); ++i) {
    if (i > 0) array.push_back(',');
    AppendJsonNumber(array, out[i]);
  }
  array.push_back(']');
  object.Raw(name, array);
}

}  // namespace

size_t Aggregator::ArrayWidth(const Group& group) {
  size_t width = 0;
  for (const auto& elements : group.arrays) width += elements.size();
  for (const auto& sketches : group.sketches) width += sketches.size();
  return width;
}

namespace {

// Whether an aggregate reads a quantile sketch rather than the moments.
bool IsSketch(AggregateFn fn) { return KindOf(fn).state == AggregateState::kSketch; }

// The value an aggregate takes over `m` (its definition's finalize); NaN renders as null.
double AggregateValue(AggregateFn fn, const Moments& m) {
  const AggregateDecl& kind = KindOf(fn);
  return kind.finalize ? kind.finalize(m) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

std::string AggregateColumnName(AggregateFn fn, std::string_view column, int element) {
  if (column.empty()) return std::string(FnName(fn));
  if (element < 0) return fmt::format("{}({})", FnName(fn), column);
  return fmt::format("{}({}[{}])", FnName(fn), column, element);
}

Aggregator::Aggregator(const QuerySpec& query, const Schema& schema)
    : query_(query), schema_(schema) {}

Result<std::unique_ptr<Aggregator>> Aggregator::Create(const QuerySpec& query,
                                                       const Schema& schema) {
  std::unique_ptr<Aggregator> agg(new Aggregator(query, schema));
  for (const std::string& name : query.group_by) {
    int index = schema.IndexOf(name);
    if (index < 0)
      return MakeError(ErrorCode::kConfig, "groupBy column '{}' is not in the schema", name);
    agg->key_columns_.push_back(index);
  }
  if (query.window) {
    agg->window_column_ = schema.IndexOf(query.window->column);
    if (agg->window_column_ < 0) {
      return MakeError(ErrorCode::kConfig, "window column '{}' is not in the schema",
                       query.window->column);
    }
    agg->window_size_us_ = query.window->size_ms * 1000;
    agg->window_slide_us_ =
        (query.window->slide_ms > 0 ? query.window->slide_ms : query.window->size_ms) * 1000;
    if (agg->window_size_us_ <= 0) return MakeError(ErrorCode::kConfig, "window size must be > 0");
  }
  if (agg->window_column_ < 0 && agg->key_columns_.size() == 1 &&
      schema.fields[static_cast<size_t>(agg->key_columns_[0])].type == FieldType::kString) {
    agg->own_keys_ = std::make_unique<KeyInterner>(agg->key_columns_[0]);
  }
  if (query.watermark) {
    agg->watermark_column_ = schema.IndexOf(query.watermark->column);
    if (agg->watermark_column_ < 0) {
      return MakeError(ErrorCode::kConfig, "watermark column '{}' is not in the schema",
                       query.watermark->column);
    }
  }
  for (const AggregateSpec& aggregate : query.aggregates) {
    agg->aggregate_quantile_series_.push_back(-1);
    if (aggregate.column.empty()) continue;
    int index = schema.IndexOf(aggregate.column);
    if (index < 0) {
      return MakeError(ErrorCode::kConfig, "aggregate column '{}' is not in the schema",
                       aggregate.column);
    }
    bool is_array = schema.fields[index].type == FieldType::kDoubleArray;
    if (!is_array && !IsNumeric(schema.fields[index].type)) {
      return MakeError(ErrorCode::kConfig, "aggregate column '{}' is not numeric",
                       aggregate.column);
    }
    if (IsSketch(aggregate.fn)) {
      auto& quantiles = agg->quantile_series_;
      auto it = std::find_if(quantiles.begin(), quantiles.end(), [&](const QuantileSeries& q) {
        return q.column == index && q.accuracy == aggregate.accuracy;
      });
      if (it == quantiles.end()) {
        quantiles.push_back({index, is_array, aggregate.accuracy});
        it = quantiles.end() - 1;
      }
      agg->aggregate_quantile_series_.back() = static_cast<int>(it - quantiles.begin());
      continue;
    }
    auto& list = is_array ? agg->array_series_ : agg->scalar_series_;
    if (std::none_of(list.begin(), list.end(),
                     [&](const Series& s) { return s.column == index; })) {
      list.push_back({index, is_array});
    }
  }
  agg->outputs_.resize(query.aggregates.size());
  for (size_t a = 0; a < query.aggregates.size(); ++a) {
    const AggregateSpec& aggregate = query.aggregates[a];
    if (aggregate.column.empty()) continue;
    const int index = schema.IndexOf(aggregate.column);
    Output& output = agg->outputs_[a];
    output.is_array = schema.fields[index].type == FieldType::kDoubleArray;
    if (IsSketch(aggregate.fn)) continue;  // its sketch names its columns
    const auto& list = output.is_array ? agg->array_series_ : agg->scalar_series_;
    while (list[output.series].column != index) ++output.series;
    if (!output.is_array) {
      output.json_keys.push_back(JsonKey(AggregateColumnName(aggregate.fn, aggregate.column, -1)));
    }
  }
  return agg;
}

void Aggregator::NameElements(size_t width) {
  for (size_t a = 0; a < outputs_.size(); ++a) {
    Output& output = outputs_[a];
    const AggregateSpec& aggregate = query_.aggregates[a];
    if (!output.is_array || IsSketch(aggregate.fn)) continue;
    for (size_t e = output.json_keys.size(); e < width; ++e) {
      output.json_keys.push_back(
          JsonKey(AggregateColumnName(aggregate.fn, aggregate.column, static_cast<int>(e))));
    }
  }
}

bool Aggregator::OwnsKey(std::string_view key) {
  return !key.empty() && (key[0] == kStatePrefix || key[0] == kStoredPrefix);
}

std::string Aggregator::StoredKey(std::string_view group_key) const {
  std::string out;
  out.reserve(group_key.size() + 4);
  out.push_back(kStoredPrefix);
  codec::Writer writer(out);
  // Checked as it is read: a key restored from an old checkpoint comes from outside.
  if (group_key.empty() || group_key[0] != kStatePrefix) return {};
  std::string_view key = group_key.substr(1);
  for (int index : key_columns_) {
    if (key.empty()) return {};
    const bool valid = key[0] != '\0';
    key.remove_prefix(1);
    writer.U8(valid ? 1 : 0);
    if (!valid) continue;
    if (schema_.fields[index].type == FieldType::kString) {
      uint32_t size = 0;
      if (key.size() < 4) return {};
      std::memcpy(&size, key.data(), 4);
      if (key.size() - 4 < size) return {};
      writer.String(key.substr(4, size));
      key.remove_prefix(4 + size);
    } else {
      int64_t value = 0;
      if (!GetI64(key, value)) return {};
      writer.OrderedI64(value);
    }
  }
  if (key.size() != (window_column_ >= 0 ? 8u : 0u)) return {};
  writer.Raw(key);  // the window start, big-endian already
  return out;
}

std::string Aggregator::GroupKeyOf(std::string_view stored_key) const {
  if (stored_key.empty() || stored_key[0] == kStatePrefix) return std::string(stored_key);
  if (stored_key[0] != kStoredPrefix) return {};
  std::string out;
  out.reserve(stored_key.size());
  out.push_back(kStatePrefix);
  codec::Reader reader(stored_key.substr(1));
  for (int index : key_columns_) {
    bool valid = false;
    if (!reader.Bool(valid)) return {};
    out.push_back(valid ? '\1' : '\0');
    if (!valid) continue;
    if (schema_.fields[index].type == FieldType::kString) {
      std::string_view value;
      if (!reader.String(value)) return {};
      const uint32_t size = static_cast<uint32_t>(value.size());
      out.append(reinterpret_cast<const char*>(&size), 4);
      out.append(value);
    } else {
      int64_t value = 0;
      if (!reader.OrderedI64(value)) return {};
      PutI64(out, value);
    }
  }
  if (reader.rest().size() != (window_column_ >= 0 ? 8u : 0u)) return {};
  out.append(reader.rest());
  return out;
}

uint32_t Aggregator::FindOrAddGroup(std::string_view key, int64_t window_start_us) {
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    groups_[slot] = Group{};
  } else {
    slot = static_cast<uint32_t>(groups_.size());
    groups_.emplace_back();
    is_updated_.push_back(0);
  }
  Group& group = groups_[slot];
  group.key.assign(key);
  group.window_start_us = window_start_us;
  group.scalars.resize(scalar_series_.size());
  group.arrays.resize(array_series_.size());
  group.sketches.resize(quantile_series_.size());
  for (size_t q = 0; q < quantile_series_.size(); ++q) {
    if (!quantile_series_[q].is_array) {
      group.sketches[q].emplace_back(QuantileSketch::KForAccuracy(quantile_series_[q].accuracy));
    }
  }
  index_.emplace(group.key, slot);
  ++live_groups_;
  if (window_column_ >= 0) TrackOpenWindow(slot);
  return slot;
}

void Aggregator::TrackOpenWindow(uint32_t slot) {
  open_by_end_[groups_[slot].window_start_us + window_size_us_].push_back(slot);
  ++open_windows_;
}

void Aggregator::AddRow(Group& group, const RecordBatch& batch, size_t row) {
  ++group.count;
  for (size_t s = 0; s < scalar_series_.size(); ++s) {
    const Column& column = batch.columns[scalar_series_[s].column];
    if (column.IsNull(row)) continue;
    double value =
        column.type == FieldType::kDouble ? column.f64[row] : static_cast<double>(column.i64[row]);
    if (std::isnan(value)) continue;
    group.scalars[s].Add(value);
  }
  for (size_t s = 0; s < array_series_.size(); ++s) {
    const Column& column = batch.columns[array_series_[s].column];
    if (column.IsNull(row)) continue;
    size_t size = column.ArraySize(row);
    const double* data = column.ArrayData(row);
    std::vector<Moments>& elements = group.arrays[s];
    if (elements.size() < size) {
      elements.resize(size);
      NameElements(size);
    }
    for (size_t e = 0; e < size; ++e) {
      if (!std::isnan(data[e])) elements[e].Add(data[e]);
    }
  }
  for (size_t q = 0; q < quantile_series_.size(); ++q) {
    const QuantileSeries& series = quantile_series_[q];
    const Column& column = batch.columns[series.column];
    if (column.IsNull(row)) continue;
    std::vector<QuantileSketch>& sketches = group.sketches[q];
    if (!series.is_array) {
      double value = column.type == FieldType::kDouble ? column.f64[row]
                                                       : static_cast<double>(column.i64[row]);
      if (!std::isnan(value)) sketches[0].Add(value);
      continue;
    }
    size_t size = column.ArraySize(row);
    const double* data = column.ArrayData(row);
    while (sketches.size() < size) {
      sketches.emplace_back(QuantileSketch::KForAccuracy(series.accuracy));
    }
    for (size_t e = 0; e < size; ++e) {
      if (!std::isnan(data[e])) sketches[e].Add(data[e]);
    }
  }
}

void Aggregator::ShareKeys(std::shared_ptr<KeyInterner> keys) {
  if (keys && window_column_ < 0 && key_columns_.size() == 1 &&
      key_columns_[0] == keys->column()) {
    keys_ = std::move(keys);
    own_keys_.reset();
  }
}

namespace {

// Row indexes 0 .. n-1 as a range (std::views::iota does not build with clang 14 and
// libstdc++ 12, which the fuzz build uses).
struct AllRows {
  struct Iterator {
    size_t row;
    size_t operator*() const { return row; }
    Iterator& operator++() {
      ++row;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return row != other.row; }
  };
  size_t n;
  Iterator begin() const { return {0}; }
  Iterator end() const { return {n}; }
  size_t size() const { return n; }
  size_t operator[](size_t i) const { return i; }
};

}  // namespace

void Aggregator::Add(const RecordBatch& batch, const RowTimes& times) {
  AddEach(batch, times, AllRows{batch.num_rows});
}

void Aggregator::AddRows(const RecordBatch& batch, const RowTimes& times,
                         std::span<const uint32_t> rows) {
  AddEach(batch, times, rows);
}

template <typename Rows>
void Aggregator::AddEach(const RecordBatch& batch, const RowTimes& times, const Rows& rows) {
  std::string& key = key_buffer_;
  uint32_t last_slot = UINT32_MAX;
  std::string& last_key = last_key_buffer_;
  last_key.clear();
  const std::vector<uint32_t>* key_ids = keys_ ? &keys_->Ids(batch) : nullptr;
  KeyInterner* own_keys = key_ids == nullptr ? own_keys_.get() : nullptr;
  const Column* own_column =
      own_keys != nullptr ? &batch.columns[static_cast<size_t>(own_keys->column())] : nullptr;
  auto touch = [&](uint32_t slot, size_t row) {
    AddRow(groups_[slot], batch, row);
    if (!is_updated_[slot]) {
      is_updated_[slot] = 1;
      updated_.push_back(slot);
    }
  };
  // With a window on the watermark's column, lateness is judged per window (Spark's rule: a
  // window closes when the watermark reaches its end); otherwise per row on the watermark column.
  const bool row_lateness =
      watermark_column_ >= 0 && (window_column_ < 0 || watermark_column_ != window_column_);
  // With many groups a row's group is rarely in cache: the groups of the rows 24, 16 and 8
  // ahead are fetched while this one is added to, one level of pointers at a time (the group;
  // its vectors' buffers; the array elements' Moments). Reading an array's element vectors
  // with only the group fetched stalled on that buffer: 7.2% of a run of 10,000 models, 4.1%
  // with the extra step.
  constexpr size_t kAhead = 8;
  const bool prefetch = key_ids != nullptr && window_column_ < 0 && groups_.size() > 256;
  auto group_ahead = [&](size_t i) -> const Group* {
    if (i >= rows.size()) return nullptr;
    const uint32_t id = (*key_ids)[rows[i]];
    if (id >= slot_of_key_.size() || slot_of_key_[id] == kNoSlot) return nullptr;
    return &groups_[slot_of_key_[id]];
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t row = rows[i];
    if (prefetch) {
      if (const Group* group = group_ahead(i + 3 * kAhead)) __builtin_prefetch(group, 1);
      if (const Group* group = group_ahead(i + 2 * kAhead)) {
        __builtin_prefetch(group->scalars.data(), 1);
        __builtin_prefetch(group->arrays.data());
      }
      if (const Group* group = group_ahead(i + kAhead)) {
        for (const std::vector<Moments>& elements : group->arrays) {
          for (size_t b = 0; b < elements.size() * sizeof(Moments); b += 64) {
            __builtin_prefetch(reinterpret_cast<const char*>(elements.data()) + b, 1);
          }
        }
      }
    }
    // Without a declared watermark nothing is late (Spark's rule).
    const int64_t watermark_us = watermark_column_ >= 0 ? times.late_before[row] : INT64_MIN;
    const bool has_watermark = watermark_us != INT64_MIN;
    if (row_lateness) {
      const Column& column = batch.columns[watermark_column_];
      if (!column.IsNull(row) && has_watermark && column.i64[row] <= watermark_us) {
        ++dropped_by_watermark_;
        continue;
      }
    }
    int64_t t = 0;
    if (window_column_ >= 0) {
      const Column& time_column = batch.columns[window_column_];
      if (time_column.IsNull(row)) {
        ++without_event_time_;  // no event time: it cannot be placed in a window
        continue;
      }
      t = time_column.i64[row];
      // The newest window of the row closes last; if even it is closed, the row is late.
      int64_t newest_start = FloorDiv(t, window_slide_us_) * window_slide_us_;
      if (has_watermark && newest_start + window_size_us_ <= watermark_us) {
        ++dropped_by_watermark_;
        continue;
      }
    }
    // The row's group by its key's id (ShareKeys, or own_keys_), once the id's group was
    // looked up.
    uint32_t id = KeyInterner::kNull;
    if (key_ids != nullptr) {
      id = (*key_ids)[row];
    } else if (own_keys != nullptr && !own_column->IsNull(row)) {
      id = own_keys->Intern(own_column->String(row));
    }
    if (id < slot_of_key_.size() && slot_of_key_[id] != kNoSlot) {
      touch(slot_of_key_[id], row);
      continue;
    }
    key.clear();
    key.push_back(kStatePrefix);
    for (int index : key_columns_) {
      const Column& column = batch.columns[index];
      if (column.IsNull(row)) {
        key.push_back('\0');
        continue;
      }
      key.push_back('\1');
      if (column.type == FieldType::kString) {
        std::string_view value = column.String(row);
        uint32_t size = static_cast<uint32_t>(value.size());
        key.append(reinterpret_cast<const char*>(&size), 4);
        key.append(value);
      } else {
        PutI64(key, column.i64[row]);
      }
    }
    if (window_column_ < 0) {
      // Consecutive rows of one model are common: skip the hash lookup for them.
      if (last_slot == UINT32_MAX || key != last_key) {
        last_slot = FindOrAddGroup(key, INT64_MIN);
        last_key = key;
      }
      if (id != KeyInterner::kNull) {
        if (id >= slot_of_key_.size()) slot_of_key_.resize(id + 1, kNoSlot);
        slot_of_key_[id] = last_slot;
      }
      touch(last_slot, row);
      continue;
    }
    size_t key_size = key.size();
    int64_t start = FloorDiv(t, window_slide_us_) * window_slide_us_;
    for (; start > t - window_size_us_; start -= window_slide_us_) {
      // Older windows close first: once one is closed, so are the rest.
      if (has_watermark && start + window_size_us_ <= watermark_us) break;
      key.resize(key_size);
      // Big-endian with the sign flipped so windows of a key sort by time.
      uint64_t ordered = static_cast<uint64_t>(start) ^ (uint64_t{1} << 63);
      for (int shift = 56; shift >= 0; shift -= 8)
        key.push_back(static_cast<char>(ordered >> shift));
      touch(FindOrAddGroup(key, start), row);
    }
  }
}

int64_t Aggregator::TakeRowsDroppedByWatermark() {
  int64_t value = dropped_by_watermark_;
  dropped_by_watermark_ = 0;
  return value;
}

int64_t Aggregator::TakeRowsWithoutEventTime() {
  int64_t value = without_event_time_;
  without_event_time_ = 0;
  return value;
}

void Aggregator::BuildColumns(const Group* sample, std::vector<std::string>& columns) const {
  columns.clear();
  for (const std::string& name : query_.group_by) columns.push_back(name);
  if (window_column_ >= 0) columns.push_back("window");
  for (const AggregateSpec& aggregate : query_.aggregates) {
    if (aggregate.column.empty()) {
      columns.push_back(aggregate.output_name.empty() ? "count" : aggregate.output_name);
      continue;
    }
    int index = schema_.IndexOf(aggregate.column);
    const bool percentile = IsSketch(aggregate.fn);
    if (schema_.fields[index].type != FieldType::kDoubleArray) {
      columns.push_back(percentile ? PercentileColumnName(aggregate, -1)
                                   : AggregateColumnName(aggregate.fn, aggregate.column, -1));
      continue;
    }
    size_t elements = 0;
    const size_t a = static_cast<size_t>(&aggregate - query_.aggregates.data());
    if (sample && percentile) {
      elements = sample->sketches[aggregate_quantile_series_[a]].size();
      for (size_t e = 0; e < elements; ++e) {
        columns.push_back(PercentileColumnName(aggregate, static_cast<int>(e)));
      }
      continue;
    }
    if (sample) {
      for (size_t s = 0; s < array_series_.size(); ++s) {
        if (array_series_[s].column == index) elements = sample->arrays[s].size();
      }
    }
    for (size_t e = 0; e < elements; ++e) {
      columns.push_back(AggregateColumnName(aggregate.fn, aggregate.column, static_cast<int>(e)));
    }
  }
}

void Aggregator::RenderGroup(const Group& group, EmittedRows& out) const {
  std::string row;
  std::string message_key;
  JsonObject object(row);
  std::string_view key(group.key);
  key.remove_prefix(1);
  for (size_t k = 0; k < key_columns_.size(); ++k) {
    const Field& field = schema_.fields[key_columns_[k]];
    bool valid = key[0] != '\0';
    key.remove_prefix(1);
    if (!valid) {
      object.Null(field.name);
      continue;
    }
    if (field.type == FieldType::kString) {
      uint32_t size = 0;
      std::memcpy(&size, key.data(), 4);
      std::string_view value = key.substr(4, size);
      key.remove_prefix(4 + size);
      object.String(field.name, value);
      if (k == 0) message_key.assign(value);
    } else {
      int64_t value = 0;
      GetI64(key, value);
      if (field.type == FieldType::kBoolean) {
        object.Bool(field.name, value != 0);
      } else if (field.type == FieldType::kTimestamp) {
        object.Timestamp(field.name, value);
      } else {
        object.Int(field.name, value);
      }
      if (k == 0) message_key = std::to_string(value);
    }
  }
  if (window_column_ >= 0) {
    std::string window;
    JsonObject bounds(window);
    bounds.Timestamp("start", group.window_start_us);
    bounds.Timestamp("end", group.window_start_us + window_size_us_);
    bounds.Close();
    object.Raw("window", window);
  }
  for (const AggregateSpec& aggregate : query_.aggregates) {
    if (aggregate.column.empty()) {
      object.Int(aggregate.output_name.empty() ? "count" : aggregate.output_name, group.count);
      continue;
    }
    const size_t a = static_cast<size_t>(&aggregate - query_.aggregates.data());
    const Output& output = outputs_[a];
    if (IsSketch(aggregate.fn)) {
      const std::vector<QuantileSketch>& sketches =
          group.sketches[aggregate_quantile_series_[a]];
      for (size_t e = 0; e < sketches.size(); ++e) {
        RenderPercentile(
            aggregate, sketches[e],
            PercentileColumnName(aggregate, output.is_array ? static_cast<int>(e) : -1), object);
      }
      continue;
    }
    auto value = [&](const Moments& m, std::string_view json_key) {
      object.WrittenKey(json_key);
      if (KindOf(aggregate.fn).counts_rows) {
        AppendJsonNumber(row, m.count());
      } else {
        AppendJsonNumber(row, AggregateValue(aggregate.fn, m));
      }
    };
    if (!output.is_array) {
      value(group.scalars[output.series], output.json_keys[0]);
      continue;
    }
    const std::vector<Moments>& elements = group.arrays[output.series];
    for (size_t e = 0; e < elements.size(); ++e) {
      if (e < output.json_keys.size()) {
        value(elements[e], output.json_keys[e]);
      } else {  // a restored group wider than any row added since
        value(elements[e], JsonKey(AggregateColumnName(aggregate.fn, aggregate.column,
                                                       static_cast<int>(e))));
      }
    }
  }
  object.Close();
  out.rows.push_back(std::move(row));
  out.keys.push_back(std::move(message_key));
}

// In step with RenderGroup: the same members, in the same order, of the types it writes.
RowShape Aggregator::Shape() const {
  using Kind = ShapeType::Kind;
  std::vector<ShapeField> fields;
  for (int index : key_columns_) {
    const Field& field = schema_.fields[index];
    fields.push_back({field.name, ShapeType::Scalar(ShapeKindOf(field.type), field.nullable), {}});
  }
  if (window_column_ >= 0) {
    std::vector<ShapeField> bounds = {{"start", ShapeType::Scalar(Kind::kTimestamp), {}},
                                      {"end", ShapeType::Scalar(Kind::kTimestamp), {}}};
    fields.push_back({"window", ShapeType::Record("Window", std::move(bounds)), {}});
  }
  for (const AggregateSpec& aggregate : query_.aggregates) {
    if (aggregate.column.empty()) {
      fields.push_back({aggregate.output_name.empty() ? "count" : aggregate.output_name,
                        ShapeType::Scalar(Kind::kLong), {}});
      continue;
    }
    const bool is_array = schema_.fields[schema_.IndexOf(aggregate.column)].type ==
                          FieldType::kDoubleArray;
    ShapeType value;
    std::string name;
    std::optional<ElementMembers> elements;
    if (IsSketch(aggregate.fn)) {
      // RenderPercentile: null for an empty sketch, else a number or an array of numbers.
      value = aggregate.percentage_array
                  ? ShapeType::Array(ShapeType::Scalar(Kind::kDouble), /*nullable=*/true)
                  : ShapeType::Scalar(Kind::kDouble, /*nullable=*/true);
      name = PercentileColumnName(aggregate, -1);
      if (is_array) {
        elements = ElementMembersOf(PercentileColumnName(aggregate, 0),
                                    PercentileColumnName(aggregate, 1));
      }
    } else {
      value = KindOf(aggregate.fn).counts_rows ? ShapeType::Scalar(Kind::kLong)
                                                  : ShapeType::Scalar(Kind::kDouble, true);
      name = AggregateColumnName(aggregate.fn, aggregate.column, -1);
      if (is_array) {
        elements = ElementMembersOf(AggregateColumnName(aggregate.fn, aggregate.column, 0),
                                    AggregateColumnName(aggregate.fn, aggregate.column, 1));
      }
    }
    if (elements) {
      fields.push_back({std::move(name), ShapeType::Array(std::move(value)), std::move(elements)});
    } else {
      fields.push_back({std::move(name), std::move(value), {}});
    }
  }
  return ShapeType::Record("Stats", std::move(fields));
}

void Aggregator::Render(std::span<const PartGroup> order, EmittedRows& out) {
  const PartGroup* widest = nullptr;
  for (const PartGroup& entry : order) {
    entry.part->RenderGroup(entry.group(), out);
    if (!widest || ArrayWidth(entry.group()) > ArrayWidth(widest->group())) widest = &entry;
  }
  if (widest) {
    widest->part->BuildColumns(&widest->group(), out.columns);
  } else if (!order.empty()) {
    order[0].part->BuildColumns(nullptr, out.columns);
  }
}

void Aggregator::EmitUpdated(EmittedRows& out) const {
  const Aggregator* self = this;
  EmitUpdated(std::span<const Aggregator* const>(&self, 1), out);
}

void Aggregator::EmitAll(EmittedRows& out) const {
  const Aggregator* self = this;
  EmitAll(std::span<const Aggregator* const>(&self, 1), out);
}

void Aggregator::EmitClosed(int64_t watermark_us, EmittedRows& out) const {
  const Aggregator* self = this;
  EmitClosed(std::span<const Aggregator* const>(&self, 1), watermark_us, out);
}

namespace {

// Deterministic output: by key, which sorts a key's windows by start time.
template <typename Entry>
void SortByKey(std::vector<Entry>& order) {
  std::sort(order.begin(), order.end(),
            [](const Entry& a, const Entry& b) { return a.group().key < b.group().key; });
}

}  // namespace

void Aggregator::EmitUpdated(std::span<const Aggregator* const> parts, EmittedRows& out) {
  std::vector<PartGroup> order;
  for (const Aggregator* part : parts) {
    for (uint32_t slot : part->updated_) order.push_back({part, slot});
  }
  SortByKey(order);
  Render(order, out);
  if (order.empty() && !parts.empty()) parts[0]->BuildColumns(nullptr, out.columns);
}

void Aggregator::EmitAll(std::span<const Aggregator* const> parts, EmittedRows& out) {
  std::vector<PartGroup> order;
  for (const Aggregator* part : parts) {
    for (uint32_t slot = 0; slot < part->groups_.size(); ++slot) {
      if (part->groups_[slot].live) order.push_back({part, slot});
    }
  }
  SortByKey(order);
  Render(order, out);
  if (order.empty() && !parts.empty()) parts[0]->BuildColumns(nullptr, out.columns);
}

void Aggregator::EmitClosed(std::span<const Aggregator* const> parts, int64_t watermark_us,
                            EmittedRows& out) {
  if (parts.empty()) return;
  if (parts[0]->window_column_ < 0 || watermark_us == INT64_MIN) {
    parts[0]->BuildColumns(nullptr, out.columns);
    return;
  }
  // Windows in order of their end (= start), then by key.
  struct Closed {
    int64_t end = 0;
    PartGroup entry;
    const Group& group() const { return entry.group(); }
  };
  std::vector<Closed> closed;
  for (const Aggregator* part : parts) {
    for (auto it = part->open_by_end_.begin();
         it != part->open_by_end_.end() && it->first <= watermark_us; ++it) {
      for (uint32_t slot : it->second) closed.push_back({it->first, {part, slot}});
    }
  }
  std::sort(closed.begin(), closed.end(), [](const Closed& a, const Closed& b) {
    return a.end != b.end ? a.end < b.end : a.group().key < b.group().key;
  });
  std::vector<PartGroup> order;
  order.reserve(closed.size());
  for (const Closed& entry : closed) order.push_back(entry.entry);
  Render(order, out);
  if (order.empty()) parts[0]->BuildColumns(nullptr, out.columns);
}

bool Aggregator::HasClosableWindows(int64_t watermark_us) const {
  if (window_column_ < 0 || watermark_us == INT64_MIN || open_by_end_.empty()) return false;
  return open_by_end_.begin()->first <= watermark_us;
}

void Aggregator::EncodeGroup(const Group& group, std::string& out) const {
  size_t moments = group.scalars.size();
  for (const auto& elements : group.arrays) moments += elements.size();
  out.reserve(out.size() + 1 + 8 + 8 + 1 + 8 * (3 + group.arrays.size()) +
              moments * Moments::kEncodedSize);
  codec::Writer writer(out);
  writer.U8(kGroupFormat);
  writer.I64(group.window_start_us);
  writer.I64(group.count);
  writer.Bool(group.emitted);
  writer.U32(static_cast<uint32_t>(group.scalars.size()));
  for (const Moments& m : group.scalars) m.Encode(out);
  writer.U32(static_cast<uint32_t>(group.arrays.size()));
  for (const auto& elements : group.arrays) {
    writer.U32(static_cast<uint32_t>(elements.size()));
    for (const Moments& m : elements) m.Encode(out);
  }
  writer.U32(static_cast<uint32_t>(group.sketches.size()));
  for (const auto& sketches : group.sketches) {
    writer.U32(static_cast<uint32_t>(sketches.size()));
    for (const QuantileSketch& sketch : sketches) sketch.Encode(out);
  }
}

void Aggregator::EndBatch(int64_t watermark_us, bool evict, StatePuts& puts,
                          std::vector<std::string>& deletes) {
  if (window_column_ >= 0 && watermark_us != INT64_MIN) {
    auto it = open_by_end_.begin();
    for (; it != open_by_end_.end() && it->first <= watermark_us; ++it) {
      for (uint32_t slot : it->second) {
        Group& group = groups_[slot];
        --open_windows_;
        if (!evict) {
          // Kept for complete mode; remember that append mode has emitted it.
          group.emitted = true;
          if (!is_updated_[slot]) {
            is_updated_[slot] = 1;
            updated_.push_back(slot);
          }
          continue;
        }
        deletes.push_back(StoredKey(group.key));
        index_.erase(group.key);
        group = Group{};
        group.live = false;
        free_slots_.push_back(slot);
        --live_groups_;
      }
    }
    open_by_end_.erase(open_by_end_.begin(), it);
  }
  for (uint32_t slot : updated_) {
    const Group& group = groups_[slot];
    if (!group.live) continue;
    std::string value;
    EncodeGroup(group, value);
    puts.emplace_back(StoredKey(group.key), std::move(value));
  }
  // Groups restored from the layout before the codec, not changed by this batch: written anew.
  for (uint32_t slot : rewrite_) {
    const Group& group = groups_[slot];
    if (!group.live || is_updated_[slot]) continue;
    std::string value;
    EncodeGroup(group, value);
    puts.emplace_back(StoredKey(group.key), std::move(value));
  }
  rewrite_.clear();
  for (std::string& key : legacy_keys_) deletes.push_back(std::move(key));
  legacy_keys_.clear();
  for (uint32_t slot : updated_) is_updated_[slot] = 0;
  updated_.clear();
}

Status Aggregator::Restore(std::string_view stored_key, std::string_view value) {
  auto corrupt = [&] {
    return MakeError(ErrorCode::kCorruption, "aggregation state entry of {} bytes is unreadable",
                     value.size());
  };
  const std::string key = GroupKeyOf(stored_key);
  // A key of the old layout must convert to the codec's (its next write does that).
  if (key.empty() || value.empty() || StoredKey(key).empty()) return corrupt();
  const uint8_t format = static_cast<uint8_t>(value[0]);
  const bool legacy = stored_key[0] == kStatePrefix;
  // A format-1 group has no sketches: it serves a query without percentile aggregates only
  // (the checkpoint's fingerprint refuses a query whose aggregates changed).
  if (legacy ? !(format == kLegacyFormatSketches ||
                 (format == kLegacyFormatMoments && quantile_series_.empty()))
             : format != kGroupFormat) {
    return corrupt();
  }
  if (index_.find(key) != index_.end()) return corrupt();
  Status status = legacy ? RestoreGroup(key, format, codec::LegacyReader(value.substr(1)))
                         : RestoreGroup(key, format, codec::Reader(value.substr(1)));
  if (!status) return status;
  if (legacy) {
    rewrite_.push_back(index_.find(key)->second);
    legacy_keys_.emplace_back(stored_key);
  }
  return Ok();
}

template <typename Reader>
Status Aggregator::RestoreGroup(std::string_view key, uint8_t format, Reader value) {
  auto corrupt = [&] {
    return MakeError(ErrorCode::kCorruption, "aggregation state entry of {} bytes is unreadable",
                     value.rest().size());
  };
  // Counts are u32 in the codec's layout, u64 in the old one.
  auto count = [&](uint64_t& n) {
    if constexpr (std::is_same_v<Reader, codec::Reader>) {
      uint32_t narrow = 0;
      if (!value.U32(narrow)) return false;
      n = narrow;
      return true;
    } else {
      return value.U64(n);
    }
  };
  int64_t window_start = 0;
  int64_t rows = 0;
  uint8_t emitted_byte = 0;
  uint64_t scalars = 0;
  if (!value.I64(window_start) || !value.I64(rows) || !value.U8(emitted_byte)) return corrupt();
  const bool emitted = emitted_byte != 0;
  if (!count(scalars) || scalars != scalar_series_.size()) return corrupt();
  uint32_t slot = FindOrAddGroup(key, window_start);
  Group& group = groups_[slot];
  group.count = rows;
  group.emitted = emitted;
  if (emitted && window_column_ >= 0) {
    // Closed before the restart (complete mode keeps it): not open any more.
    auto& slots = open_by_end_[window_start + window_size_us_];
    slots.erase(std::remove(slots.begin(), slots.end(), slot), slots.end());
    if (slots.empty()) open_by_end_.erase(window_start + window_size_us_);
    --open_windows_;
  }
  for (Moments& m : group.scalars) {
    if (!ReadMoments(value, m)) return corrupt();
  }
  uint64_t arrays = 0;
  if (!count(arrays) || arrays != array_series_.size()) return corrupt();
  for (auto& elements : group.arrays) {
    uint64_t size = 0;
    if (!count(size) || size > (1u << 20)) return corrupt();
    elements.resize(size);
    for (Moments& m : elements) {
      if (!ReadMoments(value, m)) return corrupt();
    }
  }
  if (format == kLegacyFormatMoments) return Ok();
  uint64_t quantiles = 0;
  if (!count(quantiles) || quantiles != quantile_series_.size()) return corrupt();
  for (size_t q = 0; q < quantiles; ++q) {
    uint64_t size = 0;
    if (!count(size) || size > (1u << 20)) return corrupt();
    if (!quantile_series_[q].is_array && size != 1) return corrupt();
    const uint32_t k = QuantileSketch::KForAccuracy(quantile_series_[q].accuracy);
    std::vector<QuantileSketch>& sketches = group.sketches[q];
    sketches.clear();
    // A sketch body says its own length: it is read from the rest, and the reader goes on
    // after it.
    std::string_view rest = value.rest();
    for (uint64_t e = 0; e < size; ++e) {
      auto sketch = QuantileSketch::Decode(rest);
      if (!sketch) {
        return MakeError(ErrorCode::kCorruption, "aggregation state entry: {}",
                         sketch.error().message());
      }
      if (sketch->k() != k) return corrupt();
      sketches.push_back(std::move(*sketch));
    }
    value = Reader(rest);
  }
  return value.done() ? Ok() : corrupt();
}

}  // namespace driftd
