// Crash safety of CheckpointStore::Commit: a child process commits batches as fast as it can and
// is SIGKILLed at random moments; after each kill the checkpoint must hold exactly one batch's
// worth of everything (offsets, state, outbox), never a mix of two.
//
// The child is this test binary started again (posix_spawn + exec) running a hidden test case:
// a fresh process, because forking a process that already runs RocksDB's background threads
// would leave the child with locks and thread pools it cannot use.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "state/checkpoint_store.h"
#include "tests/state/temp_dir.h"

extern char** environ;

namespace driftd {
namespace {

constexpr const char* kChildTestName = "checkpoint crash child commits batches until killed";
constexpr const char* kDirEnv = "DRIFTD_CRASH_CHILD_DIR";
constexpr const char* kFdEnv = "DRIFTD_CRASH_CHILD_FD";
constexpr int kChildReadyFd = 200;  // where the child finds the pipe it reports progress on
constexpr int kStateKeys = 64;
constexpr int kCommitHistory = 5;
constexpr int64_t kWatermarkPerBatch = 1000;

std::string StateKey(int i) { return fmt::format("model-{:02d}/feature", i); }

/// Every state value of batch N: N, padded so a batch writes a few kB.
std::string BatchValue(int64_t batch_id) { return fmt::format("{:>64}", batch_id); }

SourceOffsets EndOffsets(int64_t batch_id) { return {{"p0", batch_id}, {"p1", batch_id}}; }

CheckpointOptions ChildOptions() {
  CheckpointOptions options;
  options.sync = true;
  options.commit_history = kCommitHistory;
  return options;
}

[[noreturn]] void ChildFail(const std::string& what) {
  std::fprintf(stderr, "crash child: %s\n", what.c_str());
  std::_Exit(2);
}

/// The child's life: recover like the executor does (finish the outbox), then commit batch after
/// batch, each followed by two delivery confirmations, until SIGKILL.
[[noreturn]] void RunChild(const std::string& dir, int ready_fd) {
  auto store = OpenCheckpointStore(dir, ChildOptions());
  if (!store) ChildFail(store.error().message());
  auto pending = (*store)->PendingOutbox();
  if (!pending) ChildFail(pending.error().message());
  for (const OutboxEntry& entry : *pending) {
    for (const std::string& sink : entry.pending_sinks) {
      if (!(*store)->MarkDelivered(entry.batch_id, sink)) ChildFail("recovery MarkDelivered");
    }
  }
  auto last = (*store)->LastCommit();
  if (!last) ChildFail(last.error().message());
  const int64_t first = *last ? (**last).batch_id + 1 : 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);

