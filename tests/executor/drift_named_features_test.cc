// The drift stage on inference logs as they really come: named features in maps (each key a
// series, found as records arrive), segments (drift per model and segment), string and null
// values handed to the categorical and missing-value seams, the caps on keys and segments per
// model, restarts from the stage's own state, and checkpoints written before segments.
#include <catch2/catch.hpp>
#include <simdjson.h>


#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/drift_stage.h"
#include "engine/json_decoder.h"

namespace driftd {
namespace {

constexpr int64_t kT0Us = 1'700'000'000'000'000;

// Logs of two models in three countries and two channels: four named numeric features (one of
// them null one time in twenty), a categorical one, listed in a random order per record
// (`order_seed`). From record `shift_from` on, fraud-v7's amount in DE moves by 2 sd.
std::vector<std::string> NamedFeatureLogs(size_t count, uint64_t order_seed,
                                          size_t shift_from = SIZE_MAX) {
  std::mt19937_64 values(7);
  std::mt19937_64 order(order_seed);
  std::normal_distribution<double> normal(0, 1);
  const char* const models[] = {"fraud-v7", "churn-v2"};
  const char* const countries[] = {"DE", "FR", "US"};
  const char* const channels[] = {"app", "web"};
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    const char* model = models[i % 2];
    const char* country = countries[(i / 2) % 3];
    const char* channel = channels[(i / 6) % 2];
    double amount = 50 + 10 * normal(values);
    if (i >= shift_from && i % 2 == 0 && (i / 2) % 3 == 0) amount += 20;
    const double score = normal(values);
    const double age = 100 + 20 * normal(values);
    const double tenure = 3 + normal(values);
    const bool age_null = values() % 20 == 0;
    const char* device = values() % 3 == 0 ? "android" : "ios";
    std::vector<std::string> features = {
        fmt::format("\"amount\":{}", amount), fmt::format("\"score\":{}", score),
        age_null ? std::string("\"age_days\":null") : fmt::format("\"age_days\":{}", age),
        fmt::format("\"tenure\":{}", tenure)};
    std::shuffle(features.begin(), features.end(), order);
    out.push_back(fmt::format(
        R"({{"model_id":"{}","event_time":{},"segment":{{"country":"{}","channel":"{}"}},)"
        R"("features":{{{}}},"labels":{{"device":"{}"}}}})",
        model, (kT0Us + static_cast<int64_t>(i) * 10'000) / 1000, country, channel,
        fmt::join(features, ","), device));
  }
  return out;
}

std::string Pipeline(std::string_view group_by, std::string_view extra_drift = "") {
  return fmt::format(R"(
name: named
schema:
  - {{name: model_id, type: string}}
  - {{name: event_time, type: timestamp}}
  - name: segment
    type: struct<country:string, channel:string>
  - name: features
    type: map<string,double>
  - name: labels
    type: map<string,string>
source:
  format: file
  options: {{path: /tmp/in}}
query:
  groupBy: {}
  aggregates: [count]
drift:
  series: [features, labels, segment.channel]
  baseline: {{type: warmup, records: 1000}}
  windowRecords: 500
  detectors: [{{type: mean_shift}}, {{type: psi}}]
{}
sinks:
  - {{name: alerts, format: console, stream: alerts}}
)",
                     group_by, extra_drift);
}

PipelineSpec SpecOf(const std::string& yaml) {
  auto spec = ParsePipeline(yaml, "named.yaml",
                            LoadOptions{.catalog = &ConnectorDeclarations()});
  if (!spec) FAIL(FormatProblems("named.yaml", spec.error()));
  return *spec;
}

// A drift stage run batch by batch, its state kept as the checkpoint would keep it.
struct StageRun {
  explicit StageRun(const PipelineSpec& pipeline) : spec(pipeline) {
    auto created = DriftStage::Create(spec);
    REQUIRE(created);
    stage = std::move(*created);
  }

