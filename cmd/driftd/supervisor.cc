#include "cmd/driftd/supervisor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <simdjson.h>

#include "cmd/driftd/logging.h"
#include "cmd/driftd/preflight.h"
#include "cmd/driftd/status.h"
#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/executor.h"
#include "engine/executor/metrics_query.h"
#include "engine/log.h"
#include "engine/redact.h"
#include "state/checkpoint_store.h"

namespace driftd {

int ExitCodeFor(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kCancelled:  // a stop during the start: nothing failed
      return kExitOk;
    case ErrorCode::kConfig:
    case ErrorCode::kIncompatible:
      return kExitConfig;
    case ErrorCode::kMalformedRecord:
    case ErrorCode::kDataLoss:
      return kExitDataError;
    case ErrorCode::kIo:
    case ErrorCode::kCorruption:
      return kExitIoError;
    case ErrorCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

namespace {

// The connectors and the RocksDB checkpoint every query runs with.
QueryIo DefaultQueryIo() {
  QueryIo io;
  io.create_decoder = [](const PipelineSpec& spec) {
    return CreateValueDecoder(ValueFormats(), spec);
  };
  io.create_source = [](const PipelineSpec& spec) { return CreateSource(spec); };
  io.create_sinks = [](const PipelineSpec& spec, Source& source) {
    return CreateSinks(spec, &source);
  };
  io.open_checkpoint = [](const std::string& directory, const CheckpointOptions& options) {
    return OpenCheckpointStore(directory, options);
  };
  return io;
}

namespace fs = std::filesystem;

enum class QueryState { kStarting, kRunning, kRetrying, kFailed, kFinished };

std::string_view StateName(QueryState state) {
  switch (state) {
    case QueryState::kStarting:
      return "starting";
    case QueryState::kRunning:
      return "running";
    case QueryState::kRetrying:
      return "retrying";
    case QueryState::kFailed:
      return "failed";
    case QueryState::kFinished:
      return "finished";
  }
  return "unknown";
}

// Failures that a later attempt may not repeat (a broker or server down, a disk hiccup).
// Configuration, incompatible checkpoints and data errors need a person.
bool MayPass(ErrorCode code) {
  switch (code) {
    case ErrorCode::kExternal:
    case ErrorCode::kIo:
    case ErrorCode::kInternal:
    case ErrorCode::kAborted:
      return true;
    default:
      return false;
  }
}

// Top-level keys whose values differ between two fingerprint objects.
std::vector<std::string> ChangedKeys(const std::string& old_json, const std::string& new_json) {
  simdjson::dom::parser parser_a;
  simdjson::dom::parser parser_b;
  simdjson::dom::object a;
  simdjson::dom::object b;
  if (parser_a.parse(old_json).get(a) != simdjson::SUCCESS ||
      parser_b.parse(new_json).get(b) != simdjson::SUCCESS) {
    return {"(definition)"};
  }
  std::vector<std::string> changed;
  for (auto field : a) {
    simdjson::dom::element other;
    if (b.at_key(field.key).get(other) != simdjson::SUCCESS ||
        simdjson::minify(field.value) != simdjson::minify(other)) {
      changed.emplace_back(field.key);
    }
  }
  for (auto field : b) {
    simdjson::dom::element other;
    if (a.at_key(field.key).get(other) != simdjson::SUCCESS) changed.emplace_back(field.key);
  }
  return changed;
}

// Logs every problem of a file, one line each, as `driftd validate` prints them.
void LogProblems(const std::string& file, const std::vector<ConfigProblem>& problems) {
  auto log = GetLogger("driftd");
  std::string text = FormatProblems(file, problems);
  std::istringstream lines(text);
  std::string line;
  size_t problem = 0;
  while (std::getline(lines, line)) {
    bool error = problem < problems.size() && problems[problem].severity == ProblemSeverity::kError;
    ++problem;
    if (error) {
      log->error("{}", line);
    } else {
      log->warn("{}", line);
    }
  }
}

}  // namespace

struct Supervisor::Candidate {
  std::string file;
  std::string content;
  PipelineSpec spec;
  std::string fingerprint;
};

struct Supervisor::Query {
  std::string file;
  std::string content;
  PipelineSpec spec;
  std::string fingerprint;
  bool retry = false;  // directory mode: failures that may pass are retried
  bool quiet_progress = false;
  std::chrono::milliseconds retry_initial{500};
  std::chrono::milliseconds retry_max{30'000};
  std::function<void()> on_end;  // SupervisorOptions::on_query_end
  QueryMetrics metrics;

  mutable std::mutex mutex;
  std::condition_variable wake;
  // Guarded by mutex. The executor is created, started and destroyed by the query's thread; other
  // threads only read it (counters, readiness) or Stop it, under the mutex.
  std::unique_ptr<QueryExecutor> executor;
  QueryState state = QueryState::kStarting;
  bool stop = false;
  bool first_attempt_done = false;
  int exit_code = kExitOk;
  int64_t start_failures = 0;
  // Counters of executors already destroyed (retries), so totals never go backwards.
  int64_t carried_batches = 0;
  int64_t carried_input = 0;
  int64_t carried_output = 0;
  int64_t carried_malformed = 0;
  int64_t carried_dropped = 0;
  int64_t carried_filtered = 0;
  int64_t carried_alerts = 0;
  int64_t last_batch_id = -1;

  std::atomic<bool> thread_done{false};
  std::thread thread;

  Query(size_t progress_history, bool kafka)
      : metrics(QueryMetricsOptions{.progress_history = progress_history,
                                    .kafka_partitions = kafka}) {}

  // Takes the executor out, keeping its counters. Caller holds mutex, and destroys what this
  // returns after releasing it: a destructor may wait on the broker (the group's close, the
  // producer's flush), and the status page and the control loop read this query under mutex.
  [[nodiscard]] std::unique_ptr<QueryExecutor> RetireExecutor() {
    if (!executor) return nullptr;
    const QueryCounters& c = executor->counters();
    carried_batches += c.batches.load();
    carried_input += c.input_rows.load();
    carried_output += c.output_rows.load();
    carried_malformed += c.malformed_rows.load();
    carried_dropped += c.dropped_by_watermark.load();
    carried_filtered += c.filtered_rows.load();
    carried_alerts += c.alerts.load();
    last_batch_id = std::max(last_batch_id, c.last_batch_id.load());
    return std::move(executor);
  }

  void Run() {
    auto log = GetLogger("driftd");
    std::chrono::milliseconds backoff = retry_initial;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stop) break;
        state = QueryState::kStarting;
      }
      ExecutorOptions options;
      options.fingerprint_json = fingerprint;
      options.checkpoint_name = CheckpointPipelineName(spec);
      options.metrics = &metrics;
      options.on_progress = [this, log](const std::string& json) {
        if (!quiet_progress) log->info("{}{}", kProgressLogPrefix, json);
        metrics.RecordProgress(json);
      };
      Status status = Ok();
      auto created = QueryExecutor::Create(spec, std::move(options), DefaultQueryIo());
      QueryExecutor* running = nullptr;
      if (!created) {
        status = tl::unexpected(created.error());
        log->error("pipeline {}: {}", spec.name, created.error().message());
      } else {
        std::lock_guard<std::mutex> lock(mutex);
        executor = std::move(*created);
        running = executor.get();
        if (stop) running->Stop();
      }
      if (running != nullptr) {
        status = running->Start();
        {
          std::lock_guard<std::mutex> lock(mutex);
          first_attempt_done = true;
          if (status) state = QueryState::kRunning;
        }
        if (!status) {
          log->error("pipeline {}: {}", spec.name, status.error().message());
        } else {
          log->info("pipeline {} running (trigger {}, checkpoint {})", spec.name,
                    ToString(spec.trigger.kind), spec.checkpoint_location);
          backoff = retry_initial;
          status = running->Run();
          if (status) {
            const QueryCounters& counters = running->counters();
            if (counters.batches.load() == 0) {
              // Nothing new since the checkpoint's last batch (a restart with nothing to
              // read): the log's "resuming after batch N" names it.
              log->info("pipeline {} stopped with no new batch: nothing new to read", spec.name);
            } else {
              const int64_t batches = counters.batches.load();
              log->info("pipeline {} stopped after batch {} (this run: {} batch{}, {} input "
                        "rows, {} alerts)",
                        spec.name, counters.last_batch_id.load(), batches,
                        batches == 1 ? "" : "es", counters.input_rows.load(),
                        counters.alerts.load());
            }
            std::unique_ptr<QueryExecutor> retired;
            {
              std::lock_guard<std::mutex> lock(mutex);
              retired = RetireExecutor();
            }
            retired.reset();
            std::lock_guard<std::mutex> lock(mutex);
            state = QueryState::kFinished;
            exit_code = kExitOk;
            break;
          }
          log->error("pipeline {} failed: {}", spec.name, status.error().message());
        }
      }
      std::unique_ptr<QueryExecutor> retired;
      {
        std::lock_guard<std::mutex> lock(mutex);
        retired = RetireExecutor();
      }
      retired.reset();
      std::unique_lock<std::mutex> lock(mutex);
      if (running != nullptr && state != QueryState::kRunning) ++start_failures;
      if (running == nullptr) ++start_failures;
      first_attempt_done = true;
      if (!retry || stop || !MayPass(status.error().code())) {
        state = QueryState::kFailed;
        exit_code = ExitCodeFor(status.error());
        break;
      }
      state = QueryState::kRetrying;
      log->warn("pipeline {}: retrying in {} ms", spec.name, backoff.count());
      wake.wait_for(lock, backoff, [this] { return stop; });
      backoff = std::min(backoff * 2, retry_max);
    }
    thread_done.store(true);
    if (on_end) on_end();
  }

