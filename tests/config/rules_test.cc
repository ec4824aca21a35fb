// Rules a pipeline file is held to beyond its keys' types: names that are directories, sinks
// writing where the source reads or where another sink writes, and the array length cap.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "tests/config/config_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::kMinimalPipeline;
using testing::ParseText;
using testing::ProblemText;

std::string Replace(std::string yaml, std::string_view find, std::string_view replace) {
  size_t at = yaml.find(find);
  REQUIRE(at != std::string::npos);
  yaml.replace(at, find.size(), replace);
  return yaml;
}

ConfigProblem OnlyError(const PipelineResult& result) {
  INFO(ProblemText(result));
  REQUIRE_FALSE(result);
  REQUIRE(testing::ErrorCount(result) == 1);
  return result.error().front();
}

std::string WithSinks(const std::string& source_path, const std::string& sinks) {
  std::string yaml = Replace(std::string(kMinimalPipeline), "{path: /tmp/in}",
                             "{path: \"" + source_path + "\"}");
  return Replace(yaml, "  - {format: console}\n", sinks);
}

}  // namespace

TEST_CASE("a pipeline named . or .. is refused: its checkpoint would not be its own",
          "[config][rules]") {
  for (const char* name : {".", ".."}) {
    INFO(name);
    auto result = ParseText(Replace(std::string(kMinimalPipeline), "name: minimal",
                                    std::string("name: \"") + name + "\""));
    const ConfigProblem problem = OnlyError(result);
    CHECK(problem.path == "name");
    CHECK(problem.mark.line == 1);
    CHECK_THAT(problem.message, Catch::Contains("not allowed"));
  }
  auto dotted = ParseText(Replace(std::string(kMinimalPipeline), "name: minimal", "name: a.b"));
  CHECK(dotted);
  auto sink = ParseText(Replace(std::string(kMinimalPipeline), "{format: console}",
                                "{format: console, name: \"..\"}"));
  CHECK(OnlyError(sink).path == "sinks[0].name");
}

TEST_CASE("a file sink writing into the source's directory is refused at the sink's path",
          "[config][rules]") {
  testing::TempDir dir("driftd-rules");
  const std::string in = dir / "in";
  std::filesystem::create_directories(in);
  // The same directory, spelt differently: a trailing slash, a dot, a symbolic link.
  std::filesystem::create_directory_symlink(in, dir / "link");
  for (const std::string& path : {in, in + "/", in + "/./", dir / "link", in + "/sub/out"}) {
    INFO(path);
    auto result = ParseText(WithSinks(
        in, "  - {format: file, name: out, options: {path: \"" + path + "\"}}\n"));
    const ConfigProblem problem = OnlyError(result);
    CHECK(problem.path == "sinks[0].options.path");
    CHECK(problem.mark.line == 14);
    CHECK_THAT(problem.message, Catch::Contains("file sink 'out' writes into"));
    CHECK_THAT(problem.message, Catch::Contains("read its own output back"));
    CHECK_THAT(problem.message, Catch::Contains("source.options.path, line 9"));
  }
  // A sibling directory is fine, and so is a source inside the sink's directory.
  CHECK(ParseText(WithSinks(in, "  - {format: file, options: {path: \"" + dir / "out" + "\"}}\n")));
  CHECK(ParseText(WithSinks(in + "/sub", "  - {format: file, options: {path: \"" + in + "\"}}\n")));
}

TEST_CASE("two file sinks in one directory, or one inside the other's, are refused",
          "[config][rules]") {
  testing::TempDir dir("driftd-rules");
  const std::string out = dir / "out";
  for (const std::string& second : {out, out + "/", out + "/nested"}) {
    INFO(second);
    auto result = ParseText(WithSinks(dir / "in",
                                      "  - {format: file, name: a, options: {path: \"" + out +
                                          "\"}}\n  - {format: file, name: b, stream: stats, "
                                          "options: {path: \"" + second + "\"}}\n"));
    const ConfigProblem problem = OnlyError(result);
    CHECK(problem.path == "sinks[1].options.path");
    CHECK(problem.mark.line == 15);
    CHECK_THAT(problem.message, Catch::Contains("each sink needs a directory of its own"));
  }
}

