// Crash tests with event-time windows open across the crashes: a pipeline killed with SIGKILL
// at random moments 20+ times emits exactly the windows of a crash-free run, under the
// availableNow and the continuous trigger, on two threads against a reference run on one. The
// aggregates include percentiles of a sketch small enough (accuracy 10: k = 30) to compact many
// times in every window, so the restored sketches are proven to go on exactly as uninterrupted
// ones.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "state/checkpoint_store.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/window_test_util.h"

namespace driftd::testing {
namespace {

// One batch a file (maxFilesPerTrigger: 1): twice as many batches as a kill loop could cover
// in 20 lives even when the test process is starved and each life runs several batches.
constexpr int kFiles = 200;
constexpr int kRowsPerFile = 150;

// 30000 rows, 10 ms of event time apart, each up to 1.5 s early or late (seeded), so with a
// 1 s watermark delay some rows are late, and sliding windows stay open across many files.
void WriteJitteredFiles(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::mt19937 random(7);
  std::uniform_real_distribution<double> jitter(-1.5, 0.2);
  int row = 0;
  for (int f = 0; f < kFiles; ++f) {
    std::vector<std::string> rows;
    for (int r = 0; r < kRowsPerFile; ++r, ++row) {
      double t = row * 0.01 + jitter(random);
      rows.push_back(EventRow(fmt::format("m{}", row % 5), t, row % 97));
    }
    WriteFile(std::filesystem::path(dir) / fmt::format("in-{:04}.jsonl", f), Lines(rows));
  }
}

// `threads`: the crash-free reference runs on one thread, the crashed lives on two.
std::string CrashPipeline(const TempDir& dir, const std::string& trigger, int threads) {
  std::string path = dir / "pipeline.yaml";
  WriteFile(path, fmt::format(R"yaml(name: window-crash
{schema}
source:
  format: file
  options: {{path: {input}, maxFilesPerTrigger: 1}}
query:
  groupBy: [model_id]
  window: {{column: event_time, size: 10 seconds, slide: 5 seconds}}
  watermark: {{column: event_time, delay: 1 second}}
  aggregates: [count, sum(value), mean(value), stddev(value),
               "approx_percentile(value, array(0.1, 0.5, 0.9), 10)"]
sinks:
  - {{name: closed, format: file, stream: stats, outputMode: append, options: {{path: {append}}}}}
  - {{name: changed, format: file, stream: stats, outputMode: update, options: {{path: {update}}}}}
trigger: {trigger}
checkpointLocation: {checkpoint}
threads: {threads}
)yaml",
                              fmt::arg("schema", kValueSchema), fmt::arg("input", dir / "input"),
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

// Batches of the checkpoint's outbox that some sink has not been marked as delivering.
size_t PendingBatches(const std::string& checkpoint) {
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(checkpoint, options);
  REQUIRE(store);
  auto pending = (*store)->PendingOutbox();
  REQUIRE(pending);
  return pending->size();
}

size_t ManifestSize(const std::string& path) {
  auto manifest = ReadFileSinkManifest(path);
  return manifest ? manifest->size() : 0;
}

// The crash-free reference: availableNow over the same files.
struct Reference {
  TempDir dir;
  std::vector<std::string> append;
  std::vector<std::string> update;
  size_t batches = 0;

  Reference() {
    WriteJitteredFiles(dir / "input");
    RunResult run = RunDriftd({"run", CrashPipeline(dir, "{availableNow: true}", 1)});
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    append = CommittedRows(dir / "out-append");
    update = CommittedRows(dir / "out-update");
    batches = ManifestSize(dir / "out-append");
    REQUIRE(append.size() > 100);  // many windows closed
    REQUIRE(append[0].find("\"approx_percentile(value, array(0.1, 0.5, 0.9), 10)\":[") !=
            std::string::npos);
    REQUIRE(batches == static_cast<size_t>(kFiles));
  }
};

// Kills the daemon again and again; a life's progress is a new batch in the append sink.
int KillUntilDone(const TempDir& dir, const std::string& pipeline,
                  const std::function<bool()>& finished) {
  return KillRepeatedly(
      {DriftdBinary(), "run", pipeline, "--quiet-progress"}, dir / "log.txt",
      [&] { return static_cast<int64_t>(ManifestSize(dir / "out-append")); }, finished);
}

TEST_CASE("windows open across 20+ SIGKILLs are emitted exactly as in a crash-free run",
          "[e2e][crash][window]") {
  Reference reference;
  TempDir dir;
  WriteJitteredFiles(dir / "input");
  std::string pipeline = CrashPipeline(dir, "{availableNow: true}", 2);
  int kills = KillUntilDone(dir, pipeline, [] { return false; });
  INFO("kills " << kills);
  CHECK(kills >= 20);
  RunResult finish = RunDriftd({"run", pipeline});
  INFO(finish.output);
  REQUIRE(finish.exit_code == 0);

  CHECK(CommittedRows(dir / "out-append") == reference.append);
  CHECK(CommittedRows(dir / "out-update") == reference.update);
  CHECK(ManifestSize(dir / "out-append") == reference.batches);
  CHECK(StateOf(dir / "checkpoint") == StateOf(reference.dir / "checkpoint"));
}

TEST_CASE(
    "the continuous trigger killed 20+ times emits exactly the windows of a crash-free "
    "run",
    "[e2e][crash][window][continuous]") {
  Reference reference;
  TempDir dir;
  WriteJitteredFiles(dir / "input");
  std::string pipeline = CrashPipeline(dir, "{continuous: 1 second}", 2);
  auto done = [&] { return ManifestSize(dir / "out-append") >= reference.batches; };
  int kills = KillUntilDone(dir, pipeline, done);
  INFO("kills " << kills);
  CHECK(kills >= 20);
  // Continuous never ends by itself: let it finish the files, then stop it.
  ChildProcess daemon =
      ChildProcess::Start({DriftdBinary(), "run", pipeline}, dir / "log-final.txt");
  REQUIRE(WaitFor(done, std::chrono::seconds(60)));
  REQUIRE(WaitFor([&] {
    return ReadFile(dir / "log-final.txt").find(" running (trigger") != std::string::npos;
  }));
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(std::chrono::seconds(20));
  REQUIRE(status);
  CHECK(WIFEXITED(*status));

  CHECK(CommittedRows(dir / "out-append") == reference.append);
  CHECK(CommittedRows(dir / "out-update") == reference.update);
  CHECK(ManifestSize(dir / "out-append") == reference.batches);
  CHECK(StateOf(dir / "checkpoint") == StateOf(reference.dir / "checkpoint"));
  // Epochs are delivered without a sync and made durable once per interval: a clean stop
  // syncs the last ones and leaves nothing pending.
  CHECK(PendingBatches(dir / "checkpoint") == 0);
}

}  // namespace
}  // namespace driftd::testing
