// Hostile pipeline files: text that once made the YAML reader run away (found by fuzzing, kept
// in tests/fuzz/corpus/config/runaway-*), nesting, alias bombs, recursive aliases, huge files,
// bad encodings and files that are not files. Each must be one problem with a place, found
// quickly, never a hang or an exhausted memory.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/config/config_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::ErrorCount;
using testing::ParseText;
using testing::ProblemText;

std::vector<std::filesystem::path> RunawayInputs() {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path dir = std::string(DRIFTD_TESTS_DIR) + "/fuzz/corpus/config";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("runaway-", 0) == 0) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

ConfigProblem OnlyError(const PipelineResult& result) {
  REQUIRE_FALSE(result);
  REQUIRE(ErrorCount(result) == 1);
  return result.error().front();
}

}  // namespace

TEST_CASE("the audit's file that made yaml-cpp grow without end is a syntax error at line 3",
          "[config][hostile]") {
  auto result = ParseText("a:\n  b [c:\n--- , 2]\n");
  INFO(ProblemText(result));
  const ConfigProblem problem = OnlyError(result);
  CHECK(problem.mark.line == 3);
  CHECK_THAT(problem.message, Catch::Contains("YAML syntax error"));
}

TEST_CASE("every input that once made the loader run away is refused with a line, quickly",
          "[config][hostile]") {
  const auto files = RunawayInputs();
  REQUIRE(files.size() >= 10);
  for (const auto& file : files) {
    INFO(file.filename().string());
    const auto start = std::chrono::steady_clock::now();
    auto result = LoadPipelineFile(file.string(), testing::TestOptions());
    const auto took = std::chrono::steady_clock::now() - start;
    INFO(ProblemText(result));
    REQUIRE_FALSE(result);
    CHECK(result.error().front().mark.line > 0);
    // Milliseconds in fact; the bound only catches a return of the runaway (seconds, gigabytes).
    CHECK(took < std::chrono::seconds(5));
  }
}

TEST_CASE("maps and lists nested deeper than 64 are refused where the 65th level opens",
          "[config][hostile]") {
  std::string deep = "name: x\nschema: " + std::string(100'000, '[') + "\n";
  auto result = ParseText(deep);
  const ConfigProblem problem = OnlyError(result);
  CHECK_THAT(problem.message, Catch::Contains("nested more than 64 deep"));
  CHECK(problem.mark.line == 2);
  // The top-level map is the first level; the 64th '[' (from column 9) opens the 65th.
  CHECK(problem.mark.column == 9 + 63);

  std::string fine = "name: x\nschema: " + std::string(60, '[') + std::string(60, ']') + "\n";
  CHECK_THAT(ProblemText(ParseText(fine)), !Catch::Contains("nested more than"));
}

TEST_CASE("aliases that would expand to millions of nodes are refused at the alias",
          "[config][hostile]") {
  // Each level holds ten aliases of the one before: 10^7 nodes from a few hundred bytes.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= 7; ++level) {
    bomb += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i) bomb += (i ? ", *a" : "*a") + std::to_string(level - 1);
    bomb += "]\n";
  }
  std::string yaml = bomb + std::string(testing::kMinimalPipeline);
  yaml.replace(yaml.find("{path: /tmp/in}"), 15, "{path: /tmp/in, startingOffsets: *a7}");
  auto result = ParseText(yaml);
  INFO(ProblemText(result));
  const ConfigProblem problem = OnlyError(result);
  CHECK_THAT(problem.message, Catch::Contains("more than 100000 nodes with its aliases expanded"));
  CHECK(problem.mark.line > 0);
}

TEST_CASE("an alias inside the node of its own anchor is refused as recursive",
          "[config][hostile]") {
  std::string yaml(testing::kMinimalPipeline);
  yaml.replace(yaml.find("{path: /tmp/in}"), 15, "&opts {path: /tmp/in, nested: *opts}");
  auto result = ParseText(yaml);
  const ConfigProblem problem = OnlyError(result);
  CHECK_THAT(problem.message, Catch::Contains("alias '*opts' is used inside the node of its own"));
  CHECK(problem.mark.line == 9);
}

