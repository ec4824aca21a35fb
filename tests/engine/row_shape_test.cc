// The result streams' row shapes (engine/row_shape.h), which the Avro writer schemas are
// derived from, against the rows the stages really render: stats of an aggregation (keys of
// every type, a window, aggregates over numbers and arrays, percentiles), stats of a plain
// select, and dead letters. The alert and evaluation rows are checked in
// drift_monitor_test.cc, where the monitor makes every kind of them.
#include "engine/row_shape.h"

#include <algorithm>

#include <catch2/catch.hpp>

#include "engine/executor/stage.h"
#include "engine/json_decoder.h"
#include "engine/time_iso8601.h"
#include "engine/value_decoder.h"
#include "tests/support/row_shape_check.h"

namespace driftd {
namespace {

using testing::ShapeMismatch;

Schema LogSchema() {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false},
                   {"version", FieldType::kLong, true},
                   {"shadow", FieldType::kBoolean, true},
                   {"event_time", FieldType::kTimestamp, true},
                   {"feature_vector", FieldType::kDoubleArray, true},
                   {"prediction", FieldType::kDouble, true}};
  return schema;
}

AggregateSpec Aggregate(AggregateFn fn, std::string column, std::string output_name) {
  AggregateSpec aggregate;
  aggregate.fn = fn;
  aggregate.column = std::move(column);
  aggregate.output_name = std::move(output_name);
  return aggregate;
}

