// The performance stage on its own: what it hands the status page and metrics (its evaluations)
// beside the performance stream: the judged accuracy with the window's other realized values,
// its coverage and the estimate of the same window with its band; the alert rows keep their
// shape.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <cmath>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "engine/drift/codec.h"
#include "engine/executor/join_pending.h"
#include "engine/executor/performance_stage.h"
#include "engine/executor/row_block.h"
#include "engine/string_hash.h"
#include "engine/json_decoder.h"

namespace driftd {
namespace {

constexpr int64_t kT0Ms = 1'795'946'400'000;

constexpr const char* kPipeline = R"(
name: stage
schema:
  - {name: request_id, type: string, nullable: false}
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: score, type: double}
source: {format: file, options: {path: /tmp/none}}
labels:
  source: {format: file, options: {path: /tmp/none}}
  schema:
    - {name: request_id, type: string}
    - {name: label, type: int}
    - {name: event_time, type: timestamp}
  key: request_id
  label: label
  within: 5 minutes
query:
  groupBy: [model_id]
  aggregates: [count]
  watermark: {column: event_time, delay: 0 seconds}
performance:
  prediction: score
  window: 10 minutes
  baselineWindows: 2
sinks:
  - {name: performance, format: console, stream: performance}
  - {name: alerts, format: console, stream: alerts}
)";

void Decode(const Schema& schema, const std::vector<std::string>& records, RecordBatch& batch,
            RowTimes& times) {
  JsonDecoder decoder(schema, MalformedSpec{});
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) chunk.Append(records[i], {0, int64_t(i)});
  chunk.Seal();
  batch.Reset(schema);
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  times.event_us.clear();
  times.late_before.clear();
  for (size_t row = 0; row < batch.num_rows; ++row) {
    times.event_us.push_back(batch.columns[2].i64[row]);
    times.late_before.push_back(INT64_MIN);
  }
}

// Feeds one row to the stage: a label (`value` its label) or a prediction (`value` its score) of
// `key` at `t_ms`, judged by its own partition's watermark `late_before_us`.
struct OneRow {
  bool label = false;
  std::string key;
  int64_t t_ms = 0;
  double value = 0;
  std::string model = "m0";
  int64_t late_before_us = INT64_MIN;
};
void Feed(PerformanceStage& stage, const PipelineSpec& spec, const OneRow& row,
          BatchOutput& output) {
  RecordBatch batch;
  RowTimes times;
  if (row.label) {
    Decode(spec.labels.schema,
           {fmt::format(R"({{"request_id":"{}","label":{},"event_time":{}}})", row.key,
                        int(row.value), row.t_ms)},
           batch, times);
  } else {
    Decode(spec.schema,
           {fmt::format(R"({{"request_id":"{}","model_id":"{}","event_time":{},"score":{}}})",
                        row.key, row.model, row.t_ms, row.value)},
           batch, times);
  }
  times.late_before[0] = row.late_before_us;
  if (row.label) {
    stage.ProcessLabels(batch, times);
  } else {
    stage.Process(batch, times, output);
  }
}

// Ends a batch at `watermark_us` (the next batch's too): the stage's counters, its state
// changes in `changes`.
StageProgress FinishAt(PerformanceStage& stage, int64_t watermark_us, BatchOutput& output,
                       StateChanges& changes) {
  BatchContext context;
  context.watermark_us = watermark_us;
  context.next_watermark_us = watermark_us;
  StageProgress progress;
  stage.Finish(context, output, changes, progress);
  return progress;
}

double Extra(const DetectorReading& reading, std::string_view name) {
  for (const auto& [key, value] : reading.extras) {
    if (key == name) return value;
  }
  return NAN;
}

