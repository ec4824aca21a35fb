// A sink's options and a value format's are bound once, at load, from their declarations (the
// real connectors' and formats'), as a source's are: a value of the wrong type, out of its
// declared range, an unknown option, a rule across options or between two sinks, each refused at
// its key and line; and the options the loader bound are what the sink runs with.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "tests/config/config_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

// A pipeline whose sinks are `sinks` (YAML list items, from line 8 on).
PipelineResult WithSinks(const std::string& sinks, const std::string& source = "{format: rate}") {
  LoadOptions load = testing::TestOptions();
  load.catalog = &ConnectorDeclarations();
  load.value_formats = &ValueFormats();
  return ParsePipeline(fmt::format(R"(name: sinks
schema:
  - {{name: model_id, type: string, nullable: false}}
source:
  {}
query: {{groupBy: [model_id], aggregates: [count]}}
sinks:
{})",
                                   source, sinks),
                       "test.yaml", load);
}

constexpr std::string_view kKafkaSource =
    "{format: kafka, options: {kafka.bootstrap.servers: \"127.0.0.1:9092\", subscribe: logs}, "
    "valueFormat: avro, valueOptions: {schemaRegistryUrl: \"http://registry:8081\"}}";

struct Case {
  std::string what;
  std::string sinks;
  std::string expected;  // "test.yaml:LINE:COLUMN: path: message"
};

void CheckRefused(const Case& c) {
  INFO(c.what);
  auto spec = WithSinks(c.sinks);
  REQUIRE_FALSE(spec);
  const std::string text = testing::ProblemText(spec);
  INFO(text);
  CHECK_THAT(text, Catch::Contains(c.expected));
  CHECK(testing::ErrorCount(spec) == 1);
}

// The Kafka sinks deliver together under the name "kafka": a file sink of that name had the
// outbox mark a batch delivered to both once the file had it, and a crash before the Kafka
// transaction then lost the batch's Kafka output.
TEST_CASE("a sink of another format may not take the name the Kafka sinks deliver under",
          "[config][sinks]") {
  CheckRefused({"a file sink named kafka",
                "  - {name: kafka, format: file, stream: stats, options: {path: /tmp/out}}",
                "test.yaml:8:12: sinks[0].name: sink name 'kafka' is the name the kafka sinks "
                "deliver under together; name this file sink otherwise"});
  // A Kafka sink of that name is one of them, and another name is fine.
  CHECK(WithSinks("  - {name: kafka, format: kafka, stream: stats, options: "
                  "{kafka.bootstrap.servers: \"127.0.0.1:9092\", topic: stats}}"));
  CHECK(WithSinks("  - {name: kafka-copy, format: file, stream: stats, options: {path: /tmp/out}}"));
}

TEST_CASE("a sink option of the wrong type is refused at its key and line at load",
          "[config][options][sinks]") {
  const Case cases[] = {
      {"an integer", "  - format: console\n    options:\n      numRows: many\n",
       "test.yaml:10:16: sinks[0].options.numRows: expected a whole number, found 'many'"},
      {"a boolean", "  - format: console\n    options:\n      truncate: perhaps\n",
       "test.yaml:10:17: sinks[0].options.truncate: expected true or false, found 'perhaps'"},
      {"a choice",
       "  - format: webhook\n    options:\n      url: http://hooks/x\n      onFailure: retyr\n",
       "test.yaml:11:18: sinks[0].options.onFailure: expected one of dead_letter, drop, retry, "
       "found 'retyr'; did you mean 'retry'?"},
      {"a duration of a sink's value format",
       "  - format: kafka\n    options: {topic: t, kafka.bootstrap.servers: \"127.0.0.1:9092\"}\n"
       "    valueFormat: avro\n    valueOptions:\n      schemaRegistryTimeout: soon\n",
       "test.yaml:12:30: sinks[0].valueOptions.schemaRegistryTimeout: 'soon' is not a duration"},
  };
  for (const Case& c : cases) CheckRefused(c);
}

