// The drift section of a pipeline file: series, segments, baselines (and a file baseline's
// reference), detectors and their overrides (PipelineParser, config/loader_parser.h).
#include "config/loader_parser.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "config/detectors.h"
#include "config/suggest.h"
#include "engine/drift/detectors.h"
#include "engine/drift/monitor.h"

namespace driftd::loader_detail {

namespace {

/// A file baseline's reference is read whole: reference statistics are a few KB per model, and
/// reference records beyond this are better given as statistics (`driftd baseline build`).
constexpr size_t kMaxReferenceBytes = 256u << 20;

/// The reference file of a file baseline, read in bounded time and memory: not a FIFO or device
/// (opening one may block, reading it need not end), and no larger than kMaxReferenceBytes.
Result<std::string> ReadReferenceFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return MakeError(ErrorCode::kConfig, "cannot read the file: not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
  std::string text;
  if (!ReadUpTo(in, kMaxReferenceBytes, text)) {
    return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
  }
  if (text.size() > kMaxReferenceBytes) {
    return MakeError(ErrorCode::kConfig,
                     "the file is larger than {} bytes; give reference statistics (a few KB "
                     "per model) rather than that many reference records",
                     kMaxReferenceBytes);
  }
  return text;
}

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

const std::vector<std::pair<std::string_view, BaselineKind>> kBaselines = {
    {"warmup", BaselineKind::kWarmup},
    {"file", BaselineKind::kFile},
    {"trailing", BaselineKind::kTrailing},
    {"seasonal", BaselineKind::kSeasonal},
};

// Column names that say "this is the model's prediction" or "this is the ground truth": with
// one of each in the schema, drift watches the error rate without being told.
const std::vector<std::string_view> kPredictionNames = {"prediction", "predicted", "y_pred",
                                                        "score"};
const std::vector<std::string_view> kLabelNames = {"label", "ground_truth", "target", "actual",
                                                   "y_true"};

}  // namespace

void PipelineParser::ParseDrift(const MapReader& top) {
  const MapReader::Entry* entry = top.Find("drift");
  if (entry == nullptr || entry->value.IsNull()) return;
  MapReader drift(reader_, entry->value, "drift", entry->key_mark,
                  std::vector<std::string_view>{"series", "baseline", "detectors", "minSamples",
                                                "windowRecords", "window", "hysteresis",
                                                "cooldown",
                                                "modelAlertSeries", "modelColumn",
                                                "predictionColumn", "labelColumn", "overrides",
                                                "resolveEvidence", "segmentBy",
                                                "maxSegmentsPerModel", "maxKeysPerModel",
                                                "maxKeys", "multivariate"},
                  " with series, baseline, detectors, ...");
  if (!drift.valid()) return;
  DriftSpec& spec = spec_.drift;
  spec.enabled = true;
  spec.mark = entry->key_mark;

  // The model column: given, or the first groupBy column.
  if (auto model = drift.String("modelColumn")) {
    spec.model_column = model->value;
    if (CheckColumn(*model, ColumnUse::kGroupKey, "modelColumn") && group_by_ok_ &&
        std::find(spec_.query.group_by.begin(), spec_.query.group_by.end(), model->value) ==
            spec_.query.group_by.end()) {
      problems_.Error(
          model->path, model->mark,
          fmt::format("modelColumn {} must be one of the query's groupBy columns "
                      "({}): drift is tracked per group",
                      Show(*model),
                      spec_.query.group_by.empty()
                          ? std::string("none given")
                          : fmt::format("{}", fmt::join(spec_.query.group_by, ", "))));
    }
  } else if (!drift.Has("modelColumn")) {
    if (!spec_.query.group_by.empty()) {
      spec.model_column = spec_.query.group_by.front();
    } else if (group_by_ok_) {
      problems_.Error("drift", entry->key_mark,
                      "drift is tracked per model, but the query has no groupBy: add "
                      "query.groupBy (e.g. [model_id]); drift.modelColumn defaults to its "
                      "first column");
    }
  }

  const MapReader::Entry* series_entry = drift.Find("series");
  if (series_entry == nullptr || series_entry->value.IsNull()) {
    drift.ReportMissing("series",
                        " (the columns to watch, e.g. [feature_vector, prediction])");
  } else if (auto series = drift.StringList("series", ", e.g. [feature_vector, prediction]")) {
    if (series->empty()) {
      problems_.Error("drift.series", series_entry->key_mark,
                      "drift.series needs at least one column");
    }
    std::set<std::string> seen;
    for (const Scalar& column : *series) {
      if (!seen.insert(column.value).second) {
        problems_.Error(column.path, column.mark,
                        fmt::format("series {} is listed twice", Show(column)));
        continue;
      }
      // A struct watches each of its leaves: series: [features] for
      // features: struct<amount:double, device:string, ...>.
      if (const std::vector<std::string> leaves = StructLeaves(column.value); !leaves.empty()) {
        for (const std::string& leaf : leaves) {
          Scalar leaf_column = column;
          leaf_column.value = leaf;
          if (CheckColumn(leaf_column, ColumnUse::kSeries, "drift series")) {
            spec.series.push_back(leaf);
            drift_series_.push_back(leaf_column);
          }
        }
        continue;
      }
      if (!spec.model_column.empty() && column.value == spec.model_column) {
        problems_.Error(column.path, column.mark,
                        fmt::format("drift series {} is the model column: drift is watched "
                                    "per model, in which it never changes",
                                    Show(column)));
        continue;
      }
      if (CheckColumn(column, ColumnUse::kSeries, "drift series")) {
        drift_series_.push_back(column);
      }
      spec.series.push_back(column.value);
    }
  }
  ParseSegments(drift);

  if (auto column = drift.String("predictionColumn")) {
    CheckColumn(*column, ColumnUse::kLabel, "predictionColumn");
    spec.prediction_column = column->value;
  }
  if (auto column = drift.String("labelColumn")) {
    CheckColumn(*column, ColumnUse::kLabel, "labelColumn");
    spec.label_column = column->value;
  }
  DefaultLabelColumns(drift, entry->key_mark);
  if (auto value = drift.Double("resolveEvidence")) {
    if (*value < 1) {
      problems_.Error(drift.PathOf("resolveEvidence"), drift.MarkOf("resolveEvidence"),
                      fmt::format("resolveEvidence is a likelihood ratio, at least 1, found {}",
                                  *value));
    } else {
      spec.resolve_evidence = *value;
    }
  }
  if (auto value = drift.Int("minSamples", 1, kMaxInt)) spec.min_samples = *value;
  if (auto value = drift.Int("hysteresis", 1, 1'000'000)) {
    spec.hysteresis = static_cast<int>(*value);
  }
  if (auto value = drift.DurationMs("cooldown", 0)) spec.cooldown_ms = *value;
  if (auto value = drift.Int("windowRecords", 1, kMaxInt)) spec.window_records = *value;
  if (drift.Has("window")) {
    if (auto value = drift.DurationMs("window", 1)) spec.window_ms = *value;
    if (!spec_.query.watermark && !spec_.query.window) {
      problems_.Error(drift.PathOf("window"), drift.MarkOf("window"),
                      "drift.window evaluates event-time windows, which close by the query's "
                      "watermark: add query.watermark (the event-time column and its delay)");
    }
  }
  if (auto value = drift.Int("modelAlertSeries", 0, 1'000'000)) {
    spec.model_alert_series = static_cast<int>(*value);
  }
  // A window or baseline smaller than minSamples could never be evaluated: no alert, ever.
  if ((drift.Has("windowRecords") || drift.Has("minSamples")) &&
      spec.window_records < spec.min_samples) {
    const char* key = drift.Has("windowRecords") ? "windowRecords" : "minSamples";
    problems_.Error(drift.PathOf(key), drift.MarkOf(key),
                    fmt::format("windowRecords ({}) is below minSamples ({}): no window could "
                                "ever be evaluated",
                                spec.window_records, spec.min_samples));
  }

  // With an event-time window, drift compares each closed window; windows overlap when they
  // slide, so a value would count in several of them.
  if (const auto& window = spec_.query.window;
      window && window->slide_ms != 0 && window->slide_ms != window->size_ms) {
    problems_.Error("drift", entry->key_mark,
                    fmt::format("drift evaluates tumbling event-time windows, but query.window "
                                "(line {}) slides ({} ms every {} ms): make slide equal to "
                                "size, or drop the window to evaluate windows of "
                                "drift.windowRecords values",
                                window->mark.line, window->size_ms, window->slide_ms));
  }
  if ((spec_.query.window || spec.window_ms > 0) && drift.Has("windowRecords")) {
    problems_.Warn(drift.PathOf("windowRecords"), drift.MarkOf("windowRecords"),
                   fmt::format("windowRecords is ignored: with {} drift evaluates each "
                               "event-time window",
                               spec.window_ms > 0
                                   ? std::string("drift.window")
                                   : fmt::format("query.window (line {})",
                                                 spec_.query.window->mark.line)));
  }

  ParseBaseline(drift);
  ParseDetectors(drift);
  ParseOverrides(drift);
  ParseMultivariate(drift);
}

// drift.multivariate: a PCA's reconstruction error over each model's numeric features.
void PipelineParser::ParseMultivariate(const MapReader& drift) {
  const MapReader::Entry* entry = drift.Find("multivariate");
  if (entry == nullptr) return;
  MultivariateSpec& spec = spec_.drift.multivariate;
  spec.mark = entry->key_mark;
  // `multivariate: true` (every default) or `false` (off), as well as a map.
  if (entry->value.IsScalar() && (entry->value.Scalar() == "false" ||
                                  entry->value.Scalar() == "true")) {
    spec.enabled = entry->value.Scalar() == "true";
  } else {
    MapReader map(reader_, entry->value, "drift.multivariate", entry->key_mark,
                  std::vector<std::string_view>{"features", "records", "explainedVariance"},
                  ", e.g. {features: [amount, age_days], explainedVariance: 0.65}");
    if (!map.valid()) return;
    spec.enabled = true;
    if (auto features = map.StringList("features", ", e.g. [amount, age_days]")) {
      for (const Scalar& column : *features) {
        if (!CheckColumn(column, ColumnUse::kNumericLike, "multivariate feature")) continue;
        if (std::find(spec.features.begin(), spec.features.end(), column.value) !=
            spec.features.end()) {
          problems_.Error(column.path, column.mark,
                          fmt::format("feature {} is listed twice", Show(column)));
          continue;
        }
        spec.features.push_back(column.value);
      }
    }
    if (auto records = map.Int("records", 2, kMaxInt)) spec.records = *records;
    if (auto share = map.Double("explainedVariance")) {
      if (*share > 0 && *share <= 1) {
        spec.explained_variance = *share;
      } else {
        problems_.Error(map.PathOf("explainedVariance"), map.MarkOf("explainedVariance"),
                        fmt::format("explainedVariance is a share of the variance in (0, 1], "
                                    "found {}",
                                    *share));
      }
    }
  }
  if (!spec.enabled) return;
  if (spec.records == 0) spec.records = std::max<int64_t>(2, spec_.drift.baseline.records);
  // The PCA is fitted on a model's first vectors in the drift stage's record order, which
  // is fixed for record-count windows; event-time windows take a window's values in any
  // order, and the baseline is not a file's statistics.
  if (spec_.query.window || spec_.drift.window_ms > 0) {
    problems_.Error("drift.multivariate", entry->key_mark,
                    "multivariate drift fits its PCA on each model's first records in record "
                    "order, which event-time windows (query.window, drift.window) do not fix: "
                    "use record-count windows (drift.windowRecords)");
  }
  if (spec_.drift.baseline.kind == BaselineKind::kFile) {
    problems_.Error("drift.multivariate", entry->key_mark,
                    "multivariate drift fits its PCA on each model's first records: it needs "
                    "a warmup baseline, not a file");
  }
}

// The leaves under a struct named `name` (a dotted path), in schema order; none when `name`
// is not a struct.
std::vector<std::string> PipelineParser::StructLeaves(const std::string& name) const {
  std::vector<std::string> leaves;
  if (columns_.count(name) > 0) return leaves;
  for (const Field& field : spec_.schema.fields) {
    if (field.path.empty() || field.name.size() <= name.size() ||
        !field.name.starts_with(name) || field.name[name.size()] != '.') {
      continue;
    }
    leaves.push_back(field.name);
  }
  return leaves;
}

// Segments: drift.segmentBy, or the groupBy columns after the model column; and the caps.
void PipelineParser::ParseSegments(const MapReader& drift) {
  DriftSpec& spec = spec_.drift;
  if (drift.Has("segmentBy")) {
    spec.segment_by_given = true;
    if (auto columns = drift.StringList("segmentBy", ", e.g. [segment.country, channel]")) {
      std::set<std::string> seen;
      for (const Scalar& column : *columns) {
        if (!seen.insert(column.value).second) {
          problems_.Error(column.path, column.mark,
                          fmt::format("segment column {} is listed twice", Show(column)));
          continue;
        }
        if (column.value == spec.model_column) {
          problems_.Error(column.path, column.mark,
                          fmt::format("segment column {} is the model column: segments split "
                                      "a model",
                                      Show(column)));
          continue;
        }
        if (CheckColumn(column, ColumnUse::kGroupKey, "segment column")) {
          spec.segment_by.push_back(column.value);
        }
      }
    }
  } else {
    for (const std::string& column : spec_.query.group_by) {
      if (column != spec.model_column) spec.segment_by.push_back(column);
    }
  }
  if (auto value = drift.Int("maxSegmentsPerModel", 1, 1'000'000)) {
    spec.max_segments_per_model = *value;
  }
  if (auto value = drift.Int("maxKeysPerModel", 1, 1'000'000)) spec.max_keys_per_model = *value;
  if (auto value = drift.Int("maxKeys", 1, 1'000'000)) spec.max_keys = *value;
}

// The error rate is watched whenever prediction and label columns can be known: given, or one
// of each of the usual names in the schema. Otherwise validate says how to turn it on.
void PipelineParser::DefaultLabelColumns(const MapReader& drift, const SourceMark& mark) {
  DriftSpec& spec = spec_.drift;
  auto candidates = [&](const std::vector<std::string_view>& names) {
    std::vector<std::string> found;
    for (const Field& field : spec_.schema.fields) {
      const bool usable = field.type == FieldType::kDouble || field.type == FieldType::kLong ||
                          field.type == FieldType::kInt || field.type == FieldType::kBoolean;
      if (usable && std::find(names.begin(), names.end(), field.name) != names.end()) {
        found.push_back(field.name);
      }
    }
    return found;
  };
  const bool has_prediction = !spec.prediction_column.empty();
  const bool has_label = !spec.label_column.empty();
  if (has_prediction && has_label) return;
  const std::vector<std::string> predictions = candidates(kPredictionNames);
  const std::vector<std::string> labels = candidates(kLabelNames);
  if (!drift.Has("predictionColumn") && !drift.Has("labelColumn") && predictions.size() == 1 &&
      labels.size() == 1) {
    spec.prediction_column = predictions[0];
    spec.label_column = labels[0];
    return;
  }
  // One of the two given: the other is its default, the one column of the usual names (not
  // the given one), as for each key alone.
  auto other = [](const std::vector<std::string>& found, const std::string& given) {
    std::vector<std::string> rest;
    for (const std::string& name : found) {
      if (name != given) rest.push_back(name);
    }
    return rest;
  };
  if (has_label && !has_prediction && !drift.Has("predictionColumn")) {
    const std::vector<std::string> rest = other(predictions, spec.label_column);
    if (rest.size() == 1) {
      spec.prediction_column = rest[0];
      return;
    }
  }
  if (has_prediction && !has_label && !drift.Has("labelColumn")) {
    const std::vector<std::string> rest = other(labels, spec.prediction_column);
    if (rest.size() == 1) {
      spec.label_column = rest[0];
      return;
    }
  }
  if (has_prediction != has_label) {
    problems_.Warn(
        has_prediction ? "drift.predictionColumn" : "drift.labelColumn",
        drift.MarkOf(has_prediction ? "predictionColumn" : "labelColumn"),
        fmt::format("the error rate is not watched: set drift.{} too (the {} column)",
                    has_prediction ? "labelColumn" : "predictionColumn",
                    has_prediction ? "ground truth" : "model's prediction"));
    return;
  }
  // Ground truth by a usual name, but no single pair: say how to watch it. (A prediction
  // column alone says nothing about labels.)
  if (!labels.empty()) {
    std::vector<std::string> named = labels;
    named.insert(named.end(), predictions.begin(), predictions.end());
    problems_.Warn("drift", mark,
                   fmt::format("the error rate is not watched: the schema has {} but not one "
                               "prediction and one label column by the usual names; set "
                               "drift.predictionColumn and drift.labelColumn",
                               Join(std::vector<std::string_view>(named.begin(), named.end()))));
  }
}

void PipelineParser::ParseBaseline(const MapReader& drift) {
  BaselineSpec& baseline = spec_.drift.baseline;
  const MapReader::Entry* entry = drift.Find("baseline");
  if (entry == nullptr) {
    baseline.mark = drift.anchor();
    CheckWarmupSize(drift, nullptr);
    return;
  }
  baseline.mark = entry->key_mark;
  MapReader map(reader_, entry->value, "drift.baseline", entry->key_mark,
                std::vector<std::string_view>{"type", "records", "duration", "path", "windows",
                                              "period", "cycles"},
                ", e.g. {type: warmup, records: 1000}");
  if (!map.valid()) return;
  auto type = map.Choice("type", Names(kBaselines));
  if (!type) {
    if (map.Has("type")) return;
    type = "warmup";
  }
  baseline.kind = *Lookup(kBaselines, *type);
  // Each key belongs to some baseline types; another type's key would silently do nothing.
  const std::vector<std::pair<std::string_view, std::vector<BaselineKind>>> owners = {
      {"records", {BaselineKind::kWarmup, BaselineKind::kSeasonal}},
      {"duration", {BaselineKind::kWarmup}},
      {"path", {BaselineKind::kFile}},
      {"windows", {BaselineKind::kTrailing}},
      {"period", {BaselineKind::kSeasonal}},
      {"cycles", {BaselineKind::kSeasonal}},
  };
  for (const auto& [key, kinds] : owners) {
    if (map.Has(key) && std::find(kinds.begin(), kinds.end(), baseline.kind) == kinds.end()) {
      std::vector<std::string_view> names;
      for (BaselineKind kind : kinds) names.push_back(ToString(kind));
      problems_.Error(map.PathOf(key), map.MarkOf(key),
                      fmt::format("'{}' applies to baseline type {}, not {}", key,
                                  fmt::join(names, " or "), *type));
    }
  }
  switch (baseline.kind) {
    case BaselineKind::kWarmup:
      if (map.Has("records") && map.Has("duration")) {
        problems_.Error(map.PathOf("duration"), map.MarkOf("duration"),
                        "give either records or duration for a warmup baseline, not both");
      }
      if (auto records = map.Int("records", 1, kMaxInt)) baseline.records = *records;
      if (auto duration = map.DurationMs("duration", 1)) baseline.duration_ms = *duration;
      CheckWarmupSize(drift, &map);
      break;
    case BaselineKind::kFile:
      // Reference statistics are per model: they cannot serve drift per (model, segment).
      if (!spec_.drift.segment_by.empty()) {
        problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                        fmt::format("a file baseline holds statistics per model, but drift is "
                                    "per (model, segment) ({}): use a warmup baseline, or set "
                                    "drift.segmentBy: []",
                                    fmt::join(spec_.drift.segment_by, ", ")));
      }
      if (auto path = map.String("path", true)) {
        if (path->value.empty()) {
          problems_.Error(path->path, path->mark, "the baseline path is empty");
        }
        baseline.path = path->value;
        // Read now, so that `validate` reads it as `run` does and the drift stage does no
        // file I/O (it parses what was read: engine/executor/drift_stage.cc).
        if (!path->value.empty() && options_.read_references) {
          std::filesystem::path file = path->value;
          if (file.is_relative() && !spec_.file.empty()) {
            file = std::filesystem::path(spec_.file).parent_path() / file;
          }
          auto text = ReadReferenceFile(file.string());
          if (text) {
            baseline.reference = std::make_shared<const std::string>(std::move(*text));
          } else {
            problems_.Error(path->path, path->mark,
                            fmt::format("'{}': {}", file.string(), text.error().message()));
          }
        }
      }
      break;
    case BaselineKind::kTrailing:
      if (auto windows = map.Int("windows", 1, 10'000)) {
        baseline.windows = static_cast<int>(*windows);
      }
      if (query_ok_ && !spec_.query.window) {
        problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                        "a trailing baseline compares with previous windows, but the query "
                        "has no window (add query.window)");
      }
      break;
    case BaselineKind::kSeasonal:
      if (auto records = map.Int("records", 1, kMaxInt)) baseline.records = *records;
      if (auto period = map.DurationMs("period", 1, true)) baseline.period_ms = *period;
      if (auto cycles = map.Int("cycles", 1, 1000)) baseline.cycles = static_cast<int>(*cycles);
      if (query_ok_ && !spec_.query.window) {
        problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                        "a seasonal baseline compares each event-time window with the same "
                        "phase of earlier cycles, but the query has no window (add "
                        "query.window)");
      } else if (spec_.query.window && baseline.period_ms > 0 &&
                 (baseline.period_ms < spec_.query.window->size_ms ||
                  baseline.period_ms % spec_.query.window->size_ms != 0)) {
        problems_.Error(map.PathOf("period"), map.MarkOf("period"),
                        fmt::format("the period ({} ms) must be a whole number of query "
                                    "windows ({} ms), so each window has one phase",
                                    baseline.period_ms, spec_.query.window->size_ms));
      }
      break;
  }
}

