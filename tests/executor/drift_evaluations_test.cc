// The latest evaluation of each series is persisted for the status page, the metrics and
// `driftd report` after a restart; nothing a batch computes reads it. So a batch writes the
// evaluations whose series changed level (or were never written), the others wait and are
// written together at most every 30 s of processing time, and a clean stop writes what waits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "engine/drift/evaluation.h"
#include "engine/executor/drift_stage.h"
#include "tests/executor/drift_run.h"

namespace driftd {
namespace {

using testing::DriftRun;

constexpr int64_t kT0Ms = 1'700'000'000'000;

constexpr const char* kPipeline = R"(
name: evaluations
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: amount, type: double, nullable: false}
  - {name: latency, type: double, nullable: false}
source:
  format: file
  options: {path: /tmp/in}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [amount, latency]
  baseline: {type: warmup, records: 1000}
  windowRecords: 500
sinks:
  - {name: alerts, format: console, stream: alerts}
)";

// One model's records; `amount` moves by 3 standard deviations from record `shift_from` on,
// `latency` never moves.
std::vector<std::string> Records(size_t count, size_t shift_from) {
  std::mt19937_64 random(5);
  std::normal_distribution<double> normal(0, 1);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    const double amount = 100 + 10 * normal(random) + (i >= shift_from ? 30 : 0);
    out.push_back(fmt::format(R"({{"model_id":"m","event_time":{},"amount":{},"latency":{}}})",
                              kT0Ms + static_cast<int64_t>(i) * 10, amount,
                              50 + 5 * normal(random)));
  }
  return out;
}

PipelineSpec Spec() {
  auto loaded = ParsePipeline(kPipeline, "evaluations.yaml", LoadOptions{});
  REQUIRE(loaded);
  return *loaded;
}

const std::string kAmount = "drift-eval/m/amount";
const std::string kLatency = "drift-eval/m/latency";

// The evaluations of amount and latency among `keys` (the model's malformed-record series is
// evaluated too).
std::vector<std::string> EvaluationKeys(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    if (key == kAmount || key == kLatency) out.push_back(key);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The persisted evaluation of the series, decoded.
Evaluation Persisted(const DriftRun& run, const std::string& key) {
  auto found = run.state.find(key);
  REQUIRE(found != run.state.end());
  auto decoded = DecodeEvaluation(found->second);
  REQUIRE(decoded);
  return *decoded;
}

TEST_CASE("an evaluation that keeps its level waits up to 30 s to be written, a changed level "
          "is written with its batch, and a clean stop writes what waits",
          "[drift][evaluations]") {
  const PipelineSpec spec = Spec();
  const std::vector<std::string> records = Records(4000, 3000);
  DriftRun run(spec, 1);

  // The baseline and the first window: both series are evaluated for the first time.
  run.Feed(records, 0, 1500);
  CHECK(EvaluationKeys(run.last_puts) == std::vector<std::string>{kAmount, kLatency});
  CHECK(Persisted(run, kLatency).window_end_record == 1500);

  // Windows at the same level a second later: nothing is written.
  run.now_ms += 1'000;
  run.Feed(records, 1500, 2000);
  CHECK(EvaluationKeys(run.last_puts).empty());
  CHECK(Persisted(run, kLatency).window_end_record == 1500);

  // 30 s after the last write, what waited is written.
  run.now_ms += 30'000;
  run.Feed(records, 2000, 2500);
  CHECK(EvaluationKeys(run.last_puts) == std::vector<std::string>{kAmount, kLatency});
  CHECK(Persisted(run, kLatency).window_end_record == 2500);

  run.now_ms += 1'000;
  run.Feed(records, 2500, 3000);
  CHECK(EvaluationKeys(run.last_puts).empty());

  // amount shifts: its level changes and its evaluation is written at once; latency waits.
  run.now_ms += 1'000;
  run.Feed(records, 3000, 3500);
  CHECK(EvaluationKeys(run.last_puts) == std::vector<std::string>{kAmount});
  const Evaluation shifted = Persisted(run, kAmount);
  CHECK(shifted.level != AlertLevel::kOk);
  CHECK(shifted.window_end_record == 3500);
  CHECK(Persisted(run, kLatency).window_end_record == 2500);

  // A clean stop writes latency's latest; a restart shows both as the run had them.
  run.Stop();
  CHECK(EvaluationKeys(run.last_puts) == std::vector<std::string>{kLatency});
  CHECK(Persisted(run, kLatency).window_end_record == 3500);
  std::unique_ptr<DriftRun> restarted = run.Restarted();
  std::map<std::string, int64_t> before;
  std::map<std::string, int64_t> after;
  for (const PackedEvaluation& e : run.stage->LatestEvaluations()) {
    before[std::string(e.series())] = e.Unpack()->window_end_record;
    CHECK(e.Unpack()->series == e.series());
  }
  for (const PackedEvaluation& e : restarted->stage->LatestEvaluations()) {
    after[std::string(e.series())] = e.Unpack()->window_end_record;
  }
  CHECK(before.at("amount") == 3500);
  CHECK(before.at("latency") == 3500);
  CHECK(after == before);
  // A second stop has nothing left to write.
  restarted->Stop();
  CHECK(EvaluationKeys(restarted->last_puts).empty());
}

TEST_CASE("a batch hands the checkpoint the evaluation bytes the stage keeps, not a copy of "
          "them", "[drift][evaluations]") {
  // The latest evaluations are kept packed for the metrics and the status page; at 100,000
  // series a batch that saved copies held tens of megabytes more until its commit.
  const PipelineSpec spec = Spec();
  const std::vector<std::string> records = Records(2000, 2000);
  DriftRun run(spec, 1);
  run.Feed(records, 0, 1500);
  REQUIRE(EvaluationKeys(run.last_puts) == std::vector<std::string>{kAmount, kLatency});
  int shared = 0;
  for (const PackedEvaluation& e : run.stage->LatestEvaluations()) {
    const auto put = run.last_put_bytes.find("drift-eval/m/" + std::string(e.series()));
    if (put == run.last_put_bytes.end()) continue;
    CHECK(put->second == reinterpret_cast<uintptr_t>(e.bytes().data()));
    CHECK(run.state.at(put->first) == e.bytes());
    ++shared;
  }
  CHECK(shared >= 2);
}

}  // namespace
}  // namespace driftd
