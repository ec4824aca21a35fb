// `driftd report` opened as a person opens it: a file:// URL in headless Chromium with no
// network at all. Made from a checkpoint (while the daemon writes it) and from the running
// daemon, it must show per model and series the baseline's and the latest window's
// distributions side by side, the statistic against its thresholds over time, and the
// incident, as the daemon's own outputs have them.
#include <cmath>
#include <regex>

#include <simdjson.h>

#include "tests/ops/browser.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

bool Near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

int LevelRank(std::string_view level) {
  return level == "ALERT" ? 2 : level == "WARN" ? 1 : 0;
}

// What the daemon's sinks say of one series: its evaluated windows, the latest window's worst
// detector (by level, then score) and that detector's alert threshold, and the window end of
// the event that opened its incident.
struct Truth {
  int evaluated = 0;
  std::string worst;
  double alert_threshold = 0;
  std::string opened_at;
};

Truth TruthOf(const std::filesystem::path& out, const std::string& model,
              const std::string& series) {
  Truth truth;
  simdjson::dom::parser parser;
  for (const std::string& row : FileSinkRows(out / "evaluations")) {
    simdjson::dom::element e = parser.parse(row);
    if (std::string_view(e["model"]) != model || std::string_view(e["series"]) != series) continue;
    if (!bool(e["evaluated"])) continue;
    ++truth.evaluated;
    std::tuple<int, double> best{-1, 0};
    for (simdjson::dom::element d : e["detectors"].get_array()) {
      std::tuple<int, double> rank{LevelRank(std::string_view(d["level"])), double(d["score"])};
      if (rank > best) {
        best = rank;
        truth.worst = std::string(std::string_view(d["detector"]));
        truth.alert_threshold = double(d["alert_threshold"]);
      }
    }
  }
  for (const std::string& row : FileSinkRows(out / "alerts")) {
    simdjson::dom::element e = parser.parse(row);
    if (std::string_view(e["model"]) != model || std::string_view(e["series"]) != series) continue;
    const std::string_view level = e["level"];
    const std::string_view previous = e["previous_level"];
    if ((level == "WARN" || level == "ALERT") && (previous == "OK" || previous == "RESOLVED") &&
        truth.opened_at.empty()) {
      truth.opened_at = std::string(std::string_view(e["window"]["end_time"]));
    }
  }
  return truth;
}

// The part of the report's DOM that is one series' card.
std::string CardOf(const std::string& dom, const std::string& model, const std::string& series) {
  const std::string start = "<div class=\"series\" id=\"";
  size_t at = 0;
  while ((at = dom.find(start, at)) != std::string::npos) {
    const size_t end_of_tag = dom.find('>', at);
    const auto attributes = Attributes(dom.substr(at, end_of_tag - at));
    if (attributes.at("data-model") == model && attributes.at("data-series") == series) {
      const size_t next = dom.find(start, end_of_tag);
      return dom.substr(at, next == std::string::npos ? std::string::npos : next - at);
    }
    at = end_of_tag;
  }
  return "";
}

