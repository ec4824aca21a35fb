// Labels that arrive later, on a topic of their own, against the real broker: predictions on one
// topic, labels 0-30 minutes of event time later on another (out of order within a partition,
// 5% never labelled, some twice). The daemon's realized metrics per model and window, read with
// read_committed, equal the test's own join of the same records; killed with SIGKILL 20+ times
// it writes exactly the rows and alerts of a crash-free run; another maxOffsetsPerTrigger gives
// the same rows and alert ids.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <simdjson.h>

#include "engine/time_iso8601.h"
#include "tests/kafka/kafka_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using testing::DriftdBinary;
using testing::KillRepeatedly;
using testing::ReadFile;
using testing::RunDriftd;
using testing::RunResult;
using testing::TempDir;
using testing::WriteFile;

constexpr int64_t kT0Ms = 1'795'946'400'000;  // a whole hour
constexpr int kPredictions = 7200;            // one a second, 2 hours of event time
constexpr int64_t kWindowMs = 10 * 60'000;

// What the test knows without driftd: each prediction and whether (how often) it is labelled.
struct Prediction {
  std::string model;
  int64_t time_ms = 0;
  double score = 0;
  int label = 0;
  int labels = 0;  // 0: never labelled
};

struct Data {
  std::vector<Prediction> predictions;
  std::vector<std::vector<std::string>> prediction_records{2};
  std::vector<std::vector<std::string>> label_records{2};
};

// Two models; scores calibrated (label ~ Bernoulli(score)) until, after 50 minutes, half of m1's
// labels stop following its scores (its accuracy drops from about 0.75 to 0.5). Labels come 0-30
// minutes after their prediction, each partition roughly in label-time order (shuffled within
// runs of 16 records: out of order by up to about a minute, less than the watermark's delay).
Data Generate() {
  Data data;
  std::mt19937_64 random(20261204);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<std::vector<std::pair<int64_t, std::string>>> labels(2);
  for (int i = 0; i < kPredictions; ++i) {
    Prediction p;
    p.model = fmt::format("m{}", i % 2);
    p.time_ms = kT0Ms + i * 1000;
    p.score = std::round(uniform(random) * 1e6) / 1e6;
    bool positive = uniform(random) < p.score;
    if (p.model == "m1" && i >= 3000 && uniform(random) < 0.5) positive = !positive;
    p.label = positive ? 1 : 0;
    const std::string id = fmt::format("req-{}", i);
    data.prediction_records[static_cast<size_t>((i / 7) % 2)].push_back(fmt::format(
        R"({{"request_id":"{}","model_id":"{}","event_time":{},"score":{:.6f}}})", id, p.model,
        p.time_ms, p.score));
    p.labels = uniform(random) < 0.05 ? 0 : uniform(random) < 0.03 ? 2 : 1;
    for (int c = 0; c < p.labels; ++c) {
      const int64_t label_ms = p.time_ms + static_cast<int64_t>(uniform(random) * 1'800'000);
      // A label as Python writes a float-held integer, one in four.
      const std::string value = i % 4 == 0 ? fmt::format("{}.0", p.label) : std::to_string(p.label);
      labels[static_cast<size_t>(i % 3 == 0)].emplace_back(
          label_ms, fmt::format(R"({{"request_id":"{}","label":{},"event_time":{}}})", id, value,
                                label_ms));
    }
    data.predictions.push_back(p);
  }
  for (size_t partition = 0; partition < 2; ++partition) {
    auto& list = labels[partition];
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    // Runs of up to 16 labels within a minute of label time: where labels are sparse (the
    // first and last minutes) a run of 16 would span more than the watermark's delay, and those
    // labels would be late.
    for (size_t at = 0; at < list.size();) {
      size_t end = at + 1;
      while (end < list.size() && end - at < 16 && list[end].first - list[at].first <= 60'000) {
        ++end;
      }
      std::shuffle(list.begin() + static_cast<ptrdiff_t>(at),
                   list.begin() + static_cast<ptrdiff_t>(end), random);
      at = end;
    }
    for (auto& [time, record] : list) data.label_records[partition].push_back(std::move(record));
  }
  return data;
}

