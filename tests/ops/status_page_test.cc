// The status page in a real browser: headless Chromium (Debian's package) loads / from a
// daemon watching drifting data; the DOM (after the page loaded its data) must show the
// drifting model's series in ALERT and every other cell OK, each cell's calibrated score, the
// chart of the selected series in its statistic's units with its thresholds where the
// statistic reaches them and a time axis, since when the incident is open, and all of it again
// after a restart. The screenshot is kept under <build>/tests/artifacts/ for a person to look
// at.
#include <cmath>
#include <fstream>
#include <random>
#include <regex>

#include <simdjson.h>

#include "tests/ops/browser.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

// The element of `elements` whose attribute `key` is `value`.
const std::map<std::string, std::string>* Find(
    const std::vector<std::map<std::string, std::string>>& elements, const std::string& key,
    const std::string& value) {
  for (const auto& e : elements) {
    auto it = e.find(key);
    if (it != e.end() && it->second == value) return &e;
  }
  return nullptr;
}

// The y pixel of `value` on the chart's y axis, from its grid lines (value -> pixel).
double PixelOf(const std::vector<std::map<std::string, std::string>>& grid, double value) {
  REQUIRE(grid.size() >= 2);
  const double v0 = Number(grid.front().at("data-value")), y0 = Number(grid.front().at("y1"));
  const double v1 = Number(grid.back().at("data-value")), y1 = Number(grid.back().at("y1"));
  REQUIRE(v1 != v0);
  return y0 + (value - v0) * (y1 - y0) / (v1 - v0);
}

bool Near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

// The window end of the event that opened model-2's prediction incident, as the alerts sink
// wrote it.
std::string OpeningWindowEnd(const std::filesystem::path& alerts_dir) {
  simdjson::dom::parser parser;
  for (const std::string& row : FileSinkRows(alerts_dir)) {
    simdjson::dom::element e = parser.parse(row);
    if (std::string_view(e["model"]) != "model-2" ||
        std::string_view(e["series"]) != "prediction") {
      continue;
    }
    const std::string_view level = e["level"];
    const std::string_view previous = e["previous_level"];
    if ((level == "WARN" || level == "ALERT") && (previous == "OK" || previous == "RESOLVED")) {
      return std::string(std::string_view(e["window"]["end_time"]));
    }
  }
  return "";
}

struct SeriesFacts {
  std::string worst;
  double warn_threshold = 0;
  double alert_threshold = 0;
  size_t evaluated = 0;
};

SeriesFacts SeriesOf(int port, const std::string& model, const std::string& series) {
  HttpReply reply =
      HttpGet(port, "/api/series?pipeline=ops&model=" + model + "&series=" + series);
  REQUIRE(reply.status == 200);
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(reply.body);
  SeriesFacts facts;
  facts.worst = std::string(std::string_view(root["worst"]));
  for (simdjson::dom::element point : root["points"].get_array()) {
    if (!bool(point["evaluated"])) continue;
    ++facts.evaluated;
    for (simdjson::dom::element d : point["detectors"].get_array()) {
      if (std::string_view(d["detector"]) != facts.worst) continue;
      facts.warn_threshold = double(d["warn_threshold"]);
      facts.alert_threshold = double(d["alert_threshold"]);
    }
  }
  return facts;
}

