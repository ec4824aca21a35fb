// A query of two inputs: two directories of inference logs read as one stream, each with its
// own offsets and clock. The watermark waits for the slower input, 20+ SIGKILLs lose and
// repeat nothing, and the progress record lists each input.
#include <signal.h>
#include <sys/wait.h>

#include <random>

#include <catch2/catch.hpp>
#include <simdjson.h>

#include "state/checkpoint_store.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/window_test_util.h"

namespace driftd::testing {
namespace {

constexpr int kFiles = 100;  // per input
constexpr int kRowsPerFile = 120;

// Input `which` (0 or 1): rows of models m0..m5 10 ms of event time apart, each up to 1.5 s
// early or late; the two inputs interleave in event time and share models.
void WriteInput(const std::string& dir, int which) {
  std::filesystem::create_directories(dir);
  std::mt19937 random(11 + which);
  std::uniform_real_distribution<double> jitter(-1.5, 0.2);
  int row = 0;
  for (int f = 0; f < kFiles; ++f) {
    std::vector<std::string> rows;
    for (int r = 0; r < kRowsPerFile; ++r, ++row) {
      const double t = row * 0.01 + which * 0.005 + jitter(random);
      rows.push_back(EventRow(fmt::format("m{}", (row + which) % 6), t, (row * 7 + which) % 101));
    }
    WriteFile(std::filesystem::path(dir) / fmt::format("in-{:04}.jsonl", f), Lines(rows));
  }
}

std::string TwoInputPipeline(const TempDir& dir, const std::string& trigger, int threads) {
  std::string path = dir / "pipeline.yaml";
  WriteFile(path, fmt::format(R"yaml(name: two-inputs
{schema}
source:
  format: file
  options: {{path: {first}, maxFilesPerTrigger: 1}}
inputs:
  - name: second
    format: file
    options: {{path: {second}, maxFilesPerTrigger: 1}}
query:
  groupBy: [model_id]
  window: {{column: event_time, size: 10 seconds, slide: 5 seconds}}
  watermark: {{column: event_time, delay: 1 second}}
  aggregates: [count, sum(value), mean(value), stddev(value)]
sinks:
  - {{name: closed, format: file, stream: stats, outputMode: append, options: {{path: {append}}}}}
  - {{name: changed, format: file, stream: stats, outputMode: update, options: {{path: {update}}}}}
trigger: {trigger}
checkpointLocation: {checkpoint}
threads: {threads}
)yaml",
                              fmt::arg("schema", kValueSchema), fmt::arg("first", dir / "first"),
                              fmt::arg("second", dir / "second"),
                              fmt::arg("append", dir / "out-append"),
                              fmt::arg("update", dir / "out-update"), fmt::arg("trigger", trigger),
                              fmt::arg("checkpoint", dir / "checkpoint"),
                              fmt::arg("threads", threads)));
  return path;
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

size_t ManifestSize(const std::string& path) {
  auto manifest = ReadFileSinkManifest(path);
  return manifest ? manifest->size() : 0;
}

// The watermark a progress record states, in seconds after the window tests' origin (or
// nullopt before there is one).
std::optional<double> Watermark(const std::string& progress) {
  simdjson::dom::parser parser;
  simdjson::dom::element record = parser.parse(progress);
  std::string_view watermark;
  if (record["eventTime"]["watermark"].get(watermark) != simdjson::SUCCESS) return std::nullopt;
  auto micros = ParseIso8601Micros(watermark);
  if (!micros) return std::nullopt;
  return static_cast<double>(*micros - kWindowT0Us) / 1e6;
}

}  // namespace

TEST_CASE("a query of two inputs survives 20+ SIGKILLs with exactly the windows and state of a "
          "crash-free run",
          "[e2e][crash][inputs]") {
  TempDir reference;
  WriteInput(reference / "first", 0);
  WriteInput(reference / "second", 1);
  RunResult run = RunDriftd({"run", TwoInputPipeline(reference, "{availableNow: true}", 1)});
  INFO(run.output.substr(0, 3000));
  REQUIRE(run.exit_code == 0);
  const std::vector<std::string> append = CommittedRows(reference / "out-append");
  const std::vector<std::string> update = CommittedRows(reference / "out-update");
  REQUIRE(append.size() > 100);
  // Both inputs are in every batch (one file of each), and the progress lists them apart.
  CHECK(ManifestSize(reference / "out-append") == static_cast<size_t>(kFiles));
  CHECK_THAT(run.output, Catch::Contains("\"name\":\"main\""));
  CHECK_THAT(run.output, Catch::Contains("\"name\":\"second\""));

  TempDir dir;
  WriteInput(dir / "first", 0);
  WriteInput(dir / "second", 1);
  const std::string pipeline = TwoInputPipeline(dir, "{availableNow: true}", 2);
  const int kills = KillRepeatedly(
      {DriftdBinary(), "run", pipeline, "--quiet-progress"}, dir / "log.txt",
      [&] { return static_cast<int64_t>(ManifestSize(dir / "out-append")); },
      [] { return false; });
  INFO("kills " << kills);
  CHECK(kills >= 20);
  RunResult finish = RunDriftd({"run", pipeline});
  INFO(finish.output.substr(0, 3000));
  REQUIRE(finish.exit_code == 0);
  CHECK(CommittedRows(dir / "out-append") == append);
  CHECK(CommittedRows(dir / "out-update") == update);
  CHECK(StateOf(dir / "checkpoint") == StateOf(reference / "checkpoint"));
}

TEST_CASE("the watermark of a query of two inputs waits for the slower one",
          "[e2e][inputs][window]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "first");
  std::filesystem::create_directories(dir / "second");
  // The first input is 60 s ahead of the second.
  WriteFile(dir / "first/a.jsonl", Lines({EventRow("m0", 10, 1), EventRow("m0", 70, 2)}));
  WriteFile(dir / "second/a.jsonl", Lines({EventRow("m1", 5, 1), EventRow("m1", 12, 2)}));
  const std::string pipeline = TwoInputPipeline(dir, "{availableNow: true}", 1);
  RunResult run = RunDriftd({"run", pipeline});
  INFO(run.output.substr(0, 4000));
  REQUIRE(run.exit_code == 0);
  std::vector<std::string> progress = ProgressRecords(run.output);
  REQUIRE(!progress.empty());
  // 12 s - 1 s of delay, not 70 s - 1 s: the windows after 11 s stay open for the second
  // input's rows, and only the one window that ends by then is final.
  CHECK(Watermark(progress.back()) == 11.0);
  std::vector<std::string> closed;
  for (const std::string& row : CommittedRows(dir / "out-append")) closed.push_back(CompactRow(row));
  CHECK(closed == std::vector<std::string>{"m1 [0,10) n=1 sum=1"});

  // Once the second input catches up, the watermark moves to the slower of the two again.
  WriteFile(dir / "second/b.jsonl", Lines({EventRow("m1", 80, 3)}));
  RunResult again = RunDriftd({"run", pipeline});
  INFO(again.output.substr(0, 4000));
  REQUIRE(again.exit_code == 0);
  std::vector<std::string> later = ProgressRecords(again.output);
  REQUIRE(!later.empty());
  CHECK(Watermark(later.back()) == 69.0);
}

TEST_CASE("driftd validate takes a scaled-out query of two Kafka inputs on one cluster and "
          "refuses one whose input is on another cluster, at the input",
          "[e2e][inputs][scale-out]") {
  TempDir dir("driftd-inputs-validate");
  auto pipeline = [&](const std::string& second_cluster) {
    const std::string path = dir / "pipeline.yaml";
    WriteFile(path, fmt::format(R"(name: two-clusters
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: value, type: double}}
source:
  format: kafka
  options: {{subscribe: logs-eu, kafka.bootstrap.servers: "eu:9092"}}
inputs:
  - name: us
    format: kafka
    options: {{subscribe: logs-us, kafka.bootstrap.servers: "{}"}}
query:
  groupBy: [model_id]
  aggregates: [count]
sinks:
  - {{format: console}}
checkpointLocation: {}
scaleOut: {{enabled: true, instance: a}}
)",
                                second_cluster, dir / "checkpoint"));
    return RunDriftd({"validate", path});
  };
  RunResult same = pipeline("eu:9092");
  INFO(same.output);
  CHECK(same.exit_code == 0);
  RunResult other = pipeline("us:9092");
  INFO(other.output);
  CHECK(other.exit_code == 78);
  CHECK(other.output.find("pipeline.yaml:9:5: inputs[0]: kafka source: scaleOut reads every "
                          "input through one consumer group on the first input's cluster "
                          "(eu:9092); this input's kafka.bootstrap.servers is us:9092") !=
        std::string::npos);
}

}  // namespace driftd::testing
