// `driftd demo` as a user runs it (README command 1): an embedded Kafka stand-in fed with
// generated inference logs, the demo pipeline reading them from Kafka, per-model statistics on
// the console, and model-2's drift alert read back from the alerts topic, until Ctrl-C/SIGTERM.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kAlertLine = "Alert read back from Kafka topic driftd-alerts";

size_t Count(const std::string& text, std::string_view needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// The lines of `text` that contain `needle`.
std::vector<std::string> LinesWith(const std::string& text, std::string_view needle) {
  std::vector<std::string> lines;
  for (std::string& line : SplitLines(text)) {
    if (line.find(needle) != std::string::npos) lines.push_back(std::move(line));
  }
  return lines;
}

// The last console table ("Batch: N" and its rows), or "" before the first one.
std::string LastTable(const std::string& output) {
  size_t at = output.rfind("Batch: ");
  return at == std::string::npos ? "" : output.substr(at);
}

bool ShowsEveryModel(const std::string& table) {
  for (const char* model : {"|model-0", "|model-1", "|model-2", "|model-3"}) {
    if (table.find(model) == std::string::npos) return false;
  }
  return true;
}

int ExitCode(const std::optional<int>& status) {
  if (!status || !WIFEXITED(*status)) return -1;
  return WEXITSTATUS(*status);
}

TEST_CASE(
    "the demo shows per-model statistics and model-2's drift alert read back from Kafka within "
    "seconds, alerts on no other model, and stops cleanly on SIGTERM",
    "[e2e][demo]") {
  TempDir dir("driftd-demo-test");
  const std::string output_path = dir / "output.txt";
  const Clock::time_point start = Clock::now();
  ChildProcess demo = ChildProcess::Start({DriftdBinary(), "demo", "--http", "off"}, output_path);
  auto output = [&] { return ReadFile(output_path); };
  auto seconds_since_start = [&] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };

  // The pipeline is ready (checkpoint open, embedded cluster reachable) almost at once.
  REQUIRE(WaitFor([&] { return output().find("ready:") != std::string::npos; },
                  std::chrono::seconds(10)));
  const double ready_s = seconds_since_start();
  const std::string started = output();
  std::smatch match;
  REQUIRE(std::regex_search(started, match, std::regex("demo: checkpoint in (\\S+);")));
  const std::string checkpoint = match[1];
  CHECK(std::filesystem::is_directory(checkpoint));
  CHECK(started.find("embedded Kafka cluster at 127.0.0.1:") != std::string::npos);

  // Statistics tables with a row per model.
  REQUIRE(WaitFor([&] { return ShowsEveryModel(LastTable(output())); }, std::chrono::seconds(30)));
  const std::string table = LastTable(output());
  CHECK(table.find("|model_id|count|") != std::string::npos);

  // model-2's feature 3 drifts 6 s in; its ALERT comes back from the alerts topic.
  REQUIRE(WaitFor(
      [&] {
        for (const std::string& line : LinesWith(output(), kAlertLine)) {
          if (line.find("ALERT model-2 feature_vector[3]") != std::string::npos) return true;
        }
        return false;
      },
      std::chrono::seconds(60)));
  const double alert_s = seconds_since_start();
  WARN("demo ready after " << ready_s << " s, model-2's ALERT on the console after " << alert_s
                           << " s");
  CHECK(alert_s < 30);

  // Two more batches, so that the other models have been watched well past the drift too.
  const size_t batches = Count(output(), "Batch: ");
  REQUIRE(
      WaitFor([&] { return Count(output(), "Batch: ") >= batches + 2; }, std::chrono::seconds(30)));

  demo.Signal(SIGTERM);
  CHECK(ExitCode(demo.Wait(std::chrono::seconds(30))) == 0);
  const std::string final_output = output();
  INFO(final_output);

  const std::vector<std::string> alerts = LinesWith(final_output, kAlertLine);
  CHECK(!alerts.empty());
  std::set<std::string> alerted_models;
  for (const std::string& line : alerts) {
    std::smatch level_and_model;
    REQUIRE(std::regex_search(line, level_and_model,
                              std::regex("\\): (OK|WARN|ALERT|RESOLVED) (model-\\d+) ")));
    alerted_models.insert(level_and_model[2]);
  }
  CHECK(alerted_models == std::set<std::string>{"model-2"});
  // One readable line per alert: the JSON records stay on the topic.
  CHECK(Count(final_output, "\"alert_id\"") == 0);
  for (const std::string& line : alerts) {
    CHECK(std::regex_search(line, std::regex(R"(: (WARN|ALERT) model-2 \S+: )"
                                             R"(\w+ [-0-9.e+]+ \(threshold [-0-9.e+]+\), )"
                                             R"(window mean [-0-9.e+]+ over \d+ values vs )"
                                             R"(baseline mean [-0-9.e+]+ \(stddev [-0-9.e+]+\)$)")));
  }
  // Nothing warns about the demo's own configuration (or anything else).
  CHECK(final_output.find("<built-in demo>:") == std::string::npos);
  for (const std::string& line : SplitLines(final_output)) {
    CHECK_FALSE(std::regex_search(line, std::regex(R"(^\S+ \S+ (warn|error) )")));
  }
  // The tables' numbers have 4 significant digits.
  size_t numbers = 0;
  for (const std::string& line : SplitLines(final_output)) {
    if (!line.starts_with("|model-")) continue;
    std::vector<std::string> cells;
    for (size_t at = 1, next; (next = line.find('|', at)) != std::string::npos; at = next + 1) {
      cells.push_back(line.substr(at, next - at));
    }
    for (size_t c = 2; c < cells.size(); ++c) {  // after model_id and count
      INFO(line);
      const double value = std::stod(cells[c]);
      CHECK(value == std::stod(fmt::format("{:.4g}", value)));
      ++numbers;
    }
  }
  CHECK(numbers > 0);

  CHECK(final_output.find("Terminated received") != std::string::npos);
  CHECK(std::regex_search(final_output, std::regex("demo: fed [1-9][0-9]* records into "
                                                   "inference-logs; read [1-9][0-9]* alerts")));
  // The temporary checkpoint goes with the demo, so the next run starts clean.
  CHECK_FALSE(std::filesystem::exists(checkpoint));
}

