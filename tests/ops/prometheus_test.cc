// The metrics as Prometheus sees them: promtool accepts /metrics, and a real Prometheus
// (Debian's package) scraping the daemon answers every query of the Grafana dashboard
// (deploy/grafana/driftd-dashboard.json) with data for every model, after the first
// evaluations and again after a restart with nothing new to read (the series of the stopped
// process are stale by then, so only what the restarted one exports counts).
#include <regex>

#include <httplib.h>
#include <simdjson.h>

#include "tests/ops/ops_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

struct Query {
  std::string panel;
  std::string expr;
};

std::vector<Query> DashboardQueries() {
  const std::string text = ReadFile(std::string(DRIFTD_SOURCE_DIR) + "/deploy/grafana/driftd-dashboard.json");
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(text);
  std::vector<Query> out;
  for (simdjson::dom::element panel : root["panels"].get_array()) {
    simdjson::dom::array targets;
    if (panel["targets"].get(targets) != simdjson::SUCCESS) continue;
    for (simdjson::dom::element target : targets) {
      out.push_back({std::string(std::string_view(panel["title"])),
                     std::string(std::string_view(target["expr"]))});
    }
  }
  return out;
}

std::string Substitute(std::string expr, const std::string& model) {
  auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t at = expr.find(from); at != std::string::npos; at = expr.find(from, at + to.size())) {
      expr.replace(at, from.size(), to);
    }
  };
  replace("$__rate_interval", "15s");
  replace("$pipeline", "ops");
  replace("$model", model);
  replace("$series", "prediction");
  replace("$job", "driftd");
  return expr;
}

class Prometheus {
 public:
  Prometheus(const TempDir& tmp, int target_port) : port_(FreePort()) {
    WriteFileAt(tmp / "prometheus.yml",
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n"
                "  - job_name: driftd\n"
                "    static_configs: [{targets: ['127.0.0.1:" +
                    std::to_string(target_port) + "']}]\n");
    process_.emplace(ChildProcess::Start(
        {Which("prometheus"), "--config.file=" + (tmp / "prometheus.yml"),
         "--storage.tsdb.path=" + (tmp / "tsdb"), "--web.listen-address=127.0.0.1:" + std::to_string(port_),
         "--log.level=warn"},
        tmp / "prometheus.log"));
    REQUIRE(WaitFor([&] { return HttpGet(port_, "/-/ready").status == 200; }, 60s));
  }
  ~Prometheus() {
    if (process_) process_->Signal(SIGTERM);
  }
  /// The number of series an instant query returns (-1 on an error).
  int Series(const std::string& expr, std::string* error = nullptr) {
    httplib::Client client("127.0.0.1", port_);
    auto reply = client.Post("/api/v1/query", httplib::Params{{"query", expr}});
    if (!reply || reply->status != 200) {
      if (error) *error = reply ? reply->body : "no answer";
      return -1;
    }
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (parser.parse(reply->body).get(root) != simdjson::SUCCESS) return -1;
    simdjson::dom::array result;
    if (root["data"]["result"].get(result) != simdjson::SUCCESS) return -1;
    return static_cast<int>(result.size());
  }

 private:
  int port_;
  std::optional<ChildProcess> process_;
};

void CheckEveryQuery(Prometheus& prometheus, const std::string& when) {
  for (const Query& query : DashboardQueries()) {
    const bool per_model = query.expr.find("$model") != std::string::npos;
    for (int i = 0; i < (per_model ? 4 : 1); ++i) {
      const std::string expr = Substitute(query.expr, per_model ? ModelName(i) : ".*");
      std::string error;
      INFO(when << ": panel '" << query.panel << "': " << expr << " " << error);
      CHECK(prometheus.Series(expr, &error) > 0);
    }
  }
}

TEST_CASE("promtool accepts /metrics, and every dashboard query has data for every model, "
          "after the first evaluations and after a restart",
          "[ops][prometheus][e2e]") {
  if (!Have("promtool") || !Have("prometheus")) return;
  TempDir tmp("driftd-prometheus");
  DriftingDaemon daemon = PrepareDriftingDaemon(tmp);
  daemon.Start("log.txt");
  INFO(ReadFile(tmp / "log.txt"));
  REQUIRE(WaitFor([&] { return daemon.AllEvaluated(4, 15); }, 90s));

  // promtool's lint: names, units, HELP and TYPE, counters ending in _total.
  WriteFileAt(tmp / "metrics.txt", HttpGet(daemon.port, "/metrics").body);
  const int promtool =
      std::system(("promtool check metrics < " + (tmp / "metrics.txt") + " > " + (tmp / "promtool.txt") + " 2>&1").c_str());
  INFO(ReadFile(tmp / "promtool.txt"));
  CHECK(promtool == 0);

  Prometheus prometheus(tmp, daemon.port);
  INFO(ReadFile(tmp / "prometheus.log"));
  // A few scrapes, so that rates over 15 s have their two points.
  REQUIRE(WaitFor([&] { return prometheus.Series("count_over_time(up{job=\"driftd\"}[1m]) >= 5") == 1; }, 60s));
  CheckEveryQuery(prometheus, "after the first evaluations");

  daemon.Stop();
  REQUIRE(WaitFor([&] { return prometheus.Series("up{job=\"driftd\"} == 0") == 1; }, 30s));
  daemon.Start("log2.txt");
  REQUIRE(WaitFor(
      [&] { return prometheus.Series("sum_over_time(up{job=\"driftd\"}[5s]) >= 5") == 1; }, 60s));
  // Nothing new was read: the gauges are the restored ones.
  CHECK(daemon.Metric("driftd_drift_evaluations_total", {{"pipeline", "ops"}, {"model", "model-2"}}) == 0);
  CheckEveryQuery(prometheus, "after a restart");
  daemon.Stop();
}

}  // namespace
}  // namespace driftd::testing
