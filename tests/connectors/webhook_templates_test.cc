// Webhook bodies for the receivers operators route alerts to (Slack, PagerDuty Events v2,
// Alertmanager's API), each accepted by a local receiver that checks the documented shape,
// and the per-sink failure policy: a refused row goes to the dead-letter file (or is dropped)
// and the rest of the batch goes on; a receiver that never answers costs at most the budget.
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <simdjson.h>
#include <catch2/catch.hpp>

#include "connectors/registry.h"
#include "connectors/webhook_sink.h"
#include "engine/time_iso8601.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

// Answers each request with what `check` says: 200 and an empty string when the body has the
// documented shape, else 400 and the problem. Keeps the bodies and the problems.
class ShapeReceiver {
 public:
  using Check = std::function<std::string(simdjson::dom::element body)>;
  explicit ShapeReceiver(Check check, int delay_ms = 0) : check_(std::move(check)) {
    server_.Post(".*", [this, delay_ms](const httplib::Request& request,
                                         httplib::Response& response) {
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      simdjson::dom::parser parser;
      simdjson::dom::element body;
      std::string problem;
      if (parser.parse(request.body).get(body) != simdjson::SUCCESS) {
        problem = "not JSON";
      } else {
        problem = check_(body);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      bodies_.push_back(request.body);
      if (!problem.empty()) problems_.push_back(problem);
      response.status = problem.empty() ? 200 : 400;
      response.set_content(problem.empty() ? "ok" : problem, "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE(server_.is_running());
  }
  ~ShapeReceiver() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/hook", port_); }
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }
  std::vector<std::string> problems() {
    std::lock_guard<std::mutex> lock(mutex_);
    return problems_;
  }

 private:
  Check check_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::string> bodies_;
  std::vector<std::string> problems_;
};

PipelineSpec HookPipeline(const std::string& checkpoint,
                          const std::map<std::string, std::string>& given) {
  PipelineSpec pipeline;
  pipeline.name = "fraud";
  pipeline.checkpoint_location = checkpoint;
  SinkSpec spec;
  spec.name = "route";
  spec.format = "webhook";
  spec.stream = StreamKind::kAlerts;
  std::map<std::string, std::string> options = {{"backoffInitialMs", "1"}, {"backoffMaxMs", "20"}};
  for (const auto& [name, value] : given) options[name] = value;
  spec.options = testing::WithDefaults("webhook", ConnectorRole::kSink, options);
  pipeline.sinks.push_back(spec);
  return pipeline;
}

std::unique_ptr<Sink> Open(const PipelineSpec& pipeline) {
  auto sinks = CreateSinks(pipeline);
  INFO((sinks ? "" : sinks.error().message()));
  REQUIRE(sinks);
  std::unique_ptr<Sink> sink = std::move(sinks->front());
  REQUIRE(sink->Open());
  return sink;
}

// An alert row as the drift monitor writes it (AlertEvent::ToJson).
std::string Alert(const std::string& id, const std::string& level, const std::string& previous,
                  const std::string& incident = "inc-1") {
  return fmt::format(
      R"({{"alert_id":"{}","incident_id":"{}","level":"{}","previous_level":"{}","model":"model-2","series":"feature_vector[3]","detector":"psi","statistic":4.164,"threshold":0.25,"window":{{"start_record":6000,"end_record":7000,"start_time":"2023-11-14T22:14:11.000Z","end_time":"2023-11-14T22:14:12.000Z","n":1000,"mean":2.654,"stddev":1.1}},"baseline":{{"type":"warmup","n":1000,"mean":0.5795,"stddev":1.019}},"batch_id":5}})",
      id, incident, level, previous);
}

BatchOutput Batch(int64_t id, const std::vector<std::string>& rows) {
  BatchOutput output;
  output.batch_id = id;
  for (const std::string& row : rows) output.alerts.Add("model-2", row);
  return output;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string NonEmptyString(simdjson::dom::element e, const char* key) {
  std::string_view value;
  if (e[key].get(value) != simdjson::SUCCESS || value.empty()) {
    return fmt::format("'{}' must be a non-empty string", key);
  }
  return "";
}

TEST_CASE("the slack template is what a Slack incoming webhook accepts", "[connectors][webhook]") {
  testing::TempDir dir;
  ShapeReceiver slack([](simdjson::dom::element body) -> std::string {
    if (auto p = NonEmptyString(body, "text"); !p.empty()) return p;
    simdjson::dom::array blocks;
    if (body["blocks"].get(blocks) != simdjson::SUCCESS || blocks.size() == 0) return "blocks";
    for (simdjson::dom::element block : blocks) {
      std::string_view type, text_type;
      if (block["type"].get(type) || type != "section") return "block type";
      if (block["text"]["type"].get(text_type) || text_type != "mrkdwn") return "text type";
      if (auto p = NonEmptyString(block["text"], "text"); !p.empty()) return p;
    }
    return "";
  });
  auto sink = Open(HookPipeline(dir.path(), {{"url", slack.url()}, {"template", "slack"},
                                             {"onFailure", "retry"}}));
  REQUIRE(sink->Deliver(Batch(0, {Alert("a1", "ALERT", "OK"), Alert("a2", "RESOLVED", "ALERT")})));
  CHECK(slack.problems().empty());
  REQUIRE(slack.bodies().size() == 2);
  CHECK_THAT(slack.bodies()[0], Catch::Contains("ALERT model-2 feature_vector[3]: psi 4.164"));
}

TEST_CASE("the pagerduty template triggers and resolves one Events v2 incident",
          "[connectors][webhook]") {
  testing::TempDir dir;
  ShapeReceiver pagerduty([](simdjson::dom::element body) -> std::string {
    std::string_view key, action, dedup;
    if (body["routing_key"].get(key) || key != "R0UT1NGK3Y0123456789ABCDEFGHIJKL") return "key";
    if (body["event_action"].get(action) || (action != "trigger" && action != "resolve")) {
      return "event_action";
    }
    if (body["dedup_key"].get(dedup) || dedup.empty() || dedup.size() > 255) return "dedup_key";
    if (action == "trigger") {
      simdjson::dom::element payload = body["payload"];
      for (const char* k : {"summary", "source", "severity"}) {
        if (auto p = NonEmptyString(payload, k); !p.empty()) return "payload " + p;
      }
      std::string_view summary, severity;
      // Absent: left empty, which the checks below refuse.
      if (payload["summary"].get(summary) != simdjson::SUCCESS) summary = {};
      if (payload["severity"].get(severity) != simdjson::SUCCESS) severity = {};
      if (summary.size() > 1024) return "summary too long";
      if (severity != "critical" && severity != "error" && severity != "warning" &&
          severity != "info") {
        return "severity";
      }
    }
    return "";
  });
  auto sink = Open(HookPipeline(dir.path(), {{"url", pagerduty.url()},
                                             {"template", "pagerduty"},
                                             {"routingKey", "R0UT1NGK3Y0123456789ABCDEFGHIJKL"},
                                             {"onFailure", "retry"}}));
  REQUIRE(sink->Deliver(Batch(0, {Alert("w1", "WARN", "OK", "inc-9"),
                                  Alert("a1", "ALERT", "WARN", "inc-9"),
                                  Alert("r1", "RESOLVED", "ALERT", "inc-9")})));
  CHECK(pagerduty.problems().empty());
  auto bodies = pagerduty.bodies();
  REQUIRE(bodies.size() == 3);
  CHECK_THAT(bodies[0], Catch::Contains("\"severity\":\"warning\""));
  CHECK_THAT(bodies[1], Catch::Contains("\"severity\":\"critical\""));
  CHECK_THAT(bodies[2], Catch::Contains("\"event_action\":\"resolve\""));
  for (const std::string& body : bodies) CHECK_THAT(body, Catch::Contains("\"dedup_key\":\"inc-9\""));
  // Without a routing key the sink is refused at creation, not at the first alert.
  CHECK_FALSE(CreateSinks(HookPipeline(dir.path(), {{"url", pagerduty.url()},
                                                    {"template", "pagerduty"}})));
}

TEST_CASE("the alertmanager template posts alerts that Alertmanager's v2 API accepts",
          "[connectors][webhook]") {
  testing::TempDir dir;
  ShapeReceiver alertmanager([](simdjson::dom::element body) -> std::string {
    simdjson::dom::array alerts;
    if (body.get(alerts) != simdjson::SUCCESS || alerts.size() == 0) return "not an array";
    for (simdjson::dom::element alert : alerts) {
      simdjson::dom::object labels;
      if (alert["labels"].get(labels) != simdjson::SUCCESS) return "labels";
      if (auto p = NonEmptyString(alert["labels"], "alertname"); !p.empty()) return p;
      for (auto [name, value] : labels) {
        if (!value.is_string()) return "label values must be strings";
      }
      simdjson::dom::object annotations;
      if (alert["annotations"].get(annotations) != simdjson::SUCCESS) return "annotations";
      for (auto [name, value] : annotations) {
        if (!value.is_string()) return "annotation values must be strings";
      }
      for (const char* key : {"startsAt", "endsAt"}) {
        std::string_view time;
        if (alert[key].get(time) == simdjson::SUCCESS && !ParseIso8601Micros(time)) {
          return fmt::format("{} is not RFC 3339", key);
        }
      }
    }
    return "";
  });
  auto sink = Open(HookPipeline(dir.path(), {{"url", alertmanager.url()},
                                             {"template", "alertmanager"},
                                             {"onFailure", "retry"}}));
  // The re-send thread posts the firing set at once: nothing fires yet, so nothing is sent.
  REQUIRE(sink->Deliver(Batch(0, {Alert("w1", "WARN", "OK"), Alert("a1", "ALERT", "WARN"),
                                  Alert("r1", "RESOLVED", "ALERT")})));
  CHECK(alertmanager.problems().empty());
  auto bodies = alertmanager.bodies();
  REQUIRE(bodies.size() == 3);
  simdjson::dom::parser parser;
  // The escalation fires the critical alert and keeps the warning firing beside it (as two
  // Prometheus rules would), never a resolved warning next to the firing critical.
  simdjson::dom::array escalation = parser.parse(bodies[1]).get_array().value();
  REQUIRE(escalation.size() == 2);
  CHECK(std::string_view(escalation.at(0)["labels"]["severity"]) == "critical");
  CHECK(std::string_view(escalation.at(1)["labels"]["severity"]) == "warning");
  for (simdjson::dom::element alert : escalation) {
    const int64_t ends = *ParseIso8601Micros(std::string_view(alert["endsAt"]));
    const int64_t starts = *ParseIso8601Micros(std::string_view(alert["startsAt"]));
    // endsAt is alertmanagerEndsAfter (default 240 s) ahead: short, re-sent while it fires.
    CHECK(ends - starts >= 239'000'000);
    CHECK(ends - starts <= 241'000'000);
    CHECK_THAT(std::string(std::string_view(alert["annotations"]["summary"])),
               Catch::StartsWith("WARN model-2 feature_vector[3]: psi 4.164 (threshold 0.25)") ||
                   Catch::StartsWith("ALERT model-2 feature_vector[3]: psi 4.164"));
  }
  // The resolution ends both at once, saying the series is back.
  simdjson::dom::array resolved = parser.parse(bodies[2]).get_array().value();
  REQUIRE(resolved.size() == 2);
  for (simdjson::dom::element alert : resolved) {
    CHECK(*ParseIso8601Micros(std::string_view(alert["endsAt"])) <=
          *ParseIso8601Micros(std::string_view(alert["startsAt"])) + 60'000'000);
    CHECK_THAT(std::string(std::string_view(alert["annotations"]["summary"])),
               Catch::StartsWith("RESOLVED model-2 feature_vector[3] is back"));
  }
}

TEST_CASE("the alertmanager template re-sends the firing alerts on its own, and a restarted sink "
          "re-sends them at once",
          "[connectors][webhook]") {
  testing::TempDir dir;
  std::mutex mutex;
  std::vector<std::string> severities;  // of each alert received, in order
  ShapeReceiver alertmanager([&](simdjson::dom::element body) -> std::string {
    std::lock_guard<std::mutex> lock(mutex);
    simdjson::dom::array alerts = body.get_array().value();
    for (simdjson::dom::element alert : alerts) {
      severities.emplace_back(std::string_view(alert["labels"]["severity"]));
    }
    return "";
  });
  auto received = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    return severities.size();
  };
  const auto options = std::map<std::string, std::string>{{"url", alertmanager.url()},
                                                         {"template", "alertmanager"},
                                                         {"alertmanagerResendInterval", "1"},
                                                         {"alertmanagerEndsAfter", "3"}};
  {
    auto sink = Open(HookPipeline(dir.path(), options));
    REQUIRE(sink->Deliver(Batch(0, {Alert("w1", "WARN", "OK")})));
    CHECK(received() >= 1);
    // Nothing new is delivered; the warning goes out again, once a second.
    REQUIRE(testing::WaitFor([&] { return received() >= 3; }, std::chrono::seconds(10)));
    REQUIRE(sink->Close());
  }
  const size_t before_restart = received();
  CHECK(alertmanager.bodies().size() == before_restart);
  // A restart (the same checkpoint): the firing set comes back from its file and goes out at
  // once, well inside alertmanagerEndsAfter.
  const auto opened = std::chrono::steady_clock::now();
  auto sink = Open(HookPipeline(dir.path(), options));
  REQUIRE(testing::WaitFor([&] { return received() > before_restart; }, std::chrono::seconds(10)));
  CHECK(std::chrono::steady_clock::now() - opened < std::chrono::milliseconds(900));
  CHECK(*sink->LastDelivered() == 0);
  REQUIRE(sink->Deliver(Batch(1, {Alert("r1", "RESOLVED", "WARN")})));
  REQUIRE(sink->Close());
  // Resolved: nothing left to re-send after another restart.
  CHECK_THAT(ReadText(dir.Sub("sinks/webhook-route.alertmanager.json")),
             Catch::Contains("\"batch_id\":1,\"alerts\":[]"));
  // An expiry shorter than the re-send interval would let alerts lapse between re-sends.
  auto lapsing = CreateSinks(HookPipeline(dir.path(), {{"url", alertmanager.url()},
                                                       {"template", "alertmanager"},
                                                       {"alertmanagerResendInterval", "60"},
                                                       {"alertmanagerEndsAfter", "30"}}));
  REQUIRE_FALSE(lapsing);
  CHECK_THAT(lapsing.error().message(),
             Catch::Contains("alertmanagerEndsAfter (30 s) must be more than "
                             "alertmanagerResendInterval (60 s)"));
  std::lock_guard<std::mutex> lock(mutex);
  for (const std::string& severity : severities) CHECK(severity == "warning");
}

TEST_CASE("a receiver's 4xx for one row dead-letters that row and the batch goes on",
          "[connectors][webhook]") {
  testing::TempDir dir;
  // Refuses the rows of model-2's WARN (as Slack refuses a malformed payload with 400).
  ShapeReceiver picky([](simdjson::dom::element body) -> std::string {
    std::string_view level;
    return body["level"].get(level) == simdjson::SUCCESS && level == "WARN" ? "invalid_payload"
                                                                           : "";
  });
  SECTION("dead_letter (the default)") {
    auto sink = Open(HookPipeline(dir.path(), {{"url", picky.url()}}));
    auto delivered = sink->Deliver(Batch(0, {Alert("w1", "WARN", "OK"), Alert("a1", "ALERT", "WARN")}));
    INFO((delivered ? "" : delivered.error().message()));
    REQUIRE(delivered);
    CHECK(*sink->IsDelivered(0));
    CHECK(picky.bodies().size() == 2);  // the refused row once (a 4xx is not retried), then a1
    const std::string dead = ReadText(dir.Sub("sinks/webhook-route.dead-letter.jsonl"));
    CHECK_THAT(dead, Catch::Contains("\"idempotency_key\":\"w1\""));
    CHECK_THAT(dead, Catch::Contains("HTTP 400"));
    CHECK_THAT(dead, !Catch::Contains("\"a1\""));
  }
  SECTION("drop") {
    auto sink = Open(HookPipeline(dir.path(), {{"url", picky.url()}, {"onFailure", "drop"}}));
    REQUIRE(sink->Deliver(Batch(0, {Alert("w1", "WARN", "OK"), Alert("a1", "ALERT", "WARN")})));
    CHECK(picky.bodies().size() == 2);
    CHECK_FALSE(std::filesystem::exists(dir.Sub("sinks/webhook-route.dead-letter.jsonl")));
  }
  SECTION("retry stops the batch") {
    auto sink = Open(HookPipeline(dir.path(), {{"url", picky.url()}, {"onFailure", "retry"}}));
    auto delivered = sink->Deliver(Batch(0, {Alert("w1", "WARN", "OK")}));
    REQUIRE_FALSE(delivered);
    // A failure to deliver (exit code 1), not an invalid pipeline.
    CHECK(delivered.error().code() == ErrorCode::kUnrecoverable);
  }
}

TEST_CASE("a receiver that never answers in time costs a batch at most its retry budget",
          "[connectors][webhook]") {
  testing::TempDir dir;
  // Answers after 400 ms, beyond the sink's 100 ms timeout: every attempt times out.
  ShapeReceiver slow([](simdjson::dom::element) { return std::string(); }, 400);
  auto sink = Open(HookPipeline(dir.path(), {{"url", slow.url()},
                                             {"timeoutMs", "100"},
                                             {"maxAttempts", "1000"},
                                             {"retryBudgetMs", "300"}}));
  std::vector<std::string> rows;
  for (int i = 0; i < 20; ++i) rows.push_back(Alert(fmt::format("x{}", i), "ALERT", "OK"));
  REQUIRE(sink->Deliver(Batch(3, rows)));
  // Attempts stop once the budget is spent: a few for the first row, none for most others,
  // and every row is in the dead-letter file rather than lost.
  CHECK(slow.bodies().size() < 10);
  const std::string dead = ReadText(dir.Sub("sinks/webhook-route.dead-letter.jsonl"));
  for (int i = 0; i < 20; ++i) CHECK_THAT(dead, Catch::Contains(fmt::format("\"x{}\"", i)));
  CHECK_THAT(dead, Catch::Contains("retryBudgetMs"));
}

}  // namespace
}  // namespace driftd
