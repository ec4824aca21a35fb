// Model performance on generated data with known truth: how close the label-free estimate of a
// classifier's accuracy (CBPE as streaming sums) comes to the realized accuracy per window, how
// soon realized-performance, estimated-performance and multivariate (PCA reconstruction error)
// alerts come after a change and how many come without one, the label coverage, and the memory
// of the labels' join against its bound and the label rate.
//
//   performance_quality [--hours H] [--check] [--no-memory]
//
// One model, one prediction a second of event time, four features: x1 and x2 correlated 0.8,
// x3 and x4 independent, all N(0, 1). The true P(y = 1 | x) = sigmoid(1.6 x1 + 1.2 x3 - 0.6 x4),
// and the model's score is that probability (calibrated by construction). Labels come after an
// exponential delay (mean 20 minutes; beyond the 2-hour bound they are late), 5% never. Each
// scenario changes something at half time:
//   stable               nothing;
//   covariate shift      x1 and x3 shrink to 0.35 of their spread: scores crowd 0.5 and the
//                        accuracy drops, P(y | x) unchanged (the estimate holds);
//   concept drift        the labels follow sigmoid(0.25 w.x): the accuracy drops, the features
//                        and scores do not move (the estimate cannot see it);
//   correlation break    x2 independent of x1, every marginal unchanged, the model unaffected.
// The pipeline is a real one (config/loader) run through the performance and drift stages
// (engine/executor), in batches of 5 minutes of event time, the watermark at each batch's end.
// --check exits 1 when the gap target (0.02 where calibration holds) or a detection is missed,
// or an alert is false; --no-memory leaves out the join's memory (most of the run time).
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "config/loader.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/performance_stage.h"
#include "engine/json_decoder.h"
#include "engine/time_iso8601.h"

namespace driftd {
namespace {

constexpr int64_t kT0Ms = 1'795'946'400'000;  // a whole hour
constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kBatchMs = 5 * 60'000;

enum class Scenario { kStable, kCovariateShift, kConceptDrift, kCorrelationBreak };

const char* NameOf(Scenario s) {
  switch (s) {
    case Scenario::kStable: return "stable";
    case Scenario::kCovariateShift: return "covariate shift (accuracy drop, P(y|x) kept)";
    case Scenario::kConceptDrift: return "concept drift (accuracy drop, inputs kept)";
    case Scenario::kCorrelationBreak: return "correlation break (no marginal moves)";
  }
  return "";
}

std::string Pipeline(std::string_view within) {
  return fmt::format(R"(
name: performance-quality
schema:
  - {{name: request_id, type: string, nullable: false}}
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: score, type: double}}
  - {{name: x1, type: double}}
  - {{name: x2, type: double}}
  - {{name: x3, type: double}}
  - {{name: x4, type: double}}
source: {{format: file, options: {{path: /tmp/none}}}}
labels:
  source: {{format: file, options: {{path: /tmp/none}}}}
  schema:
    - {{name: request_id, type: string}}
    - {{name: label, type: int}}
    - {{name: event_time, type: timestamp}}
  key: request_id
  label: label
  within: {}
query:
  groupBy: [model_id]
  aggregates: [count]
  watermark: {{column: event_time, delay: 0 seconds}}
drift:
  series: [x1, x2, x3, x4]
  multivariate: {{}}
performance:
  prediction: score
  window: 1 hour
sinks:
  - {{name: performance, format: console, stream: performance}}
  - {{name: alerts, format: console, stream: alerts}}
)",
                     within);
}

struct Label {
  int64_t time_ms;
  std::string record;
};

// A scenario's records: predictions in time order, labels in label-time order.
struct Stream {
  std::vector<std::pair<int64_t, std::string>> predictions;
  std::vector<Label> labels;
};

double Sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

Stream Generate(Scenario scenario, int64_t hours, int64_t change_ms, int per_second,
                double labelled_share, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::exponential_distribution<double> delay(1 / 1200.0);  // seconds
  Stream s;
  const int64_t n = hours * 3600 * per_second;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = kT0Ms + i * 1000 / per_second;
    const bool after = t >= change_ms;
    double x1 = normal(random);
    double x2 = 0.8 * x1 + 0.6 * normal(random);
    double x3 = normal(random);
    const double x4 = normal(random);
    if (after && scenario == Scenario::kCorrelationBreak) x2 = normal(random);
    if (after && scenario == Scenario::kCovariateShift) {
      x1 *= 0.35;
      x2 = 0.8 * x1 + 0.6 * normal(random);  // the features move together as before
      x3 *= 0.35;
    }
    const double z = 1.6 * x1 + 1.2 * x3 - 0.6 * x4;
    const double score = Sigmoid(z);
    const double truth = after && scenario == Scenario::kConceptDrift ? Sigmoid(0.25 * z) : score;
    const int y = uniform(random) < truth ? 1 : 0;
    const std::string id = fmt::format("r{}", i);
    s.predictions.emplace_back(
        t, fmt::format(R"({{"request_id":"{}","model_id":"m","event_time":{},"score":{:.6f},)"
                       R"("x1":{:.6f},"x2":{:.6f},"x3":{:.6f},"x4":{:.6f}}})",
                       id, t, score, x1, x2, x3, x4));
    if (uniform(random) >= labelled_share) continue;  // never labelled
    const int64_t at = t + static_cast<int64_t>(delay(random) * 1000);
    s.labels.push_back(
        {at, fmt::format(R"({{"request_id":"{}","label":{},"event_time":{}}})", id, y, at)});
  }
  std::stable_sort(s.labels.begin(), s.labels.end(),
                   [](const Label& a, const Label& b) { return a.time_ms < b.time_ms; });
  return s;
}

