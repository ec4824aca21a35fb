// End-to-end tests of the daemon: file source -> aggregation -> file sink, run as a process.
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include <catch2/catch.hpp>

#include "state/checkpoint_store.h"
#include "tests/e2e/e2e_util.h"

namespace driftd::testing {
namespace {

struct PipelineOptions {
  std::string trigger = "{availableNow: true}";
  std::string query =
      "groupBy: [model_id]\n  aggregates: [count, mean(feature_vector), "
      "stddev(feature_vector), mean(prediction), stddev(prediction)]";
  std::string output_mode = "update";
  std::string source_extra = "maxFilesPerTrigger: 1";
  int threads = 1;
};

std::string Pipeline(const TempDir& dir, const PipelineOptions& options = {}) {
  return fmt::format(R"(name: e2e
{schema}
source:
  format: file
  options:
    path: {input}
    {source_extra}
query:
  {query}
sinks:
  - name: stats
    format: file
    stream: stats
    outputMode: {mode}
    options: {{path: {output}}}
trigger: {trigger}
checkpointLocation: {checkpoint}
threads: {threads}
)",
                     fmt::arg("threads", options.threads),
                     fmt::arg("schema", kInferenceSchema), fmt::arg("input", dir / "input"),
                     fmt::arg("source_extra", options.source_extra),
                     fmt::arg("query", options.query), fmt::arg("mode", options.output_mode),
                     fmt::arg("output", dir / "output"), fmt::arg("trigger", options.trigger),
                     fmt::arg("checkpoint", dir / "checkpoint"));
}

std::string WritePipeline(const TempDir& dir, const PipelineOptions& options = {}) {
  std::string path = dir / "pipeline.yaml";
  WriteFile(path, Pipeline(dir, options));
  return path;
}

// The last row per model of an update-mode output: the final aggregates.
std::map<std::string, std::string> FinalRowByModel(const std::vector<std::string>& rows) {
  std::map<std::string, std::string> last;
  for (const auto& row : rows) last[JsonField(row, "model_id")] = row;
  return last;
}

TEST_CASE("aggregates over generated files match an independent computation", "[e2e]") {
  TempDir dir;
  std::vector<std::string> records = WriteInferenceFiles(dir / "input", 6, 5000);
  RunResult run = RunDriftd({"run", WritePipeline(dir)});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  // Two-pass mean and sample stddev in long double, per model and series.
  struct Series {
    std::vector<long double> values;
  };
  std::map<std::string, std::map<std::string, Series>> expected;
  simdjson::dom::parser parser;
  for (const std::string& record : records) {
    simdjson::dom::element root = parser.parse(record);
    std::string model(root["model_id"].get_string().value());
    int element = 0;
    for (double value : root["feature_vector"].get_array()) {
      expected[model][fmt::format("feature_vector[{}]", element++)].values.push_back(value);
    }
    expected[model]["prediction"].values.push_back(double(root["prediction"]));
  }

  auto final_rows = FinalRowByModel(CommittedRows(dir / "output"));
  REQUIRE(final_rows.size() == expected.size());
  for (const auto& [model, series] : expected) {
    const std::string& row = final_rows.at(model);
    CHECK(JsonNumber(row, "count") == series.at("prediction").values.size());
    for (const auto& [name, s] : series) {
      long double sum = 0;
      for (long double v : s.values) sum += v;
      long double mean = sum / s.values.size();
      long double squares = 0;
      for (long double v : s.values) squares += (v - mean) * (v - mean);
      long double stddev = std::sqrt(squares / (s.values.size() - 1));
      double got_mean = JsonNumber(row, "mean(" + name + ")");
      double got_stddev = JsonNumber(row, "stddev(" + name + ")");
      INFO(model << " " << name);
      CHECK(std::abs(got_mean - static_cast<double>(mean)) <=
            1e-9 * std::max(1.0, std::abs(static_cast<double>(mean))));
      CHECK(std::abs(got_stddev - static_cast<double>(stddev)) <=
            1e-9 * static_cast<double>(stddev));
    }
  }
}

TEST_CASE("availableNow processes a whole directory in rate-limited batches and exits 0", "[e2e]") {
  TempDir dir;
  WriteInferenceFiles(dir / "input", 5, 1000);
  RunResult run = RunDriftd({"run", WritePipeline(dir)});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  // maxFilesPerTrigger 1: one batch per file.
  auto manifest = ReadFileSinkManifest(dir / "output");
  REQUIRE(manifest);
  CHECK(*manifest == std::vector<int64_t>{0, 1, 2, 3, 4});
  auto final_rows = FinalRowByModel(CommittedRows(dir / "output"));
  int64_t total = 0;
  for (const auto& [model, row] : final_rows)
    total += static_cast<int64_t>(JsonNumber(row, "count"));
  CHECK(total == 5000);

  // A second run finds nothing new and changes nothing.
  RunResult again = RunDriftd({"run", WritePipeline(dir)});
  REQUIRE(again.exit_code == 0);
  CHECK(ReadFileSinkManifest(dir / "output")->size() == 5);
}

TEST_CASE("files added during a processingTime run are picked up, half-written lines wait",
          "[e2e]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "input");
  PipelineOptions options;
  options.trigger = "{processingTime: 100ms}";
  options.query = "select: [model_id, prediction]";
  options.output_mode = "append";
  std::string pipeline = WritePipeline(dir, options);
  ChildProcess daemon = ChildProcess::Start({DriftdBinary(), "run", pipeline}, dir / "log.txt");

  auto rows = [&] {
    auto committed = ReadCommittedFileSinkRows(dir / "output");
    return committed ? *committed : std::vector<std::string>{};
  };
  WriteFile(dir.path() / "input" / "a.jsonl",
            R"({"model_id":"m1","event_time":"2026-11-29T10:00:00Z","prediction":0.5})"
            "\n");
  REQUIRE(WaitFor([&] { return rows().size() == 1; }));

  // A new file with a complete line and a line cut in the middle.
  WriteFile(dir.path() / "input" / "b.jsonl",
            R"({"model_id":"m2","event_time":"2026-11-29T10:00:01Z","prediction":0.25})"
            "\n"
            R"({"model_id":"m3","event_time":"2026-11-29T10:00:02Z","predic)");
  REQUIRE(WaitFor([&] { return rows().size() == 2; }));
  // Several more batches run (empty directories polls); the cut line stays unread.
  auto progress_lines = [&] {
    std::string log = ReadFile(dir / "log.txt");
    size_t count = 0;
    for (size_t at = log.find("progress {"); at != std::string::npos;
         at = log.find("progress {", at + 1)) {
      ++count;
    }
    return count;
  };
  size_t batches = progress_lines();
  AppendFile(dir.path() / "input" / "a.jsonl",
             R"({"model_id":"m4","event_time":"2026-11-29T10:00:03Z","prediction":1.0})"
             "\n");
  REQUIRE(WaitFor([&] { return rows().size() == 3 && progress_lines() > batches; }));
  CHECK(rows().size() == 3);
  AppendFile(dir.path() / "input" / "b.jsonl", R"(tion":0.75})"
                                               "\n");
  REQUIRE(WaitFor([&] { return rows().size() == 4; }));
  std::vector<std::string> models;
  for (const auto& row : rows()) models.push_back(JsonField(row, "model_id"));
  CHECK(models == std::vector<std::string>{"m1", "m2", "m4", "m3"});
  CHECK(JsonNumber(rows()[3], "prediction") == 0.75);

  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(std::chrono::seconds(20));
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

