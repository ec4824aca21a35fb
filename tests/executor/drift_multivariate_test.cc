// Multivariate drift through the drift stage: a correlation between two features that breaks
// while every marginal stays the same alerts on the model's multivariate:pca series and on no
// feature's own series; nothing alerts while the correlation holds; the alerts (ids included)
// are the same whatever the batch size and through a restart; the state is checkpointed under
// drift-mv/<model>; validate refuses what cannot be computed. Through the executor, from two
// partitions of a Kafka-like input with both models in each, with the real checkpoint store:
// the same alerts whatever the batch size, read order, threads or a restart.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <cmath>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/executor.h"
#include "state/checkpoint_store.h"
#include "tests/executor/drift_run.h"
#include "tests/executor/partitioned_source.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::DriftRun;

constexpr int64_t kT0Ms = 1'700'000'000'000;

// Two models; a ~ N(0, 1), b = 0.9 a + noise (correlation 0.9; marginal N(0, 1)), c ~ N(5, 2).
// From record `break_at` on, model m0's b is independent of a, with the same N(0, 1).
std::vector<std::string> Records(size_t count, size_t break_at) {
  std::mt19937_64 random(21);
  std::normal_distribution<double> normal(0, 1);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    const size_t model = i % 2;
    const double a = normal(random);
    const double e = normal(random);
    const bool broken = model == 0 && i >= break_at;
    const double b = broken ? e : 0.9 * a + std::sqrt(0.19) * e;
    const double c = 5 + 2 * normal(random);
    out.push_back(fmt::format(R"({{"model_id":"m{}","event_time":{},"a":{},"b":{},"c":{}}})",
                              model, kT0Ms + static_cast<int64_t>(i) * 10, a, b, c));
  }
  return out;
}

std::string Pipeline(std::string_view multivariate) {
  return fmt::format(R"(
name: joint
schema:
  - {{name: model_id, type: string}}
  - {{name: event_time, type: timestamp}}
  - {{name: a, type: double}}
  - {{name: b, type: double}}
  - {{name: c, type: double}}
source:
  format: file
  options: {{path: /tmp/in}}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [a, b, c]
  baseline: {{type: warmup, records: 1000}}
  windowRecords: 500
  multivariate: {}
sinks:
  - {{name: alerts, format: console, stream: alerts}}
)",
                     multivariate);
}

PipelineSpec SpecOf(const std::string& yaml) {
  auto spec = ParsePipeline(yaml, "joint.yaml", LoadOptions{});
  if (!spec) FAIL(FormatProblems("joint.yaml", spec.error()));
  return *spec;
}

// "<model> <series> <level> <alert_id>" of each alert.
std::vector<std::string> Facts(const std::vector<std::string>& alerts) {
  simdjson::dom::parser parser;
  std::vector<std::string> facts;
  for (const std::string& row : alerts) {
    simdjson::dom::element alert = parser.parse(row);
    facts.push_back(fmt::format("{} {} {} {}", std::string_view(alert["model"]),
                                std::string_view(alert["series"]),
                                std::string_view(alert["level"]),
                                std::string_view(alert["alert_id"])));
  }
  return facts;
}

