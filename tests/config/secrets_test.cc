// Secret values (options whose names look secret, and values taken from secret-looking
// environment variables) must never appear in any problem message.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

using testing::kMinimalPipeline;

constexpr std::string_view kSecret = "hunter2/Zq9x";

std::string Replace(std::string yaml, std::string_view find, std::string_view replace) {
  size_t at = yaml.find(find);
  REQUIRE(at != std::string::npos);
  yaml.replace(at, find.size(), replace);
  return yaml;
}

std::string WithWebhookSink(std::string_view options) {
  return std::string(kMinimalPipeline) +
         "  - format: webhook\n    options:\n      url: http://alerts\n" + std::string(options);
}

// Broken files, each with the secret somewhere a careless message would echo it.
std::vector<std::string> BrokenFilesWithSecret() {
  const std::string s(kSecret);
  const std::string env = "${DB_PASSWORD}";
  const std::string env_default = "${API_TOKEN:-" + s + "}";
  std::string m(kMinimalPipeline);
  return {
      // Secret-named options of every declared type, given a value of the wrong type.
      WithWebhookSink("      passwordMinLength: " + s + "\n"),
      WithWebhookSink("      secretRotation: " + s + "\n"),
      WithWebhookSink("      apiKeyScheme: " + s + "\n"),
      WithWebhookSink("      credentialsJson: '{" + s + "'\n"),
      WithWebhookSink("      tokenWeight: " + s + "\n"),
      WithWebhookSink("      secretEnabled: " + s + "\n"),
      // A correct secret option next to an unrelated mistake.
      WithWebhookSink("      token: " + s + "\n      tokn: x\n"),
      // A secret in a passthrough option, with other problems around it.
      Replace(m, "format: file\n  options: {path: /tmp/in}",
              "format: kafka\n  options:\n    kafka.sasl.password: " + s +
                  "\n    subscrib: t\n    kafka.sasl.jaas.config: \"user " + s + "\""),
      // A secret as a JSON map under a secret name.
      WithWebhookSink("      credentialsJson: {user: a, password: " + s + "}\n      bad: 1\n"),
      // A value read from a secret environment variable, in places that are type-checked.
      Replace(m, "name: minimal", "name: \"" + env + "\""),
      Replace(m, "type: string}", "type: \"" + env + "\"}"),
      Replace(m, "format: file", "format: \"" + env + "\""),
      Replace(m, "{format: console}", "{format: \"" + env + "\"}"),
      Replace(m, "{format: console}", "{format: console, outputMode: \"" + env + "\"}"),
      Replace(m, "{format: console}", "{format: console, stream: \"" + env_default + "\"}"),
      Replace(m, "{format: console}", "{format: console, name: \"" + env + "\"}"),
      Replace(m, "[model_id]", "[\"" + env + "\"]"),
      Replace(m, "mean(prediction)", "\"mean(" + env + ")\""),
      Replace(m, "mean(prediction)", "\"" + env + "(prediction)\""),
      Replace(m, "count,", "\"" + env_default + "\","),
      m + "trigger: {processingTime: \"" + env + "\"}\n",
      m + "trigger: {once: \"" + env + "\"}\n",
      m + "checkpointLocation: \"" + env + "\"\nbogus: 1\n",
      Replace(m, "  options: {path: /tmp/in}\n",
              "  options: {path: /tmp/in}\n  malformed: {policy: \"" + env +
                  "\", maxRecordBytes: \"" + env_default + "\", maxDepth: \"" + env + "\"}\n"),
      Replace(m, "  aggregates:",
              "  window: {column: \"" + env + "\", size: \"" + env + "\"}\n  aggregates:"),
      m + "drift:\n  series: [\"" + env + "\"]\n  modelColumn: \"" + env +
          "\"\n  detectors: [{type: \"" + env + "\"}, {type: psi, bins: \"" + env + "\"}]\n" +
          "  baseline: {type: \"" + env + "\"}\n  minSamples: \"" + env + "\"\n",
      m + "drift:\n  series: [features]\n  overrides: [{detector: \"" + env + "\", series: \"" +
          env + "\", warn: \"" + env + "\"}]\n",
      // Schema names from a secret variable, later misused as columns.
      Replace(m, "{name: features, type: array<double>}",
              "{name: \"" + env + "\", type: array<double>}\n  - {name: \"" + env +
                  "\", type: string}"),
      // Unknown keys holding secrets: the key is named, the value never.
      m + "password: " + s + "\n",
      Replace(m, "{path: /tmp/in}", "{path: /tmp/in, passwrd: " + s + "}"),
      // YAML syntax errors on the secret's line.
      m + "password: \"" + s + "\n",
      m + "token: [" + s + "\n",
  };
}

