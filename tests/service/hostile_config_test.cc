// Hostile pipeline files seen from outside: `driftd validate` and `driftd run` refuse them at
// once with exit code 78 and a line, and a reload of a pipelines directory holding one keeps the
// daemon and its running queries alive. The inputs are the file an audit found and the
// runaway inputs fuzzing found since (tests/fuzz/corpus/config/runaway-*).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

// Killed well before it could hurt the machine; the checks below are far tighter.
constexpr int64_t kKillAboveKb = 1024 * 1024;

// The audit's file (runaway-audit-finding.yaml) and every runaway input fuzzing found since.
std::vector<std::string> HostileFiles() {
  std::vector<std::string> files;
  const std::filesystem::path corpus = std::string(DRIFTD_TESTS_DIR) + "/fuzz/corpus/config";
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    if (entry.path().filename().string().rfind("runaway-", 0) == 0) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The output names `file` with a line: "file:12:5: ...".
bool HasLineFor(const std::string& output, const std::string& file) {
  for (size_t at = output.find(file + ":"); at != std::string::npos;
       at = output.find(file + ":", at + 1)) {
    const size_t next = at + file.size() + 1;
    if (next < output.size() && output[next] >= '1' && output[next] <= '9') return true;
  }
  return false;
}

int ExitCode(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

double Metric(int port, const std::string& name, const std::map<std::string, std::string>& labels) {
  HttpReply reply = HttpGet(port, "/metrics");
  return ParsePrometheus(reply.body).Value(name, labels).value_or(-1);
}

// Memory use of a plain `driftd validate` of a good file: the baseline the bound is set from
// (sanitizer builds carry their own shadow memory).
int64_t BaselineRssKb(const TempDir& dir) {
  std::string good = dir / "good.yaml";
  WriteFile(good, RatePipelineYaml("good", dir.path().string()));
  MeasuredRun run = RunDriftdMeasured({"validate", good}, kKillAboveKb, 60s);
  REQUIRE(run.exit_code == 0);
  return run.peak_rss_kb;
}

}  // namespace

TEST_CASE(
    "driftd validate refuses each runaway pipeline file with exit code 78 and a line, within a "
    "second of CPU and under 100 MB",
    "[service][hostile][e2e]") {
  TempDir dir("driftd-hostile-validate");
  const int64_t baseline_kb = BaselineRssKb(dir);
  // 100 MB above what driftd needs to start at all (a few MB, more under the sanitizers).
  const int64_t limit_kb = baseline_kb + 100 * 1024;
  const auto files = HostileFiles();
  REQUIRE(files.size() >= 11);
  for (const std::string& file : files) {
    INFO(file);
    MeasuredRun run = RunDriftdMeasured({"validate", file}, kKillAboveKb, 60s);
    INFO(run.output);
    CHECK_FALSE(run.over_limit);
    CHECK(run.exit_code == 78);
    // file:line:column: the problem.
    CHECK(HasLineFor(run.output, file));
    CHECK(run.cpu_seconds < 1.0);
    CHECK(run.peak_rss_kb < limit_kb);
  }
}

TEST_CASE("driftd run refuses the audit's runaway file with exit code 78",
          "[service][hostile][e2e]") {
  TempDir dir("driftd-hostile-run");
  WriteFile(dir / "p.yaml", "a:\n  b [c:\n--- , 2]\n");
  MeasuredRun run = RunDriftdMeasured({"run", dir / "p.yaml", "--http", "off"}, kKillAboveKb, 60s);
  INFO(run.output);
  CHECK_FALSE(run.over_limit);
  CHECK(run.exit_code == 78);
  CHECK_THAT(run.output, Catch::Contains(dir / "p.yaml:3:"));
}

TEST_CASE(
    "a SIGHUP reload of a pipelines directory holding runaway files leaves the daemon and its "
    "running query alive",
    "[service][hostile][reload][e2e]") {
  TempDir dir("driftd-hostile-reload");
  const std::string base = dir.path().string();
  const std::string pipelines = dir / "pipelines";
  WriteFileAt(pipelines + "/alpha.yaml", RatePipelineYaml("alpha", base));
  const std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", pipelines, "--http", "127.0.0.1:0", "--quiet-progress"}, log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  auto alpha_batches = [&] {
    return Metric(*port, "driftd_last_batch_id", {{"pipeline", "alpha"}});
  };
  REQUIRE(WaitFor([&] { return alpha_batches() >= 1; }));
  const int64_t rss_before = ResidentKb(daemon.pid());

  // Every runaway input at once, as files of the directory.
  const auto files = HostileFiles();
  for (const std::string& file : files) {
    WriteFile(pipelines + "/" + std::filesystem::path(file).filename().string(), ReadFile(file));
  }
  daemon.Signal(SIGHUP);
  REQUIRE(WaitFor([&] { return ReadFile(log).find("reload of ") != std::string::npos; }));
  INFO(ReadFile(log));
  CHECK_FALSE(daemon.Exited());
  const std::string text = ReadFile(log);
  CHECK_THAT(text, Catch::Contains(pipelines + "/runaway-audit-finding.yaml:3:5: YAML syntax"));
  CHECK_THAT(text, Catch::Contains(std::to_string(files.size()) + " refused"));
  // The old query goes on committing batches, and the daemon did not balloon.
  const double before = alpha_batches();
  CHECK(WaitFor([&] { return alpha_batches() > before; }));
  CHECK(Metric(*port, "driftd_reloads_total", {{"result", "failed"}}) == 1);
  CHECK(ResidentKb(daemon.pid()) < rss_before + 100 * 1024);

  daemon.Signal(SIGTERM);
  CHECK(ExitCode(daemon.Wait(30s)) == 0);
}

}  // namespace driftd::testing
