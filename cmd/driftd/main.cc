// driftd: the command line. Wiring only: parse arguments, set up logging and signals, load the
// pipeline, run the executor. Exit codes are documented in README.md and below.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cmd/driftd/demo.h"
#include "cmd/driftd/logging.h"
#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/executor.h"
#include "engine/log.h"
#include "state/checkpoint_inspect.h"

namespace driftd {
namespace {

// Exit codes (sysexits.h where one fits).
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;     // the query failed at run time (sink, broker, disk)
constexpr int kExitUsage = 64;      // bad command line
constexpr int kExitDataError = 65;  // a malformed record under policy fail, or data loss
constexpr int kExitIoError = 74;    // the checkpoint cannot be read or written
constexpr int kExitConfig = 78;     // the pipeline file is invalid, or the checkpoint refuses it

int ExitCodeFor(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kConfig:
    case ErrorCode::kIncompatible: return kExitConfig;
    case ErrorCode::kMalformedRecord:
    case ErrorCode::kDataLoss: return kExitDataError;
    case ErrorCode::kIo:
    case ErrorCode::kCorruption: return kExitIoError;
    case ErrorCode::kInvalidArgument: return kExitUsage;
    default: return kExitFailure;
  }
}

struct RunFlags {
  std::string pipeline;
  std::string log_format = "text";
  std::string log_level = "info";
  int shutdown_timeout_s = 30;
  bool quiet_progress = false;
};

// Loads and validates a pipeline file, printing every problem. Returns nullopt on failure.
std::optional<PipelineSpec> LoadOrReport(const std::string& path, std::string_view yaml_text,
                                         bool from_text) {
  LoadOptions options;
  options.catalog = &ConnectorDeclarations();
  std::vector<ConfigProblem> warnings;
  options.warnings = &warnings;
  PipelineResult result = from_text ? ParsePipeline(yaml_text, path, options)
                                    : LoadPipelineFile(path, options);
  if (!result) {
    std::cerr << FormatProblems(path, result.error());
    size_t errors = 0;
    for (const auto& problem : result.error()) errors += problem.severity == ProblemSeverity::kError;
    std::cerr << fmt::format("{}: {} error{}; the pipeline was not started\n", path, errors,
                             errors == 1 ? "" : "s");
    return std::nullopt;
  }
  if (!warnings.empty()) std::cerr << FormatProblems(path, warnings);
  return std::move(*result);
}

// Runs a pipeline until its trigger ends or a signal stops it.
int RunPipeline(const PipelineSpec& spec, const RunFlags& flags) {
  auto log = GetLogger("driftd");
  ExecutorOptions options;
  options.fingerprint_json = PipelineFingerprintJson(spec);
  if (!flags.quiet_progress) {
    options.on_progress = [log](const std::string& json) { log->info("progress {}", json); };
  }
  auto executor = QueryExecutor::Create(spec, std::move(options));
  if (!executor) {
    log->error("pipeline {}: {}", spec.name, executor.error().message());
    return ExitCodeFor(executor.error());
  }

  // Signals: a dedicated thread waits for them; the first asks the query to stop after the
  // current batch, a second one (or the shutdown timeout) ends the process at once. Every
  // batch is committed atomically, so an abrupt end loses nothing that was committed.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::atomic<bool> done{false};
  QueryExecutor* query = executor->get();
  std::thread signal_thread([&, log] {
    int stops = 0;
    while (!done.load()) {
      timespec timeout{0, 200'000'000};
      int signal = sigtimedwait(&signals, nullptr, &timeout);
      if (signal <= 0) continue;
      if (signal == SIGHUP) {
        log->info("SIGHUP: reload is not supported for a single pipeline file; ignored");
        continue;
      }
      if (++stops == 1) {
        log->info("{} received: stopping after the current batch (again to stop at once)",
                  strsignal(signal));
        query->Stop();
        std::thread([timeout_s = flags.shutdown_timeout_s, &done, log] {
          auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
          while (!done.load() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
          if (!done.load()) {
            log->error("shutdown did not finish within {} s; exiting", timeout_s);
            spdlog::shutdown();
            _exit(kExitFailure);
          }
        }).detach();
      } else {
        log->warn("second signal: exiting now");
        spdlog::shutdown();
        _exit(128 + signal);
      }
    }
  });
  auto finish = [&](int code) {
    done.store(true);
    signal_thread.join();
    return code;
  };

  if (auto started = (*executor)->Start(); !started) {
    log->error("pipeline {}: {}", spec.name, started.error().message());
    return finish(ExitCodeFor(started.error()));
  }
  log->info("pipeline {} running (trigger {}, checkpoint {})", spec.name,
            ToString(spec.trigger.kind), spec.checkpoint_location);
  Status status = (*executor)->Run();
  if (!status) {
    log->error("pipeline {} failed: {}", spec.name, status.error().message());
    return finish(ExitCodeFor(status.error()));
  }
  const QueryCounters& counters = (*executor)->counters();
  log->info("pipeline {} stopped after batch {} ({} input rows, {} alerts)", spec.name,
            counters.last_batch_id.load(), counters.input_rows.load(), counters.alerts.load());
  return finish(kExitOk);
}

}  // namespace
}  // namespace driftd

