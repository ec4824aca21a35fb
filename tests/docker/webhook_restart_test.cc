// The webhook sink inside the daemon: alerts of a drifting run go to a local receiver that
// refuses some requests, the daemon is killed with SIGKILL while alerts flow and restarted,
// and the receiver, de-duplicating by Idempotency-Key, ends with exactly the alerts that the
// exactly-once file sink of the same pipeline committed.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <simdjson.h>
#include <catch2/catch.hpp>

#include "connectors/file_sink.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

// Answers 503 to every third request and records the Idempotency-Key of the accepted ones.
class FlakyReceiver {
 public:
  FlakyReceiver() {
    server_.Post("/alerts", [this](const httplib::Request& request, httplib::Response& response) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (++requests_ % 3 == 0) {
        response.status = 503;
        return;
      }
      keys_.push_back(request.get_header_value("Idempotency-Key"));
      // A slow receiver keeps the first run busy long enough to be killed mid-stream.
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      response.status = 204;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // cpp-httplib 0.11 has no wait_until_ready(): poll until the accept loop runs.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE(server_.is_running());
  }
  ~FlakyReceiver() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mutex_);
    return keys_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  int requests_ = 0;
  std::vector<std::string> keys_;
};

std::string Pipeline(const testing::TempDir& dir, int port) {
  return fmt::format(R"(name: webhook-restart
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: feature_vector, type: array<double>}}
  - {{name: prediction, type: double}}
  - {{name: ground_truth, type: double}}
source:
  format: rate
  options:
    mode: inference
    rowsPerSecond: 2000
    realTime: false
    totalRows: 48000
    maxRowsPerTrigger: 1000
    startTimeMs: 1795000000000
    models: 4
    features: 4
    seed: 3
    drift: "model-1 feature 0 shifts by 3 sigma after 4 s; model-2 feature 1 shifts by 3 sigma after 10 s; model-3 prediction shifts by 3 sigma after 16 s"
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [feature_vector, prediction]
  baseline: {{type: warmup, records: 2000}}
  detectors:
    - {{type: mean_shift}}
    - {{type: psi}}
sinks:
  - name: hook
    format: webhook
    stream: alerts
    options:
      url: http://127.0.0.1:{}/alerts
      backoffInitialMs: 5
      backoffMaxMs: 50
  - name: record
    format: file
    stream: alerts
    options: {{path: {}}}
trigger: {{availableNow: true}}
checkpointLocation: {}
)",
                     port, dir / "alerts", dir / "checkpoint");
}

std::set<std::string> CommittedAlertIds(const std::string& path) {
  auto rows = ReadCommittedFileSinkRows(path);
  REQUIRE(rows);
  std::set<std::string> ids;
  simdjson::dom::parser parser;
  for (const std::string& row : *rows) {
    std::string_view id;
    REQUIRE(parser.parse(row).at_key("alert_id").get_string().get(id) == simdjson::SUCCESS);
    ids.emplace(id);
  }
  return ids;
}

TEST_CASE("every alert reaches a flaky webhook once per id across a SIGKILL and a restart",
          "[webhook][e2e][crash]") {
  testing::TempDir dir("driftd-webhook-restart");
  FlakyReceiver receiver;
  const std::string pipeline = dir / "pipeline.yaml";
  testing::WriteFile(pipeline, Pipeline(dir, receiver.port()));
  const std::vector<std::string> args = {testing::DriftdBinary(), "run",   "--http", "off",
                                         "--quiet-progress",      pipeline};

  {
    auto first = testing::ChildProcess::Start(args, dir / "first.log");
    bool alerted = testing::WaitFor([&] { return !receiver.keys().empty() || first.Exited(); },
                                    std::chrono::seconds(120));
    INFO(testing::ReadFile(dir / "first.log"));
    REQUIRE(alerted);
    REQUIRE_FALSE(first.Exited());  // killed while alerts flow, not after the end
    first.Signal(SIGKILL);
    auto status = first.Wait(std::chrono::seconds(10));
    REQUIRE(status);
    CHECK(WIFSIGNALED(*status));
  }
  const size_t before_restart = receiver.keys().size();

  auto second = testing::RunDriftd({"run", "--http", "off", "--quiet-progress", pipeline},
                                   std::chrono::seconds(180));
  INFO(second.output);
  REQUIRE(second.exit_code == 0);

  std::set<std::string> committed = CommittedAlertIds(dir / "alerts");
  std::vector<std::string> received = receiver.keys();
  std::set<std::string> unique(received.begin(), received.end());
  INFO("alerts committed: " << committed.size() << ", requests accepted: " << received.size()
                            << " (" << before_restart << " before the restart)");
  CHECK(committed.size() >= 3);  // three drifting models
  CHECK(unique == committed);    // none lost, none invented; duplicates only as retries
  CHECK(received.size() > before_restart);
}

}  // namespace
}  // namespace driftd