std::map<std::string, std::string> StateOf(const std::string& checkpoint) {
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(checkpoint, options);
  REQUIRE(store);
  std::map<std::string, std::string> state;
  REQUIRE((*store)->ScanState([&](std::string_view key, std::string_view value) {
    state.emplace(std::string(key), std::string(value));
  }));
  return state;
}

TEST_CASE("a pipeline killed with SIGKILL 20+ times neither loses nor repeats output",
          "[e2e][crash]") {
  TempDir reference_dir;
  TempDir crash_dir;
  const int files = 120;
  const int rows_per_file = 400;
  WriteInferenceFiles(reference_dir / "input", files, rows_per_file);
  WriteInferenceFiles(crash_dir / "input", files, rows_per_file);
  PipelineOptions options;
  options.query =
      "groupBy: [model_id]\n  aggregates: [count, mean(feature_vector), stddev(prediction)]";

  RunResult reference = RunDriftd({"run", WritePipeline(reference_dir, options)});
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);

  // The crashed runs decode and aggregate on two threads; the reference ran on one.
  options.threads = 2;
  std::string pipeline = WritePipeline(crash_dir, options);
  auto batches = [&] {
    auto manifest = ReadFileSinkManifest(crash_dir / "output");
    return manifest ? static_cast<int64_t>(manifest->size()) : 0;
  };
  const int kills = KillRepeatedly({DriftdBinary(), "run", pipeline, "--quiet-progress"},
                                   crash_dir / "log.txt", batches, [] { return false; });
  INFO("kills " << kills);
  CHECK(kills >= 20);
  RunResult finish = RunDriftd({"run", pipeline});
  INFO(finish.output);
  REQUIRE(finish.exit_code == 0);

  std::vector<std::string> expected = CommittedRows(reference_dir / "output");
  std::vector<std::string> actual = CommittedRows(crash_dir / "output");
  REQUIRE(expected.size() > 0);
  REQUIRE(actual.size() == expected.size());
  CHECK(actual == expected);
  CHECK(ReadFileSinkManifest(crash_dir / "output")->size() == static_cast<size_t>(files));
  CHECK(StateOf(crash_dir / "checkpoint") == StateOf(reference_dir / "checkpoint"));
}