  void Feed(const std::vector<std::string>& records, size_t begin, size_t end) {
    JsonDecoder decoder(spec.schema, MalformedSpec{});
    InputChunk chunk;
    for (size_t i = begin; i < end; ++i) chunk.Append(records[i], {0, static_cast<int64_t>(i)});
    chunk.Seal();
    RecordBatch batch;
    batch.Reset(spec.schema);
    REQUIRE(decoder.Decode(chunk, batch, nullptr));
    RowTimes times;
    const int time_column = spec.schema.IndexOf("event_time");
    for (size_t row = 0; row < batch.num_rows; ++row) {
      times.event_us.push_back(
          time_column < 0 ? INT64_MIN : batch.columns[static_cast<size_t>(time_column)].i64[row]);
      times.late_before.push_back(INT64_MIN);
    }
    BatchOutput output;
    stage->Process(batch, times, output);
    BatchContext context;
    context.batch_id = batch_id++;
    context.now_ms = 1'700'000'000'000;
    StateChanges changes;
    StageProgress batch_progress;
    stage->Finish(context, output, changes, batch_progress);
    for (const std::string& row : output.alerts.rows) alerts.push_back(row);
    for (auto& [key, value] : changes.puts) state[key] = value;
    for (const std::string& key : changes.deletes) state.erase(key);
    progress.drift_values_over_key_cap += batch_progress.drift_values_over_key_cap;
    progress.drift_rows_over_segment_cap += batch_progress.drift_rows_over_segment_cap;
  }

  void FeedAll(const std::vector<std::string>& records, size_t batch_size, size_t begin = 0,
               size_t end = SIZE_MAX) {
    end = std::min(end, records.size());
    for (size_t at = begin; at < end; at += batch_size) {
      Feed(records, at, std::min(end, at + batch_size));
    }
  }

  // A new stage restored from this one's state, the keys in a shuffled order.
  std::unique_ptr<StageRun> Restarted(const PipelineSpec& pipeline) const {
    auto next = std::make_unique<StageRun>(pipeline);
    std::vector<std::pair<std::string, std::string>> entries(state.begin(), state.end());
    // The layout first, as a checkpoint scan finds it; the rest in any order.
    std::stable_partition(entries.begin(), entries.end(),
                          [](const auto& entry) { return entry.first == "drift-layout"; });
    std::shuffle(entries.begin() + 1, entries.end(), std::mt19937_64(3));
    for (const auto& [key, value] : entries) REQUIRE(next->stage->Restore(key, value));
    REQUIRE(next->stage->FinishRestore());
    next->batch_id = batch_id;
    next->state = state;
    return next;
  }

