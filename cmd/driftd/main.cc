// driftd: the command line. Wiring only: parse arguments, set up logging and signals, load the
// pipelines and run them under the supervisor. Exit codes are documented in
// cmd/driftd/README.md and cmd/driftd/supervisor.h.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "cmd/driftd/baseline.h"
#include "cmd/driftd/config_watch.h"
#include "cmd/driftd/demo.h"
#include "cmd/driftd/http_access.h"
#include "cmd/driftd/http_server.h"
#include "cmd/driftd/logging.h"
#include "cmd/driftd/notify.h"
#include "cmd/driftd/preflight.h"
#include "cmd/driftd/prometheus.h"
#include "cmd/driftd/report.h"
#include "cmd/driftd/status.h"
#include "cmd/driftd/supervisor.h"
#include "config/detectors.h"
#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/executor.h"
#include "engine/log.h"
#include "engine/redact.h"
#include "state/checkpoint_inspect.h"

namespace driftd {
namespace {

using Clock = std::chrono::steady_clock;

struct RunFlags {
  std::string pipeline;
  std::string log_format = "text";
  std::string log_level = "info";
  int shutdown_timeout_s = 30;
  bool quiet_progress = false;
  std::string http = "127.0.0.1:9464";
  bool http_given = false;
  /// Host names the endpoint answers besides IP addresses and localhost (DNS rebinding).
  std::vector<std::string> http_allowed_hosts;
  size_t progress_history = 32;
  /// Series per pipeline with per-detector drift gauges in /metrics.
  size_t metrics_max_series = 2000;
  /// Models per pipeline with per-model families in /metrics.
  size_t metrics_max_models = 500;
  /// /healthz fails (and the watchdog is withheld) while a query has been inside one batch,
  /// without reading input, for longer than this. 0: WatchdogSec under systemd, else 30 s.
  double liveness_timeout_s = 0;
  bool liveness_given = false;
  /// Seconds between catch-up progress lines in the log when stderr is not a terminal.
  double progress_log_interval_s = 10;
  /// Re-read the pipelines when their files change (inotify), as on SIGHUP.
  bool reload_on_change = false;
};

// `driftd validate FILE`: loads a pipeline file as `run` does (the loader's rules, then what the
// query's start would check), printing every problem. Returns nullopt on failure.
std::optional<PipelineSpec> LoadOrReport(const std::string& path) {
  LoadOptions options;
  options.catalog = &ConnectorDeclarations();
  options.value_formats = &ValueFormats();
  std::vector<ConfigProblem> warnings;
  options.warnings = &warnings;
  PipelineResult result = LoadPipelineFile(path, options);
  if (result) {
    // Messages from here on (the connectors', the drift stage's) may hold a secret's value.
    RegisterSecrets(result->secrets);
    if (std::vector<ConfigProblem> problems = PreflightProblems(*result); !problems.empty()) {
      problems.insert(problems.end(), warnings.begin(), warnings.end());
      result = tl::unexpected(std::move(problems));
    }
  }
  if (!result) {
    size_t errors = 0;
    for (const auto& problem : result.error()) {
      errors += problem.severity == ProblemSeverity::kError;
    }
    std::cerr << Redact(FormatProblems(path, result.error()));
    std::cerr << fmt::format("{}: {} error{}; the pipeline was not started\n", path, errors,
                             errors == 1 ? "" : "s");
    return std::nullopt;
  }
  if (!warnings.empty()) std::cerr << Redact(FormatProblems(path, warnings));
  return std::move(*result);
}

// `driftd sink-schema`: the writer schema of a sink whose value format has one (avro).
int PrintSinkSchema(const std::string& path, const std::string& sink_name) {
  auto spec = LoadOrReport(path);
  if (!spec) return kExitConfig;
  std::vector<std::string> names;  // the sinks that write with a schema
  std::map<std::string, std::string> schemas;
  for (const SinkSpec& sink : spec->sinks) {
    if (!FindValueFormat(ValueFormats(), sink.value_format)) continue;
    auto encoder = CreateValueEncoder(ValueFormats(), *spec, sink,
                                      sink.options.GetString("topic") + "-value");
    if (!encoder) {
      std::cerr << Redact(encoder.error().message()) << "\n";
      return kExitConfig;
    }
    if ((*encoder)->schema_text().empty()) continue;
    names.push_back(sink.name);
    schemas[sink.name] = (*encoder)->schema_text();
  }
  std::string chosen = sink_name;
  if (chosen.empty() && names.size() == 1) chosen = names.front();
  auto it = schemas.find(chosen);
  if (it == schemas.end()) {
    std::cerr << fmt::format(
        "{}: {}; the sinks with an Avro writer schema: {}\n", path,
        sink_name.empty() ? std::string("name the sink")
                          : fmt::format("sink '{}' writes no Avro", sink_name),
        names.empty() ? std::string("none") : fmt::format("'{}'", fmt::join(names, "', '")));
    return kExitUsage;
  }
  std::cout << it->second;
  return kExitOk;
}

std::string Summary(const std::string& path, const PipelineSpec& spec) {
  return Redact(fmt::format("{}: ok (pipeline '{}', source {}, {} sink{}, trigger {})\n", path,
                            spec.name, spec.source.format, spec.sinks.size(),
                            spec.sinks.size() == 1 ? "" : "s", ToString(spec.trigger.kind)));
}

// `driftd validate DIR`: every pipeline file of a service directory, as `run DIR` loads them,
// including the rules between files (unique names and checkpoint locations).
int ValidateDirectory(const std::string& directory) {
  std::string problem;
  std::vector<std::string> files = ListPipelineFiles(directory, problem);
  if (!problem.empty()) {
    std::cerr << problem << "\n";
    return kExitConfig;
  }
  int refused = 0;
  int accepted = 0;
  std::map<std::string, std::string> names;        // name -> file
  std::map<std::string, std::string> checkpoints;  // location -> file
  for (const std::string& file : files) {
    auto spec = LoadOrReport(file);
    if (!spec) {
      ++refused;
      continue;
    }
    std::string clash;
    if (auto it = names.find(spec->name); it != names.end()) {
      clash = fmt::format("pipeline name '{}' is already used by {}", spec->name, it->second);
    } else if (auto at = checkpoints.find(spec->checkpoint_location); at != checkpoints.end()) {
      clash = fmt::format("checkpointLocation {} is already used by {}",
                          spec->checkpoint_location, at->second);
    }
    if (!clash.empty()) {
      std::cerr << Redact(fmt::format("{}: {}; `run {}` would not start it\n", file, clash,
                                      directory));
      ++refused;
      continue;
    }
    names.emplace(spec->name, file);
    checkpoints.emplace(spec->checkpoint_location, file);
    ++accepted;
    std::cout << Summary(file, *spec);
  }
  std::cout << fmt::format("{}: {} pipeline file{} ok, {} refused{}\n", directory, accepted,
                           accepted == 1 ? "" : "s", refused,
                           files.empty() ? " (no *.yaml or *.yml files)" : "");
  return refused > 0 ? kExitConfig : kExitOk;
}

double NowEpochSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The signal a query's thread sends the control loop when it ends, so that the loop notices
// at once instead of at its next tick (a run of a file that ends by itself took up to 100 ms
// longer than its work). Sent to the control thread only; one from outside just wakes the loop.
int WakeSignal() { return SIGRTMIN; }

// A directory the process made for this run only (the demo's temporary checkpoint): removed
// also when a second signal or the shutdown timeout ends the process at once. Set before the
// service starts, then only read.
std::string temporary_directory;

// Ends the process at once with `code`, without the queries' teardown: every batch is
// committed atomically, so the one in progress is redone on the next start.
[[noreturn]] void ExitNow(int code) {
  spdlog::shutdown();
  if (!temporary_directory.empty()) {
    std::error_code error;
    std::filesystem::remove_all(temporary_directory, error);
  }
  _exit(code);
}

// Blocks SIGINT, SIGTERM, SIGHUP and the wake signal in the calling thread (and the threads it
// starts later), so that the control loop receives them with sigtimedwait. Returns that set.
sigset_t BlockControlSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, WakeSignal());
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Runs the pipelines of `options` (one file, or a directory) as a service until their end (a
// single file's trigger) or a signal: SIGTERM/SIGINT stop after the current batch (a second one,
// or the shutdown timeout, ends the process at once; every batch is committed atomically, so an
// abrupt end loses nothing committed), SIGHUP re-reads the pipeline files.
int RunService(SupervisorOptions options, const RunFlags& flags) {
  auto log = GetLogger("driftd");

  // Every HTTP connection holds a descriptor, as do RocksDB's files, Kafka's sockets and the
  // sinks' files: the soft limit (often 1024) would let a crowd of clients exhaust it. The
  // hard limit is what the operator granted; nothing in the process uses select().
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    const rlim_t before = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) == 0) {
      log->debug("open-file limit raised from {} to {}", before, files.rlim_cur);
    }
  }

  // Signals are blocked before any thread starts, so only this thread receives them.
  const sigset_t signals = BlockControlSignals();

  const bool directory = options.directory;
  const ServiceNotifier notifier = ServiceNotifier::FromEnvironment();
  const double start_time = NowEpochSeconds();
  std::atomic<int64_t> reloads_ok{0};
  std::atomic<int64_t> reloads_failed{0};
  std::atomic<int64_t> control_tick_ms{0};
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
        .count();
  };
  control_tick_ms.store(now_ms());

  options.on_query_end = [control = pthread_self()] { pthread_kill(control, WakeSignal()); };
  Supervisor supervisor(std::move(options));

  // One rule for "stuck" everywhere (the watchdog, /healthz and so the container's
  // HEALTHCHECK and Kubernetes' liveness probe): a query inside one batch, without reading
  // input, for longer than the liveness timeout.
  std::optional<std::chrono::microseconds> watchdog = notifier.watchdog_timeout();
  const auto liveness_limit = std::chrono::milliseconds(
      flags.liveness_given ? static_cast<int64_t>(flags.liveness_timeout_s * 1000)
      : watchdog           ? std::max<int64_t>(1, watchdog->count() / 1000)
                           : 30'000);

  // The pipelines are loaded before the endpoint opens: a file that does not load ends the
  // process at once with its exit code, with no server to stop (and no client of it to wait
  // for). Loading connects to nothing, so the endpoint is up a moment later.
  int refused = supervisor.Load();
  if (!directory && refused > 0) return kExitConfig;

  // Declared after the supervisor so that it stops before the supervisor goes away.
  std::unique_ptr<HttpServer> http;
  if (flags.http != "off") {
    auto address = ParseHttpAddress(flags.http);
    if (!address) {
      log->error("{}", address.error().message());
      return kExitUsage;
    }
    HttpHandlers handlers;
    handlers.metrics = [&] {
      ProcessMetricsView process;
      process.version = DRIFTD_VERSION;
      process.reloads_ok = reloads_ok.load();
      process.reloads_failed = reloads_failed.load();
      process.start_time_seconds = start_time;
      process.max_drift_series = flags.metrics_max_series;
      process.max_models_shown = flags.metrics_max_models;
      return RenderPrometheus(process, supervisor.Views());
    };
    // Healthy while the control loop turns (a reload may hold it for one batch) and no query
    // is stuck in a batch beyond the liveness timeout.
    handlers.healthy = [&] {
      return now_ms() - control_tick_ms.load() < 30'000 && supervisor.LoopsAlive(liveness_limit);
    };
    handlers.status = [&] { return RenderStatusJson(DRIFTD_VERSION, supervisor.Statuses()); };
    handlers.rebaseline = [&](const std::string& pipeline, const std::string& model) {
      return supervisor.RequestBaselineReset(pipeline, model);
    };
    if (const char* token = std::getenv("DRIFTD_ADMIN_TOKEN")) handlers.admin_token = token;
    auto allowed_hosts = ParseAllowedHosts(flags.http_allowed_hosts);
    if (!allowed_hosts) {
      log->error("{}", allowed_hosts.error().message());
      return kExitUsage;
    }
    handlers.allowed_hosts = std::move(*allowed_hosts);
    handlers.series = [&](const std::string& pipeline, const std::string& model,
                          const std::string& series) -> std::optional<std::string> {
      std::optional<std::vector<EvaluationPoint>> points;
      SharedEvaluation latest;
      supervisor.VisitMetrics(pipeline, [&](const std::string&, const QueryMetrics& metrics) {
        points = metrics.SeriesHistory(model, series);
        latest = metrics.LatestEvaluation(model, series);
      });
      if (!points) return std::nullopt;
      return RenderSeriesJson(pipeline, model, series, *points, latest.get());
    };
    handlers.report = [&](const std::string& pipeline) -> std::optional<std::string> {
      std::vector<ReportPipeline> reports;
      supervisor.VisitMetrics(pipeline, [&](const std::string& name, const QueryMetrics& metrics) {
        reports.push_back(ReportFromMetrics(name, metrics));
      });
      if (reports.empty() && !pipeline.empty()) return std::nullopt;
      return RenderReportJson(reports, "daemon", DRIFTD_VERSION);
    };
    handlers.ready = [&](std::string& detail) { return supervisor.Ready(detail); };
    handlers.progress = [&](const std::string& pipeline) {
      return supervisor.ProgressJson(pipeline);
    };
    auto server = HttpServer::Start(*address, std::move(handlers));
    if (!server) {
      if (flags.http_given) {
        log->error("http: {}", server.error().message());
        return kExitFailure;
      }
      // The default port may be taken by another driftd on this host: run without metrics
      // rather than not at all. An explicit --http makes this an error.
      log->warn("http: {}; running without the HTTP endpoint (pass --http to choose an address)",
                server.error().message());
    } else {
      http = std::move(*server);
      log->info("http: listening on {}:{} (/ status page, /metrics /healthz /readyz /progress)",
                address->host, http->port());
    }
  }

  std::unique_ptr<ConfigWatch> config_watch;
  if (flags.reload_on_change) {
    auto watch = ConfigWatch::Create(flags.pipeline, directory, std::chrono::milliseconds(500));
    if (!watch) {
      log->error("{}", watch.error().message());
      return kExitUsage;
    }
    config_watch = std::move(*watch);
    log->info("reloading {} when its files change", flags.pipeline);
  }

  const auto watchdog_limit = liveness_limit;
  Clock::time_point next_ping = Clock::now();
  // The catch-up progress line: redrawn on a terminal, logged at intervals otherwise.
  const bool progress_tty = isatty(STDERR_FILENO) == 1;
  Clock::time_point next_progress_line = Clock::now();
  bool progress_line_shown = false;
  bool liveness_reported = false;
  bool watchdog_withheld = false;
  bool ready_sent = false;
  int64_t status_batches = -1;
  Clock::time_point next_status = Clock::now();
  int stops = 0;
  std::optional<int> exit_code;

  while (true) {
    control_tick_ms.store(now_ms());
    auto wait = std::chrono::milliseconds(100);
    if (watchdog) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::max(Clock::duration::zero(), next_ping - Clock::now())));
    }
    timespec timeout{0, static_cast<long>(std::max<int64_t>(wait.count(), 1) * 1'000'000)};
    int signal = sigtimedwait(&signals, nullptr, &timeout);
    control_tick_ms.store(now_ms());

    const bool changed = config_watch && stops == 0 && config_watch->Poll();
    if (signal == SIGHUP || changed) {
      if (stops > 0) continue;
      log->info("{}: re-reading {}", changed ? "pipeline files changed" : "SIGHUP received",
                flags.pipeline);
      notifier.Reloading();
      int reload_refused = supervisor.Reload();
      (reload_refused == 0 ? reloads_ok : reloads_failed).fetch_add(1);
      notifier.Ready();
      notifier.Status(supervisor.StatusLine());
      continue;
    }
    if (signal == SIGINT || signal == SIGTERM) {
      if (++stops == 1) {
        log->info("{} received: stopping after the current batch (again to stop at once)",
                  strsignal(signal));
        notifier.Stopping();
        auto cut = [log](int64_t timeout_s) {
          log->error("shutdown did not finish within {} s; exiting now (exit code {}); the "
                     "batch in progress is redone on the next start",
                     timeout_s, kExitStopCut);
          ExitNow(kExitStopCut);
        };
        // A timeout of 0 s stops at once, whatever the queries would manage meanwhile.
        if (flags.shutdown_timeout_s == 0) cut(0);
        // The deadline is kept by a thread of its own: this loop also reads the queries'
        // status, and a query stuck in its executor's teardown must not keep it from firing.
        std::thread([timeout_s = flags.shutdown_timeout_s, cut] {
          std::this_thread::sleep_for(std::chrono::seconds(timeout_s));
          cut(timeout_s);
        }).detach();
        supervisor.RequestStop();
      } else {
        log->warn("second signal: exiting now (exit code {}); the batch in progress is redone "
                  "on the next start",
                  kExitStopCut);
        ExitNow(kExitStopCut);
      }
    }

    if (stops > 0) {
      if (supervisor.AllStopped()) {
        supervisor.Join();
        if (!directory) exit_code = supervisor.Finished();
        break;
      }
    } else if (auto finished = supervisor.Finished()) {
      exit_code = finished;
      notifier.Stopping();
      supervisor.Join();
      break;
    }

    if (!ready_sent && supervisor.InitialStartDone()) {
      ready_sent = true;
      notifier.Ready();
      notifier.Status(supervisor.StatusLine());
      log->info("ready: {}", supervisor.StatusLine());
    }
    if (watchdog && Clock::now() >= next_ping) {
      // Pings come from this loop, and only while no query loop is stuck in a batch for longer
      // than the watchdog allows: a hung daemon stops pinging and systemd restarts it.
      if (supervisor.LoopsAlive(watchdog_limit)) {
        notifier.Watchdog();
        watchdog_withheld = false;
      } else if (!watchdog_withheld) {
        watchdog_withheld = true;
        log->error(
            "a query has been inside one batch for more than {} ms; withholding "
            "watchdog pings",
            watchdog_limit.count());
      }
      next_ping = Clock::now() + *watchdog / 2;
    }
    if (Clock::now() >= next_progress_line) {
      const std::string line = CatchUpLine(supervisor.Statuses());
      if (progress_tty) {
        if (!line.empty()) {
          std::fprintf(stderr, "\r\033[K%s\r", line.c_str());
          progress_line_shown = true;
        } else if (progress_line_shown) {
          std::fprintf(stderr, "\r\033[K");
          progress_line_shown = false;
        }
        next_progress_line = Clock::now() + std::chrono::milliseconds(500);
      } else {
        if (!line.empty()) log->info("catching up: {}", line);
        next_progress_line =
            Clock::now() +
            std::chrono::milliseconds(static_cast<int64_t>(flags.progress_log_interval_s * 1000));
      }
    }
    if (!watchdog) {
      // Without a watchdog, say once when liveness starts failing (the watchdog branch logs
      // the same when it withholds pings).
      const bool alive = supervisor.LoopsAlive(liveness_limit);
      if (!alive && !liveness_reported) {
        log->error("a query has been inside one batch for more than {} ms; /healthz fails",
                   liveness_limit.count());
      }
      liveness_reported = !alive;
    }
    if (ready_sent && Clock::now() >= next_status) {
      int64_t batches = supervisor.TotalBatches();
      if (batches != status_batches) {
        status_batches = batches;
        notifier.Status(supervisor.StatusLine());
      }
      next_status = Clock::now() + std::chrono::milliseconds(500);
    }
  }
  http.reset();
  return exit_code.value_or(kExitOk);
}

