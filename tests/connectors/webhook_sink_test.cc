// The webhook sink against a local cpp-httplib receiver that fails on purpose: retries on
// connection errors, 5xx and 429, a clear failure on other 4xx, Idempotency-Keys that let the
// receiver de-duplicate, and a delivery log that survives a restart of the sink.
#include <httplib.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "connectors/registry.h"
#include "connectors/webhook_sink.h"
#include "engine/redact.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

// An HTTP receiver on a free port of 127.0.0.1. It answers the first `fail_first` requests
// with `fail_status` (429 with Retry-After: 0), later ones with 200, and records every request.
class Receiver {
 public:
  explicit Receiver(int fail_first = 0, int fail_status = 503)
      : fail_first_(fail_first), fail_status_(fail_status) {
    server_.Post("/hook", [this](const httplib::Request& request, httplib::Response& response) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++requests_;
      if (requests_ <= fail_first_) {
        response.status = fail_status_;
        if (fail_status_ == 429) response.set_header("Retry-After", "0");
        response.set_content("try later", "text/plain");
        return;
      }
      std::string key = request.get_header_value("Idempotency-Key");
      keys_.push_back(key);
      bodies_[key] = request.body;
      authorization_ = request.get_header_value("Authorization");
      content_type_ = request.get_header_value("Content-Type");
      response.status = 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    REQUIRE(server_.is_valid());
    // cpp-httplib 0.11 has no wait_until_ready(): poll until the accept loop runs.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE(server_.is_running());
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return fmt::format("http://127.0.0.1:{}/hook", port_); }
  int port() const { return port_; }
  int requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mutex_);
    return keys_;
  }
  std::set<std::string> unique_keys() {
    auto all = keys();
    return {all.begin(), all.end()};
  }
  std::string body(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_[key];
  }
  std::string authorization() {
    std::lock_guard<std::mutex> lock(mutex_);
    return authorization_;
  }
  std::string content_type() {
    std::lock_guard<std::mutex> lock(mutex_);
    return content_type_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  int fail_first_;
  int fail_status_;
  std::mutex mutex_;
  int requests_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, std::string> bodies_;
  std::string authorization_;
  std::string content_type_;
};

PipelineSpec WebhookPipeline(const std::string& checkpoint, StreamKind stream,
                             const std::map<std::string, std::string>& given) {
  PipelineSpec pipeline;
  pipeline.name = "hook-test";
  pipeline.checkpoint_location = checkpoint;
  SinkSpec spec;
  spec.name = "pager";
  spec.format = "webhook";
  spec.stream = stream;
  std::map<std::string, std::string> options = {{"backoffInitialMs", "1"}, {"backoffMaxMs", "20"}};
  for (const auto& [name, value] : given) options[name] = value;
  spec.options = testing::WithDefaults("webhook", ConnectorRole::kSink, options);
  pipeline.sinks.push_back(spec);
  return pipeline;
}

std::unique_ptr<Sink> OpenSink(const PipelineSpec& pipeline) {
  auto sinks = CreateSinks(pipeline);
  INFO((sinks ? "" : sinks.error().message()));
  REQUIRE(sinks);
  REQUIRE(sinks->size() == 1);
  std::unique_ptr<Sink> sink = std::move(sinks->front());
  auto opened = sink->Open();
  INFO((opened ? "" : opened.error().message()));
  REQUIRE(opened);
  return sink;
}

std::string AlertRow(const std::string& id) {
  return fmt::format(R"({{"alert_id":"{}","level":"ALERT","model":"model-1","statistic":0.4}})",
                     id);
}

BatchOutput AlertBatch(int64_t batch_id, const std::vector<std::string>& ids) {
  BatchOutput output;
  output.batch_id = batch_id;
  for (const std::string& id : ids) output.alerts.Add("model-1", AlertRow(id));
  return output;
}

TEST_CASE("a webhook sink delivers every alert despite 5xx answers, keyed by its alert id",
          "[connectors][webhook]") {
  testing::TempDir dir;
  Receiver receiver(/*fail_first=*/3, /*fail_status=*/503);
  auto sink = OpenSink(WebhookPipeline(
      dir.path(), StreamKind::kAlerts,
      {{"url", receiver.url()}, {"headers", R"({"Authorization": "Bearer s3cret"})"}}));
  REQUIRE_FALSE(*sink->IsDelivered(0));
  auto delivered = sink->Deliver(AlertBatch(0, {"a1", "a2", "a3"}));
  INFO((delivered ? "" : delivered.error().message()));
  REQUIRE(delivered);
  CHECK(receiver.keys() == std::vector<std::string>{"a1", "a2", "a3"});
  CHECK(receiver.requests() == 6);  // three refused, then one per alert
  CHECK(receiver.body("a2") == AlertRow("a2"));
  CHECK(receiver.authorization() == "Bearer s3cret");
  CHECK(receiver.content_type() == "application/json");
  CHECK(*sink->IsDelivered(0));
}

