// driftd as a service, seen from outside: the sd_notify protocol, /metrics, /readyz, and
// SIGHUP reloads of a pipeline directory. Each test runs the real binary.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tests/service/drift_data.h"
#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

int ExitCode(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

Exposition Scrape(int port) {
  HttpReply reply = HttpGet(port, "/metrics");
  Exposition exposition = ParsePrometheus(reply.body);
  if (reply.status != 200) exposition.errors.push_back("status " + std::to_string(reply.status));
  return exposition;
}

double Metric(int port, const std::string& name, const std::map<std::string, std::string>& labels) {
  return Scrape(port).Value(name, labels).value_or(-1);
}

bool Running(int port, const std::string& pipeline) {
  return Metric(port, "driftd_query_state", {{"pipeline", pipeline}, {"state", "running"}}) == 1;
}

// A file-source pipeline over `dir`/input whose records may be malformed (policy drop).
std::string FilePipelineYaml(const std::string& name, const std::string& dir) {
  return "name: " + name + R"(
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: prediction, type: double}
source:
  format: file
  options: {path: )" +
         dir + R"(/input}
  malformed: {policy: drop}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
sinks:
  - {name: stats, format: file, stream: stats, outputMode: update, options: {path: )" +
         dir + R"(/out-file}}
trigger: {processingTime: 200 milliseconds}
checkpointLocation: )" +
         dir + "/checkpoint-" + name + "\n";
}

std::string SocketPipelineYaml(const std::string& name, const std::string& dir, int port) {
  return "name: " + name + R"(
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: prediction, type: double}
source:
  format: socket
  options: {host: 127.0.0.1, port: )" +
         std::to_string(port) + R"(}
query:
  groupBy: [model_id]
  aggregates: [count]
sinks:
  - {name: stats, format: file, stream: stats, outputMode: update, options: {path: )" +
         dir + R"(/out-socket}}
trigger: {processingTime: 200 milliseconds}
checkpointLocation: )" +
         dir + "/checkpoint-" + name + "\n";
}

}  // namespace

TEST_CASE(
    "systemd hears READY=1 only after the checkpoint is restored, then watchdog pings, "
    "STATUS lines and STOPPING=1 on SIGTERM",
    "[service][notify][e2e]") {
  TempDir dir("driftd-notify");
  std::string pipeline = dir / "p.yaml";
  // A first run leaves committed batches in the checkpoint, so the second has state to restore.
  WriteFileAt(pipeline, RatePipelineYaml("notify", dir.path().string()));
  {
    std::string first_log = dir / "first.txt";
    auto first = ChildProcess::Start({DriftdBinary(), "run", pipeline, "--http", "off"}, first_log);
    REQUIRE(
        WaitFor([&] { return ReadFile(first_log).find("\"batchId\":1") != std::string::npos; }));
    first.Signal(SIGTERM);
    REQUIRE(ExitCode(first.Wait(30s)) == 0);
  }

  NotifyListener notify(dir / "notify.sock");
  std::string log = dir / "log.txt";
  auto daemon =
      ChildProcess::Start({DriftdBinary(), "run", pipeline, "--http", "off", "--quiet-progress"},
                          log, {{"NOTIFY_SOCKET", notify.path()}, {"WATCHDOG_USEC", "400000"}});

  std::vector<NotifyListener::Message> before_ready;
  auto ready = notify.WaitFor("READY=1", 30s, &before_ready);
  INFO(ReadFile(log));
  REQUIRE(ready);
  // By the time systemd hears READY=1, the restore is done and logged.
  CHECK_THAT(ReadFile(log), Catch::Contains("notify: resuming after batch"));
  for (const auto& message : before_ready) CHECK(message.text.rfind("STATUS=", 0) != 0);

  // WATCHDOG_USEC=400 ms: pings every 200 ms. Collect two seconds of messages.
  std::vector<NotifyListener::Message> messages;
  auto until = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < until) {
    if (auto message = notify.Receive(100ms)) messages.push_back(*message);
  }
  std::vector<std::chrono::steady_clock::time_point> pings;
  bool status_with_batch = false;
  for (const auto& message : messages) {
    if (message.text == "WATCHDOG=1") pings.push_back(message.at);
    if (message.text.rfind("STATUS=", 0) == 0 &&
        message.text.find("last batch") != std::string::npos) {
      status_with_batch = true;
    }
  }
  CHECK(pings.size() >= 6);
  CHECK(pings.size() <= 14);
  REQUIRE(pings.size() >= 2);
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < pings.size(); ++i) {
    gaps.push_back(
        std::chrono::duration_cast<std::chrono::milliseconds>(pings[i] - pings[i - 1]).count());
  }
  std::sort(gaps.begin(), gaps.end());
  int64_t median = gaps[gaps.size() / 2];
  CHECK(median >= 150);
  CHECK(median <= 300);
  // STATUS= names the last batch and its rows.
  CHECK(status_with_batch);

  daemon.Signal(SIGTERM);
  CHECK(notify.WaitFor("STOPPING=1", 10s));
  CHECK(ExitCode(daemon.Wait(30s)) == 0);
}

