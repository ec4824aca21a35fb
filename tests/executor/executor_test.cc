// The executor on its own: an in-memory partitioned source and a collecting sink stand in for
// the connectors, the checkpoint is the real RocksDB store in a temporary directory.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/inference_generator.h"
#include "engine/executor/executor.h"
#include "state/checkpoint_store.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::TempDir;

// Records of several partitions, each in its own order, read like the Kafka source: a batch is
// an offset range per partition, at most `max_per_batch` records in all, split over the
// partitions in proportion to what each has left.
struct PartitionedData {
  std::vector<std::vector<std::string>> partitions;
  std::string Key(size_t p) const { return fmt::format("logs-{}", p); }
};

enum class ReadOrder { kPartitionAfterPartition, kInterleaved };

class FakeReader final : public SourceReader {
 public:
  FakeReader(const PartitionedData& data, std::vector<std::pair<int64_t, int64_t>> ranges,
             ReadOrder order)
      : data_(data), ranges_(std::move(ranges)), order_(order) {}

  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override {
    while (chunk.byte_size() < max_bytes) {
      bool any = false;
      for (size_t p = 0; p < ranges_.size(); ++p) {
        auto& [next, end] = ranges_[p];
        if (next >= end) continue;
        any = true;
        const int64_t take = order_ == ReadOrder::kInterleaved ? 1 : end - next;
        for (int64_t i = 0; i < take; ++i, ++next) {
          chunk.Append(data_.partitions[p][static_cast<size_t>(next)],
                       RecordPosition{static_cast<uint32_t>(p), next});
        }
        if (order_ == ReadOrder::kPartitionAfterPartition) break;
      }
      if (!any) return false;
    }
    return std::any_of(ranges_.begin(), ranges_.end(),
                       [](const auto& range) { return range.first < range.second; });
  }

 private:
  const PartitionedData& data_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  ReadOrder order_;
};

class FakeSource final : public Source {
 public:
  FakeSource(const PartitionedData& data, int64_t max_per_batch, ReadOrder order)
      : data_(data), max_per_batch_(max_per_batch), order_(order) {}

  Status Start(const SourceOffsets&) override { return Ok(); }
  Result<SourceOffsets> InitialOffsets() override {
    SourceOffsets offsets;
    for (size_t p = 0; p < data_.partitions.size(); ++p) offsets[data_.Key(p)] = 0;
    return offsets;
  }
  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    std::vector<int64_t> left(data_.partitions.size());
    int64_t total = 0;
    for (size_t p = 0; p < left.size(); ++p) {
      left[p] = static_cast<int64_t>(data_.partitions[p].size()) - start.at(data_.Key(p));
      total += left[p];
    }
    SourceOffsets end = start;
    if (total == 0) return end;
    int64_t budget = std::min(total, max_per_batch_);
    for (size_t p = 0; p < left.size() && budget > 0; ++p) {
      int64_t take = std::min(left[p], std::max<int64_t>(1, left[p] * max_per_batch_ / total));
      take = std::min(take, budget);
      end[data_.Key(p)] += take;
      budget -= take;
    }
    return end;
  }
  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (size_t p = 0; p < data_.partitions.size(); ++p) {
      ranges.emplace_back(start.at(data_.Key(p)), end.at(data_.Key(p)));
    }
    return std::unique_ptr<SourceReader>(std::make_unique<FakeReader>(data_, ranges, order_));
  }
  std::vector<PartitionLag> Lag(const SourceOffsets& position) override {
    std::vector<PartitionLag> lag;
    for (size_t p = 0; p < data_.partitions.size(); ++p) {
      lag.push_back({data_.Key(p), position.at(data_.Key(p)),
                     static_cast<int64_t>(data_.partitions[p].size())});
    }
    return lag;
  }
  bool HasIndependentPartitions() const override { return true; }
  std::string PartitionKeyOf(uint32_t index) const override { return data_.Key(index); }
  std::string DescribePosition(const RecordPosition& position) const override {
    return fmt::format("partition {} offset {}", position.partition, position.offset);
  }
  std::string Describe() const override { return "Fake"; }

 private:
  const PartitionedData& data_;
  int64_t max_per_batch_;
  ReadOrder order_;
};

