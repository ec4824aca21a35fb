// The executor on its own: an in-memory partitioned source and a collecting sink stand in for
// the connectors, the checkpoint is the real RocksDB store in a temporary directory.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cmath>
#include <map>
#include <random>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "connectors/inference_generator.h"
#include "engine/drift/codec.h"
#include "engine/drift/monitor.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/executor.h"
#include "engine/json_decoder.h"
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
  // The other streams, and every batch's rows with its id, for comparisons byte for byte.
  std::vector<std::string> updates;
  std::vector<std::string> dead_letters;
  std::vector<std::string> evaluations;
  std::vector<std::string> batch_log;
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
    for (const std::string& row : output.stats_update.rows) into_.updates.push_back(row);
    for (const std::string& row : output.dead_letters.rows) into_.dead_letters.push_back(row);
    for (const std::string& row : output.evaluations.rows) into_.evaluations.push_back(row);
    for (const OutputRows* rows : {&output.stats_append, &output.stats_update,
                                   &output.stats_complete, &output.alerts, &output.dead_letters,
                                   &output.evaluations}) {
      into_.batch_log.push_back(fmt::format("batch {} columns {}", output.batch_id,
                                            fmt::join(rows->columns, ",")));
      for (size_t i = 0; i < rows->rows.size(); ++i) {
        into_.batch_log.push_back(fmt::format("{} {}", rows->keys[i], rows->rows[i]));
      }
    }
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
  std::vector<std::string> progress;  // one JSON record per batch
  int64_t malformed = 0;
  int64_t filtered = 0;
  int64_t input = 0;
  /// The checkpoint's state after the run: encoded key -> value.
  std::map<std::string, std::string> state;
  /// Run's error, if it failed.
  std::string error;
};

/// How a run is executed, beside its data and batching.
struct Execution {
  int threads = 1;
  /// Small chunks, so that a batch is many chunks and threads share it. Default: the
  /// executor's.
  size_t chunk_bytes = ExecutorOptions{}.chunk_bytes;
};

