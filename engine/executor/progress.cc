#include "engine/executor/progress.h"

#include "engine/json_writer.h"

namespace driftd {

std::string RenderProgress(const PipelineSpec& spec, const ProgressRecord& p) {
  std::string out;
  JsonObject root(out);
  root.String("name", spec.name);
  root.Timestamp("timestamp", p.timestamp_ms * 1000);
  root.Int("batchId", p.batch_id);
  root.Int("numInputRows", p.num_input_rows);
  root.Number("inputRowsPerSecond", p.input_rows_per_second);
  root.Number("processedRowsPerSecond", p.processed_rows_per_second);

  std::string durations;
  JsonObject duration(durations);
  duration.Int("latestOffset", p.latest_offset_ms);
  duration.Int("addBatch", p.add_batch_ms);
  duration.Int("walCommit", p.wal_commit_ms);
  duration.Int("delivery", p.delivery_ms);
  duration.Int("triggerExecution", p.trigger_execution_ms);
  duration.Close();
  root.Raw("durationMs", durations);

  if (spec.query.watermark) {
    std::string event_time;
    JsonObject times(event_time);
    if (p.max_event_time_us != INT64_MIN) times.Timestamp("max", p.max_event_time_us);
    if (p.watermark_us != INT64_MIN) times.Timestamp("watermark", p.watermark_us);
    times.Close();
    root.Raw("eventTime", event_time);
  }

  std::string state;
  JsonObject op(state);
  op.Int("numRowsTotal", p.num_groups);
  op.Int("numRowsUpdated", p.rows_updated);
  op.Int("numRowsDroppedByWatermark", p.dropped_by_watermark);
  if (spec.query.window) {
    op.Int("numRowsWithoutEventTime", p.without_event_time);
    op.Int("numOpenWindows", p.num_open_windows);
  }
  op.Int("stateKeys", p.state.keys);
  op.Int("memoryUsedBytes", p.state.bytes);
  op.Close();
  root.Raw("stateOperators", "[" + state + "]");

  std::string source;
  JsonObject src(source);
  src.String("description", p.source_description);
  src.Raw("startOffset", OffsetsToJson(p.start_offsets));
  src.Raw("endOffset", OffsetsToJson(p.end_offsets));
  src.Int("numInputRows", p.num_input_rows);
  src.Number("inputRowsPerSecond", p.input_rows_per_second);
  src.Number("processedRowsPerSecond", p.processed_rows_per_second);
  if (p.lost_records > 0) src.Int("numLostRecords", p.lost_records);
  if (!p.lag.empty()) {
    std::string lag = "{";
    for (size_t i = 0; i < p.lag.size(); ++i) {
      if (i > 0) lag.push_back(',');
      AppendJsonString(lag, p.lag[i].partition);
      lag.push_back(':');
      AppendJsonNumber(lag, p.lag[i].lag());
    }
    lag.push_back('}');
    src.Raw("lag", lag);
  }
  src.Close();
  root.Raw("sources", "[" + source + "]");

  std::string malformed;
  JsonObject bad(malformed);
  bad.Int("numRows", p.malformed_in_batch);
  bad.Int("total", p.malformed.total());
  std::string reasons;
  JsonObject by_reason(reasons);
  for (size_t i = 0; i < kMalformedReasonCount; ++i) {
    if (p.malformed.by_reason[i] > 0) {
      by_reason.Int(ToString(static_cast<MalformedReason>(i)), p.malformed.by_reason[i]);
    }
  }
  by_reason.Close();
  bad.Raw("byReason", reasons);
  bad.Close();
  root.Raw("malformed", malformed);

  std::string sink;
  JsonObject snk(sink);
  snk.Int("numOutputRows", p.num_output_rows);
  snk.Int("numAlerts", p.num_alerts);
  snk.Close();
  root.Raw("sink", sink);
  root.Close();
  return out;
}

}  // namespace driftd
