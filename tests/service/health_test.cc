// Health that tells the truth: /healthz (and `driftd health`, the container's HEALTHCHECK)
// fails while a batch is stuck beyond --liveness-timeout; /readyz fails when nothing of what
// was configured runs; a webhook receiver that never answers costs each batch at most the
// sink's retry budget, so the statistics go on and liveness holds.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

int Exit(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

double MetricValue(int port, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  return ParsePrometheus(HttpGet(port, "/metrics").body).Value(name, labels).value_or(-1);
}

// A TCP port that accepts connections (the kernel completes them from the backlog) and never
// answers: an HTTP receiver that hangs.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(::listen(fd_, 128) == 0);
    socklen_t size = sizeof(address);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
  }
  ~SilentServer() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The rate source's inference logs, statistics of every batch to a webhook.
std::string WebhookPipeline(const std::string& name, const std::string& dir, int port,
                            const std::string& webhook_options) {
  return "name: " + name + R"(
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
  - {name: ground_truth, type: double}
source:
  format: rate
  options: {mode: inference, rowsPerSecond: 500, models: 2, features: 2, seed: 3}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
sinks:
  - {name: hook, format: webhook, stream: stats, outputMode: update, options: {url: "http://127.0.0.1:)" +
         std::to_string(port) + "/hook\", " + webhook_options + R"(}}
trigger: {processingTime: 300 milliseconds}
checkpointLocation: )" +
         dir + "/checkpoint-" + name + "\n";
}

TEST_CASE("a directory whose every pipeline file is refused is live but not ready",
          "[service][health][e2e]") {
  TempDir dir("driftd-none-running");
  WriteFileAt(dir / "pipelines/a.yaml", "name: a\nsource: {format: nope}\n");
  WriteFileAt(dir / "pipelines/b.yaml", "this: [is not a pipeline\n");
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "pipelines", "--http", "127.0.0.1:0"}, log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  // Until the files are loaded /readyz says "loading pipelines"; then what was refused.
  REQUIRE(WaitFor([&] {
    HttpReply reply = HttpGet(*port, "/readyz");
    return reply.status != 0 && reply.body.find("loading") == std::string::npos;
  }));
  HttpReply ready = HttpGet(*port, "/readyz");
  CHECK(ready.status == 503);
  CHECK_THAT(ready.body, Catch::Contains("0 of 2 pipeline files running"));
  CHECK_THAT(ready.body, Catch::Contains("a.yaml: refused"));
  CHECK_THAT(ready.body, Catch::Contains("b.yaml: refused"));
  CHECK(HttpGet(*port, "/healthz").status == 200);
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  CHECK(RunDriftd({"health", "--http", address}).exit_code == 0);
  CHECK(RunDriftd({"health", "--ready", "--http", address}).exit_code == 1);

  // A valid file appears and is loaded on SIGHUP: ready.
  WriteFileAt(dir / "pipelines/c.yaml", RatePipelineYaml("c", dir.path().string()));
  daemon.Signal(SIGHUP);
  CHECK(WaitFor([&] { return HttpGet(*port, "/readyz").status == 200; }, 60s));
  daemon.Signal(SIGTERM);
  CHECK(Exit(daemon.Wait(30s)) == 0);
}

TEST_CASE("an empty pipeline directory is not ready", "[service][health][e2e]") {
  TempDir dir("driftd-empty-dir");
  std::filesystem::create_directories(dir / "pipelines");
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "pipelines", "--http", "127.0.0.1:0"}, log);
  auto port = WaitForHttpPort(log);
  REQUIRE(port);
  REQUIRE(WaitFor([&] {
    HttpReply reply = HttpGet(*port, "/readyz");
    return reply.status != 0 && reply.body.find("loading") == std::string::npos;
  }));
  HttpReply ready = HttpGet(*port, "/readyz");
  CHECK(ready.status == 503);
  CHECK_THAT(ready.body, Catch::Contains("no pipeline file"));
  daemon.Signal(SIGTERM);
  CHECK(Exit(daemon.Wait(30s)) == 0);
}

TEST_CASE("/healthz and driftd health fail while a batch is stuck beyond --liveness-timeout",
          "[service][health][e2e]") {
  TempDir dir("driftd-stuck");
  SilentServer silent;
  // One request may wait a minute for the silent receiver, far beyond the 2 s liveness limit.
  WriteFileAt(dir / "p.yaml", WebhookPipeline("stuck", dir.path().string(), silent.port(),
                                              "timeoutMs: 60000, onFailure: retry"));
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", dir / "p.yaml", "--http",
                                     "127.0.0.1:0", "--liveness-timeout", "2",
                                     "--quiet-progress"},
                                    log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  REQUIRE(WaitFor([&] { return HttpGet(*port, "/healthz").status == 503; }, 30s));
  CHECK(RunDriftd({"health", "--http", "127.0.0.1:" + std::to_string(*port)}).exit_code == 1);
  CHECK(WaitFor([&] {
    return ReadFile(log).find("inside one batch for more than 2000 ms") != std::string::npos;
  }));
  daemon.Signal(SIGKILL);
  daemon.Wait(10s);
}

TEST_CASE(
    "a webhook receiver that never answers costs each batch at most the retry budget: the "
    "statistics go on, the rows are dead-lettered and liveness holds",
    "[service][health][webhook][e2e]") {
  TempDir dir("driftd-silent-hook");
  SilentServer silent;
  // The budget (1 s + a 0.5 s timeout) inside a 4 s liveness limit, as the defaults (20 s +
  // 5 s) sit inside systemd's WatchdogSec=30s.
  WriteFileAt(dir / "p.yaml",
              WebhookPipeline("silent", dir.path().string(), silent.port(),
                              "timeoutMs: 500, retryBudgetMs: 1000, onFailure: dead_letter"));
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", dir / "p.yaml", "--http",
                                     "127.0.0.1:0", "--liveness-timeout", "4",
                                     "--quiet-progress"},
                                    log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  int unhealthy = 0;
  REQUIRE(WaitFor(
      [&] {
        unhealthy += HttpGet(*port, "/healthz").status != 200;
        return MetricValue(*port, "driftd_batches_total", {{"pipeline", "silent"}}) >= 4;
      },
      90s));
  CHECK(unhealthy == 0);
  const std::string dead =
      ReadFile(dir.path() / "checkpoint-silent/sinks/webhook-hook.dead-letter.jsonl");
  CHECK_THAT(dead, Catch::Contains("\"sink\":\"hook\""));
  daemon.Signal(SIGTERM);
  CHECK(Exit(daemon.Wait(30s)) == 0);
}

}  // namespace
}  // namespace driftd::testing
