// Requests a web page could make through the operator's browser: a cross-site form post, a
// fetch from another origin, a page whose name is rebound to 127.0.0.1 (DNS rebinding). None
// may change state or read the endpoint; driftd's own client (`driftd baseline reset`) still
// works. Each test runs the real binary.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "admin-tok-51c0e9a2";

struct AdminDaemon {
  TempDir dir{"driftd-http-access"};
  std::string log = dir / "log.txt";
  std::optional<ChildProcess> process;
  int port = 0;

  void Start(std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {}) {
    WriteFileAt(dir / "p.yaml", RatePipelineYaml("guarded", dir.path().string()));
    std::vector<std::string> argv = {DriftdBinary(), "run",  dir / "p.yaml", "--http",
                                     "127.0.0.1:0",  "--quiet-progress"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process.emplace(ChildProcess::Start(argv, log, env));
    auto found = WaitForHttpPort(log);
    REQUIRE(found);
    port = *found;
    REQUIRE(WaitFor([&] { return HttpGet(port, "/readyz").status == 200; }));
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  bool Reset() const { return ReadFile(log).find("warms up a new baseline") != std::string::npos; }
  void Stop() {
    process->Signal(SIGTERM);
    auto status = process->Wait(30s);
    REQUIRE(status);
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 0);
  }
};

std::string Post(const std::string& host, const std::string& headers) {
  const std::string form = "pipeline=guarded&model=model-0";
  return "POST /admin/rebaseline HTTP/1.1\r\nHost: " + host +
         "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
         std::to_string(form.size()) + "\r\n" + headers + "Connection: close\r\n\r\n" + form;
}

std::string Get(const std::string& path, const std::string& host, const std::string& headers = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + headers +
         "Connection: close\r\n\r\n";
}

}  // namespace

TEST_CASE(
    "forged admin requests (a rebound name, a foreign origin, a plain form post) are refused "
    "with 403 and reset nothing, while driftd baseline reset still resets",
    "[service][http][security][e2e]") {
  AdminDaemon daemon;
  daemon.Start();
  INFO(ReadFile(daemon.log));
  const std::string self = daemon.address();

  struct Forged {
    const char* what;
    std::string request;
  };
  const std::vector<Forged> forged = {
      {"a page on a name rebound to 127.0.0.1",
       Post("evil.example:" + std::to_string(daemon.port),
            "Origin: http://evil.example:" + std::to_string(daemon.port) + "\r\n")},
      {"the audit's request", Post("evil.example", "Origin: http://evil.example\r\n")},
      {"a fetch from another origin, even with driftd's header",
       Post(self, "Origin: http://evil.example\r\nX-Driftd-Admin: 1\r\n")},
      {"a fetch from another local port",
       Post(self, "Origin: http://127.0.0.1:3000\r\nX-Driftd-Admin: 1\r\n")},
      {"a sandboxed page", Post(self, "Origin: null\r\nX-Driftd-Admin: 1\r\n")},
      {"a cross-site form post without Origin (no custom header)", Post(self, "")},
      {"a browser request marked cross-site",
       Post(self, "X-Driftd-Admin: 1\r\nSec-Fetch-Site: cross-site\r\n")},
      {"a wrong header value", Post(self, "X-Driftd-Admin: yes\r\n")},
  };
  for (const Forged& request : forged) {
    INFO(request.what);
    HttpReply reply = HttpSend(daemon.port, request.request);
    CHECK(reply.status == 403);
    CHECK(reply.headers["x-content-type-options"] == "nosniff");
  }
  // Reads through a rebound name are refused too; IP literals and localhost are served,
  // whatever the port (a port-forward changes it).
  CHECK(HttpSend(daemon.port, Get("/api/status", "evil.example")).status == 403);
  CHECK(HttpSend(daemon.port, Get("/metrics", "evil.example.:9464")).status == 403);
  CHECK(HttpSend(daemon.port, Get("/healthz", "127.0.0.1.nip.io")).status == 403);
  CHECK(HttpSend(daemon.port, Get("/api/status", self)).status == 200);
  CHECK(HttpSend(daemon.port, Get("/api/status", "localhost:8080")).status == 200);
  CHECK(HttpSend(daemon.port, Get("/api/status", "[::1]:" + std::to_string(daemon.port))).status ==
        200);
  CHECK(HttpSend(daemon.port, Get("/api/status", "10.1.2.3:9464")).status == 200);
  // The status page's own fetches: same origin.
  CHECK(HttpSend(daemon.port, Get("/api/status", self, "Origin: http://" + self + "\r\n")).status ==
        200);
  CHECK(HttpSend(daemon.port, Get("/api/status", self, "Origin: http://evil.example\r\n")).status ==
        403);
  CHECK_FALSE(daemon.Reset());

  // driftd's own client sends what the endpoint asks for.
  RunResult reset;
  CHECK(WaitFor(
      [&] {
        reset = RunDriftd({"baseline", "reset", "--http", self, "--pipeline", "guarded", "--model",
                           "model-0"});
        return reset.exit_code == 0;
      },
      60s));
  INFO(reset.output);
  CHECK_THAT(reset.output, Catch::Contains("warms up a new baseline"));
  CHECK(WaitFor([&] { return daemon.Reset(); }));
  daemon.Stop();
}