std::string Pipeline(const std::string& name, const std::string& predictions,
                     const std::string& labels, const std::string& performance_out,
                     const std::string& alerts_out, const std::string& checkpoint,
                     int max_offsets, bool scale_out = false) {
  return fmt::format(R"(name: {name}
schema:
  - {{name: request_id, type: string, nullable: false}}
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: score, type: double}}
source:
  format: kafka
  options:
    subscribe: {predictions}
    startingOffsets: earliest
    maxOffsetsPerTrigger: {max}
    kafka.bootstrap.servers: "{bootstrap}"
labels:
  source:
    format: kafka
    options:
      subscribe: {labels}
      startingOffsets: earliest
      maxOffsetsPerTrigger: {max}
      kafka.bootstrap.servers: "{bootstrap}"
  schema:
    - {{name: request_id, type: string}}
    - {{name: label, type: int}}
    - {{name: event_time, type: timestamp}}
  key: request_id
  label: label
  within: 40 minutes
query:
  groupBy: [model_id]
  aggregates: [count]
  watermark: {{column: event_time, delay: 5 minutes, idleTimeout: 0}}
performance:
  prediction: score
  window: 10 minutes
  baselineWindows: 2
sinks:
  - name: performance
    format: kafka
    stream: performance
    options: {{topic: {performance_out}, kafka.bootstrap.servers: "{bootstrap}"}}
  - name: alerts
    format: kafka
    stream: alerts
    options: {{topic: {alerts_out}, kafka.bootstrap.servers: "{bootstrap}"}}
{trigger}checkpointLocation: {checkpoint}
)",
                     fmt::arg("name", name), fmt::arg("predictions", predictions),
                     fmt::arg("labels", labels), fmt::arg("performance_out", performance_out),
                     fmt::arg("alerts_out", alerts_out), fmt::arg("checkpoint", checkpoint),
                     fmt::arg("max", max_offsets), fmt::arg("bootstrap", Bootstrap()),
                     fmt::arg("trigger", scale_out ? "trigger: {processingTime: 100ms}\n"
                                                     "scaleOut: {enabled: true, instance: "
                                                     "\"${INSTANCE}\"}\n"
                                                   : "trigger: {availableNow: true}\n"));
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

// A row without its batch id: the one thing another batching changes.
std::string WithoutBatch(const std::string& row) {
  static const std::regex batch_id(R"(,"batch_id":[0-9]+)");
  return std::regex_replace(row, batch_id, "");
}

std::vector<std::string> WithoutBatch(const std::vector<std::string>& rows) {
  std::vector<std::string> out;
  for (const std::string& row : rows) out.push_back(WithoutBatch(row));
  return out;
}

// The test's own join: per (model, window start ms) of the predictions, what the daemon's final
// row must say.
struct Offline {
  int64_t predictions = 0, labelled = 0, unlabelled = 0, duplicates = 0;
  int64_t tp = 0, fp = 0, tn = 0, fn = 0;
};

std::map<std::pair<std::string, int64_t>, Offline> Join(const Data& data) {
  std::map<std::pair<std::string, int64_t>, Offline> windows;
  for (const Prediction& p : data.predictions) {
    Offline& w = windows[{p.model, (p.time_ms / kWindowMs) * kWindowMs}];
    ++w.predictions;
    if (p.labels == 0) {
      ++w.unlabelled;
      continue;
    }
    ++w.labelled;
    w.duplicates += p.labels - 1;
    const bool predicted = p.score >= 0.5;
    if (predicted && p.label == 1) ++w.tp;
    if (predicted && p.label == 0) ++w.fp;
    if (!predicted && p.label == 0) ++w.tn;
    if (!predicted && p.label == 1) ++w.fn;
  }
  return windows;
}

}  // namespace

