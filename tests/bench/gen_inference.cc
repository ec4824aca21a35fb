// Writes generated inference logs as JSON-lines files, for benchmarks that run other tools on
// the same bytes driftd reads (tests/bench/bench_spark.py). The records are those of the rate
// source's inference mode and of bench_pipeline: a pure function of (seed, row number).
//
//   gen_inference --records N --dir DIR [--models M] [--features F] [--per-file R]
//
// Writes DIR/part-00000.jsonl ... with R records each (default 1,000,000) and prints the number
// of files and bytes written.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "connectors/inference_generator.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  uint64_t records = 1'000'000;
  uint64_t per_file = 1'000'000;
  int models = 8;
  int features = 8;
  fs::path dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--records") {
      records = std::stoull(value);
    } else if (flag == "--per-file") {
      per_file = std::max<uint64_t>(1, std::stoull(value));
    } else if (flag == "--models") {
      models = std::stoi(value);
    } else if (flag == "--features") {
      features = std::stoi(value);
    } else if (flag == "--dir") {
      dir = value;
    } else {
      std::fprintf(stderr, "gen_inference: unknown flag %s\n", flag.c_str());
      return 64;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr,
                 "usage: gen_inference --records N --dir DIR [--models M] [--features F] "
                 "[--per-file R]\n");
    return 64;
  }

  driftd::InferenceGeneratorOptions options;
  options.models = models;
  options.features = features;
  options.rows_per_second = 10'000;
  options.start_time_ms = 1'795'000'000'000;
  auto generator = driftd::InferenceGenerator::Create(options);
  if (!generator) {
    std::fprintf(stderr, "gen_inference: %s\n", generator.error().message().c_str());
    return 64;
  }
  fs::create_directories(dir);
  uint64_t written = 0;
  uint64_t bytes = 0;
  int files = 0;
  std::string text;
  for (; written < records; ++files) {
    const uint64_t n = std::min(per_file, records - written);
    text.clear();
    generator->AppendJsonLines(written, n, text);
    written += n;
    bytes += text.size();
    // Written under a temporary name and renamed, so a reader never sees half a file.
    const fs::path final_path = dir / fmt::format("part-{:05}.jsonl", files);
    const fs::path temporary = dir / fmt::format(".part-{:05}.jsonl.tmp", files);
    std::ofstream(temporary, std::ios::binary) << text;
    fs::rename(temporary, final_path);
  }
  std::printf("%d files, %llu records, %llu bytes\n", files,
              static_cast<unsigned long long>(written), static_cast<unsigned long long>(bytes));
  return 0;
}
