// The labels and performance sections of a pipeline file: delayed ground truth joined to
// predictions, and the model-quality metrics over it (PipelineParser, config/loader_parser.h).
#include "config/loader_parser.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace driftd::loader_detail {

// `labels` (an input of ground truth with its own schema, joined to the predictions by a key)
// and `performance` (what is judged of the joined predictions).
void PipelineParser::ParseLabels(const MapReader& top) {
  const MapReader::Entry* entry = top.Find("labels");
  const MapReader::Entry* performance_entry = top.Find("performance");
  if (entry == nullptr) {
    if (performance_entry != nullptr) {
      problems_.Error("performance", performance_entry->key_mark,
                      "performance is judged from labels: add a labels section (an input of "
                      "ground truth joined to the predictions by a key)");
    }
    return;
  }
  MapReader labels(reader_, entry->value, "labels", entry->key_mark,
                   std::vector<std::string_view>{"source", "schema", "key", "predictionKey",
                                                 "label", "eventTime", "within"},
                   " with source, schema, key, predictionKey, label, eventTime and within");
  if (!labels.valid()) return;
  LabelsSpec& spec = spec_.labels;
  spec.enabled = true;
  spec.mark = entry->key_mark;
  if (const MapReader::Entry* source_entry = labels.Find("source")) {
    MapReader source(reader_, source_entry->value, "labels.source", source_entry->key_mark,
                     std::vector<std::string_view>{"format", "options", "malformed",
                                                   "valueFormat", "valueOptions"},
                     " with format, options, malformed, valueFormat and valueOptions");
    spec.source.mark = source_entry->key_mark;
    if (source.valid()) ParseSourceFields(source, "labels.source", spec.source, false);
  } else {
    labels.ReportMissing("source", " (e.g. source: {format: kafka, options: {...}})");
  }
  // The labels' own schema: top-level scalar fields.
  std::map<std::string, FieldType> types;
  if (const MapReader::Entry* schema_entry = labels.Find("schema")) {
    auto items = reader_.ReadList(schema_entry->value, "labels.schema",
                                  " of fields, e.g. - {name: request_id, type: string}");
    for (size_t i = 0; items && i < items->size(); ++i) {
      const std::string path = fmt::format("labels.schema[{}]", i);
      MapReader field(reader_, (*items)[i], path, {},
                      std::vector<std::string_view>{"name", "type", "nullable"},
                      " with name, type and nullable");
      if (!field.valid()) continue;
      auto name = field.String("name", true);
      auto type_text = field.String("type", true);
      auto nullable = field.Bool("nullable");
      if (!name || !type_text) continue;
      auto parsed = ParseTypeSpec(type_text->value);
      if (!parsed || parsed->is_struct || !(parsed->type == FieldType::kString ||
                                            parsed->type == FieldType::kDouble ||
                                            parsed->type == FieldType::kLong ||
                                            parsed->type == FieldType::kInt ||
                                            parsed->type == FieldType::kBoolean ||
                                            parsed->type == FieldType::kTimestamp)) {
        problems_.Error(type_text->path, type_text->mark,
                        fmt::format("a labels field is a timestamp, string, double, long, int "
                                    "or boolean, not {}",
                                    Show(*type_text)));
        continue;
      }
      if (!types.emplace(name->value, parsed->type).second) {
        problems_.Error(name->path, name->mark,
                        fmt::format("duplicate field {}", Show(*name)));
        continue;
      }
      spec.schema.fields.emplace_back(name->value, parsed->type, nullable.value_or(true));
    }
  } else {
    labels.ReportMissing("schema", " (e.g. - {name: request_id, type: string})");
  }
  auto column_of = [&](std::string_view key, bool required,
                       const std::vector<FieldType>& allowed,
                       const char* what) -> std::optional<std::string> {
    auto value = labels.String(key, required);
    if (!value) return std::nullopt;
    auto it = types.find(value->value);
    if (it == types.end()) {
      problems_.Error(value->path, value->mark,
                      fmt::format("{} {} is not a field of labels.schema", what, Show(*value)));
      return std::nullopt;
    }
    if (std::find(allowed.begin(), allowed.end(), it->second) == allowed.end()) {
      problems_.Error(value->path, value->mark,
                      fmt::format("{} {} is a {}", what, Show(*value),
                                  FieldTypeName(it->second)));
      return std::nullopt;
    }
    return value->value;
  };
  if (auto key = column_of("key", true, {FieldType::kString}, "the join key")) {
    spec.key = *key;
    spec.prediction_key = *key;
  }
  if (auto key = labels.String("predictionKey")) spec.prediction_key = key->value;
  if (!spec.prediction_key.empty()) {
    auto it = columns_.find(spec.prediction_key);
    if (it == columns_.end() || (it->second && *it->second != FieldType::kString)) {
      problems_.Error(labels.Has("predictionKey") ? "labels.predictionKey" : "labels.key",
                      labels.MarkOf(labels.Has("predictionKey") ? "predictionKey" : "key"),
                      fmt::format("the predictions' join key '{}' is not a string column of "
                                  "the schema",
                                  spec.prediction_key));
    }
  }
  if (auto label = column_of("label", true,
                             {FieldType::kDouble, FieldType::kLong, FieldType::kInt,
                              FieldType::kBoolean},
                             "the label column")) {
    spec.label = *label;
  }
  if (labels.Has("eventTime")) {
    if (auto time = column_of("eventTime", true, {FieldType::kTimestamp}, "eventTime")) {
      spec.event_time = *time;
    }
  } else {
    for (const Field& field : spec.schema.fields) {
      if (field.type == FieldType::kTimestamp) {
        spec.event_time = field.name;
        break;
      }
    }
    if (spec.event_time.empty() && !spec.schema.fields.empty()) {
      problems_.Error("labels.schema", labels.MarkOf("schema"),
                      "the labels need an event time: a timestamp field (or name one with "
                      "eventTime)");
    }
  }
  if (auto within = labels.DurationMs("within", 1)) spec.within_ms = *within;
  ParsePerformance(performance_entry);
}