TEST_CASE("labels on their own topic: realized metrics equal an offline join, 20+ SIGKILLs lose "
          "and repeat nothing, and maxOffsetsPerTrigger does not change the alerts",
          "[kafka][labels][performance][crash]") {
  const Data data = Generate();
  Admin admin;
  const std::string predictions = UniqueName("perf-predictions");
  const std::string labels = UniqueName("perf-labels");
  admin.CreateTopic(predictions, 2);
  admin.CreateTopic(labels, 2);
  for (int partition = 0; partition < 2; ++partition) {
    Produce(predictions, partition, data.prediction_records[static_cast<size_t>(partition)]);
    Produce(labels, partition, data.label_records[static_cast<size_t>(partition)]);
  }

  struct Outputs {
    std::vector<std::string> performance;
    std::vector<std::string> alerts;
  };
  auto run_clean = [&](const std::string& tag, int max_offsets) {
    TempDir dir("driftd-perf-" + tag);
    const std::string performance_out = UniqueName("perf-out-" + tag);
    const std::string alerts_out = UniqueName("perf-alerts-" + tag);
    admin.CreateTopic(performance_out, 1);
    admin.CreateTopic(alerts_out, 1);
    WriteFile(dir / "p.yaml", Pipeline(UniqueName("perf-" + tag), predictions, labels,
                                       performance_out, alerts_out, dir / "checkpoint",
                                       max_offsets));
    RunResult run = RunDriftd({"run", dir / "p.yaml", "--http", "off"},
                              std::chrono::seconds(180));
    INFO(run.output.substr(0, 3000));
    REQUIRE(run.exit_code == 0);
    return Outputs{ValuesOf(ReadSettled(performance_out)), ValuesOf(ReadSettled(alerts_out))};
  };

  // The crash-free reference.
  const Outputs reference = run_clean("reference", 100);

  // Each final row's realized metrics are the test's own join of the same records.
  const auto offline = Join(data);
  simdjson::dom::parser parser;
  int finals = 0;
  std::vector<std::string> alerting;
  for (const std::string& text : reference.performance) {
    simdjson::dom::element row = parser.parse(text);
    if (std::string_view(row["status"]) != "final") continue;
    ++finals;
    const std::string model{std::string_view(row["model"])};
    auto start = ParseIso8601Micros(std::string_view(row["window"]["start"]));
    REQUIRE(start);
    INFO(text);
    auto it = offline.find({model, *start / 1000});
    REQUIRE(it != offline.end());
    const Offline& w = it->second;
    CHECK(int64_t(row["predictions"]) == w.predictions);
    CHECK(int64_t(row["labelled"]) == w.labelled);
    CHECK(int64_t(row["unlabelled"]) == w.unlabelled);
    CHECK(int64_t(row["duplicate_labels"]) == w.duplicates);
    const double m = static_cast<double>(w.labelled);
    CHECK(double(row["realized"]["accuracy"]) == Approx((w.tp + w.tn) / m).margin(1e-12));
    CHECK(double(row["realized"]["precision"]) ==
          Approx(double(w.tp) / double(w.tp + w.fp)).margin(1e-12));
    CHECK(double(row["realized"]["recall"]) ==
          Approx(double(w.tp) / double(w.tp + w.fn)).margin(1e-12));
    CHECK(double(row["realized"]["f1"]) ==
          Approx(2.0 * w.tp / double(2 * w.tp + w.fp + w.fn)).margin(1e-12));
    CHECK(double(row["coverage"]) == Approx(m / double(w.predictions)).margin(1e-12));
  }
  // The watermark is the slower input's: 5 minutes behind the last prediction (120 minutes); a
  // window is final 40 minutes (the bound) after its end: the first 7 windows of each model,
  // m1's last two after its drop.
  CHECK(finals == 2 * 7);
  for (const std::string& text : reference.alerts) {
    simdjson::dom::element row = parser.parse(text);
    alerting.push_back(fmt::format("{} {} {}", std::string_view(row["model"]),
                                   std::string_view(row["series"]),
                                   std::string_view(row["level"])));
  }
  CHECK(std::count(alerting.begin(), alerting.end(), "m1 performance:accuracy ALERT") == 1);
  for (const std::string& alert : alerting) CHECK(alert.rfind("m0 ", 0) != 0);

  // Another batching: the same rows (but their batch ids) and the same alerts, ids included.
  const Outputs other = run_clean("batching", 1777);
  CHECK(WithoutBatch(other.performance) == WithoutBatch(reference.performance));
  CHECK(WithoutBatch(other.alerts) == WithoutBatch(reference.alerts));

  // The reference's pipeline killed again and again: exactly its rows, batch ids included.
  TempDir dir("driftd-perf-crashed");
  const std::string performance_out = UniqueName("perf-out-crashed");
  const std::string alerts_out = UniqueName("perf-alerts-crashed");
  admin.CreateTopic(performance_out, 1);
  admin.CreateTopic(alerts_out, 1);
  WriteFile(dir / "p.yaml", Pipeline(UniqueName("perf-crashed"), predictions, labels,
                                     performance_out, alerts_out, dir / "checkpoint", 100));
  const std::string log = dir / "lives.log";
  testing::CrashLoopOptions options;
  // A blind life ends within 300 ms of its start: with plans of 1-2 ms, one of up to 800 ms
  // read a large share of the batches, and a run ended after 14 kills.
  options.max_blind_delay = std::chrono::milliseconds(300);
  const int kills = KillRepeatedly(
      {DriftdBinary(), "run", dir / "p.yaml", "--http", "off"}, log,
      [&] { return static_cast<int64_t>(Occurrences(ReadFile(log), "\"batchId\":")); },
      [] { return false; }, options);
  INFO("kills " << kills);
  CHECK(kills >= 20);
  RunResult finish = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(180));
  INFO(finish.output.substr(0, 3000));
  REQUIRE(finish.exit_code == 0);
  CHECK(ValuesOf(ReadSettled(performance_out)) == reference.performance);
  CHECK(ValuesOf(ReadSettled(alerts_out)) == reference.alerts);
}