// A warmup of fewer records than minSamples would never be complete enough to compare with.
void PipelineParser::CheckWarmupSize(const MapReader& drift, const MapReader* baseline_map) {
  const DriftSpec& spec = spec_.drift;
  if (spec.baseline.duration_ms > 0 || spec.baseline.records >= spec.min_samples) return;
  const bool records_given = baseline_map && baseline_map->Has("records");
  problems_.Error(
      records_given ? baseline_map->PathOf("records") : drift.PathOf("minSamples"),
      records_given ? baseline_map->MarkOf("records") : drift.MarkOf("minSamples"),
      fmt::format("a warmup baseline of {} records is below minSamples ({}): it would never "
                  "hold enough records to compare with",
                  spec.baseline.records, spec.min_samples));
}

void PipelineParser::ParseDetectors(const MapReader& drift) {
  const MapReader::Entry* entry = drift.Find("detectors");
  if (entry == nullptr) {
    // Documented default: every detector registered as a default, with its default
    // parameters; those of the error series only when there are prediction and label columns
    // to compare.
    const bool labelled =
        !spec_.drift.prediction_column.empty() && !spec_.drift.label_column.empty();
    for (const config_detail::DetectorInfo& info : config_detail::Detectors()) {
      if (!info.by_default || (info.error_series && !labelled)) continue;
      DetectorSpec detector = config_detail::DefaultDetector(info.kind);
      detector.mark = drift.anchor();
      spec_.drift.detectors.push_back(std::move(detector));
    }
    return;
  }
  auto items = reader_.ReadList(entry->value, "drift.detectors",
                                ", e.g. - {type: psi, warn: 0.1, alert: 0.25}");
  if (!items) return;
  if (items->empty()) {
    problems_.Error("drift.detectors", entry->key_mark,
                    "drift.detectors is empty; list at least one detector (or remove the key "
                    "for the defaults: every detector)");
    return;
  }
  std::map<std::string, int> seen;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string path = fmt::format("drift.detectors[{}]", i);
    const YAML::Node& node = (*items)[i];
    // A detector is a map with `type`; its other valid keys depend on the type.
    if (!node.IsMap()) {
      problems_.Error(path, config_detail::MarkOf(node),
                      fmt::format("expected a map such as {{type: psi, warn: 0.1, alert: "
                                  "0.25}}, found {}",
                                  Describe(node, false)));
      continue;
    }
    // The type decides which other keys are valid, so it is read first.
    YAML::Node type_node;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == "type") type_node = it->second;
    }
    if (!type_node.IsDefined()) {
      problems_.Error(
          path + ".type", config_detail::MarkOf(node),
          fmt::format("'type' is required (one of {})", Join(config_detail::DetectorNames())));
      continue;
    }
    auto type_scalar = reader_.ReadScalar(type_node, path + ".type", false);
    if (!type_scalar) continue;
    if (type_scalar->value == "page_hinkley") {
      problems_.Error(type_scalar->path, type_scalar->mark,
                      "page_hinkley was replaced by cusum, a CUSUM per value whose levels are "
                      "calibrated false-alarm rates (baseline error included) and which stays "
                      "in alarm while a shift lasts: write {type: cusum}");
      continue;
    }
    auto type = reader_.ToChoice(*type_scalar, config_detail::DetectorNames());
    if (!type) continue;
    const config_detail::DetectorInfo& info = *config_detail::FindDetector(*type);
    std::vector<std::string_view> keys = {"type", "warn", "alert"};
    for (const auto& param : info.params) keys.push_back(param.name);
    // Unknown parameters of this detector type are reported with did-you-mean.
    MapReader map(reader_, node, path, {}, keys);
    DetectorSpec detector = config_detail::DefaultDetector(info.kind);
    detector.mark = config_detail::MarkOf(node);
    bool ok = true;
    for (std::string_view threshold : {"warn", "alert"}) {
      auto value = map.Double(threshold);
      if (!value) {
        ok = ok && !map.Has(threshold);
        continue;
      }
      if (std::string error = LevelError(*value, info); !error.empty()) {
        problems_.Error(map.PathOf(threshold), map.MarkOf(threshold), error);
        ok = false;
        continue;
      }
      (threshold == "warn" ? detector.warn : detector.alert) = *value;
    }
    if (ok && detector.warn > detector.alert) {
      problems_.Error(map.PathOf(map.Has("warn") ? "warn" : "alert"),
                      map.MarkOf(map.Has("warn") ? "warn" : "alert"),
                      fmt::format("the warn level ({}) must not exceed the alert level ({})",
                                  detector.warn, detector.alert));
    }
    for (const auto& param : info.params) {
      if (!map.Has(param.name)) continue;
      auto scalar = map.String(param.name);
      if (!scalar) continue;
      std::optional<double> value;
      if (param.integer) {
        auto as_int = reader_.ToInt(*scalar, static_cast<int64_t>(param.min),
                                    static_cast<int64_t>(param.max));
        if (as_int) value = static_cast<double>(*as_int);
      } else {
        value = reader_.ToDouble(*scalar);
        if (value && (*value < param.min || *value > param.max)) {
          problems_.Error(scalar->path, scalar->mark,
                          fmt::format("{} must be between {} and {}, found {}", param.name,
                                      param.min, param.max, *value));
          value.reset();
        }
      }
      if (value) detector.params[std::string(param.name)] = *value;
    }
    if (auto it = seen.find(detector.name); it != seen.end()) {
      problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                      fmt::format("detector {} is listed twice (first at line {}); use "
                                  "overrides for per-model thresholds",
                                  detector.name, it->second));
      continue;
    }
    seen.emplace(detector.name, detector.mark.line);
    if (info.error_series) {
      if (spec_.drift.prediction_column.empty() || spec_.drift.label_column.empty()) {
        problems_.Error(map.PathOf("type"), map.MarkOf("type"),
                        fmt::format("the {} detector needs drift.predictionColumn and "
                                    "drift.labelColumn",
                                    info.name));
      }
    }
    spec_.drift.detectors.push_back(std::move(detector));
  }
  const bool labelled =
      !spec_.drift.prediction_column.empty() && !spec_.drift.label_column.empty();
  if (labelled && seen.find("error_rate") == seen.end()) {
    problems_.Warn("drift.detectors", entry->key_mark,
                   fmt::format("the error rate is not watched although labels are known "
                               "({} against {}): add {{type: error_rate}} to drift.detectors",
                               spec_.drift.prediction_column, spec_.drift.label_column));
  }
  // A string series (string, array<string>, map<string,string>) or a boolean one is watched
  // by its categories: some detector must read them.
  bool categorical = false;
  for (const DetectorSpec& d : spec_.drift.detectors) {
    categorical = categorical || DefaultsFor(d.kind).Watches(SeriesKind::kCategorical);
  }
  for (const Scalar& column : drift_series_) {
    const FieldType type = ColumnType(column.value).value_or(FieldType::kDouble);
    if (categorical || (type != FieldType::kString && type != FieldType::kStringArray &&
                        type != FieldType::kStringMap && type != FieldType::kBoolean)) {
      continue;
    }
    std::vector<std::string_view> names;
    for (const auto& d : DetectorDefaultsTable()) {
      if (d.Watches(SeriesKind::kCategorical)) names.push_back(d.name);
    }
    problems_.Error(column.path, column.mark,
                    fmt::format("drift series {} is a {} column, watched by its categories, "
                                "but none of drift.detectors reads categories: add one of {}",
                                Show(column), FieldTypeName(type), Join(names)));
    break;
  }
}