// What one report shows, checked against the truth; its bar shares, to compare reports.
std::vector<std::string> CheckReport(const std::string& dom, const Truth& truth) {
  REQUIRE_THAT(dom, Catch::Contains("data-loaded=\"true\""));
  // The drifting series: the latest window's values moved to the top bins, away from a
  // baseline spread over all ten.
  const std::string card = CardOf(dom, "model-2", "prediction");
  REQUIRE(!card.empty());
  CHECK_THAT(card, Catch::Contains("data-level=\"alert\""));
  const auto baseline = Elements(card, "rect", "baseline");
  const auto window = Elements(card, "rect", "window");
  REQUIRE(baseline.size() == 10);
  REQUIRE(window.size() == 10);
  std::vector<std::string> shares;
  double window_top = 0;
  for (size_t i = 0; i < 10; ++i) {
    CHECK(baseline[i].at("data-cell") == window[i].at("data-cell"));
    CHECK(Number(baseline[i].at("data-share")) < 0.25);
    if (i >= 8) window_top += Number(window[i].at("data-share"));
    shares.push_back(baseline[i].at("data-share") + "/" + window[i].at("data-share"));
  }
  CHECK(window_top > 0.6);
  // A series that did not drift: both spread over the bins.
  const std::string quiet = CardOf(dom, "model-0", "prediction");
  REQUIRE(!quiet.empty());
  for (const auto& bar : Elements(quiet, "rect", "window")) {
    CHECK(Number(bar.at("data-share")) < 0.3);
  }
  // The statistic over the evaluated windows, against the worst detector's thresholds.
  CHECK(Elements(card, "circle", "point").size() == static_cast<size_t>(truth.evaluated));
  const auto thresholds = Elements(card, "path", "threshold");
  bool alert_line = false;
  for (const auto& line : thresholds) {
    if (line.at("data-level") != "alert") continue;
    alert_line = true;
    CHECK(Near(Number(line.at("data-value")), truth.alert_threshold));
  }
  CHECK(alert_line);
  CHECK_THAT(card, Catch::Contains(truth.worst + ", the worst detector now"));
  CHECK(!Elements(card, "text", "x-tick").empty());
  // The incident, since the window that opened it; and the alert.
  const auto incidents = Elements(dom, "tr", "incident");
  REQUIRE(incidents.size() == 1);
  CHECK(incidents[0].at("data-model") == "model-2");
  CHECK(incidents[0].at("data-series") == "prediction");
  CHECK(incidents[0].at("data-level") == "alert");
  // When it was detected: the wall clock the daemon kept, or the commit log's time of the
  // batch that raised it (the checkpoint's entries keep no wall clock).
  const auto detected = Elements(dom, "td", "detected");
  REQUIRE(detected.size() == 1);
  CHECK(std::regex_match(detected[0].at("text"),
                         std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)")));
  const auto since = Elements(dom, "td", "since");
  REQUIRE(since.size() == 1);
  CHECK(since[0].at("data-since") == truth.opened_at);
  CHECK(std::regex_search(
      dom, std::regex(R"re(<tr class="alert" data-level="alert" data-model="model-2")re")));
  return shares;
}

TEST_CASE("driftd report, from a checkpoint or a running daemon, opens from a file with no "
          "network and shows each series' distributions, its statistic against its thresholds "
          "and the incident",
          "[ops][browser][e2e][report]") {
  if (!Have("chromium")) return;
  TempDir tmp("driftd-report");
  DriftingDaemon daemon = PrepareDriftingDaemon(tmp);
  daemon.Start("log.txt");
  INFO(ReadFile(tmp / "log.txt"));
  REQUIRE(WaitFor([&] { return daemon.AllEvaluated(4, 15); }, 90s));
  const Truth truth = TruthOf(tmp / "out", "model-2", "prediction");
  REQUIRE(truth.evaluated >= 5);
  REQUIRE(!truth.opened_at.empty());

  // From the checkpoint while the daemon holds it, and from the daemon.
  const std::string from_checkpoint = (tmp / "from-checkpoint.html");
  auto made = ChildProcess::Start({DriftdBinary(), "report", "--checkpoint",
                                   (tmp / "out/checkpoint"), "-o", from_checkpoint},
                                  (tmp / "report1.txt"));
  REQUIRE(ExitStatus(made.Wait(60s)) == 0);
  const std::string from_daemon = (tmp / "from-daemon.html");
  auto made_http = ChildProcess::Start({DriftdBinary(), "report", "--http",
                                        "127.0.0.1:" + std::to_string(daemon.port), "-o",
                                        from_daemon},
                                       (tmp / "report2.txt"));
  REQUIRE(ExitStatus(made_http.Wait(60s)) == 0);
  daemon.Stop();

  std::vector<std::vector<std::string>> shares;
  for (const std::string& file : {from_checkpoint, from_daemon}) {
    INFO(file);
    const std::string html = ReadFile(file);
    // Self-contained: nothing to fetch (the one "http://" is SVG's namespace name).
    CHECK_THAT(html, !Catch::Contains(" src="));
    CHECK_THAT(html, !Catch::Contains("<link"));
    CHECK_THAT(html, !Catch::Contains("href=\"http"));
    CHECK_THAT(html, !Catch::Contains("url("));
    CHECK_THAT(html, !Catch::Contains("@import"));
    CHECK_THAT(html, !Catch::Contains("https://"));
    const std::string dom =
        DumpDom("file://" + file, file + ".profile", file + ".dom", /*local_http=*/false);
    INFO(dom.substr(0, 3000));
    shares.push_back(CheckReport(dom, truth));
  }
  // The two ways give the same picture.
  CHECK(shares[0] == shares[1]);

  // A screenshot for a person to look at.
  std::vector<std::string> shot = Chromium(tmp / "profile-shot", /*local_http=*/false);
  const std::filesystem::path png = ArtifactsDir() / "report.png";
  std::filesystem::remove(png);
  shot.push_back("--screenshot=" + png.string());
  shot.push_back("file://" + from_checkpoint);
  RunToFile(shot, tmp / "shot.txt");
  CHECK(std::filesystem::exists(png));
  std::printf("report screenshot: %s\n", png.c_str());

  // Usage errors are said, not written.
  auto usage = ChildProcess::Start({DriftdBinary(), "report", "-o", (tmp / "x.html")},
                                   (tmp / "report3.txt"));
  CHECK(ExitStatus(usage.Wait(30s)) == 64);
  CHECK(!std::filesystem::exists(tmp / "x.html"));
}

}  // namespace
}  // namespace driftd::testing