RunResult RunQuery(const PartitionedData& data, int64_t max_per_batch, ReadOrder order,
                   const std::string& checkpoint, std::string_view pipeline = kPipeline,
                   Execution execution = {}) {
  auto spec = ParsePipeline(pipeline, "partitioned.yaml",
                            LoadOptions{.catalog = &ConnectorDeclarations()});
  REQUIRE(spec);
  spec->checkpoint_location = checkpoint;
  spec->threads = execution.threads;
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
  options.on_progress = [&](const std::string& json) { result.progress.push_back(json); };
  options.chunk_bytes = execution.chunk_bytes;
  {
    auto executor = QueryExecutor::Create(*spec, std::move(options), std::move(io));
    REQUIRE(executor);
    REQUIRE((*executor)->Start());
    const Status ran = (*executor)->Run();
    if (!ran) result.error = ran.error().message();
    const QueryCounters& counters = (*executor)->counters();
    result.dropped = counters.dropped_by_watermark.load();
    result.malformed = counters.malformed_rows.load();
    result.filtered = counters.filtered_rows.load();
    result.input = counters.input_rows.load();
  }
  auto store = OpenCheckpointStore(checkpoint, CheckpointOptions{});
  REQUIRE(store);
  REQUIRE((*store)->ScanState([&](std::string_view key, std::string_view value) {
    result.state.emplace(std::string(key), std::string(value));
  }));
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

// A hundred models in one partition, fifteen of them shifting (feature 1 by 3 sigma) part way:
// record-count windows, the CUSUM per value, labels.
PartitionedData ManyModelLogs() {
  InferenceGeneratorOptions options;
  options.models = 100;
  options.features = 2;
  options.rows_per_second = 1000;
  options.start_time_ms = 1'700'000'000'000;
  for (int model = 0; model < 100; model += 7) {
    auto scenario = ParseDriftScenario(
        fmt::format("model-{} feature 1 shifts by 3 sigma after {} s", model, 50 + model / 7));
    REQUIRE(scenario);
    options.drift.push_back(*scenario);
  }
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  PartitionedData data;
  data.partitions.resize(1);
  for (uint64_t row = 0; row < 120'000; ++row) {
    std::string record;
    generator->AppendRecord(row, record);
    data.partitions[0].push_back(std::move(record));
  }
  return data;
}

constexpr const char* kManyModelsPipeline = R"(
name: many-models
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
  - {name: ground_truth, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [feature_vector, prediction]
  windowRecords: 200
  baseline: {type: warmup, records: 200}
  detectors: [{type: mean_shift}, {type: psi}, {type: cusum}, {type: error_rate}]
sinks:
  - {name: alerts, format: console, stream: alerts}
  - {name: evaluations, format: console, stream: evaluations}
trigger: {availableNow: true}
)";

// What each alert or evaluation row says, in the order the rows came (batch ids and times of
// processing left out).
std::vector<std::string> RowFacts(const std::vector<std::string>& rows) {
  simdjson::dom::parser parser;
  std::vector<std::string> facts;
  for (const std::string& row : rows) {
    simdjson::dom::object object = parser.parse(row);
    std::string fact;
    for (auto [key, value] : object) {
      if (key == "batch_id" || key == "detected_at" || key == "evaluated_at") continue;
      fact += fmt::format("{}={} ", key, simdjson::to_string(value));
    }
    facts.push_back(std::move(fact));
  }
  return facts;
}

TEST_CASE("a batch of many models gives the alerts and evaluations, in the same order, of "
          "batches that each hold a few models",
          "[executor][determinism][drift]") {
  // The drift stage observes a batch of many models model by model (for locality), and one
  // of a few models record by record: the rows out must be the same, in record order.
  const PartitionedData data = ManyModelLogs();
  TempDir dir;
  const RunResult few =
      RunQuery(data, 64, ReadOrder::kPartitionAfterPartition, dir / "few", kManyModelsPipeline);
  const RunResult many = RunQuery(data, 200'000, ReadOrder::kPartitionAfterPartition,
                                  dir / "many", kManyModelsPipeline);
  REQUIRE(few.error.empty());
  REQUIRE(many.error.empty());
  CHECK(many.delivered.batches == 1);
  const std::vector<std::string> alerts = RowFacts(few.delivered.alerts);
  // Shifts were found in several models, and the error series and the roll-up spoke too.
  std::set<std::string> alerting_models;
  for (const std::string& fact : alerts) {
    const size_t at = fact.find("model=\"");
    alerting_models.insert(fact.substr(at, fact.find('"', at + 7) - at));
  }
  CHECK(alerting_models.size() >= 10);
  CHECK(RowFacts(many.delivered.alerts) == alerts);
  const std::vector<std::string> evaluations = RowFacts(few.delivered.evaluations);
  CHECK(evaluations.size() > 100 * 4 * 4);
  CHECK(RowFacts(many.delivered.evaluations) == evaluations);
}

TEST_CASE("each batch's progress says the encoded size of the state it changed beside what "
          "its commit wrote",
          "[executor][progress]") {
  const PartitionedData data = GeneratedLogs();
  TempDir dir;
  const RunResult run = RunQuery(data, 20'000, ReadOrder::kInterleaved, dir / "a");
  simdjson::dom::parser parser;
  int64_t batches = 0;
  for (const std::string& json : run.progress) {
    simdjson::dom::element op = parser.parse(json)["stateOperators"].at(0);
    const int64_t written = op["bytesWritten"];
    const int64_t changed = op["bytesChanged"];
    if (int64_t(op["numKeysWritten"]) == 0) continue;
    ++batches;
    INFO(json);
    // The changed state, encoded, is in what the commit put, beside the keys.
    CHECK(changed > 0);
    CHECK(changed <= written);
    CHECK(written <= 2 * changed);
  }
  CHECK(batches >= 5);
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

// Records of GeneratedLogs with some that a decoder refuses: not JSON, a wrong type, and one
// from "shadow" traffic that the query's filter drops.
PartitionedData WithBadRecords(PartitionedData data) {
  for (size_t p = 0; p < data.partitions.size(); ++p) {
    std::vector<std::string>& records = data.partitions[p];
    for (size_t i = 97 * (p + 1); i < records.size(); i += 997) {
      switch (i % 3) {
        case 0: records[i] = "{\"model_id\": \"model-1\", \"prediction\": "; break;
        case 1: {
          const size_t at = records[i].find("\"prediction\":") + 13;
          records[i].replace(at, records[i].find_first_of(",}", at) - at, "\"x\"");
          break;
        }
        case 2: records[i].replace(records[i].find("model-"), 6, "shadow-"); break;
      }
    }
  }
  return data;
}

// Inference logs with named string features: four models over eight partitions, each partition
// in event-time order (300 s at 400 records/s). After 150 s model-1's device shifts from ios to
// android, model-2's country arrives null in 30% of its records, and 6% of model-3's records
// carry a malformed `retries` (a string where a long belongs: kept with it nulled, as the
// permissive policy does).
PartitionedData CategoricalLogs() {
  PartitionedData data;
  data.partitions.resize(8);
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> unit(0, 1);
  const char* devices[] = {"ios", "android", "web", "tv"};
  const char* countries[] = {"DE", "FR", "US", "GB", "IT", "ES", "NL", "PL"};
  const int64_t start_ms = 1'700'000'000'000;
  for (uint64_t row = 0; row < 120'000; ++row) {
    const int model = static_cast<int>(row % 4);
    const int64_t ms = start_ms + static_cast<int64_t>(row * 1000 / 400);
    const bool after = ms - start_ms >= 150'000;
    const double device_shares[4] = {model == 1 && after ? 0.25 : 0.45,
                                     model == 1 && after ? 0.55 : 0.35, 0.15, 0.05};
    double u = unit(rng);
    int device = 0;
    while (device < 3 && u >= device_shares[device]) u -= device_shares[device++];
    const int country = static_cast<int>(std::min(7.0, std::floor(-std::log(unit(rng)) * 2)));
    const bool null_country = unit(rng) < (model == 2 && after ? 0.30 : 0.01);
    const bool malformed = unit(rng) < (model == 3 && after ? 0.06 : 0.001);
    const time_t seconds = static_cast<time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    std::string record = fmt::format(
        R"({{"model_id":"model-{}","event_time":"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",)"
        R"("device":"{}","country":{},"amount":{:.3f},"retries":{}}})",
        model, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
        ms % 1000, devices[device],
        null_country ? std::string("null") : fmt::format("\"{}\"", countries[country]),
        10 + 50 * unit(rng), malformed ? std::string("\"three\"") : std::string("1"));
    data.partitions[(row * 7 + row / 3) % 8].push_back(std::move(record));
  }
  return data;
}

// Record-count drift windows with labels, an update-mode aggregation without a window, a
// filter and a derived column, malformed records to a dead-letter stream, evaluations.
constexpr const char* kRecordWindowPipeline = R"yaml(
name: records
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
  malformed: {policy: dead_letter}
query:
  select: ["prediction * 2 AS doubled"]
  where: "model_id NOT IN ('shadow-0', 'shadow-1', 'shadow-2', 'shadow-3')"
  groupBy: [model_id]
  aggregates: [count, mean(feature_vector), stddev(doubled), min(prediction), max(prediction)]
drift:
  series: [feature_vector, doubled]
  windowRecords: 500
  baseline: {type: warmup, records: 1000}
  detectors: [{type: mean_shift}, {type: psi}, {type: cusum}]
sinks:
  - {name: stats, format: console, stream: stats, outputMode: update}
  - {name: alerts, format: console, stream: alerts}
  - {name: dead, format: console, stream: dead_letter}
  - {name: evaluations, format: console, stream: evaluations}
trigger: {availableNow: true}
)yaml";

// Drift per (model, segment): each model's rows split by a derived column, so drift's shards
// route by the model column's value (no shared model ids) and name state by segment.
constexpr const char* kSegmentPipeline = R"yaml(
name: segmented
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  select: ["prediction > 0.5 AS high"]
  groupBy: [model_id]
  window: {column: event_time, size: 10 seconds}
  watermark: {column: event_time, delay: 4 seconds, idleTimeout: 0}
  aggregates: [count, mean(feature_vector)]
drift:
  series: [feature_vector, prediction]
  segmentBy: [high]
  baseline: {type: warmup, records: 500}
  detectors: [{type: mean_shift}, {type: psi}]
sinks:
  - {name: stats, format: console, stream: stats, outputMode: append}
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)yaml";

// Input rows as they are: a query without aggregation.
constexpr const char* kSelectPipeline = R"(
name: rows
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  select: [model_id, prediction, "prediction + 1 AS shifted"]
  where: "prediction > 0.3"
sinks:
  - {name: rows, format: console, stream: stats, outputMode: append}
trigger: {availableNow: true}
)";

