#include "engine/pipeline_spec.h"

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

std::string_view ToString(AggregateFn fn) {
  switch (fn) {
    case AggregateFn::kCount: return "count";
    case AggregateFn::kSum: return "sum";
    case AggregateFn::kMean: return "mean";
    case AggregateFn::kStddev: return "stddev";
    case AggregateFn::kVariance: return "variance";
    case AggregateFn::kMin: return "min";
    case AggregateFn::kMax: return "max";
    case AggregateFn::kApproxPercentile: return "approx_percentile";
  }
  return "unknown";
}

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
  switch (kind) {
    case DetectorKind::kMeanShift: return "mean_shift";
    case DetectorKind::kStddevRatio: return "stddev_ratio";
    case DetectorKind::kPsi: return "psi";
    case DetectorKind::kJensenShannon: return "js";
    case DetectorKind::kKs: return "ks";
    case DetectorKind::kCusum: return "cusum";
    case DetectorKind::kErrorRate: return "error_rate";
    case DetectorKind::kChiSquare: return "chi_square";
    case DetectorKind::kUnseenCategories: return "unseen_categories";
    case DetectorKind::kMissingRate: return "missing_rate";
    case DetectorKind::kMalformedRate: return "malformed_rate";
  }
  return "unknown";
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

}  // namespace driftd