// `driftd demo`: the built-in pipeline against an embedded Kafka stand-in, on a fresh
// checkpoint: the stand-in's topics are new every run, so an old checkpoint's offsets would
// point past their end.
int RunDemo(std::string checkpoint, SupervisorOptions options, const RunFlags& flags) {
  auto log = GetLogger("driftd");
  const bool temporary = checkpoint.empty();
  std::error_code error;
  if (temporary) {
    std::string pattern = (std::filesystem::temp_directory_path() / "driftd-demo-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      log->error("demo: cannot create a checkpoint directory {}: {}", pattern,
                 std::strerror(errno));
      return kExitIoError;
    }
    checkpoint = pattern;
    temporary_directory = checkpoint;
  } else if (std::filesystem::exists(checkpoint, error) &&
             !std::filesystem::is_empty(checkpoint, error)) {
    log->error(
        "demo: {} is not empty; the demo's embedded Kafka starts empty every run, so give a new "
        "or empty checkpoint directory",
        checkpoint);
    return kExitUsage;
  }

  // Blocked before the demo's threads start, as RunService does before its own: only the main
  // thread may receive them.
  BlockControlSignals();

  const std::string_view yaml = DemoPipelineYaml();
  auto kafka = DemoKafka::Start(yaml, DemoOptions{});
  int code = kExitOk;
  if (!kafka) {
    log->error("demo: {}", kafka.error().message());
    code = ExitCodeFor(kafka.error());
  } else {
    setenv("DRIFTD_DEMO_CHECKPOINT", checkpoint.c_str(), 1);
    options.path = "<built-in demo>";
    options.inline_text = std::string(yaml);
    options.quiet_progress = true;
    log->info("demo: checkpoint in {}; press Ctrl-C to stop", checkpoint);
    code = RunService(std::move(options), flags);
    (*kafka)->Stop();
  }
  if (temporary) std::filesystem::remove_all(checkpoint, error);
  return code;
}

}  // namespace
}  // namespace driftd

