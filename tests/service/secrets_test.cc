// No secret reaches the logs, the HTTP endpoint or the disk, whatever happens to the pipeline:
// start against a broker that is down, reload with a change, reload with a broken file, fail
// every webhook delivery into the dead-letter file. A secret with a `"` or `\` in it must not
// show in its JSON-escaped form either (JSON logs, /progress), nor percent-encoded; and what
// driftd writes to a checkpoint is the owner's only (directories 0700, files 0600), whatever the
// umask.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/schema_registry_fake.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kLiteralSecret = "literal-pw-5f1c9e7a";
constexpr const char* kEnvSecret = "env-pw\"8d24\\b3c6";

// The forms a secret takes in text that escapes it: itself, in a JSON string (once, and twice
// for JSON inside JSON), percent-encoded in a URL.
std::vector<std::string> Forms(std::string_view secret) {
  auto json = [](std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    return out;
  };
  std::string percent;
  for (char c : secret) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      percent.push_back(c);
    } else {
      percent += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    }
  }
  return {std::string(secret), json(secret), json(json(secret)), percent};
}

// Every form of every secret that `text` holds (none, when all is well).
std::vector<std::string> Leaks(const std::string& text,
                               const std::vector<std::string_view>& secrets) {
  std::vector<std::string> found;
  for (std::string_view secret : secrets) {
    for (const std::string& form : Forms(secret)) {
      if (text.find(form) != std::string::npos) found.push_back(form);
    }
  }
  return found;
}

// A checkpoint as an attacker with read access to the disk would grep it: every file's bytes
// for every form of every secret, and every entry's mode (directories 0700, files 0600).
void CheckCheckpointAtRest(const std::filesystem::path& checkpoint,
                           const std::vector<std::string_view>& secrets) {
  namespace fs = std::filesystem;
  INFO("checkpoint " << checkpoint.string());
  REQUIRE(fs::is_directory(checkpoint));
  auto mode = [](const fs::path& path) {
    struct stat info {};
    ::lstat(path.c_str(), &info);
    return info.st_mode & 07777;
  };
  CHECK(mode(checkpoint) == 0700);
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(checkpoint)) {
    INFO(entry.path().string());
    if (entry.is_directory()) {
      CHECK(mode(entry.path()) == 0700);
      continue;
    }
    ++files;
    CHECK(mode(entry.path()) == 0600);
    CHECK(Leaks(ReadFile(entry.path()), secrets).empty());
  }
  CHECK(files > 0);
}

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
    kafkaConsumer.pollTimeoutMs: 2000
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
  const std::vector<std::string_view> secrets = {kLiteralSecret, kEnvSecret};
  for (const std::string& text : {output, validate.output, validate_env.output}) {
    CHECK(Leaks(text, secrets).empty());
  }
  for (const std::string& body : served) CHECK(Leaks(body, secrets).empty());
  CheckCheckpointAtRest(dir / "checkpoint-literal", secrets);
  CheckCheckpointAtRest(dir / "checkpoint-env", secrets);
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

constexpr const char* kSlackToken = "slack-tok\"3f9a\\2c71e5";
constexpr const char* kUrlPassword = "url-pw-7e3b19d4";
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
                     "      url: \"http://alerts:" + std::string(kUrlPassword) + "@127.0.0.1:" +
                     std::to_string(closed_port) + "/services/${SLACK_TOKEN}\"\n"
                     "      maxAttempts: 2\n"
                     "      backoffInitialMs: 10\n"
                     "      timeoutMs: 500\n"
                     "trigger: {processingTime: 200 milliseconds}\n"
                     "checkpointLocation: " + base + "/checkpoint-hooks\n");

  const std::string log = dir / "log.txt";
  // Under a umask that keeps nothing back, the checkpoints must still be the owner's only.
  const mode_t umask_before = ::umask(0);
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", pipelines, "--http", "127.0.0.1:0",
                                     "--log-format", "json", "--shutdown-timeout", "20"},
                                    log, env);
  ::umask(umask_before);
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

  const std::vector<std::string_view> secrets = {kSlackToken, kApiToken, kNameToken,
                                                  kUrlPassword};
  for (const std::string& output : outputs) {
    INFO(output);
    CHECK(Leaks(output, secrets).empty());
  }
  // The rows given up on went to the dead-letter file, their errors redacted as in the log.
  const std::string dead_letters =
      ReadFile(base + "/checkpoint-hooks/sinks/webhook-hook.dead-letter.jsonl");
  CHECK_THAT(dead_letters, Catch::Contains("/services/<redacted>"));
  CheckCheckpointAtRest(base + "/checkpoint-hooks", secrets);
  CheckCheckpointAtRest(base + "/checkpoint-paths", secrets);
  // What is not secret still shows around the redaction: the URL's host and path, the source
  // directory, the pipeline's name.
  CHECK_THAT(text, Catch::Contains("/services/<redacted>"));
  CHECK_THAT(progress, Catch::Contains("/in-<redacted>"));
  CHECK_THAT(metrics, Catch::Contains("pipeline=\"hooks-<redacted>\""));
}

}  // namespace driftd::testing

