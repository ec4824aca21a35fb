// Kafka metadata columns (key, topic, partition, offset, timestamp, timestampType, headers):
// which of them a pipeline reads, and the problems of naming them where they do not exist or
// where a schema field has the same name.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

using testing::ParseText;
using testing::ProblemText;

// {format} and {query} are replaced by each test's source format and query section.
constexpr std::string_view kPipeline = R"(name: metadata
schema:
  - {name: model_id, type: string}
  - {name: model_version, type: string}
  - {name: prediction, type: double}
source:
  format: {format}
query:
{query}
sinks:
  - {format: console}
)";

std::string Pipeline(std::string_view format, std::string_view query) {
  std::string yaml(kPipeline);
  std::string source(format);
  if (format == "kafka") {
    source += "\n  options: {kafka.bootstrap.servers: \"localhost:9092\", subscribe: logs}";
  } else if (format == "file") {
    source += "\n  options: {path: /tmp/in}";
  }
  yaml.replace(yaml.find("{format}"), 8, source);
  yaml.replace(yaml.find("{query}\n"), 8, std::string(query));
  return yaml;
}

ConfigProblem OnlyError(const PipelineResult& result) {
  REQUIRE_FALSE(result);
  INFO(FormatProblems("test.yaml", result.error()));
  REQUIRE(testing::ErrorCount(result) == 1);
  return result.error().front();
}

TEST_CASE("a kafka pipeline reads the metadata columns it names, and only those",
          "[config][metadata]") {
  auto result = ParseText(Pipeline("kafka", R"(  where: partition = 1 AND headers != '[]'
  select:
    - CAST(key AS STRING) AS model_key
  groupBy: [model_key]
  window: {column: timestamp, size: 1 minute}
  aggregates: [count, max(offset)]
)"));
  INFO(ProblemText(result));
  REQUIRE(result);
  // In MetadataColumnDefs order, whatever the order they are named in.
  CHECK(result->query.metadata ==
        std::vector<MetadataColumn>{MetadataColumn::kKey, MetadataColumn::kPartition,
                                    MetadataColumn::kOffset, MetadataColumn::kTimestamp,
                                    MetadataColumn::kHeaders});
  const Schema columns = QuerySchema(*result);
  CHECK(columns.IndexOf("key") == 3);
  CHECK(columns.fields[4].name == "partition");
  CHECK(columns.fields[4].type == FieldType::kInt);
  CHECK(columns.fields[6].type == FieldType::kTimestamp);
  CHECK(columns.IndexOf("model_key") == 8);
}

TEST_CASE("a kafka pipeline that names no metadata column produces none", "[config][metadata]") {
  auto result = ParseText(Pipeline("kafka", R"(  where: model_version != 'shadow'
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
)"));
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->query.metadata.empty());
  CHECK(QuerySchema(*result).fields.size() == 3);
}

TEST_CASE("a plain kafka query may select metadata columns", "[config][metadata]") {
  auto result = ParseText(Pipeline("kafka", "  select: [model_id, topic, timestampType]\n"));
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->query.select == std::vector<std::string>{"model_id", "topic", "timestampType"});
  CHECK(result->query.metadata ==
        std::vector<MetadataColumn>{MetadataColumn::kTopic, MetadataColumn::kTimestampType});
}

TEST_CASE("a metadata column with a source other than kafka is an error naming line and column",
          "[config][metadata]") {
  SECTION("in an expression") {
    const ConfigProblem problem =
        OnlyError(ParseText(Pipeline("file", "  where: model_id = 'a' AND partition = 2\n")));
    CHECK(problem.path == "query.where");
    CHECK(problem.mark.line == 10);
    CHECK(problem.mark.column == 29);
    CHECK_THAT(problem.message,
               Catch::Matchers::Contains("'partition' is a Kafka metadata column, and the file "
                                         "source has none"));
  }
  SECTION("as a groupBy column") {
    const ConfigProblem problem = OnlyError(ParseText(Pipeline("rate", R"(  groupBy: [key]
  aggregates: [count]
)")));
    CHECK(problem.path == "query.groupBy[0]");
    CHECK(problem.mark.line == 9);
    CHECK_THAT(problem.message, Catch::Matchers::Contains("groupBy column 'key'") &&
                                    Catch::Matchers::Contains("the rate source has none"));
  }
}

TEST_CASE("a schema field named like a metadata column is ambiguous where the query reads it",
          "[config][metadata]") {
  std::string yaml = Pipeline("kafka", R"(  groupBy: [model_id]
  window: {column: timestamp, size: 1 minute}
  aggregates: [count]
)");
  yaml.replace(yaml.find("schema:\n"), 8, "schema:\n  - {name: timestamp, type: timestamp}\n");
  const ConfigProblem problem = OnlyError(ParseText(yaml));
  CHECK(problem.path == "query.window.column");
  CHECK(problem.mark.line == 12);
  CHECK_THAT(problem.message,
             Catch::Matchers::Contains("window column 'timestamp' is ambiguous") &&
                 Catch::Matchers::Contains("field 'timestamp' (line 3)"));

  SECTION("and is an ordinary field where nothing reads it") {
    std::string unread = Pipeline("kafka", "  where: prediction > 0\n");
    unread.replace(unread.find("schema:\n"), 8, "schema:\n  - {name: offset, type: long}\n");
    auto result = ParseText(unread);
    INFO(ProblemText(result));
    REQUIRE(result);
    CHECK(result->query.metadata.empty());
  }
}

TEST_CASE("a misspelt metadata column is suggested, and a derived column cannot take its name",
          "[config][metadata]") {
  const ConfigProblem misspelt =
      OnlyError(ParseText(Pipeline("kafka", "  where: partiton = 0\n")));
  CHECK_THAT(misspelt.message, Catch::Matchers::Contains("did you mean 'partition'?"));

  const ConfigProblem taken =
      OnlyError(ParseText(Pipeline("kafka", "  select: [\"prediction * 2 AS offset\"]\n")));
  CHECK_THAT(taken.message,
             Catch::Matchers::Contains("derived column 'offset' is already a column (a Kafka "
                                       "record's metadata column)"));
}

}  // namespace
}  // namespace driftd