TEST_CASE("a correlation that breaks with every marginal unchanged alerts on multivariate:pca",
          "[drift][multivariate]") {
  const PipelineSpec spec = SpecOf(Pipeline("{explainedVariance: 0.65}"));
  REQUIRE(spec.drift.multivariate.enabled);
  CHECK(spec.drift.multivariate.records == 1000);  // the baseline's records by default
  const std::vector<std::string> records = Records(24'000, 12'000);

  DriftRun run(spec, 1);
  run.FeedAll(records, 1000, 0, 12'000);
  CHECK(run.alerts.empty());  // the correlation holds: nothing
  REQUIRE(run.state.count("drift-mv/m0") == 1);
  REQUIRE(run.state.count("drift-mv/m1") == 1);
  run.FeedAll(records, 1000, 12'000);
  const std::vector<std::string> facts = Facts(run.alerts);
  REQUIRE_FALSE(facts.empty());
  for (const std::string& fact : facts) {
    INFO(fact);
    CHECK(fact.rfind("m0 multivariate:pca ", 0) == 0);  // not a, b or c; not m1
  }

  // Other batch sizes, and a restart in the middle of the PCA's baseline: the same alerts.
  DriftRun first(spec, 1);
  first.FeedAll(records, 777, 0, 1500);
  auto second = first.Restarted();
  second->FeedAll(records, 333, 1500, 9000);
  auto third = second->Restarted();
  third->FeedAll(records, 4096, 9000);
  std::vector<std::string> restarted = first.alerts;
  restarted.insert(restarted.end(), second->alerts.begin(), second->alerts.end());
  restarted.insert(restarted.end(), third->alerts.begin(), third->alerts.end());
  CHECK(Facts(restarted) == facts);
  for (const char* key : {"drift-mv/m0", "drift-mv/m1"}) {
    REQUIRE(third->state.count(key) == 1);
    CHECK(third->state.at(key) == run.state.at(key));
  }
}

TEST_CASE("records missing a feature are not part of the multivariate series",
          "[drift][multivariate]") {
  // One record in three lacks b: the PCA fits on the complete ones only, later.
  std::vector<std::string> records = Records(6000, SIZE_MAX);
  for (size_t i = 0; i < records.size(); i += 3) {
    const size_t at = records[i].find(",\"b\":");
    const size_t end = records[i].find(",\"c\":");
    records[i].erase(at, end - at);
  }
  DriftRun run(SpecOf(Pipeline("{}")), 1);
  run.FeedAll(records, 1000);
  CHECK(run.alerts.empty());
  bool multivariate = false;
  for (const auto& series : run.stage->SeriesValueCounts()) {
    multivariate = multivariate || series.series == "multivariate:pca";
  }
  CHECK(multivariate);
}

TEST_CASE("validate refuses multivariate drift it cannot compute", "[drift][multivariate]") {
  auto problems = [](const std::string& yaml) {
    auto spec = ParsePipeline(yaml, "joint.yaml", LoadOptions{});
    if (spec) {
      auto stage = DriftStage::Create(*spec);
      return stage ? std::string() : stage.error().message();
    }
    return FormatProblems("joint.yaml", spec.error());
  };
  CHECK(problems(Pipeline("{}")).empty());
  CHECK_THAT(problems(Pipeline("{explainedVariance: 1.5}")),
             Catch::Matchers::Contains("drift.multivariate.explainedVariance"));
  CHECK_THAT(problems(Pipeline("{features: [a]}")),
             Catch::Matchers::Contains("at least two numeric features"));
  CHECK_THAT(problems(Pipeline("{features: [a, model_id]}")),
             Catch::Matchers::Contains("drift.multivariate.features[1]"));
  CHECK_THAT(problems(Pipeline("{featurs: [a, b]}")), Catch::Matchers::Contains("features"));
  std::string windowed = Pipeline("{}");
  windowed.replace(windowed.find("  aggregates: [count]\n"), 22,
                   "  aggregates: [count]\n  window: {column: event_time, size: 1 minute}\n"
                   "  watermark: {column: event_time, delay: 1 minute}\n");
  windowed.erase(windowed.find("  windowRecords: 500\n"), 21);
  CHECK_THAT(problems(windowed), Catch::Matchers::Contains("record-count windows"));
}

class CollectingSink final : public Sink {
 public:
  explicit CollectingSink(std::vector<std::string>& into) : into_(into) {}
  const std::string& name() const override { return name_; }
  Status Open() override { return Ok(); }
  Result<bool> IsDelivered(int64_t) override { return false; }
  // Rows without their batch id, which is the one thing batching may change.
  Status Deliver(const BatchOutput& output) override {
    static const std::regex batch_id(R"(,"batch_id":[0-9]+)");
    for (const std::string& row : output.alerts.rows) {
      into_.push_back(std::regex_replace(row, batch_id, ""));
    }
    return Ok();
  }

 private:
  std::string name_ = "collect";
  std::vector<std::string>& into_;
};

constexpr const char* kKafkaPipeline = R"(
name: joint
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: a, type: double}
  - {name: b, type: double}
  - {name: c, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: features}
query:
  groupBy: [model_id]
  aggregates: [count]
  watermark: {column: event_time, delay: 0 seconds, idleTimeout: 0}
drift:
  series: [a, b, c]
  baseline: {type: warmup, records: 1000}
  windowRecords: 500
  multivariate: {}
sinks:
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)";

