// The status page's past in the checkpoint (engine/executor/status_history.h): what a
// restarted query's metrics show is what the sinks were given before it stopped: the recent
// alerts (ids, order), the incidents still open since the event that opened them, and each
// series' last evaluations.
#include "engine/executor/status_history.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <simdjson.h>
#include <catch2/catch.hpp>

#include "config/loader.h"
#include "connectors/inference_generator.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/executor.h"
#include "engine/json_decoder.h"
#include "engine/executor/metrics_query.h"
#include "state/checkpoint_store.h"
#include "tests/executor/partitioned_source.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::Partitions;
using testing::PartitionedSource;
using testing::TempDir;

class AlertSink final : public Sink {
 public:
  explicit AlertSink(std::vector<std::string>& alerts) : alerts_(alerts) {}
  const std::string& name() const override { return name_; }
  Status Open() override { return Ok(); }
  Result<bool> IsDelivered(int64_t) override { return false; }
  Status Deliver(const BatchOutput& output) override {
    for (const std::string& row : output.alerts.rows) alerts_.push_back(row);
    return Ok();
  }

 private:
  std::string name_ = "alerts";
  std::vector<std::string>& alerts_;
};

constexpr const char* kPipeline = R"(
name: history
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
  aggregates: [count]
drift:
  series: [feature_vector, prediction]
  baseline: {type: warmup, records: 1000}
  windowRecords: 1000
  detectors: [{type: mean_shift}, {type: psi}]
sinks:
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)";

// Four models on four partitions; model-2's feature 1 shifts after a third, model-1's
// prediction after a half.
Partitions Logs() {
  InferenceGeneratorOptions options;
  options.models = 4;
  options.features = 2;
  options.labels = 0;
  options.rows_per_second = 400;
  options.start_time_ms = 1'700'000'000'000;
  options.drift.push_back(
      ParseDriftScenario("model-2 feature 1 shifts by 2 sigma after 40 s").value());
  options.drift.push_back(
      ParseDriftScenario("model-1 prediction shifts by 3 sigma after 70 s").value());
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  Partitions data{"logs", std::vector<std::vector<std::string>>(4)};
  for (uint64_t row = 0; row < 48'000; ++row) {
    std::string record;
    generator->AppendRecord(row, record);
    const size_t at = record.find("\"model-") + 7;
    data.records[static_cast<size_t>(record[at] - '0')].push_back(std::move(record));
  }
  return data;
}

