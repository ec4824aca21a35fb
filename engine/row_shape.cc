#include "engine/row_shape.h"

#include <fmt/format.h>

#include "engine/aggregation.h"
#include "engine/drift/evaluation.h"
#include "engine/drift/monitor.h"
#include "engine/value_decoder.h"

namespace driftd {

ShapeType ShapeType::Scalar(Kind kind, bool nullable) {
  ShapeType type;
  type.kind = kind;
  type.nullable = nullable;
  return type;
}

ShapeType ShapeType::Record(std::string name, std::vector<ShapeField> fields, bool nullable) {
  ShapeType type;
  type.kind = Kind::kRecord;
  type.nullable = nullable;
  type.fields = std::move(fields);
  type.record_name = std::move(name);
  return type;
}

ShapeType ShapeType::Array(ShapeType items, bool nullable) {
  ShapeType type;
  type.kind = Kind::kArray;
  type.nullable = nullable;
  type.fields.push_back({"", std::move(items), {}});
  return type;
}

ShapeType::Kind ShapeKindOf(FieldType type) {
  switch (type) {
    case FieldType::kString: return ShapeType::Kind::kString;
    case FieldType::kLong: return ShapeType::Kind::kLong;
    case FieldType::kInt: return ShapeType::Kind::kInt;
    case FieldType::kBoolean: return ShapeType::Kind::kBoolean;
    case FieldType::kTimestamp: return ShapeType::Kind::kTimestamp;
    case FieldType::kDouble: break;
    // Not scalars: their shapes are made by the callers (arrays) or refused (maps).
    case FieldType::kDoubleArray:
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap: break;
  }
  return ShapeType::Kind::kDouble;
}

std::string DescribeShape(const ShapeType& type) {
  switch (type.kind) {
    case ShapeType::Kind::kString: return "string";
    case ShapeType::Kind::kLong: return "long";
    case ShapeType::Kind::kInt: return "int";
    case ShapeType::Kind::kDouble: return "double";
    case ShapeType::Kind::kBoolean: return "boolean";
    case ShapeType::Kind::kTimestamp: return "timestamp";
    case ShapeType::Kind::kRecord: return "record " + type.record_name;
    case ShapeType::Kind::kArray: return "array<" + DescribeShape(type.items()) + ">";
  }
  return "?";
}

ElementMembers ElementMembersOf(const std::string& element0, const std::string& element1) {
  size_t at = 0;
  while (at < element0.size() && at < element1.size() && element0[at] == element1[at]) ++at;
  return {element0.substr(0, at), at < element0.size() ? element0.substr(at + 1) : ""};
}

std::vector<int> SelectOutputColumns(const PipelineSpec& spec) {
  const Schema schema = QuerySchema(spec);
  std::vector<int> columns;
  for (const std::string& name : spec.query.select) columns.push_back(schema.IndexOf(name));
  if (columns.empty()) {
    for (size_t i = 0; i < spec.schema.fields.size(); ++i) columns.push_back(static_cast<int>(i));
  }
  return columns;
}

namespace {

// In step with the select stage's Render (engine/executor/stages.cc).
Result<RowShape> SelectShape(const PipelineSpec& spec) {
  const Schema schema = QuerySchema(spec);
  std::vector<ShapeField> fields;
  for (int index : SelectOutputColumns(spec)) {
    if (index < 0 || static_cast<size_t>(index) >= schema.fields.size()) {
      return MakeError(ErrorCode::kConfig, "query.select names a column the query does not have");
    }
    const Field& field = schema.fields[static_cast<size_t>(index)];
    if (!field.path.empty() || IsMap(field.type)) {
      // The select stage writes a struct's members back as an object and a map as one; a
      // row shape of top-level columns does not describe either.
      return MakeError(ErrorCode::kConfig,
                       "column '{}' is {}: rows of a plain select are written as Avro for "
                       "top-level scalar and array columns only; use valueFormat json for "
                       "this stream, or select scalar columns",
                       field.name, field.path.empty() ? "a map" : "a struct's member");
    }
    ShapeType type =
        field.type == FieldType::kDoubleArray
            ? ShapeType::Array(ShapeType::Scalar(ShapeType::Kind::kDouble), field.nullable)
        : field.type == FieldType::kStringArray
            ? ShapeType::Array(ShapeType::Scalar(ShapeType::Kind::kString, /*nullable=*/true),
                               field.nullable)
            : ShapeType::Scalar(ShapeKindOf(field.type), field.nullable);
    fields.push_back({field.name, std::move(type), {}});
  }
  return ShapeType::Record("Stats", std::move(fields));
}

}  // namespace

RowShape PerformanceRowShape() {
  using Kind = ShapeType::Kind;
  auto member = [](std::string name, Kind kind, bool nullable = false) {
    return ShapeField{std::move(name), ShapeType::Scalar(kind, nullable), {}};
  };
  auto numbers = [&](std::string name, std::initializer_list<const char*> fields) {
    std::vector<ShapeField> members;
    for (const char* field : fields) members.push_back(member(field, Kind::kDouble, true));
    return ShapeType::Record(std::move(name), std::move(members), /*nullable=*/true);
  };
  return ShapeType::Record(
      "Performance",
      {member("model", Kind::kString),
       {"window",
        ShapeType::Record("PerformanceWindow",
                          {member("start", Kind::kTimestamp), member("end", Kind::kTimestamp)}),
        {}},
       member("task", Kind::kString), member("status", Kind::kString),
       member("predictions", Kind::kLong), member("labelled", Kind::kLong),
       member("coverage", Kind::kDouble, true), member("coverage_at_window_end", Kind::kDouble, true),
       member("unlabelled", Kind::kLong, true), member("duplicate_labels", Kind::kLong, true),
       {"label_delay", numbers("LabelDelay", {"p50_seconds", "p90_seconds", "max_seconds"}), {}},
       {"realized",
        numbers("Realized", {"accuracy", "precision", "recall", "f1", "roc_auc", "roc_auc_error",
                             "log_loss", "ece", "mae", "rmse", "mape", "bias"}),
        {}},
       {"estimated",
        numbers("Estimated", {"accuracy", "accuracy_low", "accuracy_high", "f1", "roc_auc", "mae",
                              "mae_low", "mae_high"}),
        {}},
       {"baseline",
        ShapeType::Record("PerformanceBaseline",
                          {member("windows", Kind::kLong), member("n", Kind::kLong),
                           member("accuracy", Kind::kDouble, true),
                           member("mae", Kind::kDouble, true), member("frozen", Kind::kBoolean)}),
        {}},
       member("level", Kind::kString, true), member("score", Kind::kDouble, true),
       member("batch_id", Kind::kLong)});
}

Result<RowShape> StreamRowShape(const PipelineSpec& spec, StreamKind stream) {
  switch (stream) {
    case StreamKind::kAlerts: return AlertRowShape();
    case StreamKind::kEvaluations: return EvaluationRowShape();
    case StreamKind::kDeadLetter: return DeadLetterRowShape();
    case StreamKind::kPerformance: return PerformanceRowShape();
    case StreamKind::kStats: break;
  }
  if (!spec.query.IsAggregation()) return SelectShape(spec);
  auto aggregator = Aggregator::Create(spec.query, QuerySchema(spec));
  if (!aggregator) return tl::unexpected(aggregator.error());
  return (*aggregator)->Shape();
}

}  // namespace driftd
