// The Kubernetes manifests of deploy/kubernetes, in both variants (each pod its own pipeline,
// and the pods as instances of one scaled-out pipeline): their shape (non-root, probes on
// driftd's own endpoints, the ConfigMap where the args read pipelines and equal to the examples,
// a checkpoint volume, the ServiceMonitor; checked by kubernetes_check.py with PyYAML, and
// against `kubectl kustomize` where it is installed), and every pipeline of the ConfigMap valid
// for driftd, without a warning, in the environment each variant's pod gives it.
#include <regex>
#include <sstream>

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

  // "env VARIANT NAME=VALUE": what driftd sees in each variant's first pod.
  std::map<std::string, std::map<std::string, std::string>> variants;
  std::istringstream lines(output);
  const std::regex env_line("env (\\S+) ([A-Za-z_][A-Za-z0-9_]*)=(.*)");
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_match(line, match, env_line)) variants[match[1]][match[2]] = match[3];
  }
  REQUIRE(variants.count("default") == 1);
  REQUIRE(variants.count("scale-out") == 1);
  CHECK(variants["scale-out"]["SCALE_OUT"] == "true");

  size_t validated = 0;
  for (auto& [variant, env] : variants) {
    env["DRIFTD_CHECKPOINT_DIR"] = tmp / "state";  // the pod's volume
    for (const auto& entry : std::filesystem::directory_iterator(tmp / "pipelines")) {
      RunResult result =
          RunDriftd({"validate", entry.path().string()}, std::chrono::seconds(60), env);
      INFO(variant << ": " << result.output);
      CHECK(result.exit_code == 0);
      CHECK(result.output.find("warning") == std::string::npos);
      ++validated;
    }
  }
  CHECK(validated >= 2);
}

}  // namespace
}  // namespace driftd::testing
