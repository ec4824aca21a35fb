// End-to-end throughput and footprint of the daemon on one core:
//   file source -> mean/stddev per model and feature -> file sink,
// beside the raw simdjson on-demand parse rate of the same bytes, measured in the same run.
//
//   bench_pipeline [--records N[,N...]] [--models M] [--features F] [--dir DIR]
//                  [--drift | --drift-numeric] [--batch-records B]
//
// For each record count it writes generated inference logs, runs `driftd run` with the
// availableNow trigger pinned to CPU 0, and prints records/s, the ratio to the raw parse rate,
// and the daemon's peak RSS. Then it appends one more file and restarts on the same checkpoint
// with the once trigger, printing the time from process start to the first committed batch.
//
// --drift adds drift detection on every feature and the prediction (default detectors and
// warmup: with the missing-value series of both columns and each model's malformed series).
// --drift-numeric lists the numeric detectors only (what the default was before the
// data-quality series), to measure what those series cost in the same run of the machine. --batch-records B writes files of B records and reads one file per batch. For every
// run the bench then prints, per batch: the drift series whose state changed, the encoded size
// of those changes (the series records, warmup values added, baselines that froze), what the
// commit put into the checkpoint (keys and values, from the progress records), and the bytes the
// daemon wrote to files (write(2) bytes from /proc/<pid>/io: RocksDB's WAL, flushes and
// compactions, less the sink's output and the log), with their ratios to the encoded changes.
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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
  long max_rss_kb = 0;
  long long write_bytes = 0;  // wchar of /proc/<pid>/io, last sample before exit
};

void PinToCpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

ChildRun RunDaemon(const std::vector<std::string>& args, const std::string& log_path) {
  auto start = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    PinToCpu0();
    FILE* log = std::fopen(log_path.c_str(), "w");
    if (log) {
      dup2(fileno(log), 1);
      dup2(fileno(log), 2);
    }
    std::vector<char*> argv;
    std::string binary = DRIFTD_BINARY;
    argv.push_back(binary.data());
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
  while (waitpid(pid, &status, WNOHANG) == 0) {
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
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Parses every record of `text` (JSON lines) with simdjson on-demand, touching every value:
// the raw parse limit a decoder can approach.
double RawParseSeconds(const std::string& text, size_t& records) {
  simdjson::ondemand::parser parser;
  simdjson::padded_string padded(text);
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

std::string Pipeline(const fs::path& dir, int features, bool drift, bool numeric_only,
                     bool one_file_per_batch) {
  std::string drift_section = drift ? "drift:\n  series: [feature_vector, prediction]\n" : "";
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
)",
                     fmt::arg("input", (dir / "input").string()),
                     fmt::arg("source_options", source_options), fmt::arg("drift", drift_section),
                     fmt::arg("output", (dir / "output").string()),
                     fmt::arg("checkpoint", (dir / "checkpoint").string()));
  (void)features;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> counts = {1'000'000, 10'000'000};
  int models = 8;
  int features = 8;
  bool drift = false;
  bool numeric_only = false;
  uint64_t batch_records = 0;
  fs::path base = fs::temp_directory_path() / fmt::format("driftd-bench-{}", getpid());
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--drift" || flag == "--drift-numeric") {
      drift = true;
      numeric_only = flag == "--drift-numeric";
      --i;
      continue;
    }
    if (i + 1 >= argc) break;
    std::string value = argv[i + 1];
    if (flag == "--batch-records") {
      batch_records = std::stoull(value);
    } else if (flag == "--records") {
      counts.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) counts.push_back(std::stoull(item));
    } else if (flag == "--models") {
      models = std::stoi(value);
    } else if (flag == "--features") {
      features = std::stoi(value);
    } else if (flag == "--dir") {
      base = value;
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
  std::printf("%12s %12s %14s %14s %8s %12s %16s\n", "records", "MB", "raw parse/s",
              "driftd rec/s", "ratio", "peak RSS MB", "restart->commit");
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
    std::ofstream(dir / "pipeline.yaml") << Pipeline(dir, features, drift, numeric_only, batch_records > 0);

    size_t raw_records = 0;
    double raw_seconds = 1e9;
    for (int rep = 0; rep < 3; ++rep) raw_seconds = std::min(raw_seconds, RawParseSeconds(first_file, raw_records));
    double raw_rate = raw_records / raw_seconds;

    // Progress records stay on: the bench reads what each batch wrote from them.
    ChildRun run = RunDaemon({"run", (dir / "pipeline.yaml").string()}, (dir / "run.log").string());
    if (run.exit_code != 0) {
      std::fprintf(stderr, "driftd exited with %d; see %s\n", run.exit_code,
                   (dir / "run.log").c_str());
      return 1;
    }
    double rate = count / run.seconds;
    const BatchWrites writes = ReadProgress(dir / "run.log");
    // Bytes written to files other than the sink's output and the log: the checkpoint's.
    const long long checkpoint_written =
        run.write_bytes - BytesUnder(dir / "output") - BytesUnder(dir / "run.log");

    // Restart on the same state with one more small file: time to the first committed batch
    // (the once trigger exits right after committing and delivering it).
    std::string extra;
    generator->AppendJsonLines(count, 1000, extra);
    std::ofstream(dir / "input" / "part-99999.jsonl") << extra;
    std::string pipeline_text;
    {
      std::ifstream in(dir / "pipeline.yaml");
      std::stringstream buffer;
      buffer << in.rdbuf();
      pipeline_text = buffer.str();
    }
    auto at = pipeline_text.find("{availableNow: true}");
    pipeline_text.replace(at, std::string("{availableNow: true}").size(), "{once: true}");
    std::ofstream(dir / "pipeline-once.yaml") << pipeline_text;
    ChildRun restart = RunDaemon({"run", (dir / "pipeline-once.yaml").string(), "--quiet-progress"},
                                 (dir / "restart.log").string());

    std::printf("%12llu %12.1f %14.0f %14.0f %7.0f%% %12.1f %14.3f s\n",
                static_cast<unsigned long long>(count), bytes / 1e6, raw_rate, rate,
                100.0 * rate / raw_rate, run.max_rss_kb / 1024.0, restart.seconds);
    if (writes.batches > 0) {
      const double n = static_cast<double>(writes.batches);
      auto ratio = [&](long long bytes) {
        return writes.dirty_bytes > 0 ? static_cast<double>(bytes) / writes.dirty_bytes : 0.0;
      };
      std::printf("%12s per batch (%lld batches): drift: %.0f series changed, their changes "
                  "encoded %.2f MB, put %.2f MB (%.2fx)\n",
                  "", writes.batches, writes.dirty_series / n, writes.dirty_bytes / n / 1e6,
                  writes.drift_bytes / n / 1e6, ratio(writes.drift_bytes));
      std::printf("%12s checkpoint (drift, aggregates, evaluations, commit): %.0f keys, %.2f MB put "
                  "(%.2fx); %.2f MB written to files (WAL, flushes, compactions; %.2fx)\n",
                  "", writes.keys / n, writes.bytes / n / 1e6, ratio(writes.bytes),
                  checkpoint_written / n / 1e6, ratio(checkpoint_written));
    }
    std::fflush(stdout);
    fs::remove_all(dir);
  }
  fs::remove_all(base);
  std::printf("(driftd figures are whole-process: start-up, checkpoint open, fsync'd commits "
              "and the sink included; raw parse is in-process, best of 3.)\n");
  return 0;
}