  PipelineSpec spec;
  std::unique_ptr<DriftStage> stage;
  std::vector<std::string> alerts;
  std::map<std::string, std::string> state;
  StageProgress progress;
  int64_t batch_id = 0;
};

// alert id, level, model, segment, series, detector, window start.
std::set<std::string> AlertFacts(const std::vector<std::string>& alerts) {
  simdjson::dom::parser parser;
  std::set<std::string> facts;
  for (const std::string& row : alerts) {
    simdjson::dom::element alert = parser.parse(row);
    std::string_view segment;
    if (alert["segment"].get(segment) != simdjson::SUCCESS) segment = "-";
    facts.insert(fmt::format("{} {} {} {} {} {} start_record={}",
                             std::string_view(alert["alert_id"]), std::string_view(alert["level"]),
                             std::string_view(alert["model"]), segment,
                             std::string_view(alert["series"]), std::string_view(alert["detector"]),
                             int64_t(alert["window"]["start_record"])));
  }
  return facts;
}

std::vector<std::string> SeriesNames(const DriftStage& stage) {
  std::vector<std::string> names;
  for (const auto& series : stage.SeriesValueCounts()) names.push_back(series.series);
  return names;
}

TEST_CASE("map keys become series named column.key, in name order whatever order records "
          "list them",
          "[drift][types][determinism]") {
  const PipelineSpec spec = SpecOf(Pipeline("[model_id]"));
  StageRun a(spec);
  a.FeedAll(NamedFeatureLogs(6000, 1), 1000);
  StageRun b(spec);
  b.FeedAll(NamedFeatureLogs(6000, 2), 77);
  const std::vector<std::string> expected = {"features.age_days", "features.amount",
                                             "features.score",    "features.tenure",
                                             "labels.device",     "segment.channel"};
  CHECK(SeriesNames(*a.stage) == expected);
  CHECK(SeriesNames(*b.stage) == expected);
  CHECK(a.state.at("drift-layout") == b.state.at("drift-layout"));
  // Same values, other key orders and batches: the same series records and baselines, key by
  // key (the series table, model records and warmup segments refer to series by the order
  // their names first reached the checkpoint, and segments are cut per batch).
  for (const auto& [key, value] : a.state) {
    if (key.starts_with("drift-eval/")) continue;  // the batch that evaluated differs
    if (key.starts_with("drift/") &&
        (key == "drift/%series" || key.find('/', 6) == std::string::npos ||
         key.find("/%w") != std::string::npos)) {
      continue;
    }
    INFO(key);
    REQUIRE(b.state.count(key) == 1);
    CHECK(b.state.at(key) == value);
  }
}

TEST_CASE("a shift in one segment alerts naming the model and the segment, the other segments "
          "stay quiet, and the alerts are the same whatever the batches, key orders and a "
          "restart",
          "[drift][segments][determinism]") {
  const PipelineSpec spec = SpecOf(Pipeline("[model_id, segment.country]"));
  const std::vector<std::string> logs = NamedFeatureLogs(36000, 1, 18000);
  StageRun reference(spec);
  reference.FeedAll(logs, 1000);
  const std::set<std::string> facts = AlertFacts(reference.alerts);
  REQUIRE_FALSE(facts.empty());
  for (const std::string& fact : facts) {
    INFO(fact);
    CHECK(fact.find(" fraud-v7 segment.country=DE features.amount ") != std::string::npos);
  }
  simdjson::dom::parser parser;
  const simdjson::dom::element first = parser.parse(reference.alerts.front());
  CHECK(std::string_view(first["model"]) == "fraud-v7");
  CHECK(std::string_view(first["segment"]) == "segment.country=DE");

  SECTION("other batch sizes and key orders") {
    StageRun other(spec);
    other.FeedAll(NamedFeatureLogs(36000, 9, 18000), 313);
    CHECK(AlertFacts(other.alerts) == facts);
  }
  SECTION("a restart halfway, from the stage's state restored in any order") {
    const std::vector<std::string> reordered = NamedFeatureLogs(36000, 5, 18000);
    StageRun first_half(spec);
    first_half.FeedAll(reordered, 500, 0, 20000);
    auto second_half = first_half.Restarted(spec);
    second_half->FeedAll(reordered, 700, 20000);
    std::vector<std::string> all = first_half.alerts;
    all.insert(all.end(), second_half->alerts.begin(), second_half->alerts.end());
    CHECK(AlertFacts(all) == facts);
  }
}

TEST_CASE("alert ids name the segment only when drift has segments", "[drift][segments]") {
  const std::vector<std::string> logs = NamedFeatureLogs(24000, 1, 12000);
  StageRun per_model(SpecOf(Pipeline("[model_id]")));
  per_model.FeedAll(logs, 1000);
  StageRun off(SpecOf(Pipeline("[model_id, segment.country]", "  segmentBy: []")));
  off.FeedAll(logs, 1000);
  StageRun segmented(SpecOf(Pipeline("[model_id]", "  segmentBy: [segment.country]")));
  segmented.FeedAll(logs, 1000);
  REQUIRE_FALSE(per_model.alerts.empty());
  CHECK(AlertFacts(off.alerts) == AlertFacts(per_model.alerts));
  REQUIRE_FALSE(segmented.alerts.empty());
  std::set<std::string> per_model_ids;
  for (const std::string& fact : AlertFacts(per_model.alerts)) {
    per_model_ids.insert(fact.substr(0, 16));
  }
  for (const std::string& fact : AlertFacts(segmented.alerts)) {
    CHECK(per_model_ids.count(fact.substr(0, 16)) == 0);
  }
  // Without segments the state keys are the model's own; with them they name the segment.
  CHECK(per_model.state.count("drift/fraud-v7/features.amount") == 1);
  CHECK(segmented.state.count("drift/fraud-v7\x1f" "DE/features.amount") == 1);
}

TEST_CASE("null values go to the missing-value seam and strings to the categorical seam, per "
          "series",
          "[drift][types]") {
  const PipelineSpec spec = SpecOf(Pipeline("[model_id]"));
  const std::vector<std::string> logs = NamedFeatureLogs(3000, 1);
  StageRun run(spec);
  run.FeedAll(logs, 1000);
  int64_t nulls = 0;
  for (const std::string& record : logs) nulls += record.find("\"age_days\":null") != std::string::npos;
  REQUIRE(nulls > 50);
  std::map<std::string, DriftStage::SeriesValues> by_name;
  for (const auto& series : run.stage->SeriesValueCounts()) by_name[series.series] = series;
  CHECK(by_name.at("features.age_days").missing == nulls);
  CHECK_FALSE(by_name.at("features.age_days").categorical);
  CHECK(by_name.at("features.amount").missing == 0);
  CHECK(by_name.at("labels.device").categorical);
  CHECK(by_name.at("labels.device").categories == 3000);
  CHECK(by_name.at("segment.channel").categorical);
  CHECK(by_name.at("segment.channel").categories == 3000);
}

TEST_CASE("a model's keys and segments are capped: the first by name are kept, the rest "
          "counted",
          "[drift][caps]") {
  const std::vector<std::string> logs = NamedFeatureLogs(3000, 1);
  SECTION("keys") {
    StageRun run(SpecOf(Pipeline("[model_id]", "  maxKeysPerModel: 2")));
    run.FeedAll(logs, 1000);
    const std::vector<std::string> names = SeriesNames(*run.stage);
    CHECK(names == std::vector<std::string>{"features.age_days", "features.amount",
                                            "segment.channel"});
    // score and tenure of every record, and the labels map's device (each model had its 2).
    CHECK(run.progress.drift_values_over_key_cap == 3000 * 3);
    CHECK(run.stage->Counts().values_over_key_cap == 3000 * 3);
    // Each model's series: its two keys, segment.channel and the error series.
    for (const auto& model : run.stage->ModelStats()) CHECK(model.series == 4);
  }
  SECTION("segments") {
    StageRun run(SpecOf(Pipeline("[model_id, segment.country]", "  maxSegmentsPerModel: 2")));
    run.FeedAll(logs, 1000);
    std::set<std::string> segments;
    for (const auto& model : run.stage->ModelStats()) segments.insert(model.model + " " + model.segment);
    CHECK(segments == std::set<std::string>{"churn-v2 segment.country=DE",
                                            "churn-v2 segment.country=FR",
                                            "fraud-v7 segment.country=DE",
                                            "fraud-v7 segment.country=FR"});
    CHECK(run.progress.drift_rows_over_segment_cap == 1000);  // every US row
    SECTION("and the caps hold after a restart") {
      auto restarted = run.Restarted(run.spec);
      restarted->FeedAll(NamedFeatureLogs(600, 3), 600);
      CHECK(restarted->progress.drift_rows_over_segment_cap == 200);
    }
  }
}

TEST_CASE("a checkpoint written before segments still loads: drift stays per model with its "
          "alert ids, unless the file asks for other segments",
          "[drift][segments][checkpoint]") {
  // The state of the first half, with the layout in the form earlier versions wrote (the
  // array widths: no map keys, no segments). Its map series then are the ones the data brings.
  const PipelineSpec numeric = SpecOf(R"(
name: named
schema:
  - {name: model_id, type: string}
  - {name: region, type: string}
  - {name: x, type: double}
  - {name: v, type: array<double>}
source: {format: file, options: {path: /tmp/in}}
query: {groupBy: [model_id], aggregates: [count]}
drift:
  series: [x, v]
  baseline: {type: warmup, records: 1000}
  windowRecords: 500
sinks: [{name: alerts, format: console, stream: alerts}]
)");
  std::vector<std::string> records;
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0, 1);
  for (int i = 0; i < 20000; ++i) {
    const double shift = i >= 10000 && i % 2 == 0 ? 1.0 : 0.0;
    records.push_back(fmt::format(R"({{"model_id":"m{}","region":"{}","x":{},"v":[{},{}]}})",
                                  i % 2, i % 4 < 2 ? "eu" : "us", normal(rng) + shift,
                                  normal(rng), normal(rng)));
  }
  StageRun whole(numeric);
  whole.FeedAll(records, 1000);
  REQUIRE_FALSE(whole.alerts.empty());
  StageRun old(numeric);
  old.FeedAll(records, 1000, 0, 10000);
  old.state["drift-layout"] = "1,2";  // what the earlier version wrote for [x, v]

