// The expression language (engine/expr): parse errors at their column, type checking, and
// evaluation over decoded batches, NULLs and three-valued logic included; the filter and the
// derived columns of a Projection.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/expr/expr.h"
#include "engine/expr/projection.h"
#include "engine/json_decoder.h"
#include "tests/support/decoded_rows.h"

namespace driftd {
namespace {

Schema InferenceSchema() {
  Schema schema;
  schema.fields = {
      {"model_id", FieldType::kString, true},   {"model_version", FieldType::kString, true},
      {"prediction", FieldType::kDouble, true}, {"ground_truth", FieldType::kDouble, true},
      {"clicks", FieldType::kLong, true},       {"shown", FieldType::kInt, true},
      {"ok", FieldType::kBoolean, true},        {"event_time", FieldType::kTimestamp, true},
      {"features", FieldType::kDoubleArray, true},
  };
  return schema;
}

RecordBatch Decode(const std::vector<std::string>& records, const Schema& schema) {
  return testing::DecodedRows(schema, records);
}

// A value of a result row, as a test reads it: nullopt for NULL.
std::optional<double> NumberAt(const Column& column, size_t row) {
  if (column.IsNull(row)) return std::nullopt;
  return column.type == FieldType::kDouble ? column.f64[row]
                                           : static_cast<double>(column.i64[row]);
}

std::optional<std::string> StringAt(const Column& column, size_t row) {
  if (column.IsNull(row)) return std::nullopt;
  return std::string(column.String(row));
}

expr::Expression MustCompile(std::string_view text, const Schema& schema) {
  auto compiled = expr::Expression::Compile(text, schema);
  if (!compiled) FAIL("'" << text << "' did not compile: " << compiled.error().message);
  return std::move(*compiled);
}

expr::ExprError MustFail(std::string_view text, const Schema& schema) {
  auto compiled = expr::Expression::Compile(text, schema);
  if (compiled) FAIL("'" << text << "' compiled, but should not have");
  return compiled.error();
}

// One row per record, evaluated.
std::vector<std::optional<double>> Numbers(std::string_view text,
                                           const std::vector<std::string>& records) {
  const Schema schema = InferenceSchema();
  RecordBatch batch = Decode(records, schema);
  expr::Expression expression = MustCompile(text, schema);
  const Column& result = expression.Evaluate(batch);
  std::vector<std::optional<double>> out;
  for (size_t row = 0; row < batch.num_rows; ++row) out.push_back(NumberAt(result, row));
  return out;
}

constexpr std::optional<double> kNull = std::nullopt;

TEST_CASE("a parse error names the column where the expression stops making sense",
          "[expr]") {
  const Schema schema = InferenceSchema();
  auto error = MustFail("prediction > ", schema);
  CHECK(error.offset == 13);
  CHECK(error.message == "expected a value, a column or '(', found the end of the expression");

  error = MustFail("abs(prediction - ground_truth", schema);
  CHECK(error.offset == 29);
  CHECK(error.message.find("expected ')'") != std::string::npos);

  error = MustFail("model_version = 'shadow", schema);
  CHECK(error.offset == 16);
  CHECK(error.message == "unterminated string literal");

  error = MustFail("prediction # 2", schema);
  CHECK(error.offset == 11);

  error = MustFail("prediction > 1 ground_truth", schema);
  CHECK(error.offset == 15);

  error = MustFail("CAST(prediction AS decimal)", schema);
  CHECK(error.offset == 19);
  CHECK(error.message.find("expected a type") != std::string::npos);
}

TEST_CASE("a hostile expression is refused, not run off the stack", "[expr]") {
  const Schema schema = InferenceSchema();
  CHECK(MustFail(std::string(100'000, '(') + "1" + std::string(100'000, ')'), schema)
            .message.find("at most 8192") != std::string::npos);
  CHECK(MustFail(std::string(500, '(') + "1" + std::string(500, ')'), schema)
            .message.find("nests more than 64 levels") != std::string::npos);
  CHECK(MustFail(std::string(500, '-') + "1", schema).message.find("nests more than") !=
        std::string::npos);
  std::string chain = "prediction";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  CHECK(MustFail(chain, schema).message.find("more than 256 operators") != std::string::npos);
  std::string long_in = "model_version IN ('v0'";
  for (int i = 1; i < 500; ++i) long_in += fmt::format(", 'v{}'", i);
  CHECK(MustCompile(long_in + ")", schema).type() == FieldType::kBoolean);
}

TEST_CASE("unknown columns and functions come with what was meant", "[expr]") {
  const Schema schema = InferenceSchema();
  auto error = MustFail("abs(predicton - ground_truth)", schema);
  CHECK(error.offset == 4);
  CHECK(error.message == "unknown column 'predicton'");
  CHECK(error.unknown_name == "predicton");
  CHECK(std::find(error.candidates.begin(), error.candidates.end(), "prediction") !=
        error.candidates.end());

  error = MustFail("1 + asb(prediction)", schema);
  CHECK(error.offset == 4);
  CHECK(error.message == "unknown function 'asb'");
  CHECK(error.unknown_name == "asb");
  CHECK(std::find(error.candidates.begin(), error.candidates.end(), "abs") !=
        error.candidates.end());

  error = MustFail("pow(prediction)", schema);
  CHECK(error.message.find("pow takes pow(base, exponent), found 1 argument") !=
        std::string::npos);
}

TEST_CASE("type mismatches are found before any row is read, at the offending operand",
          "[expr]") {
  const Schema schema = InferenceSchema();
  auto error = MustFail("model_version > 3", schema);
  CHECK(error.offset == 16);
  CHECK(error.message ==
        "type mismatch: '>' cannot compare string with long; convert one side with CAST(... "
        "AS type)");
  error = MustFail("prediction + model_id", schema);
  CHECK(error.offset == 13);
  CHECK(error.message == "type mismatch: '+' needs numbers, found string");
  error = MustFail("prediction AND ok", schema);
  CHECK(error.offset == 0);
  CHECK(error.message == "type mismatch: AND needs a boolean, found double");
  error = MustFail("features > 1", schema);
  CHECK(error.message.find("cannot compare") != std::string::npos);
  error = MustFail("size(prediction)", schema);
  CHECK(error.message == "type mismatch: size() needs an array or a map, found double");
  error = MustFail("CASE WHEN ok THEN prediction ELSE model_id END", schema);
  CHECK(error.offset == 34);
  CHECK(error.message == "type mismatch: CASE mixes double and string");
  error = MustFail("NULL", schema);
  CHECK(error.message.find("always NULL") != std::string::npos);
}

TEST_CASE("types of results follow Spark: / is fractional, integers stay integral",
          "[expr]") {
  const Schema schema = InferenceSchema();
  CHECK(MustCompile("clicks + shown", schema).type() == FieldType::kLong);
  CHECK(MustCompile("shown * 2", schema).type() == FieldType::kLong);
  CHECK(MustCompile("clicks / shown", schema).type() == FieldType::kDouble);
  CHECK(MustCompile("abs(clicks)", schema).type() == FieldType::kLong);
  CHECK(MustCompile("clicks + prediction", schema).type() == FieldType::kDouble);
  CHECK(MustCompile("size(features)", schema).type() == FieldType::kInt);
  CHECK(MustCompile("features[0]", schema).type() == FieldType::kDouble);
  CHECK(MustCompile("coalesce(model_version, 'v0')", schema).type() == FieldType::kString);
  CHECK(MustCompile("CAST(clicks AS string)", schema).type() == FieldType::kString);
  CHECK(MustCompile("prediction IS NULL", schema).type() == FieldType::kBoolean);
  CHECK(MustCompile("`prediction`", schema).column_index() == 2);
}

TEST_CASE("arithmetic over a batch, with NULL in any operand giving NULL", "[expr]") {
  const std::vector<std::string> rows = {
      R"({"prediction": 0.9, "ground_truth": 1.0, "clicks": 7, "shown": 2})",
      R"({"prediction": 0.25, "clicks": -3, "shown": 0})",
      R"({"ground_truth": 0.0, "clicks": 9223372036854775807, "shown": 4})",
  };
  auto error = Numbers("abs(prediction - ground_truth)", rows);
  REQUIRE(error[0].has_value());
  CHECK(*error[0] == Approx(0.1));
  CHECK(error[1] == kNull);
  CHECK(error[2] == kNull);
  CHECK(Numbers("clicks % shown", rows) == std::vector{std::optional(1.0), kNull, std::optional(3.0)});
  CHECK(Numbers("clicks / shown", rows) == std::vector{std::optional(3.5), kNull, std::optional(9223372036854775807.0 / 4)});
  // Integer overflow wraps, as Spark without ANSI mode.
  CHECK(Numbers("clicks + 1", rows)[2] == std::optional(-9223372036854775808.0));
  CHECK(Numbers("-clicks * 2 + shown", rows)[0] == std::optional(-12.0));
  CHECK(Numbers("2 + 3 * 4 - 6 / 4", rows)[0] == std::optional(12.5));
  CHECK(Numbers("(2 + 3) * 4", rows)[0] == std::optional(20.0));
}

TEST_CASE("functions: abs, sqrt, log, exp, pow, least, greatest, coalesce, size", "[expr]") {
  const std::vector<std::string> rows = {
      R"({"prediction": 4.0, "ground_truth": 2.0, "features": [1, 2, 3]})",
      R"({"prediction": -1.0, "features": []})",
      R"({"ground_truth": 0.5})",
  };
  CHECK(Numbers("sqrt(prediction)", rows)[0] == std::optional(2.0));
  CHECK(std::isnan(*Numbers("sqrt(prediction)", rows)[1]));  // as Spark
  CHECK(Numbers("log(prediction)", rows)[1] == kNull);       // log of x <= 0 is NULL
  CHECK(*Numbers("log(prediction)", rows)[0] == Approx(std::log(4.0)));
  CHECK(*Numbers("log(2, prediction)", rows)[0] == Approx(2.0));
  CHECK(*Numbers("log10(100)", rows)[0] == Approx(2.0));
  CHECK(*Numbers("exp(ground_truth)", rows)[2] == Approx(std::exp(0.5)));
  CHECK(Numbers("pow(prediction, 2)", rows)[0] == std::optional(16.0));
  CHECK(Numbers("power(ground_truth, 3)", rows)[1] == kNull);
  // least and greatest skip NULLs; NULL only when every argument is.
  CHECK(Numbers("least(prediction, ground_truth)", rows) ==
        std::vector{std::optional(2.0), std::optional(-1.0), std::optional(0.5)});
  CHECK(Numbers("greatest(prediction, ground_truth, 3)", rows) ==
        std::vector{std::optional(4.0), std::optional(3.0), std::optional(3.0)});
  CHECK(Numbers("coalesce(prediction, ground_truth, -9)", rows) ==
        std::vector{std::optional(4.0), std::optional(-1.0), std::optional(0.5)});
  CHECK(Numbers("coalesce(ground_truth, NULL)", rows) ==
        std::vector{std::optional(2.0), kNull, std::optional(0.5)});
  CHECK(Numbers("size(features)", rows) == std::vector{std::optional(3.0), std::optional(0.0), kNull});
  // Element access is 0-based; out of range or negative is NULL.
  CHECK(Numbers("features[2]", rows) == std::vector{std::optional(3.0), kNull, kNull});
  CHECK(Numbers("features[size(features) - 1] * 10", rows)[0] == std::optional(30.0));
  CHECK(Numbers("features[-1]", rows)[0] == kNull);
  CHECK(Numbers("ABS(-2)", rows)[0] == std::optional(2.0));  // function names in any case
}

TEST_CASE("AND, OR and NOT follow three-valued logic", "[expr]") {
  // a: true, false, null; b the same: all nine combinations.
  std::vector<std::string> rows;
  const char* values[] = {"true", "false", "null"};
  for (const char* a : values) {
    for (const char* b : values) {
      rows.push_back(fmt::format(R"({{"ok": {}, "prediction": {}}})", a,
                                 std::string(b) == "null" ? "null" : std::string(b) == "true" ? "1" : "0"));
    }
  }
  const auto T = std::optional(1.0), F = std::optional(0.0);
  CHECK(Numbers("ok AND prediction = 1", rows) ==
        std::vector{T, F, kNull, F, F, F, kNull, F, kNull});
  CHECK(Numbers("ok OR prediction = 1", rows) ==
        std::vector{T, T, T, T, F, kNull, T, kNull, kNull});
  CHECK(Numbers("NOT ok", rows) == std::vector{F, F, F, T, T, T, kNull, kNull, kNull});
  CHECK(Numbers("ok IS NULL", rows) == std::vector{F, F, F, F, F, F, T, T, T});
  CHECK(Numbers("prediction IS NOT NULL", rows) == std::vector{T, T, F, T, T, F, T, T, F});
  CHECK(Numbers("NULL = NULL", rows)[0] == kNull);
}

TEST_CASE("comparisons, IN, BETWEEN and CASE over strings, numbers and NULL", "[expr]") {
  const std::vector<std::string> rows = {
      R"({"model_version": "v2", "prediction": 0.8, "clicks": 3})",
      R"({"model_version": "shadow", "prediction": 0.1, "clicks": 1})",
      R"({"prediction": 0.5})",
  };
  const auto T = std::optional(1.0), F = std::optional(0.0);
  CHECK(Numbers("model_version != 'shadow'", rows) == std::vector{T, F, kNull});
  CHECK(Numbers("model_version <> 'shadow' AND prediction >= 0.5", rows) ==
        std::vector{T, F, kNull});
  CHECK(Numbers("model_version IN ('v1', 'v2')", rows) == std::vector{T, F, kNull});
  CHECK(Numbers("model_version NOT IN ('v1', 'v2')", rows) == std::vector{F, T, kNull});
  // x IN (.., NULL) is NULL unless x matches.
  CHECK(Numbers("clicks IN (3, NULL)", rows) == std::vector{T, kNull, kNull});
  CHECK(Numbers("clicks IN (1.0, 2)", rows) == std::vector{F, T, kNull});
  CHECK(Numbers("prediction BETWEEN 0.2 AND 0.6", rows) == std::vector{F, F, T});
  CHECK(Numbers("prediction NOT BETWEEN 0.2 AND 0.6", rows) == std::vector{T, T, F});
  CHECK(Numbers("CASE WHEN prediction > 0.7 THEN 2 WHEN prediction > 0.3 THEN 1 ELSE 0 END",
                rows) == std::vector{std::optional(2.0), std::optional(0.0), std::optional(1.0)});
  CHECK(Numbers("CASE model_version WHEN 'v2' THEN clicks * 10 END", rows) ==
        std::vector{std::optional(30.0), kNull, kNull});
  CHECK(Numbers("CASE WHEN model_version = 'v2' THEN 1.5 ELSE NULL END", rows) ==
        std::vector{std::optional(1.5), kNull, kNull});
  CHECK(Numbers("'b' > 'a' AND 'a' < 'ab'", rows)[0] == T);
}

TEST_CASE("CAST converts, and a value that does not convert is NULL", "[expr]") {
  const Schema schema = InferenceSchema();
  RecordBatch batch = Decode(
      {
          R"({"model_version": "42", "prediction": 2.75, "ok": true, "event_time": "2026-11-29T10:15:02Z"})",
          R"({"model_version": "forty-two", "prediction": 1e300, "ok": false})",
      },
      schema);
  std::deque<expr::Expression> keep;  // each result stays valid while the test reads it
  auto eval = [&](std::string_view text) -> const Column& {
    keep.push_back(MustCompile(text, schema));
    return keep.back().Evaluate(batch);
  };
  const Column& as_long = eval("CAST(model_version AS bigint)");
  CHECK(NumberAt(as_long, 0) == std::optional(42.0));
  CHECK(NumberAt(as_long, 1) == kNull);
  const Column& truncated = eval("CAST(prediction AS int)");
  CHECK(NumberAt(truncated, 0) == std::optional(2.0));
  CHECK(NumberAt(truncated, 1) == kNull);  // out of range
  const Column& text = eval("CAST(prediction AS string)");
  CHECK(StringAt(text, 0) == std::optional<std::string>("2.75"));
  const Column& flag = eval("CAST(ok AS string)");
  CHECK(StringAt(flag, 1) == std::optional<std::string>("false"));
  const Column& seconds = eval("CAST(event_time AS bigint)");
  CHECK(NumberAt(seconds, 0) == std::optional(1'795'947'302.0));
  CHECK(NumberAt(seconds, 1) == kNull);
  const Column& parsed = eval("CAST('2026-11-29T10:15:02Z' AS timestamp) = event_time");
  CHECK(NumberAt(parsed, 0) == std::optional(1.0));
  const Column& number = eval("CAST('  2.5 ' AS double) * 2");
  CHECK(NumberAt(number, 0) == std::optional(5.0));
}

TEST_CASE("a projection filters rows and appends derived columns, in row order", "[expr]") {
  PipelineSpec spec;
  spec.schema = InferenceSchema();
  spec.query.derived = {
      {"abs_error", "abs(prediction - ground_truth) AS abs_error", FieldType::kDouble, {}},
      {"scaled", "abs_error * 100 AS scaled", FieldType::kDouble, {}},
      {"tag", "coalesce(model_version, 'none') AS tag", FieldType::kString, {}},
  };
  spec.query.where = "model_version IS NULL OR model_version != 'shadow'";
  auto projection = Projection::Create(spec);
  REQUIRE(projection);
  RecordBatch batch = Decode(
      {
          R"({"model_id": "a", "model_version": "v1", "prediction": 0.5, "ground_truth": 1, "features": [1]})",
          R"({"model_id": "b", "model_version": "shadow", "prediction": 0.1, "ground_truth": 0, "features": [2, 2]})",
          R"({"model_id": "c", "prediction": 0.25, "features": [3, 3, 3]})",
          R"({"model_id": "d", "model_version": "shadow", "prediction": 0.9, "ground_truth": 1})",
      },
      spec.schema);
  CHECK((*projection)->Apply(batch) == 2);
  REQUIRE(batch.num_rows == 2);
  const Schema columns = QuerySchema(spec);
  REQUIRE(batch.columns.size() == columns.fields.size());
  const Column& model = batch.columns[0];
  CHECK(model.String(0) == "a");
  CHECK(model.String(1) == "c");
  CHECK(batch.positions[0].offset == 0);
  CHECK(batch.positions[1].offset == 2);
  const Column& features = batch.columns[static_cast<size_t>(columns.IndexOf("features"))];
  CHECK(features.ArraySize(0) == 1);
  CHECK(features.ArraySize(1) == 3);
  CHECK(features.ArrayData(1)[2] == 3.0);
  const Column& abs_error = batch.columns[static_cast<size_t>(columns.IndexOf("abs_error"))];
  CHECK(NumberAt(abs_error, 0) == std::optional(0.5));
  CHECK(NumberAt(abs_error, 1) == kNull);
  const Column& scaled = batch.columns[static_cast<size_t>(columns.IndexOf("scaled"))];
  CHECK(NumberAt(scaled, 0) == std::optional(50.0));
  const Column& tag = batch.columns[static_cast<size_t>(columns.IndexOf("tag"))];
  CHECK(StringAt(tag, 0) == std::optional<std::string>("v1"));
  CHECK(StringAt(tag, 1) == std::optional<std::string>("none"));
}

TEST_CASE("a filtered row is the same row however the input is batched", "[expr]") {
  PipelineSpec spec;
  spec.schema = InferenceSchema();
  spec.query.derived = {{"e", "prediction * 2 AS e", FieldType::kDouble, {}}};
  spec.query.where = "clicks % 3 != 0";
  std::vector<std::string> records;
  for (int i = 0; i < 100; ++i) {
    records.push_back(fmt::format(R"({{"model_id": "m{}", "prediction": {}, "clicks": {}}})", i,
                                  i * 0.5, i));
  }
  auto run = [&](size_t batch_size) {
    auto projection = Projection::Create(spec);
    REQUIRE(projection);
    std::vector<std::string> kept;
    int64_t removed = 0;
    for (size_t begin = 0; begin < records.size(); begin += batch_size) {
      const size_t end = std::min(records.size(), begin + batch_size);
      RecordBatch batch =
          Decode(std::vector<std::string>(records.begin() + begin, records.begin() + end), spec.schema);
      removed += (*projection)->Apply(batch);
      for (size_t row = 0; row < batch.num_rows; ++row) {
        kept.push_back(fmt::format("{}={}", batch.columns[0].String(row),
                                   batch.columns.back().f64[row]));
      }
    }
    CHECK(removed == 34);
    return kept;
  };
  const auto whole = run(100);
  CHECK(whole.size() == 66);
  CHECK(run(7) == whole);
  CHECK(run(1) == whole);
}


// The schema fields ColumnsUsed marks, by name.
std::vector<std::string> UsedNames(const PipelineSpec& spec) {
  auto used = ColumnsUsed(spec);
  REQUIRE(used);
  std::vector<std::string> names;
  for (size_t f = 0; f < used->size(); ++f) {
    if ((*used)[f]) names.push_back(spec.schema.fields[f].name);
  }
  return names;
}

TEST_CASE("the columns a pipeline reads are those of its groupBy, aggregates, expressions and "
          "drift",
          "[expr][projection]") {
  PipelineSpec spec;
  spec.schema = InferenceSchema();
  spec.query.group_by = {"model_id"};
  spec.query.aggregates = {{AggregateFn::kCount, {}, false, 0, "", "count", {}},
                           {AggregateFn::kMean, {}, false, 0, "prediction", "mean(prediction)", {}}};
  CHECK(UsedNames(spec) == std::vector<std::string>{"model_id", "prediction"});

  // Derived columns and the filter read theirs (through earlier derived columns too).
  spec.query.derived = {
      {"abs_error", "abs(prediction - ground_truth) AS abs_error", FieldType::kDouble, {}},
      {"scaled", "abs_error * clicks AS scaled", FieldType::kDouble, {}}};
  spec.query.where = "ok";
  CHECK(UsedNames(spec) ==
        std::vector<std::string>{"model_id", "prediction", "ground_truth", "clicks", "ok"});

  // Drift: its series, and without a window the first timestamp column dates its values.
  spec.drift.enabled = true;
  spec.drift.series = {"features"};
  CHECK(UsedNames(spec) == std::vector<std::string>{"model_id", "prediction", "ground_truth",
                                                    "clicks", "ok", "event_time", "features"});

  // Segments: a segmentBy column nothing else reads is decoded too (else every row would fall
  // in the segment of a null value).
  spec.drift.segment_by = {"model_version"};
  CHECK(UsedNames(spec) == std::vector<std::string>{"model_id", "model_version", "prediction",
                                                    "ground_truth", "clicks", "ok", "event_time",
                                                    "features"});

  // A query without aggregation emits its select list, or every column.
  PipelineSpec rows;
  rows.schema = InferenceSchema();
  rows.query.select = {"model_id", "shown"};
  CHECK(UsedNames(rows) == std::vector<std::string>{"model_id", "shown"});
  rows.query.select.clear();
  CHECK(UsedNames(rows).size() == rows.schema.fields.size());
}

}  // namespace
}  // namespace driftd