int main(int argc, char** argv) {
  using namespace driftd;
  CLI::App app{"driftd: a drift-monitoring daemon for model inference streams"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("driftd ") + DRIFTD_VERSION);
  app.footer(
      "Exit codes: 0 ok, 1 runtime failure, 64 usage, 65 malformed record (policy fail) or "
      "data loss, 74 checkpoint I/O error, 78 invalid pipeline or incompatible checkpoint.");

  RunFlags flags;
  auto add_logging = [&](CLI::App* command) {
    command->add_option("--log-format", flags.log_format, "Log format: text or json")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
    command->add_option("--log-level", flags.log_level,
                        "Log level: trace, debug, info, warn, error")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
        ->capture_default_str();
  };

  CLI::App* run = app.add_subcommand("run", "Run a pipeline until its trigger ends or a signal");
  run->add_option("PIPELINE", flags.pipeline, "Pipeline file (YAML)")->required();
  run->add_option("--shutdown-timeout", flags.shutdown_timeout_s,
                  "Seconds a stop may take before the process exits anyway")
      ->capture_default_str();
  run->add_flag("--quiet-progress", flags.quiet_progress, "Do not log a progress record per batch");
  add_logging(run);

  CLI::App* demo = app.add_subcommand(
      "demo", "Run the built-in demo: generated inference logs with injected drift");
  std::string demo_dir;
  demo->add_option("--checkpoint", demo_dir, "Checkpoint directory (default: a new temp dir)");
  add_logging(demo);

  std::string validate_path;
  CLI::App* validate = app.add_subcommand("validate", "Check a pipeline file and print every problem");
  validate->add_option("PIPELINE", validate_path, "Pipeline file (YAML)")->required();

  std::string inspect_path;
  bool inspect_json = false;
  CLI::App* inspect = app.add_subcommand("inspect", "Print what a checkpoint holds");
  inspect->add_option("CHECKPOINT", inspect_path, "Checkpoint directory")->required();
  inspect->add_flag("--json", inspect_json, "Print one JSON object");

  CLI::App* reference = app.add_subcommand(
      "reference", "Print the connector option reference (Markdown), from the declarations");
  CLI::App* version = app.add_subcommand("version", "Print the version");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  if (version->parsed()) {
    std::cout << "driftd " << DRIFTD_VERSION << "\n";
    return kExitOk;
  }
  if (reference->parsed()) {
    std::cout << ConnectorReferenceMarkdown();
    return kExitOk;
  }
  if (inspect->parsed()) {
    auto report = InspectCheckpoint(inspect_path, inspect_json);
    if (!report) {
      std::cerr << "driftd inspect: " << report.error().message() << "\n";
      return ExitCodeFor(report.error());
    }
    std::cout << *report;
    return kExitOk;
  }
  if (validate->parsed()) {
    auto spec = LoadOrReport(validate_path, {}, false);
    if (!spec) return kExitConfig;
    std::cout << fmt::format("{}: ok (pipeline '{}', source {}, {} sink{}, trigger {})\n",
                             validate_path, spec->name, spec->source.format, spec->sinks.size(),
                             spec->sinks.size() == 1 ? "" : "s", ToString(spec->trigger.kind));
    return kExitOk;
  }

  SetUpLogging(flags.log_format, flags.log_level);
  if (demo->parsed()) {
    if (demo_dir.empty()) {
      demo_dir = (std::filesystem::temp_directory_path() /
                  fmt::format("driftd-demo-{}", static_cast<long>(getpid())))
                     .string();
    }
    setenv("DRIFTD_DEMO_CHECKPOINT", demo_dir.c_str(), 1);
    auto spec = LoadOrReport("<built-in demo>", DemoPipelineYaml(), true);
    if (!spec) return kExitConfig;
    flags.quiet_progress = true;
    GetLogger("driftd")->info("demo: checkpoint in {}; press Ctrl-C to stop", demo_dir);
    return RunPipeline(*spec, flags);
  }
  auto spec = LoadOrReport(flags.pipeline, {}, false);
  if (!spec) return kExitConfig;
  return RunPipeline(*spec, flags);
}