void PipelineParser::ParseOverrides(const MapReader& drift) {
  const MapReader::Entry* entry = drift.Find("overrides");
  if (entry == nullptr) return;
  auto items = reader_.ReadList(entry->value, "drift.overrides",
                                ", e.g. - {model: model-3, detector: psi, alert: 0.4}");
  if (!items) return;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string path = fmt::format("drift.overrides[{}]", i);
    MapReader map(reader_, (*items)[i], path, {},
                  std::vector<std::string_view>{"model", "series", "detector", "warn", "alert"},
                  ", e.g. {model: model-3, detector: psi, alert: 0.4}");
    if (!map.valid()) continue;
    ThresholdOverride override_spec;
    override_spec.mark = config_detail::MarkOf((*items)[i]);
    if (auto model = map.String("model")) override_spec.model = model->value;
    if (auto series = map.String("series")) {
      override_spec.series = series->value;
      CheckOverrideSeries(*series);
    }
    const DetectorSpec* detector = nullptr;
    if (auto name = map.String("detector", true)) {
      override_spec.detector = name->value;
      std::vector<std::string_view> configured;
      for (const DetectorSpec& d : spec_.drift.detectors) {
        configured.push_back(d.name);
        if (d.name == name->value) detector = &d;
      }
      if (detector == nullptr) {
        problems_.Error(
            name->path, name->mark,
            fmt::format("detector {} is not among drift.detectors ({}){}", Show(*name),
                        Join(configured), DidYouMean(name->value, configured)));
      }
    }
    override_spec.warn = map.Double("warn");
    override_spec.alert = map.Double("alert");
    for (std::string_view key : {"warn", "alert"}) {
      const std::optional<double>& level = key == "warn" ? override_spec.warn : override_spec.alert;
      const config_detail::DetectorInfo* info =
          detector ? config_detail::FindDetector(ToString(detector->kind)) : nullptr;
      if (!level || info == nullptr) continue;
      if (std::string error = LevelError(*level, *info); !error.empty()) {
        problems_.Error(map.PathOf(key), map.MarkOf(key), error);
      }
    }
    if (!map.Has("warn") && !map.Has("alert")) {
      problems_.Error(path, override_spec.mark,
                      "an override needs warn, alert or both (it changes thresholds only)");
    }
    if (detector) {
      double warn = override_spec.warn.value_or(detector->warn);
      double alert = override_spec.alert.value_or(detector->alert);
      if (warn > alert) {
        problems_.Error(path, override_spec.mark,
                        fmt::format("with this override the warn threshold ({}) exceeds the "
                                    "alert threshold ({})",
                                    warn, alert));
      }
    }
    spec_.drift.overrides.push_back(std::move(override_spec));
  }
}

