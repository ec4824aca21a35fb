// Drives an Aggregator the way the executor does, batch by batch from JSON lines, and renders
// its output rows in a compact form that expected results can be written in by hand:
//   "m1 [0,10) n=2 sum=9"   (window bounds in seconds after kT0; no window: "m1 n=2 sum=9").
#pragma once

#include <simdjson.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/aggregation.h"
#include "engine/executor/event_clock.h"
#include "engine/json_decoder.h"
#include "engine/time_iso8601.h"

namespace driftd::testing {

/// 2026-11-29T10:00:00Z: the origin of every event time in these tests.
inline constexpr int64_t kT0Us = 1'795'946'400'000'000;

/// A record {"model_id":..., "event_time": kT0 + seconds, "value": v}; `seconds` may carry a
/// fraction down to microseconds.
inline std::string Row(std::string_view model, double seconds, double value) {
  int64_t micros = kT0Us + static_cast<int64_t>(std::llround(seconds * 1e6));
  return fmt::format(R"({{"model_id":"{}","event_time":"{}","value":{}}})", model,
                     FormatIso8601Micros(micros), value);
}

/// A record whose event time is null.
inline std::string RowWithoutTime(std::string_view model, double value) {
  return fmt::format(R"({{"model_id":"{}","event_time":null,"value":{}}})", model, value);
}

inline Schema TestSchema() {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false},
                   {"event_time", FieldType::kTimestamp, true},
                   {"value", FieldType::kDouble, true}};
  return schema;
}

/// groupBy [model_id], aggregates [count, sum(value)], optional window and watermark (seconds).
inline QuerySpec TestQuery(double window_s, double slide_s, double delay_s) {
  QuerySpec query;
  query.group_by = {"model_id"};
  AggregateSpec count;
  count.fn = AggregateFn::kCount;
  count.output_name = "count";
  AggregateSpec sum;
  sum.fn = AggregateFn::kSum;
  sum.column = "value";
  sum.output_name = "sum(value)";
  query.aggregates = {count, sum};
  if (window_s > 0) {
    query.window = WindowSpec{"event_time",
                              static_cast<int64_t>(window_s * 1000),
                              static_cast<int64_t>(slide_s * 1000),
                              {}};
  }
  if (delay_s >= 0) {
    query.watermark = WatermarkSpec{"event_time", static_cast<int64_t>(delay_s * 1000), {}};
  }
  return query;
}

/// "m1 [0,10) n=2 sum=9" for one output row.
inline std::string Compact(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element row = parser.parse(json);
  std::string out(row["model_id"].get_string().value());
  simdjson::dom::element window;
  if (row.at_key("window").get(window) == simdjson::SUCCESS) {
    auto start = ParseIso8601Micros(window["start"].get_string().value());
    auto end = ParseIso8601Micros(window["end"].get_string().value());
    REQUIRE(start);
    REQUIRE(end);
    out += fmt::format(" [{:g},{:g})", (*start - kT0Us) / 1e6, (*end - kT0Us) / 1e6);
  }
  out += fmt::format(" n={}", int64_t(row["count"]));
  simdjson::dom::element sum = row["sum(value)"];
  out += sum.is_null() ? std::string(" sum=null") : fmt::format(" sum={:g}", double(sum));
  return out;
}

/// What one batch produced in one output mode, plus its counters.
struct BatchResult {
  std::vector<std::string> rows;  // compact form, in emission order
  int64_t dropped = 0;
  int64_t without_event_time = 0;
  int64_t deletes = 0;
  int64_t watermark_after_us = INT64_MIN;
};

/// Runs an Aggregator as the executor does for one sink of `mode`: Add with the watermark of
/// the batch, emit, EndBatch (evicting unless complete), then the next watermark =
/// max(old, max event time - delay).
class Driver {
 public:
  static EventClockOptions ClockOptionsFor(const QuerySpec& query, const Schema& schema) {
    EventClockOptions options;
    if (query.watermark) {
      options.column = schema.IndexOf(query.watermark->column);
      options.delay_us = query.watermark->delay_ms * 1000;
    }
    return options;
  }

