// The labels' join and the performance stage through the executor: predictions and labels on
// inputs of their own (in-memory partitioned sources), the real checkpoint store. The rows of
// the performance stream and the alerts do not depend on the batch size, the order the inputs
// and their partitions are read in, the number of threads or a restart; every outcome of the
// join is counted as an offline computation counts it; a drop in accuracy alerts once.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <algorithm>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/executor.h"
#include "engine/time_iso8601.h"
#include "state/checkpoint_store.h"
#include "tests/executor/partitioned_source.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::PartitionedSource;
using testing::Partitions;
using testing::TempDir;

constexpr int64_t kT0Ms = 1'795'946'400'000;

struct Delivered {
  std::vector<std::string> performance;
  std::vector<std::string> alerts;
};

class CollectingSink final : public Sink {
 public:
  explicit CollectingSink(Delivered& into) : into_(into) {}
  const std::string& name() const override { return name_; }
  Status Open() override { return Ok(); }
  Result<bool> IsDelivered(int64_t) override { return false; }
  // Rows without their batch id, which is the one thing batching may change.
  Status Deliver(const BatchOutput& output) override {
    for (const std::string& row : output.performance.rows) into_.performance.push_back(Strip(row));
    for (const std::string& row : output.alerts.rows) into_.alerts.push_back(Strip(row));
    return Ok();
  }
  static std::string Strip(const std::string& row) {
    static const std::regex batch_id(R"(,"batch_id":[0-9]+)");
    return std::regex_replace(row, batch_id, "");
  }

 private:
  std::string name_ = "collect";
  Delivered& into_;
};

// What the test knows without driftd: each prediction's time, whether it is labelled, and how
// many labels it has.
struct Truth {
  struct Prediction {
    int64_t time_ms = 0;
    int labels = 0;
  };
  std::vector<Prediction> predictions;
  // The join's outcomes for the predictions whose bound (40 minutes) the watermark is past.
  int64_t Labelled(int64_t watermark_ms) const {
    return std::count_if(predictions.begin(), predictions.end(), [&](const Prediction& p) {
      return p.labels > 0 && p.time_ms + 40 * 60'000 < watermark_ms;
    });
  }
  int64_t Unlabelled(int64_t watermark_ms) const {
    return std::count_if(predictions.begin(), predictions.end(), [&](const Prediction& p) {
      return p.labels == 0 && p.time_ms + 40 * 60'000 < watermark_ms;
    });
  }
  int64_t Duplicates(int64_t watermark_ms) const {
    int64_t n = 0;
    for (const Prediction& p : predictions) {
      if (p.labels > 1 && p.time_ms + 40 * 60'000 < watermark_ms) n += p.labels - 1;
    }
    return n;
  }
};

// Two models, 2 partitions of predictions (1 per 2 s each), labels 0-30 min of event time
// later on 2 partitions of their own, each partition in label-time order; 5% never labelled,
// 3% labelled twice. Scores are calibrated (label ~ Bernoulli(score)) until model m1's labels
// stop following its scores half way (its accuracy drops to one half).
struct Data {
  Partitions predictions{"predictions", {{}, {}}};
  Partitions labels{"labels", {{}, {}}};
  Truth truth;
};

Data Generate() {
  Data data;
  std::mt19937_64 random(20261204);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<std::vector<std::pair<int64_t, std::string>>> labels(2);
  const int kRows = 12'000;  // 12,000 s: 6 windows of 30 minutes and more
  for (int i = 0; i < kRows; ++i) {
    const int64_t t = kT0Ms + i * 1000;
    const std::string model = fmt::format("m{}", i % 2);
    const double score = uniform(random);
    bool positive = uniform(random) < score;
    if (model == "m1" && i >= kRows / 2 && uniform(random) < 0.5) positive = !positive;
    const std::string id = fmt::format("r{}", i);
    data.predictions.records[static_cast<size_t>(i % 2)].push_back(fmt::format(
        R"({{"request_id":"{}","model_id":"{}","event_time":{},"score":{:.6f}}})", id, model, t,
        score));
    if (uniform(random) < 0.05) {
      data.truth.predictions.push_back({t, 0});
      continue;
    }
    const int copies = uniform(random) < 0.03 ? 2 : 1;
    data.truth.predictions.push_back({t, copies});
    for (int c = 0; c < copies; ++c) {
      const int64_t label_time = t + static_cast<int64_t>(uniform(random) * 1'800'000);
      labels[static_cast<size_t>(i % 3 == 0)].emplace_back(
          label_time, fmt::format(R"({{"request_id":"{}","label":{},"event_time":{}}})", id,
                                  positive ? 1 : 0, label_time));
    }
  }
  for (size_t p = 0; p < 2; ++p) {
    std::stable_sort(labels[p].begin(), labels[p].end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [time, record] : labels[p]) data.labels.records[p].push_back(std::move(record));
  }
  return data;
}

constexpr const char* kPipeline = R"(
name: performance
schema:
  - {name: request_id, type: string, nullable: false}
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: score, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: predictions}
labels:
  source: {format: kafka, options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: labels}}
  schema:
    - {name: request_id, type: string}
    - {name: label, type: int}
    - {name: event_time, type: timestamp}
  key: request_id
  label: label
  within: 40 minutes
