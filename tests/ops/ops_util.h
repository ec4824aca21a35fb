// Helpers for the operator-facing tests that need outside programs (Chromium, Prometheus,
// podman): finding them, skipping outside CI when they are missing, and a drifting daemon.
#pragma once

#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "tests/service/drift_data.h"
#include "tests/service/service_util.h"

namespace driftd::testing {

inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

/// The full path of `program` on PATH (ChildProcess execs a path), or empty.
inline std::string Which(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

/// True if `program` is on PATH; otherwise fails in CI and warns (the caller skips) elsewhere.
inline bool Have(const std::string& program) {
  if (!Which(program).empty()) return true;
  if (InCi()) FAIL(program << " is missing (deploy/setup-debian.sh --test installs it)");
  WARN(program << " is missing; skipping");
  return false;
}

inline int ExitStatus(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

/// Where tests keep what a person may want to look at afterwards (screenshots).
inline std::filesystem::path ArtifactsDir() {
  std::filesystem::path dir = std::filesystem::current_path() / "artifacts";
  std::filesystem::create_directories(dir);
  return dir;
}

/// A daemon on the drifting data of drift_data.h, HTTP on a fixed port.
struct DriftingDaemon {
  std::string dir;
  int port = 0;
  std::optional<ChildProcess> process;

  void Start(const std::string& log_name) {
    process.emplace(ChildProcess::Start({DriftdBinary(), "run", dir + "/p.yaml", "--http",
                                         "127.0.0.1:" + std::to_string(port), "--quiet-progress"},
                                        dir + "/" + log_name));
    REQUIRE(WaitFor([&] { return HttpGet(port, "/healthz").status == 200; }));
  }
  void Stop() {
    process->Signal(SIGTERM);
    REQUIRE(ExitStatus(process->Wait(std::chrono::seconds(30))) == 0);
    process.reset();
  }
  double Metric(const std::string& name, const std::map<std::string, std::string>& labels) {
    return ParsePrometheus(HttpGet(port, "/metrics").body).Value(name, labels).value_or(-1);
  }
  /// Every model has closed all its windows of the data.
  bool AllEvaluated(int models, int windows_per_model) {
    for (int i = 0; i < models; ++i) {
      if (Metric("driftd_drift_evaluations_total",
                 {{"pipeline", "ops"}, {"model", ModelName(i)}}) < windows_per_model) {
        return false;
      }
    }
    return true;
  }
};

/// The data in one file read at once, or (`files` > 1) in that many files of consecutive
/// records read one a batch, so that windows close in batches of their own.
inline DriftingDaemon PrepareDriftingDaemon(const TempDir& tmp, int files = 1) {
  DriftingDaemon daemon;
  daemon.dir = tmp.path().string();
  const int per_file = 3000 / files;
  for (int f = 0; f < files; ++f) {
    WriteFileAt(tmp / fmt::format("input/logs-{:02}.jsonl", f),
                DriftRecords({.records_per_model = 3000,
                              .from = f * per_file,
                              .until = f + 1 == files ? -1 : (f + 1) * per_file}));
  }
  std::string yaml = DriftPipelineYaml("ops", tmp / "input", tmp / "out");
  if (files > 1) {
    const std::string path = "options: {path: " + (tmp / "input") + "}";
    const size_t at = yaml.find(path);
    REQUIRE(at != std::string::npos);
    yaml.replace(at, path.size(),
                 "options: {path: " + (tmp / "input") + ", maxFilesPerTrigger: 1}");
  }
  WriteFileAt(tmp / "p.yaml", yaml);
  daemon.port = FreePort();
  return daemon;
}

}  // namespace driftd::testing
