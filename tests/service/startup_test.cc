// Start-up never hangs: a pipeline that does not load ends the process with its exit code at
// once, with the HTTP endpoint on or off and with a client hammering the port, and a SIGTERM
// at any moment of the start ends it cleanly. Under systemd a start-up error must exit with
// 78, or the unit's "do not restart on 78" rule never fires.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Starts per way: the sanitizer build runs each start ten times slower, and the race it looks
// for shows within a few dozen starts there.
int Starts() {
  const char* kind = std::getenv("DRIFTD_BUILD_KIND");
  return kind != nullptr && std::string_view(kind) == "sanitize" ? 40 : 200;
}

// A client that asks the port for /healthz over and over, as a probe or a scraper does while
// the daemon starts.
class Poller {
 public:
  explicit Poller(int port) : port_(port), thread_([this] { Run(); }) {}
  ~Poller() {
    stop_.store(true);
    thread_.join();
  }
  int connections() const { return connections_.load(); }

 private:
  void Run() {
    const std::string request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    while (!stop_.load()) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port_));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        ++connections_;
        (void)send(fd, request.data(), request.size(), MSG_NOSIGNAL);
      } else {
        std::this_thread::sleep_for(200us);
      }
      close(fd);
    }
  }

  const int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

struct Tally {
  int hangs = 0;
  int wrong_code = 0;
  std::chrono::milliseconds slowest{0};
  std::string last_output;
};

// Runs `argv` `starts` times; a start that has not exited 10 s later is a hang (killed).
// `signal_within`: when set, each start gets a SIGTERM at a random moment in that span.
Tally StartRepeatedly(const TempDir& dir, const std::vector<std::string>& argv, int starts,
                      int expected_code, std::optional<std::chrono::milliseconds> signal_within) {
  Tally tally;
  std::mt19937 random(20261204);
  for (int i = 0; i < starts; ++i) {
    const std::string log = dir / ("start-" + std::to_string(i) + ".log");
    const auto begin = Clock::now();
    auto child = ChildProcess::Start(argv, log);
    if (signal_within) {
      std::uniform_int_distribution<int> delay(0, static_cast<int>(signal_within->count()));
      std::this_thread::sleep_for(std::chrono::milliseconds(delay(random)));
      child.Signal(SIGTERM);
    }
    std::optional<int> status = child.Wait(10s);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - begin);
    tally.slowest = std::max(tally.slowest, took);
    if (!status) {
      ++tally.hangs;
      tally.last_output = ReadFile(log);
      continue;  // the destructor kills it
    }
    const int code = WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
    // A SIGTERM that comes before driftd has set up its signal handling ends it the default
    // way, which is a clean end too (systemd counts it as one).
    const bool terminated = signal_within && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGTERM;
    if (code != expected_code && !terminated) {
      ++tally.wrong_code;
      tally.last_output = ReadFile(log);
    }
    std::filesystem::remove(log);
  }
  return tally;
}

}  // namespace

TEST_CASE("a pipeline that does not load exits with 78 at once, never hanging, whether the HTTP "
          "endpoint is on, off or being polled",
          "[service][startup][e2e]") {
  TempDir dir("driftd-startup");
  const std::string missing = dir / "nonexistent.yaml";
  const std::string invalid = dir / "invalid.yaml";
  WriteFile(invalid, "name: broken\nschema: [ {name: x, type: double}\nsource: {format: rate}\n");
  const int starts = Starts();

  SECTION("a file that does not exist, the default endpoint") {
    // The default --http: the port may be taken by another daemon on this host, in which case
    // driftd runs without it; either way the start must end.
    Tally tally = StartRepeatedly(dir, {DriftdBinary(), "run", missing}, starts, 78, std::nullopt);
    INFO(tally.last_output);
    CHECK(tally.hangs == 0);
    CHECK(tally.wrong_code == 0);
  }
  SECTION("an invalid file, the endpoint on a port of its own") {
    const int port = FreePort();
    Tally tally = StartRepeatedly(
        dir, {DriftdBinary(), "run", invalid, "--http", "127.0.0.1:" + std::to_string(port)},
        starts, 78, std::nullopt);
    INFO(tally.last_output);
    CHECK(tally.hangs == 0);
    CHECK(tally.wrong_code == 0);
  }
  SECTION("an invalid file, the endpoint off") {
    Tally tally = StartRepeatedly(dir, {DriftdBinary(), "run", invalid, "--http", "off"}, starts,
                                  78, std::nullopt);
    INFO(tally.last_output);
    CHECK(tally.hangs == 0);
    CHECK(tally.wrong_code == 0);
  }
  SECTION("both kinds of bad file while a client polls the port") {
    const int port = FreePort();
    Poller poller(port);
    const std::string http = "127.0.0.1:" + std::to_string(port);
    Tally missing_tally = StartRepeatedly(dir, {DriftdBinary(), "run", missing, "--http", http},
                                          starts / 2, 78, std::nullopt);
    Tally invalid_tally = StartRepeatedly(dir, {DriftdBinary(), "run", invalid, "--http", http},
                                          starts / 2, 78, std::nullopt);
    INFO(missing_tally.last_output << invalid_tally.last_output);
    CHECK(missing_tally.hangs + invalid_tally.hangs == 0);
    CHECK(missing_tally.wrong_code + invalid_tally.wrong_code == 0);
  }
}

TEST_CASE("SIGTERM at any moment of a start ends the daemon with exit code 0 (or by the "
          "signal itself, before driftd takes signals over)",
          "[service][startup][e2e]") {
  TempDir dir("driftd-startup-term");
  WriteFileAt(dir / "p.yaml", RatePipelineYaml("starting", dir.path().string()));
  const int port = FreePort();
  Poller poller(port);
  // A signal in the first 50 ms lands before, during or after the endpoint opens and the query
  // restores its checkpoint.
  Tally tally = StartRepeatedly(
      dir,
      {DriftdBinary(), "run", dir / "p.yaml", "--http", "127.0.0.1:" + std::to_string(port),
       "--quiet-progress"},
      Starts() / 4, 0, 50ms);
  INFO(tally.last_output);
  CHECK(tally.hangs == 0);
  CHECK(tally.wrong_code == 0);
}

}  // namespace driftd::testing
