// Installing driftd as a package: `cpack -G DEB` from the release build, apt-installed into a
// clean debian:bookworm-slim container (podman), where the shipped unit must pass
// `systemd-analyze verify` as installed (ExecStart names /usr/bin/driftd, which the package
// put there).
#include <regex>

#include "tests/ops/ops_util.h"

namespace driftd::testing {
namespace {

TEST_CASE("the .deb installs into a clean container and its unit verifies there",
          "[ops][package][e2e]") {
  if (!Have("cpack") || !Have("podman")) return;
  TempDir tmp("driftd-deb");
  const std::filesystem::path build =
      std::filesystem::path(DriftdBinary()).parent_path().parent_path();
  auto run = ChildProcess::Start({"/bin/bash", std::string(DRIFTD_TESTS_DIR) + "/ops/deb_install.sh",
                                  build.string(), tmp / "work"},
                                 tmp / "out.txt");
  auto status = run.Wait(std::chrono::minutes(20));
  const std::string output = ReadFile(tmp / "out.txt");
  INFO(output.substr(output.size() > 8000 ? output.size() - 8000 : 0));
  REQUIRE(ExitStatus(status) == 0);
  for (const char* path : {"./usr/bin/driftd", "./usr/lib/systemd/system/driftd.service",
                           "./usr/lib/systemd/system/driftd@.service", "./etc/driftd/pipelines/",
                           "./usr/share/driftd/examples/kafka-drift.yaml",
                           "./usr/share/driftd/grafana/driftd-dashboard.json",
                           "./usr/share/driftd/avro/driftd-alert.avsc",
                           "./usr/share/driftd/kubernetes/statefulset.yaml"}) {
    CHECK_THAT(output, Catch::Contains(std::string("deb-content ") + path));
  }
  // The shared libraries it links, and /bin/kill for the units' ExecReload.
  CHECK(std::regex_search(output, std::regex("deb-Depends:.*librdkafka")));
  CHECK(std::regex_search(output, std::regex("deb-Depends:.*procps")));
  std::smatch verify;
  REQUIRE(std::regex_search(output, verify, std::regex("verify-begin\\n([\\s\\S]*?)verify-end")));
  const std::string report = verify[1].str();
  INFO(report);
  CHECK_THAT(report, Catch::Contains("verify-exit 0"));
  // verify reports problems of the unit as lines naming it; none are allowed.
  CHECK_THAT(report, !Catch::Contains("driftd.service:"));
}

}  // namespace
}  // namespace driftd::testing
