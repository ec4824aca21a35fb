// No secret reaches the logs or the HTTP endpoint, whatever happens to the pipeline: start
// against a broker that is down, reload with a change, reload with a broken file.
#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>
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

namespace driftd::testing {
namespace {

constexpr const char* kSlackToken = "slack-tok-3f9a2c71e5";
constexpr const char* kApiToken = "api-tok-8b1d4e02c6";
constexpr const char* kNameToken = "nametok77d1";

}  // namespace

TEST_CASE(
    "secrets interpolated into a webhook URL, a source path and a pipeline name show nowhere: "
    "not in delivery failures, progress, /progress, /metrics labels, inspect or validate",
    "[service][secrets][e2e]") {
  TempDir dir("driftd-secret-paths");
  const std::string base = dir.path().string();
  const std::string pipelines = dir / "pipelines";
  std::map<std::string, std::string> env{
      {"SLACK_TOKEN", kSlackToken}, {"API_TOKEN", kApiToken}, {"NAME_TOKEN", kNameToken}};

  // A file source whose directory name comes from ${API_TOKEN}.
  const std::string input = base + "/in-" + kApiToken;
  std::string records;
  for (int i = 0; i < 200; ++i) {
    records += fmt::format("{{\"model_id\":\"m{}\",\"prediction\":{}}}\n", i % 2, i * 0.01);
  }
  WriteFileAt(input + "/part-0.json", records);
  const std::string paths = pipelines + "/paths.yaml";
  WriteFileAt(paths, "name: paths\n"
                     "schema:\n"
                     "  - {name: model_id, type: string, nullable: false}\n"
                     "  - {name: prediction, type: double}\n"
                     "source: {format: file, options: {path: \"" + base + "/in-${API_TOKEN}\"}}\n"
                     "query: {groupBy: [model_id], aggregates: [count, mean(prediction)]}\n"
                     "sinks:\n"
                     "  - {name: out, format: file, stream: stats, outputMode: update, options: "
                     "{path: " + base + "/out-paths}}\n"
                     "trigger: {processingTime: 200 milliseconds}\n"
                     "checkpointLocation: " + base + "/checkpoint-paths\n");
  // A webhook whose URL ends in ${SLACK_TOKEN}, on a port where nothing listens, in a pipeline
  // whose name holds ${NAME_TOKEN}: every delivery fails and is reported.
  const int closed_port = FreePort();
  const std::string hooks = pipelines + "/hooks.yaml";
  WriteFileAt(hooks, "name: hooks-${NAME_TOKEN}\n"
                     "schema:\n"
                     "  - {name: model_id, type: string, nullable: false}\n"
                     "  - {name: prediction, type: double}\n"
                     "source: {format: rate, options: {mode: inference, rowsPerSecond: 200, "
                     "models: 2, features: 1}}\n"
                     "query: {groupBy: [model_id], aggregates: [count]}\n"
                     "sinks:\n"
                     "  - name: hook\n"
                     "    format: webhook\n"
                     "    stream: stats\n"
                     "    outputMode: update\n"
                     "    options:\n"
                     "      url: \"http://127.0.0.1:" + std::to_string(closed_port) +
                     "/services/${SLACK_TOKEN}\"\n"
                     "      maxAttempts: 2\n"
                     "      backoffInitialMs: 10\n"
                     "      timeoutMs: 500\n"
                     "trigger: {processingTime: 200 milliseconds}\n"
                     "checkpointLocation: " + base + "/checkpoint-hooks\n");

  const std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", pipelines, "--http", "127.0.0.1:0",
                                     "--shutdown-timeout", "20"},
                                    log, env);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  // The file pipeline commits batches; the webhook pipeline fails its deliveries, twice at least.
  REQUIRE(WaitFor([&] { return ReadFile(log).find("\"batchId\":0") != std::string::npos; }, 60s));
  REQUIRE(WaitFor(
      [&] {
        const std::string text = ReadFile(log);
        const size_t first = text.find("retrying in");
        return first != std::string::npos &&
               text.find("retrying in", first + 1) != std::string::npos;
      },
      60s));
  std::vector<std::string> outputs;
  for (const char* path : {"/metrics", "/progress", "/readyz", "/healthz"}) {
    HttpReply reply = HttpGet(*port, path);
    CHECK(reply.status != 0);
    outputs.push_back(reply.body);
  }
  const std::string metrics = outputs[0];
  const std::string progress = outputs[1];
  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait(60s));
  const std::string text = ReadFile(log);
  outputs.push_back(text);
  for (const std::string& args : {std::string(), std::string("--json")}) {
    std::vector<std::string> command = {"inspect", base + "/checkpoint-paths"};
    if (!args.empty()) command.push_back(args);
    RunResult inspect = RunDriftd(command, 60s, env);
    CHECK(inspect.exit_code == 0);
    outputs.push_back(inspect.output);
  }
  for (const std::string& file : {paths, hooks}) {
    RunResult validate = RunDriftd({"validate", file}, 60s, env);
    CHECK(validate.exit_code == 0);
    outputs.push_back(validate.output);
  }

  for (const std::string& output : outputs) {
    INFO(output);
    CHECK_THAT(output, !Catch::Contains(kSlackToken));
    CHECK_THAT(output, !Catch::Contains(kApiToken));
    CHECK_THAT(output, !Catch::Contains(kNameToken));
  }
  // What is not secret still shows around the redaction: the URL's host and path, the source
  // directory, the pipeline's name.
  CHECK_THAT(text, Catch::Contains("/services/<redacted>"));
  CHECK_THAT(progress, Catch::Contains("/in-<redacted>"));
  CHECK_THAT(metrics, Catch::Contains("pipeline=\"hooks-<redacted>\""));
}

}  // namespace driftd::testing