TEST_CASE("a sink option out of its declared range is refused at its key and line at load",
          "[config][options][sinks]") {
  const Case cases[] = {
      {"a negative row count", "  - format: console\n    options:\n      numRows: -1\n",
       "test.yaml:10:16: sinks[0].options.numRows: must not be negative, found -1"},
      {"digits past a double's", "  - format: console\n    options:\n      significantDigits: 18\n",
       "test.yaml:10:26: sinks[0].options.significantDigits: must be between 0 and 17, found 18"},
      {"a timeout of 0",
       "  - {format: console}\n  - format: webhook\n    options:\n      url: http://hooks/x\n"
       "      timeoutMs: 0\n",
       "test.yaml:12:18: sinks[1].options.timeoutMs: must be positive, found 0"},
      {"no attempt at all",
       "  - format: webhook\n    options:\n      url: http://hooks/x\n      maxAttempts: 0\n",
       "test.yaml:11:20: sinks[0].options.maxAttempts: must be positive, found 0"},
  };
  for (const Case& c : cases) CheckRefused(c);
}

TEST_CASE("an unknown sink option or value option is refused at its key and line at load",
          "[config][options][sinks]") {
  const Case cases[] = {
      {"a misspelt option", "  - format: console\n    options:\n      numRow: 5\n",
       "test.yaml:10:7: sinks[0].options.numRow: unknown option 'numRow' for the console sink; "
       "did you mean 'numRows'?"},
      {"a source's option on a sink",
       "  - format: file\n    options:\n      path: /tmp/out\n      maxFilesPerTrigger: 5\n",
       "test.yaml:11:7: sinks[0].options.maxFilesPerTrigger: unknown option "
       "'maxFilesPerTrigger' for the file sink"},
      {"a source-only value option on a sink",
       "  - format: kafka\n    options: {topic: t, kafka.bootstrap.servers: \"127.0.0.1:9092\"}\n"
       "    valueFormat: avro\n    valueOptions:\n      readerSchemaFile: r.avsc\n",
       "test.yaml:12:7: sinks[0].valueOptions.readerSchemaFile: unknown option "
       "'readerSchemaFile'"},
  };
  for (const Case& c : cases) CheckRefused(c);
}

TEST_CASE("a sink's own checks across its options name the option's key and line",
          "[config][options][sinks]") {
  const Case cases[] = {
      {"a url without a scheme", "  - format: webhook\n    options:\n      url: hooks/x\n",
       "test.yaml:10:12: sinks[0].options.url: webhook url 'hooks/x' has no scheme"},
      {"headers that are not strings",
       "  - format: webhook\n    options:\n      url: http://hooks/x\n      headers: {X-N: 1}\n",
       "test.yaml:11:16: sinks[0].options.headers: webhook header 'X-N' must be a string"},
      {"re-sends that outlive their alerts",
       "  - format: webhook\n    options:\n      url: http://hooks/x\n"
       "      alertmanagerResendInterval: 60\n      alertmanagerEndsAfter: 30\n",
       "test.yaml:12:30: sinks[0].options.alertmanagerEndsAfter: alertmanagerEndsAfter (30 s) "
       "must be more than alertmanagerResendInterval (60 s)"},
      {"a backoff that shrinks",
       "  - format: webhook\n    options:\n      url: http://hooks/x\n"
       "      backoffInitialMs: 500\n      backoffMaxMs: 100\n",
       "test.yaml:12:21: sinks[0].options.backoffMaxMs: must be at least backoffInitialMs (500 "
       "ms), found 100 ms"},
      {"pagerduty without its key",
       "  - format: webhook\n    options:\n      url: http://hooks/x\n      template: pagerduty\n",
       "test.yaml:11:17: sinks[0].options.template: template pagerduty needs routingKey"},
      {"an empty topic",
       "  - format: kafka\n    options:\n      topic: \"\"\n"
       "      kafka.bootstrap.servers: \"127.0.0.1:9092\"\n",
       "test.yaml:10:14: sinks[0].options.topic: must not be empty"},
      {"a producer setting librdkafka refuses",
       "  - format: kafka\n    options:\n      topic: t\n"
       "      kafka.bootstrap.servers: \"127.0.0.1:9092\"\n      kafka.linger.ms: soon\n",
       "test.yaml:12:24: sinks[0].options.kafka.linger.ms: "},
      {"a key column the stream's rows do not have",
       "  - format: kafka\n    options:\n      topic: t\n"
       "      kafka.bootstrap.servers: \"127.0.0.1:9092\"\n      keyColumn: model\n",
       "test.yaml:12:18: sinks[0].options.keyColumn: 'model' is not a column of the stats "
       "stream's rows that can key a record (a string, number or boolean): model_id, count"},
  };
  for (const Case& c : cases) CheckRefused(c);
}