TEST_CASE("without NOTIFY_SOCKET driftd runs and stops normally", "[service][notify][e2e]") {
  TempDir dir("driftd-nonotify");
  WriteFileAt(dir / "p.yaml", RatePipelineYaml("plain", dir.path().string(), "{once: true}"));
  RunResult result = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, 60s,
                               {{"NOTIFY_SOCKET", ""}, {"WATCHDOG_USEC", "100000"}});
  INFO(result.output);
  CHECK(result.exit_code == 0);
  // Trigger once on a rate source that has produced nothing yet: no batch, and the log says so.
  CHECK_THAT(result.output, Catch::Contains("pipeline plain stopped"));
  CHECK_THAT(result.output, !Catch::Contains("batch -1"));
}

TEST_CASE("a run with nothing new to read says so, not that it stopped after batch -1",
          "[service][e2e]") {
  TempDir dir("driftd-nothing-new");
  WriteFileAt(dir / "input/logs.jsonl", DriftRecords({.records_per_model = 600}));
  WriteFileAt(dir / "p.yaml", DriftPipelineYaml("again", dir / "input", dir / "out",
                                                "{availableNow: true}"));
  RunResult first = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, 60s);
  INFO(first.output);
  CHECK(first.exit_code == 0);
  CHECK_THAT(first.output, Catch::Contains("pipeline again stopped after batch 0 (this run: 1 "
                                           "batch, 2400 input rows"));
  RunResult second = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, 60s);
  INFO(second.output);
  CHECK(second.exit_code == 0);
  CHECK_THAT(second.output, Catch::Contains("resuming after batch 0"));
  CHECK_THAT(second.output,
             Catch::Contains("pipeline again stopped with no new batch: nothing new to read"));
  CHECK_THAT(second.output, !Catch::Contains("batch -1"));
}

