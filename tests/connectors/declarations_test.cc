#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "connectors/connector_factories.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

TEST_CASE("the file, rate and socket sources and the file and console sinks document every option",
          "[declarations]") {
  for (const ConnectorDecl& decl : {FileSourceDecl(), RateSourceDecl(), SocketSourceDecl(),
                                    FileSinkDecl(), ConsoleSinkDecl()}) {
    INFO(decl.format);
    CHECK(decl.doc.size() > 40);
    CHECK(decl.passthrough_prefix.empty());
    for (const OptionDecl& option : decl.options) {
      INFO(option.name);
      CHECK_FALSE(option.doc.empty());
      CHECK_FALSE((option.required && !option.default_value.empty()));
      if (option.type == OptionType::kEnum) {
        CHECK_FALSE(option.choices.empty());
        CHECK(std::find(option.choices.begin(), option.choices.end(), option.default_value) !=
              option.choices.end());
      }
    }
  }
  std::string reference = ConnectorReferenceMarkdown();
  CHECK_THAT(reference, Catch::Contains("### `rate` source"));
  CHECK_THAT(reference, Catch::Contains("| `fileNameGlob` | string | `*.json,*.jsonl,*.ndjson` |"));
  CHECK_THAT(reference, Catch::Contains("NOT fault-tolerant"));
}

TEST_CASE("sources and sinks start from their declared defaults", "[declarations]") {
  testing::TempDir dir;
  for (const char* mode : {"rate", "inference"}) {
    auto rate = CreateRateSource(testing::SourcePipeline("rate", {{"mode", mode}}));
    REQUIRE(rate);
    REQUIRE((*rate)->Start({}));
  }
  auto file = CreateFileSource(testing::SourcePipeline("file", {{"path", dir.path()}}));
  REQUIRE(file);
  REQUIRE((*file)->Start({}));
  CHECK(CreateSocketSource(testing::SourcePipeline("socket", {{"port", "9999"}})));

  PipelineSpec pipeline;
  SinkSpec console;
  console.name = "console-0";
  console.options = testing::WithDefaults("console", ConnectorRole::kSink, {});
  CHECK(CreateConsoleSink(pipeline, console));
  SinkSpec file_sink;
  file_sink.name = "file-0";
  file_sink.format = "file";
  file_sink.options = testing::WithDefaults("file", ConnectorRole::kSink, {{"path", dir.Sub("o")}});
  pipeline.sinks.push_back(file_sink);
  CHECK(CreateFileSink(pipeline, pipeline.sinks[0]));
}

}  // namespace
}  // namespace driftd