  void RequestStop() {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
    if (executor) executor->Stop();
    wake.notify_all();
  }

  void Join() {
    if (thread.joinable()) thread.join();
  }
};

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Supervisor::~Supervisor() {
  RequestStop();
  Join();
}

std::vector<std::string> ListPipelineFiles(const std::string& directory, std::string& problem) {
  std::vector<std::string> files;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end;
       it.increment(error)) {
    const fs::path& path = it->path();
    std::string name = path.filename().string();
    std::string extension = path.extension().string();
    // Hidden files are editors' and tools' temporaries, not pipelines.
    if (name.empty() || name[0] == '.' || (extension != ".yaml" && extension != ".yml")) continue;
    std::error_code status_error;
    if (!fs::is_regular_file(path, status_error)) continue;
    files.push_back(path.string());
  }
  if (error) {
    problem = fmt::format("{}: cannot read the pipeline directory: {}", directory,
                          error.message());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> Supervisor::ListFiles(std::vector<std::string>& problems) const {
  if (!options_.directory) return {options_.path};
  std::string problem;
  std::vector<std::string> files = ListPipelineFiles(options_.path, problem);
  if (!problem.empty()) problems.push_back(std::move(problem));
  return files;
}

std::unique_ptr<Supervisor::Query> Supervisor::StartQuery(Candidate candidate) {
  auto query = std::make_unique<Query>(options_.progress_history,
                                       candidate.spec.source.traits.topic_partitions);
  query->file = std::move(candidate.file);
  query->content = std::move(candidate.content);
  query->spec = std::move(candidate.spec);
  query->fingerprint = std::move(candidate.fingerprint);
  query->retry = options_.directory;
  query->quiet_progress = options_.quiet_progress;
  query->retry_initial = options_.retry_initial;
  query->retry_max = options_.retry_max;
  query->on_end = options_.on_query_end;
  Query* raw = query.get();
  query->thread = std::thread([raw] { raw->Run(); });
  return query;
}

int Supervisor::Load() {
  int refused = Apply(true);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [file, query] : queries_) initial_files_.push_back(file);
  loaded_.store(true);
  return refused;
}