// Everything delivered, by stream.
struct Delivered {
  std::vector<std::string> stats;
  std::vector<std::string> alerts;
  int64_t batches = 0;
};

class CollectingSink final : public Sink {
 public:
  CollectingSink(std::string name, Delivered& into) : name_(std::move(name)), into_(into) {}
  const std::string& name() const override { return name_; }
  Status Open() override { return Ok(); }
  Result<bool> IsDelivered(int64_t) override { return false; }
  Status Deliver(const BatchOutput& output) override {
    ++into_.batches;
    for (const std::string& row : output.stats_append.rows) into_.stats.push_back(row);
    for (const std::string& row : output.alerts.rows) into_.alerts.push_back(row);
    return Ok();
  }

 private:
  std::string name_;
  Delivered& into_;
};

// Four models, each in every one of eight partitions; each partition in event-time order but
// one record in 53 arrives 9 s late (beyond the 4 s watermark delay, so some are dropped: by
// their own partition's watermark, whatever the batching). model-2's feature 1 shifts by two
// sigma after 150 s.
PartitionedData GeneratedLogs() {
  InferenceGeneratorOptions options;
  options.models = 4;
  options.features = 2;
  options.labels = 0;
  options.rows_per_second = 400;
  options.start_time_ms = 1'700'000'000'000;
  auto scenario = ParseDriftScenario("model-2 feature 1 shifts by 2 sigma after 150 s");
  REQUIRE(scenario);
  options.drift.push_back(*scenario);
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  PartitionedData data;
  data.partitions.resize(8);
  const uint64_t rows = 120'000;  // 300 s
  for (uint64_t row = 0; row < rows; ++row) {
    std::string record;
    generator->AppendRecord(row, record);
    if (row % 53 == 0) {
      // Rewrite the event time 9 s earlier: the generator writes it as ISO-8601 text.
      const size_t at = record.find("\"event_time\":\"") + 14;
      const int64_t us = generator->EventTimeUs(row) - 9'000'000;
      const int64_t ms = us / 1000;
      const time_t seconds = static_cast<time_t>(ms / 1000);
      std::tm tm{};
      gmtime_r(&seconds, &tm);
      const std::string text = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                                           tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                                           tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
      record.replace(at, text.size(), text);
    }
    data.partitions[(row * 7 + row / 3) % 8].push_back(std::move(record));
  }
  return data;
}

constexpr const char* kPipeline = R"(
name: partitioned
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  groupBy: [model_id]
  window: {column: event_time, size: 10 seconds}
  watermark: {column: event_time, delay: 4 seconds, idleTimeout: 0}
  aggregates: [count, mean(feature_vector), stddev(feature_vector)]
drift:
  series: [feature_vector]
  baseline: {type: warmup, records: 1000}
  detectors: [{type: mean_shift}, {type: psi}]
sinks:
  - {name: stats, format: console, stream: stats, outputMode: append}
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)";

struct RunResult {
  Delivered delivered;
  int64_t dropped = 0;
};

RunResult RunQuery(const PartitionedData& data, int64_t max_per_batch, ReadOrder order,
                   const std::string& checkpoint, std::string_view pipeline = kPipeline) {
  auto spec = ParsePipeline(pipeline, "partitioned.yaml", LoadOptions{});
  REQUIRE(spec);
  spec->checkpoint_location = checkpoint;
  RunResult result;
  QueryIo io;
  io.create_source = [&](const PipelineSpec&) -> Result<std::unique_ptr<Source>> {
    return std::unique_ptr<Source>(std::make_unique<FakeSource>(data, max_per_batch, order));
  };
  io.create_sinks = [&](const PipelineSpec&,
                        Source&) -> Result<std::vector<std::unique_ptr<Sink>>> {
    std::vector<std::unique_ptr<Sink>> sinks;
    sinks.push_back(std::make_unique<CollectingSink>("all", result.delivered));
    return sinks;
  };
  io.open_checkpoint = [](const std::string& directory, const CheckpointOptions& options) {
    return OpenCheckpointStore(directory, options);
  };
  ExecutorOptions options;
  options.sync_commits = false;
  auto executor = QueryExecutor::Create(*spec, std::move(options), std::move(io));
  REQUIRE(executor);
  REQUIRE((*executor)->Start());
  REQUIRE((*executor)->Run());
  result.dropped = (*executor)->counters().dropped_by_watermark.load();
  return result;
}