TEST_CASE("a webhook sink waits out 429 Too Many Requests", "[connectors][webhook]") {
  testing::TempDir dir;
  Receiver receiver(/*fail_first=*/2, /*fail_status=*/429);
  auto sink = OpenSink(WebhookPipeline(dir.path(), StreamKind::kAlerts, {{"url", receiver.url()}}));
  REQUIRE(sink->Deliver(AlertBatch(0, {"x"})));
  CHECK(receiver.keys() == std::vector<std::string>{"x"});
}

TEST_CASE("with onFailure retry, a 4xx answer other than 429 fails the batch at once with the status named",
          "[connectors][webhook]") {
  testing::TempDir dir;
  Receiver receiver(/*fail_first=*/100, /*fail_status=*/403);
  auto sink = OpenSink(WebhookPipeline(dir.path(), StreamKind::kAlerts,
                                       {{"url", receiver.url()}, {"onFailure", "retry"}}));
  auto delivered = sink->Deliver(AlertBatch(4, {"a1"}));
  REQUIRE_FALSE(delivered);
  // A failure to deliver, not retried by the executor, and not an invalid pipeline (exit 1).
  CHECK(delivered.error().code() == ErrorCode::kUnrecoverable);
  CHECK_THAT(delivered.error().message(), Catch::Contains("HTTP 403"));
  CHECK_THAT(delivered.error().message(), Catch::Contains("batch 4"));
  CHECK(receiver.requests() == 1);
  CHECK_FALSE(*sink->IsDelivered(4));
}

TEST_CASE("with onFailure retry, an unreachable receiver fails the batch as retriable after maxAttempts",
          "[connectors][webhook]") {
  testing::TempDir dir;
  std::string url;
  {
    Receiver gone;  // a port that was free a moment ago and is closed now
    url = gone.url();
  }
  auto sink = OpenSink(
      WebhookPipeline(dir.path(), StreamKind::kAlerts,
                      {{"url", url}, {"maxAttempts", "3"}, {"onFailure", "retry"}}));
  auto delivered = sink->Deliver(AlertBatch(0, {"a1"}));
  REQUIRE_FALSE(delivered);
  CHECK(delivered.error().code() == ErrorCode::kExternal);
  CHECK_THAT(delivered.error().message(), Catch::Contains("after 3 attempts"));
  CHECK_FALSE(*sink->IsDelivered(0));
}

TEST_CASE("a webhook url with user:password@ delivers with those credentials as basic auth",
          "[connectors][webhook]") {
  testing::TempDir dir;
  Receiver receiver;
  // Percent-encoded in the URL, decoded in the header: "alerts:p@ss w".
  auto sink = OpenSink(WebhookPipeline(
      dir.path(), StreamKind::kAlerts,
      {{"url", fmt::format("http://alerts:p%40ss%20w@127.0.0.1:{}/hook", receiver.port())}}));
  auto delivered = sink->Deliver(AlertBatch(0, {"a1"}));
  INFO((delivered ? "" : delivered.error().message()));
  REQUIRE(delivered);
  CHECK(receiver.keys() == std::vector<std::string>{"a1"});
  CHECK(receiver.authorization() == "Basic YWxlcnRzOnBAc3Mgdw==");
}

