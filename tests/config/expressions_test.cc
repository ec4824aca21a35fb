// query.where and derived columns in query.select: what loads, and where in the file each
// problem inside an expression is reported (line and column of the offending token).
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

using testing::ParseText;
using testing::ProblemText;

// {query} is replaced by each test's query section.
constexpr std::string_view kPipeline = R"(name: expressions
schema:
  - {name: model_id, type: string}
  - {name: model_version, type: string}
  - {name: event_time, type: timestamp}
  - {name: features, type: array<double>}
  - {name: prediction, type: double}
  - {name: ground_truth, type: double}
source:
  format: file
  options: {path: /tmp/in}
query:
{query}
sinks:
  - {format: console}
)";

std::string WithQuery(std::string_view query) {
  std::string yaml(kPipeline);
  yaml.replace(yaml.find("{query}\n"), 8, std::string(query));
  return yaml;
}

ConfigProblem OnlyError(const PipelineResult& result) {
  REQUIRE_FALSE(result);
  INFO(FormatProblems("test.yaml", result.error()));
  REQUIRE(testing::ErrorCount(result) == 1);
  return result.error().front();
}

TEST_CASE("a filter and derived columns load, and aggregates, groupBy and drift may use them",
          "[config][expr]") {
  auto result = ParseText(WithQuery(R"(  where: model_version != 'shadow' AND abs_error < 10
  select:
    - abs(prediction - ground_truth) AS abs_error
    - CASE WHEN prediction > 0.5 THEN 'high' ELSE 'low' END AS band
    - size(features) AS dims
  groupBy: [model_id, band]
  aggregates: [count, mean(abs_error), max(dims)]
drift:
  series: [abs_error, prediction]
)"));
  INFO(ProblemText(result));
  REQUIRE(result);
  const QuerySpec& query = result->query;
  CHECK(query.where == "model_version != 'shadow' AND abs_error < 10");
  CHECK(query.where_mark.line == 13);
  REQUIRE(query.derived.size() == 3);
  CHECK(query.derived[0].name == "abs_error");
  CHECK(query.derived[0].type == FieldType::kDouble);
  CHECK(query.derived[0].text == "abs(prediction - ground_truth) AS abs_error");
  CHECK(query.derived[1].type == FieldType::kString);
  CHECK(query.derived[2].type == FieldType::kInt);
  CHECK(result->drift.series == std::vector<std::string>{"abs_error", "prediction"});
  const Schema columns = QuerySchema(*result);
  CHECK(columns.IndexOf("abs_error") == 6);
  CHECK(columns.IndexOf("dims") == 8);
}

TEST_CASE("a plain query selects schema and derived columns in order", "[config][expr]") {
  auto result = ParseText(WithQuery(R"(  select: [model_id, "prediction * 100 AS pct", "`model_version`"]
)"));
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->query.select == std::vector<std::string>{"model_id", "pct", "model_version"});
  REQUIRE(result->query.derived.size() == 1);
}

TEST_CASE("a misspelt function is reported at its line and column, with what was meant",
          "[config][expr]") {
  const ConfigProblem problem = OnlyError(ParseText(WithQuery(R"(  select:
    - asb(prediction - ground_truth) AS abs_error
)")));
  CHECK(problem.path == "query.select[0]");
  CHECK(problem.mark.line == 14);
  CHECK(problem.mark.column == 7);
  CHECK_THAT(problem.message, Catch::Matchers::Contains("unknown function 'asb'") &&
                                  Catch::Matchers::Contains("did you mean 'abs'?"));
}

TEST_CASE("a misspelt column inside an expression points at the name", "[config][expr]") {
  const ConfigProblem problem =
      OnlyError(ParseText(WithQuery("  where: \"model_version != 'shadow' AND predicton > 0\"\n")));
  CHECK(problem.path == "query.where");
  CHECK(problem.mark.line == 13);
  // The quote is at column 10; "predicton" starts 30 characters into the value.
  CHECK(problem.mark.column == 10 + 1 + 30);
  CHECK_THAT(problem.message, Catch::Matchers::Contains("unknown column 'predicton'") &&
                                  Catch::Matchers::Contains("did you mean 'prediction'?"));
}

TEST_CASE("a type mismatch names the operand, its line and column", "[config][expr]") {
  const ConfigProblem problem =
      OnlyError(ParseText(WithQuery("  where: model_version > 2 OR prediction > 0.5\n")));
  CHECK(problem.path == "query.where");
  CHECK(problem.mark.line == 13);
  CHECK(problem.mark.column == 26);
  CHECK_THAT(problem.message,
             Catch::Matchers::Contains("type mismatch: '>' cannot compare string with long"));
}

TEST_CASE("a problem in a block scalar is placed on its own line", "[config][expr]") {
  const ConfigProblem problem = OnlyError(ParseText(WithQuery(R"(  where: |
    model_version != 'shadow'
      AND sqrt(prediction, 2) > 1
)")));
  CHECK(problem.mark.line == 15);
  CHECK(problem.mark.column == 11);
  CHECK_THAT(problem.message, Catch::Matchers::Contains("sqrt takes sqrt(number), found 2"));
}

TEST_CASE("where must be a boolean condition", "[config][expr]") {
  const ConfigProblem problem = OnlyError(ParseText(WithQuery("  where: prediction * 2\n")));
  CHECK(problem.path == "query.where");
  CHECK_THAT(problem.message, Catch::Matchers::Contains("needs a boolean condition, found double"));
}

TEST_CASE("a computed select item needs a name, and a name is not taken twice", "[config][expr]") {
  CHECK_THAT(OnlyError(ParseText(WithQuery("  select: [prediction * 2]\n"))).message,
             Catch::Matchers::Contains("names no column; write 'prediction * 2 AS name'"));
  CHECK_THAT(OnlyError(ParseText(WithQuery("  select: [\"prediction * 2 AS prediction\"]\n")))
                 .message,
             Catch::Matchers::Contains("derived column 'prediction' is already a column"));
  CHECK_THAT(OnlyError(ParseText(WithQuery("  select: [prediction, prediction]\n"))).message,
             Catch::Matchers::Contains("selected twice"));
}

TEST_CASE("drift watches a derived string or boolean column by its categories, not a timestamp",
          "[config][expr]") {
  auto categorical = ParseText(WithQuery(R"(  select: ["CASE WHEN prediction > 0.5 THEN 'high' ELSE 'low' END AS band"]
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [band]
)"));
  INFO(ProblemText(categorical));
  REQUIRE(categorical);
  CHECK(categorical->drift.series == std::vector<std::string>{"band"});
  // A boolean: categorical with two values, true and false.
  auto boolean = ParseText(WithQuery(R"(  select: ["prediction > 0.5 AS p"]
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [p]
)"));
  INFO(ProblemText(boolean));
  REQUIRE(boolean);
  CHECK(boolean->drift.series == std::vector<std::string>{"p"});
  const ConfigProblem timestamp = OnlyError(ParseText(WithQuery(R"(  select: ["CAST(prediction AS timestamp) AS p"]
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [p]
)")));
  CHECK_THAT(timestamp.message, Catch::Matchers::Contains("is of type timestamp"));
}

TEST_CASE("the fingerprint holds derived columns' names and types, not their expressions",
          "[config][expr]") {
  auto a = ParseText(WithQuery("  select: [\"prediction * 2 AS x\"]\n  groupBy: [model_id]\n  aggregates: [mean(x)]\n"));
  auto b = ParseText(WithQuery("  select: [\"prediction * 3 AS x\"]\n  where: prediction > 0\n  groupBy: [model_id]\n  aggregates: [mean(x)]\n"));
  auto c = ParseText(WithQuery("  select: [\"CAST(prediction AS bigint) AS x\"]\n  groupBy: [model_id]\n  aggregates: [mean(x)]\n"));
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(PipelineFingerprintJson(*a) == PipelineFingerprintJson(*b));
  CHECK(PipelineFingerprintJson(*a) != PipelineFingerprintJson(*c));
  auto plain = ParseText(WithQuery("  groupBy: [model_id]\n  aggregates: [count]\n"));
  REQUIRE(plain);
  CHECK(PipelineFingerprintJson(*plain).find("derived") == std::string::npos);
}

}  // namespace
}  // namespace driftd
