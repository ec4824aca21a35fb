// One exit code per cause, whichever connector reported it (cmd/driftd/README.md, "Exit
// codes"): a sink that cannot deliver is 1 (a file sink's broken directory as much as a
// webhook's 4xx, which is not an invalid pipeline), a stop cut short by a second signal or the
// shutdown timeout is 75.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

int ExitCode(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

// A webhook receiver on 127.0.0.1 that answers every request with `reply`, or never answers
// when `reply` is empty. Counts the requests it has read.
class Receiver {
 public:
  explicit Receiver(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    REQUIRE(listen(fd_, 16) == 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~Receiver() {
    stop_.store(true);
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
    for (int client : clients_) close(client);
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }

 private:
  void Serve() {
    while (!stop_.load()) {
      int client = accept(fd_, nullptr, nullptr);
      if (client < 0) return;
      clients_.push_back(client);
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = recv(client, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
      }
      ++requests_;
      if (!reply_.empty()) {
        (void)send(client, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        shutdown(client, SHUT_WR);
      }
    }
  }

  std::string reply_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::vector<int> clients_;
  std::thread thread_;
};

// `on_failure`: the webhook sink's onFailure (retry: a row that cannot be delivered fails the
// batch; dead_letter, the default, sets it aside and goes on).
std::string WebhookPipeline(const std::string& dir, int port, const std::string& trigger,
                            const std::string& on_failure = "retry") {
  return "name: hooked\n"
         "schema:\n"
         "  - {name: model_id, type: string, nullable: false}\n"
         "  - {name: prediction, type: double}\n"
         "source: {format: rate, options: {mode: inference, rowsPerSecond: 100, models: 1, "
         "features: 1}}\n"
         "query: {groupBy: [model_id], aggregates: [count]}\n"
         "sinks:\n"
         "  - {name: hook, format: webhook, stream: stats, outputMode: update, options: {url: "
         "\"http://127.0.0.1:" + std::to_string(port) + "/hook\", timeoutMs: 60000, "
         "maxAttempts: 1, onFailure: " + on_failure + "}}\n"
         "trigger: " + trigger + "\n"
         "checkpointLocation: " + dir + "/checkpoint\n";
}

}  // namespace

TEST_CASE("a webhook that answers 403 fails the query with exit code 1, not 78",
          "[service][exitcodes][e2e]") {
  TempDir dir("driftd-exit-4xx");
  Receiver receiver("HTTP/1.1 403 Forbidden\r\nContent-Length: 10\r\nConnection: close\r\n\r\n"
                    "forbidden\n");
  WriteFile(dir / "p.yaml", WebhookPipeline(dir.path().string(), receiver.port(),
                                            "{processingTime: 100 milliseconds}"));
  RunResult run = RunDriftd({"run", dir / "p.yaml", "--http", "off"});
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("HTTP 403"));
  CHECK(receiver.requests() >= 1);
}

TEST_CASE("a file sink whose directory cannot be made fails the query with exit code 1, not 74",
          "[service][exitcodes][e2e]") {
  TempDir dir("driftd-exit-file");
  const std::string base = dir.path().string();
  WriteFile(dir / "blocker", "a file where the sink wants a directory\n");
  WriteFileAt(base + "/p.yaml",
              RatePipelineYaml("blocked", base + "/blocker", "{once: true}"));
  // RatePipelineYaml puts the checkpoint under the same base: keep it writable.
  std::string yaml = ReadFile(base + "/p.yaml");
  yaml.replace(yaml.find("checkpointLocation: "), std::string::npos,
               "checkpointLocation: " + base + "/checkpoint\n");
  WriteFile(base + "/p.yaml", yaml);
  RunResult run = RunDriftd({"run", base + "/p.yaml", "--http", "off"});
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("blocker"));
}

TEST_CASE("a stop cut short by a second signal or by the shutdown timeout exits with 75",
          "[service][exitcodes][e2e]") {
  for (const bool second_signal : {true, false}) {
    INFO((second_signal ? "a second SIGTERM" : "--shutdown-timeout 1"));
    TempDir dir("driftd-exit-stop");
    // A receiver that never answers: the first batch stays in delivery, so a stop cannot end.
    Receiver receiver("");
    WriteFile(dir / "p.yaml", WebhookPipeline(dir.path().string(), receiver.port(),
                                              "{processingTime: 100 milliseconds}"));
    const std::string log = dir / "log.txt";
    std::vector<std::string> argv = {DriftdBinary(), "run", dir / "p.yaml", "--http", "off"};
    if (!second_signal) argv.insert(argv.end(), {"--shutdown-timeout", "1"});
    auto daemon = ChildProcess::Start(argv, log);
    REQUIRE(WaitFor([&] { return receiver.requests() >= 1; }));
    daemon.Signal(SIGTERM);
    REQUIRE(WaitFor([&] { return ReadFile(log).find("stopping after") != std::string::npos; }));
    if (second_signal) daemon.Signal(SIGTERM);
    auto status = daemon.Wait(30s);
    INFO(ReadFile(log));
    CHECK(ExitCode(status) == 75);
  }
}

TEST_CASE("a stop while a Kafka sink waits for brokers that do not answer ends the daemon at once",
          "[service][exitcodes][kafka-connect][e2e]") {
  TempDir dir("driftd-exit-connect");
  const int closed = FreePort();
  WriteFile(dir / "p.yaml",
            "name: connecting\n"
            "schema:\n"
            "  - {name: model_id, type: string, nullable: false}\n"
            "source: {format: rate, options: {mode: inference, rowsPerSecond: 10, models: 1, "
            "features: 1}}\n"
            "query: {groupBy: [model_id], aggregates: [count]}\n"
            "sinks:\n"
            "  - {name: out, format: kafka, stream: stats, outputMode: update, options: {topic: t, "
            "kafka.bootstrap.servers: \"127.0.0.1:" + std::to_string(closed) + "\"}}\n"
            "trigger: {processingTime: 1 second}\n"
            "checkpointLocation: " + dir.path().string() + "/checkpoint\n");
  const std::string log = dir / "log.txt";
  // The sink's transactional start would wait 60 s for a coordinator; the stop must not wait
  // out the 20 s shutdown timeout for it (which would end the process with 75).
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "p.yaml", "--http", "off", "--shutdown-timeout", "20"}, log);
  REQUIRE(WaitFor([&] {
    return ReadFile(log).find("starting with an empty checkpoint") != std::string::npos;
  }));
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(15s);
  INFO(ReadFile(log));
  REQUIRE(status);
  CHECK(ExitCode(status) == 0);
  CHECK_THAT(ReadFile(log), Catch::Contains("stopped while connecting"));
}

}  // namespace driftd::testing