// The parts of an alert that say what happened (not which batch carried it, nor statistics
// whose last digits depend on the order values were summed in).
std::set<std::string> AlertFacts(const std::vector<std::string>& alerts) {
  simdjson::dom::parser parser;
  std::set<std::string> facts;
  for (const std::string& row : alerts) {
    simdjson::dom::element alert = parser.parse(row);
    facts.insert(fmt::format("{} {} {} {} {} start_record={} n={} start={}",
                             std::string_view(alert["alert_id"]), std::string_view(alert["level"]),
                             std::string_view(alert["model"]), std::string_view(alert["series"]),
                             std::string_view(alert["detector"]),
                             int64_t(alert["window"]["start_record"]),
                             int64_t(alert["window"]["n"]),
                             std::string_view(alert["window"]["start_time"])));
  }
  return facts;
}

// model + window -> count and the mean of feature 1.
std::map<std::string, std::pair<int64_t, double>> WindowStats(
    const std::vector<std::string>& rows) {
  simdjson::dom::parser parser;
  std::map<std::string, std::pair<int64_t, double>> stats;
  for (const std::string& row : rows) {
    simdjson::dom::element parsed = parser.parse(row);
    const std::string key = fmt::format("{} {}", std::string_view(parsed["model_id"]),
                                        std::string_view(parsed["window"]["start"]));
    REQUIRE(stats.count(key) == 0);  // each window is emitted once
    stats[key] = {int64_t(parsed["count"]), double(parsed["mean(feature_vector[1])"])};
  }
  return stats;
}