TEST_CASE("no problem message ever prints a secret value", "[config][secrets]") {
  const testing::EnvMap env = {{"DB_PASSWORD", std::string(kSecret)}};
  const auto files = BrokenFilesWithSecret();
  REQUIRE(files.size() >= 30);
  size_t index = 0;
  for (const std::string& yaml : files) {
    INFO("file #" << index++ << ":\n" << yaml);
    std::vector<ConfigProblem> warnings;
    LoadOptions options = testing::TestOptions(env);
    options.warnings = &warnings;
    auto result = ParsePipeline(yaml, "secret.yaml", options);
    // Each file is broken: otherwise the test would not exercise any message.
    REQUIRE_FALSE(result);
    std::string text =
        FormatProblems("secret.yaml", result.error()) + FormatProblems("secret.yaml", warnings);
    INFO(text);
    CHECK(text.find(kSecret) == std::string::npos);
    CHECK(text.find("hunter2") == std::string::npos);
  }
}

TEST_CASE("a secret option with a wrong type says what was expected without the value",
          "[config][secrets]") {
  auto result = testing::ParseText(WithWebhookSink("      passwordMinLength: many\n"));
  REQUIRE_FALSE(result);
  REQUIRE(result.error().size() == 1);
  CHECK(result.error()[0].path == "sinks[1].options.passwordMinLength");
  CHECK(result.error()[0].message == "expected a whole number, found <redacted>");
}

TEST_CASE("a value from a secret environment variable is redacted, others are shown",
          "[config][secrets]") {
  std::string yaml = std::string(kMinimalPipeline) + "trigger: {processingTime: \"${X}\"}\n";
  auto secret =
      testing::ParseText(Replace(yaml, "${X}", "${SERVICE_TOKEN}"), {{"SERVICE_TOKEN", "abcdef"}});
  REQUIRE_FALSE(secret);
  CHECK_THAT(secret.error()[0].message, Catch::Matchers::Contains("<redacted>"));
  CHECK_THAT(secret.error()[0].message, !Catch::Matchers::Contains("abcdef"));
  auto plain = testing::ParseText(yaml, {{"X", "abcdef"}});
  REQUIRE_FALSE(plain);
  CHECK_THAT(plain.error()[0].message, Catch::Matchers::Contains("abcdef"));
}

TEST_CASE("secret options still reach the spec unchanged", "[config][secrets]") {
  auto result = testing::ParseText(WithWebhookSink("      token: \"${API_TOKEN}\"\n"),
                                   {{"API_TOKEN", std::string(kSecret)}});
  INFO(testing::ProblemText(result));
  REQUIRE(result);
  CHECK(result->sinks[1].options.GetString("token") == kSecret);
}

TEST_CASE("the spec lists its secrets: secret options, secret variables' texts, URL passwords",
          "[config][secrets]") {
  std::string yaml = WithWebhookSink("      token: literal-token-1\n");
  yaml = Replace(yaml, "url: http://alerts",
                 "url: \"https://bot:url-pass-77@alerts/${HOOK_TOKEN}\"");
  yaml = Replace(yaml, "{path: /tmp/in}", "{path: \"/data/${DATA_TOKEN}/in\"}");
  auto result = testing::ParseText(
      yaml, {{"HOOK_TOKEN", "hook-token-2"}, {"DATA_TOKEN", "data-token-3"}});
  INFO(testing::ProblemText(result));
  REQUIRE(result);
  const std::vector<std::string>& secrets = result->secrets;
  auto listed = [&](const std::string& value) {
    return std::find(secrets.begin(), secrets.end(), value) != secrets.end();
  };
  CHECK(listed("literal-token-1"));
  CHECK(listed("url-pass-77"));
  CHECK(listed("hook-token-2"));
  CHECK(listed("data-token-3"));
  // Only what the variable put in: the rest of the path and of the URL stay printable.
  CHECK_FALSE(listed("/data/data-token-3/in"));
  CHECK_FALSE(listed("https://bot:url-pass-77@alerts/hook-token-2"));
}

}  // namespace
}  // namespace driftd
