// A scaled-out task's clock as its state keeps it: each source partition's mark and the task's
// watermark, so that the task restarted (or taken over by another process) runs on with the
// watermark it had, never an earlier one.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "config/loader.h"
#include "engine/checkpoint.h"
#include "engine/executor/task.h"

namespace driftd {
namespace {

constexpr int64_t kSecond = 1'000'000;

constexpr const char* kPipeline = R"(
name: clock
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: x, type: double}
source:
  format: file
  options: {path: /tmp/in}
query:
  groupBy: [model_id]
  window: {column: event_time, size: 10 seconds}
  aggregates: [count]
sinks:
  - {name: stats, format: console, stream: stats}
)";

std::unique_ptr<QueryTask> NewTask() {
  auto spec = ParsePipeline(kPipeline, "clock.yaml", LoadOptions{});
  if (!spec) FAIL(FormatProblems("clock.yaml", spec.error()));
  QueryTask::Options options;
  options.clock.column = 1;
  options.clock.idle_timeout_ms = 1000;
  auto task = QueryTask::Create(*spec, options);
  REQUIRE(task);
  return std::move(*task);
}

// The task's clock entries in `writes`, restored into `task` as a restart restores them.
void RestoreClock(const StateWrites& writes, QueryTask& task) {
  for (const auto& [encoded, value] : writes.puts) {
    StateKeyView key;
    REQUIRE(DecodeStateKey(encoded, key));
    REQUIRE(task.Restore(key.ns, key.key, value));
  }
  task.clock().CommitBatch();
}

// An idle partition lets the watermark go past it; when it comes back behind the watermark,
// its mark alone would give an earlier one, which a restarted task ran on: a row that was late
// before the restart was not after it, and an append window was emitted twice.
TEST_CASE("a scaled-out task restored from its state runs on with its watermark, not the "
          "earlier one its partitions' marks give",
          "[clock][task]") {
  std::unique_ptr<QueryTask> task = NewTask();
  task->clock().Report("t-0", 100 * kSecond, false, false);
  task->clock().Report("t-1", 10 * kSecond, false, /*idle=*/true);
  task->clock().CommitBatch();
  REQUIRE(task->clock().watermark_us() == 100 * kSecond);
  // t-1 comes back with a row at 20 s: late, and the watermark stays where it was.
  task->clock().Report("t-1", 20 * kSecond, false, false);
  StateWrites writes;
  task->PersistClock(writes);
  task->Committed();
  CHECK(task->clock().watermark_us() == 100 * kSecond);

  std::unique_ptr<QueryTask> restored = NewTask();
  RestoreClock(writes, *restored);
  CHECK(restored->clock().watermark_us() == 100 * kSecond);
  CHECK(restored->clock().StateOf("t-1").max_us == 20 * kSecond);
  // The watermark entry is no partition of the clock.
  CHECK(restored->clock().Partitions().size() == 2);

  // Written again only when it moved.
  StateWrites again;
  task->PersistClock(again);
  CHECK(again.puts.empty());
  task->clock().Report("t-1", 150 * kSecond, false, false);
  task->clock().Report("t-0", 160 * kSecond, false, false);
  task->PersistClock(again);
  task->Committed();
  CHECK(again.puts.size() == 3);
  std::unique_ptr<QueryTask> later = NewTask();
  RestoreClock(writes, *later);
  RestoreClock(again, *later);
  CHECK(later->clock().watermark_us() == 150 * kSecond);
}

}  // namespace
}  // namespace driftd
