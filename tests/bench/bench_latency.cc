// End-to-end latency of the daemon, record written to the source -> row committed by the sink,
// for the continuous trigger against processingTime, measured in one run (compare the ratios,
// not absolute times across runs: the machines are shared).
//
// Each trigger gets its own daemon: a file source directory, a select query, a file sink. A
// writer moves one-record files into the source directory (rename, so a file appears whole)
// at random 5-25 ms gaps; each record carries its write time. An observer polls the sink's
// manifest every millisecond and takes, for each row of a newly committed batch, now - write
// time. Usage: bench_latency [records per trigger, default 200]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "connectors/file_sink.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct Percentiles {
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  size_t samples = 0;
};

Percentiles Summarize(std::vector<int64_t> latencies_us) {
  Percentiles p;
  if (latencies_us.empty()) return p;
  std::sort(latencies_us.begin(), latencies_us.end());
  auto at = [&](double q) {
    size_t index = static_cast<size_t>(q * static_cast<double>(latencies_us.size() - 1) + 0.5);
    return latencies_us[index] / 1000.0;
  };
  p.p50_ms = at(0.50);
  p.p99_ms = at(0.99);
  p.max_ms = latencies_us.back() / 1000.0;
  p.samples = latencies_us.size();
  return p;
}

// Runs one daemon with `trigger` and returns the latency of each of `records` records.
Percentiles Measure(const std::string& trigger, int records, uint32_t seed) {
  fs::path dir =
      fs::temp_directory_path() / fmt::format("driftd-bench-latency-{}-{}", getpid(), seed);
  fs::remove_all(dir);
  fs::create_directories(dir / "input");
  fs::create_directories(dir / "staging");
  fs::path pipeline = dir / "pipeline.yaml";
  WriteText(pipeline,
            fmt::format(R"(name: bench-latency
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: written_us, type: long}}
source:
  format: file
  options: {{path: {input}}}
query:
  select: [model_id, written_us]
sinks:
  - {{name: rows, format: file, stream: stats, outputMode: append, options: {{path: {output}}}}}
trigger: {trigger}
checkpointLocation: {checkpoint}
)",
                        fmt::arg("input", (dir / "input").string()),
                        fmt::arg("output", (dir / "output").string()), fmt::arg("trigger", trigger),
                        fmt::arg("checkpoint", (dir / "checkpoint").string())));

  std::string binary = DRIFTD_BINARY;
  std::string log = (dir / "log.txt").string();
  std::vector<std::string> args = {binary, "run", pipeline.string(), "--quiet-progress"};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start %s\n", binary.c_str());
    std::exit(1);
  }
  posix_spawn_file_actions_destroy(&actions);
  // Wait until the query runs, so start-up is not measured.
  for (int i = 0; i < 3000 && ReadText(log).find("running") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  std::vector<int64_t> latencies;
  std::set<int64_t> seen_batches;
  simdjson::dom::parser parser;
  auto observe = [&] {
    auto manifest = driftd::ReadFileSinkManifest((dir / "output").string());
    if (!manifest) return;
    for (int64_t batch : *manifest) {
      if (!seen_batches.insert(batch).second) continue;
      int64_t now = WallMicros();
      fs::path part = dir / "output" / driftd::FileSinkPartName(batch, "rows");
      std::string text = ReadText(part);
      size_t begin = 0;
      while (begin < text.size()) {
        size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        simdjson::dom::element row;
        if (parser.parse(text.data() + begin, end - begin).get(row) == simdjson::SUCCESS) {
          latencies.push_back(now - int64_t(row["written_us"]));
        }
        begin = end + 1;
      }
    }
  };

  std::mt19937 random(seed);
  std::uniform_int_distribution<int> gap_ms(5, 25);
  auto next_write = std::chrono::steady_clock::now();
  for (int i = 0; i < records;) {
    if (std::chrono::steady_clock::now() >= next_write) {
      std::string name = fmt::format("r-{:06}.jsonl", i);
      WriteText(dir / "staging" / name,
                fmt::format("{{\"model_id\":\"m\",\"written_us\":{}}}\n", WallMicros()));
      fs::rename(dir / "staging" / name, dir / "input" / name);
      ++i;
      next_write += std::chrono::milliseconds(gap_ms(random));
    }
    observe();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (latencies.size() < static_cast<size_t>(records) &&
         std::chrono::steady_clock::now() < deadline) {
    observe();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  fs::remove_all(dir);
  if (latencies.size() != static_cast<size_t>(records)) {
    std::fprintf(stderr, "%s: saw %zu of %d records\n", trigger.c_str(), latencies.size(), records);
  }
  return Summarize(std::move(latencies));
}

// A process that keeps one core busy (a spinning loop) until killed: the load under which the
// continuous trigger's latency target holds.
pid_t StartBusyCore() {
  pid_t pid = fork();
  if (pid == 0) {
    volatile uint64_t spin = 0;
    for (;;) spin = spin + 1;
  }
  return pid;
}

void StopBusyCore(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

int main(int argc, char** argv) {
  int records = argc > 1 ? std::atoi(argv[1]) : 200;
  struct Case {
    std::string name;
    std::string trigger;
    bool busy_core;
  };
  std::vector<Case> cases = {
      {"continuous 1 s", "{continuous: 1 second}", false},
      {"processingTime 1 s", "{processingTime: 1 second}", false},
      {"processingTime 100 ms", "{processingTime: 100ms}", false},
      {"continuous, 1 core busy", "{continuous: 1 second}", true},
  };
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("end-to-end latency, file source -> file sink, %d records per trigger "
              "(machine load %.1f on %ld cores before the run)\n",
              records, load[0], sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-24s %10s %10s %10s %8s\n", "trigger", "p50 ms", "p99 ms", "max ms", "n");
  std::vector<Percentiles> results;
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const pid_t busy = c.busy_core ? StartBusyCore() : -1;
    Percentiles p = Measure(c.trigger, records, seed++);
    if (busy > 0) StopBusyCore(busy);
    results.push_back(p);
    std::printf("%-24s %10.1f %10.1f %10.1f %8zu\n", c.name.c_str(), p.p50_ms, p.p99_ms, p.max_ms,
                p.samples);
    std::fflush(stdout);
  }
  if (results[0].p50_ms > 0) {
    std::printf("ratio processingTime 1 s / continuous: p50 %.1fx, p99 %.1fx\n",
                results[1].p50_ms / results[0].p50_ms, results[1].p99_ms / results[0].p99_ms);
    std::printf("ratio processingTime 100 ms / continuous: p50 %.1fx, p99 %.1fx\n",
                results[2].p50_ms / results[0].p50_ms, results[2].p99_ms / results[0].p99_ms);
    std::printf("continuous with one core busy / quiet: p50 %.1fx, p99 %.1fx\n",
                results[3].p50_ms / results[0].p50_ms, results[3].p99_ms / results[0].p99_ms);
  }
  return 0;
}
