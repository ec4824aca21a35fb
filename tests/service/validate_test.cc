// `driftd validate` passes exactly what `run` starts: every check a query's start makes is made
// at load time, by validate, by run and by a reload, each problem with its YAML path and line;
// and `validate DIR` checks a service directory as `run DIR` loads it.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

int ExitCode(std::optional<int> status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

// A file-source pipeline over `dir`/in writing stats to `dir`/out; `source_options` and
// `sinks` replace the defaults.
std::string FilePipeline(const std::string& name, const std::string& dir,
                         const std::string& source_options = "",
                         const std::string& sinks = "") {
  return "name: " + name + "\n" +
         "schema:\n"
         "  - {name: model_id, type: string, nullable: false}\n"
         "  - {name: prediction, type: double}\n"
         "source:\n"
         "  format: file\n"
         "  options:\n"
         "    path: " + dir + "/in\n" + source_options +
         "query: {groupBy: [model_id], aggregates: [count]}\n"
         "sinks:\n" +
         (sinks.empty() ? "  - {name: out, format: file, stream: stats, outputMode: update, "
                          "options: {path: " + dir + "/out-" + name + "}}\n"
                        : sinks) +
         "trigger: {processingTime: 200 milliseconds}\n"
         "checkpointLocation: " + dir + "/checkpoint-" + name + "\n";
}

std::string KafkaPipeline(const std::string& starting_offsets) {
  return "name: k\n"
         "schema:\n"
         "  - {name: model_id, type: string, nullable: false}\n"
         "source:\n"
         "  format: kafka\n"
         "  options:\n"
         "    kafka.bootstrap.servers: 127.0.0.1:1\n"
         "    subscribe: logs\n"
         "    startingOffsets: " + starting_offsets + "\n"
         "sinks:\n"
         "  - {format: console}\n";
}

struct Case {
  std::string what;
  std::string yaml;
  std::string where;  // ":LINE:COLUMN: path:"
  std::string fragment;
};

}  // namespace

