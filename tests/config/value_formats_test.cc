// source.valueFormat and source.valueOptions, and a sink's valueFormat and valueOptions:
// checked against the value formats' declarations (connectors' ValueFormats()), problems named
// by key and line.
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "tests/config/config_test_util.h"
#include "tests/support/test_support.h"

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

TEST_CASE("a missing .avsc is an error at the schemaFile option's line", "[config][format]") {
  auto spec = Parse("  valueFormat: avro\n  valueOptions:\n    schemaFile: /nonexistent/v1.avsc\n");
  REQUIRE_FALSE(spec);
  CHECK_THAT(testing::ProblemText(spec),
             Catch::Contains("test.yaml:10:17: source.valueOptions.schemaFile: cannot read "
                             "'/nonexistent/v1.avsc': No such file or directory"));
}

TEST_CASE("an unknown protobuf message type is an error at the messageType option's line",
          "[config][format]") {
  auto spec = Parse(std::string("  valueFormat: protobuf\n  valueOptions:\n    descriptorFile: ") +
                    DRIFTD_TEST_DESCRIPTOR + "\n    messageType: driftd.test.Inferense\n");
  REQUIRE_FALSE(spec);
  const std::string text = testing::ProblemText(spec);
  CHECK_THAT(text, Catch::Contains("test.yaml:11:18: source.valueOptions.messageType: "));
  CHECK_THAT(text, Catch::Contains("no message type 'driftd.test.Inferense'") &&
                       Catch::Contains("driftd.test.Inference"));
}

TEST_CASE("avro and protobuf refuse struct, map and array<string> fields, naming the field",
          "[config][format][types]") {
  for (const std::string& format :
       {std::string("avro\n  valueOptions: {schemaFile: /nonexistent/v1.avsc}\n"),
        std::string("protobuf\n  valueOptions: {descriptorFile: ") + DRIFTD_TEST_DESCRIPTOR +
            ", messageType: driftd.test.Inference}\n"}) {
    LoadOptions options = testing::TestOptions();
    options.value_formats = &ValueFormats();
    std::string text = std::string(kHead) + "  valueFormat: " + format + std::string(kTail);
    text.replace(text.find("  - {name: prediction, type: double}\n"), 0,
                 "  - name: segment\n    type: struct<country:string>\n");
    auto spec = ParsePipeline(text, "test.yaml", options);
    REQUIRE_FALSE(spec);
    const std::string name = format.substr(0, format.find('\n'));
    INFO(testing::ProblemText(spec));
    CHECK_THAT(testing::ProblemText(spec),
               Catch::Contains(fmt::format("source.valueFormat: schema field 'segment' (a struct) "
                                           "cannot be read from {} records",
                                           name)) &&
                   Catch::Contains("need valueFormat json"));
    std::string with_map = std::string(kHead) + "  valueFormat: " + format + std::string(kTail);
    with_map.replace(with_map.find("  - {name: prediction, type: double}\n"), 0,
                     "  - {name: features, type: \"map<string,double>\"}\n");
    CHECK_THAT(testing::ProblemText(ParsePipeline(with_map, "test.yaml", options)),
               Catch::Contains("schema field 'features' (map<string,double>) cannot be read"));
  }
}

TEST_CASE("a binary value format on a line-oriented source is refused", "[config][format]") {
  LoadOptions options = testing::TestOptions();
  options.value_formats = &ValueFormats();
  std::string text(testing::kMinimalPipeline);
  text.replace(text.find("  options: {path: /tmp/in}\n"), 0,
               "  valueFormat: protobuf\n  valueOptions: {descriptorFile: x.desc, messageType: "
               "a.B}\n");
  auto spec = ParsePipeline(text, "test.yaml", options);
  REQUIRE_FALSE(spec);
  CHECK_THAT(testing::ProblemText(spec),
             Catch::Contains("source.valueFormat: value format protobuf is binary and needs a "
                             "source whose records come whole"));
}

// ---- sinks ---------------------------------------------------------------------------------

constexpr std::string_view kSinkHead = R"(name: avro-out
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:9092", subscribe: logs}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
sinks:
  - name: stats
)";

// The real connectors' declarations: the kafka sink is the one that takes a valueFormat.
PipelineResult ParseSink(std::string_view sink) {
  LoadOptions options = testing::TestOptions();
  options.catalog = &ConnectorDeclarations();
  options.value_formats = &ValueFormats();
  return ParsePipeline(std::string(kSinkHead) + std::string(sink), "test.yaml", options);
}

constexpr std::string_view kKafkaSink =
    "    format: kafka\n"
    "    options: {topic: model-stats, kafka.bootstrap.servers: \"127.0.0.1:9092\"}\n";

TEST_CASE("a kafka sink with valueFormat avro gets a writer schema derived from its rows",
          "[config][format][sink]") {
  auto spec = ParseSink(std::string(kKafkaSink) + "    valueFormat: avro\n");
  INFO(testing::ProblemText(spec));
  REQUIRE(spec);
  const SinkSpec& sink = spec->sinks[0];
  CHECK(sink.value_format == "avro");
  CHECK(sink.value_options.GetString("schemaRegistryTimeout") == "10 seconds");  // defaults in
  auto encoder = CreateValueEncoder(ValueFormats(), *spec, sink, "model-stats-value");
  REQUIRE(encoder);
  const std::string& schema = (*encoder)->schema_text();
  CHECK_THAT(schema, Catch::Contains(R"("name": "model_id", "type": "string")") &&
                         Catch::Contains(R"("name": "count", "type": "long")") &&
                         Catch::Contains(R"("name": "mean_prediction")"));
  // Without valueFormat, a sink writes JSON.
  auto json = ParseSink(kKafkaSink);
  REQUIRE(json);
  CHECK(json->sinks[0].value_format == "json");
}

