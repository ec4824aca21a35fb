// No secret reaches the logs or the HTTP endpoint, whatever happens to the pipeline: start
// against a broker that is down, reload with a change, reload with a broken file.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kLiteralSecret = "literal-pw-5f1c9e7a";
constexpr const char* kEnvSecret = "env-pw-8d24b3c6";

std::string KafkaPipelineYaml(const std::string& dir, int broker_port, const std::string& trigger,
                              const std::string& extra_option = "") {
  std::string brokers = "127.0.0.1:" + std::to_string(broker_port);
  return R"(name: secretive
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: prediction, type: double}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: )" + brokers + R"(
    subscribe: inference-logs
    kafka.security.protocol: SASL_PLAINTEXT
    kafka.sasl.mechanism: PLAIN
    kafka.sasl.username: driftd
    kafka.sasl.password: )" + kLiteralSecret + "\n" + extra_option + R"(
query:
  groupBy: [model_id]
  aggregates: [count]
sinks:
  - name: out
    format: kafka
    stream: stats
    outputMode: update
    options:
      topic: stats
      kafka.bootstrap.servers: )" + brokers + R"(
      kafka.security.protocol: SASL_PLAINTEXT
      kafka.sasl.mechanism: PLAIN
      kafka.sasl.username: driftd
      kafka.sasl.password: ${DRIFTD_TEST_KAFKA_PASSWORD}
trigger: )" + trigger + R"(
checkpointLocation: )" + dir + "/checkpoint\n";
}

}  // namespace

TEST_CASE("no secret is logged or served: run against a broker that is down, reload, fail "
          "validation",
          "[service][secrets][e2e]") {
  TempDir dir("driftd-secrets");
  std::string base = dir.path().string();
  std::string pipelines = dir / "pipelines";
  std::string file = pipelines + "/kafka.yaml";
  int closed_port = FreePort();
  WriteFileAt(file, KafkaPipelineYaml(base, closed_port, "{processingTime: 1 second}"));
  std::map<std::string, std::string> env{{"DRIFTD_TEST_KAFKA_PASSWORD", kEnvSecret}};

  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", pipelines, "--http", "127.0.0.1:0",
                                     "--log-format", "json", "--shutdown-timeout", "20"},
                                    log, env);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  std::vector<std::string> served;
  // The broker is down: the query cannot become ready.
  REQUIRE(WaitFor([&] { return ReadFile(log).find("retrying in") != std::string::npos; }, 60s));
  HttpReply ready = HttpGet(*port, "/readyz");
  CHECK(ready.status == 503);
  served.push_back(ready.body);

  // A valid change, then a broken file that still holds both secrets.
  WriteFileAt(file, KafkaPipelineYaml(base, closed_port, "{processingTime: 2 seconds}"));
  daemon.Signal(SIGHUP);
  REQUIRE(WaitFor([&] { return ReadFile(log).find("reload of ") != std::string::npos; }));
  WriteFileAt(file, KafkaPipelineYaml(base, closed_port, "{processingTime: 2 seconds}",
                                    "    kafka.sasl.pasword: " + std::string(kLiteralSecret) +
                                        "\n    bogus: 1\n"));
  daemon.Signal(SIGHUP);
  REQUIRE(WaitFor([&] {
    std::string text = ReadFile(log);
    return text.find("reload of ") != text.rfind("reload of ");
  }));
  for (const char* path : {"/metrics", "/progress", "/readyz", "/healthz"}) {
    served.push_back(HttpGet(*port, path).body);
  }
  RunResult validate = RunDriftd({"validate", file}, 60s, env);
  CHECK(validate.exit_code == 78);

  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait(60s));

  std::string output = ReadFile(log);
  CHECK_THAT(output, Catch::Contains("bogus"));  // the broken file was reported
  for (const std::string& text : {output, validate.output}) {
    CHECK_THAT(text, !Catch::Contains(kLiteralSecret));
    CHECK_THAT(text, !Catch::Contains(kEnvSecret));
  }
  for (const std::string& body : served) {
    CHECK_THAT(body, !Catch::Contains(kLiteralSecret));
    CHECK_THAT(body, !Catch::Contains(kEnvSecret));
  }
  // --log-format json: every line of every module (librdkafka's included) is one JSON object.
  for (const std::string& line : SplitLines(output)) {
    if (line.empty()) continue;
    INFO(line);
    CHECK(line.rfind("{\"time\":\"", 0) == 0);
    CHECK(line.back() == '}');
  }
}

}  // namespace driftd::testing