TEST_CASE("the status page shows the drifting series in alert with its score, its chart in "
          "the statistic's units against its thresholds over time, since when, and all of it "
          "again after a restart",
          "[ops][browser][e2e]") {
  if (!Have("chromium")) return;
  TempDir tmp("driftd-status-page");
  // Six files read one a batch: each window closes in a batch of its own, at its own time.
  DriftingDaemon daemon = PrepareDriftingDaemon(tmp, 6);
  daemon.Start("log.txt");
  INFO(ReadFile(tmp / "log.txt"));
  REQUIRE(WaitFor([&] { return daemon.AllEvaluated(4, 15); }, 90s));

  // The page is one self-contained document: no script, style or font from anywhere else.
  HttpReply page = HttpGet(daemon.port, "/");
  REQUIRE(page.status == 200);
  CHECK_THAT(page.body, !Catch::Contains("<script src"));
  CHECK_THAT(page.body, !Catch::Contains("<link"));
  CHECK_THAT(page.body, !Catch::Contains("https://"));

  // What the data says, to hold the page to.
  simdjson::dom::parser parser;
  const std::string status_body = HttpGet(daemon.port, "/api/status").body;
  simdjson::dom::element status = parser.parse(status_body);
  simdjson::dom::element cell = status["pipelines"].at(0)["models"].at(2)["cells"]["prediction"];
  REQUIRE(std::string_view(status["pipelines"].at(0)["models"].at(2)["name"]) == "model-2");
  const std::string cell_worst{std::string_view(cell["worst"]["detector"])};
  const double cell_score = double(cell["worst"]["score"]);
  const SeriesFacts facts = SeriesOf(daemon.port, "model-2", "prediction");
  CHECK(facts.worst == cell_worst);  // one choice of "worst": the cell's is the chart's
  REQUIRE(facts.evaluated >= 5);
  REQUIRE(facts.alert_threshold > 0);
  const std::string opened_at = OpeningWindowEnd(tmp / "out/alerts");
  REQUIRE(!opened_at.empty());

  const std::string url = "http://127.0.0.1:" + std::to_string(daemon.port) + "/";
  const std::string dom = DumpDom(url, tmp / "profile-dom", tmp / "dom.html");
  INFO(dom.substr(0, 4000));
  REQUIRE_THAT(dom, Catch::Contains("data-loaded=\"true\""));

  // Every grid cell: its level, and the calibrated score of its worst detector as its text.
  const auto cells = Elements(dom, "td", "cell");
  CHECK(cells.size() == 12);  // 4 models x (prediction, feature_vector[0], feature_vector[1])
  static const std::regex score_text(R"(\d+\.\d)");
  for (const auto& c : cells) {
    INFO(c.at("data-model") << " " << c.at("data-series") << ": " << c.at("text"));
    const bool drifting = c.at("data-model") == "model-2" && c.at("data-series") == "prediction";
    CHECK(c.at("data-level") == (drifting ? "alert" : "ok"));
    CHECK(std::regex_match(c.at("text"), score_text));
    CHECK(std::abs(Number(c.at("text")) - Number(c.at("data-score"))) <= 0.05);
    if (drifting) {
      CHECK(c.at("data-detector") == cell_worst);
      CHECK(Near(Number(c.at("data-score")), cell_score));
      CHECK(Number(c.at("text")) >= 5.5);  // past the ALERT level, on the score's scale
    } else {
      CHECK(Number(c.at("text")) < 5.0);
    }
  }
  // The alert list names it, and the chart of the selected (alerting) series opens on the
  // cell's detector.
  CHECK(std::regex_search(dom, std::regex(R"re(<tr data-level="alert" data-model="model-2">)re")));
  CHECK_THAT(dom, Catch::Contains("model-2 / prediction (ops) over time"));
  CHECK_THAT(dom, Catch::Contains("<option value=\"" + cell_worst + "\" selected=\"\">"));

  // The thresholds are drawn in the statistic's units, where the statistic reaches them.
  const std::string chart = Section(dom, "series-chart", "distribution");
  const auto grid = Elements(chart, "line", "y-grid");
  const auto thresholds = Elements(chart, "path", "threshold");
  const auto* alert_line = Find(thresholds, "data-level", "alert");
  const auto* warn_line = Find(thresholds, "data-level", "warn");
  REQUIRE(alert_line != nullptr);
  REQUIRE(warn_line != nullptr);
  CHECK(Near(Number(alert_line->at("data-value")), facts.alert_threshold));
  CHECK(Near(Number(warn_line->at("data-value")), facts.warn_threshold));
  CHECK(std::abs(Number(alert_line->at("data-y")) - PixelOf(grid, facts.alert_threshold)) < 0.5);
  CHECK(std::abs(Number(warn_line->at("data-y")) - PixelOf(grid, facts.warn_threshold)) < 0.5);
  // Not on the zero line: a line at the score level (5.5) would be, under a statistic of this
  // size.
  CHECK(std::abs(Number(alert_line->at("data-y")) - PixelOf(grid, 0)) > 10);
  // The statistic's points, one per evaluated window, and a time axis in UTC.
  const auto points = Elements(chart, "circle", "point");
  CHECK(points.size() == facts.evaluated);
  const auto ticks = Elements(chart, "text", "x-tick");
  CHECK(ticks.size() >= 3);
  for (const auto& tick : ticks) CHECK(tick.count("data-time") == 1);
  CHECK_THAT(dom, Catch::Contains("window end (UTC)"));
  // The latest window's distribution beside the baseline's: psi's 10 bins each.
  CHECK(Elements(dom, "rect", "baseline").size() == 10);
  CHECK(Elements(dom, "rect", "window").size() == 10);

  // Since when: the window end of the event that opened the incident, in the grid's row and
  // in the incidents table; the models without one show nothing.
  const auto since = Elements(Section(dom, "grids", "incidents"), "td", "since");
  const auto* model2_since = Find(since, "data-model", "model-2");
  REQUIRE(model2_since != nullptr);
  CHECK(model2_since->at("data-since") == opened_at);
  for (const auto& s : since) {
    if (s.at("data-model") != "model-2") CHECK(s.at("text").empty());
  }
  static const std::regex incident_row(
      R"re(<tr data-level="alert" data-model="model-2" data-series="prediction">)re");
  CHECK(std::regex_search(dom, incident_row));

  std::vector<std::string> shot = Chromium(tmp / "profile-shot");
  const std::filesystem::path png = ArtifactsDir() / "status-page.png";
  std::filesystem::remove(png);
  shot.push_back("--screenshot=" + png.string());
  shot.push_back(url);
  RunToFile(shot, tmp / "shot.txt");
  REQUIRE(std::filesystem::exists(png));
  CHECK(std::filesystem::file_size(png) > 20'000);
  std::ifstream in(png, std::ios::binary);
  char signature[8] = {};
  in.read(signature, 8);
  CHECK(std::string(signature + 1, 3) == "PNG");
  std::printf("status page screenshot: %s\n", png.c_str());

  // After a restart (the input all read: nothing new comes), the page shows the same alert,
  // incident and history from the checkpoint.
  daemon.Stop();
  daemon.Start("log2.txt");
  REQUIRE(WaitFor([&] { return HttpGet(daemon.port, "/readyz").status == 200; }, 60s));
  const std::string again = DumpDom(url, tmp / "profile-restart", tmp / "dom2.html");
  INFO(again.substr(0, 4000));
  REQUIRE_THAT(again, Catch::Contains("data-loaded=\"true\""));
  CHECK(std::regex_search(again,
                          std::regex(R"re(<tr data-level="alert" data-model="model-2">)re")));
  const auto since_cells = Elements(Section(again, "grids", "incidents"), "td", "since");
  const auto* since_again = Find(since_cells, "data-model", "model-2");
  REQUIRE(since_again != nullptr);
  CHECK(since_again->at("data-since") == opened_at);
  const std::string chart_again = Section(again, "series-chart", "distribution");
  CHECK(Elements(chart_again, "circle", "point").size() == facts.evaluated);
  const auto thresholds_again = Elements(chart_again, "path", "threshold");
  const auto* alert_again = Find(thresholds_again, "data-level", "alert");
  REQUIRE(alert_again != nullptr);
  CHECK(Near(Number(alert_again->at("data-value")), facts.alert_threshold));
  CHECK(Elements(again, "rect", "window").size() == 10);
  daemon.Stop();
}

// Predictions with calibrated scores on one input, their labels 0-30 minutes of event time
// later on another; model m1's labels stop following its scores half way.
void WriteLabelledData(const std::filesystem::path& dir) {
  std::mt19937_64 random(20261204);
  std::uniform_real_distribution<double> uniform(0, 1);
  const int64_t t0 = 1'700'000'000'000;
  std::string predictions;
  std::vector<std::pair<int64_t, std::string>> labels;
  const int rows = 12'000;  // one a second: 200 minutes
  for (int i = 0; i < rows; ++i) {
    const int64_t t = t0 + int64_t(i) * 1000;
    const std::string model = fmt::format("m{}", i % 2);
    const double score = uniform(random);
    bool positive = uniform(random) < score;
    if (model == "m1" && i >= rows / 2 && uniform(random) < 0.5) positive = !positive;
    predictions += fmt::format(
        "{{\"request_id\":\"r{}\",\"model_id\":\"{}\",\"event_time\":{},\"score\":{:.6f}}}\n", i,
        model, t, score);
    if (uniform(random) < 0.05) continue;  // never labelled
    const int64_t label_time = t + static_cast<int64_t>(uniform(random) * 1'800'000);
    labels.emplace_back(label_time,
                        fmt::format("{{\"request_id\":\"r{}\",\"label\":{},\"event_time\":{}}}\n",
                                    i, positive ? 1 : 0, label_time));
  }
  std::stable_sort(labels.begin(), labels.end());
  std::string label_lines;
  for (const auto& [time, line] : labels) label_lines += line;
  WriteFileAt(dir / "predictions/part-0.jsonl", predictions);
  WriteFileAt(dir / "labels/part-0.jsonl", label_lines);
}

TEST_CASE("the status page shows each model's estimated performance with its band beside the "
          "realized performance and its label coverage",
          "[ops][browser][e2e][performance]") {
  if (!Have("chromium")) return;
  TempDir tmp("driftd-performance-page");
  WriteLabelledData(tmp.path());
  const std::string dir = tmp.path().string();
  WriteFileAt(tmp / "p.yaml", fmt::format(R"(name: perf
schema:
  - {{name: request_id, type: string, nullable: false}}
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: score, type: double}}
source:
  format: file
  options: {{path: {dir}/predictions}}
labels:
  source: {{format: file, options: {{path: {dir}/labels}}}}
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
  watermark: {{column: event_time, delay: 0 seconds, idleTimeout: 0}}
performance:
  prediction: score
  window: 30 minutes
  baselineWindows: 2
sinks:
  - {{name: performance, format: file, stream: performance,
     options: {{path: {dir}/out/performance}}}}
  - {{name: alerts, format: file, stream: alerts, options: {{path: {dir}/out/alerts}}}}
trigger: {{processingTime: 200 milliseconds}}
checkpointLocation: {dir}/out/checkpoint
)",
                                          fmt::arg("dir", dir)));
  const int port = FreePort();
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", dir + "/p.yaml", "--http",
                                     "127.0.0.1:" + std::to_string(port), "--quiet-progress"},
                                    dir + "/log.txt");
  INFO(ReadFile(tmp / "log.txt"));
  // The performance rows as the sink wrote them: per model, window end -> (estimate, band) and
  // (realized, coverage).
  struct Row {
    double estimate = NAN, low = NAN, high = NAN, realized = NAN, coverage = NAN;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;
  auto read_rows = [&] {
    rows.clear();
    simdjson::dom::parser parser;
    for (const std::string& line : FileSinkRows(tmp / "out/performance")) {
      simdjson::dom::element row = parser.parse(line);
      Row& r = rows[{std::string(std::string_view(row["model"])),
                     std::string(std::string_view(row["window"]["end"]))}];
      simdjson::dom::element estimated = row["estimated"];
      if (!estimated.is_null()) {
        r.estimate = double(estimated["accuracy"]);
        r.low = double(estimated["accuracy_low"]);
        r.high = double(estimated["accuracy_high"]);
      }
      simdjson::dom::element realized = row["realized"];
      if (std::string_view(row["status"]) == "final" && !realized.is_null()) {
        r.realized = double(realized["accuracy"]);
        r.coverage = double(row["coverage"]);
      }
    }
    int both = 0;
    for (const auto& [key, r] : rows) {
      both += std::isfinite(r.estimate) && std::isfinite(r.realized);
    }
    return both >= 4;  // two windows of each model with both
  };
  REQUIRE(WaitFor(read_rows, 90s));

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const std::string dom = DumpDom(url, tmp / "profile", tmp / "dom.html");
  INFO(dom.substr(0, 4000));
  REQUIRE_THAT(dom, Catch::Contains("data-loaded=\"true\""));
  for (const std::string model : {"m0", "m1"}) {
    INFO(model);
    CHECK_THAT(dom, Catch::Contains("class=\"perf\" data-model=\"" + model + "\""));
  }
  // Each window's row: the estimate inside its band, the realized value and its coverage, as
  // the performance stream has them.
  const auto windows = Elements(dom, "tr", "perf-window");
  const auto estimates = Elements(dom, "td", "estimated");
  const auto bands = Elements(dom, "td", "band");
  const auto realized = Elements(dom, "td", "realized");
  const auto coverage = Elements(dom, "td", "coverage");
  REQUIRE(windows.size() == estimates.size());
  REQUIRE(windows.size() == bands.size());
  REQUIRE(windows.size() == realized.size());
  REQUIRE(windows.size() == coverage.size());
  int compared = 0;
  for (size_t i = 0; i < windows.size(); ++i) {
    const std::string model = windows[i].at("data-model");
    const std::string end = windows[i].at("data-window-end");
    INFO(model << " " << end);
    auto row = rows.find({model, end});
    REQUIRE(row != rows.end());
    if (estimates[i].count("data-value") == 0 || realized[i].count("data-value") == 0) continue;
    ++compared;
    const double estimate = Number(estimates[i].at("data-value"));
    CHECK(Near(estimate, row->second.estimate));
    CHECK(Near(Number(bands[i].at("data-low")), row->second.low));
    CHECK(Near(Number(bands[i].at("data-high")), row->second.high));
    CHECK(row->second.low < estimate);
    CHECK(estimate < row->second.high);
    CHECK(Near(Number(realized[i].at("data-value")), row->second.realized));
    CHECK(Near(Number(coverage[i].at("data-coverage")), row->second.coverage));
    CHECK(row->second.coverage > 0.9);  // 5% are never labelled
  }
  CHECK(compared >= 4);
  // The chart: the estimate's band shaded, estimated and realized points.
  CHECK(Elements(dom, "path", "band").size() >= 2);
  CHECK(std::regex_search(dom, std::regex(R"re(<circle [^>]*data-name="estimated")re")));
  CHECK(std::regex_search(dom, std::regex(R"re(<circle [^>]*data-name="realized")re")));

  // After a restart the panel's windows are back from the checkpoint.
  auto panel = [&](int at) {
    std::map<std::string, std::pair<size_t, size_t>> out;  // model -> (estimated, realized)
    simdjson::dom::parser parser;
    const std::string body = HttpGet(at, "/api/status").body;
    for (simdjson::dom::element p : parser.parse(body)["pipelines"].at(0)["performance"]) {
      out[std::string(std::string_view(p["model"]))] = {p["estimated"].get_array().size(),
                                                        p["realized"].get_array().size()};
    }
    return out;
  };
  const auto before = panel(port);
  REQUIRE(before.size() == 2);
  daemon.Signal(SIGTERM);
  REQUIRE(ExitStatus(daemon.Wait(30s)) == 0);
  auto restarted = ChildProcess::Start({DriftdBinary(), "run", dir + "/p.yaml", "--http",
                                        "127.0.0.1:" + std::to_string(port), "--quiet-progress"},
                                       dir + "/log2.txt");
  REQUIRE(WaitFor([&] { return HttpGet(port, "/readyz").status == 200; }, 60s));
  CHECK(panel(port) == before);
  restarted.Signal(SIGTERM);
  CHECK(ExitStatus(restarted.Wait(30s)) == 0);
}

}  // namespace
}  // namespace driftd::testing
