// Aggregators that hold disjoint groups (the shards the executor folds on several threads) emit
// exactly what one aggregator holding every group emits: rows, order, columns and state.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/aggregation.h"
#include "engine/executor/event_clock.h"
#include "engine/json_decoder.h"
#include "tests/engine/aggregation_test_util.h"

namespace driftd::testing {
namespace {

struct Emitted {
  std::vector<std::string> update, complete, append;
  std::vector<std::string> update_columns, complete_columns, append_columns;
  std::map<std::string, std::string> puts;
  std::set<std::string> deletes;
  int64_t dropped = 0;
  size_t groups = 0;
  size_t open_windows = 0;
};

Emitted EndBatch(std::span<Aggregator* const> parts, int64_t watermark_us, bool evict) {
  std::vector<const Aggregator*> read(parts.begin(), parts.end());
  Emitted out;
  EmittedRows rows;
  Aggregator::EmitUpdated(read, rows);
  out.update = rows.rows;
  out.update_columns = rows.columns;
  rows = {};
  Aggregator::EmitAll(read, rows);
  out.complete = rows.rows;
  out.complete_columns = rows.columns;
  rows = {};
  Aggregator::EmitClosed(read, watermark_us, rows);
  out.append = rows.rows;
  out.append_columns = rows.columns;
  for (Aggregator* part : parts) {
    out.dropped += part->TakeRowsDroppedByWatermark();
    StatePuts puts;
    std::vector<std::string> deletes;
    part->EndBatch(watermark_us, evict, puts, deletes);
    for (auto& [key, value] : puts) out.puts.emplace(key, value);
    out.deletes.insert(deletes.begin(), deletes.end());
    out.groups += part->num_groups();
    out.open_windows += part->num_open_windows();
  }
  return out;
}

TEST_CASE("aggregators of disjoint groups emit what one aggregator of every group emits",
          "[aggregation][shards]") {
  for (const bool windowed : {false, true}) {
    DYNAMIC_SECTION((windowed ? "sliding windows" : "no window")) {
      QuerySpec query = windowed ? TestQuery(10, 5, 2) : TestQuery(0, 0, -1);
      AggregateSpec mean;
      mean.fn = AggregateFn::kMean;
      mean.column = "value";
      mean.output_name = "mean(value)";
      query.aggregates.push_back(mean);
      const Schema schema = TestSchema();
      auto whole = Aggregator::Create(query, schema);
      REQUIRE(whole);
      std::vector<std::unique_ptr<Aggregator>> shards;
      for (int i = 0; i < 3; ++i) {
        auto shard = Aggregator::Create(query, schema);
        REQUIRE(shard);
        shards.push_back(std::move(*shard));
      }
      std::vector<Aggregator*> shard_parts;
      for (auto& shard : shards) shard_parts.push_back(shard.get());
      Aggregator* whole_part = whole->get();

      JsonDecoder decoder(schema, MalformedSpec{});
      EventClock clock(Driver::ClockOptionsFor(query, schema));
      std::mt19937 random(20261202);
      std::uniform_real_distribution<double> jitter(-3.0, 0.5);
      std::normal_distribution<double> value(0.0, 1.0);
      int64_t watermark_us = INT64_MIN;
      size_t appended = 0;
      double t = 0;
      for (int batch = 0; batch < 25; ++batch) {
        std::vector<std::string> lines;
        for (int i = 0; i < 400; ++i, t += 0.01) {
          const int model = static_cast<int>(random() % 11);
          lines.push_back(Row(fmt::format("m{}", model), t + jitter(random), value(random)));
        }
        InputChunk chunk;
        for (size_t i = 0; i < lines.size(); ++i) {
          chunk.Append(lines[i], RecordPosition{0, static_cast<int64_t>(i)});
        }
        chunk.Seal();
        RecordBatch records;
        records.Reset(schema);
        REQUIRE(decoder.Decode(chunk, records, nullptr));
        clock.BeginBatch({PartitionActivity{"", false, true}}, 0);
        RowTimes times;
        clock.Stamp(records, [](uint32_t) { return std::string(); }, times);
        whole_part->Add(records, times);
        // The rows of models 0, 3, 6, 9 to shard 0, and so on.
        std::vector<std::vector<uint32_t>> rows(3);
        for (size_t row = 0; row < records.num_rows; ++row) {
          const int model = std::stoi(std::string(records.columns[0].String(row).substr(1)));
          rows[static_cast<size_t>(model % 3)].push_back(static_cast<uint32_t>(row));
        }
        for (size_t s = 0; s < 3; ++s) shards[s]->AddRows(records, times, rows[s]);

        const Emitted one = EndBatch(std::span<Aggregator* const>(&whole_part, 1),
                                     watermark_us, true);
        const Emitted many = EndBatch(shard_parts, watermark_us, true);
        INFO("batch " << batch);
        REQUIRE(!one.update.empty());
        CHECK(many.update == one.update);
        CHECK(many.complete == one.complete);
        CHECK(many.append == one.append);
        CHECK(many.update_columns == one.update_columns);
        CHECK(many.complete_columns == one.complete_columns);
        CHECK(many.append_columns == one.append_columns);
        CHECK(many.puts == one.puts);
        CHECK(many.deletes == one.deletes);
        CHECK(many.dropped == one.dropped);
        CHECK(many.groups == one.groups);
        CHECK(many.open_windows == one.open_windows);
        appended += one.append.size();
        clock.CommitBatch();
        if (query.watermark) watermark_us = clock.watermark_us();
      }
      CHECK((appended > 0) == windowed);
    }
  }
}

}  // namespace
}  // namespace driftd::testing