int Supervisor::Reload() { return Apply(false); }

int Supervisor::Apply(bool initial) {
  auto log = GetLogger("driftd");
  std::vector<std::string> listing_problems;
  std::vector<std::string> files = ListFiles(listing_problems);
  for (const std::string& problem : listing_problems) log->error("{}", problem);
  if (!listing_problems.empty()) {
    log->error("{}: the running queries keep their definitions", options_.path);
    return 1;
  }

  LoadOptions load_options;
  load_options.catalog = &ConnectorDeclarations();
  load_options.value_formats = &ValueFormats();
  int refused = 0;
  std::vector<std::string> refused_files;
  int unchanged = 0;
  std::vector<Candidate> candidates;
  std::set<std::string> listed(files.begin(), files.end());

  std::unique_lock<std::mutex> lock(mutex_);
  listed_files_ = files.size();
  for (const std::string& file : files) {
    auto existing = queries_.find(file);
    bool has_old = existing != queries_.end();
    Result<std::string> content = options_.inline_text.empty()
                                      ? ReadPipelineText(file)
                                      : Result<std::string>(options_.inline_text);
    if (!content) {
      log->error("{}: {}{}", file, content.error().message(),
                 has_old ? "; its running query keeps its previous definition" : "");
      ++refused;
      refused_files.push_back(file);
      continue;
    }
    if (has_old && existing->second->content == *content) {
      std::lock_guard<std::mutex> query_lock(existing->second->mutex);
      if (existing->second->state != QueryState::kFailed) {
        ++unchanged;
        continue;
      }
      // A failed query with the same file is started again: the cause may be fixed now.
    }
    std::vector<ConfigProblem> warnings;
    load_options.warnings = &warnings;
    PipelineResult spec = ParsePipeline(*content, file, load_options);
    if (spec) {
      // From here on the pipeline's secrets may reach a log line, an error or an HTTP body.
      RegisterSecrets(spec->secrets);
      // What the query's start would refuse is refused now, before an old query is replaced.
      if (std::vector<ConfigProblem> problems = PreflightProblems(*spec); !problems.empty()) {
        spec = tl::unexpected(std::move(problems));
      }
    }
    if (!spec) {
      LogProblems(file, spec.error());
      size_t errors = 0;
      for (const auto& problem : spec.error()) {
        errors += problem.severity == ProblemSeverity::kError;
      }
      log->error("{}: {} error{}; {}", file, errors, errors == 1 ? "" : "s",
                 has_old ? "the running query keeps its previous definition"
                         : "the pipeline was not started");
      ++refused;
      refused_files.push_back(file);
      continue;
    }
    if (!warnings.empty()) LogProblems(file, warnings);
    Candidate candidate;
    candidate.file = file;
    candidate.content = std::move(*content);
    candidate.fingerprint = PipelineFingerprintJson(*spec);
    candidate.spec = std::move(*spec);
    candidates.push_back(std::move(candidate));
  }

  // Names and checkpoints must stay unique: two queries on one checkpoint would fight over it.
  std::map<std::string, std::string> names;        // name -> file
  std::map<std::string, std::string> checkpoints;  // location -> file
  std::set<std::string> replaced;
  for (const Candidate& candidate : candidates) replaced.insert(candidate.file);
  for (const auto& [file, query] : queries_) {
    if (!listed.count(file)) continue;
    names[query->spec.name] = file;
    checkpoints[query->spec.checkpoint_location] = file;
  }
  std::vector<Candidate> accepted;
  for (Candidate& candidate : candidates) {
    auto old = queries_.find(candidate.file);
    const Query* previous = old == queries_.end() ? nullptr : old->second.get();
    std::string refusal;
    if (auto it = names.find(candidate.spec.name);
        it != names.end() && it->second != candidate.file) {
      refusal =
          fmt::format("pipeline name '{}' is already used by {}", candidate.spec.name, it->second);
    } else if (auto at = checkpoints.find(candidate.spec.checkpoint_location);
               at != checkpoints.end() && at->second != candidate.file) {
      refusal = fmt::format("checkpointLocation {} is already used by {}",
                            candidate.spec.checkpoint_location, at->second);
    } else if (previous != nullptr &&
               previous->spec.checkpoint_location == candidate.spec.checkpoint_location) {
      // A query that opened its checkpoint proved the checkpoint holds its name and fingerprint,
      // so the checkpoint's compatibility check can be applied before the old query is stopped.
      QueryState state;
      {
        std::lock_guard<std::mutex> query_lock(previous->mutex);
        state = previous->state;
      }
      bool opened = state == QueryState::kRunning || state == QueryState::kStarting ||
                    state == QueryState::kFinished;
      if (opened && previous->spec.name != candidate.spec.name) {
        refusal = fmt::format(
            "checkpoint {} belongs to pipeline '{}', not '{}': point checkpointLocation at a "
            "directory of this pipeline's own",
            candidate.spec.checkpoint_location, previous->spec.name, candidate.spec.name);
      } else if (opened && previous->fingerprint != candidate.fingerprint) {
        refusal = fmt::format(
            "pipeline '{}' changed in ways its checkpoint {} cannot serve: {} changed. Revert "
            "the change, or use a new checkpointLocation to recompute from the source's "
            "startingOffsets",
            candidate.spec.name, candidate.spec.checkpoint_location,
            fmt::join(ChangedKeys(previous->fingerprint, candidate.fingerprint), ", "));
      }
    }
    if (!refusal.empty()) {
      log->error("{}: {}; {}", candidate.file, refusal,
                 previous != nullptr ? "the running query keeps its previous definition"
                                     : "the pipeline was not started");
      ++refused;
      refused_files.push_back(candidate.file);
      continue;
    }
    names[candidate.spec.name] = candidate.file;
    checkpoints[candidate.spec.checkpoint_location] = candidate.file;
    accepted.push_back(std::move(candidate));
  }

  // Stop what goes away or is replaced (all at once, each after its current batch), then start
  // the new definitions: a replacement reopens the checkpoint its predecessor released.
  std::vector<std::unique_ptr<Query>> retiring;
  std::set<std::string> accepted_files;
  for (const Candidate& candidate : accepted) accepted_files.insert(candidate.file);
  int stopped = 0;
  for (auto it = queries_.begin(); it != queries_.end();) {
    bool removed = !listed.count(it->first);
    if (removed || accepted_files.count(it->first)) {
      if (removed) {
        log->info("{}: file removed; stopping pipeline {}", it->first, it->second->spec.name);
        ++stopped;
      } else {
        log->info("{}: changed; replacing pipeline {} after its current batch", it->first,
                  it->second->spec.name);
      }
      it->second->RequestStop();
      retiring.push_back(std::move(it->second));
      it = queries_.erase(it);
    } else {
      ++it;
    }
  }
  lock.unlock();
  for (auto& query : retiring) query->Join();
  retiring.clear();

  int started = 0;
  int replaced_count = 0;
  lock.lock();
  refused_files_ = std::move(refused_files);
  for (Candidate& candidate : accepted) {
    if (replaced.count(candidate.file) && !initial) ++replaced_count;
    ++started;
    std::string file = candidate.file;
    queries_[file] = StartQuery(std::move(candidate));
  }
  lock.unlock();
  if (initial) {
    log->info("{} pipeline{} started from {}{}", started, started == 1 ? "" : "s", options_.path,
              refused > 0 ? fmt::format(", {} file(s) refused", refused) : "");
  } else {
    log->info(
        "reload of {}: {} started ({} replacing a changed file), {} stopped, {} unchanged, "
        "{} refused",
        options_.path, started, replaced_count, stopped, unchanged, refused);
  }
  return refused;
}