TEST_CASE("a rule between two kafka sinks is refused at the later sink's option",
          "[config][options][sinks]") {
  const std::string first =
      "  - format: kafka\n    options:\n      topic: a\n"
      "      kafka.bootstrap.servers: \"127.0.0.1:9092\"\n      kafka.acks: all\n";
  const Case cases[] = {
      {"two progress topics",
       first + "  - format: kafka\n    options:\n      topic: b\n"
               "      kafka.bootstrap.servers: \"127.0.0.1:9092\"\n      progressTopic: other\n",
       "test.yaml:17:22: sinks[1].options.progressTopic: kafka sinks 'kafka-0' and 'kafka-1' "
       "name different progressTopic values"},
      {"two brokers",
       first + "  - format: kafka\n    options:\n      topic: b\n"
               "      kafka.bootstrap.servers: \"elsewhere:9092\"\n",
       "test.yaml:16:32: sinks[1].options.kafka.bootstrap.servers: kafka sinks of one pipeline "
       "share one producer, but 'kafka-1' sets kafka.bootstrap.servers differently from kafka "
       "sink 'kafka-0'"},
      {"one producer setting set twice",
       first + "  - format: kafka\n    options:\n      topic: b\n"
               "      kafka.bootstrap.servers: \"127.0.0.1:9092\"\n      kafka.acks: \"1\"\n",
       "test.yaml:17:19: sinks[1].options.kafka.acks: kafka sinks of one pipeline share one "
       "producer, but 'kafka-1' sets kafka.acks differently from kafka sink 'kafka-0'"},
  };
  for (const Case& c : cases) CheckRefused(c);
  // Settings given by one sink only are the shared producer's.
  auto agreeing = WithSinks(first +
                            "  - format: kafka\n    options:\n      topic: b\n"
                            "      kafka.bootstrap.servers: \"127.0.0.1:9092\"\n"
                            "      kafka.linger.ms: \"5\"\n");
  INFO(testing::ProblemText(agreeing));
  CHECK(agreeing);
}

TEST_CASE("a value format's options are bound at load and refused at their key and line",
          "[config][options][sinks][format]") {
  const Case cases[] = {
      {"a registry that is not http",
       "  - format: kafka\n    options: {topic: t, kafka.bootstrap.servers: \"127.0.0.1:9092\"}\n"
       "    valueFormat: avro\n    valueOptions:\n      schemaRegistryUrl: ftp://registry\n",
       "test.yaml:12:26: sinks[0].valueOptions.schemaRegistryUrl: is not an http:// or https:// "
       "URL"},
      {"a client certificate without its key",
       "  - format: kafka\n    options: {topic: t, kafka.bootstrap.servers: \"127.0.0.1:9092\"}\n"
       "    valueFormat: avro\n    valueOptions:\n      schemaRegistryUrl: https://registry\n"
       "      schemaRegistryCertFile: /etc/cert.pem\n",
       "test.yaml:10:18: sinks[0].valueOptions.schemaRegistryKeyFile: a client certificate "
       "needs both schemaRegistryCertFile and schemaRegistryKeyFile"},
  };
  for (const Case& c : cases) CheckRefused(c);

  // A source's value options alike.
  auto source = WithSinks("  - {format: console}\n",
                          "format: kafka\n  options: {kafka.bootstrap.servers: \"127.0.0.1:9092\", "
                          "subscribe: logs}\n  valueFormat: avro\n  valueOptions:\n"
                          "    schemaRegistryUrl: http://registry:8081\n"
                          "    schemaRegistryCredentials: no-colon\n");
  REQUIRE_FALSE(source);
  CHECK_THAT(testing::ProblemText(source),
             Catch::Contains("test.yaml:10:32: source.valueOptions.schemaRegistryCredentials: "
                             "must be user:password"));

  // What loads keeps what the formats bound, for the decoder and the encoders made at start.
  auto loaded = WithSinks(
      "  - format: kafka\n    options: {topic: t, kafka.bootstrap.servers: \"127.0.0.1:9092\"}\n"
      "    valueFormat: avro\n    valueOptions: {schemaRegistryUrl: \"http://registry:8081\"}\n"
      "  - {format: kafka, options: {topic: u, kafka.bootstrap.servers: \"127.0.0.1:9092\"}}\n",
      std::string(kKafkaSource));
  INFO(testing::ProblemText(loaded));
  REQUIRE(loaded);
  CHECK(loaded->source.value_bound.has_value());
  for (const SinkSpec& sink : loaded->sinks) {
    INFO(sink.name);
    CHECK(sink.bound.has_value());
    CHECK(sink.value_bound.has_value());  // json, the default, too
  }
}

