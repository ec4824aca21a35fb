// config/README.md carries the connector and value format option tables generated from the
// declarations, and the drift detector table generated from the detector registry, each between
// two markers. The hidden test cases rewrite them:
//   build/tests/driftd_config_tests '[.reference]'
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "config/detectors.h"
#include "connectors/registry.h"
#include "engine/drift/detectors.h"

namespace driftd {
namespace {

constexpr std::string_view kBegin = "<!-- BEGIN GENERATED CONNECTOR OPTIONS -->\n";
constexpr std::string_view kEnd = "<!-- END GENERATED CONNECTOR OPTIONS -->";

std::string ReadmePath() { return std::string(DRIFTD_SOURCE_DIR) + "/config/README.md"; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST_CASE("the pipeline reference documents the options of every declared connector and value "
          "format",
          "[config][reference]") {
  const std::string readme = ReadFile(ReadmePath());
  const size_t begin = readme.find(kBegin);
  const size_t end = readme.find(kEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  REQUIRE(begin < end);
  const std::string section = readme.substr(begin + kBegin.size(), end - begin - kBegin.size());
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    const std::string heading =
        fmt::format("### `{}` {}", decl.format,
                    decl.role == ConnectorRole::kSource ? "source" : "sink");
    INFO(heading << " is missing: regenerate with driftd_config_tests '[.reference]'");
    CHECK(section.find(heading) != std::string::npos);
  }
  for (const ValueFormatDecl& format : ValueFormats()) {
    const std::string heading = fmt::format("### `{}` value format", format.name);
    INFO(heading << " is missing: regenerate with driftd_config_tests '[.reference]'");
    CHECK(section.find(heading) != std::string::npos);
  }
  // The section is what `driftd reference` prints, option for option.
  INFO("regenerate with driftd_config_tests '[.reference]'");
  CHECK(section == ConnectorReferenceMarkdown());
}

TEST_CASE("regenerate the connector option tables in config/README.md", "[.reference]") {
  std::string readme = ReadFile(ReadmePath());
  const size_t begin = readme.find(kBegin);
  const size_t end = readme.find(kEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  readme.replace(begin + kBegin.size(), end - begin - kBegin.size(),
                 ConnectorReferenceMarkdown());
  std::ofstream out(ReadmePath(), std::ios::binary | std::ios::trunc);
  out << readme;
  out.close();
  CHECK(out.good());
  CHECK(ReadFile(ReadmePath()).find(ConnectorReferenceMarkdown()) != std::string::npos);
}

constexpr std::string_view kDetectorsBegin = "<!-- BEGIN GENERATED DETECTORS -->\n";
constexpr std::string_view kDetectorsEnd = "<!-- END GENERATED DETECTORS -->";

TEST_CASE("the pipeline reference lists every registered drift detector with its parameters",
          "[config][reference]") {
  const std::string readme = ReadFile(ReadmePath());
  const size_t begin = readme.find(kDetectorsBegin);
  const size_t end = readme.find(kDetectorsEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  REQUIRE(begin < end);
  const std::string section =
      readme.substr(begin + kDetectorsBegin.size(), end - begin - kDetectorsBegin.size());
  for (const DetectorDefaults& detector : DetectorDefaultsTable()) {
    INFO(detector.name << " is missing: regenerate with driftd_config_tests '[.reference]'");
    CHECK(section.find(fmt::format("| `{}` |", detector.name)) != std::string::npos);
    for (const DetectorParamDef& param : detector.params) {
      CHECK(section.find(fmt::format("`{}` ({}", param.name, param.default_value)) !=
            std::string::npos);
    }
  }
  INFO("regenerate with driftd_config_tests '[.reference]'");
  CHECK(section == config_detail::DetectorReferenceMarkdown());
}

TEST_CASE("regenerate the drift detector table in config/README.md", "[.reference]") {
  std::string readme = ReadFile(ReadmePath());
  const size_t begin = readme.find(kDetectorsBegin);
  const size_t end = readme.find(kDetectorsEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  readme.replace(begin + kDetectorsBegin.size(), end - begin - kDetectorsBegin.size(),
                 config_detail::DetectorReferenceMarkdown());
  std::ofstream out(ReadmePath(), std::ios::binary | std::ios::trunc);
  out << readme;
  out.close();
  CHECK(out.good());
}

}  // namespace
}  // namespace driftd
