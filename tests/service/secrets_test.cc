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

// A Kafka source with SASL credentials; the password is `password` (a literal or a ${VAR}).
std::string KafkaPipelineYaml(const std::string& name, const std::string& dir, int broker_port,
                              const std::string& password, const std::string& trigger,
                              const std::string& extra_option = "") {
  return "name: " + name + R"(
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: prediction, type: double}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: 127.0.0.1:)" +
         std::to_string(broker_port) + R"(
    subscribe: inference-logs
    kafka.security.protocol: SASL_PLAINTEXT
    kafka.sasl.mechanism: PLAIN
    kafka.sasl.username: driftd
    kafka.sasl.password: )" +
         password + "\n" + extra_option + R"(
query:
  groupBy: [model_id]
  aggregates: [count]
sinks:
  - {name: out, format: file, stream: stats, outputMode: update, options: {path: )" +
         dir + "/out-" + name + R"(}}
trigger: )" +
         trigger + R"(
checkpointLocation: )" +
         dir + "/checkpoint-" + name + "\n";
}

}  // namespace

TEST_CASE(
    "no secret is logged or served: run against a broker that is down, reload, fail "
    "validation",
    "[service][secrets][e2e]") {
  TempDir dir("driftd-secrets");
  std::string base = dir.path().string();
  std::string pipelines = dir / "pipelines";
  std::string literal = pipelines + "/literal.yaml";
  std::string from_env = pipelines + "/env.yaml";
  int closed_port = FreePort();
  const std::string env_reference = "${DRIFTD_TEST_KAFKA_PASSWORD}";
  WriteFileAt(literal, KafkaPipelineYaml("literal", base, closed_port, kLiteralSecret,
                                         "{processingTime: 1 second}"));
  WriteFileAt(from_env, KafkaPipelineYaml("env", base, closed_port, env_reference,
                                          "{processingTime: 1 second}"));
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

  // A valid change, then broken files that still hold both secrets.
  WriteFileAt(literal, KafkaPipelineYaml("literal", base, closed_port, kLiteralSecret,
                                         "{processingTime: 2 seconds}"));
  daemon.Signal(SIGHUP);
  REQUIRE(WaitFor([&] { return ReadFile(log).find("reload of ") != std::string::npos; }, 60s));
  std::string broken_option =
      "    kafka.sasl.pasword: " + std::string(kLiteralSecret) + "\n    bogus: 1\n";
  WriteFileAt(literal, KafkaPipelineYaml("literal", base, closed_port, kLiteralSecret,
                                         "{processingTime: 2 seconds}", broken_option));
  WriteFileAt(from_env, KafkaPipelineYaml("env", base, closed_port, env_reference,
                                          "{processingTime: 2 seconds}", "    bogus: 1\n"));
  daemon.Signal(SIGHUP);
  REQUIRE(WaitFor(
      [&] {
        std::string text = ReadFile(log);
        return text.find("reload of ") != text.rfind("reload of ");
      },
      60s));
  for (const char* path : {"/metrics", "/progress", "/readyz", "/healthz"}) {
    served.push_back(HttpGet(*port, path).body);
  }
  RunResult validate = RunDriftd({"validate", literal}, 60s, env);
  CHECK(validate.exit_code == 78);
  RunResult validate_env = RunDriftd({"validate", from_env}, 60s, env);
  CHECK(validate_env.exit_code == 78);

  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait(60s));

  std::string output = ReadFile(log);
  CHECK_THAT(output, Catch::Contains("bogus"));  // the broken file was reported
  for (const std::string& text : {output, validate.output, validate_env.output}) {
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
