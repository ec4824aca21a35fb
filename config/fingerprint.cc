// PipelineFingerprintJson: the part of a pipeline that a checkpoint's state depends on.
#include <string>

#include <fmt/format.h>

#include "config/loader.h"
#include "engine/json_writer.h"

namespace driftd {
namespace {

// Spellings are fixed here rather than taken from ToString() so that a renamed enumerator in
// engine/ cannot silently invalidate every checkpoint.
std::string_view FnName(AggregateFn fn) {
  switch (fn) {
    case AggregateFn::kCount:
      return "count";
    case AggregateFn::kSum:
      return "sum";
    case AggregateFn::kMean:
      return "mean";
    case AggregateFn::kStddev:
      return "stddev";
    case AggregateFn::kVariance:
      return "variance";
    case AggregateFn::kMin:
      return "min";
    case AggregateFn::kMax:
      return "max";
  }
  return "?";
}

std::string_view BaselineName(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::kWarmup:
      return "warmup";
    case BaselineKind::kFile:
      return "file";
    case BaselineKind::kTrailing:
      return "trailing";
  }
  return "?";
}

std::string_view DetectorName(DetectorKind kind) {
  switch (kind) {
    case DetectorKind::kMeanShift:
      return "mean_shift";
    case DetectorKind::kStddevRatio:
      return "stddev_ratio";
    case DetectorKind::kPsi:
      return "psi";
    case DetectorKind::kJensenShannon:
      return "js";
    case DetectorKind::kKs:
      return "ks";
    case DetectorKind::kPageHinkley:
      return "page_hinkley";
    case DetectorKind::kErrorRate:
      return "error_rate";
  }
  return "?";
}

std::string Quote(std::string_view text) {
  std::string out;
  AppendJsonString(out, text);
  return out;
}

std::string StringArray(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += Quote(items[i]);
  }
  return out + "]";
}

}  // namespace

std::string PipelineFingerprintJson(const PipelineSpec& spec) {
  // Options that say which data the source reads: another path or topic is another stream,
  // whose offsets and state mean nothing to this checkpoint.
  static constexpr std::string_view kIdentityOptions[] = {"assign", "path", "pattern", "subscribe",
                                                          "subscribePattern"};
  std::string out =
      "{\"version\":1,\"source\":{\"format\":" + Quote(spec.source.format) + ",\"identity\":{";
  bool first = true;
  for (std::string_view name : kIdentityOptions) {
    if (!spec.source.options.Has(name)) continue;
    if (!first) out += ',';
    first = false;
    out += Quote(name) + ":" + Quote(spec.source.options.GetString(name));
  }
  out += "}},\"schema\":[";
  for (size_t i = 0; i < spec.schema.fields.size(); ++i) {
    const Field& field = spec.schema.fields[i];
    if (i > 0) out += ',';
    out += fmt::format("{{\"name\":{},\"type\":{},\"nullable\":{}}}", Quote(field.name),
                       Quote(FieldTypeName(field.type)), field.nullable ? "true" : "false");
  }
  const QuerySpec& query = spec.query;
  out += "],\"groupBy\":" + StringArray(query.group_by) + ",\"window\":";
  if (query.window) {
    out += fmt::format("{{\"column\":{},\"sizeMs\":{},\"slideMs\":{}}}",
                       Quote(query.window->column), query.window->size_ms, query.window->slide_ms);
  } else {
    out += "null";
  }
  out += ",\"aggregates\":[";
  for (size_t i = 0; i < query.aggregates.size(); ++i) {
    const AggregateSpec& aggregate = query.aggregates[i];
    if (i > 0) out += ',';
    out += fmt::format("{{\"fn\":{},\"column\":{}}}", Quote(FnName(aggregate.fn)),
                       Quote(aggregate.column));
  }
  const DriftSpec& drift = spec.drift;
  out += "],\"drift\":";
  if (!drift.enabled) {
    out += "null";
  } else {
    const BaselineSpec& baseline = drift.baseline;
    out += fmt::format("{{\"modelColumn\":{},\"series\":{},\"baseline\":{{\"type\":{}",
                       Quote(drift.model_column), StringArray(drift.series),
                       Quote(BaselineName(baseline.kind)));
    switch (baseline.kind) {
      case BaselineKind::kWarmup:
        out += fmt::format(",\"records\":{},\"durationMs\":{}", baseline.records,
                           baseline.duration_ms);
        break;
      case BaselineKind::kFile:
        out += ",\"path\":" + Quote(baseline.path);
        break;
      case BaselineKind::kTrailing:
        out += fmt::format(",\"windows\":{}", baseline.windows);
        break;
    }
    out += "},\"detectors\":[";
    for (size_t i = 0; i < drift.detectors.size(); ++i) {
      const DetectorSpec& detector = drift.detectors[i];
      if (i > 0) out += ',';
      out += "{\"kind\":" + Quote(DetectorName(detector.kind));
      // Histogram state is laid out by bin count; thresholds and gates are not state.
      if (auto bins = detector.params.find("bins"); bins != detector.params.end()) {
        out += fmt::format(",\"bins\":{}", static_cast<int64_t>(bins->second));
      }
      out += '}';
    }
    out += "]}";
  }
  out += '}';
  return out;
}

}  // namespace driftd
