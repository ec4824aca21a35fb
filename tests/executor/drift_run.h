// A drift stage run batch by batch in a test, its state kept as the checkpoint would keep it,
// and restarted from that state.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/loader.h"
#include "engine/executor/drift_stage.h"
#include "engine/json_decoder.h"

namespace driftd::testing {

/// `time_column`: the schema's index of the event time, which every record has.
struct DriftRun {
  DriftRun(const PipelineSpec& pipeline, size_t time_column_index)
      : spec(pipeline), time_column(time_column_index) {
    auto created = DriftStage::Create(spec);
    REQUIRE(created);
    stage = std::move(*created);
  }

  void Feed(const std::vector<std::string>& records, size_t begin, size_t end) {
    JsonDecoder decoder(spec.schema, MalformedSpec{});
    InputChunk chunk;
    for (size_t i = begin; i < end; ++i) chunk.Append(records[i], {0, static_cast<int64_t>(i)});
    chunk.Seal();
    RecordBatch batch;
    batch.Reset(spec.schema);
    REQUIRE(decoder.Decode(chunk, batch, nullptr));
    RowTimes times;
    for (size_t row = 0; row < batch.num_rows; ++row) {
      times.event_us.push_back(batch.columns[time_column].i64[row]);
      times.late_before.push_back(INT64_MIN);
    }
    BatchOutput output;
    stage->Process(batch, times, output);
    BatchContext context;
    context.batch_id = batch_id++;
    context.now_ms = now_ms;
    StateChanges changes;
    StageProgress progress;
    stage->Finish(context, output, changes, progress);
    for (const std::string& row : output.alerts.rows) alerts.push_back(row);
    Apply(changes);
  }

  /// A clean stop: what the stage kept back from its batches (Stage::FlushKept).
  void Stop() {
    StateChanges changes;
    stage->FlushKept(now_ms, changes);
    Apply(changes);
  }

  void Apply(StateChanges& changes) {
    last_puts.clear();
    last_put_bytes.clear();
    for (auto& [key, value] : changes.puts) {
      last_puts.push_back(key);
      last_put_bytes[key] = reinterpret_cast<uintptr_t>(value.data());
      state[key] = value;
    }
    for (const std::string& key : changes.deletes) state.erase(key);
  }

  void FeedAll(const std::vector<std::string>& records, size_t batch_size, size_t begin = 0,
               size_t end = SIZE_MAX) {
    end = std::min(end, records.size());
    for (size_t at = begin; at < end; at += batch_size) {
      Feed(records, at, std::min(end, at + batch_size));
    }
  }

  std::unique_ptr<DriftRun> Restarted() const {
    auto next = std::make_unique<DriftRun>(spec, time_column);
    auto layout = state.find("drift-layout");
    REQUIRE(layout != state.end());
    REQUIRE(next->stage->Restore(layout->first, layout->second));
    for (const auto& [key, value] : state) {
      if (key != "drift-layout") REQUIRE(next->stage->Restore(key, value));
    }
    REQUIRE(next->stage->FinishRestore());
    next->batch_id = batch_id;
    next->now_ms = now_ms;
    next->state = state;
    return next;
  }

  PipelineSpec spec;
  size_t time_column;
  std::unique_ptr<DriftStage> stage;
  std::vector<std::string> alerts;
  std::map<std::string, std::string> state;
  /// Keys the last batch (or Stop) put, and where each put's bytes were.
  std::vector<std::string> last_puts;
  std::map<std::string, uintptr_t> last_put_bytes;
  int64_t batch_id = 0;
  /// The processing time batches run at (Unix epoch milliseconds).
  int64_t now_ms = 1'700'000'000'000;
};

}  // namespace driftd::testing