TEST_CASE("the same partitioned input gives the same alerts and window statistics whatever "
          "the batch size and read order",
          "[executor][partitions][determinism]") {
  const PartitionedData data = GeneratedLogs();
  TempDir dir;
  const RunResult reference = RunQuery(data, 1000, ReadOrder::kPartitionAfterPartition,
                                       dir / "a");
  const std::set<std::string> alerts = AlertFacts(reference.delivered.alerts);
  const auto stats = WindowStats(reference.delivered.stats);
  // The shift is found, in model-2's feature 1 only.
  REQUIRE(!alerts.empty());
  for (const std::string& alert : alerts) CHECK(alert.find("model-2 feature_vector[1]") != std::string::npos);
  CHECK(reference.dropped > 0);
  CHECK(stats.size() >= 4 * 28);

  struct Variant {
    int64_t max_per_batch;
    ReadOrder order;
  };
  for (const Variant& variant : {Variant{7777, ReadOrder::kInterleaved},
                                 Variant{200'000, ReadOrder::kPartitionAfterPartition},
                                 Variant{200'000, ReadOrder::kInterleaved}}) {
    DYNAMIC_SECTION("maxOffsetsPerTrigger " << variant.max_per_batch << ", order "
                                            << static_cast<int>(variant.order)) {
      const RunResult run =
          RunQuery(data, variant.max_per_batch, variant.order,
                   dir / fmt::format("v{}-{}", variant.max_per_batch,
                                     static_cast<int>(variant.order)));
      CHECK(AlertFacts(run.delivered.alerts) == alerts);
      CHECK(run.dropped == reference.dropped);
      const auto other = WindowStats(run.delivered.stats);
      REQUIRE(other.size() == stats.size());
      for (const auto& [key, value] : stats) {
        INFO(key);
        REQUIRE(other.count(key) == 1);
        CHECK(other.at(key).first == value.first);
        CHECK(std::abs(other.at(key).second - value.second) <= 1e-9 * std::abs(value.second));
      }
      if (variant.max_per_batch > 100'000) CHECK(run.delivered.batches < reference.delivered.batches);
    }
  }
}

// Inference logs as producers that key records by model write them: each of four models in a
// partition of its own, in event-time order (300 s at 400 records/s).
PartitionedData LogsKeyedByModel() {
  InferenceGeneratorOptions options;
  options.models = 4;
  options.features = 2;
  options.labels = 0;
  options.rows_per_second = 400;
  options.start_time_ms = 1'700'000'000'000;
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  PartitionedData data;
  data.partitions.resize(4);
  for (uint64_t row = 0; row < 120'000; ++row) {
    std::string record;
    generator->AppendRecord(row, record);
    const size_t at = record.find("\"model-") + 7;
    data.partitions[static_cast<size_t>(record[at] - '0')].push_back(std::move(record));
  }
  return data;
}

constexpr const char* kPercentilePipeline = R"(
name: percentiles
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  groupBy: [model_id]
  window: {column: event_time, size: 60 seconds}
  watermark: {column: event_time, delay: 4 seconds, idleTimeout: 0}
  aggregates:
    - count
    - approx_percentile(prediction, array(0.01, 0.5, 0.99), 20)
    - percentile_approx(feature_vector, 0.9, 10)
sinks:
  - {name: stats, format: console, stream: stats, outputMode: append}
trigger: {availableNow: true}
)";

TEST_CASE("approx_percentile windows are identical whatever maxOffsetsPerTrigger and read order",
          "[executor][partitions][determinism][quantiles]") {
  const PartitionedData data = LogsKeyedByModel();
  for (const auto& partition : data.partitions) REQUIRE(partition.size() > 20'000);
  TempDir dir;
  const RunResult reference =
      RunQuery(data, 1000, ReadOrder::kPartitionAfterPartition, dir / "a", kPercentilePipeline);
  const std::vector<std::string>& rows = reference.delivered.stats;
  REQUIRE(rows.size() >= 4 * 4);  // four models, five one-minute windows, the last still open
  // A window of about 6,000 values per model compacted its sketches (k = 60 and 30): the
  // answers are values of the input, not exact order statistics, and still identical below.
  CHECK(rows[0].find("\"approx_percentile(prediction, array(0.01, 0.5, 0.99), 20)\":[") !=
        std::string::npos);
  CHECK(rows[0].find("\"percentile_approx(feature_vector[1], 0.9, 10)\":") != std::string::npos);
  for (const auto& [max_per_batch, order] :
       {std::pair{int64_t{7777}, ReadOrder::kInterleaved},
        std::pair{int64_t{200'000}, ReadOrder::kPartitionAfterPartition},
        std::pair{int64_t{333}, ReadOrder::kInterleaved}}) {
    DYNAMIC_SECTION("maxOffsetsPerTrigger " << max_per_batch << ", order "
                                            << static_cast<int>(order)) {
      const RunResult run =
          RunQuery(data, max_per_batch, order,
                   dir / fmt::format("v{}-{}", max_per_batch, static_cast<int>(order)),
                   kPercentilePipeline);
      CHECK(run.delivered.batches != reference.delivered.batches);
      CHECK(run.delivered.stats == rows);
    }
  }
}

// Named-feature logs: two models in two countries, four features in a map listed in a random
// order per record, spread over six partitions each in event-time order (100 records/s for
// 600 s). From 300 s on, fraud-v7's amount in DE moves by 2 sd.
PartitionedData NamedFeatureLogs(uint64_t order_seed) {
  std::mt19937_64 values(5);
  std::mt19937_64 order(order_seed);
  std::normal_distribution<double> normal(0, 1);
  PartitionedData data;
  data.partitions.resize(6);
  for (int64_t i = 0; i < 60'000; ++i) {
    const bool fraud = i % 2 == 0;
    const bool de = (i / 2) % 2 == 0;
    double amount = 50 + 10 * normal(values);
    if (fraud && de && i >= 30'000) amount += 20;
    std::vector<std::string> features = {fmt::format("\"amount\":{}", amount),
                                         fmt::format("\"score\":{}", normal(values)),
                                         fmt::format("\"age_days\":{}", 100 + 20 * normal(values)),
                                         fmt::format("\"tenure\":{}", 3 + normal(values))};
    std::shuffle(features.begin(), features.end(), order);
    data.partitions[static_cast<size_t>((i * 5 + i / 7) % 6)].push_back(fmt::format(
        R"({{"model_id":"{}","event_time":{},"segment":{{"country":"{}"}},"features":{{{}}}}})",
        fraud ? "fraud-v7" : "churn-v2", 1'700'000'000'000 + i * 10, de ? "DE" : "FR",
        fmt::join(features, ",")));
  }
  return data;
}

constexpr const char* kNamedFeaturePipeline = R"(
name: named
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - name: segment
    type: struct<country:string>
  - name: features
    type: map<string, double>
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  groupBy: [model_id, segment.country]
  window: {column: event_time, size: 60 seconds}
  watermark: {column: event_time, delay: 4 seconds, idleTimeout: 0}
  aggregates: [count]
drift:
  series: [features]
  baseline: {type: warmup, records: 1000}
  detectors: [{type: mean_shift}, {type: psi}]
sinks:
  - {name: stats, format: console, stream: stats, outputMode: append}
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)";

// alert id, level, model, segment, series, detector, window start.
std::set<std::string> SegmentAlertFacts(const std::vector<std::string>& alerts) {
  simdjson::dom::parser parser;
  std::set<std::string> facts;
  for (const std::string& row : alerts) {
    simdjson::dom::element alert = parser.parse(row);
    facts.insert(fmt::format("{} {} {} {} {} {} {}", std::string_view(alert["alert_id"]),
                             std::string_view(alert["level"]), std::string_view(alert["model"]),
                             std::string_view(alert["segment"]), std::string_view(alert["series"]),
                             std::string_view(alert["detector"]),
                             std::string_view(alert["window"]["start_time"])));
  }
  return facts;
}

TEST_CASE("drift per segment of named features gives the same alerts whatever the batch size, "
          "read order, key order and a restart",
          "[executor][partitions][determinism][segments]") {
  TempDir dir;
  const std::string_view pipeline = kNamedFeaturePipeline;
  const PartitionedData data = NamedFeatureLogs(1);
  const RunResult reference =
      RunQuery(data, 5000, ReadOrder::kPartitionAfterPartition, dir / "a", pipeline);
  const std::set<std::string> facts = SegmentAlertFacts(reference.delivered.alerts);
  REQUIRE_FALSE(facts.empty());
  for (const std::string& fact : facts) {
    INFO(fact);
    CHECK(fact.find(" fraud-v7 segment.country=DE features.amount ") != std::string::npos);
  }
  SECTION("other batches, read order and key order") {
    const RunResult run = RunQuery(NamedFeatureLogs(2), 777, ReadOrder::kInterleaved,
                                   dir / "b", pipeline);
    CHECK(SegmentAlertFacts(run.delivered.alerts) == facts);
  }
  SECTION("a restart from the checkpoint halfway") {
    PartitionedData half = NamedFeatureLogs(3);
    const PartitionedData whole = half;
    for (auto& partition : half.partitions) partition.resize(partition.size() / 2);
    const RunResult first = RunQuery(half, 3000, ReadOrder::kInterleaved, dir / "c", pipeline);
    const RunResult second = RunQuery(whole, 3000, ReadOrder::kInterleaved, dir / "c", pipeline);
    std::vector<std::string> alerts = first.delivered.alerts;
    alerts.insert(alerts.end(), second.delivered.alerts.begin(), second.delivered.alerts.end());
    CHECK(SegmentAlertFacts(alerts) == facts);
  }
}

}  // namespace
}  // namespace driftd
