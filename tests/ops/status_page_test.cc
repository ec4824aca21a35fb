// The status page in a real browser: headless Chromium (Debian's package) loads / from a
// daemon watching drifting data; the DOM must show the drifting model's series in ALERT and
// every other cell OK, the alert in the list and the series chart with its thresholds. The
// screenshot is kept under <build>/tests/artifacts/ for a person to look at.
#include <fstream>
#include <regex>

#include "tests/ops/ops_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

// Chromium with nothing that reaches out of the machine, and a profile of its own.
std::vector<std::string> Chromium(const std::string& profile) {
  return {Which("chromium"),
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--user-data-dir=" + profile,
          "--window-size=1400,2000",
          "--virtual-time-budget=15000"};
}

std::string Run(std::vector<std::string> argv, const std::string& output) {
  auto child = ChildProcess::Start(argv, output);
  auto status = child.Wait(120s);
  REQUIRE(status.has_value());
  return ReadFile(output);
}

std::map<std::string, std::string> Attributes(const std::string& tag) {
  std::map<std::string, std::string> out;
  static const std::regex attribute(R"re(([a-z-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(tag.begin(), tag.end(), attribute);
       it != std::sregex_iterator(); ++it) {
    out[(*it)[1].str()] = (*it)[2].str();
  }
  return out;
}

TEST_CASE("the status page shows the drifting model's series in alert, the others ok",
          "[ops][browser][e2e]") {
  if (!Have("chromium")) return;
  TempDir tmp("driftd-status-page");
  DriftingDaemon daemon = PrepareDriftingDaemon(tmp);
  daemon.Start("log.txt");
  INFO(ReadFile(tmp / "log.txt"));
  REQUIRE(WaitFor([&] { return daemon.AllEvaluated(4, 15); }, 90s));

  // The page is one self-contained document: no script, style or font from anywhere else.
  HttpReply page = HttpGet(daemon.port, "/");
  REQUIRE(page.status == 200);
  CHECK_THAT(page.body, !Catch::Contains("<script src"));
  CHECK_THAT(page.body, !Catch::Contains("<link"));
  CHECK_THAT(page.body, !Catch::Contains("https://"));

  const std::string url = "http://127.0.0.1:" + std::to_string(daemon.port) + "/";
  std::vector<std::string> dump = Chromium(tmp / "profile-dom");
  dump.push_back("--dump-dom");
  dump.push_back(url);
  const std::string dom = Run(dump, tmp / "dom.html");
  INFO(dom.substr(0, 4000));
  REQUIRE_THAT(dom, Catch::Contains("data-loaded=\"true\""));

  // Every grid cell: (model, series) -> level.
  std::map<std::pair<std::string, std::string>, std::string> levels;
  static const std::regex cell(R"re(<td [^>]*class="cell [^>]*>)re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), cell); it != std::sregex_iterator();
       ++it) {
    auto a = Attributes(it->str());
    levels[{a["data-model"], a["data-series"]}] = a["data-level"];
  }
  CHECK(levels.size() == 12);  // 4 models x (prediction, feature_vector[0], feature_vector[1])
  for (const auto& [key, level] : levels) {
    INFO(key.first << " " << key.second);
    const bool drifting = key.first == "model-2" && key.second == "prediction";
    CHECK(level == (drifting ? "alert" : "ok"));
  }
  // The alert list names it, and the chart of the selected (alerting) series is drawn with
  // its warn and alert thresholds.
  CHECK(std::regex_search(dom, std::regex(R"re(<tr data-level="alert" data-model="model-2">)re")));
  CHECK_THAT(dom, Catch::Contains("model-2 / prediction (ops) over time"));
  CHECK_THAT(dom, Catch::Contains("class=\"threshold\" data-level=\"alert\""));
  CHECK_THAT(dom, Catch::Contains("class=\"line\""));

  std::vector<std::string> shot = Chromium(tmp / "profile-shot");
  const std::filesystem::path png = ArtifactsDir() / "status-page.png";
  std::filesystem::remove(png);
  shot.push_back("--screenshot=" + png.string());
  shot.push_back(url);
  Run(shot, tmp / "shot.txt");
  REQUIRE(std::filesystem::exists(png));
  CHECK(std::filesystem::file_size(png) > 20'000);
  std::ifstream in(png, std::ios::binary);
  char signature[8] = {};
  in.read(signature, 8);
  CHECK(std::string(signature + 1, 3) == "PNG");
  std::printf("status page screenshot: %s\n", png.c_str());
  daemon.Stop();
}

}  // namespace
}  // namespace driftd::testing