query:
  groupBy: [model_id]
  aggregates: [count]
  watermark: {column: event_time, delay: 0 seconds, idleTimeout: 0}
performance:
  prediction: score
  window: 30 minutes
  baselineWindows: 2
sinks:
  - {name: performance, format: console, stream: performance}
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)";

struct Run {
  Delivered delivered;
  std::vector<std::string> progress;
};

struct Batching {
  int64_t max_per_batch = 1'000'000;
  bool interleave = false;
  int threads = 1;
  double share = 1.0;  // of each partition that exists yet
};

void RunOnce(const Data& data, const std::string& checkpoint, const Batching& batching, Run& run) {
  auto spec = ParsePipeline(kPipeline, "performance.yaml",
                            LoadOptions{.catalog = &ConnectorDeclarations()});
  INFO((spec ? std::string() : FormatProblems("performance.yaml", spec.error())));
  REQUIRE(spec);
  spec->checkpoint_location = checkpoint;
  spec->threads = batching.threads;
  QueryIo io;
  io.create_source = [&](const PipelineSpec& input) -> Result<std::unique_ptr<Source>> {
    const bool labels = input.schema.IndexOf("label") >= 0;
    return std::unique_ptr<Source>(std::make_unique<PartitionedSource>(
        labels ? data.labels : data.predictions, batching.max_per_batch, batching.interleave,
        batching.share));
  };
  io.create_sinks = [&](const PipelineSpec&,
                        Source&) -> Result<std::vector<std::unique_ptr<Sink>>> {
    std::vector<std::unique_ptr<Sink>> sinks;
    sinks.push_back(std::make_unique<CollectingSink>(run.delivered));
    return sinks;
  };
  io.open_checkpoint = [](const std::string& directory, const CheckpointOptions& options) {
    return OpenCheckpointStore(directory, options);
  };
  ExecutorOptions options;
  options.sync_commits = false;
  options.chunk_bytes = 8 << 10;  // many chunks a batch, shared by the threads
  options.on_progress = [&](const std::string& json) { run.progress.push_back(json); };
  auto executor = QueryExecutor::Create(*spec, std::move(options), std::move(io));
  REQUIRE(executor);
  const Status started = (*executor)->Start();
  INFO((started ? std::string() : started.error().message()));
  REQUIRE(started);
  const Status ran = (*executor)->Run();
  INFO((ran ? std::string() : ran.error().message()));
  REQUIRE(ran);
}

// The join's counters summed over the progress records.
std::map<std::string, int64_t> JoinCounts(const std::vector<std::string>& progress) {
  std::map<std::string, int64_t> sums;
  simdjson::dom::parser parser;
  for (const std::string& json : progress) {
    simdjson::dom::element record = parser.parse(json);
    simdjson::dom::object labels;
    if (record["labels"].get(labels) != simdjson::SUCCESS) continue;
    for (auto field : labels) {
      if (field.key == "pending") continue;
      sums[std::string(field.key)] += field.value.get_int64().value();
    }
  }
  return sums;
}

// The watermark the last batch ran with: the one before the last progress record's.
int64_t FinalWatermarkMs(const std::vector<std::string>& progress) {
  simdjson::dom::parser parser;
  REQUIRE(progress.size() >= 2);
  simdjson::dom::element record = parser.parse(progress[progress.size() - 2]);
  auto micros = ParseIso8601Micros(std::string_view(record["eventTime"]["watermark"]));
  REQUIRE(micros);
  return *micros / 1000;
}

}  // namespace