TEST_CASE(
    "rows given up on go to a dead-letter file of mode 0600, whatever the umask, with the "
    "url's secrets redacted as the log redacts them",
    "[connectors][webhook][secrets]") {
  testing::TempDir dir;
  std::string url;
  {
    Receiver gone;
    url = gone.url();
  }
  // The URL's token, with a quote and a backslash that JSON escapes.
  const std::string token = "tok\"dead\\letter-77";
  RegisterSecrets({token});
  const mode_t umask_before = ::umask(0);
  auto sink = OpenSink(WebhookPipeline(dir.path(), StreamKind::kAlerts,
                                       {{"url", url + "/" + token}, {"maxAttempts", "1"}}));
  auto delivered = sink->Deliver(AlertBatch(0, {"a1"}));
  ::umask(umask_before);
  INFO((delivered ? "" : delivered.error().message()));
  REQUIRE(delivered);
  const std::string path = dir.Sub("sinks/webhook-pager.dead-letter.jsonl");
  const std::string dead = testing::ReadFile(path);
  INFO(dead);
  CHECK_THAT(dead, Catch::Contains("\"idempotency_key\":\"a1\""));
  CHECK_THAT(dead, Catch::Contains("/hook/<redacted>"));
  CHECK_THAT(dead, !Catch::Contains("letter-77"));
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  REQUIRE(::stat(dir.Sub("sinks").c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);
  REQUIRE(::stat(dir.Sub("sinks/webhook-pager.delivered").c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
}

TEST_CASE("a restarted webhook sink knows from its delivery log which batches arrived",
          "[connectors][webhook]") {
  testing::TempDir dir;
  Receiver receiver;
  PipelineSpec pipeline =
      WebhookPipeline(dir.path(), StreamKind::kAlerts, {{"url", receiver.url()}});
  {
    auto sink = OpenSink(pipeline);
    REQUIRE(sink->Deliver(AlertBatch(0, {"a1"})));
    REQUIRE(sink->Deliver(AlertBatch(1, {"a2", "a3"})));
  }
  auto last = ReadWebhookDeliveryLog(DefaultWebhookDeliveryLog(dir.path().string(), "pager"));
  REQUIRE(last);
  CHECK(*last == std::optional<int64_t>(1));

  auto restarted = OpenSink(pipeline);
  CHECK(*restarted->IsDelivered(1));
  CHECK_FALSE(*restarted->IsDelivered(2));
  REQUIRE(restarted->Deliver(AlertBatch(1, {"a2", "a3"})));  // recovery's re-delivery: a no-op
  REQUIRE(restarted->Deliver(AlertBatch(2, {"a4"})));
  CHECK(receiver.keys() == std::vector<std::string>{"a1", "a2", "a3", "a4"});
}

TEST_CASE("a batch interrupted half-way is re-sent with the same keys", "[connectors][webhook]") {
  testing::TempDir dir;
  // Two alerts go through, then the receiver refuses for longer than maxAttempts covers.
  Receiver receiver;
  PipelineSpec pipeline =
      WebhookPipeline(dir.path(), StreamKind::kAlerts, {{"url", receiver.url()}});
  std::string log = DefaultWebhookDeliveryLog(dir.path().string(), "pager");
  {
    auto sink = OpenSink(pipeline);
    REQUIRE(sink->Deliver(AlertBatch(0, {"a1", "a2"})));
  }
  // A crash after the rows were sent but before the log was written looks like this:
  std::filesystem::remove(log);
  auto restarted = OpenSink(pipeline);
  CHECK_FALSE(*restarted->IsDelivered(0));
  REQUIRE(restarted->Deliver(AlertBatch(0, {"a1", "a2"})));
  CHECK(receiver.keys().size() == 4);
  CHECK(receiver.unique_keys() == std::set<std::string>{"a1", "a2"});
}

TEST_CASE("rows without an alert id are keyed by pipeline, batch and row",
          "[connectors][webhook]") {
  testing::TempDir dir;
  Receiver receiver;
  auto sink = OpenSink(WebhookPipeline(dir.path(), StreamKind::kStats, {{"url", receiver.url()}}));
  BatchOutput output;
  output.batch_id = 7;
  output.stats_append.Add("m", R"({"model_id":"m","count":3})");
  output.stats_append.Add("n", R"({"model_id":"n","count":4})");
  REQUIRE(sink->Deliver(output));
  CHECK(receiver.keys() == std::vector<std::string>{"hook-test-7-0", "hook-test-7-1"});
  CHECK(WebhookIdempotencyKey("p", 1, 2, R"({"alert_id":"abc"})") == "abc");
  CHECK(WebhookIdempotencyKey("p", 1, 2, "not json") == "p-1-2");
}

TEST_CASE("a webhook sink refuses a url it cannot use and headers that are not strings",
          "[connectors][webhook]") {
  testing::TempDir dir;
  CHECK_FALSE(
      CreateSinks(WebhookPipeline(dir.path(), StreamKind::kAlerts, {{"url", "ftp://x/y"}})));
  CHECK_FALSE(
      CreateSinks(WebhookPipeline(dir.path(), StreamKind::kAlerts, {{"url", "localhost"}})));
  CHECK_FALSE(CreateSinks(WebhookPipeline(dir.path(), StreamKind::kAlerts,
                                          {{"url", "http://h/x"}, {"headers", R"({"X-N": 1})"}})));
  CHECK(CreateSinks(WebhookPipeline(dir.path(), StreamKind::kAlerts,
                                    {{"url", "https://example.invalid:8443/alerts"}})));
}

TEST_CASE("a corrupt delivery log is reported, not read as nothing delivered",
          "[connectors][webhook]") {
  testing::TempDir dir;
  std::string log = dir.Sub("log");
  testing::WriteText(log, "garbage");
  auto last = ReadWebhookDeliveryLog(log);
  REQUIRE_FALSE(last);
  CHECK(last.error().code() == ErrorCode::kCorruption);
  CHECK(*ReadWebhookDeliveryLog(dir.Sub("absent")) == std::nullopt);
}

}  // namespace
}  // namespace driftd
