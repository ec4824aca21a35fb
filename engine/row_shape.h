// The shapes of the result streams' rows: what each JSON row of the stats, alerts, evaluations
// and dead-letter streams holds, typed, for sinks that write a format with a schema (Avro). Each
// shape is written beside the code that renders its rows (Aggregator::RowShape next to
// RenderGroup, AlertRowShape next to AlertEvent::ToJson, ...), so the two change together; the
// tests check real rows against them.
//
// Pure data and functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/pipeline_spec.h"
#include "engine/result.h"

namespace driftd {

struct ShapeField;

/// The type of a value in a row.
struct ShapeType {
  enum class Kind : uint8_t {
    kString,
    kLong,       // a JSON integer (int64)
    kInt,        // a JSON integer within int32
    kDouble,     // a JSON number; a non-finite value is written as null (nullable then)
    kBoolean,
    kTimestamp,  // an RFC 3339 string with milliseconds: "2026-11-29T10:15:02.123Z"
    kRecord,     // a JSON object of `fields`
    kArray,      // a JSON array of `fields[0].type`
  };
  Kind kind = Kind::kString;
  /// The value may be null, or its member absent from the row. Default: false.
  bool nullable = false;
  /// kRecord: the fields in the order rows write them; kArray: one field, the items (no name).
  std::vector<ShapeField> fields;
  /// kRecord: a name for the record type, unique within its row shape ("Window").
  std::string record_name;

  static ShapeType Scalar(Kind kind, bool nullable = false);
  static ShapeType Record(std::string name, std::vector<ShapeField> fields, bool nullable = false);
  static ShapeType Array(ShapeType items, bool nullable = false);
  /// kArray: the items' type.
  const ShapeType& items() const;
};

/// Rows hold an array this way: as numbered members `prefix` + i + `suffix` for i = 0, 1, ...
/// (an aggregate over an array<double> column: `mean(feature_vector[0])`, ...), in order,
/// instead of one member holding a JSON array.
struct ElementMembers {
  std::string prefix;
  std::string suffix;
};

struct ShapeField {
  /// The member's name in the JSON row, exactly as written (`mean(prediction)`).
  std::string name;
  ShapeType type;
  /// Set when the row spreads this array field over numbered members (type is then kArray).
  std::optional<ElementMembers> elements;
};

inline const ShapeType& ShapeType::items() const { return fields.front().type; }

/// A row: a record (kind kRecord) named after its stream ("Stats", "Alert", ...).
using RowShape = ShapeType;

/// The kind of a column of `type` (kDouble for array<double>'s elements).
ShapeType::Kind ShapeKindOf(FieldType type);

/// The name of the shape's kind as written in docs and messages: "string", "long", "double",
/// "timestamp", "record Window", "array<double>", ...
std::string DescribeShape(const ShapeType& type);

/// The numbered members of an array field, from a function that names element `i`
/// (AggregateColumnName(fn, column, i)): the text before and after where the two first names
/// differ.
ElementMembers ElementMembersOf(const std::string& element0, const std::string& element1);

/// The schema columns a query without aggregation writes, as indexes into QuerySchema(spec):
/// query.select in order, or every schema field when it is empty. The select stage renders
/// these; the stats shape describes them.
std::vector<int> SelectOutputColumns(const PipelineSpec& spec);

/// The shape of the rows sent to sinks of `stream`: the stats rows of the query (its keys,
/// window and aggregates, or its selected columns), or the fixed shapes of the alerts,
/// evaluations and dead-letter rows (engine/drift/README.md). kConfig when the query itself
/// is not valid (an unknown column).
/// The shape of the performance stream's rows (engine/executor/performance_stage.h).
RowShape PerformanceRowShape();

Result<RowShape> StreamRowShape(const PipelineSpec& spec, StreamKind stream);

}  // namespace driftd
