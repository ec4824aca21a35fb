// A source's options are bound once, at load, from its declaration (the real connectors'):
// bad values are refused at their key and line, and the options the loader bound are what the
// source runs with.
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "tests/config/config_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

// A kafka pipeline whose source options end with `options` (one "key: value" per line, at the
// indentation of line 8 on, when `fields` is empty: more schema fields after model_id, one a
// line).
PipelineResult KafkaPipeline(const std::string& options, bool scale_out = false,
                             const std::string& fields = "") {
  LoadOptions load = testing::TestOptions();
  load.catalog = &ConnectorDeclarations();
  load.value_formats = &ValueFormats();
  return ParsePipeline(fmt::format(R"(name: binding
schema:
  - {{name: model_id, type: string, nullable: false}}
{}source:
  format: kafka
  options:
    kafka.bootstrap.servers: "127.0.0.1:9092"
{}sinks:
  - {{format: console}}
{})",
                                   fields, options,
                                   scale_out ? "scaleOut: {enabled: true}\n" : ""),
                       "test.yaml", load);
}

TEST_CASE("maxOffsetsPerTrigger 0 is refused at its key and line", "[config][options]") {
  auto spec = KafkaPipeline("    subscribe: logs\n    maxOffsetsPerTrigger: 0\n");
  REQUIRE_FALSE(spec);
  const std::string text = testing::ProblemText(spec);
  CHECK_THAT(text, Catch::Contains("test.yaml:9:27: source.options.maxOffsetsPerTrigger: must be "
                                   "positive, found 0"));
  CHECK(testing::ErrorCount(spec) == 1);
  // A negative count too; one is the smallest bound.
  CHECK_THAT(testing::ProblemText(
                 KafkaPipeline("    subscribe: logs\n    maxOffsetsPerTrigger: -3\n")),
             Catch::Contains("test.yaml:9:27: source.options.maxOffsetsPerTrigger: must be "
                             "positive, found -3"));
  auto one = KafkaPipeline("    subscribe: logs\n    maxOffsetsPerTrigger: 1\n");
  INFO(testing::ProblemText(one));
  CHECK(one);
}

TEST_CASE("a source's own checks across options name the option's key and line",
          "[config][options]") {
  struct Case {
    std::string options;
    std::string expected;
  };
  const Case cases[] = {
      {"    subscribe: logs\n    startingOffsets: '{\"logs\":{\"x\":1}}'\n",
       "test.yaml:9:22: source.options.startingOffsets: topic 'logs' partition 'x' needs an "
       "offset"},
      {"    subscribePattern: \"(unclosed\"\n",
       "test.yaml:8:23: source.options.subscribePattern: '(unclosed' is not a regular "
       "expression"},
      {"    subscribe: logs\n    kafka.enable.auto.commit: \"true\"\n",
       "test.yaml:9:31: source.options.kafka.enable.auto.commit: kafka.enable.auto.commit is "
       "not supported"},
      {"    subscribe: logs\n    kafka.isolation.level: read_uncommitted\n",
       "test.yaml:9:28: source.options.kafka.isolation.level: 'read_uncommitted' is not "
       "supported: the kafka source reads committed records only"},
      {"    subscribe: logs\n    kafka.fetch.wait.max.ms: \"soon\"\n",
       "test.yaml:9:30: source.options.kafka.fetch.wait.max.ms: "},
      {"    subscribe: logs\n    subscribePattern: \"logs-.*\"\n",
       "test.yaml:9:23: source.options.subscribePattern: the kafka source needs exactly one of "
       "subscribe, subscribePattern, assign"},
  };
  for (const Case& c : cases) {
    INFO(c.options);
    auto spec = KafkaPipeline(c.options);
    REQUIRE_FALSE(spec);
    CHECK_THAT(testing::ProblemText(spec), Catch::Contains(c.expected));
  }
}

TEST_CASE("scaleOut with assign is refused at the assign option", "[config][options]") {
  auto spec = KafkaPipeline("    assign: '{\"logs\":[0,1]}'\n", /*scale_out=*/true);
  REQUIRE_FALSE(spec);
  CHECK_THAT(testing::ProblemText(spec),
             Catch::Contains("test.yaml:8:13: source.options.assign: scaleOut needs subscribe or "
                             "subscribePattern"));
}

TEST_CASE("an input named like another, like the source (main) or like the labels input is "
          "refused at its name",
          "[config][inputs]") {
  auto input = [](const std::string& name) {
    return fmt::format("  - name: {}\n"
                       "    format: kafka\n"
                       "    options: {{subscribe: more, kafka.bootstrap.servers: \"h:9092\"}}\n",
                       name);
  };
  const std::string head = "    subscribe: logs\ninputs:\n";
  CHECK(KafkaPipeline(head + input("eu") + input("us")));
  for (const std::string reused : {"main", "labels", "eu"}) {
    INFO(reused);
    auto refused = KafkaPipeline(head + input("eu") + (reused == "eu" ? input("eu") : "") +
                                 (reused == "eu" ? "" : input(reused)));
    REQUIRE_FALSE(refused);
    CHECK_THAT(testing::ProblemText(refused),
               Catch::Contains(fmt::format("test.yaml:13:11: inputs[1].name: input name '{}' "
                                           "is used twice",
                                           reused)));
  }
}

