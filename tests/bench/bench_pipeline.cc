// End-to-end throughput and footprint of the daemon on one core and on every core:
//   file source -> mean/stddev per model and feature -> file sink,
// beside the raw simdjson on-demand parse rate of the same bytes, measured in the same run.
//
//   bench_pipeline [--records N[,N...]] [--models M] [--features F] [--dir DIR]
//                  [--drift | --drift-numeric] [--drift-window W] [--batch-records B]
//                  [--threads T[,T...]] [--rounds R] [--keep] [--driftd PATH]
//
// For each record count it writes generated inference logs and runs `driftd run` with the
// availableNow trigger once per thread count (default 1 and 2; `threads: T` in the pipeline),
// R rounds alternating between them (default 1; the medians are printed). A 1-thread run is
// pinned to CPU 0, the others may use every CPU. It prints records/s, the 1-thread rate's ratio
// to the raw parse rate (one core), each other rate's ratio to the 1-thread rate and to T times
// the raw rate, CPU time per record, and the daemon's peak RSS; the output files of every run
// are compared byte for byte. Then it appends one more file and restarts on the same checkpoint
// with the once trigger, printing the time from process start to the first committed batch.
//
// --drift adds drift detection on every feature and the prediction (default detectors and
// warmup: with the missing-value series of both columns and each model's malformed series).
// --drift-numeric lists the numeric detectors only (what the default was before the
// data-quality series), to measure what those series cost in the same run of the machine.
// --drift-window W sets windowRecords and the warmup baseline's records to W (>= 200, the
// default minSamples), so that series leave their warmup after W values and are evaluated
// every W (the default warmup, 5000, outlasts short runs). --batch-records B writes files of
// B records and reads one file per batch. For every
// run the bench then prints, per batch: the drift series whose state changed, the encoded size
// of those changes (model and series records, warmup values added, baselines that froze) and
// what drift put; the encoded size of all the state the batch changed (aggregates and drift,
// bytesChanged), what the commit put into the checkpoint (keys and values, from the progress
// records), and the bytes the daemon wrote to files (write(2) bytes from /proc/<pid>/io:
// RocksDB's WAL, flushes and compactions, less the sink's output and the log), with their
// ratios to the encoded changes.
// --keep leaves the input, pipelines and checkpoints in --dir (for profiling the daemon on them);
// --driftd runs another build of the daemon (an earlier one, to compare on the same machine).
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "connectors/inference_generator.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct ChildRun {
  int exit_code = -1;
  double seconds = 0;
  double cpu_seconds = 0;  // user + system, every thread
  long max_rss_kb = 0;
  long long write_bytes = 0;  // wchar of /proc/<pid>/io, last sample before exit
};

std::string driftd_binary = DRIFTD_BINARY;

void PinToCpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

ChildRun RunDaemon(const std::vector<std::string>& args, const std::string& log_path,
                   bool pin = true) {
  auto start = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    if (pin) PinToCpu0();
    FILE* log = std::fopen(log_path.c_str(), "w");
    if (log) {
      dup2(fileno(log), 1);
      dup2(fileno(log), 2);
    }
    std::vector<char*> argv;
    argv.push_back(driftd_binary.data());
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // The peak RSS of the daemon's own address space: VmHWM from /proc, sampled until it exits
  // (getrusage's maxrss would also count this parent's pages, shared by fork until exec).
  ChildRun run;
  int status = 0;
  std::string status_path = fmt::format("/proc/{}/status", pid);
  std::string exe_path = fmt::format("/proc/{}/exe", pid);
  std::string io_path = fmt::format("/proc/{}/io", pid);
  struct rusage usage {};
  while (wait4(pid, &status, WNOHANG, &usage) == 0) {
    // Until exec, the child's figures are this process's (copy-on-write pages).
    std::error_code error;
    if (fs::read_symlink(exe_path, error).filename() != "driftd") {
      usleep(1000);
      continue;
    }
    std::ifstream in(status_path);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("VmHWM:", 0) == 0) run.max_rss_kb = std::max(run.max_rss_kb, std::stol(line.substr(6)));
    }
    std::ifstream io(io_path);
    for (std::string line; std::getline(io, line);) {
      if (line.rfind("wchar:", 0) == 0) run.write_bytes = std::max(run.write_bytes, std::stoll(line.substr(6)));
    }
    usleep(5000);
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  run.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                    (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + now.tv_nsec / 1e9;
}