TEST_CASE("labels joined to predictions give the same performance rows and alerts whatever the "
          "batch size, read order, threads or a restart, and every outcome is counted",
          "[executor][labels][performance]") {
  const Data data = Generate();
  TempDir dir("driftd-performance");
  Run reference;
  RunOnce(data, dir / "reference", {}, reference);
  REQUIRE(reference.delivered.performance.size() > 10);

  // The join's counts are the test's own, for what the final watermark decided (the last 40
  // minutes of predictions still wait for labels).
  const auto counts = JoinCounts(reference.progress);
  const int64_t watermark = FinalWatermarkMs(reference.progress);
  CHECK(counts.at("labelled") == data.truth.Labelled(watermark));
  CHECK(counts.at("unlabelled") == data.truth.Unlabelled(watermark));
  CHECK(counts.at("duplicateLabels") == data.truth.Duplicates(watermark));
  CHECK(data.truth.Labelled(watermark) > 8'000);
  CHECK(counts.at("labelsWithoutPrediction") == 0);
  CHECK(counts.at("labelsLate") == 0);

  // Model m1's accuracy drop raises one realized ALERT; m0 stays quiet; ids are stable.
  std::vector<std::string> alerting;
  simdjson::dom::parser parser;
  for (const std::string& alert : reference.delivered.alerts) {
    simdjson::dom::element row = parser.parse(alert);
    alerting.push_back(fmt::format("{} {} {}", std::string_view(row["model"]),
                                   std::string_view(row["series"]),
                                   std::string_view(row["level"])));
  }
  CHECK(std::count(alerting.begin(), alerting.end(), "m1 performance:accuracy ALERT") == 1);
  for (const std::string& alert : alerting) CHECK(alert.rfind("m0 ", 0) != 0);

  // Estimated accuracy follows the realized one while the scores stay calibrated (m0).
  double gap = 0;
  int finals = 0;
  for (const std::string& text : reference.delivered.performance) {
    simdjson::dom::element row = parser.parse(text);
    if (std::string_view(row["model"]) != "m0" || std::string_view(row["status"]) != "final") {
      continue;
    }
    simdjson::dom::element estimated = row["estimated"];
    if (estimated.is_null()) continue;
    gap += std::fabs(double(estimated["accuracy"]) - double(row["realized"]["accuracy"]));
    ++finals;
  }
  REQUIRE(finals >= 2);
  CHECK(gap / finals <= 0.03);

  const std::vector<Batching> batchings = {
      {.max_per_batch = 777, .interleave = true},
      {.max_per_batch = 50, .interleave = false},
      {.max_per_batch = 333, .interleave = true, .threads = 2},
  };
  for (size_t i = 0; i < batchings.size(); ++i) {
    Run run;
    RunOnce(data, dir / fmt::format("batching-{}", i), batchings[i], run);
    INFO("batching " << i);
    for (size_t r = 0; r < std::min(run.delivered.performance.size(),
                                    reference.delivered.performance.size());
         ++r) {
      if (run.delivered.performance[r] != reference.delivered.performance[r]) {
        FAIL_CHECK("row " << r << "\n" << run.delivered.performance[r] << "\n"
                          << reference.delivered.performance[r]);
        break;
      }
    }
    CHECK(run.delivered.performance == reference.delivered.performance);
    CHECK(run.delivered.alerts == reference.delivered.alerts);
  }

  // A restart half way: the two runs together deliver what one run does.
  Run first;
  RunOnce(data, dir / "restarted", {.max_per_batch = 400, .share = 0.5}, first);
  Run second;
  RunOnce(data, dir / "restarted", {.max_per_batch = 400}, second);
  std::vector<std::string> both = first.delivered.performance;
  both.insert(both.end(), second.delivered.performance.begin(),
              second.delivered.performance.end());
  CHECK(both == reference.delivered.performance);
  std::vector<std::string> alerts = first.delivered.alerts;
  alerts.insert(alerts.end(), second.delivered.alerts.begin(), second.delivered.alerts.end());
  CHECK(alerts == reference.delivered.alerts);
}

}  // namespace driftd
