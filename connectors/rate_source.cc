// The `rate` source: synthetic rows at a fixed rate, like Spark's rate source, plus the
// inference-log generator mode that demos and tests use to inject drift.
//
// Row g (global, counting across partitions) belongs to partition g % numPartitions as its row
// g / numPartitions, has event time start + g / rowsPerSecond, and is a pure function of the
// seed and g. The start time is chosen at the first start and kept in the offsets
// ("startTimeMs"), so a restart continues the same event-time timeline and a replay of a range
// produces identical bytes.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "connectors/connector_factories.h"
#include "connectors/inference_generator.h"
#include "engine/json_writer.h"
#include "engine/wall_clock.h"

namespace driftd {

namespace {

constexpr std::string_view kStartTimeKey = "startTimeMs";
constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

std::string PartitionKey(int partition) { return fmt::format("rate-{}", partition); }

// Rows of partition p among the first `global_rows` rows.
int64_t RowsOfPartition(uint64_t global_rows, int partitions, int partition) {
  auto p = static_cast<uint64_t>(partition);
  if (global_rows <= p) return 0;
  return static_cast<int64_t>((global_rows - p - 1) / static_cast<uint64_t>(partitions) + 1);
}

// The source's options as BindRateSource made them (their defaults are declared in
// RateSourceDecl only).
struct RateOptions {
  int64_t rows_per_second = 0;
  int partitions = 0;
  int64_t max_rows_per_trigger = 0;
  int64_t total_rows = 0;
  bool real_time = false;
  int64_t start_time_ms = 0;
  bool inference = false;
  InferenceGeneratorOptions generator;
};

class RateReader final : public SourceReader {
 public:
  RateReader(const RateOptions& options, const InferenceGenerator* generator, uint64_t begin,
             uint64_t end)
      : options_(options), generator_(generator), next_(begin), end_(end) {}

  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override {
    const auto partitions = static_cast<uint64_t>(options_.partitions);
    while (next_ < end_ && chunk.byte_size() < max_bytes) {
      scratch_.clear();
      int64_t event_time_us = 0;
      if (generator_ != nullptr) {
        generator_->AppendRecord(next_, scratch_);
        event_time_us = generator_->EventTimeUs(next_);
      } else {
        event_time_us = EventTimeUs(next_);
        scratch_ += "{\"timestamp\":\"";
        AppendTimestampUs(scratch_, event_time_us);
        fmt::format_to(std::back_inserter(scratch_), "\",\"value\":{}}}", next_);
      }
      chunk.Append(scratch_,
                   RecordPosition{static_cast<uint32_t>(next_ % partitions),
                                  static_cast<int64_t>(next_ / partitions)},
                   event_time_us);
      ++next_;
    }
    return next_ < end_;
  }

 private:
  int64_t EventTimeUs(uint64_t row) const {
    const auto rate = static_cast<uint64_t>(options_.rows_per_second);
    uint64_t offset_us = (row / rate) * 1'000'000 + (row % rate) * 1'000'000 / rate;
    return options_.start_time_ms * 1000 + static_cast<int64_t>(offset_us);
  }

  const RateOptions& options_;
  const InferenceGenerator* generator_;
  uint64_t next_;
  uint64_t end_;
  std::string scratch_;
};

class RateSource final : public Source {
 public:
  explicit RateSource(RateOptions options) : options_(std::move(options)) {}

  Status Start(const SourceOffsets& committed) override {
    started_at_ = std::chrono::steady_clock::now();
    if (committed.empty()) {
      if (options_.start_time_ms == 0) {
        options_.start_time_ms = NowMs();
      }
      base_rows_ = 0;
    } else {
      auto start = committed.find(std::string(kStartTimeKey));
      if (start == committed.end()) {
        return MakeError(ErrorCode::kIncompatible,
                         "the checkpoint's rate offsets have no {} entry; they were not written "
                         "by a rate source",
                         kStartTimeKey);
      }
      options_.start_time_ms = start->second;
      base_rows_ = GlobalRows(committed);
      // Offsets must describe a prefix of rows for this partition count.
      for (const auto& [key, rows] : committed) {
        if (key == kStartTimeKey) continue;
        int partition = -1;
        if (key.rfind("rate-", 0) == 0) partition = std::atoi(key.c_str() + 5);
        if (partition < 0 || partition >= options_.partitions ||
            rows != RowsOfPartition(base_rows_, options_.partitions, partition)) {
          return MakeError(ErrorCode::kIncompatible,
                           "the checkpoint's rate offsets {} do not match numPartitions {}; "
                           "use a new checkpointLocation after changing numPartitions",
                           OffsetsToJson(committed), options_.partitions);
        }
      }
    }
    if (options_.inference) {
      InferenceGeneratorOptions generator_options = options_.generator;
      generator_options.start_time_ms = options_.start_time_ms;
      generator_options.rows_per_second = options_.rows_per_second;
      auto generator = InferenceGenerator::Create(std::move(generator_options));
      if (!generator) return tl::unexpected(generator.error());
      generator_.emplace(std::move(*generator));
    }
    return Ok();
  }