TEST_CASE("an alias to an anchor that is not defined before it is a problem with its line",
          "[config][hostile]") {
  std::string yaml(testing::kMinimalPipeline);
  yaml.replace(yaml.find("[model_id]"), 10, "*nothing");
  const ConfigProblem problem = OnlyError(ParseText(yaml));
  CHECK_THAT(problem.message, Catch::Contains("refers to no anchor '&nothing'"));
  CHECK(problem.mark.line == 11);
}

TEST_CASE("anchors and aliases of ordinary size still work", "[config][hostile]") {
  std::string yaml(testing::kMinimalPipeline);
  yaml.replace(yaml.find("  groupBy: [model_id]"), 21, "  groupBy: &keys [model_id]");
  yaml += "drift:\n  series: [prediction]\n  baseline: {type: warmup, records: 1000}\n";
  yaml += "  modelColumn: model_id\n";
  auto result = ParseText(yaml);
  INFO(ProblemText(result));
  CHECK(result);
}

TEST_CASE("a pipeline file larger than 1 MiB is refused without being parsed",
          "[config][hostile]") {
  std::string yaml(testing::kMinimalPipeline);
  yaml += "# " + std::string(1024 * 1024, 'x') + "\n";
  const ConfigProblem problem = OnlyError(ParseText(yaml));
  CHECK_THAT(problem.message, Catch::Contains("at most 1048576 bytes"));

  testing::TempDir dir("driftd-hostile");
  testing::WriteFile(dir / "big.yaml", yaml);
  auto loaded = LoadPipelineFile(dir / "big.yaml", testing::TestOptions());
  REQUIRE_FALSE(loaded);
  CHECK_THAT(loaded.error().front().message, Catch::Contains("larger than 1048576 bytes"));
}

TEST_CASE("invalid UTF-8 and control characters are refused at their line and column",
          "[config][hostile]") {
  std::string yaml(testing::kMinimalPipeline);
  yaml.replace(yaml.find("/tmp/in"), 7, "/tmp/\xff\xfein");
  const ConfigProblem bad_utf8 = OnlyError(ParseText(yaml));
  CHECK_THAT(bad_utf8.message, Catch::Contains("not valid UTF-8"));
  CHECK(bad_utf8.mark.line == 9);
  CHECK(bad_utf8.mark.column == 24);

  std::string control(testing::kMinimalPipeline);
  control.replace(control.find("minimal"), 7, std::string("mini\x01mal", 8));
  const ConfigProblem problem = OnlyError(ParseText(control));
  CHECK(problem.mark.line == 1);
  CHECK_THAT(problem.message, Catch::Contains("control characters"));
}

TEST_CASE("a UTF-8 byte order mark at the start of a pipeline file is skipped",
          "[config][hostile]") {
  auto result = ParseText("\xEF\xBB\xBF" + std::string(testing::kMinimalPipeline));
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->name == "minimal");
}

TEST_CASE("a FIFO or a directory given as a pipeline file is refused without blocking",
          "[config][hostile]") {
  testing::TempDir dir("driftd-hostile");
  const std::string fifo = dir / "pipe.yaml";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto result = LoadPipelineFile(fifo, testing::TestOptions());
  REQUIRE_FALSE(result);
  CHECK_THAT(result.error().front().message, Catch::Contains("not a regular file"));

  auto directory = LoadPipelineFile(dir.path().string(), testing::TestOptions());
  REQUIRE_FALSE(directory);
  CHECK_THAT(directory.error().front().message, Catch::Contains("is a directory"));
}

TEST_CASE("a second document is reported where its content starts", "[config][hostile]") {
  std::string yaml = std::string(testing::kMinimalPipeline) + "---\nname: second\n";
  const ConfigProblem problem = OnlyError(ParseText(yaml));
  CHECK_THAT(problem.message, Catch::Contains("several YAML documents"));
  CHECK(problem.mark.line == 16);
}

}  // namespace driftd