// Parses every record of `text` (JSON lines) with simdjson on-demand, touching every value:
// the raw parse limit a decoder can approach. `cpu_seconds`: the CPU time it took.
double RawParseSeconds(const std::string& text, size_t& records, double& cpu_seconds) {
  simdjson::ondemand::parser parser;
  simdjson::padded_string padded(text);
  const double cpu_start = ThreadCpuSeconds();
  auto start = Clock::now();
  records = 0;
  double checksum = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    simdjson::padded_string_view view(padded.data() + begin, end - begin,
                                      padded.size() + simdjson::SIMDJSON_PADDING - begin);
    auto doc = parser.iterate(view);
    for (auto field : doc.get_object()) {
      auto value = field.value();
      switch (value.type()) {
        case simdjson::ondemand::json_type::number: checksum += double(value.get_double()); break;
        case simdjson::ondemand::json_type::string: checksum += std::string_view(value.get_string()).size(); break;
        case simdjson::ondemand::json_type::array:
          for (auto element : value.get_array()) checksum += double(element.get_double());
          break;
        default: break;
      }
    }
    ++records;
    begin = end + 1;
  }
  auto seconds = std::chrono::duration<double>(Clock::now() - start).count();
  cpu_seconds = ThreadCpuSeconds() - cpu_start;
  if (checksum == 42.4242) std::puts("");  // keep the work observable
  return seconds;
}

// Sums of a run's progress records (one JSON object per committed batch in the log).
struct BatchWrites {
  long long batches = 0;
  long long keys = 0;
  long long bytes = 0;
  long long dirty_series = 0;
  long long dirty_bytes = 0;
  long long drift_bytes = 0;
  long long changed_bytes = 0;  // every stage's changed state, encoded (bytesChanged)
};

long long FieldOf(const std::string& line, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const size_t at = line.find(key);
  if (at == std::string::npos) return 0;
  return std::atoll(line.c_str() + at + key.size());
}

BatchWrites ReadProgress(const fs::path& log) {
  BatchWrites out;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"stateOperators\"") == std::string::npos) continue;
    ++out.batches;
    out.keys += FieldOf(line, "numKeysWritten");
    out.bytes += FieldOf(line, "bytesWritten");
    out.dirty_series += FieldOf(line, "driftDirtySeries");
    out.dirty_bytes += FieldOf(line, "driftDirtyBytes");
    out.drift_bytes += FieldOf(line, "driftBytesWritten");
    out.changed_bytes += FieldOf(line, "bytesChanged");
  }
  return out;
}

long long BytesUnder(const fs::path& path) {
  std::error_code error;
  if (fs::is_regular_file(path, error)) return static_cast<long long>(fs::file_size(path, error));
  long long total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(path, error)) {
    if (entry.is_regular_file(error)) total += static_cast<long long>(entry.file_size(error));
  }
  return total;
}

std::string Pipeline(const fs::path& dir, const std::string& run, int threads, int features,
                     bool drift, bool numeric_only, bool one_file_per_batch, int drift_window) {
  std::string drift_section = drift ? "drift:\n  series: [feature_vector, prediction]\n" : "";
  if (drift && drift_window > 0) {
    drift_section += fmt::format(
        "  windowRecords: {0}\n  baseline: {{type: warmup, records: {0}}}\n", drift_window);
  }
  if (drift && numeric_only) {
    drift_section +=
        "  detectors: [{type: mean_shift}, {type: stddev_ratio}, {type: psi}, {type: js}, "
        "{type: ks}, {type: cusum}, {type: error_rate}]\n";
  }
  const std::string source_options =
      one_file_per_batch ? ", maxFilesPerTrigger: 1" : "";
  return fmt::format(R"(name: bench
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: feature_vector, type: array<double>}}
  - {{name: prediction, type: double}}
  - {{name: ground_truth, type: double}}
