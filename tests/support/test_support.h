// Helpers shared by driftd's tests: temporary directories, files, awaiting conditions, and
// running the driftd binary as a child process (for end-to-end and crash tests).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace driftd::testing {

/// A fresh directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "driftd-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(std::string_view name) const { return (path_ / name).string(); }
  /// A path inside the directory (not created).
  std::string Sub(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

std::string ReadFile(const std::filesystem::path& path);
void WriteFile(const std::filesystem::path& path, std::string_view content);
void AppendFile(const std::filesystem::path& path, std::string_view content);
std::vector<std::string> SplitLines(std::string_view text);

/// Polls `condition` every 20 ms until it holds or `timeout` passes; returns whether it held.
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// A child process with stdout and stderr redirected to a file.
class ChildProcess {
 public:
  /// Starts `argv` (argv[0] is the program path) with `env` added to the environment.
  static ChildProcess Start(const std::vector<std::string>& argv, const std::string& output_path,
                            const std::map<std::string, std::string>& env = {});
  ChildProcess(ChildProcess&& other) noexcept;
  ~ChildProcess();  // kills (SIGKILL) and reaps a child still running

  pid_t pid() const { return pid_; }
  void Signal(int signal) const;
  /// Waits for the exit; returns the wait status, or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Exited();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> status_;
};

/// Path of the driftd binary under test.
std::string DriftdBinary();

struct RunResult {
  int exit_code = -1;  // -1 if killed by a signal or timed out
  std::string output;  // stdout + stderr
};

/// Runs driftd with `args` to completion (killing it after `timeout`).
RunResult RunDriftd(const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60),
                    const std::map<std::string, std::string>& env = {});

struct MeasuredRun {
  int exit_code = -1;  // -1 if killed (over a limit, or by a signal)
  std::string output;  // stdout + stderr
  /// CPU time (user + system) the child used: unlike wall time, it hardly depends on how busy
  /// the machine is.
  double cpu_seconds = 0;
  /// Peak resident memory of the child (getrusage's ru_maxrss).
  int64_t peak_rss_kb = 0;
  /// The child was killed for going over `rss_limit_kb` or `timeout`.
  bool over_limit = false;
};

/// Runs driftd with `args` to completion, measuring its CPU time and peak memory. The child is
/// killed when its resident memory passes `rss_limit_kb` or when `timeout` passes, so that a
/// runaway cannot take the test machine's memory with it.
MeasuredRun RunDriftdMeasured(const std::vector<std::string>& args, int64_t rss_limit_kb,
                              std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// Resident memory of process `pid` in KiB (VmRSS), or -1 when it cannot be read.
int64_t ResidentKb(pid_t pid);

/// How `KillRepeatedly` kills.
struct CrashLoopOptions {
  int kills = 25;  // stop after this many kills
  int max_lives = 200;
  uint32_t seed = 20261129;
  /// Every third life dies this long (at most) after its start, start-up included.
  std::chrono::milliseconds max_blind_delay{50};
  /// The other lives die at most this long after they have made progress.
  std::chrono::milliseconds max_delay_after_progress{5};
  /// How long a life may take to make progress before the test gives up on it.
  std::chrono::milliseconds progress_timeout{std::chrono::seconds(60)};
  std::map<std::string, std::string> env;
};

/// Starts `argv` again and again and kills each life with SIGKILL at a random moment, until
/// `options.kills` kills, or `finished()` holds, or a life ends by itself with nothing left to
/// do. Every third life is killed blind (a random delay from its start); the others once
/// `progress()` (say, committed batches) has grown during that life plus a short random delay,
/// so that the number of kills does not depend on how fast the machine is. Returns the kills.
int KillRepeatedly(const std::vector<std::string>& argv, const std::string& output_path,
                   const std::function<int64_t()>& progress, const std::function<bool()>& finished,
                   const CrashLoopOptions& options = {});

}  // namespace driftd::testing