void Supervisor::RequestStop() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [file, query] : queries_) query->RequestStop();
}

bool Supervisor::AllStopped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [file, query] : queries_) {
    if (!query->thread_done.load()) return false;
  }
  return true;
}

void Supervisor::Join() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [file, query] : queries_) query->Join();
}

bool Supervisor::InitialStartDone() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& file : initial_files_) {
    auto it = queries_.find(file);
    if (it == queries_.end()) continue;  // replaced or removed since
    std::lock_guard<std::mutex> query_lock(it->second->mutex);
    if (!it->second->first_attempt_done) return false;
  }
  return true;
}

bool Supervisor::Ready(std::string& detail) const {
  if (!loaded_.load()) {
    detail = "loading pipelines";
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  bool ready = true;
  // A daemon that runs nothing of what it was given serves nobody: zero running queries out
  // of some configured (every file refused), or no pipeline file at all, is not ready.
  if (queries_.empty()) {
    ready = false;
    detail = listed_files_ == 0
                 ? fmt::format("no pipeline file in {} (*.yaml, *.yml)", options_.path)
                 : fmt::format("0 of {} pipeline files running", listed_files_);
  }
  for (const std::string& file : refused_files_) {
    detail += fmt::format("{}{}: refused (see the log)", detail.empty() ? "" : "\n", file);
  }
  for (const auto& [file, query] : queries_) {
    std::lock_guard<std::mutex> query_lock(query->mutex);
    if (query->state == QueryState::kFinished) continue;
    if (query->state == QueryState::kRunning && query->executor && query->executor->IsReady()) {
      continue;
    }
    ready = false;
    detail += fmt::format(
        "{}pipeline {}: {}", detail.empty() ? "" : "\n", query->spec.name,
        query->state == QueryState::kRunning ? "source not ready" : StateName(query->state));
  }
  return ready;
}

bool Supervisor::LoopsAlive(std::chrono::milliseconds limit) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [file, query] : queries_) {
    if (query->metrics.BusyForMs() > limit.count()) return false;
  }
  return true;
}

