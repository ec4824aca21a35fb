#include "engine/pipeline_spec.h"

#include "engine/aggregates.h"
#include "engine/drift/detectors.h"

namespace driftd {

std::string_view ToString(MalformedPolicy policy) {
  switch (policy) {
    case MalformedPolicy::kPermissive: return "permissive";
    case MalformedPolicy::kDrop: return "drop";
    case MalformedPolicy::kFail: return "fail";
    case MalformedPolicy::kDeadLetter: return "dead_letter";
  }
  return "unknown";
}

std::string_view ToString(AggregateFn fn) { return KindOf(fn).name; }

std::string_view ToString(OutputMode mode) {
  switch (mode) {
    case OutputMode::kAppend: return "append";
    case OutputMode::kUpdate: return "update";
    case OutputMode::kComplete: return "complete";
  }
  return "unknown";
}

std::string_view ToString(StreamKind stream) {
  switch (stream) {
    case StreamKind::kStats: return "stats";
    case StreamKind::kAlerts: return "alerts";
    case StreamKind::kDeadLetter: return "dead_letter";
    case StreamKind::kEvaluations: return "evaluations";
    case StreamKind::kPerformance: return "performance";
  }
  return "unknown";
}

std::string_view ToString(TriggerKind kind) {
  switch (kind) {
    case TriggerKind::kProcessingTime: return "processingTime";
    case TriggerKind::kOnce: return "once";
    case TriggerKind::kAvailableNow: return "availableNow";
    case TriggerKind::kContinuous: return "continuous";
  }
  return "unknown";
}

std::string_view ToString(DetectorKind kind) {
  const auto& registry = DetectorDefaultsTable();
  const auto index = static_cast<size_t>(kind);
  return index < registry.size() ? registry[index].name : "unknown";
}

std::string_view ToString(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::kWarmup: return "warmup";
    case BaselineKind::kFile: return "file";
    case BaselineKind::kTrailing: return "trailing";
    case BaselineKind::kSeasonal: return "seasonal";
  }
  return "unknown";
}

Schema QuerySchema(const PipelineSpec& spec) {
  Schema schema = WithMetadataColumns(spec.schema, spec.query.metadata);
  for (const DerivedColumnSpec& derived : spec.query.derived) {
    schema.fields.push_back({derived.name, derived.type, true});
  }
  return schema;
}

int DriftTimeColumn(const PipelineSpec& spec) {
  const Schema schema = QuerySchema(spec);
  // As drift dates its values (engine/executor/drift_stage.cc).
  if (spec.query.watermark) return schema.IndexOf(spec.query.watermark->column);
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    if (schema.fields[i].type == FieldType::kTimestamp) return static_cast<int>(i);
  }
  return -1;
}

bool DriftOrdersByEventTime(const PipelineSpec& spec) {
  // In one process or scaled out: each task orders its own models' values.
  if (!spec.drift.enabled || spec.query.window || spec.drift.window_ms > 0) return false;
  return ReadsUnorderedPartitions(spec) && DriftTimeColumn(spec) >= 0;
}

bool ReadsUnorderedPartitions(const PipelineSpec& spec) {
  bool unordered = spec.source.traits.unordered_partitions;
  for (const InputSpec& input : spec.inputs) {
    unordered = unordered || input.source.traits.unordered_partitions;
  }
  return unordered;
}

}  // namespace driftd