struct Batching {
  int64_t max_per_batch = 1'000'000;
  bool interleave = false;
  int threads = 1;
  double share = 1.0;
};

void RunOnce(const testing::Partitions& data, const std::string& checkpoint,
             const Batching& batching, std::vector<std::string>& alerts) {
  // The daemon's catalog: the kafka source's traits (partitions read in no fixed order) are
  // what puts drift's values in event-time order.
  auto spec = ParsePipeline(kKafkaPipeline, "joint.yaml",
                            LoadOptions{.catalog = &ConnectorDeclarations()});
  INFO((spec ? std::string() : FormatProblems("joint.yaml", spec.error())));
  REQUIRE(spec);
  spec->checkpoint_location = checkpoint;
  spec->threads = batching.threads;
  QueryIo io;
  io.create_source = [&](const PipelineSpec&) -> Result<std::unique_ptr<Source>> {
    return std::unique_ptr<Source>(std::make_unique<testing::PartitionedSource>(
        data, batching.max_per_batch, batching.interleave, batching.share));
  };
  io.create_sinks = [&](const PipelineSpec&,
                        Source&) -> Result<std::vector<std::unique_ptr<Sink>>> {
    std::vector<std::unique_ptr<Sink>> sinks;
    sinks.push_back(std::make_unique<CollectingSink>(alerts));
    return sinks;
  };
  io.open_checkpoint = [](const std::string& directory, const CheckpointOptions& options) {
    return OpenCheckpointStore(directory, options);
  };
  ExecutorOptions options;
  options.sync_commits = false;
  options.chunk_bytes = 8 << 10;
  auto executor = QueryExecutor::Create(*spec, std::move(options), std::move(io));
  REQUIRE(executor);
  const Status started = (*executor)->Start();
  INFO((started ? std::string() : started.error().message()));
  REQUIRE(started);
  const Status ran = (*executor)->Run();
  INFO((ran ? std::string() : ran.error().message()));
  REQUIRE(ran);
}

TEST_CASE("multivariate alerts through the executor do not depend on batching, read order, "
          "threads or a restart",
          "[executor][drift][multivariate]") {
  // Both models in both partitions, each partition in event-time order.
  testing::Partitions data{"features", {{}, {}}};
  const std::vector<std::string> records = Records(16'000, 8'000);
  for (size_t i = 0; i < records.size(); ++i) data.records[(i / 7) % 2].push_back(records[i]);
  testing::TempDir dir("driftd-multivariate");
  std::vector<std::string> reference;
  RunOnce(data, dir / "reference", {}, reference);
  const std::vector<std::string> facts = Facts(reference);
  REQUIRE_FALSE(facts.empty());
  for (const std::string& fact : facts) CHECK(fact.rfind("m0 multivariate:pca ", 0) == 0);

  const std::vector<Batching> batchings = {
      {.max_per_batch = 1'000'000, .interleave = true},  // one batch, another read order
      {.max_per_batch = 777, .interleave = true},
      {.max_per_batch = 150, .interleave = false},
      {.max_per_batch = 1234, .interleave = true, .threads = 2},
  };
  for (size_t i = 0; i < batchings.size(); ++i) {
    INFO("batching " << i);
    std::vector<std::string> alerts;
    RunOnce(data, dir / fmt::format("batching-{}", i), batchings[i], alerts);
    CHECK(alerts == reference);
  }
  // Restarts in the middle of the PCA's baseline, and past its fit in the error's warmup.
  std::vector<std::string> alerts;
  RunOnce(data, dir / "restarted", {.max_per_batch = 400, .share = 0.1}, alerts);
  RunOnce(data, dir / "restarted", {.max_per_batch = 300, .share = 0.2}, alerts);
  RunOnce(data, dir / "restarted", {.max_per_batch = 400, .interleave = true}, alerts);
  CHECK(alerts == reference);
}

}  // namespace
}  // namespace driftd