int main(int argc, char** argv) {
  using namespace driftd;
  // glibc gives every thread that allocates an arena of its own and keeps in it what the thread
  // freed: the query threads' per-batch buffers, RocksDB's flushes, librdkafka's threads. Two
  // arenas held 50 MB less at 10,000 models (bench_pipeline --drift, peak RSS), at no cost in
  // CPU (no hot path allocates per record). MALLOC_ARENA_MAX, when set, still decides.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
  // A batch's largest buffers (the commit's write, the outbox entry, input chunks, RocksDB's
  // flush blocks) are mapped and unmapped whole from 1 MiB up, so what a batch needed returns
  // to the system when it ends. glibc's default threshold slides up to each freed size, and
  // the next batch's buffers then come from the heap, where they stay resident and fragment
  // it: at 10,000 models (bench_pipeline --drift, 100k-record batches) the peak RSS was
  // 260-300 MB against 241-250 with the threshold fixed, for ~0.15 s more system time over
  // 1M records (the pages of those buffers are faulted in afresh each batch, about 4% of the
  // run). MALLOC_MMAP_THRESHOLD_, when set, still decides.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 1 << 20);
  CLI::App app{"driftd: a drift-monitoring daemon for model inference streams"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("driftd ") + DRIFTD_VERSION);
  app.footer(
      "Exit codes: 0 ok, 1 runtime failure (a sink could not deliver, a broker failed), 64 "
      "usage, 65 malformed record (policy fail) or data loss, 74 checkpoint unreadable, "
      "unwritable or damaged, 75 stop cut short (second signal or shutdown timeout), 78 "
      "invalid pipeline or incompatible checkpoint.");

  RunFlags flags;
  auto add_logging = [&](CLI::App* command) {
    command->add_option("--log-format", flags.log_format, "Log format: text or json")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
    command
        ->add_option("--log-level", flags.log_level, "Log level: trace, debug, info, warn, error")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
        ->capture_default_str();
  };
  auto add_service = [&](CLI::App* command) {
    command
        ->add_option("--http", flags.http,
                     "Address of the HTTP endpoint (/metrics, /healthz, /readyz, /progress): "
                     "HOST:PORT, port 0 for any free port (the log names it), or off")
        ->capture_default_str();
    command
        ->add_option("--http-allowed-hosts", flags.http_allowed_hosts,
                     "Host names (comma-separated; .example.com for a domain and its "
                     "subdomains; * for any) the endpoint answers besides IP addresses, "
                     "localhost and the --http host: a request naming another Host is refused "
                     "(DNS rebinding)")
        ->delimiter(',')
        ->envname("DRIFTD_HTTP_ALLOWED_HOSTS");
    command
        ->add_option("--progress-history", flags.progress_history,
                     "Progress records per pipeline kept for /progress")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    command
        ->add_option("--metrics-max-series", flags.metrics_max_series,
                     "Drift series per pipeline whose per-detector gauges /metrics shows: those "
                     "not OK first, then by their highest score")
        ->check(CLI::Range(0, 10000000))
        ->capture_default_str();
    command
        ->add_option("--metrics-max-models", flags.metrics_max_models,
                     "Models per pipeline whose per-model families (alerts, series by level, "
                     "values) /metrics shows: those in ALERT first, then by series alerting")
        ->check(CLI::Range(0, 10000000))
        ->capture_default_str();
    command->add_option(
        "--liveness-timeout", flags.liveness_timeout_s,
        "Seconds a query may spend inside one batch without reading input before /healthz "
        "fails and the watchdog is withheld (default: WatchdogSec under systemd, else 30)");
    command
        ->add_option("--progress-log-interval", flags.progress_log_interval_s,
                     "Seconds between catch-up progress lines in the log when stderr is not a "
                     "terminal (on a terminal one line is redrawn)")
        ->capture_default_str();
  };

  CLI::App* run = app.add_subcommand(
      "run",
      "Run a pipeline file until its trigger ends or a signal, or every *.yaml/*.yml pipeline of "
      "a directory until a signal (SIGHUP re-reads the files)");
  run->add_option("PIPELINE", flags.pipeline, "Pipeline file (YAML), or a directory of them")
      ->required();
  run->add_option("--shutdown-timeout", flags.shutdown_timeout_s,
                  "Seconds a stop may take before the process exits anyway")
      ->capture_default_str();
  run->add_flag("--quiet-progress", flags.quiet_progress, "Do not log a progress record per batch");
  run->add_flag("--reload-on-change", flags.reload_on_change,
                "Re-read the pipeline file(s) when they change (inotify; a Kubernetes ConfigMap "
                "update counts), as SIGHUP does");
  add_logging(run);
  add_service(run);

  CLI::App* demo = app.add_subcommand(
      "demo",
      "Run the built-in demo: Kafka in -> per-model statistics and drift alerts -> Kafka out, "
      "on an embedded Kafka stand-in");
  demo->footer(
      "The demo starts an embedded stand-in for a Kafka cluster (librdkafka's in-process mock "
      "cluster), feeds generated inference logs of 4 models into its topic inference-logs (model-2 "
      "drifts after 6 s), and runs the demo pipeline (deploy/examples/demo.yaml, built in) on "
      "it: per-model statistics and drift alerts, written to the topics driftd-stats and "
      "driftd-alerts. The console shows each batch's per-model statistics and every alert as "
      "read back from driftd-alerts. Ctrl-C or SIGTERM stops it (exit code 0); a --checkpoint "
      "that is not empty is refused (exit code 64).");
  std::string demo_dir;
  demo->add_option("--checkpoint", demo_dir,
                   "Checkpoint directory, new or empty (default: a new temporary directory, "
                   "removed at the end, also when a second Ctrl-C ends the demo at once)");
  demo->add_option("--shutdown-timeout", flags.shutdown_timeout_s,
                   "Seconds a stop may take before the process exits anyway")
      ->capture_default_str();
  add_logging(demo);
  add_service(demo);

  std::string validate_path;
  CLI::App* validate =
      app.add_subcommand("validate",
                         "Check a pipeline file (or every pipeline of a directory) as run would, "
                         "and print every problem");
  validate
      ->add_option("PIPELINE", validate_path,
                   "Pipeline file (YAML), or a directory of them checked as `run DIR` loads it")
      ->required();

  ReportCommand report_command;
  std::string report_http;
  CLI::App* report_app = app.add_subcommand(
      "report",
      "Write one self-contained HTML file of drift per model and series (the baseline's and the "
      "latest window's distributions, the statistic against its thresholds, incidents) from a "
      "checkpoint or a running daemon");
  auto* report_checkpoint =
      report_app->add_option("--checkpoint", report_command.checkpoint,
                         "A pipeline's checkpoint directory (opened read-only)");
  auto* report_from_http =
      report_app->add_option("--http", report_http, "A running daemon's HTTP address");
  report_checkpoint->excludes(report_from_http);
  report_app->add_option("--pipeline", report_command.pipeline,
                     "With --http: only this pipeline (default: every one)");
  report_app
      ->add_option("-o,--output", report_command.output, "The HTML file to write ('-': stdout)")
      ->required();
  std::string inspect_path;
  bool inspect_json = false;
  CLI::App* inspect = app.add_subcommand("inspect", "Print what a checkpoint holds");
  inspect->add_option("CHECKPOINT", inspect_path, "Checkpoint directory")->required();
  inspect->add_flag("--json", inspect_json, "Print one JSON object");

  std::string status_http = "127.0.0.1:9464";
  double watch_seconds = 0;
  bool status_json = false;
  CLI::App* status = app.add_subcommand(
      "status", "Show a running daemon's pipelines, drift by model and recent alerts");
  status->add_option("--http", status_http, "The daemon's HTTP address")->capture_default_str();
  bool watch = false;
  watch_seconds = 2;
  status->add_flag("--watch", watch, "Redraw until interrupted");
  status->add_option("--interval", watch_seconds, "Seconds between redraws with --watch")
      ->capture_default_str();
  status->add_flag("--json", status_json, "Print /api/status as JSON");

  std::string health_http = "127.0.0.1:9464";
  bool health_ready = false;
  CLI::App* health = app.add_subcommand(
      "health",
      "Exit 0 when the daemon is live (/healthz answers 200), 1 otherwise: the container "
      "HEALTHCHECK and a probe for scripts");
  health->add_option("--http", health_http, "The daemon's HTTP address")->capture_default_str();
  health->add_flag("--ready", health_ready, "Check readiness (/readyz) instead");

  CLI::App* baseline = app.add_subcommand("baseline", "Build or reset drift baselines");
  baseline->require_subcommand(1);
  std::string baseline_pipeline;
  std::vector<std::string> baseline_inputs;
  std::string baseline_format = "auto";
  std::string baseline_output;
  CLI::App* baseline_build = baseline->add_subcommand(
      "build",
      "Compute a reference-statistics file (drift.baseline {type: file}) from reference "
      "records: JSON lines or CSV with the pipeline's schema");
  baseline_build->add_option("PIPELINE", baseline_pipeline, "Pipeline file (YAML)")->required();
  baseline_build->add_option("--input,-i", baseline_inputs, "Reference records (repeatable)")
      ->required();
  baseline_build->add_option("--format", baseline_format, "auto (by extension), json or csv")
      ->check(CLI::IsMember({"auto", "json", "csv"}))
      ->capture_default_str();
  baseline_build->add_option("--output,-o", baseline_output, "Reference statistics to write")
      ->required();
  std::string reset_http = "127.0.0.1:9464";
  std::string reset_pipeline;
  std::string reset_model;
  CLI::App* baseline_reset = baseline->add_subcommand(
      "reset",
      "Start one model's baselines over in a running daemon (after a retrain), without a new "
      "checkpoint: its series warm up again on their next values");
  baseline_reset->add_option("--http", reset_http, "The daemon's HTTP address")
      ->capture_default_str();
  baseline_reset->add_option("--pipeline", reset_pipeline, "Pipeline name")->required();
  baseline_reset->add_option("--model", reset_model, "Model")->required();

  CLI::App* reference = app.add_subcommand(
      "reference",
      "Print the connector, value format and drift detector reference (Markdown), from the "
      "declarations and the detector registry");
  std::string sink_schema_pipeline;
  std::string sink_schema_sink;
  CLI::App* sink_schema = app.add_subcommand(
      "sink-schema",
      "Print the Avro writer schema a sink with valueFormat avro writes with (its schemaFile, "
      "or the schema driftd derives from the rows), for consumers without a schema registry");
  sink_schema->add_option("PIPELINE", sink_schema_pipeline, "Pipeline file (YAML)")->required();
  sink_schema->add_option("SINK", sink_schema_sink,
                          "The sink's name (may be left out when one sink writes Avro)");
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
  if (baseline_build->parsed()) {
    return RunBaselineBuild(baseline_pipeline, baseline_inputs, baseline_format, baseline_output);
  }
  if (baseline_reset->parsed()) {
    auto address = ParseHttpAddress(reset_http);
    if (!address) {
      std::cerr << address.error().message() << "\n";
      return kExitUsage;
    }
    const char* token = std::getenv("DRIFTD_ADMIN_TOKEN");
    return RunBaselineReset(*address, reset_pipeline, reset_model, token ? token : "");
  }
  if (status->parsed() || health->parsed()) {
    auto address = ParseHttpAddress(status->parsed() ? status_http : health_http);
    if (!address) {
      std::cerr << address.error().message() << "\n";
      return kExitUsage;
    }
    if (health->parsed()) return RunHealthCommand(*address, health_ready);
    return RunStatusCommand(*address, watch ? watch_seconds : 0, status_json);
  }
  if (reference->parsed()) {
    std::cout << ConnectorReferenceMarkdown() << "### Drift detectors\n\n"
              << config_detail::DetectorReferenceMarkdown();
    return kExitOk;
  }
  if (sink_schema->parsed()) return PrintSinkSchema(sink_schema_pipeline, sink_schema_sink);
  if (report_app->parsed()) {
    if (report_command.checkpoint.empty() == report_http.empty()) {
      std::cerr << "driftd report: give --checkpoint DIR or --http HOST:PORT\n";
      return kExitUsage;
    }
    if (!report_http.empty()) {
      auto address = ParseHttpAddress(report_http);
      if (!address) {
        std::cerr << address.error().message() << "\n";
        return kExitUsage;
      }
      report_command.http = *address;
    }
    return RunReportCommand(report_command, DRIFTD_VERSION);
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
    std::error_code error;
    if (std::filesystem::is_directory(validate_path, error)) {
      return ValidateDirectory(validate_path);
    }
    auto spec = LoadOrReport(validate_path);
    if (!spec) return kExitConfig;
    std::cout << Summary(validate_path, *spec);
    return kExitOk;
  }

  CLI::App* service_command = app.get_subcommand(run->parsed() ? "run" : "demo");
  flags.http_given = service_command->count("--http") > 0;
  flags.liveness_given = service_command->count("--liveness-timeout") > 0;
  SetUpLogging(flags.log_format, flags.log_level);
  SupervisorOptions options;
  options.quiet_progress = flags.quiet_progress;
  options.progress_history = flags.progress_history;
  if (demo->parsed()) return RunDemo(demo_dir, std::move(options), flags);
  std::error_code error;
  options.path = flags.pipeline;
  options.directory = std::filesystem::is_directory(flags.pipeline, error);
  return RunService(std::move(options), flags);
}
