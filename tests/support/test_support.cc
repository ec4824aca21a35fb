#include "tests/support/test_support.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace driftd::testing {

TempDir::TempDir(std::string_view prefix) {
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate = std::filesystem::temp_directory_path() /
                     (std::string(prefix) + "-" + std::to_string(getpid()) + "-" +
                      std::to_string(random() % 1000000));
    std::error_code error;
    if (std::filesystem::create_directory(candidate, error)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::filesystem::path& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

void AppendFile(const std::filesystem::path& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

std::vector<std::string> SplitLines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

namespace {

// Starts `argv` with stdout and stderr appended to `output_path` and `env` added to the
// environment; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& output_path,
            const std::map<std::string, std::string>& env) {
  // Everything the child needs is built before the fork: between fork and exec the child may
  // only make async-signal-safe calls (another thread of this process may hold malloc's lock).
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> environment_text;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    const std::string name(text.substr(0, text.find('=')));
    if (env.count(name) == 0) environment_text.emplace_back(text);
  }
  for (const auto& [name, value] : env) environment_text.push_back(name + "=" + value);
  std::vector<char*> environment;
  for (auto& text : environment_text) environment.push_back(text.data());
  environment.push_back(nullptr);

  // A signal sent to the child before it has exec'd must not run this process's handlers
  // (Catch2 reports fatal signals, which in a forked child deadlocks): signals stay blocked
  // across the fork, the child sets every disposition to the default, then unblocks them, so
  // that a pending SIGTERM ends it as it would end the program.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = fork();
  if (pid < 0) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int signal = 1; signal < NSIG; ++signal) sigaction(signal, &default_action, nullptr);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    execve(args[0], args.data(), environment.data());
    _exit(127);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return pid;
}

}  // namespace

ChildProcess ChildProcess::Start(const std::vector<std::string>& argv,
                                 const std::string& output_path,
                                 const std::map<std::string, std::string>& env) {
  return ChildProcess(Spawn(argv, output_path, env));
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), status_(other.status_) {
  other.pid_ = -1;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

void ChildProcess::Signal(int signal) const {
  if (pid_ > 0 && !status_) kill(pid_, signal);
}

bool ChildProcess::Exited() {
  if (status_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    status_ = status;
    return true;
  }
  return false;
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (WaitFor([&] { return Exited(); }, timeout)) return status_;
  return std::nullopt;
}

std::string DriftdBinary() {
#ifdef DRIFTD_BINARY
  return DRIFTD_BINARY;
#else
  return "driftd";
#endif
}

RunResult RunDriftd(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                    const std::map<std::string, std::string>& env) {
  TempDir dir("driftd-run");
  std::string output_path = dir / "output.txt";
  std::vector<std::string> argv = {DriftdBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess child = ChildProcess::Start(argv, output_path, env);
  RunResult result;
  auto status = child.Wait(timeout);
  if (status && WIFEXITED(*status)) result.exit_code = WEXITSTATUS(*status);
  if (!status) child.Signal(SIGKILL);
  result.output = ReadFile(output_path);
  return result;
}

int64_t ResidentKb(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

MeasuredRun RunDriftdMeasured(const std::vector<std::string>& args, int64_t rss_limit_kb,
                              std::chrono::milliseconds timeout) {
  TempDir dir("driftd-measured");
  std::string output_path = dir / "output.txt";
  std::vector<std::string> argv = {DriftdBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = Spawn(argv, output_path, {});
  MeasuredRun result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  rusage usage{};
  while (true) {
    pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    const int64_t rss = ResidentKb(pid);
    if (rss > rss_limit_kb || std::chrono::steady_clock::now() >= deadline) {
      result.over_limit = true;
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!result.over_limit && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  result.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  result.peak_rss_kb = usage.ru_maxrss;
  result.output = ReadFile(output_path);
  return result;
}

int KillRepeatedly(const std::vector<std::string>& argv, const std::string& output_path,
                   const std::function<int64_t()>& progress, const std::function<bool()>& finished,
                   const CrashLoopOptions& options) {
  using std::chrono::milliseconds;
  using Clock = std::chrono::steady_clock;
  std::mt19937 random(options.seed);
  auto random_delay = [&](milliseconds max) {
    return milliseconds(std::uniform_int_distribution<int64_t>(0, max.count())(random));
  };
  // Polls every millisecond (a kill should land within a batch, not a polling interval later)
  // until `condition` holds or `deadline` passes; false if the child ended first.
  auto alive_when = [](ChildProcess& child, const std::function<bool()>& condition,
                       Clock::time_point deadline) {
    while (!child.Exited()) {
      if (condition() || Clock::now() >= deadline) return true;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return false;
  };
  auto never = [] { return false; };
  int kills = 0;
  for (int life = 0; kills < options.kills && life < options.max_lives && !finished(); ++life) {
    const int64_t before = progress();
    ChildProcess child = ChildProcess::Start(argv, output_path, options.env);
    const auto start = Clock::now();
    bool alive;
    if (life % 3 == 0) {
      alive = alive_when(child, never, start + random_delay(options.max_blind_delay));
    } else {
      alive = alive_when(
          child, [&] { return progress() > before; }, start + options.progress_timeout);
      if (alive && progress() == before) {
        throw std::runtime_error("a life made no progress within the timeout");
      }
      alive = alive && alive_when(child, never,
                                  Clock::now() + random_delay(options.max_delay_after_progress));
    }
    if (!alive) {
      // It ended by itself: done, or failed (the caller's final run and checks will say).
      if (progress() == before) break;
      continue;
    }
    child.Signal(SIGKILL);
    if (!child.Wait(std::chrono::seconds(10))) throw std::runtime_error("SIGKILL did not stop it");
    ++kills;
  }
  return kills;
}

}  // namespace driftd::testing