TEST_CASE("the performance stage's evaluations carry the realized values and the estimate "
          "beside the judged accuracy",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  INFO((spec ? std::string() : FormatProblems("stage.yaml", spec.error())));
  REQUIRE(spec);
  auto stage = PerformanceStage::Create(*spec);
  REQUIRE(stage);
  std::mt19937_64 random(5);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<SharedEvaluation> evaluations;
  std::vector<std::string> alerts;
  // Five windows of 10 minutes, one prediction a second, each labelled 30 s later (calibrated).
  for (int minute = 0; minute < 60; ++minute) {
    std::vector<std::string> predictions;
    std::vector<std::string> labels;
    for (int s = 0; s < 60; ++s) {
      const int64_t t = kT0Ms + (minute * 60 + s) * 1000;
      const double score = uniform(random);
      const int label = uniform(random) < score ? 1 : 0;
      if (minute < 50) {
        predictions.push_back(fmt::format(
            R"({{"request_id":"r{}","model_id":"m","event_time":{},"score":{:.6f}}})", t, t,
            score));
        labels.push_back(fmt::format(R"({{"request_id":"r{}","label":{},"event_time":{}}})", t,
                                     label, t + 30'000));
      }
    }
    BatchOutput output;
    RecordBatch batch;
    RowTimes times;
    if (!predictions.empty()) {
      Decode(spec->schema, predictions, batch, times);
      (*stage)->Process(batch, times, output);
      Decode(spec->labels.schema, labels, batch, times);
      (*stage)->ProcessLabels(batch, times);
    }
    BatchContext context;
    context.batch_id = minute;
    context.watermark_us = (kT0Ms + (minute + 1) * 60'000) * 1000;
    context.next_watermark_us = context.watermark_us;
    StateChanges changes;
    StageProgress progress;
    (*stage)->Finish(context, output, changes, progress);
    const auto& last = (*stage)->last_evaluations();
    evaluations.insert(evaluations.end(), last.begin(), last.end());
    alerts.insert(alerts.end(), output.alerts.rows.begin(), output.alerts.rows.end());
  }
  int realized = 0;
  int estimated = 0;
  for (const SharedEvaluation& e : evaluations) {
    REQUIRE(e->detectors.size() == 1);
    const DetectorReading& r = e->detectors[0];
    INFO(e->series);
    if (e->series == "performance:accuracy") {
      ++realized;
      CHECK(Extra(r, "coverage") == 1.0);  // every prediction labelled
      for (const char* name : {"precision", "recall", "f1", "roc_auc", "ece"}) {
        CHECK(Extra(r, name) >= 0);
        CHECK(Extra(r, name) <= 1);
      }
      CHECK(Extra(r, "log_loss") > 0);
      // The same window's estimate and its band, beside the realized accuracy.
      CHECK(Extra(r, "estimated_low") < Extra(r, "estimated"));
      CHECK(Extra(r, "estimated") < Extra(r, "estimated_high"));
      CHECK(std::fabs(Extra(r, "estimated") - e->window_mean) < 0.1);
    } else if (e->series == "estimated:accuracy") {
      ++estimated;
      CHECK(Extra(r, "low") < r.statistic);
      CHECK(r.statistic < Extra(r, "high"));
      // Labels 30 s after their prediction: those of its first 570 seconds came before its
      // end (a label at the end itself may come after the watermark reached it).
      CHECK(Extra(r, "coverage_at_window_end") == Approx(570.0 / 600));
      CHECK(Extra(r, "f1") > 0);
    }
  }
  // Windows 2..4 are judged once estimated (at their end) and once realized (5 minutes later,
  // the bound; window 4's in the batch at minute 55).
  CHECK(estimated == 3);
  CHECK(realized == 3);
  for (const std::string& alert : alerts) CHECK(alert.find("estimated_low") == std::string::npos);
}


// Scaled out, a key's task joins copies of other tasks' predictions, which no model gate has
// seen: the join keeps state for query.maxModels models (and "(other)", the gate's overflow)
// itself, counts the predictions of the others, and after a restart from its state still takes
// the same models.
TEST_CASE("the labels' join keeps state for query.maxModels models, counts the predictions of "
          "others, and takes the same models after a restart",
          "[executor][labels][performance]") {
  std::string yaml = kPipeline;
  yaml.replace(yaml.find("  aggregates: [count]\n"), std::string("  aggregates: [count]\n").size(),
               "  aggregates: [count]\n  maxModels: 2\n");
  auto spec = ParsePipeline(yaml, "stage.yaml", LoadOptions{});
  INFO((spec ? std::string() : FormatProblems("stage.yaml", spec.error())));
  REQUIRE(spec);

  // Ten predictions (and their labels) of each of `models` in the minute starting at `minute`.
  auto feed = [&](PerformanceStage& stage, const std::vector<std::string>& models, int minute,
                  BatchOutput& output) {
    std::vector<std::string> predictions;
    std::vector<std::string> labels;
    for (int s = 0; s < 10; ++s) {
      for (const std::string& model : models) {
        const int64_t t = kT0Ms + (minute * 60 + s) * 1000;
        const std::string id = fmt::format("{}-{}", model, t);
        predictions.push_back(fmt::format(
            R"({{"request_id":"{}","model_id":"{}","event_time":{},"score":0.8}})", id, model, t));
        labels.push_back(
            fmt::format(R"({{"request_id":"{}","label":1,"event_time":{}}})", id, t + 1000));
      }
    }
    RecordBatch batch;
    RowTimes times;
    Decode(spec->schema, predictions, batch, times);
    stage.Process(batch, times, output);
    Decode(spec->labels.schema, labels, batch, times);
    stage.ProcessLabels(batch, times);
  };
  // A batch ending with the watermark at `minute`: the puts go into `state`.
  auto finish = [&](PerformanceStage& stage, int64_t batch_id, int minute, BatchOutput& output,
                    std::map<std::string, std::string>& state) {
    BatchContext context;
    context.batch_id = batch_id;
    context.watermark_us = (kT0Ms + minute * 60'000) * 1000;
    context.next_watermark_us = context.watermark_us;
    StateChanges changes;
    StageProgress progress;
    stage.Finish(context, output, changes, progress);
    for (auto& [key, value] : changes.puts) state[key] = value;
    for (const std::string& key : changes.deletes) state.erase(key);
  };
  auto models_in = [](const BatchOutput& output) {
    std::set<std::string> models;
    for (const std::string& row : output.performance.rows) {
      for (const char* model : {"m0", "m1", "m2", "m3", "m4", "(other)"}) {
        if (row.find(fmt::format(R"("model":"{}")", model)) != std::string::npos) {
          models.insert(model);
        }
      }
    }
    return models;
  };

  std::map<std::string, std::string> state;
  auto stage = PerformanceStage::Create(*spec);
  REQUIRE(stage);
  BatchOutput first;
  feed(**stage, {"m0", "m1", "m2", "m3", "(other)"}, 0, first);
  finish(**stage, 0, 30, first, state);  // the bound (5 minutes) and the window passed
  // Two models, m0 and m1, and "(other)", which the gate's overflow names and which takes no
  // place; the ten predictions of m2 and of m3 are counted.
  CHECK(models_in(first) == std::set<std::string>{"m0", "m1", "(other)"});
  CHECK((*stage)->counts().predictions_over_model_cap == 20);
  // m2's and m3's labels found no prediction: counted as such, as when the gate drops its rows.
  CHECK((*stage)->counts().labels_without_prediction == 20);

  // Restarted from its state: the same two models, whatever comes first now.
  auto restarted = PerformanceStage::Create(*spec);
  REQUIRE(restarted);
  for (const auto& [key, value] : state) REQUIRE((*restarted)->Restore(key, value));
  BatchOutput second;
  feed(**restarted, {"m4", "m3", "m1"}, 30, second);
  finish(**restarted, 1, 60, second, state);
  CHECK(models_in(second) == std::set<std::string>{"m1"});
  CHECK((*restarted)->counts().predictions_over_model_cap == 20);
}

// Scaled out, the task that joins a key hands the windows of a model another task owns to that
// task, and then nothing in its state names the model but the join's own record of the models
// it admitted: after a restart it still takes the same ones.
TEST_CASE("scaled out, the labels' join takes the same models after a restart once it handed "
          "their windows to their tasks",
          "[executor][labels][performance][scale-out]") {
  std::string yaml = kPipeline;
  yaml.replace(yaml.find("  aggregates: [count]\n"), std::string("  aggregates: [count]\n").size(),
               "  aggregates: [count]\n  maxModels: 2\n");
  auto spec = ParsePipeline(yaml, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  // Task 0 of 2 joins the keys; task 1 owns the models.
  std::vector<std::string> models;
  for (int i = 0; models.size() < 3; ++i) {
    const std::string model = fmt::format("m{}", i);
    if (StableHash(model) % 2 == 1) models.push_back(model);
  }
  int next_key = 0;
  auto feed = [&](PerformanceStage& stage, const std::vector<std::string>& which, int minute) {
    std::vector<std::string> predictions;
    std::vector<std::string> labels;
    for (int s = 0; s < 10; ++s) {
      for (const std::string& model : which) {
        std::string id;
        do {
          id = fmt::format("k{}", next_key++);
        } while (StableHash(id) % 2 != 0);
        const int64_t t = kT0Ms + (minute * 60 + s) * 1000;
        predictions.push_back(fmt::format(
            R"({{"request_id":"{}","model_id":"{}","event_time":{},"score":0.8}})", id, model, t));
        labels.push_back(
            fmt::format(R"({{"request_id":"{}","label":1,"event_time":{}}})", id, t + 1000));
      }
    }
    BatchOutput output;
    RecordBatch batch;
    RowTimes times;
    Decode(spec->schema, predictions, batch, times);
    stage.Process(batch, times, output);
    Decode(spec->labels.schema, labels, batch, times);
    stage.ProcessLabels(batch, times);
  };
  std::map<std::string, std::string> state;
  size_t messages = 0;
  auto finish = [&](PerformanceStage& stage, int minute) {
    BatchOutput output;
    StateChanges changes;
    StageProgress progress;
    BatchContext context;
    context.watermark_us = context.next_watermark_us = (kT0Ms + minute * 60'000) * 1000;
    stage.Finish(context, output, changes, progress);
    for (auto& [key, value] : changes.puts) state[key] = value;
    for (const std::string& key : changes.deletes) state.erase(key);
    messages += output.repartition.size();
  };
  auto make = [&] {
    auto stage = PerformanceStage::Create(*spec);
    REQUIRE(stage);
    (*stage)->SetTask(0, 2);
    for (const auto& [key, value] : state) REQUIRE((*stage)->Restore(key, value));
    return std::move(*stage);
  };
  auto stage = make();
  feed(*stage, models, 0);
  finish(*stage, 30);  // every pairing decided, every window handed over
  finish(*stage, 60);
  CHECK(stage->counts().predictions_over_model_cap == 10);  // the third model's
  CHECK(messages > 0);  // the windows went to task 1
  for (const auto& [key, value] : state) {
    INFO(key);
    CHECK((key[0] == 'a' || key[0] == 's' || key[0] == 'c'));
  }
  stage = make();
  feed(*stage, {models[2], models[0]}, 60);
  finish(*stage, 90);
  CHECK(stage->counts().predictions_over_model_cap == 10);
  CHECK(stage->counts().labelled == 10);
}

// Many windows handed over in one batch (a backlog read at once) go in several messages, each
// within a Kafka record's size, the last one saying how far the sender got.
TEST_CASE("the windows a task hands to another in one batch are split into messages of at most "
          "about 512 KiB",
          "[executor][labels][performance][scale-out]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  std::vector<std::unique_ptr<PerformanceStage>> stages;
  for (uint32_t id = 0; id < 2; ++id) {
    auto stage = PerformanceStage::Create(*spec);
    REQUIRE(stage);
    (*stage)->SetTask(id, 2);
    stages.push_back(std::move(*stage));
  }
  // 4,000 models task 1 owns, one prediction each, on keys task 0 joins.
  std::vector<std::string> predictions;
  int next_key = 0;
  int models = 0;
  for (int i = 0; models < 4000; ++i) {
    const std::string model = fmt::format("model-{}", i);
    if (StableHash(model) % 2 != 1) continue;
    ++models;
    std::string id;
    do {
      id = fmt::format("k{}", next_key++);
    } while (StableHash(id) % 2 != 0);
    predictions.push_back(fmt::format(
        R"({{"request_id":"{}","model_id":"{}","event_time":{},"score":0.8}})", id, model, kT0Ms));
  }
  RecordBatch batch;
  RowTimes times;
  Decode(spec->schema, predictions, batch, times);
  BatchOutput output;
  stages[0]->Process(batch, times, output);
  auto finish = [&](PerformanceStage& stage, BatchOutput& out) {
    StateChanges changes;
    StageProgress progress;
    BatchContext context;
    context.watermark_us = context.next_watermark_us = (kT0Ms + 60 * 60'000) * 1000;
    stage.Finish(context, out, changes, progress);
  };
  finish(*stages[0], output);
  REQUIRE(output.repartition.size() >= 3);
  for (const InternalRecord& record : output.repartition) {
    CHECK(record.partition == 1);
    CHECK(record.value.size() < (512 << 10) + 4096);
    auto body = TaskMessageBody(record.value);
    REQUIRE(body);
    REQUIRE(stages[1]->Receive(*body));
  }
  BatchOutput judged;
  finish(*stages[1], judged);
  // Each model's window, estimated and final ("labels_missing": no label came).
  CHECK(judged.performance.rows.size() == 2 * 4000);
}

TEST_CASE("a row behind the watermark joins nothing, so the join's outcomes do not depend on "
          "where batches end",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  const int64_t minute_us = 60'000'000;
  const int64_t t0_us = kT0Ms * 1000;
  // A row: a prediction or a label of key k at `minute`, and the watermark of its own partition
  // just before it (`late_before`, in minutes; INT64_MIN: none yet).
  struct Row {
    bool label;
    int minute;
    int64_t late_before_minute;
  };
  auto run = [&](const std::vector<std::pair<std::vector<Row>, int>>& batches) {
    auto stage = PerformanceStage::Create(*spec);
    REQUIRE(stage);
    BatchOutput output;
    for (const auto& [rows, watermark_minute] : batches) {
      for (const Row& row : rows) {
        Feed(**stage, *spec,
             {.label = row.label,
              .key = "k",
              .t_ms = kT0Ms + row.minute * 60'000,
              .value = row.label ? 1 : 0.8,
              .late_before_us = row.late_before_minute == INT64_MIN
                                    ? INT64_MIN
                                    : t0_us + row.late_before_minute * minute_us},
             output);
      }
      BatchContext context;
      context.watermark_us = t0_us + watermark_minute * minute_us;
      context.next_watermark_us = context.watermark_us;
      StateChanges changes;
      StageProgress progress;
      (*stage)->Finish(context, output, changes, progress);
    }
    return (*stage)->counts();
  };
  // A prediction at minute 5 (within: 5 minutes, so its deadline is minute 10), and its label at
  // minute 8 that comes when its own partition has passed minute 9: behind the watermark. With
  // the batch ending at minute 12 between them, the prediction is decided before the label
  // comes; without, the label would find it waiting.
  const Row prediction{false, 5, INT64_MIN};
  const Row label{true, 8, 9};
  const JoinCounts apart = run({{{prediction}, 12}, {{label}, 30}});
  const JoinCounts together = run({{{prediction, label}, 30}});
  for (const JoinCounts& counts : {apart, together}) {
    CHECK(counts.labelled == 0);
    CHECK(counts.unlabelled == 1);
    CHECK(counts.labels_late == 1);
    CHECK(counts.labels_without_prediction == 0);
  }
  // A prediction behind the watermark, after a label that waited for it: late too.
  const JoinCounts late_prediction = run({{{Row{true, 8, INT64_MIN}, Row{false, 5, 6}}, 30}});
  CHECK(late_prediction.predictions_late == 1);
  CHECK(late_prediction.labels_without_prediction == 1);
  CHECK(late_prediction.labelled == 0);
}

// The review's case and its kin: a key's outcome came from the order its rows arrived in (an
// entry kept one label and one prediction, and dropped what it rejected). Now each key's rows wait
// together and pair by event time alone, so every order and batching of the same rows (none of
// them late), with restarts from the state at batch ends, gives the same counts and rows.
TEST_CASE("the labels' join pairs a key's rows by event time, so neither the order they come in "
          "nor the batching nor a restart changes an outcome",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  const int64_t minute_us = 60'000'000;
  const int64_t t0_us = kT0Ms * 1000;
  struct Row {
    bool label;
    std::string key;
    int minute;
    double value;  // the score of a prediction, the label of a label
    std::string model = "m0";
  };
  // within: 5 minutes.
  const std::vector<Row> rows = {
      // Two labels, the first too early for the prediction: the second is its label (the
      // entry once kept the first and so dropped both when the prediction came last).
      {true, "a", 0, 1}, {true, "a", 8, 0}, {false, "a", 10, 0.9},
      // A key used twice: 0 heads a pairing, 3 is its duplicate, 7 heads the next; the label at
      // 4 is the first pairing's (the earliest it is within the bound of), the one at 11 the
      // second's, 12 is its duplicate, and those at 16 and 40 have no prediction.
      {false, "b", 0, 0.2}, {false, "b", 3, 0.7}, {false, "b", 7, 0.6}, {true, "b", 4, 0},
      {true, "b", 11, 1}, {true, "b", 12, 1}, {true, "b", 16, 1}, {true, "b", 40, 1},
      // A prediction labelled twice, and one never labelled.
      {false, "c", 20, 0.4}, {true, "c", 22, 1}, {true, "c", 21, 0}, {false, "d", 30, 0.3},
      // A prediction whose label came later than the bound (within twice the bound); then the
      // key again, labelled.
      {false, "e", 50, 0.8}, {true, "e", 58, 1}, {false, "e", 66, 0.1}, {true, "e", 67, 0},
      // Two models score one request alike: the head is m1's (the tie goes by model), and m2's
      // prediction its duplicate.
      {false, "f", 70, 0.5, "m2"}, {false, "f", 70, 0.5, "m1"}, {true, "f", 71, 1}};
  struct Outcome {
    JoinCounts counts;
    std::vector<std::string> performance;
  };
  // The rows in `order`, in batches ending after each index in `cuts`; each batch's watermark
  // is the earliest event time still to come, so that no row is late; after the batches ending
  // at the indexes in `restarts` the stage is made anew from the state written so far.
  auto run = [&](const std::vector<size_t>& order, const std::set<size_t>& cuts,
                 const std::set<size_t>& restarts) {
    auto stage = PerformanceStage::Create(*spec);
    REQUIRE(stage);
    Outcome outcome;
    BatchOutput output;
    std::map<std::string, std::string> state;
    int64_t watermark_us = INT64_MIN;
    for (size_t i = 0; i < order.size(); ++i) {
      const Row& row = rows[order[i]];
      Feed(**stage, *spec,
           {row.label, row.key, kT0Ms + row.minute * 60'000, row.value, row.model, watermark_us},
           output);
      if (cuts.count(i) == 0 && i + 1 < order.size()) continue;
      int64_t next_minute = 120;
      for (size_t j = i + 1; j < order.size(); ++j) {
        next_minute = std::min(next_minute, int64_t(rows[order[j]].minute));
      }
      BatchContext context;
      context.batch_id = int64_t(i);
      context.watermark_us = watermark_us = t0_us + next_minute * minute_us;
      context.next_watermark_us = context.watermark_us;
      StateChanges changes;
      StageProgress progress;
      (*stage)->Finish(context, output, changes, progress);
      const int64_t pending = progress.join.pending;
      outcome.counts.Add(progress.join);
      outcome.counts.pending = pending;
      for (const std::string& key : changes.deletes) state.erase(key);
      for (const auto& [key, value] : changes.puts) state[key] = value;
      if (restarts.count(i) != 0) {
        stage = PerformanceStage::Create(*spec);
        REQUIRE(stage);
        for (const auto& [key, value] : state) REQUIRE((*stage)->Restore(key, value));
      }
    }
    const std::regex batch_id(R"("batch_id":[0-9]+)");
    for (const std::string& line : output.performance.rows) {
      outcome.performance.push_back(std::regex_replace(line, batch_id, ""));
    }
    return outcome;
  };
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rows[a].minute < rows[b].minute;
  });
  const Outcome reference = run(order, {}, {});
  CHECK(reference.counts.labelled == 6);  // a, b twice, c, e at 66, f
  CHECK(reference.counts.unlabelled == 2);  // d, e at 50
  CHECK(reference.counts.duplicate_predictions == 2);  // b at 3, f of m2
  CHECK(reference.counts.duplicate_labels == 2);  // b at 12, c at 22
  CHECK(reference.counts.labels_outside_bound == 1);  // e at 58
  CHECK(reference.counts.labels_without_prediction == 3);  // a at 0, b at 16 and 40
  CHECK(reference.counts.labels_late + reference.counts.predictions_late == 0);
  CHECK(reference.counts.rows_over_key_cap == 0);
  CHECK(reference.counts.pending == 0);
  REQUIRE(!reference.performance.empty());
  // m1 holds f's pairing, m2 nothing.
  const std::string all_rows = fmt::format("{}", fmt::join(reference.performance, "\n"));
  CHECK_THAT(all_rows, Catch::Contains(R"("model":"m1")"));
  CHECK_THAT(all_rows, !Catch::Contains(R"("model":"m2")"));

  auto same = [&](const Outcome& other) {
    CHECK(other.counts.labelled == reference.counts.labelled);
    CHECK(other.counts.unlabelled == reference.counts.unlabelled);
    CHECK(other.counts.duplicate_predictions == reference.counts.duplicate_predictions);
    CHECK(other.counts.duplicate_labels == reference.counts.duplicate_labels);
    CHECK(other.counts.labels_outside_bound == reference.counts.labels_outside_bound);
    CHECK(other.counts.labels_without_prediction == reference.counts.labels_without_prediction);
    CHECK(other.counts.labels_late + other.counts.predictions_late == 0);
    CHECK(other.counts.pending == 0);
    CHECK(other.performance == reference.performance);
  };
  // In event-time order, a batch after every row, and a restart after each.
  std::set<size_t> every;
  for (size_t i = 0; i < order.size(); ++i) every.insert(i);
  same(run(order, every, {}));
  same(run(order, every, every));
  std::mt19937_64 random(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::shuffle(order.begin(), order.end(), random);
    std::set<size_t> cuts;
    std::set<size_t> restarts;
    for (size_t i = 0; i < order.size(); ++i) {
      if (random() % 3 == 0) cuts.insert(i);
      if (cuts.count(i) != 0 && random() % 3 == 0) restarts.insert(i);
    }
    INFO("trial " << trial);
    same(run(order, cuts, restarts));
  }
}

// A key that holds the most rows one key may takes no more: they are counted, not joined.
TEST_CASE("the labels' join holds at most 128 rows of one key per span of the bound and counts "
          "the rows past it",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  auto stage = PerformanceStage::Create(*spec);
  REQUIRE(stage);
  // 300 predictions 1 ms apart in one span, the latest first; then 50 in the next span.
  std::vector<std::string> predictions;
  for (int i = 299; i >= 0; --i) {
    predictions.push_back(fmt::format(
        R"({{"request_id":"same","model_id":"m0","event_time":{},"score":0.5}})", kT0Ms + i));
  }
  for (int i = 0; i < 50; ++i) {
    predictions.push_back(
        fmt::format(R"({{"request_id":"same","model_id":"m0","event_time":{},"score":0.5}})",
                    kT0Ms + 5 * 60'000 + i));
  }
  RecordBatch batch;
  RowTimes times;
  BatchOutput output;
  Decode(spec->schema, predictions, batch, times);
  (*stage)->Process(batch, times, output);
  StateChanges changes;
  const StageProgress progress = FinishAt(**stage, kT0Ms * 1000, output, changes);
  CHECK(progress.join.rows_over_key_cap == 300 - 128);
  CHECK(progress.join.pending == 128 + 50);
  // The span's first 128 in time order are the ones it holds, though they came last.
  const auto put = std::find_if(changes.puts.begin(), changes.puts.end(),
                                [](const auto& p) { return p.first == "psame"; });
  REQUIRE(put != changes.puts.end());
  JoinEntry entry;
  StringSet names;
  REQUIRE(DecodePending(put->second, entry, [&](std::string_view m) {
    return &*names.emplace(m).first;
  }));
  REQUIRE(entry.predictions.size() == 178);
  CHECK(entry.predictions[0].t == kT0Ms * 1000);
  CHECK(entry.predictions[127].t == (kT0Ms + 127) * 1000);
  CHECK(entry.predictions[128].t == (kT0Ms + 5 * 60'000) * 1000);
  CHECK(entry.taken.size() == 2);
}

// A key past the cap (a constant where a request id belongs): which of its rows are joined
// and which counted depends on the rows alone, not on the order they come in or the batching.
TEST_CASE("the rows a key past the cap joins do not depend on their order or the batching",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  std::mt19937_64 random(41);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<OneRow> rows;
  // 20 minutes of one key: about 150 rows per 5-minute span (the bound), past the 128 taken;
  // and some keys of their own beside it.
  for (int i = 0; i < 600; ++i) {
    const int64_t t = kT0Ms + static_cast<int64_t>(uniform(random) * 20 * 60'000);
    const bool label = i % 3 == 2;
    const double value =
        label ? (uniform(random) < 0.5 ? 1 : 0) : std::round(uniform(random) * 1e3) / 1e3;
    rows.push_back({label, "hot", t, value, i % 2 ? "m0" : "m1", INT64_MIN});
    if (i % 10 == 0) {
      rows.push_back({false, fmt::format("own-{}", i), t, value, "m0", INT64_MIN});
      rows.push_back({true, fmt::format("own-{}", i), t + 30'000, 1, "", INT64_MIN});
    }
  }
  auto run = [&](std::vector<size_t> order, uint64_t seed) {
    std::mt19937_64 cut(seed);
    auto stage = PerformanceStage::Create(*spec);
    REQUIRE(stage);
    JoinCounts counts;
    std::vector<std::string> performance;
    BatchOutput output;
    for (size_t i = 0; i < order.size(); ++i) {
      OneRow row = rows[order[i]];
      Feed(**stage, *spec, row, output);
      if (i + 1 < order.size() && cut() % 25 != 0) continue;
      // The earliest time still to come: no row is late.
      int64_t next_ms = kT0Ms + 3 * 3'600'000;
      for (size_t j = i + 1; j < order.size(); ++j) {
        next_ms = std::min(next_ms, rows[order[j]].t_ms);
      }
      StateChanges changes;
      counts.Add(FinishAt(**stage, next_ms * 1000, output, changes).join);
    }
    StateChanges changes;
    const JoinCounts last = FinishAt(**stage, (kT0Ms + 3 * 3'600'000) * 1000, output, changes).join;
    counts.Add(last);
    counts.pending = last.pending;
    const std::regex batch_id(R"(,?"batch_id":[0-9]+)");
    for (const std::string& line : output.performance.rows) {
      performance.push_back(std::regex_replace(line, batch_id, ""));
    }
    return std::make_pair(counts, performance);
  };
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return rows[a].t_ms < rows[b].t_ms; });
  const auto reference = run(order, 1);
  CHECK(reference.first.rows_over_key_cap > 50);
  CHECK(reference.first.labels_late + reference.first.predictions_late == 0);
  CHECK(reference.first.pending == 0);
  REQUIRE(!reference.second.empty());
  for (uint64_t trial = 0; trial < 40; ++trial) {
    INFO("trial " << trial);
    if (trial % 2 == 0) {
      std::shuffle(order.begin(), order.end(), random);
    } else {
      // In time order but shuffled within runs of 40 rows: pairings of a span are decided while
      // later rows of it still come, some of which take earlier ones' places.
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return rows[a].t_ms < rows[b].t_ms; });
      for (size_t at = 0; at < order.size(); at += 40) {
        std::shuffle(order.begin() + static_cast<ptrdiff_t>(at),
                     order.begin() + static_cast<ptrdiff_t>(std::min(at + 40, order.size())),
                     random);
      }
    }
    const auto other = run(order, trial + 2);
    CHECK(other.first.rows_over_key_cap == reference.first.rows_over_key_cap);
    CHECK(other.first.labelled == reference.first.labelled);
    CHECK(other.first.unlabelled == reference.first.unlabelled);
    CHECK(other.first.duplicate_labels == reference.first.duplicate_labels);
    CHECK(other.first.duplicate_predictions == reference.first.duplicate_predictions);
    CHECK(other.first.labels_without_prediction == reference.first.labels_without_prediction);
    CHECK(other.second == reference.second);
  }
}

// The decoder takes epoch millis up to about 9.2e15, within a millisecond of int64's end in
// microseconds: a prediction there plus the bound overflowed (undefined behaviour; the wrapped
// deadline decided its pairing at once).
TEST_CASE("a prediction or label at an event time no clock can reach is counted as without a "
          "usable time, and the join's sums stay within int64",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  auto stage = PerformanceStage::Create(*spec);
  REQUIRE(stage);
  BatchOutput output;
  constexpr int64_t kLastMillis = 9'223'372'036'854'775;
  Feed(**stage, *spec, {false, "far", kLastMillis, 0.9}, output);
  Feed(**stage, *spec, {true, "far", kLastMillis, 1}, output);
  Feed(**stage, *spec, {false, "past", -kLastMillis, 0.9}, output);
  Feed(**stage, *spec, {false, "near", kT0Ms, 0.9}, output);
  Feed(**stage, *spec, {true, "near", kT0Ms + 1000, 1}, output);
  StateChanges changes;
  const StageProgress progress = FinishAt(**stage, (kT0Ms + 3'600'000) * 1000, output, changes);
  CHECK(progress.join.without_key == 3);
  CHECK(progress.join.labelled == 1);
  CHECK(progress.join.pending == 0);
}

TEST_CASE("a checkpoint's performance state laid out by other performance settings is refused "
          "with what changed, not read into bins or windows it does not fit",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  // Predictions in minute 0, and a batch ending with the watermark at minute 1: their window
  // (10 minutes) is open and kept in the state with its score bins.
  std::vector<std::string> predictions;
  for (int s = 0; s < 10; ++s) {
    const int64_t t = kT0Ms + s * 1000;
    predictions.push_back(fmt::format(
        R"({{"request_id":"r{}","model_id":"m0","event_time":{},"score":1.0}})", s, t));
  }
  auto stage = PerformanceStage::Create(*spec);
  REQUIRE(stage);
  RecordBatch batch;
  RowTimes times;
  BatchOutput output;
  Decode(spec->schema, predictions, batch, times);
  (*stage)->Process(batch, times, output);
  StateChanges changes;
  FinishAt(**stage, (kT0Ms + 60'000) * 1000, output, changes);
  REQUIRE_FALSE(changes.puts.empty());

  auto restore_into = [&](const std::string& performance_lines,
                          const std::string& window = "10 minutes") -> Status {
    std::string yaml = kPipeline;
    const std::string anchor = "  baselineWindows: 2\n";
    yaml.replace(yaml.find(anchor), anchor.size(), anchor + performance_lines);
    const std::string window_line = "  window: 10 minutes\n";
    yaml.replace(yaml.find(window_line), window_line.size(), "  window: " + window + "\n");
    auto changed = ParsePipeline(yaml, "stage.yaml", LoadOptions{});
    REQUIRE(changed);
    auto restarted = PerformanceStage::Create(*changed);
    REQUIRE(restarted);
    for (const auto& [key, value] : changes.puts) {
      DRIFTD_TRY((*restarted)->Restore(key, value));
    }
    return Ok();
  };
  CHECK(restore_into(""));
  for (const char* setting : {"  bins: 20\n", "  threshold: 0.55\n", "  task: regression\n"}) {
    INFO(setting);
    Status restored = restore_into(setting);
    REQUIRE_FALSE(restored);
    CHECK(restored.error().code() == ErrorCode::kIncompatible);
    CHECK_THAT(restored.error().message(), Catch::Contains("other performance settings"));
  }
  // Windows of 5 minutes would take the 10-minute windows' starts, and their counts.
  Status shorter = restore_into("", "5 minutes");
  REQUIRE_FALSE(shorter);
  CHECK(shorter.error().code() == ErrorCode::kIncompatible);
  CHECK_THAT(shorter.error().message(),
             Catch::Contains("windows of 600 s, and performance.window is 300 s"));
}

// A pending entry in the first layout (one prediction, one label and how many labels had the key)
// restores into pairings: the prediction with its label, and the label's duplicates counted.
TEST_CASE("a pending entry of the join's first state layout is read, duplicates included",
          "[executor][labels][performance]") {
  auto spec = ParsePipeline(kPipeline, "stage.yaml", LoadOptions{});
  REQUIRE(spec);
  const int64_t t_us = kT0Ms * 1000;
  std::string value;
  drift::ByteWriter w(value);
  w.U8(1);  // layout 1
  w.U8(1 | 2);  // a prediction and a label
  w.Str("m0");
  w.Zigzag(t_us);
  w.F64(0.9);
  w.Zigzag(t_us + 60'000'000);
  w.F64(1);
  w.Varint(3);  // three labels: two duplicates
  w.Varint(1);
  auto stage = PerformanceStage::Create(*spec);
  REQUIRE(stage);
  REQUIRE((*stage)->Restore("pr1", value));
  REQUIRE_FALSE((*stage)->Restore("pr2", value.substr(0, value.size() - 3)));
  BatchOutput output;
  StateChanges changes;
  const StageProgress progress = FinishAt(**stage, t_us + 30 * 60'000'000LL, output, changes);
  CHECK(progress.join.labelled == 1);
  CHECK(progress.join.duplicate_labels == 2);
  CHECK(progress.join.pending == 0);
  CHECK(std::count(changes.deletes.begin(), changes.deletes.end(), "pr1") == 1);
}

TEST_CASE("scaled out, tasks that join their own keys and hand each model's windows to its task "
          "give one task's performance rows and alerts, value for value",
          "[executor][labels][performance][scale-out]") {
  // Classification and regression: the window's sums (log loss, calibration, errors) are
  // summed in parts on the joining tasks and merged on the model's.
  const bool regression = GENERATE(false, true);
  std::string yaml = kPipeline;
  if (regression) {
    yaml.replace(yaml.find("  prediction: score\n"), 19,
                 "  task: regression\n  prediction: score\n");
  }
  auto spec = ParsePipeline(yaml, "stage.yaml", LoadOptions{});
  INFO((spec ? std::string() : FormatProblems("stage.yaml", spec.error())));
  REQUIRE(spec);
  constexpr uint32_t kTasks = 3;
  const int64_t minute_us = 60'000'000;
  // 4 models, a prediction every 2 s for 2 hours; labels 0-4 minutes later (within: 5), 5%
  // never, some twice; after an hour m1's labels mostly go against its scores.
  struct Row {
    bool label;
    std::string key;
    int64_t t_ms;
    double value;
    std::string model;
  };
  std::vector<Row> rows;
  std::mt19937_64 random(regression ? 31 : 29);
  std::uniform_real_distribution<double> uniform(0, 1);
  for (int i = 0; i < 3600; ++i) {
    const std::string key = fmt::format("req-{}", i % 3000);  // some keys used again
    const std::string model = fmt::format("m{}", i % 4);
    const int64_t t = kT0Ms + i * 2000;
    const double score = std::round(uniform(random) * 1e6) / 1e6;
    rows.push_back({false, key, t, score, model});
    bool positive = uniform(random) < score;
    if (model == "m1" && i > 1800 && uniform(random) < 0.9) positive = !positive;
    const double label = regression ? std::round(score * 10 + (positive ? 1 : -1)) : positive;
    const int copies = uniform(random) < 0.05 ? 0 : uniform(random) < 0.03 ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      rows.push_back({true, key, t + static_cast<int64_t>(uniform(random) * 240'000), label, ""});
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.t_ms < b.t_ms; });
  auto task_of = [](std::string_view name) {
    return static_cast<uint32_t>(StableHash(name) % kTasks);
  };
  const std::regex batch_id(R"(,?"batch_id":[0-9]+)");
  auto strip = [&](const OutputRows& out, std::vector<std::string>& into) {
    for (const std::string& line : out.rows) into.push_back(std::regex_replace(line, batch_id, ""));
  };
  struct Outcome {
    std::vector<std::string> performance;
    std::vector<std::string> alerts;
    int64_t labelled = 0;
  };
  // `tasks` stages, fed as scale_out.cc routes rows; batches of random length, each with the
  // earliest event time still to come as its watermark (no row is late); messages reach their
  // task in the next batch, each sender's in order, and a task is restarted from its state now
  // and then.
  auto run = [&](uint32_t tasks, uint64_t seed) {
    std::mt19937_64 shuffle(seed);
    std::vector<std::unique_ptr<PerformanceStage>> stages;
    std::vector<std::map<std::string, std::string>> state(tasks);
    auto make = [&](uint32_t id) {
      auto stage = PerformanceStage::Create(*spec);
      REQUIRE(stage);
      (*stage)->SetTask(id, tasks);
      for (const auto& [key, value] : state[id]) REQUIRE((*stage)->Restore(key, value));
      return std::move(*stage);
    };
    for (uint32_t id = 0; id < tasks; ++id) stages.push_back(make(id));
    // In flight: per (from, to), messages in order.
    std::map<std::pair<uint32_t, uint32_t>, std::deque<std::string>> inflight;
    Outcome outcome;
    int64_t batch = 0;
    auto finish_all = [&](int64_t watermark_us, bool restarts) {
      // Deliver what is in flight, senders interleaved at random.
      std::vector<std::pair<uint32_t, uint32_t>> links;
      for (auto& [link, queue] : inflight) {
        for (size_t i = 0; i < queue.size(); ++i) links.push_back(link);
      }
      std::shuffle(links.begin(), links.end(), shuffle);
      for (const auto& link : links) {
        const auto body = TaskMessageBody(inflight[link].front());
        REQUIRE(body);
        REQUIRE(stages[link.second]->Receive(*body));
        inflight[link].pop_front();
      }
      for (uint32_t id = 0; id < tasks; ++id) {
        BatchContext context;
        context.batch_id = batch;
        context.watermark_us = watermark_us;
        context.next_watermark_us = watermark_us;
        BatchOutput output;
        StateChanges changes;
        StageProgress progress;
        stages[id]->Finish(context, output, changes, progress);
        outcome.labelled += progress.join.labelled;
        strip(output.performance, outcome.performance);
        strip(output.alerts, outcome.alerts);
        for (const InternalRecord& record : output.repartition) {
          REQUIRE(record.partition != id);
          REQUIRE(record.partition < tasks);
          inflight[{id, record.partition}].push_back(record.value);
        }
        for (const std::string& key : changes.deletes) state[id].erase(key);
        for (const auto& [key, value] : changes.puts) state[id][key] = value;
        if (restarts && tasks > 1 && shuffle() % 10 == 0) stages[id] = make(id);
      }
      ++batch;
    };
    BatchOutput unused;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& row = rows[i];
      const uint32_t joins = tasks == 1 ? 0 : task_of(row.key);
      if (row.label) {
        Feed(*stages[joins], *spec, {true, row.key, row.t_ms, row.value, "", INT64_MIN}, unused);
      } else {
        const uint32_t owner = tasks == 1 ? 0 : task_of(row.model);
        OneRow prediction{false, row.key, row.t_ms, row.value, row.model, INT64_MIN};
        Feed(*stages[owner], *spec, prediction, unused);
        if (joins != owner) Feed(*stages[joins], *spec, prediction, unused);
      }
      if (i + 1 < rows.size() && shuffle() % 40 != 0) continue;
      const int64_t next = i + 1 < rows.size() ? rows[i + 1].t_ms * 1000 : INT64_MAX / 2;
      finish_all(next, /*restarts=*/true);
    }
    // Until every message is in and nothing more is sent.
    for (int round = 0; round < 3; ++round) finish_all(INT64_MAX / 2, /*restarts=*/false);
    for (const auto& [link, queue] : inflight) CHECK(queue.empty());
    for (uint32_t id = 0; id < tasks; ++id) {
      for (const auto& [key, value] : state[id]) {
        INFO("task " << id << " kept " << key.substr(0, 1));
        CHECK((key[0] == 's' || key[0] == 'm' || key[0] == 'c' || key[0] == 'a'));
      }
    }
    std::sort(outcome.performance.begin(), outcome.performance.end());
    std::sort(outcome.alerts.begin(), outcome.alerts.end());
    return outcome;
  };
  const Outcome one = run(1, 1);
  REQUIRE(one.performance.size() >= 4 * 12 * 2 - 8);  // 4 models x 12 windows, twice
  REQUIRE(one.labelled > 3000);
  if (!regression) REQUIRE(!one.alerts.empty());  // m1's accuracy drop
  for (uint64_t seed : {2, 3, 4}) {
    INFO("3 tasks, seed " << seed);
    const Outcome three = run(kTasks, seed);
    CHECK(three.labelled == one.labelled);
    CHECK(three.performance == one.performance);
    CHECK(three.alerts == one.alerts);
  }
}

}  // namespace
}  // namespace driftd