// The bytes of every file under `dir` (the file sink's output), by relative path; manifest
// entries without the checkpoint's id (random per checkpoint).
std::map<std::string, std::string> OutputFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = std::filesystem::relative(entry.path(), dir).string();
    std::string text = ReadFile(entry.path().string());
    if (name.find("_driftd_manifest") != std::string::npos) {
      text = std::regex_replace(text, std::regex(",\"checkpoint\":\"[0-9a-f]*\""), "");
    }
    files[name] = text;
  }
  return files;
}

TEST_CASE("two threads write one thread's output files and state byte for byte, whatever the "
          "batch size",
          "[e2e][threads]") {
  std::map<std::string, std::string> final_rows;
  for (const char* per_batch : {"maxFilesPerTrigger: 1", "maxFilesPerTrigger: 7"}) {
    INFO(per_batch);
    std::map<int, std::map<std::string, std::string>> outputs;
    std::map<int, std::map<std::string, std::string>> states;
    std::map<int, std::vector<std::string>> rows;
    for (int threads : {1, 2}) {
      TempDir dir;
      WriteInferenceFiles(dir / "input", 12, 3000);
      PipelineOptions options;
      options.source_extra = per_batch;
      options.threads = threads;
      RunResult run = RunDriftd({"run", WritePipeline(dir, options)});
      INFO(run.output);
      REQUIRE(run.exit_code == 0);
      outputs[threads] = OutputFiles(dir / "output");
      states[threads] = StateOf(dir / "checkpoint");
      rows[threads] = CommittedRows(dir / "output");
    }
    REQUIRE(outputs[1].size() >= 3);
    CHECK(outputs[2] == outputs[1]);
    CHECK(states[2] == states[1]);
    // The final statistics do not depend on the batch size either, to the last digit.
    const auto last = FinalRowByModel(rows[1]);
    if (final_rows.empty()) {
      final_rows = last;
    } else {
      CHECK(last == final_rows);
    }
  }
}

TEST_CASE("a restart with an incompatible pipeline is refused, a compatible one resumes", "[e2e]") {
  TempDir dir;
  WriteInferenceFiles(dir / "input", 2, 500);
  PipelineOptions options;
  REQUIRE(RunDriftd({"run", WritePipeline(dir, options)}).exit_code == 0);

  PipelineOptions changed = options;
  changed.query = "groupBy: [model_id]\n  aggregates: [count, max(prediction)]";
  RunResult refused = RunDriftd({"run", WritePipeline(dir, changed)});
  INFO(refused.output);
  CHECK(refused.exit_code == 78);
  CHECK_THAT(refused.output, Catch::Contains("aggregates"));
  CHECK_THAT(refused.output, Catch::Contains("checkpointLocation"));

  // The trigger and the rate limit are not part of what the state depends on.
  WriteInferenceFiles(dir / "input2", 1, 10);  // unrelated dir, keeps input unchanged
  PipelineOptions compatible = options;
  compatible.trigger = "{once: true}";
  compatible.source_extra = "maxFilesPerTrigger: 5";
  RunResult resumed = RunDriftd({"run", WritePipeline(dir, compatible)});
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resuming after batch 1"));
}

TEST_CASE("a file sink holding another checkpoint's batches is refused, its output untouched",
          "[e2e]") {
  TempDir dir;
  WriteInferenceFiles(dir / "input", 2, 500);
  PipelineOptions options;
  const std::string pipeline = WritePipeline(dir, options);
  REQUIRE(RunDriftd({"run", pipeline}).exit_code == 0);
  const std::vector<std::string> before = CommittedRows(dir / "output");
  REQUIRE_FALSE(before.empty());

  // The checkpoint is started over: its batch numbers begin at 0 again.
  std::filesystem::remove_all(dir / "checkpoint");
  RunResult refused = RunDriftd({"run", pipeline});
  INFO(refused.output);
  CHECK(refused.exit_code == 78);
  CHECK_THAT(refused.output, Catch::Contains("of another checkpoint"));
  CHECK(CommittedRows(dir / "output") == before);

  // A new output directory is fine.
  std::filesystem::rename(dir / "output", dir / "output-old");
  RunResult fresh = RunDriftd({"run", pipeline});
  INFO(fresh.output);
  CHECK(fresh.exit_code == 0);
  CHECK(CommittedRows(dir / "output") == before);
}

TEST_CASE("SIGTERM stops a running pipeline promptly with exit code 0", "[e2e]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "input");
  PipelineOptions options;
  options.trigger = "{processingTime: 1 hour}";
  ChildProcess daemon =
      ChildProcess::Start({DriftdBinary(), "run", WritePipeline(dir, options)}, dir / "log.txt");
  REQUIRE(WaitFor([&] { return ReadFile(dir / "log.txt").find("running") != std::string::npos; }));
  auto stop_start = std::chrono::steady_clock::now();
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(std::chrono::seconds(10));
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  CHECK(std::chrono::steady_clock::now() - stop_start < std::chrono::seconds(5));
}

}  // namespace
}  // namespace driftd::testing
