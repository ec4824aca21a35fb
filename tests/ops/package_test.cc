// Installing driftd as a package: `cpack -G DEB` from the release build, apt-installed into a
// clean debian:bookworm-slim container (podman), where the shipped unit must pass
// `systemd-analyze verify` as installed (ExecStart names /usr/bin/driftd, which the package
// put there). The package carries what a Debian maintainer asks for: a copyright file, a
// gzipped changelog and a manual page naming the package's version, a real maintainer, the
// documentation the units' Documentation= names, and no lintian error or warning.
#include <regex>

#include "tests/ops/ops_util.h"

namespace driftd::testing {
namespace {

TEST_CASE("the .deb installs into a clean container and its unit verifies there",
          "[ops][package][e2e]") {
  if (!Have("cpack") || !Have("podman") || !Have("lintian")) return;
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
                           "./usr/share/driftd/kubernetes/base/statefulset.yaml",
                           "./usr/share/driftd/kubernetes/scale-out/kustomization.yaml",
                           "./usr/share/driftd/kubernetes/servicemonitor.yaml",
                           "./usr/share/doc/driftd/copyright",
                           "./usr/share/doc/driftd/changelog.gz",
                           "./usr/share/doc/driftd/README.md",
                           "./usr/share/doc/driftd/cmd/driftd/README.md",
                           "./usr/share/doc/driftd/config/README.md",
                           "./usr/share/doc/driftd/reference.md",
                           "./usr/share/man/man1/driftd.1.gz"}) {
    CHECK_THAT(output, Catch::Contains(std::string("deb-content ") + path));
  }
  // The changelog's latest entry and the manual page are of this version, and the maintainer
  // has an address mail reaches.
  std::smatch version;
  REQUIRE(std::regex_search(output, version, std::regex("deb-Version: (\\S+)")));
  CHECK_THAT(output, Catch::Contains("deb-changelog: driftd (" + version[1].str() + ") "));
  CHECK_THAT(output, Catch::Contains("\"driftd " + version[1].str() + "\""));
  CHECK(std::regex_search(output, std::regex("deb-Maintainer: [^<\\n]+ <[^@>]+@[^>]+\\.[a-z]+>")));
  CHECK_THAT(output, !Catch::Contains("@localhost"));
  std::smatch lintian;
  REQUIRE(std::regex_search(output, lintian,
                            std::regex("lintian-begin\\n([\\s\\S]*?)lintian-end")));
  INFO(lintian[1].str());
  CHECK_THAT(lintian[1].str(), Catch::Contains("lintian-exit 0"));
  CHECK(!std::regex_search(lintian[1].str(), std::regex("(^|\\n)[EW]: ")));
  CHECK_THAT(output, Catch::Contains("doc-present file:/usr/share/doc/driftd/README.md"));
  // (podman echoes the RUN line, which holds "doc-missing $doc" itself.)
  CHECK_THAT(output, !Catch::Contains("doc-missing file:"));
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