TEST_CASE("an avro sink of a plain select is refused at validate for a map or struct column, "
          "and writes an array<string> column as an array of strings",
          "[config][format][sink][types]") {
  auto pipeline = [](std::string_view select) {
    LoadOptions options = testing::TestOptions();
    options.catalog = &ConnectorDeclarations();
    options.value_formats = &ValueFormats();
    return ParsePipeline(fmt::format(R"(name: formats
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: features, type: "map<string, double>"}}
  - {{name: segment, type: "struct<country:string>"}}
  - {{name: tags, type: "array<string>"}}
source:
  format: kafka
  options: {{kafka.bootstrap.servers: "127.0.0.1:9092", subscribe: logs}}
query:
  select: [{}]
sinks:
  - name: rows
    format: kafka
    options: {{topic: rows, kafka.bootstrap.servers: "127.0.0.1:9092"}}
    valueFormat: avro
)",
                                     select),
                         "test.yaml", options);
  };
  auto map = pipeline("model_id, features");
  REQUIRE_FALSE(map);
  CHECK_THAT(testing::ProblemText(map),
             Catch::Contains("test.yaml:16:18: sinks[0].valueFormat: sink 'rows' (stats stream): "
                             "column 'features' is a map"));
  auto member = pipeline("model_id, segment.country");
  REQUIRE_FALSE(member);
  CHECK_THAT(testing::ProblemText(member),
             Catch::Contains("column 'segment.country' is a struct's member"));
  auto tags = pipeline("model_id, tags");
  INFO(testing::ProblemText(tags));
  REQUIRE(tags);
  auto encoder = CreateValueEncoder(ValueFormats(), *tags, tags->sinks[0], "rows-value");
  REQUIRE(encoder);
  CHECK_THAT((*encoder)->schema_text(),
             Catch::Contains(R"("name": "tags")") && Catch::Contains(R"("items": ["null", "string"])"));
}

TEST_CASE("a valueFormat on a sink that writes JSON files is refused at its line",
          "[config][format][sink]") {
  auto spec = ParseSink("    format: file\n    options: {path: /tmp/out}\n    valueFormat: avro\n");
  REQUIRE_FALSE(spec);
  CHECK_THAT(testing::ProblemText(spec),
             Catch::Contains("test.yaml:15:18: sinks[0].valueFormat: the file sink writes rows "
                             "as JSON; valueFormat and valueOptions apply to sinks that write "
                             "one message per row (kafka)"));
}

TEST_CASE("a sink's valueFormat must be one that sinks can write", "[config][format][sink]") {
  SECTION("protobuf is read only") {
    auto spec = ParseSink(std::string(kKafkaSink) + "    valueFormat: protobuf\n");
    REQUIRE_FALSE(spec);
    CHECK_THAT(testing::ProblemText(spec),
               Catch::Contains("test.yaml:15:18: sinks[0].valueFormat: value format "
                               "'protobuf' can be read by a source but not written by a sink "
                               "(sink value formats: json, avro)"));
  }
  SECTION("a misspelling gets the nearest one") {
    auto spec = ParseSink(std::string(kKafkaSink) + "    valueFormat: avor\n");
    REQUIRE_FALSE(spec);
    CHECK_THAT(testing::ProblemText(spec),
               Catch::Contains("sinks[0].valueFormat: unknown value format 'avor'") &&
                   Catch::Contains("did you mean 'avro'?"));
  }
  SECTION("an option of the source side only") {
    auto spec = ParseSink(std::string(kKafkaSink) +
                          "    valueFormat: avro\n    valueOptions: {readerSchemaFile: r.avsc}\n");
    REQUIRE_FALSE(spec);
    CHECK_THAT(testing::ProblemText(spec),
               Catch::Contains("test.yaml:16:20: sinks[0].valueOptions.readerSchemaFile: "
                               "unknown option 'readerSchemaFile'"));
  }
}

TEST_CASE("a sink's .avsc is read at validate: unreadable, or not covering the rows, is an "
          "error at the schemaFile option's line",
          "[config][format][sink]") {
  SECTION("unreadable") {
    auto spec = ParseSink(std::string(kKafkaSink) +
                          "    valueFormat: avro\n"
                          "    valueOptions:\n"
                          "      schemaFile: /nonexistent/stats.avsc\n");
    REQUIRE_FALSE(spec);
    CHECK_THAT(testing::ProblemText(spec),
               Catch::Contains("test.yaml:17:19: sinks[0].valueOptions.schemaFile: sink 'stats' "
                               "(stats stream): cannot read '/nonexistent/stats.avsc': No such "
                               "file or directory"));
  }
  SECTION("a column the schema lacks") {
    testing::TempDir dir("driftd-sink-avsc");
    std::ofstream(dir / "stats.avsc") << R"({"type": "record", "name": "S", "fields": [
        {"name": "model_id", "type": "string"}, {"name": "count", "type": "long"}]})";
    auto spec = ParseSink(std::string(kKafkaSink) +
                          "    valueFormat: avro\n"
                          "    valueOptions:\n"
                          "      schemaFile: " + dir / "stats.avsc" + "\n");
    REQUIRE_FALSE(spec);
    CHECK_THAT(testing::ProblemText(spec),
               Catch::Contains("test.yaml:17:19: sinks[0].valueOptions.schemaFile: sink 'stats' "
                               "(stats stream): '" + dir / "stats.avsc" +
                               "' does not cover the rows: the writer schema's record S has no "
                               "field 'mean_prediction' for column 'mean(prediction)' (double)"));
  }
}

}  // namespace
}  // namespace driftd
