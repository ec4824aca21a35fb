// The systemd units in deploy/systemd must pass `systemd-analyze verify`.
#include <sys/wait.h>

#include <cstdlib>
#include <regex>

#include <catch2/catch.hpp>

#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

bool HaveSystemdAnalyze() { return std::system("command -v systemd-analyze >/dev/null 2>&1") == 0; }

// Runs a shell command, returning its exit code and everything it printed.
std::pair<int, std::string> Shell(const std::string& command, const std::string& output_path) {
  int status = std::system((command + " >" + output_path + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(output_path)};
}

// verify checks that ExecStart's binary exists, so the copy under test points at the binary that
// was just built; everything else is the unit exactly as shipped.
std::string UnitForVerify(const std::string& unit_name) {
  std::string text = ReadFile(std::string(DRIFTD_SOURCE_DIR) + "/deploy/systemd/" + unit_name);
  return std::regex_replace(text, std::regex("/usr/bin/driftd"), DriftdBinary());
}

}  // namespace

TEST_CASE("systemd-analyze verify accepts the driftd units without a warning",
          "[service][systemd]") {
  if (!HaveSystemdAnalyze()) {
    if (InCi()) FAIL("systemd-analyze is missing in CI: run deploy/setup-debian.sh --test");
    WARN("systemd-analyze not installed; skipping (deploy/setup-debian.sh --test installs it)");
    return;
  }
  TempDir dir("driftd-unit");
  WriteFile(dir / "driftd.service", UnitForVerify("driftd.service"));
  WriteFile(dir / "driftd@.service", UnitForVerify("driftd@.service"));
  // A template is verified through an instance of it.
  WriteFile(dir / "driftd@fraud.service", UnitForVerify("driftd@.service"));

  for (const char* unit : {"driftd.service", "driftd@fraud.service"}) {
    INFO(unit);
    auto [code, output] = Shell("systemd-analyze verify " + (dir / unit), dir / "verify.txt");
    INFO(output);
    CHECK(code == 0);
    // verify reports unknown keys and bad values as warnings with exit code 0: none allowed.
    CHECK(output.empty());
  }
}

TEST_CASE("the driftd unit is a hardened notify service that reloads with SIGHUP",
          "[service][systemd]") {
  std::string unit = ReadFile(std::string(DRIFTD_SOURCE_DIR) + "/deploy/systemd/driftd.service");
  for (const char* line :
       {"Type=notify", "ExecStart=/usr/bin/driftd run /etc/driftd/pipelines",
        "ExecReload=/bin/kill -HUP $MAINPID", "DynamicUser=yes", "StateDirectory=driftd",
        "ConfigurationDirectory=driftd", "WatchdogSec=", "Restart=on-failure",
        "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
        "PrivateDevices=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "LockPersonality=yes",
        "MemoryDenyWriteExecute=yes", "SystemCallFilter=@system-service"}) {
    INFO(line);
    CHECK(unit.find(std::string("\n") + line) != std::string::npos);
  }
}

}  // namespace driftd::testing