  Result<SourceOffsets> InitialOffsets() override { return OffsetsFor(0); }

  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    uint64_t begin = GlobalRows(start);
    uint64_t end = std::min(Due(), begin + static_cast<uint64_t>(options_.max_rows_per_trigger));
    if (end <= begin) return start;
    return OffsetsFor(end);
  }

  Status FreezeAvailable() override {
    if (!options_.real_time && options_.total_rows == 0) {
      return MakeError(ErrorCode::kConfig,
                       "the rate source with realTime: false has no end; set totalRows to use "
                       "the availableNow trigger");
    }
    frozen_due_ = Due();
    return Ok();
  }

  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    return std::make_unique<RateReader>(options_, generator_ ? &*generator_ : nullptr,
                                        GlobalRows(start), GlobalRows(end));
  }

  std::vector<PartitionLag> Lag(const SourceOffsets& position) override {
    uint64_t due = Due();
    std::vector<PartitionLag> lags;
    for (int p = 0; p < options_.partitions; ++p) {
      auto it = position.find(PartitionKey(p));
      int64_t committed = it == position.end() ? 0 : it->second;
      int64_t latest = due == kUnbounded ? committed : RowsOfPartition(due, options_.partitions, p);
      lags.push_back({PartitionKey(p), committed, std::max(latest, committed)});
    }
    return lags;
  }

  std::string DescribePosition(const RecordPosition& position) const override {
    return fmt::format("rate partition {} row {}", position.partition, position.offset);
  }

  std::string Describe() const override {
    return fmt::format("RateSource[rowsPerSecond={}, numPartitions={}, mode={}]",
                       options_.rows_per_second, options_.partitions,
                       options_.inference ? "inference" : "rate");
  }

 private:
  // Rows produced so far across partitions; entries other than rate-<p> are ignored.
  uint64_t GlobalRows(const SourceOffsets& offsets) const {
    uint64_t rows = 0;
    for (int p = 0; p < options_.partitions; ++p) {
      auto it = offsets.find(PartitionKey(p));
      if (it != offsets.end() && it->second > 0) rows += static_cast<uint64_t>(it->second);
    }
    return rows;
  }

  SourceOffsets OffsetsFor(uint64_t global_rows) const {
    SourceOffsets offsets;
    for (int p = 0; p < options_.partitions; ++p) {
      offsets[PartitionKey(p)] = RowsOfPartition(global_rows, options_.partitions, p);
    }
    offsets[std::string(kStartTimeKey)] = options_.start_time_ms;
    return offsets;
  }

  // Global rows that exist now: by monotonic time since Start (continuing from the committed
  // rows after a restart, so a long downtime does not become a burst), capped by totalRows.
  uint64_t Due() const {
    if (frozen_due_) return *frozen_due_;
    uint64_t due = kUnbounded;
    if (options_.real_time) {
      auto elapsed_us = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - started_at_)
                            .count();
      auto rate = static_cast<uint64_t>(options_.rows_per_second);
      auto elapsed = static_cast<uint64_t>(std::max<int64_t>(elapsed_us, 0));
      due = base_rows_ + (elapsed / 1'000'000) * rate + (elapsed % 1'000'000) * rate / 1'000'000;
    }
    if (options_.total_rows > 0) due = std::min(due, static_cast<uint64_t>(options_.total_rows));
    return due;
  }

  RateOptions options_;
  std::optional<InferenceGenerator> generator_;
  std::chrono::steady_clock::time_point started_at_;
  uint64_t base_rows_ = 0;
  std::optional<uint64_t> frozen_due_;
};

Bound<RateOptions> BindRateSource(const PipelineSpec&, const SourceSpec&, const Options& o);

}  // namespace

