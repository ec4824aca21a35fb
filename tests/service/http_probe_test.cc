// The HTTP endpoint under a crowd: idle keep-alive connections and slow clients that send a
// request a byte at a time must not delay a liveness probe (a probe that times out restarts the
// pod). Each test runs the real binary.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The slowest of three probes of `path`, and whether each was answered with 200.
std::chrono::milliseconds SlowestProbe(int port, const std::string& path, bool& all_ok) {
  std::chrono::milliseconds slowest{0};
  all_ok = true;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    HttpReply reply = HttpGet(port, path);
    slowest = std::max(slowest,
                       std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start));
    all_ok = all_ok && reply.status == 200;
  }
  return slowest;
}

}  // namespace

TEST_CASE(
    "/healthz and /readyz answer within a second while 200 idle connections and 200 clients "
    "sending a request a byte at a time hold the endpoint",
    "[service][http][e2e]") {
  TempDir dir("driftd-http-crowd");
  WriteFileAt(dir / "p.yaml", RatePipelineYaml("crowd", dir.path().string()));
  const std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "p.yaml", "--http", "127.0.0.1:0", "--quiet-progress"}, log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  REQUIRE(WaitFor([&] { return HttpGet(*port, "/readyz").status == 200; }));
  // What a probe costs on this machine right now, without the crowd.
  bool ok = false;
  const auto quiet = SlowestProbe(*port, "/healthz", ok);
  REQUIRE(ok);

  std::vector<int> idle;
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    int fd = Connect(*port);
    REQUIRE(fd >= 0);
    idle.push_back(fd);
  }
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ";
  for (int i = 0; i < 200; ++i) {
    int fd = Connect(*port);
    REQUIRE(fd >= 0);
    slow.push_back(fd);
  }
  // The slow clients send one byte each every 500 ms: never a whole request.
  std::atomic<bool> stop{false};
  std::thread dribble([&] {
    size_t sent = 0;
    while (!stop.load()) {
      for (int fd : slow) {
        char byte = sent < request.size() ? request[sent] : 'x';
        (void)send(fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      ++sent;
      for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(50ms);
    }
  });

  // Right away, while the idle connections are still open, and again seconds later, when only
  // the slow clients hold on.
  const auto crowded = SlowestProbe(*port, "/healthz", ok);
  CHECK(ok);
  const auto ready = SlowestProbe(*port, "/readyz", ok);
  CHECK(ok);
  std::this_thread::sleep_for(3s);
  const auto later = SlowestProbe(*port, "/healthz", ok);
  CHECK(ok);
  INFO("quiet " << quiet.count() << " ms, crowded " << crowded.count() << " ms, readyz "
                << ready.count() << " ms, later " << later.count() << " ms");
  // Within a second of what the same probe takes without the crowd.
  CHECK(crowded < quiet + 1s);
  CHECK(ready < quiet + 1s);
  CHECK(later < quiet + 1s);
  CHECK_FALSE(daemon.Exited());

  stop.store(true);
  dribble.join();
  for (int fd : idle) close(fd);
  for (int fd : slow) close(fd);
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(30s);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

}  // namespace driftd::testing