// What the stages emit for `lines` in one batch of a pipeline with one stats sink.
std::vector<std::string> StatsRows(const PipelineSpec& spec,
                                   const std::vector<std::string>& lines) {
  InputChunk chunk;
  for (size_t i = 0; i < lines.size(); ++i) {
    chunk.Append(lines[i], RecordPosition{0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  JsonDecoder decoder(spec.schema, MalformedSpec{});
  RecordBatch batch;
  batch.Reset(spec.schema);
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == lines.size());
  RowTimes times;
  const int time_column = spec.schema.IndexOf("event_time");
  for (size_t row = 0; row < batch.num_rows; ++row) {
    const Column& column = batch.columns[static_cast<size_t>(time_column)];
    times.event_us.push_back(column.IsNull(row) ? INT64_MIN : column.i64[row]);
    times.late_before.push_back(INT64_MIN);
  }
  auto stages = CreateStages(spec);
  REQUIRE(stages);
  BatchOutput output;
  StateChanges changes;
  StageProgress progress;
  for (auto& stage : *stages) {
    stage->Process(batch, times, output);
    stage->Finish(BatchContext{}, output, changes, progress);
  }
  return output.For(StreamKind::kStats, spec.sinks.front().output_mode).rows;
}

PipelineSpec WithStatsSink(PipelineSpec spec, OutputMode mode) {
  SinkSpec sink;
  sink.name = "stats";
  sink.format = "console";
  sink.output_mode = mode;
  spec.sinks.push_back(sink);
  return spec;
}

const std::vector<std::string> kLines = {
    R"({"model_id":"m1","version":3,"shadow":false,"event_time":"2026-11-29T10:00:01.250Z",)"
    R"("feature_vector":[1,2,3],"prediction":0.5})",
    R"({"model_id":"m1","version":3,"shadow":false,"event_time":"2026-11-29T10:00:02Z",)"
    R"("feature_vector":[2,3,4],"prediction":0.7})",
    // Keys null, no array, no prediction: the nullable columns' nulls.
    R"({"model_id":"m2","version":null,"shadow":null,"event_time":"2026-11-29T10:00:03Z",)"
    R"("feature_vector":null,"prediction":null})",
};

TEST_CASE("stats rows of an aggregation have the shape their Avro schema is derived from",
          "[row_shape][aggregation]") {
  PipelineSpec spec;
  spec.schema = LogSchema();
  spec.query.group_by = {"model_id", "version", "shadow"};
  spec.query.window = WindowSpec{"event_time", 60'000, 60'000, {}};
  AggregateSpec count;
  count.output_name = "count";
  AggregateSpec median = Aggregate(AggregateFn::kApproxPercentile, "prediction",
                                   "approx_percentile(prediction, 0.5, 100)");
  median.percentages = {0.5};
  median.accuracy = 100;
  AggregateSpec quartiles = Aggregate(AggregateFn::kApproxPercentile, "feature_vector",
                                      "percentile_approx(feature_vector, array(0.25, 0.75), 100)");
  quartiles.percentages = {0.25, 0.75};
  quartiles.percentage_array = true;
  quartiles.accuracy = 100;
  spec.query.aggregates = {count,
                           Aggregate(AggregateFn::kMean, "prediction", "mean(prediction)"),
                           Aggregate(AggregateFn::kCount, "prediction", "count(prediction)"),
                           Aggregate(AggregateFn::kStddev, "feature_vector",
                                     "stddev(feature_vector)"),
                           Aggregate(AggregateFn::kCount, "feature_vector",
                                     "count(feature_vector)"),
                           median, quartiles};
  spec = WithStatsSink(spec, OutputMode::kComplete);
  auto shape = StreamRowShape(spec, StreamKind::kStats);
  REQUIRE(shape);

  const std::vector<std::string> rows = StatsRows(spec, kLines);
  REQUIRE(rows.size() == 2);
  for (const std::string& row : rows) {
    INFO(row);
    CHECK(ShapeMismatch(*shape, row).empty());
  }
  // The array aggregates are numbered members in the rows, one array field in the shape.
  CHECK(rows[0].find("\"stddev(feature_vector[2])\":") != std::string::npos);
  CHECK(rows[0].find(
            "\"percentile_approx(feature_vector[1], array(0.25, 0.75), 100)\":[") !=
        std::string::npos);
  auto found = std::find_if(shape->fields.begin(), shape->fields.end(),
                            [](const ShapeField& f) { return f.name == "stddev(feature_vector)"; });
  REQUIRE(found != shape->fields.end());
  const ShapeField& stddev = *found;
  REQUIRE(stddev.elements);
  CHECK(stddev.elements->prefix == "stddev(feature_vector[");
  CHECK(stddev.elements->suffix == "])");
  CHECK(DescribeShape(stddev.type) == "array<double>");
  CHECK(stddev.type.items().nullable);

  SECTION("a row with a member the shape lacks, or a null it forbids, is caught") {
    CHECK_FALSE(ShapeMismatch(*shape, R"({"model_id":"m1","extra":1})").empty());
    CHECK(ShapeMismatch(*shape, R"({"model_id":null})").find("model_id: null") == 0);
  }
}

TEST_CASE("stats rows of a plain select have the shape of the selected columns",
          "[row_shape][select]") {
  PipelineSpec spec;
  spec.schema = LogSchema();
  spec.query.select = {"prediction", "model_id", "event_time", "feature_vector", "shadow"};
  spec = WithStatsSink(spec, OutputMode::kAppend);
  auto shape = StreamRowShape(spec, StreamKind::kStats);
  REQUIRE(shape);
  REQUIRE(shape->fields.size() == 5);
  CHECK(shape->fields[0].name == "prediction");
  CHECK_FALSE(shape->fields[1].type.nullable);  // model_id: nullable: false in the schema
  const std::vector<std::string> rows = StatsRows(spec, kLines);
  REQUIRE(rows.size() == 3);
  for (const std::string& row : rows) {
    INFO(row);
    CHECK(ShapeMismatch(*shape, row).empty());
  }
}

TEST_CASE("dead-letter rows have their shape whether or not the bytes are UTF-8",
          "[row_shape][dead_letter]") {
  DeadLetter text;
  text.raw = "{\"model_id\": 12";
  text.reason = MalformedReason::kTruncated;
  text.detail = "the record ends inside an object";
  DeadLetter binary;
  binary.raw = std::string("\0\xff\xfe", 3);
  binary.reason = MalformedReason::kUndecodable;
  binary.truncated = true;
  const RowShape shape = DeadLetterRowShape();
  for (const DeadLetter& dead : {text, binary}) {
    const std::string row = DeadLetterToJson(dead, "topic t partition 0 offset 7");
    INFO(row);
    CHECK(ShapeMismatch(shape, row).empty());
  }
  CHECK(DeadLetterToJson(binary, "p").find("\"rawBase64\":\"AP/+\"") != std::string::npos);
}

}  // namespace
}  // namespace driftd