TEST_CASE(
    "validate and run refuse what a query's start refuses, with the option's path and line",
    "[service][validate][e2e]") {
  TempDir dir("driftd-validate");
  const std::string base = dir.path().string();
  const std::vector<Case> cases = {
      {"a misspelt startingOffsets", KafkaPipeline("earliset"),
       ":9:22: source.options.startingOffsets:", "earliset"},
      {"a negative maxFilesPerTrigger", FilePipeline("p", base, "    maxFilesPerTrigger: -5\n"),
       ":9:25: source.options.maxFilesPerTrigger:", "must not be negative"},
      {"two file sinks on one directory",
       FilePipeline("p", base, "",
                    "  - {name: a, format: file, stream: stats, outputMode: update, options: "
                    "{path: " +
                        base +
                        "/out}}\n"
                        "  - {name: b, format: file, stream: stats, outputMode: update, options: "
                        "{path: " +
                        base + "/out/}}\n"),
       ":12:", "sinks[1].options.path: file sink 'b' writes into"},
      {"a file sink on the source's directory",
       FilePipeline("p", base, "",
                    "  - {name: a, format: file, stream: stats, outputMode: update, options: "
                    "{path: " +
                        base + "/in}}\n"),
       ":11:", "sinks[0].options.path: file sink 'a' writes into"},
      {"a webhook URL without a scheme",
       FilePipeline("p", base, "",
                    "  - {name: w, format: webhook, stream: stats, outputMode: update, options: "
                    "{url: hooks.example/x}}\n"),
       ":11:", "sinks[0].options.url: "},
      {"a console sink's numRows out of its range",
       FilePipeline("p", base, "",
                    "  - {name: c, format: console, stream: stats, outputMode: update, options: "
                    "{numRows: -1}}\n"),
       ":11:86: sinks[0].options.numRows:", "must not be negative, found -1"},
      {"a sink's value option the format refuses",
       FilePipeline("p", base, "",
                    "  - {name: k, format: kafka, stream: stats, outputMode: update, options: "
                    "{topic: t, kafka.bootstrap.servers: \"127.0.0.1:1\"}, valueFormat: avro, "
                    "valueOptions: {schemaRegistryUrl: \"ftp://registry\"}}\n"),
       ":11:", "sinks[0].valueOptions.schemaRegistryUrl: is not an http:// or https:// URL"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string file = dir / "p.yaml";
    WriteFile(file, c.yaml);
    RunResult validate = RunDriftd({"validate", file});
    INFO(validate.output);
    CHECK(validate.exit_code == 78);
    CHECK_THAT(validate.output, Catch::Contains(file + c.where));
    CHECK_THAT(validate.output, Catch::Contains(c.fragment));
    RunResult run = RunDriftd({"run", file, "--http", "off"});
    INFO(run.output);
    CHECK(run.exit_code == 78);
    CHECK_THAT(run.output, Catch::Contains(file + c.where));
  }
}

TEST_CASE("validate DIR checks a pipelines directory as run DIR loads it",
          "[service][validate][e2e]") {
  TempDir dir("driftd-validate-dir");
  const std::string base = dir.path().string();
  const std::string pipelines = dir / "pipelines";
  WriteFileAt(pipelines + "/a.yaml", FilePipeline("alpha", base));
  WriteFileAt(pipelines + "/b.yml", FilePipeline("beta", base));
  WriteFileAt(pipelines + "/notes.txt", "not a pipeline\n");
  WriteFileAt(pipelines + "/.editing.yaml", "name: [\n");  // hidden: skipped, as by run DIR

  RunResult good = RunDriftd({"validate", pipelines});
  INFO(good.output);
  CHECK(good.exit_code == 0);
  CHECK_THAT(good.output, Catch::Contains(pipelines + "/a.yaml: ok (pipeline 'alpha'"));
  CHECK_THAT(good.output, Catch::Contains(pipelines + "/b.yml: ok (pipeline 'beta'"));
  CHECK_THAT(good.output, Catch::Contains("2 pipeline files ok, 0 refused"));
  CHECK_THAT(good.output, !Catch::Contains(".editing"));

  // A broken file, and a file claiming a name already taken: both refused, the rest checked.
  WriteFileAt(pipelines + "/c.yaml", FilePipeline("gamma", base, "    maxFilesPerTrigger: -5\n"));
  WriteFileAt(pipelines + "/d.yaml", FilePipeline("alpha", base + "/other"));
  RunResult bad = RunDriftd({"validate", pipelines});
  INFO(bad.output);
  CHECK(bad.exit_code == 78);
  CHECK_THAT(bad.output, Catch::Contains(pipelines + "/c.yaml:9:25: source.options."));
  CHECK_THAT(bad.output, Catch::Contains(pipelines + "/d.yaml: pipeline name 'alpha' is already "
                                                     "used by " + pipelines + "/a.yaml"));
  CHECK_THAT(bad.output, Catch::Contains("2 pipeline files ok, 2 refused"));
}

TEST_CASE("a reload with a value the connector refuses keeps the running query",
          "[service][validate][reload][e2e]") {
  TempDir dir("driftd-validate-reload");
  const std::string base = dir.path().string();
  const std::string pipelines = dir / "pipelines";
  const std::string file = pipelines + "/a.yaml";
  WriteFileAt(file, FilePipeline("alpha", base));
  WriteFileAt(base + "/in/part-0.json", "{\"model_id\":\"m\",\"prediction\":1}\n");
  const std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", pipelines, "--http", "off"}, log);
  REQUIRE(WaitFor([&] { return ReadFile(log).find("\"batchId\":0") != std::string::npos; }));
  WriteFile(file, FilePipeline("alpha", base, "    maxFilesPerTrigger: -5\n"));
  daemon.Signal(SIGHUP);
  REQUIRE(WaitFor([&] { return ReadFile(log).find("reload of ") != std::string::npos; }));
  const std::string text = ReadFile(log);
  INFO(text);
  CHECK_THAT(text, Catch::Contains(file + ":9:25: source.options.maxFilesPerTrigger:"));
  CHECK_THAT(text, Catch::Contains("the running query keeps its previous definition"));
  CHECK_THAT(text, !Catch::Contains("replacing pipeline alpha"));
  // The old query still reads new data.
  AppendFile(base + "/in/part-1.json", "{\"model_id\":\"m\",\"prediction\":2}\n");
  CHECK(WaitFor([&] { return ReadFile(log).find("\"batchId\":1") != std::string::npos; }));
  CHECK_FALSE(daemon.Exited());
  daemon.Signal(SIGTERM);
  CHECK(ExitCode(daemon.Wait(30s)) == 0);
}

}  // namespace driftd::testing
