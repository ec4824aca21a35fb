// Expressions over named and nested features: a struct's fields by dotted name, map values
// by key (features['amount'] and features.amount), array<string> elements, size() of every
// collection, and the rows a filter keeps with their maps intact.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/expr/expr.h"
#include "engine/expr/projection.h"
#include "engine/json_decoder.h"
#include "tests/support/decoded_rows.h"

namespace driftd {
namespace {

Schema NestedSchema() {
  Schema schema;
  auto add = [&](const std::string& name, std::string_view type) {
    auto spec = ParseTypeSpec(type);
    REQUIRE(spec);
    AddDeclaredField(schema, name, *spec, true);
  };
  add("model_id", "string");
  add("segment", "struct<country:string,channel:string,user:struct<age:int>>");
  add("features", "map<string,double>");
  add("labels", "map<string,string>");
  add("tags", "array<string>");
  return schema;
}

const std::vector<std::string> kRecords = {
    R"({"model_id":"fraud-v7","segment":{"country":"DE","channel":"app","user":{"age":31}},)"
    R"("features":{"amount":42.1,"age_days":null},"labels":{"device":"ios"},"tags":["a","b"]})",
    R"({"model_id":"fraud-v7","segment":{"country":"FR"},"features":{"age_days":3,"amount":7},)"
    R"("labels":{},"tags":[]})",
    R"({"model_id":"fraud-v8","segment":null,"features":null,"tags":null})",
};

RecordBatch Decode(const Schema& schema) { return testing::DecodedRows(schema, kRecords); }

// The expression's value in every row, as text ("null" for NULL).
std::vector<std::string> Values(std::string_view text) {
  const Schema schema = NestedSchema();
  RecordBatch batch = Decode(schema);
  auto compiled = expr::Expression::Compile(text, schema);
  if (!compiled) FAIL("'" << text << "' did not compile: " << compiled.error().message);
  const Column& result = compiled->Evaluate(batch);
  std::vector<std::string> out;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    if (result.IsNull(row)) {
      out.emplace_back("null");
    } else if (result.type == FieldType::kString) {
      out.emplace_back(result.String(row));
    } else if (result.type == FieldType::kDouble) {
      out.push_back(fmt::format("{}", result.f64[row]));
    } else {
      out.push_back(fmt::format("{}", result.i64[row]));
    }
  }
  return out;
}

std::string ErrorOf(std::string_view text) {
  auto compiled = expr::Expression::Compile(text, NestedSchema());
  if (compiled) FAIL("'" << text << "' compiled, but should not have");
  return compiled.error().message;
}

using Rows = std::vector<std::string>;

TEST_CASE("a struct's fields are columns by their dotted names", "[expr][types]") {
  CHECK(Values("segment.country") == Rows{"DE", "FR", "null"});
  CHECK(Values("segment.user.age + 1") == Rows{"32", "null", "null"});
  CHECK(Values("`segment`.`channel` = 'app'") == Rows{"1", "null", "null"});
  CHECK(ErrorOf("segment.cuntry") == "unknown column 'segment.cuntry'");
  CHECK(ErrorOf("abs(segment.user.age).x") ==
        "'.' names a field of a struct or a key of a map: it must follow a column's name");
}

TEST_CASE("map values are read by key, with brackets or a dot", "[expr][types]") {
  CHECK(Values("features['amount']") == Rows{"42.1", "7", "null"});
  CHECK(Values("features.amount * 2") == Rows{"84.2", "14", "null"});
  CHECK(Values("features['age_days']") == Rows{"null", "3", "null"});  // a null value
  CHECK(Values("features['missing']") == Rows{"null", "null", "null"});
  CHECK(Values("labels.device") == Rows{"ios", "null", "null"});
  CHECK(Values("coalesce(labels['device'], 'unknown')") == Rows{"ios", "unknown", "unknown"});
  CHECK(Values("features[model_id]") == Rows{"null", "null", "null"});  // any string key
  CHECK(ErrorOf("features[0]").find("a map key needs a string") != std::string::npos);
}

TEST_CASE("array<string> elements by index and size() of every collection", "[expr][types]") {
  CHECK(Values("tags[1]") == Rows{"b", "null", "null"});
  CHECK(Values("tags[5]") == Rows{"null", "null", "null"});
  CHECK(Values("size(tags)") == Rows{"2", "0", "null"});
  CHECK(Values("size(features)") == Rows{"2", "2", "null"});
  CHECK(Values("size(labels)") == Rows{"1", "0", "null"});
  CHECK(ErrorOf("features = features").find("cannot compare map<string,double> values") !=
        std::string::npos);
  CHECK(ErrorOf("CAST(tags AS string)").find("CAST needs a scalar value") != std::string::npos);
}

TEST_CASE("a filter on a map value keeps the other rows' maps and structs whole",
          "[expr][types]") {
  PipelineSpec spec;
  spec.schema = NestedSchema();
  spec.query.where = "features['amount'] < 10 OR segment.country IS NULL";
  auto projection = Projection::Create(spec);
  REQUIRE(projection);
  RecordBatch batch = Decode(spec.schema);
  CHECK((*projection)->Apply(batch) == 1);
  REQUIRE(batch.num_rows == 2);
  const Column& features = batch.columns[static_cast<size_t>(spec.schema.IndexOf("features"))];
  std::string first;
  AppendJsonValue(first, features, 0);
  CHECK(first == R"({"age_days":3,"amount":7})");
  std::string tags;
  AppendJsonValue(tags, batch.columns[static_cast<size_t>(spec.schema.IndexOf("tags"))], 0);
  CHECK(tags == "[]");
  CHECK(batch.columns[static_cast<size_t>(spec.schema.IndexOf("segment.country"))].String(0) ==
        "FR");
  CHECK(batch.columns[static_cast<size_t>(spec.schema.IndexOf("features"))].IsNull(1));
}

}  // namespace
}  // namespace driftd