  // groupBy [model_id, region] now means drift per (model, region): the old state keeps
  // drift per model, and the same alerts (ids included) as if nothing had changed.
  PipelineSpec grouped = numeric;
  grouped.query.group_by = {"model_id", "region"};
  grouped.drift.segment_by = {"region"};
  auto continued = old.Restarted(grouped);
  continued->FeedAll(records, 1000, 10000);
  std::vector<std::string> all = old.alerts;
  all.insert(all.end(), continued->alerts.begin(), continued->alerts.end());
  CHECK(AlertFacts(all) == AlertFacts(whole.alerts));
  // Its restored evaluations name no segment either.
  for (const PackedEvaluation& evaluation : old.Restarted(grouped)->stage->LatestEvaluations()) {
    CHECK(evaluation.segment().empty());
    CHECK(evaluation.Unpack()->segment.empty());
  }

  // Segments the file names cannot be read from per-model state.
  PipelineSpec explicit_segments = grouped;
  explicit_segments.drift.segment_by_given = true;
  auto refused = DriftStage::Create(explicit_segments);
  REQUIRE(refused);
  const Status restored = (*refused)->Restore("drift-layout", "1,2");
  REQUIRE_FALSE(restored);
  CHECK(restored.error().code() == ErrorCode::kIncompatible);
  CHECK(restored.error().message().find("per model and segment of (none), the pipeline's per "
                                        "(region)") != std::string::npos);
}

}  // namespace
}  // namespace driftd