TEST_CASE("the options bound at load are the ones a sink runs with", "[config][options][sinks]") {
  testing::TempDir dir;
  const std::string bound_path = dir / "bound";
  auto spec =
      WithSinks(fmt::format("  - format: file\n    options: {{path: \"{}\"}}\n", bound_path));
  INFO(testing::ProblemText(spec));
  REQUIRE(spec);
  REQUIRE(spec->sinks[0].bound.has_value());
  // Run creates the sink from what was bound, not by reading the options again.
  PipelineSpec changed = *spec;
  changed.sinks[0].options.Set("path", dir / "changed");
  auto sinks = CreateSinks(changed);
  REQUIRE(sinks);
  REQUIRE(sinks->front()->Open());
  CHECK(std::filesystem::is_directory(bound_path));
  CHECK_FALSE(std::filesystem::exists(dir / "changed"));

  // A spec built without config/ is bound when created, by the same code and the same checks.
  PipelineSpec console = *WithSinks("  - {format: console}\n");
  console.sinks[0].bound.reset();
  console.sinks[0].options.Set("numRows", "-1");
  auto refused = CreateSinks(console);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message(),
             Catch::Contains("sink 'console-0': console sink: numRows: must not be negative, "
                             "found -1"));
}

TEST_CASE("a sink that cannot be made is known by its place, not by its name in a message",
          "[config][options][sinks]") {
  // Two file sinks on one directory, built by hand: the rule is the later sink's.
  testing::TempDir dir;
  PipelineSpec pipeline;
  pipeline.name = "by-hand";
  for (const char* name : {"a", "b"}) {
    SinkSpec sink;
    sink.name = name;
    sink.format = "file";
    sink.options.Set("path", dir / "out");
    pipeline.sinks.push_back(sink);
  }
  auto sinks = MakeSinks(pipeline);
  REQUIRE_FALSE(sinks);
  CHECK(sinks.error().sink == &pipeline.sinks[1]);
  CHECK_THAT(sinks.error().error.message(), Catch::Contains("path: file sinks 'a' and 'b' both "
                                                            "write to"));
}

TEST_CASE("every sink kind is found by its name, with its bind and factory",
          "[config][options][sinks]") {
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    if (decl.role != ConnectorRole::kSink) continue;
    INFO(decl.format);
    CHECK(FindSinkKind(decl.format) == &decl);
    CHECK(decl.bind_sink);
    CHECK((decl.create_sink || decl.create_shared_sink));
  }
  for (const ValueFormatDecl& format : ValueFormats()) {
    INFO(format.name);
    CHECK(format.bind);
    CHECK(format.create);
    CHECK(bool(format.bind_sink) == bool(format.create_encoder));
  }
}

}  // namespace
}  // namespace driftd