void CheckSameRun(const RunResult& run, const RunResult& reference) {
  CHECK(run.error == reference.error);
  CHECK(run.input == reference.input);
  CHECK(run.malformed == reference.malformed);
  CHECK(run.filtered == reference.filtered);
  CHECK(run.dropped == reference.dropped);
  CHECK(run.delivered.batches == reference.delivered.batches);
  // Every row of every stream of every batch, byte for byte, and the checkpoint's state.
  REQUIRE(run.delivered.batch_log.size() == reference.delivered.batch_log.size());
  for (size_t i = 0; i < run.delivered.batch_log.size(); ++i) {
    INFO("row " << i);
    REQUIRE(run.delivered.batch_log[i] == reference.delivered.batch_log[i]);
  }
  CHECK(run.state.size() == reference.state.size());
  CHECK(run.state == reference.state);
}

TEST_CASE("batches on two and three threads give one thread's rows, alerts and state, byte for "
          "byte",
          "[executor][threads][determinism]") {
  const PartitionedData logs = GeneratedLogs();
  const PartitionedData bad = WithBadRecords(logs);
  TempDir dir;
  struct Case {
    const char* name;
    const PartitionedData* data;
    const char* pipeline;
  };
  for (const Case& c : {Case{"event-time windows", &logs, kPipeline},
                        Case{"record-count windows", &bad, kRecordWindowPipeline},
                        Case{"percentiles", &logs, kPercentilePipeline},
                        Case{"by segment", &logs, kSegmentPipeline},
                        Case{"select", &logs, kSelectPipeline}}) {
    for (const auto& [max_per_batch, order] :
         {std::pair{int64_t{7777}, ReadOrder::kInterleaved},
          std::pair{int64_t{200'000}, ReadOrder::kPartitionAfterPartition}}) {
      DYNAMIC_SECTION(c.name << ", maxOffsetsPerTrigger " << max_per_batch << ", order "
                             << static_cast<int>(order)) {
        const std::string base =
            fmt::format("{}-{}-{}", c.pipeline == kPipeline ? 0 : c.name[0], max_per_batch,
                        static_cast<int>(order));
        const RunResult reference = RunQuery(*c.data, max_per_batch, order, dir / (base + "-1"),
                                             c.pipeline, Execution{1, 16 << 10});
        REQUIRE(reference.error.empty());
        REQUIRE(reference.delivered.batch_log.size() > 20);
        // Model-2's shift alerts in each of its segments.
        if (c.pipeline == kSegmentPipeline) CHECK(!reference.delivered.alerts.empty());
        if (c.data == &bad) {
          CHECK(reference.malformed > 0);
          CHECK(reference.filtered > 0);
          CHECK(!reference.delivered.dead_letters.empty());
          CHECK(!reference.delivered.evaluations.empty());
        }
        for (int threads : {2, 3}) {
          INFO(threads << " threads");
          const RunResult run =
              RunQuery(*c.data, max_per_batch, order, dir / fmt::format("{}-{}", base, threads),
                       c.pipeline, Execution{threads, 16 << 10});
          CheckSameRun(run, reference);
        }
        // Chunks of thousands of rows: drift's shards fold each on threads of their own.
        const RunResult large = RunQuery(*c.data, max_per_batch, order, dir / (base + "-large"),
                                         c.pipeline, Execution{2, 1 << 20});
        CheckSameRun(large, reference);
      }
    }
  }
}

TEST_CASE("a model whose name is empty keeps its drift state across a restart on another "
          "number of threads",
          "[executor][threads][determinism]") {
  // The empty name is a model's like any other: its state keys ("drift/", "drift-admit/")
  // belong to its own shard, not to every shard.
  PartitionedData data = GeneratedLogs();
  for (auto& partition : data.partitions) {
    for (std::string& record : partition) {
      const std::string named = R"("model_id":"model-2")";
      if (const size_t at = record.find(named); at != std::string::npos) {
        record.replace(at, named.size(), R"("model_id":"")");
      }
    }
  }
  TempDir dir;
  const RunResult reference = RunQuery(data, 5000, ReadOrder::kInterleaved, dir / "one",
                                       kPipeline, Execution{1, 16 << 10});
  REQUIRE(reference.error.empty());
  const std::set<std::string> alerts = AlertFacts(reference.delivered.alerts);
  bool empty_model_alerts = false;
  for (const std::string& alert : reference.delivered.alerts) {
    empty_model_alerts = empty_model_alerts || alert.find(R"("model":"")") != std::string::npos;
  }
  CHECK(empty_model_alerts);  // model-2's shift, under its empty name
  PartitionedData half;
  for (const auto& partition : data.partitions) {
    half.partitions.emplace_back(
        partition.begin(), partition.begin() + static_cast<std::ptrdiff_t>(partition.size() / 2));
  }
  const std::string checkpoint = dir / "restarted";
  const RunResult first = RunQuery(half, 5000, ReadOrder::kInterleaved, checkpoint, kPipeline,
                                   Execution{1, 16 << 10});
  REQUIRE(first.error.empty());
  const RunResult second = RunQuery(data, 5000, ReadOrder::kInterleaved, checkpoint, kPipeline,
                                    Execution{3, 16 << 10});
  REQUIRE(second.error.empty());
  std::vector<std::string> both = first.delivered.alerts;
  both.insert(both.end(), second.delivered.alerts.begin(), second.delivered.alerts.end());
  CHECK(AlertFacts(both) == alerts);
  CHECK(both.size() == reference.delivered.alerts.size());
}

TEST_CASE("alerts and statistics on two threads do not depend on the batch size or read order",
          "[executor][threads][determinism]") {
  const PartitionedData data = GeneratedLogs();
  TempDir dir;
  const RunResult reference = RunQuery(data, 1000, ReadOrder::kPartitionAfterPartition,
                                       dir / "a", kPipeline, Execution{1, 16 << 10});
  const std::set<std::string> alerts = AlertFacts(reference.delivered.alerts);
  REQUIRE(!alerts.empty());
  const auto stats = WindowStats(reference.delivered.stats);
  for (const auto& [max_per_batch, order] :
       {std::pair{int64_t{333}, ReadOrder::kInterleaved},
        std::pair{int64_t{200'000}, ReadOrder::kInterleaved}}) {
    DYNAMIC_SECTION("maxOffsetsPerTrigger " << max_per_batch) {
      const RunResult run =
          RunQuery(data, max_per_batch, order, dir / fmt::format("t{}", max_per_batch),
                   kPipeline, Execution{2, 4 << 10});
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
    }
  }
}

TEST_CASE("a malformed record under the fail policy stops a batch on several threads with one "
          "thread's message",
          "[executor][threads][malformed]") {
  PartitionedData data = GeneratedLogs();
  // Two bad records: the one read first is named, whichever thread decodes its chunk first.
  data.partitions[5][3000] = "{\"model_id\": 7";
  data.partitions[6][100] = "[1, 2]";
  std::string pipeline = kPipeline;
  pipeline.replace(pipeline.find("query:"), 0, "  malformed: {policy: fail}\n");
  TempDir dir;
  for (const ReadOrder order : {ReadOrder::kPartitionAfterPartition, ReadOrder::kInterleaved}) {
    DYNAMIC_SECTION("order " << static_cast<int>(order)) {
      const std::string base = fmt::format("o{}", static_cast<int>(order));
      const RunResult one =
          RunQuery(data, 200'000, order, dir / (base + "-1"), pipeline, Execution{1, 8 << 10});
      REQUIRE(one.error.find("malformed record at partition") != std::string::npos);
      const RunResult two =
          RunQuery(data, 200'000, order, dir / (base + "-2"), pipeline, Execution{2, 8 << 10});
      CHECK(two.error == one.error);
      CHECK(two.state == one.state);
    }
  }
}


// A sink whose deliveries a test controls.
class ScriptedSink final : public Sink {
 public:
  explicit ScriptedSink(std::function<Status(const BatchOutput&)> deliver)
      : deliver_(std::move(deliver)) {}
  const std::string& name() const override { return name_; }
  Status Open() override { return Ok(); }
  Result<bool> IsDelivered(int64_t) override { return false; }
  Status Deliver(const BatchOutput& output) override { return deliver_(output); }

 private:
  std::string name_ = "scripted";
  std::function<Status(const BatchOutput&)> deliver_;
};

// A FakeSource that counts the batches read.
class CountingSource final : public Source {
 public:
  CountingSource(const PartitionedData& data, int64_t max_per_batch, std::atomic<int>& reads)
      : inner_(data, max_per_batch, ReadOrder::kPartitionAfterPartition), reads_(reads) {}
  Status Start(const SourceOffsets& committed) override { return inner_.Start(committed); }
  Result<SourceOffsets> InitialOffsets() override { return inner_.InitialOffsets(); }
  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    return inner_.PlanBatch(start);
  }
  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    ++reads_;
    return inner_.Read(start, end);
  }
  bool HasIndependentPartitions() const override { return true; }
  std::string PartitionKeyOf(uint32_t index) const override { return inner_.PartitionKeyOf(index); }
  std::string DescribePosition(const RecordPosition& position) const override {
    return inner_.DescribePosition(position);
  }
  std::string Describe() const override { return "Counting"; }

 private:
  FakeSource inner_;
  std::atomic<int>& reads_;
};

// Runs kPipeline on `threads` threads with `deliver` as its only sink; Run's status.
Status RunScripted(const PartitionedData& data, const std::string& checkpoint, int threads,
                   std::atomic<int>& reads, std::function<Status(const BatchOutput&)> deliver) {
  auto spec = ParsePipeline(kPipeline, "partitioned.yaml",
                            LoadOptions{.catalog = &ConnectorDeclarations()});
  REQUIRE(spec);
  spec->checkpoint_location = checkpoint;
  spec->threads = threads;
  QueryIo io;
  io.create_source = [&](const PipelineSpec&) -> Result<std::unique_ptr<Source>> {
    return std::unique_ptr<Source>(std::make_unique<CountingSource>(data, 20'000, reads));
  };
  io.create_sinks = [&](const PipelineSpec&,
                        Source&) -> Result<std::vector<std::unique_ptr<Sink>>> {
    std::vector<std::unique_ptr<Sink>> sinks;
    sinks.push_back(std::make_unique<ScriptedSink>(deliver));
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
  return (*executor)->Run();
}

TEST_CASE("on two threads the next batch is read while one is delivered, and commits only "
          "after that delivery",
          "[executor][threads][delivery]") {
  const PartitionedData data = GeneratedLogs();
  TempDir dir;
  std::atomic<int> reads{0};
  std::vector<int64_t> delivered;
  int overlapped = 0;
  const Status ran = RunScripted(data, dir / "a", 2, reads, [&](const BatchOutput& output) {
    // Wait (a bounded while) for the next batch's read to start: it does not wait for this.
    // 120,000 records in batches of 20,000: batches 0 to 4 have a next batch that reads.
    const int reads_before = static_cast<int>(output.batch_id) + 1;
    if (output.batch_id < 5 && testing::WaitFor([&] { return reads.load() > reads_before; },
                                                std::chrono::seconds(10))) {
      ++overlapped;
    }
    delivered.push_back(output.batch_id);
    return Ok();
  });
  REQUIRE(ran);
  REQUIRE(delivered.size() >= 6);  // and no-data batches that close the last windows
  for (size_t i = 0; i < delivered.size(); ++i) CHECK(delivered[i] == static_cast<int64_t>(i));
  CHECK(reads.load() >= 6);
  CHECK(overlapped == 5);
}

TEST_CASE("a delivery that fails on two threads stops the query before the next batch commits",
          "[executor][threads][delivery]") {
  const PartitionedData data = GeneratedLogs();
  TempDir dir;
  std::atomic<int> reads{0};
  const Status ran = RunScripted(data, dir / "a", 2, reads, [&](const BatchOutput& output) {
    if (output.batch_id < 2) return Ok();
    // Batch 2 fails for good once batch 3 has been read.
    testing::WaitFor([&] { return reads.load() > 3; }, std::chrono::seconds(5));
    return Status(MakeError(ErrorCode::kConfig, "refused batch {}", output.batch_id));
  });
  REQUIRE(!ran);
  CHECK_THAT(ran.error().message(), Catch::Contains("refused batch 2"));
  auto store = OpenCheckpointStore(dir / "a", CheckpointOptions{});
  REQUIRE(store);
  auto last = (*store)->LastCommit();
  REQUIRE(last);
  REQUIRE(*last);
  CHECK((*last)->batch_id == 2);  // batch 3 was read and folded, never committed
  auto pending = (*store)->PendingOutbox();
  REQUIRE(pending);
  REQUIRE(pending->size() == 1);
  CHECK(pending->front().batch_id == 2);
}

constexpr const char* kCategoricalPipeline = R"(
name: categorical
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: device, type: string}
  - {name: country, type: string}
  - {name: amount, type: double}
  - {name: retries, type: long}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  groupBy: [model_id]
  window: {column: event_time, size: 10 seconds}
  watermark: {column: event_time, delay: 4 seconds, idleTimeout: 0}
  aggregates: [count, mean(retries)]  # retries is read, so its type is checked
drift:
  series: [device, country, amount]
  baseline: {type: warmup, records: 3000}
sinks:
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)";

TEST_CASE("categorical and data-quality alerts are the same whatever the batching and read "
          "order, and across a restart from the checkpoint",
          "[executor][partitions][determinism][categorical]") {
  const PartitionedData data = CategoricalLogs();
  TempDir dir;
  const RunResult reference = RunQuery(data, 1000, ReadOrder::kPartitionAfterPartition,
                                       dir / "a", kCategoricalPipeline);
  const std::set<std::string> alerts = AlertFacts(reference.delivered.alerts);
  INFO(fmt::format("{}", fmt::join(reference.delivered.alerts, "\n")));
  // Each change raises its own series' ALERT, and nothing else alerts.
  std::set<std::string> alerting;
  simdjson::dom::parser parser;
  for (const std::string& row : reference.delivered.alerts) {
    simdjson::dom::element alert = parser.parse(row);
    if (std::string_view(alert["level"]) != "ALERT") continue;
    alerting.insert(fmt::format("{} {} {}", std::string_view(alert["model"]),
                                std::string_view(alert["series"]),
                                std::string_view(alert["kind"])));
    if (std::string_view(alert["series"]) == "device") {
      // The alert names the categories that moved.
      std::set<std::string_view> moved;
      for (simdjson::dom::element c : alert["top_categories"].get_array()) {
        moved.insert(std::string_view(c["category"]));
      }
      CHECK(moved.count("ios") == 1);
      CHECK(moved.count("android") == 1);
    }
  }
  CHECK(alerting == std::set<std::string>{"model-1 device drift",
                                          "model-2 country:missing data_quality",
                                          "model-3 malformed data_quality"});
  for (const auto& [max_per_batch, order] :
       {std::pair{int64_t{7777}, ReadOrder::kInterleaved},
        std::pair{int64_t{200'000}, ReadOrder::kPartitionAfterPartition}}) {
    DYNAMIC_SECTION("maxOffsetsPerTrigger " << max_per_batch << ", order "
                                            << static_cast<int>(order)) {
      const RunResult run = RunQuery(
          data, max_per_batch, order,
          dir / fmt::format("v{}-{}", max_per_batch, static_cast<int>(order)),
          kCategoricalPipeline);
      CHECK(AlertFacts(run.delivered.alerts) == alerts);
    }
  }
  SECTION("restarted from the checkpoint halfway") {
    // The first half of every partition, then a new executor on the same checkpoint reads the
    // rest: the restored drift state (open windows, warm-up samples, category cells) goes on
    // as if nothing had stopped.
    PartitionedData half;
    for (const auto& partition : data.partitions) {
      half.partitions.emplace_back(partition.begin(),
                                   partition.begin() + static_cast<std::ptrdiff_t>(partition.size() / 2));
    }
    const std::string checkpoint = dir / "restarted";
    const RunResult first = RunQuery(half, 5000, ReadOrder::kInterleaved, checkpoint,
                                     kCategoricalPipeline);
    const RunResult second = RunQuery(data, 5000, ReadOrder::kInterleaved, checkpoint,
                                      kCategoricalPipeline);
    std::vector<std::string> both = first.delivered.alerts;
    both.insert(both.end(), second.delivered.alerts.begin(), second.delivered.alerts.end());
    CHECK(AlertFacts(both) == alerts);
    CHECK(both.size() == reference.delivered.alerts.size());
  }
}

// The state keys of the drift series a pipeline's first batch creates (what the checkpoint holds).
std::set<std::string> DriftSeriesKeys(std::string_view policy) {
  auto spec = ParsePipeline(fmt::format(R"(
name: quality
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: device, type: string}}
  - {{name: amount, type: double, nullable: false}}
source:
  format: file
  options: {{path: /nonexistent}}
  malformed: {{policy: {}}}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [device, amount]
sinks:
  - {{format: console, stream: alerts}}
)",
                                        policy),
                            "quality.yaml", LoadOptions{.catalog = &ConnectorDeclarations()});
  REQUIRE(spec);
  auto stage = DriftStage::Create(*spec);
  REQUIRE(stage);
  InputChunk chunk;
  chunk.Append(R"({"model_id":"m","device":"ios","amount":1.5})", RecordPosition{0, 0});
  chunk.Seal();
  RecordBatch batch;
  batch.Reset(spec->schema);
  JsonDecoder decoder(spec->schema, spec->source.malformed);
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  RowTimes times;
  times.event_us.assign(batch.num_rows, INT64_MIN);
  times.late_before.assign(batch.num_rows, INT64_MIN);
  BatchOutput output;
  (*stage)->Process(batch, times, output);
  StateChanges changes;
  StageProgress progress;
  (*stage)->Finish(BatchContext{}, output, changes, progress);
  // The series table ("drift/%series": the names every model's state refers to), less the
  // error series.
  std::set<std::string> keys;
  for (const auto& [key, value] : changes.puts) {
    if (key != "drift/%series") continue;
    drift::ByteReader r(value);
    r.U8();  // version
    for (uint64_t n = r.Varint(); n > 0 && !r.failed(); --n) {
      std::string name(r.Bytes());
      if (name != DriftMonitor::kErrorSeries) keys.insert(std::move(name));
    }
    REQUIRE(!r.failed());
  }
  return keys;
}

TEST_CASE("data-quality series exist where they can see something", "[executor][categorical]") {
  // A nullable column has a missing-value series, a non-nullable one cannot be null in a row;
  // malformed records are rows (and so counted per model) under the permissive policy only.
  CHECK(DriftSeriesKeys("permissive") ==
        std::set<std::string>{"amount", "device", "device:missing", "malformed"});
  CHECK(DriftSeriesKeys("drop") == std::set<std::string>{"amount", "device", "device:missing"});
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