  BatchWrite write;
  write.state_puts.resize(kStateKeys);
  for (int i = 0; i < kStateKeys; ++i) write.state_puts[i].first = StateKey(i);
  write.outbox.pending_sinks = {"a", "b"};
  for (int64_t id = first;; ++id) {
    write.commit.batch_id = id;
    write.commit.start = EndOffsets(id - 1);
    write.commit.end = EndOffsets(id);
    write.commit.watermark_us = id * kWatermarkPerBatch;
    for (auto& put : write.state_puts) put.second = BatchValue(id);
    // Even batches put the parity key, odd ones delete it: deletes must be atomic too.
    write.state_deletes.clear();
    if (id % 2 == 0) {
      write.state_puts.emplace_back("parity", BatchValue(id));
    } else {
      write.state_deletes.push_back("parity");
    }
    write.outbox.payload = fmt::format("batch-{}", id);
    if (auto status = (*store)->Commit(write); !status) ChildFail(status.error().message());
    if (id % 2 == 0) write.state_puts.pop_back();
    if (id == first) {
      const char byte = 1;
      if (::write(ready_fd, &byte, 1) != 1) ChildFail("reporting progress");
    }
    if (!(*store)->MarkDelivered(id, "a") || !(*store)->MarkDelivered(id, "b")) {
      ChildFail("MarkDelivered");
    }
    // Never outlive a parent that died without killing us.
    if (std::chrono::steady_clock::now() > give_up) std::_Exit(3);
  }
}

TEST_CASE("checkpoint crash child commits batches until killed", "[.][crash-child]") {
  const char* dir = std::getenv(kDirEnv);
  const char* fd = std::getenv(kFdEnv);
  if (dir == nullptr || fd == nullptr) {
    FAIL("only the crash test runs this, with " << kDirEnv << " and " << kFdEnv << " set");
  }
  RunChild(dir, std::atoi(fd));
}

/// Starts the child writer on `dir`; returns its pid and the read end of its progress pipe.
std::pair<pid_t, int> SpawnChild(const std::string& dir) {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  REQUIRE(fds[1] != kChildReadyFd);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(fmt::format("{}={}", kDirEnv, dir));
  env_strings.push_back(fmt::format("{}={}", kFdEnv, kChildReadyFd));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string exe = "/proc/self/exe";
  std::string name = kChildTestName;
  std::vector<char*> argv = {exe.data(), name.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears close-on-exec on the copy, so only the write end reaches the child.
  posix_spawn_file_actions_adddup2(&actions, fds[1], kChildReadyFd);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    FAIL("posix_spawn failed: " << rc);
  }
  return {pid, fds[0]};
}

/// Waits until the child has committed its first batch of this life.
void AwaitFirstCommit(pid_t pid, int ready_fd) {
  pollfd p{ready_fd, POLLIN, 0};
  const int ready = poll(&p, 1, 30'000);
  char byte = 0;
  if (ready == 1 && read(ready_fd, &byte, 1) == 1) return;
  int status = 0;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  FAIL("the child never committed (exit status " << status << ")");
}

struct Observed {
  int64_t batch_id = -1;
};

/// Reopens the checkpoint and checks that offsets, state and outbox all belong to one batch.
Observed CheckConsistent(const std::string& dir, int64_t previous) {
  auto opened = OpenCheckpointStore(dir, ChildOptions());
  if (!opened) FAIL("reopening after kill: " << opened.error().message());
  CheckpointStore& store = **opened;

  auto last = store.LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  const int64_t n = (**last).batch_id;
  INFO("last committed batch " << n);
  // The child reported a commit in its life, so the log moved past the previous life's batch.
  REQUIRE(n > previous);
  CHECK((**last).end == EndOffsets(n));
  CHECK((**last).start == EndOffsets(n - 1));
  CHECK((**last).watermark_us == n * kWatermarkPerBatch);

  int state_keys = 0;
  bool parity_seen = false;
  int64_t state_bytes = 0;
  REQUIRE(store.ScanState([&](std::string_view key, std::string_view value) {
    state_bytes += static_cast<int64_t>(key.size() + value.size());
    if (key == "parity") {
      parity_seen = true;
      CHECK(value == BatchValue(n));
      return;
    }
    ++state_keys;
    CHECK(value == BatchValue(n));
  }));
  CHECK(state_keys == kStateKeys);
  CHECK(parity_seen == (n % 2 == 0));
  CHECK(store.Stats().keys == kStateKeys + (parity_seen ? 1 : 0));
  CHECK(store.Stats().bytes == state_bytes);

  auto outbox = store.PendingOutbox();
  REQUIRE(outbox);
  // Only the last batch can still be undelivered (the child finishes older ones at start), and
  // sink "a" is always confirmed before "b".
  REQUIRE(outbox->size() <= 1);
  if (!outbox->empty()) {
    const OutboxEntry& entry = outbox->front();
    CHECK(entry.batch_id == n);
    CHECK(entry.payload == fmt::format("batch-{}", n));
    const bool both = entry.pending_sinks == std::vector<std::string>{"a", "b"};
    const bool only_b = entry.pending_sinks == std::vector<std::string>{"b"};
    CHECK((both || only_b));
  }

  auto recent = store.RecentCommits(100);
  REQUIRE(recent);
  CHECK(recent->size() == static_cast<size_t>(std::min<int64_t>(n + 1, kCommitHistory)));
  for (size_t i = 0; i < recent->size(); ++i) {
    CHECK((*recent)[i].batch_id == n - static_cast<int64_t>(i));
  }
  return Observed{n};
}

TEST_CASE("a commit killed at any moment leaves the whole batch or none of it", "[state][crash]") {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("checkpoint");
  const unsigned seed = std::random_device{}();
  INFO("random seed " << seed);
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> delay_us(0, 30'000);

  constexpr int kKills = 25;
  int64_t last = -1;
  for (int round = 0; round < kKills; ++round) {
    INFO("kill " << round + 1 << " of " << kKills);
    auto [pid, ready_fd] = SpawnChild(dir);
    AwaitFirstCommit(pid, ready_fd);
    // The random moment of death is the point of this test, not a wait for a condition.
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    REQUIRE(kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    close(ready_fd);
    // Dying of anything but our SIGKILL means the child failed on its own.
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    last = CheckConsistent(dir, last).batch_id;
  }
  // Each life committed at least one batch.
  CHECK(last >= kKills - 1);
}

}  // namespace
}  // namespace driftd