std::optional<int> Supervisor::Finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.directory || queries_.empty()) return std::nullopt;
  const Query& query = *queries_.begin()->second;
  if (!query.thread_done.load()) return std::nullopt;
  std::lock_guard<std::mutex> query_lock(query.mutex);
  return query.exit_code;
}

std::vector<PipelineMetricsView> Supervisor::Views(bool all_metrics) const {
  std::vector<PipelineMetricsView> views;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [file, query] : queries_) {
    PipelineMetricsView view;
    view.name = query->spec.name;
    view.file = file;
    view.metrics = all_metrics ? query->metrics.Snapshot() : query->metrics.LastBatch();
    std::lock_guard<std::mutex> query_lock(query->mutex);
    view.state = std::string(StateName(query->state));
    view.start_failures = query->start_failures;
    view.batches = query->carried_batches;
    view.input_rows = query->carried_input;
    view.output_rows = query->carried_output;
    view.malformed_rows = query->carried_malformed;
    view.dropped_by_watermark = query->carried_dropped;
    view.filtered_rows = query->carried_filtered;
    view.alerts = query->carried_alerts;
    view.last_batch_id = query->last_batch_id;
    if (query->executor) {
      const QueryCounters& c = query->executor->counters();
      view.batches += c.batches.load();
      view.input_rows += c.input_rows.load();
      view.output_rows += c.output_rows.load();
      view.malformed_rows += c.malformed_rows.load();
      view.dropped_by_watermark += c.dropped_by_watermark.load();
      view.filtered_rows += c.filtered_rows.load();
      view.alerts += c.alerts.load();
      view.last_batch_id = std::max(view.last_batch_id, c.last_batch_id.load());
      view.ready = query->state == QueryState::kRunning && query->executor->IsReady();
    }
    views.push_back(std::move(view));
  }
  return views;
}