namespace driftd::testing {
namespace {

constexpr const char* kRegistryUrlPassword = "reg-url-pw-4c1e9a";
constexpr const char* kRegistryEnvPassword = "reg-env-pw-93b7d2";

// A Kafka source of Confluent-framed Avro records whose registry options are `value_options`
// (YAML lines under valueOptions, indented by 4).
std::string RegistryPipelineYaml(const std::string& name, const std::string& base, int port,
                                 const std::string& value_options) {
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: prediction, type: double}}
source:
  format: kafka
  options: {{kafka.bootstrap.servers: "127.0.0.1:{port}", subscribe: inference-logs}}
  valueFormat: avro
  valueOptions:
{options}query: {{groupBy: [model_id], aggregates: [count]}}
sinks:
  - {{name: out, format: file, stream: stats, outputMode: update, options: {{path: {base}/out-{name}}}}}
trigger: {{processingTime: 1 second}}
checkpointLocation: {base}/checkpoint-{name}
)",
                     fmt::arg("name", name), fmt::arg("port", port),
                     fmt::arg("options", value_options), fmt::arg("base", base));
}

}  // namespace

TEST_CASE("Schema Registry credentials, in its URL or from the environment, and its TLS files "
          "are checked by validate and show nowhere",
          "[service][secrets][registry][e2e]") {
  TempDir dir("driftd-registry-secrets");
  const std::string base = dir.path().string();
  const TestTls tls = TestTls::Make(dir.path());
  INFO(ReadFile(dir / "make-tls.log"));
  REQUIRE_FALSE(tls.ca_cert.empty());
  const int closed_port = FreePort();
  const std::string pipelines = dir / "pipelines";
  const std::string url = pipelines + "/url.yaml";
  const std::string env_file = pipelines + "/env.yaml";
  WriteFileAt(url, RegistryPipelineYaml(
                       "url", base, closed_port,
                       fmt::format("    schemaRegistryUrl: \"https://driftd:{}@127.0.0.1:8081\"\n"
                                   "    schemaRegistryCaFile: {}\n",
                                   kRegistryUrlPassword, tls.ca_cert)));
  const std::string tls_options = fmt::format(
      "    schemaRegistryCaFile: {}\n    schemaRegistryCertFile: {}\n"
      "    schemaRegistryKeyFile: {}\n",
      tls.ca_cert, tls.client_cert, tls.client_key);
  WriteFileAt(env_file,
              RegistryPipelineYaml("env", base, closed_port,
                                   "    schemaRegistryUrl: https://127.0.0.1:8081\n"
                                   "    schemaRegistryCredentials: "
                                   "\"${SCHEMA_REGISTRY_CREDENTIALS}\"\n" +
                                       tls_options));
  const std::map<std::string, std::string> env{
      {"SCHEMA_REGISTRY_CREDENTIALS", std::string("driftd:") + kRegistryEnvPassword}};
  std::vector<std::string> outputs;
  for (const std::string& file : {url, env_file}) {
    RunResult validate = RunDriftd({"validate", file}, 60s, env);
    INFO(validate.output);
    CHECK(validate.exit_code == 0);
    outputs.push_back(validate.output);
  }

  // What is wrong is found by validate, with the option's path and line, the secret unshown.
  const std::string bad = dir / "bad.yaml";
  WriteFileAt(bad, RegistryPipelineYaml(
                       "bad", base, closed_port,
                       "    schemaRegistryUrl: https://127.0.0.1:8081\n"
                       "    schemaRegistryCredentials: \"${SCHEMA_REGISTRY_CREDENTIALS}\"\n" +
                           fmt::format("    schemaRegistryCaFile: {}\n", tls.client_key)));
  RunResult refused = RunDriftd({"validate", bad}, 60s, env);
  INFO(refused.output);
  CHECK(refused.exit_code == 78);
  CHECK_THAT(refused.output, Catch::Contains("bad.yaml:12:") &&
                                 Catch::Contains("source.valueOptions.schemaRegistryCaFile") &&
                                 Catch::Contains("holds no PEM certificate"));
  outputs.push_back(refused.output);
  WriteFileAt(bad, RegistryPipelineYaml(
                       "bad", base, closed_port,
                       fmt::format("    schemaRegistryUrl: \"https://driftd:{}@127.0.0.1:8081\"\n"
                                   "    schemaRegistryCredentials: "
                                   "\"${{SCHEMA_REGISTRY_CREDENTIALS}}\"\n",
                                   kRegistryUrlPassword)));
  RunResult both = RunDriftd({"validate", bad}, 60s, env);
  INFO(both.output);
  CHECK(both.exit_code == 78);
  CHECK_THAT(both.output, Catch::Contains("source.valueOptions.schemaRegistryCredentials"));
  outputs.push_back(both.output);

  // A run with debug logging, against a broker that is down: both queries start (their
  // decoders made, their consumers failing to connect), then the process is killed.
  const std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", pipelines, "--http", "off", "--log-level", "debug"}, log, env);
  REQUIRE(WaitFor(
      [&] {
        const std::string text = ReadFile(log);
        return text.find("driftd-url#consumer") != std::string::npos &&
               text.find("driftd-env#consumer") != std::string::npos;
      },
      60s));
  daemon.Signal(SIGKILL);
  CHECK(daemon.Wait(60s));
  outputs.push_back(ReadFile(log));

  const std::vector<std::string_view> secrets = {kRegistryUrlPassword, kRegistryEnvPassword};
  for (const std::string& output : outputs) {
    INFO(output);
    CHECK(Leaks(output, secrets).empty());
  }
  CheckCheckpointAtRest(base + "/checkpoint-url", secrets);
  CheckCheckpointAtRest(base + "/checkpoint-env", secrets);
}

}  // namespace driftd::testing
