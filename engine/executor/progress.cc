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

  // One entry per input, as Spark's `sources`: each input's offsets and lag are the keys with
  // its prefix (the first input's have none).
  std::vector<SourceSummary> summaries = p.sources;
  if (summaries.empty()) summaries.push_back({"", "", p.source_description});
  auto owner = [&](const std::string& key) -> size_t {
    for (size_t i = 1; i < summaries.size(); ++i) {
      if (key.starts_with(summaries[i].prefix)) return i;
    }
    return 0;
  };
  std::string sources;
  for (size_t i = 0; i < summaries.size(); ++i) {
    const SourceSummary& summary = summaries[i];
    const SourceSpec& input =
        i == 0 || i > spec.inputs.size() ? spec.source : spec.inputs[i - 1].source;
    const bool kafka = input.traits.topic_partitions;
    auto strip = [&](const std::string& key) { return key.substr(summary.prefix.size()); };
    SourceOffsets start;
    SourceOffsets end;
    for (const auto& [key, offset] : p.start_offsets) {
      if (owner(key) == i) start[strip(key)] = offset;
    }
    for (const auto& [key, offset] : p.end_offsets) {
      if (owner(key) == i) end[strip(key)] = offset;
    }
    std::string source;
    JsonObject src(source);
    if (summaries.size() > 1) src.String("name", summary.name);
    src.String("description", summary.description);
    src.Raw("startOffset", OffsetsJson(start, kafka));
    src.Raw("endOffset", OffsetsJson(end, kafka));
    std::vector<std::pair<std::string, int64_t>> latest;
    std::vector<std::pair<std::string, int64_t>> lag_records;
    std::vector<std::pair<std::string, int64_t>> lag_bytes;
    for (const PartitionLag& lag : p.lag) {
      if (owner(lag.partition) != i) continue;
      latest.emplace_back(strip(lag.partition), lag.latest);
      (lag.bytes ? lag_bytes : lag_records).emplace_back(strip(lag.partition), lag.lag());
    }
    if (kafka && !latest.empty()) src.Raw("latestOffset", PositionsJson(latest, kafka));
    const int64_t rows = summaries.size() == 1 || i >= p.input_rows_by_input.size()
                             ? p.num_input_rows
                             : p.input_rows_by_input[i];
    const double share = p.num_input_rows > 0 ? static_cast<double>(rows) /
                                                    static_cast<double>(p.num_input_rows)
                                              : 0;
    src.Int("numInputRows", rows);
    src.Number("inputRowsPerSecond", p.input_rows_per_second * share);
    src.Number("processedRowsPerSecond", p.processed_rows_per_second * share);
    if (p.lost_records > 0 && i == 0) src.Int("numLostRecords", p.lost_records);
    // Records available but not read yet; the file source counts bytes ("lagBytes").
    if (!lag_records.empty()) src.Raw("lag", PositionsJson(lag_records, kafka));
    if (!lag_bytes.empty()) src.Raw("lagBytes", PositionsJson(lag_bytes, false));
    src.Close();
    if (!sources.empty()) sources += ",";
    sources += source;
  }
  root.Raw("sources", "[" + sources + "]");

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
  if (p.max_models > 0) {
    // The cap on models (query.maxModels) and the rows of models over it in this batch.
    std::string models;
    JsonObject cap(models);
    cap.Int("numModels", p.models);
    cap.Int("maxModels", p.max_models);
    cap.Int("rowsOverCap", p.rows_over_model_cap);
    cap.Close();
    root.Raw("models", models);
  }
  if (p.order_buffered >= 0) {
    // Drift's values waiting for every partition to pass them (event-time order).
    root.Int("driftValuesWaiting", p.order_buffered);
  }
  if (spec.labels.enabled) {
    // The join of labels to predictions: what the batch decided, and what waits.
    std::string labels;
    JsonObject join(labels);
    join.Int("pending", p.join.pending);
    join.Int("labelled", p.join.labelled);
    join.Int("unlabelled", p.join.unlabelled);
    join.Int("labelsWithoutPrediction", p.join.labels_without_prediction);
    join.Int("labelsOutsideBound", p.join.labels_outside_bound);
    join.Int("labelsLate", p.join.labels_late);
    join.Int("duplicateLabels", p.join.duplicate_labels);
    join.Int("duplicatePredictions", p.join.duplicate_predictions);
    join.Int("predictionsLate", p.join.predictions_late);
    join.Int("withoutKey", p.join.without_key);
    join.Int("predictionsOverModelCap", p.join.predictions_over_model_cap);
    join.Int("rowsOverKeyCap", p.join.rows_over_key_cap);
    join.Close();
    root.Raw("labels", labels);
  }
  if (p.rows_over_sink_limit > 0) {
    // Rows a sink could not take (a record over the topic's size limit), set aside.
    root.Int("rowsOverSinkLimit", p.rows_over_sink_limit);
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