source:
  format: file
  options: {{path: {input}{source_options}}}
query:
  groupBy: [model_id]
  aggregates: [count, mean(feature_vector), stddev(feature_vector), mean(prediction), stddev(prediction)]
sinks:
  - {{name: stats, format: file, stream: stats, outputMode: update, options: {{path: {output}}}}}
{drift}trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
threads: {threads}
)",
                     fmt::arg("input", (dir / "input").string()),
                     fmt::arg("source_options", source_options), fmt::arg("drift", drift_section),
                     fmt::arg("output", (dir / ("output" + run)).string()),
                     fmt::arg("checkpoint", (dir / ("checkpoint" + run)).string()),
                     fmt::arg("threads", threads));
  (void)features;
}

// The bytes of every file under `dir` but the sink's manifest (whose entries carry times),
// by relative path.
std::map<std::string, std::string> OutputFiles(const fs::path& dir) {
  std::map<std::string, std::string> files;
  std::error_code error;
  for (const auto& entry : fs::recursive_directory_iterator(dir, error)) {
    if (!entry.is_regular_file(error)) continue;
    const std::string name = fs::relative(entry.path(), dir).string();
    if (name.find("manifest") != std::string::npos) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    files[name] = buffer.str();
  }
  return files;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> counts = {1'000'000, 10'000'000};
  std::vector<int> thread_counts = {1, 2};
  int rounds = 1;
  int models = 8;
  int features = 8;
  bool drift = false;
  bool keep = false;
  bool numeric_only = false;
  uint64_t batch_records = 0;
  int drift_window = 0;
  fs::path base = fs::temp_directory_path() / fmt::format("driftd-bench-{}", getpid());
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--drift" || flag == "--drift-numeric") {
      drift = true;
      numeric_only = flag == "--drift-numeric";
      --i;
      continue;
    }
    if (flag == "--keep") {
      keep = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) break;
    std::string value = argv[i + 1];
    if (flag == "--batch-records") {
      batch_records = std::stoull(value);
    } else if (flag == "--drift-window") {
      drift_window = std::stoi(value);
    } else if (flag == "--records") {
      counts.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) counts.push_back(std::stoull(item));
    } else if (flag == "--threads") {
      thread_counts.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) thread_counts.push_back(std::stoi(item));
    } else if (flag == "--rounds") {
      rounds = std::max(1, std::stoi(value));
    } else if (flag == "--models") {
      models = std::stoi(value);
    } else if (flag == "--features") {
      features = std::stoi(value);
    } else if (flag == "--dir") {
      base = value;
    } else if (flag == "--driftd") {
      driftd_binary = value;
    }
  }

  driftd::InferenceGeneratorOptions options;
  options.models = models;
  options.features = features;
  options.rows_per_second = 10'000;
  options.start_time_ms = 1'795'000'000'000;
  auto generator = driftd::InferenceGenerator::Create(options);
  if (!generator) {
    std::fprintf(stderr, "%s\n", generator.error().message().c_str());
    return 1;
  }

  std::printf("pipeline: file -> count/mean/stddev per model (%d models x %d features)%s -> file%s\n",
              models, features, drift ? (numeric_only ? " + drift (numeric detectors)" : " + drift") : "",
              batch_records > 0 ? fmt::format(", {} records per batch", batch_records).c_str() : "");
  std::printf("load average at start: %s (%ld CPUs online)\n", LoadAverage().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN));
  for (uint64_t count : counts) {
    fs::path dir = base / std::to_string(count);
    fs::remove_all(dir);
    fs::create_directories(dir / "input");
    // Files of 1M records; the raw parse is timed on the first file (same bytes, same shape).
    const uint64_t per_file = batch_records > 0 ? batch_records : 1'000'000;
    std::string first_file;
    uint64_t written = 0;
    size_t bytes = 0;
    for (int f = 0; written < count; ++f) {
      std::string text;
      uint64_t n = std::min(per_file, count - written);
      generator->AppendJsonLines(written, n, text);
      written += n;
      bytes += text.size();
      std::ofstream(dir / "input" / fmt::format("part-{:05}.jsonl", f)) << text;
      if (f == 0) first_file = std::move(text);
    }
    // The input on disk before anything is timed: otherwise the kernel writes it back during
    // the first run (on its core, when pinned), which then came out up to 25% slower.
    sync();

    size_t raw_records = 0;
    double raw_seconds = 1e9;
    double raw_cpu_seconds = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      double cpu = 0;
      raw_seconds = std::min(raw_seconds, RawParseSeconds(first_file, raw_records, cpu));
      raw_cpu_seconds = std::min(raw_cpu_seconds, cpu);
    }
    const double raw_rate = raw_records / raw_seconds;
    const double raw_cpu_us = raw_cpu_seconds / raw_records * 1e6;

    // Rounds alternate between the thread counts, so that a change of the machine's load
    // falls on every count alike.
    struct Runs {
      std::vector<double> rates;
      std::vector<double> cpu_per_record;
      long max_rss_kb = 0;
      ChildRun first;
    };
    std::map<int, Runs> runs;
    std::map<std::string, std::string> reference_output;
    bool outputs_equal = true;
    for (int round = 0; round < rounds; ++round) {
      for (int threads : thread_counts) {
        const std::string name = fmt::format("-t{}-r{}", threads, round);
        const fs::path pipeline = dir / fmt::format("pipeline{}.yaml", name);
        std::ofstream(pipeline) << Pipeline(dir, name, threads, features, drift, numeric_only, batch_records > 0,
                                        drift_window);
        // Progress records stay on: the bench reads what each batch wrote from them.
        ChildRun run = RunDaemon({"run", pipeline.string()}, (dir / ("run" + name + ".log")).string(),
                                 /*pin=*/threads == 1);
        if (run.exit_code != 0) {
          std::fprintf(stderr, "driftd exited with %d; see %s\n", run.exit_code,
                       (dir / ("run" + name + ".log")).c_str());
          return 1;
        }
        Runs& of = runs[threads];
        if (of.rates.empty()) of.first = run;
        of.rates.push_back(count / run.seconds);
        of.cpu_per_record.push_back(run.cpu_seconds / count * 1e6);
        of.max_rss_kb = std::max(of.max_rss_kb, run.max_rss_kb);
        const auto output = OutputFiles(dir / ("output" + name));
        if (reference_output.empty()) {
          reference_output = output;
        } else if (output != reference_output) {
          outputs_equal = false;
        }
        if (round + 1 < rounds || threads != thread_counts.back()) {
          fs::remove_all(dir / ("checkpoint" + name));
          fs::remove_all(dir / ("output" + name));
        }
      }
    }
    const std::string last = fmt::format("-t{}-r{}", thread_counts.back(), rounds - 1);
    const ChildRun& first_run = runs[thread_counts.front()].first;
    const std::string first_name = fmt::format("-t{}-r0", thread_counts.front());
    const BatchWrites writes = ReadProgress(dir / ("run" + first_name + ".log"));

    // Restart on the last run's state with one more small file: time to the first committed
    // batch (the once trigger exits right after committing and delivering it).
    std::string extra;
    generator->AppendJsonLines(count, 1000, extra);
    std::ofstream(dir / "input" / "part-99999.jsonl") << extra;
    std::string pipeline_text = Pipeline(dir, last, thread_counts.back(), features, drift,
                                         numeric_only, batch_records > 0, drift_window);
    auto at = pipeline_text.find("{availableNow: true}");
    pipeline_text.replace(at, std::string("{availableNow: true}").size(), "{once: true}");
    std::ofstream(dir / "pipeline-once.yaml") << pipeline_text;
    ChildRun restart = RunDaemon({"run", (dir / "pipeline-once.yaml").string(), "--quiet-progress"},
                                 (dir / "restart.log").string(), thread_counts.back() == 1);

    std::printf("\n%llu records, %.1f MB; raw parse (one core, in-process, best of 3): %.0f rec/s, "
                "%.3f CPU us/rec\n",
                static_cast<unsigned long long>(count), bytes / 1e6, raw_rate, raw_cpu_us);
    // "of raw": records/s against the raw parse's (wall clock, both); "raw CPU": the raw
    // parse's CPU time per record against the daemon's (what a busy machine changes least).
    std::printf("%8s %14s %10s %10s %12s %13s %9s %12s\n", "threads", "driftd rec/s", "of raw",
                "x 1 thread", "of T x raw", "CPU us/rec", "raw CPU", "peak RSS MB");
    const double single = runs.count(1) ? Median(runs[1].rates) : 0;
    for (int threads : thread_counts) {
      const Runs& of = runs[threads];
      const double rate = Median(of.rates);
      const double cpu_us = Median(of.cpu_per_record);
      std::printf("%8d %14.0f %9.0f%% %9.2fx %11.0f%% %13.3f %8.0f%% %12.1f\n", threads, rate,
                  100.0 * rate / raw_rate, single > 0 ? rate / single : 0.0,
                  100.0 * rate / (threads * raw_rate), cpu_us, 100.0 * raw_cpu_us / cpu_us,
                  of.max_rss_kb / 1024.0);
    }
    std::printf("output files of every run identical: %s; restart to first commit: %.3f s; "
                "load average now: %s\n",
                outputs_equal ? "yes" : "NO", restart.seconds, LoadAverage().c_str());
    if (!outputs_equal) return 1;
    // Bytes written to files other than the sink's output and the log: the checkpoint's.
    const long long checkpoint_written = first_run.write_bytes -
                                         BytesUnder(dir / ("output" + first_name)) -
                                         BytesUnder(dir / ("run" + first_name + ".log"));
    if (writes.batches > 0 && drift) {
      const double n = static_cast<double>(writes.batches);
      auto ratio = [&](long long put) {
        return writes.dirty_bytes > 0 ? static_cast<double>(put) / writes.dirty_bytes : 0.0;
      };
      std::printf("%12s per batch (%lld batches): drift: %.0f series changed, their changes "
                  "encoded %.2f MB, put %.2f MB (%.2fx)\n",
                  "", writes.batches, writes.dirty_series / n, writes.dirty_bytes / n / 1e6,
                  writes.drift_bytes / n / 1e6, ratio(writes.drift_bytes));
      auto of_changed = [&](long long put) {
        return writes.changed_bytes > 0 ? static_cast<double>(put) / writes.changed_bytes : 0.0;
      };
      std::printf("%12s checkpoint (drift, aggregates, evaluations): state changed %.2f MB "
                  "encoded, %.0f keys and %.2f MB put (%.2fx); %.2f MB written to files (WAL, "
                  "flushes, compactions; %.2fx)\n",
                  "", writes.changed_bytes / n / 1e6, writes.keys / n, writes.bytes / n / 1e6,
                  of_changed(writes.bytes), checkpoint_written / n / 1e6,
                  of_changed(checkpoint_written));
    }
    std::fflush(stdout);
    if (!keep) fs::remove_all(dir);
  }
  if (keep) {
    std::printf("kept in %s\n", base.c_str());
  } else {
    fs::remove_all(base);
  }
  std::printf("(driftd figures are whole-process: start-up, checkpoint open, fsync'd commits "
              "and the sink included; raw parse is in-process, best of 3. The drift figures "
              "are the first run's.)\n");
  return 0;
}
