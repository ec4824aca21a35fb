#include "engine/executor/metrics_query.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace driftd {
namespace {

SharedEvaluation Evaluated(const std::string& model, int64_t batch_id) {
  Evaluation evaluation;
  evaluation.model = model;
  evaluation.series = "prediction";
  evaluation.evaluated = true;
  evaluation.batch_id = batch_id;
  evaluation.window_end_record = (batch_id + 1) * 100;
  DetectorReading reading;
  reading.detector = "mean_shift";
  reading.statistic = static_cast<double>(batch_id);
  evaluation.detectors.push_back(reading);
  return std::make_shared<const Evaluation>(std::move(evaluation));
}

// The evaluations of a batch as the executor hands them to the metrics: packed.
void Record(QueryMetrics& metrics, const std::vector<SharedEvaluation>& evaluations) {
  std::vector<PackedEvaluation> packed;
  for (const SharedEvaluation& evaluation : evaluations) packed.emplace_back(*evaluation);
  metrics.RecordDrift({}, packed, 0);
}

TEST_CASE("each series keeps its evaluation history until many series share the points budget",
          "[metrics]") {
  QueryMetricsOptions options;
  options.evaluation_history = 5;
  options.evaluation_history_points = 20;
  QueryMetrics metrics(options);

  // Two series: each keeps its last 5 evaluations.
  for (int64_t batch = 0; batch < 8; ++batch) {
    Record(metrics, {Evaluated("m0", batch), Evaluated("m1", batch)});
  }
  auto history = metrics.SeriesHistory("m0", "prediction");
  REQUIRE(history.size() == 5);
  CHECK(history.front().batch_id == 3);
  CHECK(history.back().batch_id == 7);
  CHECK(history.back().detectors.at(0).statistic == 7);

  // Ten series share 20 points: every series, the old ones too, keeps its last 2.
  std::vector<SharedEvaluation> more;
  for (int model = 2; model < 10; ++model) more.push_back(Evaluated("m" + std::to_string(model), 8));
  Record(metrics, more);
  history = metrics.SeriesHistory("m0", "prediction");
  REQUIRE(history.size() == 2);
  CHECK(history.front().batch_id == 6);
  CHECK(history.back().batch_id == 7);
  Record(metrics, {Evaluated("m1", 9)});
  history = metrics.SeriesHistory("m1", "prediction");
  REQUIRE(history.size() == 2);
  CHECK(history.back().batch_id == 9);

  // More series than points: each keeps its latest evaluation, and the latest evaluation of
  // every series is still there for the gauges.
  more.clear();
  for (int model = 10; model < 40; ++model) {
    more.push_back(Evaluated("m" + std::to_string(model), 10));
  }
  Record(metrics, more);
  history = metrics.SeriesHistory("m1", "prediction");
  REQUIRE(history.size() == 1);
  CHECK(history.back().batch_id == 9);
  CHECK(metrics.Snapshot().evaluations.size() == 40);
}

TEST_CASE("a window below minSamples keeps the gauges' last readings with its level", "[metrics]") {
  QueryMetrics metrics;
  Record(metrics, {Evaluated("m0", 1)});
  Evaluation few;
  few.model = "m0";
  few.series = "prediction";
  few.evaluated = false;
  few.level = AlertLevel::kWarn;
  few.batch_id = 2;
  const SharedEvaluation shared = std::make_shared<const Evaluation>(few);
  Record(metrics, {shared});

  const SharedEvaluation gauge = metrics.Snapshot().evaluations.at({"m0", "prediction"}).Unpack();
  CHECK(gauge->level == AlertLevel::kWarn);
  REQUIRE(gauge->detectors.size() == 1);
  CHECK(gauge->detectors[0].statistic == 1);
  // The evaluation recorded is not changed for it; the history shows it as it was.
  CHECK(shared->detectors.empty());
  auto history = metrics.SeriesHistory("m0", "prediction");
  REQUIRE(history.size() == 2);
  CHECK(!history.back().evaluated);
  CHECK(history.back().level == AlertLevel::kWarn);
  CHECK(history.front().level == AlertLevel::kOk);
}

TEST_CASE("a series' evaluation ring keeps the newest, oldest first, as its room changes",
          "[metrics]") {
  EvaluationRing ring;
  auto batches = [&] {
    std::vector<int64_t> out;
    for (const SharedEvaluation& e : ring.InOrder()) out.push_back(e->batch_id);
    return out;
  };
  for (int64_t batch = 1; batch <= 5; ++batch) ring.Push(Evaluated("m", batch), 3);
  CHECK(batches() == std::vector<int64_t>{3, 4, 5});
  ring.Trim(2);
  CHECK(batches() == std::vector<int64_t>{4, 5});
  ring.Push(Evaluated("m", 6), 2);
  CHECK(batches() == std::vector<int64_t>{5, 6});
  // More room: it fills up again before it overwrites.
  ring.Push(Evaluated("m", 7), 3);
  ring.Push(Evaluated("m", 8), 3);
  CHECK(batches() == std::vector<int64_t>{6, 7, 8});
  // Less room than it holds, given with the push.
  ring.Push(Evaluated("m", 9), 1);
  CHECK(batches() == std::vector<int64_t>{9});
  CHECK(ring.size() == 1);
}

TEST_CASE("the backlog follows the lag of triggers that found nothing to do", "[metrics]") {
  QueryMetrics metrics(QueryMetricsOptions{});
  ProgressRecord progress;
  progress.num_input_rows = 100;
  progress.lag = {{"t-0", 100, 5100}, {"t-1", 100, 100}};
  metrics.RecordBatch(progress);
  CHECK(metrics.Snapshot().backlog_records == 5000);
  // The backlog was read by batches whose records went elsewhere (another process of the
  // group took the partition): no batch here, but the trigger measured the lag again.
  metrics.RecordLag({{"t-1", 100, 100}});
  CHECK(metrics.Snapshot().backlog_records == 0);
  REQUIRE(metrics.Snapshot().lag.size() == 1);
  // Nothing owned any more: no backlog at all.
  metrics.RecordLag({});
  CHECK(metrics.Snapshot().backlog_records == -1);
  CHECK(metrics.Snapshot().lag.empty());
}

}  // namespace
}  // namespace driftd