std::vector<PipelineStatus> Supervisor::Statuses() const {
  std::vector<PipelineMetricsView> views = Views();
  std::vector<PipelineStatus> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (PipelineMetricsView& view : views) {
    auto it = queries_.find(view.file);
    if (it == queries_.end()) continue;  // replaced in between
    const Query& query = *it->second;
    PipelineStatus status;
    status.source = query.spec.source.format;
    status.trigger = std::string(ToString(query.spec.trigger.kind));
    status.trigger_interval_ms = query.spec.trigger.interval_ms;
    status.alerts = query.metrics.RecentAlerts();
    status.batches = query.metrics.RecentBatches();
    status.incidents = query.metrics.OpenIncidents();
    for (const auto& [key, evaluation] : view.metrics.evaluations) {
      if (IsPerformanceSeries(key.second)) {
        status.performance[key] = query.metrics.SeriesHistory(key.first, key.second);
      }
    }
    status.busy_ms = query.metrics.BusyForMs();
    status.view = std::move(view);
    out.push_back(std::move(status));
  }
  return out;
}

std::optional<std::vector<EvaluationPoint>> Supervisor::SeriesHistory(
    const std::string& pipeline, const std::string& model, const std::string& series) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [file, query] : queries_) {
    if (query->spec.name == pipeline) return query->metrics.SeriesHistory(model, series);
  }
  return std::nullopt;
}

