#include "engine/executor/progress.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "engine/json_writer.h"

namespace driftd {

namespace {

// Splits Kafka's "<topic>-<partition>" position names.
bool SplitTopicPartition(const std::string& name, std::string& topic, int64_t& partition) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 >= name.size()) return false;
  const char* begin = name.data() + dash + 1;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(begin, end, partition);
  if (ec != std::errc() || ptr != end || partition < 0) return false;
  topic = name.substr(0, dash);
  return true;
}

// Positions as Spark renders them: for Kafka nested by topic then partition
// ({"logs":{"0":17,"1":12}}, the form startingOffsets takes), else flat by name.
std::string PositionsJson(const std::vector<std::pair<std::string, int64_t>>& positions,
                          bool kafka) {
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> topics;
  std::vector<std::pair<std::string, int64_t>> flat;
  for (const auto& [name, value] : positions) {
    std::string topic;
    int64_t partition = 0;
    if (kafka && SplitTopicPartition(name, topic, partition)) {
      topics[topic].emplace_back(partition, value);
    } else {
      flat.emplace_back(name, value);
    }
  }
  std::string out = "{";
  bool first = true;
  for (auto& [topic, partitions] : topics) {
    std::sort(partitions.begin(), partitions.end());
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, topic);
    out += ":{";
    for (size_t i = 0; i < partitions.size(); ++i) {
      if (i > 0) out.push_back(',');
      AppendJsonString(out, std::to_string(partitions[i].first));
      out.push_back(':');
      out += std::to_string(partitions[i].second);
    }
    out.push_back('}');
  }
  for (const auto& [name, value] : flat) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, name);
    out.push_back(':');
    out += std::to_string(value);
  }
  out.push_back('}');
  return out;
}

std::string OffsetsJson(const SourceOffsets& offsets, bool kafka) {
  return PositionsJson({offsets.begin(), offsets.end()}, kafka);
}

}  // namespace

std::string RenderProgress(const PipelineSpec& spec, const ProgressRecord& p) {
  std::string out;
  const bool kafka = spec.source.format == "kafka";
  JsonObject root(out);
  if (!p.id.empty()) root.String("id", p.id);
  if (!p.run_id.empty()) root.String("runId", p.run_id);
  root.String("name", spec.name);
  root.Timestamp("timestamp", p.timestamp_ms * 1000);
  root.Int("batchId", p.batch_id);
  root.Int("batchDuration", p.trigger_execution_ms);
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

  if (spec.query.watermark || spec.query.window) {
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
  op.Int("numKeysWritten", p.state_keys_written);
  op.Int("bytesWritten", p.state_bytes_written);
  op.Int("bytesChanged", p.state_dirty_bytes);
  op.Int("numKeysDeleted", p.state_keys_deleted);
  op.Close();
  root.Raw("stateOperators", "[" + state + "]");

  std::string source;
  JsonObject src(source);
  src.String("description", p.source_description);
  src.Raw("startOffset", OffsetsJson(p.start_offsets, kafka));
  src.Raw("endOffset", OffsetsJson(p.end_offsets, kafka));
  std::vector<std::pair<std::string, int64_t>> latest;
  std::vector<std::pair<std::string, int64_t>> lag_records;
  std::vector<std::pair<std::string, int64_t>> lag_bytes;
  for (const PartitionLag& lag : p.lag) {
    latest.emplace_back(lag.partition, lag.latest);
    (lag.bytes ? lag_bytes : lag_records).emplace_back(lag.partition, lag.lag());
  }
  if (kafka && !latest.empty()) src.Raw("latestOffset", PositionsJson(latest, kafka));
  src.Int("numInputRows", p.num_input_rows);
  src.Number("inputRowsPerSecond", p.input_rows_per_second);
  src.Number("processedRowsPerSecond", p.processed_rows_per_second);
  if (p.lost_records > 0) src.Int("numLostRecords", p.lost_records);
  // Records available but not read yet; the file source counts bytes ("lagBytes").
  if (!lag_records.empty()) src.Raw("lag", PositionsJson(lag_records, kafka));
  if (!lag_bytes.empty()) src.Raw("lagBytes", PositionsJson(lag_bytes, false));
  src.Close();
  root.Raw("sources", "[" + source + "]");

  if (spec.scale_out.enabled) {
    std::string scale;
    JsonObject group(scale);
    group.String("instance", spec.scale_out.instance);
    group.Int("tasks", p.scale_out_tasks);
    group.Int("restoredTasks", p.restored_tasks);
    group.Int("restoreMs", p.restore_ms);
    group.Int("abortedBatches", p.aborted_batches);
    group.Close();
    root.Raw("scaleOut", scale);
  }
  if (p.drift_dirty_series > 0) {
    // What the drift state's changes encode to, beside stateOperators' bytesWritten.
    root.Int("driftDirtySeries", p.drift_dirty_series);
    root.Int("driftDirtyBytes", p.drift_dirty_bytes);
    root.Int("driftBytesWritten", p.drift_put_bytes);
  }
  if (p.drift_values_over_key_cap > 0 || p.drift_rows_over_segment_cap > 0) {
    // What drift left out of the batch: its caps on map keys and segments per model.
    root.Int("driftValuesOverKeyCap", p.drift_values_over_key_cap);
    root.Int("driftRowsOverSegmentCap", p.drift_rows_over_segment_cap);
  }
    if (p.models_across_partitions > 0) {
    // Record-count drift windows of these models depend on read order (drift_stage.h).
    root.Int("driftModelsAcrossPartitions", p.models_across_partitions);
  }

  if (!spec.query.where.empty()) {
    // Spark reports a filter's rows in its plan's metrics; here next to the input it came from.
    std::string filter;
    JsonObject where(filter);
    where.Int("numRowsFiltered", p.filtered_rows);
    where.Close();
    root.Raw("filter", filter);
  }

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