namespace driftd {
namespace {

TEST_CASE("reference statistics cover map features, and a file baseline of them catches a shift "
          "from the first window",
          "[drift][types][baseline]") {
  const PipelineSpec warmup = SpecOf(Pipeline("[model_id]"));
  std::string reference_records;
  for (const std::string& record : NamedFeatureLogs(6000, 1)) reference_records += record + "\n";
  // Categorical series have no reference statistics in this version: watch the numeric ones.
  PipelineSpec numeric = warmup;
  numeric.drift.series = {"features"};
  auto statistics = DriftStage::BuildReferenceStatistics(numeric, reference_records);
  REQUIRE(statistics);
  CHECK(statistics->find("\"features.amount\": {\"n\":3000,") != std::string::npos);
  CHECK(statistics->find("\"features.age_days\"") != std::string::npos);

  // The stage reads no file: the reference comes with the spec, as config/ reads it at load
  // (the path names it in messages only, and does not exist).
  PipelineSpec file = numeric;
  file.drift.baseline.kind = BaselineKind::kFile;
  file.drift.baseline.path = "/nonexistent/reference.json";
  file.drift.baseline.reference = std::make_shared<const std::string>(*statistics);
  StageRun run(file);
  // Every record shifted: fraud-v7's amount in DE from the first record on.
  run.FeedAll(NamedFeatureLogs(6000, 4, 0), 1000);
  REQUIRE_FALSE(run.alerts.empty());
  for (const std::string& fact : AlertFacts(run.alerts)) {
    INFO(fact);
    CHECK(fact.find(" fraud-v7 - features.amount ") != std::string::npos);
  }
  simdjson::dom::parser parser;
  // The first windows compare with the file's statistics (a warmup would take 1000 values):
  // the second window raises it, as hysteresis 2 asks.
  CHECK(int64_t(parser.parse(run.alerts.front())["window"]["start_record"]) == 500);

  // Statistics per model cannot serve drift per (model, segment).
  PipelineSpec segmented = file;
  segmented.drift.segment_by = {"segment.country"};
  auto refused = DriftStage::Create(segmented);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message().find("drift.baseline type file holds statistics per model") !=
        std::string::npos);
}

}  // namespace
}  // namespace driftd
