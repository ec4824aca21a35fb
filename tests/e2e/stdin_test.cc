// The daemon reading a pipe on its standard input: the stdin source holds the lines it read
// until their batch is in the checkpoint, and with availableNow the query drains the whole input
// and exits, however small the source's buffer (each batch makes room for the next while the
// previous batch is still being delivered).
#include <sys/wait.h>

#include <map>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/e2e/e2e_util.h"

namespace driftd::testing {
namespace {

TEST_CASE("a piped input many times the stdin source's buffer is read whole with availableNow, "
          "on one thread and on two",
          "[e2e][stdin]") {
  const int threads = GENERATE(1, 2);
  TempDir dir;
  constexpr int kLines = 20'000;
  constexpr int kModels = 5;
  std::string input;
  for (int i = 0; i < kLines; ++i) {
    input += fmt::format("{{\"model_id\":\"m{}\",\"x\":{}}}\n", i % kModels, i);
  }
  WriteFile(dir / "input.jsonl", input);  // ~560 KB against a buffer of 2 KB
  WriteFile(dir / "pipeline.yaml", fmt::format(R"(name: piped
schema:
  - {{name: model_id, type: string}}
  - {{name: x, type: double}}
source:
  format: stdin
  options: {{maxBufferedBytes: 2048}}
query:
  groupBy: [model_id]
  aggregates: [count, sum(x)]
sinks:
  - {{name: stats, format: file, stream: stats, outputMode: update, options: {{path: {output}}}}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
threads: {threads}
)",
                                               fmt::arg("output", dir / "output"),
                                               fmt::arg("checkpoint", dir / "checkpoint"),
                                               fmt::arg("threads", threads)));
  ChildProcess child = ChildProcess::Start(
      {"/bin/sh", "-c",
       fmt::format("exec '{}' run '{}' < '{}'", DriftdBinary(), dir / "pipeline.yaml",
                   dir / "input.jsonl")},
      dir / "daemon.log");
  const std::optional<int> status = child.Wait(std::chrono::seconds(60));
  INFO(ReadFile(dir / "daemon.log"));
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  REQUIRE(WEXITSTATUS(*status) == 0);

  // The last row of each model holds its totals: every line counted once.
  std::map<std::string, std::string> last;
  for (const std::string& row : CommittedRows(dir / "output")) last[JsonField(row, "model_id")] = row;
  REQUIRE(last.size() == kModels);
  int64_t counted = 0;
  double sum = 0;
  for (const auto& [model, row] : last) {
    counted += static_cast<int64_t>(JsonNumber(row, "count"));
    sum += JsonNumber(row, "sum(x)");
  }
  CHECK(counted == kLines);
  CHECK(sum == static_cast<double>(kLines) * (kLines - 1) / 2);
}

}  // namespace
}  // namespace driftd::testing