  Driver(const QuerySpec& query, OutputMode mode)
      : query_(query),
        schema_(TestSchema()),
        mode_(mode),
        decoder_(schema_, MalformedSpec{}),
        clock_(ClockOptionsFor(query_, schema_)) {
    auto created = Aggregator::Create(query_, schema_);
    REQUIRE(created);
    aggregator_ = std::move(*created);
  }

  /// Runs one batch of `lines` (empty: a no-data batch).
  BatchResult Batch(const std::vector<std::string>& lines) {
    InputChunk chunk;
    for (size_t i = 0; i < lines.size(); ++i) {
      chunk.Append(lines[i], RecordPosition{0, static_cast<int64_t>(i)});
    }
    chunk.Seal();
    RecordBatch batch;
    batch.Reset(schema_);
    REQUIRE(decoder_.Decode(chunk, batch, nullptr));
    REQUIRE(batch.num_rows == lines.size());
    clock_.BeginBatch({PartitionActivity{"", false, !lines.empty()}}, 0);
    RowTimes times;
    clock_.Stamp(batch, [](uint32_t) { return std::string(); }, times);
    aggregator_->Add(batch, times);

    EmittedRows rows;
    switch (mode_) {
      case OutputMode::kUpdate:
        aggregator_->EmitUpdated(rows);
        break;
      case OutputMode::kComplete:
        aggregator_->EmitAll(rows);
        break;
      case OutputMode::kAppend:
        aggregator_->EmitClosed(watermark_us_, rows);
        break;
    }
    BatchResult result;
    for (const std::string& row : rows.rows) result.rows.push_back(Compact(row));
    result.dropped = aggregator_->TakeRowsDroppedByWatermark();
    result.without_event_time = aggregator_->TakeRowsWithoutEventTime();
    StatePuts puts;
    std::vector<std::string> deletes;
    aggregator_->EndBatch(watermark_us_, mode_ != OutputMode::kComplete, puts, deletes);
    result.deletes = static_cast<int64_t>(deletes.size());
    for (auto& [key, value] : puts) state_[key] = value;
    for (const std::string& key : deletes) state_.erase(key);
    clock_.CommitBatch();
    if (query_.watermark) watermark_us_ = clock_.watermark_us();
    result.watermark_after_us = watermark_us_;
    return result;
  }

  /// Starts over as a restarted executor would: a new Aggregator restored from `state` (as
  /// EndBatch reported it) and the watermark of the last commit.
  void Restart(const std::map<std::string, std::string>& state, int64_t watermark_us) {
    auto created = Aggregator::Create(query_, schema_);
    REQUIRE(created);
    aggregator_ = std::move(*created);
    for (const auto& [key, value] : state) {
      REQUIRE(Aggregator::OwnsKey(key));
      REQUIRE(aggregator_->Restore(key, value));
    }
    state_ = state;
    watermark_us_ = watermark_us;
    // The commit record keeps the clock's per-partition maximum with the watermark.
    const auto max_event = clock_.MaxEventTimes();
    clock_ = EventClock(ClockOptionsFor(query_, schema_));
    clock_.Restore(max_event, watermark_us);
  }

  Aggregator& aggregator() { return *aggregator_; }
  int64_t watermark_us() const { return watermark_us_; }
  /// The state as the checkpoint would hold it after the batches so far.
  const std::map<std::string, std::string>& state() const { return state_; }

 private:
  QuerySpec query_;
  Schema schema_;
  OutputMode mode_;
  JsonDecoder decoder_;
  EventClock clock_;
  std::unique_ptr<Aggregator> aggregator_;
  int64_t watermark_us_ = INT64_MIN;
  std::map<std::string, std::string> state_;
};

/// Seconds after kT0 as a watermark in microseconds.
inline int64_t AtSeconds(double seconds) {
  return kT0Us + static_cast<int64_t>(std::llround(seconds * 1e6));
}

using Rows = std::vector<std::string>;

}  // namespace driftd::testing
