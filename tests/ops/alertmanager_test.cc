// driftd's alerts in a real Alertmanager (Debian's prometheus-alertmanager) as Prometheus would
// serve it: an alert fires, is re-sent while it lasts with a short endsAt (without a new row on
// the alerts stream), expires within alertmanagerEndsAfter once the daemon is killed, fires
// again with its first start when the daemon comes back, and resolves at once when the series
// is back. Alertmanager's own notifications (to a webhook receiver of the test) never pair a
// resolved warning with the firing critical alert.
#include <httplib.h>
#include <simdjson.h>

#include <mutex>
#include <thread>

#include "engine/time_iso8601.h"
#include "tests/ops/ops_util.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kResendSeconds = 1;
constexpr int kEndsAfterSeconds = 3;

// Alertmanager's notifications, as its webhook receiver gets them.
class NotificationReceiver {
 public:
  NotificationReceiver() {
    server_.Post("/notify", [this](const httplib::Request& request, httplib::Response&) {
      std::lock_guard<std::mutex> lock(mutex_);
      bodies_.push_back(request.body);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    REQUIRE(WaitFor([&] { return server_.is_running(); }, 10s));
  }
  ~NotificationReceiver() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::string> bodies_;
};

struct AmAlert {
  std::string model;
  std::string series;
  std::string severity;
  std::string state;  // active, suppressed (inhibited), unprocessed
  std::string summary;
  int64_t starts_us = 0;
  int64_t ends_us = 0;
  int64_t updated_us = 0;
};

std::string Text(simdjson::dom::element e, const char* key) {
  std::string_view v;
  return e[key].get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}

int64_t Time(simdjson::dom::element e, const char* key) {
  auto parsed = ParseIso8601Micros(Text(e, key));
  return parsed ? *parsed : 0;
}

class Alertmanager {
 public:
  Alertmanager(const TempDir& tmp, int notify_port) : port_(FreePort()) {
    WriteFileAt(tmp / "alertmanager.yml",
                fmt::format(R"(route:
  receiver: hook
  group_by: [alertname, pipeline, model, series]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - {{url: "http://127.0.0.1:{}/notify", send_resolved: true}}
inhibit_rules:
  - source_matchers: ['severity="critical"']
    target_matchers: ['severity="warning"']
    equal: [alertname, pipeline, model, series]
)",
                            notify_port));
    process_.emplace(ChildProcess::Start(
        {Which("prometheus-alertmanager"), "--config.file=" + (tmp / "alertmanager.yml"),
         "--storage.path=" + (tmp / "am-data"),
         "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--cluster.listen-address=",
         "--log.level=warn"},
        tmp / "alertmanager.log"));
    REQUIRE(WaitFor([&] { return HttpGet(port_, "/-/ready").status == 200; }, 60s));
  }
  ~Alertmanager() {
    if (process_) process_->Signal(SIGTERM);
  }
  int port() const { return port_; }

  /// The alerts Alertmanager holds as not resolved (its API leaves resolved ones out).
  std::vector<AmAlert> Alerts() {
    std::vector<AmAlert> out;
    HttpReply reply = HttpGet(port_, "/api/v2/alerts");
    if (reply.status != 200) return out;
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    simdjson::dom::array list;
    if (parser.parse(reply.body).get(root) != simdjson::SUCCESS ||
        root.get(list) != simdjson::SUCCESS) {
      return out;
    }
    for (simdjson::dom::element alert : list) {
      simdjson::dom::element labels = alert["labels"].value();
      AmAlert a;
      a.model = Text(labels, "model");
      a.series = Text(labels, "series");
      a.severity = Text(labels, "severity");
      a.state = Text(alert["status"].value(), "state");
      a.summary = Text(alert["annotations"].value(), "summary");
      a.starts_us = Time(alert, "startsAt");
      a.ends_us = Time(alert, "endsAt");
      a.updated_us = Time(alert, "updatedAt");
      out.push_back(a);
    }
    return out;
  }

  /// model-2's critical prediction alert, if Alertmanager has it.
  std::optional<AmAlert> Critical() {
    for (const AmAlert& alert : Alerts()) {
      if (alert.model == "model-2" && alert.series == "prediction" &&
          alert.severity == "critical") {
        return alert;
      }
    }
    return std::nullopt;
  }

 private:
  int port_;
  std::optional<ChildProcess> process_;
};

size_t AlertRows(const TempDir& tmp) { return FileSinkRows(tmp / "out/alerts").size(); }

TEST_CASE("a real Alertmanager: alerts fire, are re-sent, expire within alertmanagerEndsAfter "
          "after a kill -9, fire again after the restart and resolve when the series is back",
          "[ops][alertmanager][e2e]") {
  if (!Have("prometheus-alertmanager")) return;
  TempDir tmp("driftd-alertmanager");
  NotificationReceiver hook;
  Alertmanager alertmanager(tmp, hook.port());
  INFO(ReadFile(tmp / "alertmanager.log"));

  // model-2's prediction shifts by 3 sd after 1500 of its 3000 records.
  WriteFileAt(tmp / "input/1.jsonl", DriftRecords({.records_per_model = 3000}));
  const std::string sink = fmt::format(
      "  - {{name: alertmanager, format: webhook, stream: alerts, options: {{url: "
      "\"http://127.0.0.1:{}/api/v2/alerts\", template: alertmanager, "
      "alertmanagerResendInterval: {}, alertmanagerEndsAfter: {}}}}}\n",
      alertmanager.port(), kResendSeconds, kEndsAfterSeconds);
  WriteFileAt(tmp / "p.yaml", DriftPipelineYaml("am", tmp / "input", tmp / "out",
                                                "{processingTime: 200 milliseconds}", sink));
  auto start_daemon = [&](const std::string& log) {
    return ChildProcess::Start(
        {DriftdBinary(), "run", tmp / "p.yaml", "--http", "off", "--quiet-progress"}, tmp / log);
  };

  // Fire.
  std::optional<ChildProcess> daemon = start_daemon("log1.txt");
  INFO(ReadFile(tmp / "log1.txt"));
  REQUIRE(WaitFor([&] { return alertmanager.Critical().has_value(); }, 60s));
  const AmAlert fired = *alertmanager.Critical();
  CHECK(fired.state == "active");
  CHECK_THAT(fired.summary, Catch::StartsWith("ALERT model-2 prediction: "));
  for (const AmAlert& alert : alertmanager.Alerts()) {
    CHECK(alert.model == "model-2");
    // The warning fires beside the critical alert and the inhibit rule hides it.
    if (alert.severity == "warning") CHECK(alert.state == "suppressed");
  }

  // Re-sent while it lasts, each time with endsAt alertmanagerEndsAfter ahead, and without a
  // new row on the alerts stream.
  const size_t rows = AlertRows(tmp);
  CHECK(rows > 0);
  REQUIRE(WaitFor(
      [&] {
        auto critical = alertmanager.Critical();
        return critical && critical->ends_us > fired.ends_us + 1'500'000;
      },
      15s));
  const AmAlert resent = *alertmanager.Critical();
  CHECK(resent.starts_us == fired.starts_us);
  CHECK(resent.ends_us - resent.updated_us <= (kEndsAfterSeconds * 1000 + 500) * 1000);
  CHECK(resent.ends_us - resent.updated_us >= (kEndsAfterSeconds * 1000 - 500) * 1000);
  CHECK(AlertRows(tmp) == rows);

  // Killed: nothing resolves the alert but its endsAt, at most alertmanagerEndsAfter after the
  // last re-send, which came at most alertmanagerResendInterval before the kill.
  daemon->Signal(SIGKILL);
  REQUIRE(daemon->Wait(30s));
  daemon.reset();
  const auto killed = Clock::now();
  REQUIRE(WaitFor([&] { return alertmanager.Alerts().empty(); }, 30s));
  const double expired_s = std::chrono::duration<double>(Clock::now() - killed).count();
  WARN("the alert expired " << expired_s << " s after the kill (alertmanagerEndsAfter "
                            << kEndsAfterSeconds << " s)");
  CHECK(expired_s <= kEndsAfterSeconds + 1.0);
  CHECK(expired_s >= kEndsAfterSeconds - kResendSeconds - 0.5);  // its endsAt, nothing sooner
  // Alertmanager tells its receiver.
  auto resolved_notifications = [&](std::string_view summary_part) {
    size_t count = 0;
    for (const std::string& body : hook.bodies()) {
      if (body.find("\"status\":\"resolved\"") != std::string::npos &&
          body.find(summary_part) != std::string::npos) {
        ++count;
      }
    }
    return count;
  };
  REQUIRE(WaitFor([&] { return resolved_notifications("ALERT model-2 prediction") > 0; }, 30s));

  // Back: the firing set is re-sent at once and the alert fires again with its first start,
  // and the receiver hears of it again.
  auto firing_notifications = [&] {
    size_t count = 0;
    for (const std::string& body : hook.bodies()) {
      if (body.find("\"status\":\"firing\"") != std::string::npos) ++count;
    }
    return count;
  };
  const size_t firing_before = firing_notifications();
  CHECK(firing_before > 0);
  daemon.emplace(start_daemon("log2.txt"));
  INFO(ReadFile(tmp / "log2.txt"));
  REQUIRE(WaitFor([&] { return alertmanager.Critical().has_value(); }, 30s));
  CHECK(alertmanager.Critical()->starts_us == fired.starts_us);
  REQUIRE(WaitFor([&] { return firing_notifications() > firing_before; }, 30s));
  CHECK(AlertRows(tmp) == rows);

  // The series is back: RESOLVED ends both alerts at once (the daemon, re-sending every
  // second, would otherwise keep them), and the receiver reads that the series is back.
  WriteFileAt(tmp / "input/2.jsonl",
              DriftRecords({.records_per_model = 6000, .drifting_model = "", .from = 3000}));
  REQUIRE(WaitFor(
      [&] {
        for (const std::string& row : FileSinkRows(tmp / "out/alerts")) {
          if (row.find("\"level\":\"RESOLVED\"") != std::string::npos) return true;
        }
        return false;
      },
      60s));
  REQUIRE(WaitFor([&] { return alertmanager.Alerts().empty(); }, 5s));
  INFO("notifications: " << fmt::format("{}", fmt::join(hook.bodies(), "\n")));
  REQUIRE(WaitFor(
      [&] { return resolved_notifications("RESOLVED model-2 prediction is back: ") > 0; }, 30s));
  daemon->Signal(SIGTERM);
  CHECK(ExitStatus(daemon->Wait(30s)) == 0);

  // No notification ever paired a resolved warning with the firing critical alert.
  simdjson::dom::parser parser;
  for (const std::string& body : hook.bodies()) {
    INFO(body);
    simdjson::dom::element notification;
    REQUIRE(parser.parse(body).get(notification) == simdjson::SUCCESS);
    if (Text(notification, "status") != "firing") continue;
    simdjson::dom::array alerts = notification["alerts"].get_array().value();
    for (simdjson::dom::element alert : alerts) {
      CHECK(Text(alert, "status") == "firing");
      CHECK(Text(alert["labels"].value(), "model") == "model-2");
    }
  }
}

}  // namespace
}  // namespace driftd::testing