TEST_CASE(
    "a demo stop cut short (a second Ctrl-C, or the shutdown timeout) still removes its "
    "temporary checkpoint",
    "[e2e][demo]") {
  // A shutdown timeout of 0 s ends the stop at once, on the path a second signal takes.
  TempDir dir("driftd-demo-test");
  const std::string output_path = dir / "output.txt";
  ChildProcess demo = ChildProcess::Start(
      {DriftdBinary(), "demo", "--http", "off", "--shutdown-timeout", "0"}, output_path);
  auto output = [&] { return ReadFile(output_path); };
  REQUIRE(WaitFor([&] { return output().find("Batch: ") != std::string::npos; },
                  std::chrono::seconds(30)));
  std::smatch match;
  const std::string started = output();
  REQUIRE(std::regex_search(started, match, std::regex("demo: checkpoint in (\\S+);")));
  const std::string checkpoint = match[1];
  REQUIRE(std::filesystem::is_directory(checkpoint));

  demo.Signal(SIGINT);
  const int code = ExitCode(demo.Wait(std::chrono::seconds(30)));
  INFO(output());
  CHECK(code == 75);
  CHECK(output().find("exiting now (exit code 75)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(checkpoint));
}

TEST_CASE("the demo refuses a checkpoint directory that is not empty, since its Kafka starts empty",
          "[e2e][demo]") {
  TempDir dir("driftd-demo-test");
  std::filesystem::create_directories(dir.path() / "checkpoint");
  WriteFile(dir.path() / "checkpoint" / "leftover", "an earlier run");
  RunResult result = RunDriftd({"demo", "--http", "off", "--checkpoint", dir / "checkpoint"},
                               std::chrono::seconds(30));
  CHECK(result.exit_code == 64);
  CHECK(result.output.find("is not empty") != std::string::npos);
  CHECK(std::filesystem::exists(dir.path() / "checkpoint" / "leftover"));
}

TEST_CASE("driftd demo --help says what the demo runs", "[e2e][demo]") {
  RunResult result = RunDriftd({"demo", "--help"}, std::chrono::seconds(30));
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("embedded Kafka") != std::string::npos);
  CHECK(result.output.find("drift") != std::string::npos);
  CHECK(result.output.find("--checkpoint") != std::string::npos);
}

}  // namespace
}  // namespace driftd::testing
