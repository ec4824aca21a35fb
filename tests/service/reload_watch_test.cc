// --reload-on-change: the pipeline directory is re-read when its files change, without a
// SIGHUP, including the way Kubernetes updates a mounted ConfigMap (the files are symlinks
// through "..data", which is swapped by a rename).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool Running(int port, const std::string& pipeline) {
  return ParsePrometheus(HttpGet(port, "/metrics").body)
             .Value("driftd_query_state", {{"pipeline", pipeline}, {"state", "running"}})
             .value_or(0) == 1;
}

// A ConfigMap volume as the kubelet writes it: <dir>/..<version>/<files>, "..data" pointing
// at the current version, and each visible file a symlink through "..data".
void PublishConfigMap(const fs::path& dir, const std::string& version,
                      const std::map<std::string, std::string>& files) {
  const fs::path data = dir / (".." + version);
  fs::create_directories(data);
  for (const auto& [name, text] : files) WriteFileAt(data / name, text);
  const fs::path temp = dir / "..data_tmp";
  fs::remove(temp);
  fs::create_directory_symlink(data.filename(), temp);
  fs::rename(temp, dir / "..data");  // the atomic swap
  for (const auto& [name, text] : files) {
    if (!fs::is_symlink(dir / name)) fs::create_symlink(fs::path("..data") / name, dir / name);
  }
}

TEST_CASE("with reload on change, the pipelines are re-read when files or a ConfigMap change",
          "[service][reload][e2e]") {
  TempDir dir("driftd-watch");
  const fs::path pipelines = dir.path() / "pipelines";
  fs::create_directories(pipelines);
  PublishConfigMap(pipelines, "v1", {{"a.yaml", RatePipelineYaml("a", dir.path().string())}});
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", pipelines.string(), "--http",
                                     "127.0.0.1:0", "--quiet-progress", "--reload-on-change"},
                                    log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  REQUIRE(WaitFor([&] { return Running(*port, "a"); }, 60s));

  // A new file appears: its pipeline starts.
  WriteFileAt(pipelines / "b.yaml", RatePipelineYaml("b", dir.path().string()));
  CHECK(WaitFor([&] { return Running(*port, "b"); }, 60s));

  // The ConfigMap is updated: a.yaml's new content replaces its query.
  PublishConfigMap(pipelines, "v2",
                   {{"a.yaml", RatePipelineYaml("a", dir.path().string(),
                                                "{processingTime: 300 milliseconds}")}});
  CHECK(WaitFor([&] {
    return ReadFile(log).find("a.yaml: changed; replacing pipeline a") != std::string::npos;
  }, 60s));
  CHECK(WaitFor([&] { return Running(*port, "a"); }, 60s));

  // A file removed: its query stops.
  fs::remove(pipelines / "b.yaml");
  CHECK(WaitFor([&] {
    return ReadFile(log).find("b.yaml: file removed; stopping pipeline b") != std::string::npos;
  }, 60s));
  CHECK_THAT(ReadFile(log), Catch::Contains("pipeline files changed: re-reading"));
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(30s);
  CHECK((status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
}

}  // namespace
}  // namespace driftd::testing
