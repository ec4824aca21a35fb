// Throughput of the file and rate sources, as ratios measured in one run (the machines are
// shared, so absolute numbers vary): the inference generator's rows/s, the rate source against
// calling the generator directly, and the file source's line splitting against reading the
// same bytes raw. Times are this thread's CPU time.
//   connectors_bench [rows]     (default 400000)
#include <stdlib.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "connectors/connector_factories.h"
#include "connectors/fs_util.h"
#include "connectors/inference_generator.h"

namespace {

// CPU time of this thread: less disturbed than wall time by other work on a shared machine.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
};

double Seconds(double since) { return Clock::now() - since; }

[[noreturn]] void Die(const driftd::Error& error) {
  std::fprintf(stderr, "connectors_bench: %s\n", error.message().c_str());
  std::exit(1);
}

// Drains a source from its initial offsets to the end of the data; returns records read.
size_t Drain(driftd::Source& source, size_t& bytes) {
  auto position = source.InitialOffsets();
  if (!position) Die(position.error());
  driftd::InputChunk chunk;
  size_t records = 0;
  while (true) {
    auto end = source.PlanBatch(*position);
    if (!end) Die(end.error());
    if (*end == *position) break;
    auto reader = source.Read(*position, *end);
    if (!reader) Die(reader.error());
    bool more = true;
    while (more) {
      chunk.Clear();
      auto next = (*reader)->Next(chunk, 1 << 20);
      if (!next) Die(next.error());
      more = *next;
      records += chunk.size();
      bytes += chunk.byte_size();
    }
    position = end;
  }
  return records;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace driftd;
  const uint64_t rows = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 400'000;
  std::string dir_pattern = "/tmp/driftd-connectors-bench-XXXXXX";
  if (mkdtemp(dir_pattern.data()) == nullptr) return 1;
  const std::string dir = dir_pattern;

  InferenceGeneratorOptions options;
  options.rows_per_second = 1000;
  auto generator = InferenceGenerator::Create(options);
  if (!generator) Die(generator.error());

  // 1. The generator alone, writing JSON lines into one buffer.
  std::string text;
  text.reserve(rows * 200);
  auto start = Clock::now();
  generator->AppendJsonLines(0, rows, text);
  double generate_s = Seconds(start);

  // 2. The same rows through the rate source (plan, read, chunk).
  PipelineSpec pipeline;
  pipeline.source.format = "rate";
  pipeline.source.options = Options({{"mode", "inference"},
                                     {"rowsPerSecond", "1000"},
                                     {"realTime", "false"},
                                     {"totalRows", std::to_string(rows)},
                                     {"maxRowsPerTrigger", "100000"}});
  auto rate = CreateRateSource(pipeline);
  if (!rate) Die(rate.error());
  if (auto started = (*rate)->Start({}); !started) Die(started.error());
  size_t rate_bytes = 0;
  start = Clock::now();
  size_t rate_records = Drain(**rate, rate_bytes);
  double rate_s = Seconds(start);

  // 3. The rows as 8 files: raw reads against the file source's line splitting.
  const size_t per_file = text.size() / 8 + 1;
  size_t begin = 0;
  for (int i = 0; i < 8 && begin < text.size(); ++i) {
    size_t end = std::min(text.size(), begin + per_file);
    end = text.find('\n', end - 1);
    end = end == std::string::npos ? text.size() : end + 1;
    auto written = WriteFileAtomically(dir, fmt::format("part-{}.jsonl", i),
                                       std::string_view(text).substr(begin, end - begin));
    if (!written) Die(written.error());
    begin = end;
  }
  // Best of three for both, so page-cache warm-up favours neither.
  double raw_s = 1e9;
  size_t raw_bytes = 0;
  std::string block;
  for (int round = 0; round < 3; ++round) {
    raw_bytes = 0;
    start = Clock::now();
    for (int i = 0; i < 8; ++i) {
      std::string path = JoinPath(dir, fmt::format("part-{}.jsonl", i));
      auto fd = OpenForReading(path);
      if (!fd) Die(fd.error());
      for (int64_t offset = 0;; offset += static_cast<int64_t>(block.size())) {
        if (auto read = ReadAt(*fd, path, offset, 1 << 20, block); !read) Die(read.error());
        if (block.empty()) break;
        raw_bytes += block.size();
      }
    }
    raw_s = std::min(raw_s, Seconds(start));
  }
  pipeline.source.format = "file";
  pipeline.source.options =
      Options({{"path", dir}, {"fileNameGlob", "*.jsonl"}, {"maxBytesPerTrigger", "16777216"}});
  double file_s = 1e9;
  size_t file_bytes = 0;
  size_t file_records = 0;
  for (int round = 0; round < 3; ++round) {
    auto files = CreateFileSource(pipeline);
    if (!files) Die(files.error());
    if (auto started = (*files)->Start({}); !started) Die(started.error());
    file_bytes = 0;
    start = Clock::now();
    file_records = Drain(**files, file_bytes);
    file_s = std::min(file_s, Seconds(start));
  }

  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);

  fmt::print("rows: {} ({} bytes/row)\n", rows, text.size() / std::max<uint64_t>(rows, 1));
  fmt::print("generator:   {:.2f} M rows/s\n", rows / generate_s / 1e6);
  fmt::print("rate source: {} rows, {:.2f} M rows/s, {:.2f}x the generator's CPU time\n",
             rate_records, rate_records / rate_s / 1e6, rate_s / generate_s);
  fmt::print("file source: {} rows, {:.0f} MB/s, {:.2f}x the CPU time of raw reads ({:.0f} MB/s)\n",
             file_records, file_bytes / file_s / 1e6, file_s / raw_s, raw_bytes / raw_s / 1e6);
  return rate_records == rows && file_records == rows ? 0 : 1;
}