void PipelineParser::ParsePerformance(const MapReader::Entry* entry) {
  PerformanceSpec& spec = spec_.performance;
  if (entry != nullptr) {
    MapReader performance(reader_, entry->value, "performance", entry->key_mark,
                          std::vector<std::string_view>{"task", "prediction", "threshold",
                                                        "window", "minCoverage",
                                                        "baselineWindows", "minDrop", "warn",
                                                        "alert", "bins"},
                          " with task, prediction, threshold, window, minCoverage, "
                          "baselineWindows, minDrop, warn, alert and bins");
    if (!performance.valid()) return;
    if (auto task = performance.Choice("task", {"classification", "regression"})) {
      spec.task = *task == "regression" ? PerformanceTask::kRegression
                                        : PerformanceTask::kClassification;
    }
    if (auto column = performance.String("prediction")) {
      auto it = columns_.find(column->value);
      if (it == columns_.end()) {
        problems_.Error(column->path, column->mark,
                        fmt::format("prediction column {} is not a column of the schema",
                                    Show(*column)));
      } else if (it->second && *it->second != FieldType::kDouble &&
                 *it->second != FieldType::kLong && *it->second != FieldType::kInt) {
        problems_.Error(column->path, column->mark,
                        fmt::format("prediction column {} is a {}, not a number", Show(*column),
                                    FieldTypeName(*it->second)));
      }
      spec.prediction = column->value;
    }
    auto bounded = [&](std::string_view key, double low, double high) -> std::optional<double> {
      auto value = performance.Double(key);
      if (value && !(*value >= low && *value <= high)) {
        problems_.Error(performance.PathOf(key), performance.MarkOf(key),
                        fmt::format("{} must be in [{}, {}]", key, low, high));
        return std::nullopt;
      }
      return value;
    };
    if (auto threshold = bounded("threshold", 0, 1)) spec.threshold = *threshold;
    if (auto window = performance.DurationMs("window", 1)) spec.window_ms = *window;
    if (auto coverage = bounded("minCoverage", 0, 1)) spec.min_coverage = *coverage;
    if (auto windows = performance.Int("baselineWindows", 1, 1000)) {
      spec.baseline_windows = static_cast<int>(*windows);
    }
    if (auto drop = bounded("minDrop", 0, 1e9)) spec.min_drop = *drop;
    if (auto warn = bounded("warn", 0, 37)) spec.warn = *warn;
    if (auto alert = bounded("alert", 0, 37)) spec.alert = *alert;
    if (auto bins = performance.Int("bins", 2, 1000)) spec.bins = static_cast<int>(*bins);
    if (spec.alert < spec.warn) {
      problems_.Error("performance.alert", performance.MarkOf("alert"),
                      "the alert level must not be below the warn level");
    }
  }
  if (spec.prediction.empty()) {
    spec.prediction = !spec_.drift.prediction_column.empty() ? spec_.drift.prediction_column
                                                              : std::string("prediction");
    if (!columns_.count(spec.prediction)) {
      problems_.Error(entry ? "performance" : "labels",
                      entry ? entry->key_mark : spec_.labels.mark,
                      fmt::format("no prediction column: name it with performance.prediction "
                                  "(the schema has no '{}')",
                                  spec.prediction));
    }
  }
}

// What labels need of the rest of the pipeline.
void PipelineParser::CheckLabels() {
  if (!spec_.labels.enabled) return;
  if (!spec_.query.watermark) {
    problems_.Error("labels", spec_.labels.mark,
                    "labels need query.watermark: the event-time clock bounds how long a "
                    "prediction waits for its label (labels.within) and says when a window's "
                    "labels are in");
  }
  const bool has_model = spec_.drift.enabled ? !spec_.drift.model_column.empty() ||
                                                   !spec_.query.group_by.empty()
                                             : !spec_.query.group_by.empty();
  if (!has_model) {
    problems_.Error("labels", spec_.labels.mark,
                    "labels judge each model's performance: the query needs groupBy (the "
                    "model column first) or drift.modelColumn");
  }
}

}  // namespace driftd::loader_detail