TEST_CASE("/metrics is valid Prometheus text whose counters move between two scrapes",
          "[service][metrics][e2e]") {
  TempDir dir("driftd-metrics");
  std::string pipelines = dir / "pipelines";
  WriteFileAt(pipelines + "/rate.yaml", RatePipelineYaml("rate", dir.path().string()));
  WriteFileAt(pipelines + "/files.yml", FilePipelineYaml("files", dir.path().string()));
  WriteFileAt(dir / "input/a.jsonl",
              "{\"model_id\":\"m1\",\"prediction\":0.5}\n"
              "this is not json\n"
              "{\"model_id\":\"m1\",\"prediction\":\"oops\"}\n"
              "{\"model_id\":\"m2\",\"prediction\":0.25}\n");
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", pipelines, "--http", "127.0.0.1:0", "--quiet-progress"}, log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);

  REQUIRE(WaitFor([&] {
    return Metric(*port, "driftd_batches_total", {{"pipeline", "rate"}}) >= 2 &&
           Metric(*port, "driftd_input_rows_total", {{"pipeline", "files"}}) >= 2;
  }));
  Exposition first = Scrape(*port);
  INFO(fmt::format("errors: {}", fmt::join(first.errors, "\n")));
  REQUIRE(first.errors.empty());
  double batches = first.Value("driftd_batches_total", {{"pipeline", "rate"}}).value();
  REQUIRE(WaitFor([&] {
    return Metric(*port, "driftd_batches_total", {{"pipeline", "rate"}}) > batches;
  }));
  Exposition second = Scrape(*port);
  REQUIRE(second.errors.empty());

  // Every family is described, every pipeline-level sample is labelled with its pipeline.
  for (const auto& [family, type] : second.types) CHECK(second.help.count(family) == 1);
  for (const Sample& sample : second.samples) {
    bool process_level = sample.name == "driftd_build_info" ||
                         sample.name.rfind("process_", 0) == 0 ||
                         sample.name == "driftd_reloads_total" || sample.name == "driftd_pipelines";
    if (!process_level) CHECK(sample.labels.count("pipeline") == 1);
  }
  for (const char* family :
       {"driftd_batches_total", "driftd_input_rows_total", "driftd_output_rows_total",
        "driftd_malformed_rows_total", "driftd_rows_dropped_by_watermark_total",
        "driftd_rows_filtered_total",
        "driftd_source_lag_records", "driftd_batch_duration_seconds", "driftd_state_keys",
        "driftd_state_bytes", "driftd_alerts_total", "driftd_drift_statistic",
        "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
        "process_max_fds", "process_start_time_seconds"}) {
    INFO(family);
    CHECK(second.types.count(family) == 1);
  }

  std::map<std::string, std::string> rate{{"pipeline", "rate"}};
  CHECK(second.Value("driftd_input_rows_total", rate) >
        first.Value("driftd_input_rows_total", rate));
  CHECK(second.Value("driftd_batch_duration_seconds_count", rate) >
        first.Value("driftd_batch_duration_seconds_count", rate));
  CHECK(second.Value("driftd_batch_duration_seconds_bucket",
                     {{"pipeline", "rate"}, {"le", "+Inf"}}) ==
        second.Value("driftd_batch_duration_seconds_count", rate));
  CHECK(second.Value("driftd_state_keys", rate) > 0);
  CHECK(second.Value("driftd_state_bytes", rate) > 0);
  CHECK(second.Value("driftd_source_lag_records",
                     {{"pipeline", "rate"}, {"topic", ""}, {"partition", "rate-0"}}));
  CHECK(second.Value("process_resident_memory_bytes", {}) > 1e6);
  CHECK(second.Value("process_open_fds", {}) > 2);
  CHECK(second.Value("process_max_fds", {}) >= second.Value("process_open_fds", {}));
  // The malformed lines are counted by reason; the two good ones are the input rows that count.
  CHECK(second.Value("driftd_malformed_rows_total",
                     {{"pipeline", "files"}, {"reason", "not_json"}}) == 1);
  CHECK(second.Value("driftd_malformed_rows_total",
                     {{"pipeline", "files"}, {"reason", "wrong_type"}}) == 1);

  CHECK(HttpGet(*port, "/healthz").status == 200);
  CHECK(HttpGet(*port, "/readyz").status == 200);
  HttpReply progress = HttpGet(*port, "/progress?pipeline=rate");
  CHECK(progress.status == 200);
  CHECK(progress.body.front() == '[');
  CHECK(progress.body.back() == ']');
  CHECK_THAT(progress.body, Catch::Contains("\"batchId\""));
  CHECK_THAT(progress.body, !Catch::Contains("\"name\":\"files\""));

  daemon.Signal(SIGTERM);
  CHECK(ExitCode(daemon.Wait(30s)) == 0);
}

TEST_CASE("/metrics shows each model's drift series by level, the drifted model in alert",
          "[service][metrics][drift][e2e]") {
  TempDir dir("driftd-drift-metrics");
  std::string yaml = RatePipelineYaml("drifting", dir.path().string());
  const std::string options = "seed: 3}";
  yaml.replace(yaml.find(options), options.size(),
               "seed: 3, rowsPerSecond: 4000, drift: model-1 prediction shifts by 3 sigma after "
               "2 s}");
  yaml.replace(yaml.find("rowsPerSecond: 2000, "), 21, "");
  WriteFileAt(dir / "drifting.yaml", yaml);
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "drifting.yaml", "--http", "127.0.0.1:0", "--quiet-progress"},
      log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  auto series = [&](const char* model, const char* level) {
    return Metric(*port, "driftd_drift_model_series",
                  {{"pipeline", "drifting"}, {"model", model}, {"level", level}});
  };
  REQUIRE(WaitFor([&] { return series("model-1", "alert") >= 1; }, 60s));
  Exposition scrape = Scrape(*port);
  REQUIRE(scrape.errors.empty());
  std::map<std::string, std::string> model0{{"pipeline", "drifting"}, {"model", "model-0"}};
  CHECK(scrape.Value("driftd_drift_model_series",
                     {{"pipeline", "drifting"}, {"model", "model-0"}, {"level", "alert"}}) == 0);
  CHECK(scrape.Value("driftd_drift_model_series",
                     {{"pipeline", "drifting"}, {"model", "model-0"}, {"level", "ok"}}) >= 1);
  CHECK(scrape.Value("driftd_drift_model_values_total", model0) > 0);
  CHECK(scrape.Value("driftd_drift_model_alert", model0) == 0);

  // A restart restores the monitor: the model is still in alert before any new alert event.
  daemon.Signal(SIGTERM);
  REQUIRE(ExitCode(daemon.Wait(30s)) == 0);
  std::string log2 = dir / "log2.txt";
  auto restarted = ChildProcess::Start(
      {DriftdBinary(), "run", dir / "drifting.yaml", "--http", "127.0.0.1:0", "--quiet-progress"},
      log2);
  auto port2 = WaitForHttpPort(log2);
  REQUIRE(port2);
  REQUIRE(WaitFor([&] {
    return Metric(*port2, "driftd_drift_model_series",
                  {{"pipeline", "drifting"}, {"model", "model-1"}, {"level", "alert"}}) >= 1;
  }));
  CHECK(Metric(*port2, "driftd_alerts_total",
               {{"pipeline", "drifting"}, {"model", "model-1"}, {"level", "alert"}}) == 0);
  restarted.Signal(SIGTERM);
  CHECK(ExitCode(restarted.Wait(30s)) == 0);
}