ConnectorDecl RateSourceDecl() {
  ConnectorDecl decl;
  decl.format = "rate";
  decl.role = ConnectorRole::kSource;
  decl.doc =
      "Synthetic rows at a fixed rate, like Spark's rate source: `{\"timestamp\": ..., "
      "\"value\": n}`. With `mode: inference` it writes inference logs (`model_id`, "
      "`event_time`, `feature_vector`, `prediction`, `ground_truth`) with optional injected "
      "drift, for demos and tests. Row n has event time start + n / rowsPerSecond and is a pure "
      "function of the seed and n, so replays are identical; the start time is fixed at the "
      "first start and kept in the checkpoint, so a restart continues the same timeline. "
      "Offsets: `rate-<p>` = rows produced by partition p, plus `startTimeMs`.";
  decl.options = {
      OptionDecl{"rowsPerSecond", OptionType::kInt, "1", "Rows per second, across all partitions."}
          .Between(1, 1e9),
      OptionDecl{"numPartitions", OptionType::kInt, "1",
                 "Partitions; row n goes to partition n % numPartitions."}
          .Between(1, 4096),
      OptionDecl{"maxRowsPerTrigger", OptionType::kInt, "100000", "Upper bound on rows per batch."}
          .AtLeast(1),
      OptionDecl{"totalRows", OptionType::kInt, "0",
                 "Rows after which the source ends (0: unbounded). Needed for availableNow with "
                 "realTime false."}
          .AtLeast(0),
      {"realTime", OptionType::kBool, "true",
       "true: rows become due as wall time passes (monotonic clock, from the committed row "
       "after a restart). false: all rows are due at once, each batch takes "
       "maxRowsPerTrigger (replays, tests, benchmarks)."},
      OptionDecl{"startTimeMs", OptionType::kInt, "0",
                 "Event time of row 0 on a first start, milliseconds since the Unix epoch (0: "
                 "the wall clock at the first start)."}
          .AtLeast(0),
      {"mode",
       OptionType::kEnum,
       "rate",
       "`rate`: Spark's timestamp/value rows. `inference`: inference-log records.",
       false,
       {"rate", "inference"}},
      {"models", OptionType::kInt, "8", "inference: number of models, model-0 .. model-<n-1>."},
      {"features", OptionType::kInt, "8", "inference: length of feature_vector."},
      {"seed", OptionType::kInt, "42",
       "inference: seed of every draw and of each model's per-feature mean and sigma."},
      {"labels", OptionType::kDouble, "1.0",
       "inference: fraction of rows that carry ground_truth (others have null)."},
      {"drift", OptionType::kString, "",
       "inference: drift scenarios separated by ';', each one of \"model-<m> feature <f> "
       "shifts by <x> sigma after <duration>\", \"model-<m> feature <f> scales by <x> after "
       "<duration>\", \"model-<m> prediction shifts by <x> sigma after <duration>\", "
       "\"model-<m> prediction scales by <x> after <duration>\"; \"after\" is event time since "
       "the start time."},
  };
  BindSource<RateOptions>(decl, &BindRateSource, [](const PipelineSpec&, RateOptions options) {
    return Result<std::unique_ptr<Source>>(std::make_unique<RateSource>(std::move(options)));
  });
  return decl;
}

namespace {

Bound<RateOptions> BindRateSource(const PipelineSpec&, const SourceSpec&, const Options& o) {
  RateOptions options;
  options.rows_per_second = o.GetInt("rowsPerSecond");
  options.partitions = static_cast<int>(o.GetInt("numPartitions"));
  options.max_rows_per_trigger = o.GetInt("maxRowsPerTrigger");
  options.total_rows = o.GetInt("totalRows");
  options.real_time = o.GetBool("realTime");
  options.start_time_ms = o.GetInt("startTimeMs");
  options.inference = o.GetString("mode") == "inference";
  if (!options.inference && !o.GetString("drift").empty()) {
    return tl::unexpected(OptionProblem{"drift", "drift scenarios need mode: inference"});
  }
  if (options.inference) {
    InferenceGeneratorOptions& g = options.generator;
    g.models = static_cast<int>(o.GetInt("models"));
    g.features = static_cast<int>(o.GetInt("features"));
    g.seed = static_cast<uint64_t>(o.GetInt("seed"));
    g.labels = o.GetDouble("labels");
    g.rows_per_second = options.rows_per_second;
    auto drift = ParseDriftScenarios(o.GetString("drift"));
    if (!drift) return tl::unexpected(OptionProblem{"drift", drift.error().message()});
    g.drift = std::move(*drift);
    // Validates counts and scenario targets now, so a bad pipeline fails at load.
    auto check = InferenceGenerator::Create(g);
    if (!check) return tl::unexpected(OptionProblem{"", check.error().message()});
  }
  return options;
}

}  // namespace

Result<std::unique_ptr<Source>> CreateRateSource(const PipelineSpec& pipeline) {
  static const ConnectorDecl decl = RateSourceDecl();
  return decl.create_source(pipeline);
}

}  // namespace driftd