TEST_CASE(
    "names listed in DRIFTD_HTTP_ALLOWED_HOSTS are served, and with DRIFTD_ADMIN_TOKEN set "
    "a state change needs the token",
    "[service][http][security][e2e]") {
  AdminDaemon daemon;
  daemon.Start({}, {{"DRIFTD_ADMIN_TOKEN", kToken},
                    {"DRIFTD_HTTP_ALLOWED_HOSTS", "driftd.example, .svc.cluster.local"}});
  INFO(ReadFile(daemon.log));
  const std::string self = daemon.address();
  CHECK(HttpSend(daemon.port, Get("/readyz", "driftd.example:9464")).status == 200);
  CHECK(HttpSend(daemon.port, Get("/readyz", "DRIFTD.example")).status == 200);
  CHECK(HttpSend(daemon.port, Get("/readyz", "driftd-0.driftd.monitoring.svc.cluster.local"))
            .status == 200);
  CHECK(HttpSend(daemon.port, Get("/readyz", "svc.cluster.local.evil.example")).status == 403);
  CHECK(HttpSend(daemon.port, Get("/readyz", "xdriftd.example")).status == 403);
  // A proxy's public name as the page's origin.
  CHECK(HttpSend(daemon.port, Get("/api/status", self, "Origin: https://driftd.example\r\n"))
            .status == 200);

  // The loopback rule gives way to the token.
  CHECK(HttpSend(daemon.port, Post(self, "X-Driftd-Admin: 1\r\n")).status == 403);
  CHECK(HttpSend(daemon.port, Post(self, "Authorization: Bearer wrong\r\n")).status == 403);
  RunResult without = RunDriftd(
      {"baseline", "reset", "--http", self, "--pipeline", "guarded", "--model", "model-0"});
  CHECK(without.exit_code == 1);
  CHECK_THAT(without.output, Catch::Contains("Authorization: Bearer"));
  CHECK_FALSE(daemon.Reset());
  RunResult with;
  CHECK(WaitFor(
      [&] {
        with = RunDriftd({"baseline", "reset", "--http", self, "--pipeline", "guarded", "--model",
                          "model-0"},
                         60s, {{"DRIFTD_ADMIN_TOKEN", kToken}});
        return with.exit_code == 0;
      },
      60s));
  INFO(with.output);
  CHECK(WaitFor([&] { return daemon.Reset(); }));
  daemon.Stop();
}

TEST_CASE("an --http-allowed-hosts entry with a scheme or a port is a usage error",
          "[service][http][e2e]") {
  TempDir dir("driftd-http-allowed");
  WriteFileAt(dir / "p.yaml", RatePipelineYaml("allowed", dir.path().string()));
  RunResult run = RunDriftd({"run", dir / "p.yaml", "--http", "127.0.0.1:0",
                             "--http-allowed-hosts", "http://driftd.example:9464"},
                            30s);
  CHECK(run.exit_code == 64);
  CHECK_THAT(run.output, Catch::Contains("without scheme, port or path"));
}

}  // namespace driftd::testing