TEST_CASE("scaleOut takes a query of several kafka inputs and refuses another kind of input at "
          "its entry",
          "[config][options][inputs]") {
  const std::string kafka_input =
      "    subscribe: logs\n"
      "inputs:\n"
      "  - name: more\n"
      "    format: kafka\n"
      "    options: {subscribe: more-logs, kafka.bootstrap.servers: \"127.0.0.1:9092\"}\n";
  auto accepted = KafkaPipeline(kafka_input, /*scale_out=*/true);
  INFO(testing::ProblemText(accepted));
  CHECK(accepted);
  const std::string file_input =
      "    subscribe: logs\n"
      "inputs:\n"
      "  - name: files\n"
      "    format: file\n"
      "    options: {path: /tmp}\n";
  auto refused = KafkaPipeline(file_input, /*scale_out=*/true);
  REQUIRE_FALSE(refused);
  CHECK_THAT(testing::ProblemText(refused),
             Catch::Contains("test.yaml:10:5: inputs[0].format: scaleOut shares every input "
                             "among processes through one consumer group (kafka); input "
                             "'files' is 'file'"));
  // In one process the same input is fine.
  CHECK(KafkaPipeline(file_input));
}

TEST_CASE("scaleOut takes Kafka labels and refuses labels of another kind", "[config][labels]") {
  auto labels = [](const std::string& format, const std::string& options) {
    return "    subscribe: logs\n"
           "labels:\n"
           "  source: {format: " + format + ", options: " + options + "}\n"
           "  schema:\n"
           "    - {name: request_id, type: string}\n"
           "    - {name: label, type: int}\n"
           "    - {name: event_time, type: timestamp}\n"
           "  key: request_id\n"
           "  label: label\n"
           "query:\n"
           "  groupBy: [model_id]\n"
           "  aggregates: [count]\n"
           "  watermark: {column: event_time, delay: 1 minute}\n";
  };
  const std::string kafka =
      labels("kafka", "{subscribe: labels, kafka.bootstrap.servers: \"127.0.0.1:9092\"}");
  // The query's schema needs the key and an event time.
  auto pipeline = [](const std::string& options) {
    return KafkaPipeline(options, /*scale_out=*/true,
                         "  - {name: request_id, type: string}\n"
                         "  - {name: event_time, type: timestamp}\n"
                         "  - {name: prediction, type: double}\n");
  };
  auto accepted = pipeline(kafka);
  INFO(testing::ProblemText(accepted));
  CHECK(accepted);
  auto refused = pipeline(labels("file", "{path: /tmp}"));
  REQUIRE_FALSE(refused);
  CHECK_THAT(testing::ProblemText(refused),
             Catch::Contains("labels.format: scaleOut shares every input among processes "
                             "through one consumer group (kafka); the labels are 'file'"));
}

TEST_CASE("the options bound at load are the ones the source runs with", "[config][options]") {
  testing::TempDir dir;
  LoadOptions load = testing::TestOptions();
  load.catalog = &ConnectorDeclarations();
  load.value_formats = &ValueFormats();
  auto spec = ParsePipeline(fmt::format(R"(name: bound
schema:
  - {{name: model_id, type: string, nullable: false}}
source:
  format: file
  options: {{path: "{}", maxFilesPerTrigger: 2}}
sinks:
  - {{format: console}}
)",
                                        dir.path().string()),
                            "test.yaml", load);
  INFO(testing::ProblemText(spec));
  REQUIRE(spec);
  REQUIRE(spec->source.bound.has_value());
  // Run creates the source from what was bound, not by reading the options again: options
  // changed after the load are not seen.
  PipelineSpec changed = *spec;
  changed.source.options.Set("path", "/nowhere/else");
  changed.source.options.Set("maxFilesPerTrigger", "-1");
  auto source = CreateSource(changed);
  REQUIRE(source);
  CHECK((*source)->Describe() == fmt::format("FileSource[{}]", dir.path().string()));
  // A spec built without config/ is bound when created, by the same code and the same checks.
  changed.source.bound.reset();
  auto refused = CreateSource(changed);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message(),
             Catch::Contains("file source: maxFilesPerTrigger: must not be negative, found -1"));
}

TEST_CASE("every source kind is found by its name, with its traits", "[config][options]") {
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    if (decl.role != ConnectorRole::kSource) continue;
    INFO(decl.format);
    CHECK(FindSourceKind(decl.format) == &decl);
    CHECK(decl.bind);
    CHECK(decl.create_source);
  }
  REQUIRE(FindSourceKind("kafka") != nullptr);
  CHECK(FindSourceKind("kafka")->traits.unordered_partitions);
  CHECK_FALSE(FindSourceKind("file")->traits.unordered_partitions);
  CHECK(FindSourceKind("console") == nullptr);  // a sink
  CHECK(FindSinkKind("console")->shared_by_processes);
}

}  // namespace
}  // namespace driftd