TEST_CASE("/readyz is 503 while the socket source's server is down and 200 once it serves",
          "[service][readyz][e2e]") {
  TempDir dir("driftd-readyz");
  int source_port = FreePort();
  std::string pipelines = dir / "pipelines";
  WriteFileAt(pipelines + "/socket.yaml",
              SocketPipelineYaml("lines", dir.path().string(), source_port));
  std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", pipelines, "--http", "127.0.0.1:0", "--quiet-progress"}, log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);

  // The server is down: the query retries its start, the process is healthy but not ready.
  REQUIRE(WaitFor([&] { return ReadFile(log).find("retrying in") != std::string::npos; }));
  HttpReply not_ready = HttpGet(*port, "/readyz");
  CHECK(not_ready.status == 503);
  CHECK_THAT(not_ready.body, Catch::Contains("lines"));
  CHECK(HttpGet(*port, "/healthz").status == 200);

  // Bring the server up: the next attempt connects and the daemon becomes ready.
  int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(source_port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(server, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(listen(server, 4) == 0);
  int connection = -1;
  std::thread acceptor([&] { connection = accept(server, nullptr, nullptr); });
  CHECK(WaitFor([&] { return HttpGet(*port, "/readyz").status == 200; }));
  acceptor.join();
  REQUIRE(connection >= 0);
  std::string lines = "{\"model_id\":\"m1\",\"prediction\":1}\n";
  CHECK(send(connection, lines.data(), lines.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(lines.size()));
  CHECK(WaitFor([&] {
    return Metric(*port, "driftd_input_rows_total", {{"pipeline", "lines"}}) == 1;
  }));

  // The server goes away: not ready again.
  close(connection);
  close(server);
  CHECK(WaitFor([&] { return HttpGet(*port, "/readyz").status == 503; }));
  CHECK(Metric(*port, "driftd_query_ready", {{"pipeline", "lines"}}) == 0);

  daemon.Signal(SIGTERM);
  CHECK(ExitCode(daemon.Wait(30s)) == 0);
}

TEST_CASE(
    "SIGHUP replaces a changed pipeline on its checkpoint, starts new files, stops removed "
    "ones, and keeps the old query when a file is broken or incompatible",
    "[service][reload][e2e]") {
  TempDir dir("driftd-reload");
  std::string base = dir.path().string();
  std::string pipelines = dir / "pipelines";
  std::string a = pipelines + "/a.yaml";
  WriteFileAt(a, RatePipelineYaml("alpha", base));
  WriteFileAt(pipelines + "/b.yaml", RatePipelineYaml("beta", base));
  WriteFileAt(pipelines + "/notes.txt", "not a pipeline\n");
  std::string log = dir / "log.txt";
  NotifyListener notify(dir / "notify.sock");
  auto daemon = ChildProcess::Start(
      {DriftdBinary(), "run", pipelines, "--http", "127.0.0.1:0", "--quiet-progress"}, log,
      {{"NOTIFY_SOCKET", notify.path()}});
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  REQUIRE(notify.WaitFor("READY=1", 30s));
  REQUIRE(WaitFor([&] { return Running(*port, "alpha") && Running(*port, "beta"); }));
  size_t reloads = 0;
  auto reload = [&] {
    ++reloads;
    daemon.Signal(SIGHUP);
    REQUIRE(WaitFor([&] { return Count(ReadFile(log), "reload of ") == reloads; }));
  };
  auto alpha_batches = [&] {
    return Metric(*port, "driftd_last_batch_id", {{"pipeline", "alpha"}});
  };

  SECTION("a broken file is reported problem by problem and its old query keeps running") {
    std::string broken = RatePipelineYaml("alpha", base);
    broken.replace(broken.find("rowsPerSecond"), 13, "rowsPerSecnd");
    broken.replace(broken.find("groupBy"), 7, "groupyBy");
    WriteFileAt(a, broken);
    RunResult validate = RunDriftd({"validate", a});
    REQUIRE(validate.exit_code == 78);
    reload();
    std::string text = ReadFile(log);
    // Every problem `driftd validate` prints is in the log.
    size_t problems = 0;
    for (const std::string& line : SplitLines(validate.output)) {
      if (line.rfind(a + ":", 0) != 0) continue;
      if (line.find("the pipeline was not started") != std::string::npos) continue;
      if (line.find("warning") != std::string::npos) continue;
      ++problems;
      CHECK_THAT(text, Catch::Contains(line));
    }
    CHECK(problems >= 2);
    CHECK_THAT(text, Catch::Contains("the running query keeps its previous definition"));
    double before = alpha_batches();
    CHECK(WaitFor([&] { return alpha_batches() > before; }));
    CHECK(Running(*port, "alpha"));
    CHECK(Metric(*port, "driftd_reloads_total", {{"result", "failed"}}) == 1);
    // systemd was told about the reload and that the daemon is ready again.
    CHECK(notify.WaitFor("RELOADING=1", 5s));
    CHECK(notify.WaitFor("READY=1", 5s));
  }

  SECTION("a changed file that validates replaces its query, which resumes its checkpoint") {
    REQUIRE(WaitFor([&] { return alpha_batches() >= 2; }));
    WriteFileAt(a, RatePipelineYaml("alpha", base, "{processingTime: 300 milliseconds}"));
    reload();
    std::string text = ReadFile(log);
    CHECK_THAT(text, Catch::Contains("replacing pipeline alpha"));
    CHECK(WaitFor(
        [&] { return ReadFile(log).find("alpha: resuming after batch") != std::string::npos; }));
    CHECK(WaitFor([&] { return Running(*port, "alpha"); }));
    double before = alpha_batches();
    CHECK(WaitFor([&] { return alpha_batches() > before; }));
    // beta was not touched.
    CHECK(Count(ReadFile(log), "pipeline beta running") == 1);
    CHECK(Metric(*port, "driftd_reloads_total", {{"result", "ok"}}) == 1);
  }

  SECTION("a change the checkpoint cannot serve is refused and the old query keeps running") {
    WriteFileAt(a,
                RatePipelineYaml("alpha", base, "{processingTime: 200 milliseconds}", "[count]"));
    reload();
    std::string text = ReadFile(log);
    CHECK_THAT(text, Catch::Contains("cannot serve: aggregates changed"));
    CHECK(Count(text, "pipeline alpha running") == 1);
    double before = alpha_batches();
    CHECK(WaitFor([&] { return alpha_batches() > before; }));
  }

  SECTION("a new file starts a query and a removed file stops its query") {
    WriteFileAt(pipelines + "/c.yml", RatePipelineYaml("gamma", base));
    std::filesystem::remove(pipelines + "/b.yaml");
    reload();
    CHECK(WaitFor([&] { return Running(*port, "gamma"); }));
    CHECK_THAT(ReadFile(log), Catch::Contains("stopping pipeline beta"));
    CHECK_THAT(ReadFile(log), Catch::Contains("pipeline beta stopped"));
    Exposition metrics = Scrape(*port);
    CHECK_FALSE(metrics.Value("driftd_batches_total", {{"pipeline", "beta"}}));
    CHECK(metrics.Value("driftd_pipelines", {}) == 2);
  }

  SECTION("a second file claiming a running pipeline's name is refused") {
    WriteFileAt(pipelines + "/d.yaml", RatePipelineYaml("alpha", base + "/other"));
    reload();
    CHECK_THAT(ReadFile(log), Catch::Contains("pipeline name 'alpha' is already used by"));
    CHECK(Metric(*port, "driftd_pipelines", {}) == 2);
  }

  daemon.Signal(SIGTERM);
  CHECK(ExitCode(daemon.Wait(30s)) == 0);
}

}  // namespace driftd::testing