// Runs the query on `checkpoint` (`run`: to the end of the data; else only starts it) with
// `metrics`; the alert rows delivered.
std::vector<std::string> Run(const Partitions& data, const std::string& checkpoint,
                             QueryMetrics& metrics, bool run) {
  auto spec = ParsePipeline(kPipeline, "history.yaml", LoadOptions{});
  REQUIRE(spec);
  spec->checkpoint_location = checkpoint;
  std::vector<std::string> alerts;
  QueryIo io;
  io.create_source = [&](const PipelineSpec&) -> Result<std::unique_ptr<Source>> {
    return std::unique_ptr<Source>(std::make_unique<PartitionedSource>(data, 2'000, false, 1.0));
  };
  io.create_sinks = [&](const PipelineSpec&,
                        Source&) -> Result<std::vector<std::unique_ptr<Sink>>> {
    std::vector<std::unique_ptr<Sink>> sinks;
    sinks.push_back(std::make_unique<AlertSink>(alerts));
    return sinks;
  };
  io.open_checkpoint = [](const std::string& directory, const CheckpointOptions& options) {
    return OpenCheckpointStore(directory, options);
  };
  ExecutorOptions options;
  options.sync_commits = false;
  options.metrics = &metrics;
  auto executor = QueryExecutor::Create(*spec, std::move(options), std::move(io));
  REQUIRE(executor);
  REQUIRE((*executor)->Start());
  if (run) REQUIRE((*executor)->Run());
  return alerts;
}

TEST_CASE("a restarted query shows the alerts, open incidents and series history it had",
          "[executor][history]") {
  const Partitions data = Logs();
  TempDir dir;
  QueryMetrics before;
  const std::vector<std::string> alerts = Run(data, dir / "checkpoint", before, true);
  REQUIRE(alerts.size() >= 2);  // model-2's and model-1's at least

  // What the sinks were given: alert ids in order, and each series' last level.
  simdjson::dom::parser parser;
  std::vector<std::string> ids;
  std::map<std::pair<std::string, std::string>, std::string> last_level;
  std::map<std::pair<std::string, std::string>, std::string> opened_by;
  for (const std::string& row : alerts) {
    simdjson::dom::element alert = parser.parse(row);
    ids.emplace_back(std::string_view(alert["alert_id"]));
    const std::pair<std::string, std::string> key{std::string_view(alert["model"]),
                                                  std::string_view(alert["series"])};
    const std::string level{std::string_view(alert["level"])};
    const std::string previous{std::string_view(alert["previous_level"])};
    last_level[key] = level;
    if ((level == "WARN" || level == "ALERT") && (previous == "OK" || previous == "RESOLVED")) {
      opened_by[key] = std::string(std::string_view(alert["alert_id"]));
    }
  }
  std::set<std::pair<std::string, std::string>> open;
  for (const auto& [key, level] : last_level) {
    if (level == "WARN" || level == "ALERT") open.insert(key);
  }
  REQUIRE(!open.empty());

  // Started twice with the same metrics, as the supervisor restarts a failed query: each
  // alert is there once.
  QueryMetrics after;
  CHECK(Run(data, dir / "checkpoint", after, false).empty());
  CHECK(Run(data, dir / "checkpoint", after, false).empty());
  std::vector<std::string> restored_ids;
  for (const AlertSummary& alert : after.RecentAlerts()) restored_ids.push_back(alert.alert_id);
  CHECK(restored_ids == ids);
  std::vector<std::string> before_ids;
  for (const AlertSummary& alert : before.RecentAlerts()) before_ids.push_back(alert.alert_id);
  CHECK(before_ids == ids);

  std::set<std::pair<std::string, std::string>> restored_open;
  for (const IncidentSummary& incident : after.OpenIncidents()) {
    const std::pair<std::string, std::string> key(incident.model, incident.series);
    restored_open.insert(key);
    CHECK(incident.incident_id == opened_by.at(key));
    CHECK(incident.since_batch >= 0);
    CHECK(incident.since_us != INT64_MIN);
  }
  CHECK(restored_open == open);
  CHECK(before.OpenIncidents().size() == open.size());

  // Every series' history, as the running query had it (about 12,000 values a model: some 10
  // windows of 1,000 after the warm-up).
  for (const std::string series : {"prediction", "feature_vector[0]", "feature_vector[1]"}) {
    for (const std::string model : {"model-0", "model-2"}) {
      INFO(model << " " << series);
      const std::vector<EvaluationPoint> was = before.SeriesHistory(model, series);
      const std::vector<EvaluationPoint> is = after.SeriesHistory(model, series);
      REQUIRE(was.size() >= 9);
      REQUIRE(is.size() == was.size());
      for (size_t i = 0; i < was.size(); ++i) {
        CHECK(is[i].batch_id == was[i].batch_id);
        CHECK(is[i].window_end_us == was[i].window_end_us);
        CHECK(is[i].level == was[i].level);
        REQUIRE(is[i].detectors.size() == was[i].detectors.size());
        CHECK(is[i].detectors[0].statistic == was[i].detectors[0].statistic);
        CHECK(is[i].detectors[0].alert_threshold == was[i].detectors[0].alert_threshold);
      }
      // The latest evaluation, with the distributions it compared, from the drift stage.
      const SharedEvaluation latest = after.LatestEvaluation(model, series);
      REQUIRE(latest != nullptr);
      CHECK(latest->distribution.size() == 10);
    }
  }
}

TEST_CASE("an incident is open from the event that opened it to the one that closes it",
          "[executor][history]") {
  IncidentBook book;
  AlertSummary warn;
  warn.alert_id = "a1";
  warn.incident_id = "a1";
  warn.model = "m";
  warn.series = "x";
  warn.level = AlertLevel::kWarn;
  warn.previous_level = AlertLevel::kOk;
  warn.window_end_us = 1'000;
  warn.recorded_at_ms = 5;
  warn.batch_id = 3;
  book.Apply(warn);
  AlertSummary alert = warn;
  alert.alert_id = "a2";
  alert.level = AlertLevel::kAlert;
  alert.previous_level = AlertLevel::kWarn;
  alert.window_end_us = 2'000;
  alert.recorded_at_ms = 9;
  alert.batch_id = 4;
  book.Apply(alert);
  REQUIRE(book.open().size() == 1);
  const IncidentSummary& incident = book.open().begin()->second;
  // Since the WARN that opened it, at its level now.
  CHECK(incident.incident_id == "a1");
  CHECK(incident.since_us == 1'000);
  CHECK(incident.since_batch == 3);
  CHECK(incident.level == AlertLevel::kAlert);
  CHECK(incident.opened_level == AlertLevel::kWarn);
  CHECK(incident.updated_ms == 9);
  AlertSummary resolved = alert;
  resolved.level = AlertLevel::kResolved;
  resolved.previous_level = AlertLevel::kAlert;
  book.Apply(resolved);
  CHECK(book.open().empty());
  // A WARN after RESOLVED opens a new incident, since its own window.
  AlertSummary again = warn;
  again.alert_id = "a3";
  again.incident_id = "a3";
  again.previous_level = AlertLevel::kResolved;
  again.window_end_us = 7'000;
  book.Apply(again);
  REQUIRE(book.open().size() == 1);
  CHECK(book.open().begin()->second.since_us == 7'000);
  CHECK(book.open().begin()->second.incident_id == "a3");
}

TEST_CASE("while a backlog is read the series' points wait, up to 30 s, and are written when "
          "the query catches up or stops, while alerts and incidents never wait",
          "[executor][history]") {
  auto spec = ParsePipeline(kPipeline, "history.yaml", LoadOptions{});
  REQUIRE(spec);
  auto drift = DriftStage::Create(*spec);
  REQUIRE(drift);
  HistoryStage history(drift->get(), nullptr);
  const Partitions data = Logs();
  std::vector<std::string> records;  // partition by partition, a model each
  for (const auto& partition : data.records) {
    records.insert(records.end(), partition.begin(), partition.end());
  }
  JsonDecoder decoder(spec->schema, MalformedSpec{});
  const int time_column = spec->schema.IndexOf("event_time");
  int64_t now_ms = 1'700'000'000'000;
  int64_t batch_id = 0;
  size_t next = 0;
  int64_t alerts_made = 0;
  // What the checkpoint holds of the history after each batch.
  std::map<std::string, std::string> stored;
  auto points_stored = [&] {
    return std::count_if(stored.begin(), stored.end(),
                         [](const auto& entry) { return entry.first.starts_with("p/"); });
  };
  auto apply = [&](const StateChanges& changes) {
    for (const std::string& key : changes.deletes) stored.erase(key);
    for (const auto& [key, value] : changes.puts) stored[key] = value;
  };
  // One batch of `rows` records, `backlog` saying whether more are left; the points it made.
  auto batch = [&](size_t rows, bool backlog) {
    InputChunk chunk;
    for (size_t i = next; i < next + rows && i < records.size(); ++i) {
      chunk.Append(records[i], {0, static_cast<int64_t>(i)});
    }
    next += rows;
    chunk.Seal();
    RecordBatch rows_batch;
    rows_batch.Reset(spec->schema);
    REQUIRE(decoder.Decode(chunk, rows_batch, nullptr));
    RowTimes times;
    for (size_t row = 0; row < rows_batch.num_rows; ++row) {
      times.event_us.push_back(rows_batch.columns[static_cast<size_t>(time_column)].i64[row]);
      times.late_before.push_back(INT64_MIN);
    }
    BatchOutput output;
    (*drift)->Process(rows_batch, times, output);
    BatchContext context;
    context.batch_id = batch_id++;
    context.now_ms = now_ms;
    context.more_available = backlog;
    StateChanges changes;
    StageProgress progress;
    (*drift)->Finish(context, output, changes, progress);
    StateChanges history_changes;
    history.Finish(context, output, history_changes, progress);
    apply(history_changes);
    // Alert events never wait: each is in the checkpoint with its batch.
    alerts_made += static_cast<int64_t>((*drift)->LastEvents().size());
    CHECK(std::count_if(stored.begin(), stored.end(), [](const auto& entry) {
            return entry.first.starts_with("a/");
          }) == std::min<int64_t>(alerts_made, 100));
    return (*drift)->LastEvaluations().size();
  };
  // The first batch sets the clock of the 30 s; then a backlog: evaluations, no points written.
  batch(3'000, true);
  size_t evaluated = 0;
  for (int i = 0; i < 4; ++i) evaluated += batch(3'000, true);
  REQUIRE(evaluated > 0);
  CHECK(points_stored() == 0);
  for (int i = 0; i < 2; ++i) batch(3'000, true);
  CHECK(points_stored() == 0);
  // 30 s later, still in the backlog: written.
  now_ms += 30'000;
  batch(3'000, true);
  const auto after_interval = points_stored();
  CHECK(after_interval > 0);
  // Caught up: written with the batch.
  batch(3'000, true);
  CHECK(points_stored() == after_interval);
  batch(3'000, false);
  const auto caught_up = points_stored();
  CHECK(caught_up > after_interval);
  // A backlog again, then a clean stop: what waited is written.
  evaluated = 0;
  for (int i = 0; i < 3; ++i) evaluated += batch(3'000, true);
  REQUIRE(evaluated > 0);
  CHECK(points_stored() == caught_up);
  StateChanges kept;
  history.FlushKept(now_ms, kept);
  apply(kept);
  CHECK(points_stored() > caught_up);
  // model-1's and model-2's shifts were raised on the way.
  CHECK(alerts_made >= 2);
  // What the checkpoint holds reads back as each series' points, in order, within the cap.
  StatusHistory restored;
  for (const auto& [key, value] : stored) REQUIRE(ReadHistoryEntry(key, value, restored));
  REQUIRE(!restored.points.empty());
  for (const auto& [series, points] : restored.points) {
    CHECK(points.size() <= 60);
    for (size_t i = 1; i < points.size(); ++i) {
      CHECK(points[i - 1]->window_end_record <= points[i]->window_end_record);
    }
  }
}

}  // namespace
}  // namespace driftd
