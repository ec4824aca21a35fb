// Runs the pipelines of `driftd run PATH`: one query per pipeline file, each on its own thread
// with its own checkpoint, and re-reads the files on reload (SIGHUP).
//
// PATH may be one file (the query's end ends the process, with its exit code) or a directory
// (every *.yaml / *.yml in it; the daemon runs until stopped, restarting a query whose failure
// may pass, such as a broker that is down, with backoff).
//
// Reload: a file whose content changed and that validates replaces its query (the old one stops
// after its current batch, the new one starts on the same checkpoint, whose compatibility check
// applies); a new file starts a query; a removed file stops its query; a file that does not
// validate is reported, problem by problem, and its old query keeps running.
//
// Thread-safety: Load, Reload, RequestStop and Join are called from one control thread; the
// read-only methods (Views, Ready, ...) from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cmd/driftd/prometheus.h"
#include "engine/result.h"

namespace driftd {

/// One pipeline for the status page: its metrics view and what only the supervisor knows.
struct PipelineStatus {
  PipelineMetricsView view;
  std::string source;   // source format: kafka, file, rate, socket
  std::string trigger;  // processingTime, once, availableNow, continuous
  int64_t trigger_interval_ms = 0;
  std::vector<AlertSummary> alerts;
  std::vector<BatchPoint> batches;
  /// The incidents open now.
  std::vector<IncidentSummary> incidents;
  /// The performance stage's series' last evaluations, by (model label, series).
  std::map<std::pair<std::string, std::string>, std::vector<EvaluationPoint>> performance;
  /// How long the current batch has been running without progress (0: between batches).
  int64_t busy_ms = 0;
};

struct SupervisorOptions {
  /// A pipeline file, or a directory of them.
  std::string path;
  /// Default: false (a file).
  bool directory = false;
  /// When set, the pipeline text itself (file mode; `path` only names it in messages), e.g. the
  /// built-in demo. Default: empty.
  std::string inline_text;
  /// Do not log a progress record per batch. Default: false.
  bool quiet_progress = false;
  /// Progress records kept per query for /progress. Default: 32.
  size_t progress_history = 32;
  /// Backoff before restarting a failed query (directory mode), doubling up to the maximum.
  /// Defaults: 500 ms, 30 s.
  std::chrono::milliseconds retry_initial{500};
  std::chrono::milliseconds retry_max{30'000};
  /// Called on a query's thread as the thread ends (the query finished, failed for good or
  /// was stopped), so that a control loop can act at once. Default: none.
  std::function<void()> on_query_end;
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();  // stops and joins every query
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Reads the pipeline files and starts their queries. Returns the number of files refused
  /// (each problem logged).
  int Load();
  /// Re-reads the pipeline files (see the header comment). Returns the number of files refused.
  int Reload();

  /// Asks every query to stop after its current batch; returns at once.
  void RequestStop();
  /// True when no query thread is running any more.
  bool AllStopped() const;
  /// Joins the stopped query threads.
  void Join();

  /// Every query of the first Load has finished its first start attempt (restore and source
  /// connection), successfully or not.
  bool InitialStartDone() const;
  /// Every running query is restored and its source ready, and at least one runs. `detail`
  /// names the ones that are not, and the files refused.
  bool Ready(std::string& detail) const;
  /// False when some query's loop has been inside one batch for longer than `limit` (a hung
  /// loop: the watchdog stops pinging).
  bool LoopsAlive(std::chrono::milliseconds limit) const;
  /// File mode: the exit code once the query has ended (finished or failed).
  std::optional<int> Finished() const;

  /// `all_metrics` false: each view's metrics hold the last batch only (QueryMetrics::
  /// LastBatch), for what runs twice a second.
  std::vector<PipelineMetricsView> Views(bool all_metrics = true) const;
  /// What the status page and `driftd status` show of each pipeline.
  std::vector<PipelineStatus> Statuses() const;
  /// The last evaluations of one series (the status page's chart); nullopt: no such pipeline.
  std::optional<std::vector<EvaluationPoint>> SeriesHistory(const std::string& pipeline,
                                                            const std::string& model,
                                                            const std::string& series) const;
  /// Calls `visit` with the name and metrics of the running query of `pipeline` (every query's
  /// when empty), under the supervisor's lock: keep it short. False when there is none.
  bool VisitMetrics(const std::string& pipeline,
                    const std::function<void(const std::string& name,
                                             const QueryMetrics& metrics)>& visit) const;
  /// Starts a model's drift baselines over in the pipeline's running query (at its next
  /// batch). Returns an empty string when queued, else why not (unknown pipeline or model).
  std::string RequestBaselineReset(const std::string& pipeline, const std::string& model);
  /// Recent progress records as a JSON array, oldest first per query.
  std::string ProgressJson(const std::string& pipeline) const;
  /// A one-line summary for systemd's STATUS=, e.g. "2 queries running; last batch 17 of
  /// 'fraud' (1200 rows)".
  std::string StatusLine() const;
  /// Sum of committed batches over all queries (to notice progress cheaply).
  int64_t TotalBatches() const;

 private:
  struct Query;
  struct Candidate;
  std::vector<std::string> ListFiles(std::vector<std::string>& problems) const;
  std::unique_ptr<Query> StartQuery(Candidate candidate);
  void StopQuery(Query& query);
  int Apply(bool initial);

  SupervisorOptions options_;
  mutable std::mutex mutex_;  // guards queries_ (the map; each Query guards itself)
  std::map<std::string, std::unique_ptr<Query>> queries_;  // by file path
  std::vector<std::string> initial_files_;
  // Guarded by mutex_: files of the last Load/Reload that were refused, and files listed.
  std::vector<std::string> refused_files_;
  size_t listed_files_ = 0;
  std::atomic<bool> loaded_{false};
};

/// The pipeline files of a directory as `run DIR` reads them: the regular *.yaml and *.yml files,
/// hidden ones skipped, sorted. `problem` says why the directory could not be read (then the
/// list is what was read before).
std::vector<std::string> ListPipelineFiles(const std::string& directory, std::string& problem);

// Exit codes (sysexits.h where one fits), documented in cmd/driftd/README.md and `driftd --help`.
// One code per cause, whichever connector reported it.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;     // the query failed at run time: a sink could not
                                           // deliver (any sink, a webhook's 4xx included), a
                                           // broker failed fatally, a producer was fenced
inline constexpr int kExitUsage = 64;      // bad command line
inline constexpr int kExitDataError = 65;  // a malformed record under policy fail, or data loss
inline constexpr int kExitIoError = 74;    // the checkpoint cannot be read or written, or is
                                           // damaged
inline constexpr int kExitStopCut = 75;    // a second signal or the shutdown timeout ended the
                                           // process before the stop finished (nothing
                                           // committed is lost; the batch is redone)
inline constexpr int kExitConfig = 78;     // the pipeline is invalid, or the checkpoint refuses it

/// The exit code for an error that ended a query.
int ExitCodeFor(const Error& error);

}  // namespace driftd