TEST_CASE("malformed.maxArrayLength bounds array<double> values, 4096 by default",
          "[config][rules]") {
  auto defaults = ParseText(std::string(kMinimalPipeline));
  REQUIRE(defaults);
  CHECK(defaults->source.malformed.max_array_length == 4096);
  auto set = ParseText(Replace(std::string(kMinimalPipeline), "  options: {path: /tmp/in}",
                               "  options: {path: /tmp/in}\n  malformed: {maxArrayLength: 64}"));
  INFO(ProblemText(set));
  REQUIRE(set);
  CHECK(set->source.malformed.max_array_length == 64);
  auto zero = ParseText(Replace(std::string(kMinimalPipeline), "  options: {path: /tmp/in}",
                                "  options: {path: /tmp/in}\n  malformed: {maxArrayLength: 0}"));
  const ConfigProblem problem = OnlyError(zero);
  CHECK(problem.path == "source.malformed.maxArrayLength");
  CHECK(problem.mark.line == 10);
}

}  // namespace driftd

namespace driftd {
namespace {

TEST_CASE("a file baseline's reference is read when the pipeline loads, relative to the "
          "pipeline file, and a missing one is a problem at its path's line",
          "[config][rules][baseline]") {
  testing::TempDir dir("driftd-rules");
  const std::string yaml = std::string(kMinimalPipeline) +
                           "drift:\n"
                           "  series: [prediction]\n"
                           "  baseline: {type: file, path: ref.json}\n";
  const std::string file = dir / "pipeline.yaml";
  auto missing = ParsePipeline(yaml, file, testing::TestOptions());
  const ConfigProblem problem = OnlyError(missing);
  CHECK(problem.path == "drift.baseline.path");
  CHECK(problem.mark.line == 17);
  CHECK_THAT(problem.message, Catch::Contains(dir / "ref.json"));
  CHECK_THAT(problem.message, Catch::Contains("cannot read the file"));

  // The tool that writes the file loads the pipeline without reading it.
  LoadOptions build = testing::TestOptions();
  build.read_references = false;
  auto unread = ParsePipeline(yaml, file, build);
  INFO(ProblemText(unread));
  REQUIRE(unread);
  CHECK(unread->drift.baseline.reference == nullptr);

  // What the drift stage parses is the file's bytes, as loaded (it opens no file itself).
  const std::string statistics = R"({"driftd_reference": 1, "models": {}})";
  testing::WriteFile(dir / "ref.json", statistics);
  auto loaded = ParsePipeline(yaml, file, testing::TestOptions());
  INFO(ProblemText(loaded));
  REQUIRE(loaded);
  REQUIRE(loaded->drift.baseline.reference != nullptr);
  CHECK(*loaded->drift.baseline.reference == statistics);
  CHECK(loaded->drift.baseline.path == "ref.json");  // as written: the fingerprint keeps it
}

TEST_CASE("a file baseline with drift per (model, segment) is refused at load, at its type",
          "[config][rules][baseline]") {
  testing::TempDir dir("driftd-rules");
  testing::WriteFile(dir / "ref.json", R"({"driftd_reference": 1, "models": {}})");
  std::string yaml = Replace(std::string(kMinimalPipeline), "groupBy: [model_id]",
                             "groupBy: [model_id, region]");
  yaml = Replace(yaml, "  - {name: prediction, type: double}\n",
                 "  - {name: prediction, type: double}\n  - {name: region, type: string}\n");
  yaml += "drift:\n"
          "  series: [prediction]\n"
          "  baseline: {type: file, path: ref.json}\n";
  auto segmented = ParsePipeline(yaml, dir / "pipeline.yaml", testing::TestOptions());
  const ConfigProblem problem = OnlyError(segmented);
  CHECK(problem.path == "drift.baseline.type");
  CHECK(problem.mark.line == 18);
  CHECK_THAT(problem.message, Catch::Contains("holds statistics per model"));
  CHECK_THAT(problem.message, Catch::Contains("(region)"));
  // Per model, as segmentBy: [] says, it loads.
  yaml += "  segmentBy: []\n";
  auto per_model = ParsePipeline(yaml, dir / "pipeline.yaml", testing::TestOptions());
  INFO(ProblemText(per_model));
  CHECK(per_model);
}

}  // namespace
}  // namespace driftd
