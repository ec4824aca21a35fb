// source.valueFormat and source.valueOptions: checked against the value formats' declarations
// (connectors' ValueFormats()), problems named by key and line.
#include <string>

#include <catch2/catch.hpp>

#include "config/loader.h"
#include "connectors/registry.h"
#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

constexpr std::string_view kHead = R"(name: formats
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:9092", subscribe: logs}
)";

constexpr std::string_view kTail = R"(sinks:
  - {format: console}
)";

PipelineResult Parse(std::string_view source_extra) {
  LoadOptions options = testing::TestOptions();
  options.value_formats = &ValueFormats();
  std::string text = std::string(kHead) + std::string(source_extra) + std::string(kTail);
  return ParsePipeline(text, "test.yaml", options);
}

TEST_CASE("a source without valueFormat decodes its records as JSON", "[config][format]") {
  auto spec = Parse("");
  REQUIRE(spec);
  CHECK(spec->source.value_format == "json");
  auto decoder = CreateValueDecoder(ValueFormats(), *spec);
  REQUIRE(decoder);
  InputChunk chunk;
  chunk.Append(R"({"model_id":"m1","prediction":0.25})", RecordPosition{0, 7});
  chunk.Seal();
  RecordBatch batch;
  batch.Reset(spec->schema);
  REQUIRE((*decoder)->Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == 1);
  CHECK(batch.columns[0].String(0) == "m1");
  CHECK(batch.columns[1].f64[0] == 0.25);
}

TEST_CASE("a misspelt valueFormat is an error at its line with the nearest format",
          "[config][format]") {
  auto spec = Parse("  valueFormat: jsn\n");
  REQUIRE_FALSE(spec);
  const std::string text = testing::ProblemText(spec);
  CHECK_THAT(text, Catch::Contains("test.yaml:8:16: source.valueFormat: unknown value format "
                                   "'jsn'"));
  CHECK_THAT(text, Catch::Contains("did you mean 'json'?"));
}

TEST_CASE("an option the value format does not declare is an error at its line",
          "[config][format]") {
  auto spec = Parse("  valueFormat: json\n  valueOptions: {schemaFile: x.avsc}\n");
  REQUIRE_FALSE(spec);
  CHECK_THAT(testing::ProblemText(spec),
             Catch::Contains("test.yaml:9:18: source.valueOptions.schemaFile: unknown option "
                             "'schemaFile'"));
}

}  // namespace
}  // namespace driftd