bool Supervisor::VisitMetrics(
    const std::string& pipeline,
    const std::function<void(const std::string& name, const QueryMetrics& metrics)>& visit)
    const {
  std::lock_guard<std::mutex> lock(mutex_);
  bool any = false;
  for (const auto& [file, query] : queries_) {
    if (!pipeline.empty() && query->spec.name != pipeline) continue;
    visit(query->spec.name, query->metrics);
    any = true;
  }
  return any;
}

std::string Supervisor::RequestBaselineReset(const std::string& pipeline,
                                             const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [file, query] : queries_) {
    if (query->spec.name != pipeline) continue;
    if (!query->spec.drift.enabled) return fmt::format("pipeline {} has no drift section", pipeline);
    bool known = false;
    for (const auto& stats : query->metrics.Snapshot().drift_models) known |= stats.model == model;
    if (!known) return fmt::format("pipeline {} has seen no model '{}'", pipeline, model);
    std::lock_guard<std::mutex> query_lock(query->mutex);
    if (!query->executor || query->state != QueryState::kRunning) {
      return fmt::format("pipeline {} is not running", pipeline);
    }
    query->executor->RequestBaselineReset(model);
    return "";
  }
  return fmt::format("no pipeline '{}'", pipeline);
}

std::string Supervisor::ProgressJson(const std::string& pipeline) const {
  std::string out = "[";
  std::lock_guard<std::mutex> lock(mutex_);
  bool first = true;
  for (const auto& [file, query] : queries_) {
    if (!pipeline.empty() && query->spec.name != pipeline) continue;
    for (const std::string& record : query->metrics.RecentProgress()) {
      if (!first) out.push_back(',');
      first = false;
      out += record;
    }
  }
  out += "]";
  return out;
}

std::string Supervisor::StatusLine() const {
  std::vector<PipelineMetricsView> views = Views(/*all_metrics=*/false);
  size_t running = 0;
  const PipelineMetricsView* latest = nullptr;
  for (const PipelineMetricsView& view : views) {
    running += view.state == "running";
    if (view.metrics.last_batch_id >= 0 &&
        (latest == nullptr ||
         view.metrics.last_batch_timestamp_ms > latest->metrics.last_batch_timestamp_ms)) {
      latest = &view;
    }
  }
  std::string line = fmt::format("{}/{} {} running", running, views.size(),
                                 views.size() == 1 ? "query" : "queries");
  if (latest != nullptr) {
    line += fmt::format("; last batch {} of '{}' ({} rows)", latest->metrics.last_batch_id,
                        latest->name, latest->metrics.last_batch_input_rows);
  }
  return line;
}

int64_t Supervisor::TotalBatches() const {
  int64_t total = 0;
  for (const PipelineMetricsView& view : Views(/*all_metrics=*/false)) total += view.batches;
  return total;
}

}  // namespace driftd