// Levels are calibrated scores; a value below the range is most likely a threshold on the
// statistic from before calibration (psi 0.25), which is now the detector's minEffect.
std::string PipelineParser::LevelError(double value, const config_detail::DetectorInfo& info) {
  if (value >= info.min_level && value <= info.max_level) return {};
  std::string error = fmt::format(
      "levels are calibrated scores (the z whose upper normal tail is the false-alarm "
      "probability per evaluation: 5 = 2.9e-7, 5.5 = 1.9e-8) between {} and {}, found {}",
      info.min_level, info.max_level, value);
  if (value < info.min_level) {
    bool has_floor = false;
    for (const auto& param : info.params) has_floor = has_floor || param.name == "minEffect";
    if (has_floor) {
      error += fmt::format("; a floor on {}'s own statistic is minEffect", info.name);
    }
  }
  return error;
}

// An override names a drift series, one element of an array<double> series ("col[3]"), a
// series' missing-value series ("col:missing") or the malformed-record series.
void PipelineParser::CheckOverrideSeries(const Scalar& series) {
  if (series.value == DriftMonitor::kMalformedSeries) return;
  std::string base = series.value;
  const std::string_view suffix = DriftMonitor::kMissingSuffix;
  if (base.size() > suffix.size() && base.ends_with(suffix)) {
    base.resize(base.size() - suffix.size());
    const auto& watched = spec_.drift.series;
    if (std::find(watched.begin(), watched.end(), base) != watched.end()) return;
  }
  bool indexed = false;
  if (size_t open = base.find('['); open != std::string::npos && base.back() == ']') {
    std::string index = base.substr(open + 1, base.size() - open - 2);
    bool digits = !index.empty() && std::all_of(index.begin(), index.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!digits) {
      problems_.Error(
          series.path, series.mark,
          fmt::format("cannot read series {}; expected a column or column[index]", Show(series)));
      return;
    }
    base = base.substr(0, open);
    indexed = true;
  }
  const auto& watched = spec_.drift.series;
  // One key of a map series: "features.amount" (keys are found as records arrive).
  for (size_t dot = base.rfind('.'); !indexed && dot != std::string::npos && dot > 0;
       dot = base.rfind('.', dot - 1)) {
    const std::string map = base.substr(0, dot);
    if (std::find(watched.begin(), watched.end(), map) != watched.end() && ColumnType(map) &&
        IsMap(*ColumnType(map))) {
      return;
    }
  }
  if (std::find(watched.begin(), watched.end(), base) == watched.end()) {
    std::vector<std::string_view> names(watched.begin(), watched.end());
    problems_.Error(series.path, series.mark,
                    fmt::format("series {} is not among drift.series ({}){}", Show(series),
                                Join(names), DidYouMean(base, names)));
    return;
  }
  if (indexed && ColumnType(base) && *ColumnType(base) != FieldType::kDoubleArray) {
    problems_.Error(series.path, series.mark,
                    fmt::format("series {} has an index, but its column is not an "
                                "array<double>",
                                Show(series)));
  }
}

}  // namespace driftd::loader_detail
