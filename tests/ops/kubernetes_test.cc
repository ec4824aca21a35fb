// The Kubernetes manifests of deploy/kubernetes: their shape (non-root, probes on driftd's own
// endpoints, the ConfigMap where the args read pipelines, a checkpoint volume; checked by
// kubernetes_check.py with PyYAML), and every pipeline of the ConfigMap valid for driftd with
// the StatefulSet's environment.
#include "tests/ops/ops_util.h"

namespace driftd::testing {
namespace {

TEST_CASE("the Kubernetes manifests run driftd non-root with probes on its own endpoints and "
          "valid pipelines",
          "[ops][kubernetes][e2e]") {
  if (!Have("python3")) return;
  TempDir tmp("driftd-k8s");
  const std::string source = DRIFTD_SOURCE_DIR;
  auto check = ChildProcess::Start({Which("python3"), std::string(DRIFTD_TESTS_DIR) + "/ops/kubernetes_check.py",
                                    source + "/deploy/kubernetes", tmp / "pipelines"},
                                   tmp / "check.txt");
  auto status = check.Wait(std::chrono::seconds(60));
  const std::string output = ReadFile(tmp / "check.txt");
  INFO(output);
  REQUIRE(ExitStatus(status) == 0);
  size_t validated = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tmp / "pipelines")) {
    RunResult result = RunDriftd({"validate", entry.path().string()}, std::chrono::seconds(60),
                                 {{"KAFKA_BROKERS", "kafka:9092"},
                                  {"DRIFTD_CHECKPOINT_DIR", tmp / "state"},
                                  {"PIPELINE_NAME", "driftd-0"}});
    INFO(result.output);
    CHECK(result.exit_code == 0);
    ++validated;
  }
  CHECK(validated >= 1);
}

}  // namespace
}  // namespace driftd::testing