// Decodes JSON records into a batch of `schema` with their event times.
void Decode(const Schema& schema, const std::vector<const std::string*>& records,
            size_t time_column, RecordBatch& batch, RowTimes& times, int64_t late_before_us) {
  JsonDecoder decoder(schema, MalformedSpec{});
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) {
    chunk.Append(*records[i], {0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  batch.Reset(schema);
  if (!decoder.Decode(chunk, batch, nullptr)) std::abort();
  times.event_us.clear();
  times.late_before.clear();
  for (size_t row = 0; row < batch.num_rows; ++row) {
    times.event_us.push_back(batch.columns[time_column].i64[row]);
    times.late_before.push_back(late_before_us);
  }
}

struct WindowResult {
  int64_t start_ms = 0;
  double estimated = NAN, low = NAN, high = NAN;
  double realized = NAN;
  double coverage_at_end = NAN, coverage = NAN;
  std::string status;
};

struct AlertSeen {
  std::string series;
  std::string level;
  int64_t emitted_ms;  // the batch's end (event time) when it came out
  int64_t window_end_ms;  // the performance window's end; the batch's end for drift windows
};

struct Outcome {
  std::map<int64_t, WindowResult> windows;
  std::vector<AlertSeen> alerts;
  int64_t peak_pending = 0;
  size_t peak_heap = 0;
  // Labels the join did not take: no prediction waited (it came after the bound passed),
  // too far from their prediction, or behind the watermark.
  int64_t labels_without_prediction = 0;
  int64_t labels_outside_bound = 0;
  int64_t labels_late = 0;
};

size_t HeapInUse() { return mallinfo2().uordblks; }

Outcome Run(const Stream& stream, const PipelineSpec& spec, int64_t end_ms, bool drift) {
  Outcome out;
  auto perf = PerformanceStage::Create(spec);
  if (!perf) {
    fmt::print(stderr, "{}\n", perf.error().message());
    std::exit(2);
  }
  std::unique_ptr<DriftStage> drift_stage;
  if (drift) {
    auto created = DriftStage::Create(spec);
    if (!created) {
      fmt::print(stderr, "{}\n", created.error().message());
      std::exit(2);
    }
    drift_stage = std::move(*created);
  }
  const Schema labels_schema = spec.labels.schema;
  const size_t heap_before = HeapInUse();
  simdjson::dom::parser parser;
  size_t p = 0, l = 0;
  int64_t watermark_us = INT64_MIN;
  int64_t batch_id = 0;
  for (int64_t batch_end = kT0Ms + kBatchMs; batch_end <= end_ms; batch_end += kBatchMs) {
    int64_t pending = 0;
    {
    std::vector<const std::string*> predictions;
    while (p < stream.predictions.size() && stream.predictions[p].first < batch_end) {
      predictions.push_back(&stream.predictions[p++].second);
    }
    std::vector<const std::string*> labels;
    while (l < stream.labels.size() && stream.labels[l].time_ms < batch_end) {
      labels.push_back(&stream.labels[l++].record);
    }
    BatchOutput output;
    RecordBatch batch;
    RowTimes times;
    if (!predictions.empty()) {
      Decode(spec.schema, predictions, 2, batch, times, watermark_us);
      (*perf)->Process(batch, times, output);
      if (drift_stage) drift_stage->Process(batch, times, output);
    }
    if (!labels.empty()) {
      Decode(labels_schema, labels, 2, batch, times, watermark_us);
      (*perf)->ProcessLabels(batch, times);
    }
    watermark_us = batch_end * 1000;
    BatchContext context;
    context.batch_id = batch_id++;
    context.now_ms = batch_end;
    context.watermark_us = watermark_us;
    context.next_watermark_us = watermark_us;
    StateChanges changes;
    StageProgress progress;
    (*perf)->Finish(context, output, changes, progress);
    if (drift_stage) drift_stage->Finish(context, output, changes, progress);
    pending = progress.join.pending;
    out.labels_without_prediction += progress.join.labels_without_prediction;
    out.labels_outside_bound += progress.join.labels_outside_bound;
    out.labels_late += progress.join.labels_late;
    for (const std::string& text : output.performance.rows) {
      simdjson::dom::element row = parser.parse(text);
      const int64_t start =
          *ParseIso8601Micros(std::string_view(row["window"]["start"])) / 1000;
      WindowResult& w = out.windows[start];
      w.start_ms = start;
      w.status = std::string(std::string_view(row["status"]));
      simdjson::dom::element estimated = row["estimated"];
      if (!estimated.is_null()) {
        w.estimated = double(estimated["accuracy"]);
        w.low = double(estimated["accuracy_low"]);
        w.high = double(estimated["accuracy_high"]);
      }
      if (w.status == "estimated") {
        w.coverage_at_end = double(row["coverage_at_window_end"]);
      } else {
        w.coverage = double(row["coverage"]);
        simdjson::dom::element realized = row["realized"];
        if (!realized.is_null()) w.realized = double(realized["accuracy"]);
      }
    }
    for (const std::string& text : output.alerts.rows) {
      simdjson::dom::element row = parser.parse(text);
      AlertSeen a;
      a.series = std::string(std::string_view(row["series"]));
      a.level = std::string(std::string_view(row["level"]));
      a.emitted_ms = batch_end;
      a.window_end_ms = batch_end;
      std::string_view end;
      if (row["window"]["end"].get(end) == simdjson::SUCCESS) {
        if (auto micros = ParseIso8601Micros(end)) a.window_end_ms = *micros / 1000;
      }
      out.alerts.push_back(std::move(a));
    }
    }
    // The state after the batch, its input and output gone.
    out.peak_pending = std::max(out.peak_pending, pending);
    const size_t heap = HeapInUse();
    out.peak_heap = std::max(out.peak_heap, heap - std::min(heap, heap_before));
  }
  return out;
}

struct Detection {
  int false_alerts = 0;           // WARN/ALERT about data before the change (or with no change)
  std::optional<int64_t> delay;   // from the change to the first ALERT about data after it
};

// `family`: the series prefix ("performance:", "estimated:", "multivariate:"); `change_ms`:
// INT64_MAX when nothing changes.
Detection Detect(const Outcome& o, std::string_view family, int64_t change_ms) {
  Detection d;
  for (const AlertSeen& a : o.alerts) {
    if (!a.series.starts_with(family)) continue;
    if (a.level != "WARN" && a.level != "ALERT") continue;
    if (a.window_end_ms <= change_ms) {
      ++d.false_alerts;
    } else if (a.level == "ALERT" && !d.delay) {
      d.delay = a.emitted_ms - change_ms;
    }
  }
  return d;
}

std::string Minutes(std::optional<int64_t> ms) {
  return ms ? fmt::format("{:.0f} min", static_cast<double>(*ms) / 60'000) : "none";
}

PipelineSpec SpecOf(const std::string& yaml) {
  auto spec = ParsePipeline(yaml, "performance-quality.yaml", LoadOptions{});
  if (!spec) {
    fmt::print(stderr, "{}\n", FormatProblems("performance-quality.yaml", spec.error()));
    std::exit(2);
  }
  return *spec;
}

}  // namespace
}  // namespace driftd

int main(int argc, char** argv) {
  using namespace driftd;
  int64_t hours = 24;
  bool check = false;
  bool memory = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hours") == 0 && i + 1 < argc) hours = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--check") == 0) check = true;
    if (std::strcmp(argv[i], "--no-memory") == 0) memory = false;
  }
  bool failed = false;
  const PipelineSpec spec = SpecOf(Pipeline("2 hours"));
  const int64_t change_ms = kT0Ms + hours / 2 * kHourMs;
  const int64_t end_ms = kT0Ms + (hours + 3) * kHourMs;  // the last labels and the bound
  fmt::print("performance_quality: {} h of one prediction a second per scenario, windows of 1 h, "
             "labels after Exp(mean 20 min), 5% never, bound 2 h; change at hour {}\n\n",
             hours, hours / 2);
  for (Scenario scenario : {Scenario::kStable, Scenario::kCovariateShift,
                            Scenario::kConceptDrift, Scenario::kCorrelationBreak}) {
    const Stream stream = Generate(scenario, hours, change_ms, 1, 0.95, 7);
    const Outcome o = Run(stream, spec, end_ms, /*drift=*/true);
    const bool changes = scenario != Scenario::kStable;
    const int64_t change = changes ? change_ms : INT64_MAX;
    fmt::print("## {}\n", NameOf(scenario));
    fmt::print("hour  estimated [95% band]       realized  gap     coverage at end / final\n");
    double gap_before = 0, gap_after = 0;
    int n_before = 0, n_after = 0;
    for (const auto& [start, w] : o.windows) {
      if (w.status == "estimated") continue;  // no final row (yet): not a whole window
      const int hour = static_cast<int>((start - kT0Ms) / kHourMs);
      const double gap = std::fabs(w.estimated - w.realized);
      fmt::print("{:>4}  {}  {}  {}  {:.2f} / {:.2f}\n", hour,
                 std::isfinite(w.estimated)
                     ? fmt::format("{:.3f} [{:.3f}, {:.3f}]", w.estimated, w.low, w.high)
                     : std::string("(baseline)           "),
                 std::isfinite(w.realized) ? fmt::format("{:.3f}   ", w.realized)
                                           : std::string("-       "),
                 std::isfinite(gap) ? fmt::format("{:+.3f}", w.estimated - w.realized)
                                    : std::string("      "),
                 w.coverage_at_end, w.coverage);
      if (!std::isfinite(gap)) continue;
      if (start + kHourMs <= change_ms) {
        gap_before += gap;
        ++n_before;
      } else if (start >= change_ms) {
        gap_after += gap;
        ++n_after;
      }
    }
    const double mean_before = n_before ? gap_before / n_before : NAN;
    const double mean_after = n_after ? gap_after / n_after : NAN;
    fmt::print("mean |estimated - realized|: before the change {:.4f} ({} windows), after {:.4f} "
               "({} windows)\n",
               mean_before, n_before, mean_after, n_after);
    const bool calibrated = scenario != Scenario::kConceptDrift;
    if (check && (mean_before > 0.02 || (calibrated && mean_after > 0.02))) failed = true;
    for (auto [family, name] : std::initializer_list<std::pair<const char*, const char*>>{
             {"performance:", "realized-performance"},
             {"estimated:", "estimated-performance"},
             {"multivariate:", "multivariate"}}) {
      const Detection d = Detect(o, family, change);
      fmt::print("{} alerts: first ALERT {} after the change, {} false (WARN/ALERT about data "
                 "before it{})\n",
                 name, changes ? Minutes(d.delay) : std::string("-"), d.false_alerts,
                 changes ? "" : ", or anywhere");
      if (!check) continue;
      if (d.false_alerts > 0) failed = true;
      const bool expected =
          (scenario == Scenario::kCovariateShift &&
           std::string_view(family) != "multivariate:") ||
          (scenario == Scenario::kConceptDrift && std::string_view(family) == "performance:") ||
          (scenario == Scenario::kCorrelationBreak &&
           std::string_view(family) == "multivariate:");
      if (expected && !d.delay) failed = true;
    }
    int univariate = 0;
    for (const AlertSeen& a : o.alerts) {
      if (a.series.size() == 2 && a.series[0] == 'x' && a.level != "OK" &&
          a.level != "RESOLVED") {
        ++univariate;
      }
    }
    fmt::print("univariate drift alerts on x1..x4: {}; labels after the bound (counted, not "
               "joined): {} without a prediction, {} outside the bound, {} late\n\n",
               univariate, o.labels_without_prediction, o.labels_outside_bound, o.labels_late);
  }

  // The join's memory: predictions wait up to the bound; what waits is about bound x rate
  // (predictions and labels: peak pending counts both).
  if (!memory) return check && failed ? 1 : 0;
  fmt::print("## memory of the labels' join (heap in use by the performance stage)\n");
  fmt::print("bound      predictions/s  labelled  peak pending  peak heap    bytes per bound x rate\n");
  for (auto [bound, bound_ms] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"30 minutes", 30 * 60'000}, {"2 hours", 2 * kHourMs}, {"8 hours", 8 * kHourMs}}) {
    for (int rate : {1, 10}) {
      for (double share : {0.95, 0.5}) {
        const int64_t span_h = std::max<int64_t>(2, 2 * bound_ms / kHourMs + 1);
        const Stream stream = Generate(Scenario::kStable, span_h, INT64_MAX, rate, share, 11);
        const PipelineSpec memory_spec = SpecOf(Pipeline(bound));
        const Outcome o = Run(stream, memory_spec, kT0Ms + span_h * kHourMs, /*drift=*/false);
        fmt::print("{:<11}{:>5}        {:>5.0f}%   {:>10}  {:>8.1f} MB  {:>6.0f}\n", bound, rate,
                   share * 100,
                   o.peak_pending, static_cast<double>(o.peak_heap) / 1e6,
                   static_cast<double>(o.peak_heap) /
                       (static_cast<double>(bound_ms) / 1000 * rate));
      }
    }
  }
  if (check && failed) {
    fmt::print("FAILED: a target was missed\n");
    return 1;
  }
  return 0;
}