TEST_CASE("scale-out: labels on their own topic give one process's performance rows and alerts "
          "with one and with three processes",
          "[kafka][labels][performance][scale-out]") {
  const Data data = Generate();
  Admin admin;
  const std::string predictions = UniqueName("perf-so-predictions");
  const std::string labels = UniqueName("perf-so-labels");
  admin.CreateTopic(predictions, 2);
  admin.CreateTopic(labels, 2);
  for (int partition = 0; partition < 2; ++partition) {
    Produce(predictions, partition, data.prediction_records[static_cast<size_t>(partition)]);
    Produce(labels, partition, data.label_records[static_cast<size_t>(partition)]);
  }
  struct Run {
    TempDir dir{"driftd-perf-scaled"};
    std::string performance_out = UniqueName("perf-so-out");
    std::string alerts_out = UniqueName("perf-so-alerts");
  };
  auto prepare = [&](Run& run, bool scale_out) {
    admin.CreateTopic(run.performance_out, 1);
    admin.CreateTopic(run.alerts_out, 1);
    WriteFile(run.dir / "p.yaml",
              Pipeline(UniqueName("perf-so"), predictions, labels, run.performance_out,
                       run.alerts_out, run.dir / "checkpoint", 100, scale_out));
  };
  auto sorted = [](std::vector<std::string> rows) {
    rows = WithoutBatch(rows);
    std::sort(rows.begin(), rows.end());
    return rows;
  };

  Run reference;
  prepare(reference, false);
  RunResult clean = RunDriftd({"run", reference.dir / "p.yaml", "--http", "off"},
                              std::chrono::seconds(180));
  INFO(clean.output.substr(0, 3000));
  REQUIRE(clean.exit_code == 0);
  const std::vector<std::string> performance = ValuesOf(ReadSettled(reference.performance_out));
  const std::vector<std::string> alerts = ValuesOf(ReadSettled(reference.alerts_out));
  REQUIRE(performance.size() >= 2 * 7 * 2);  // each model's windows, estimated and final
  REQUIRE(!alerts.empty());

  for (int processes : {1, 3}) {
    INFO("scaled out, " << processes << " process(es)");
    Run run;
    prepare(run, true);
    std::vector<testing::ChildProcess> daemons;
    for (int i = 0; i < processes; ++i) {
      daemons.push_back(testing::ChildProcess::Start(
          {DriftdBinary(), "run", run.dir / "p.yaml", "--http", "off"},
          run.dir / fmt::format("log-{}", i), {{"INSTANCE", fmt::format("p{}", i)}}));
    }
    const bool complete = testing::WaitFor(
        [&] {
          return ReadAll(run.performance_out, "read_committed").size() >= performance.size() &&
                 ReadAll(run.alerts_out, "read_committed").size() >= alerts.size();
        },
        std::chrono::seconds(240));
    std::string logs;
    for (int i = 0; i < processes; ++i) {
      daemons[static_cast<size_t>(i)].Signal(SIGTERM);
      CHECK(daemons[static_cast<size_t>(i)].Wait(std::chrono::seconds(60)));
      const std::string log = ReadFile(run.dir / fmt::format("log-{}", i));
      logs += log.substr(log.size() > 6000 ? log.size() - 6000 : 0);
    }
    INFO(logs);
    REQUIRE(complete);
    CHECK(sorted(ValuesOf(ReadSettled(run.performance_out))) == sorted(performance));
    CHECK(sorted(ValuesOf(ReadSettled(run.alerts_out))) == sorted(alerts));
  }
}

}  // namespace driftd
