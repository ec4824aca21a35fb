// What the status page and `driftd report` show of a query's past, kept in the checkpoint so
// that a restart shows it again: the recent alert events, the incidents open now (since when)
// and each series' last evaluations (its statistics over time against their thresholds).
//
// The HistoryStage keeps them. It comes after the drift and performance stages (CreateStages
// puts it last) and, at the end of each batch, takes what they evaluated and raised in it, so
// its entries commit atomically with the batch that made them: a restart neither loses an
// alert the sinks were given nor shows one they were not. It writes no rows.
//
// Memory and writes are bounded: the last 100 alert events, one entry per open incident, and
// evaluations up to 60 per series and 20,000 in all (with more series each keeps fewer; at
// fewer than two a series keeps none here, the drift stage's latest evaluation standing for
// it). Alert events and incidents commit with their batch; so do the evaluations (the charts'
// points), except while a backlog is read: then they are written at most every 30 s, at the
// first batch that catches up and at a clean stop (FlushKept), so that a backlog's batches do
// not each write points the next ones drop again. A `kill -9` while a backlog is read can cost
// a chart its last 30 s of points, never an alert or an incident.
//
// Thread-safety: a Stage (engine/executor/stage.h), on the executor's thread. The free
// functions and IncidentBook are plain values, for any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/drift/monitor.h"
#include "engine/executor/stage.h"

namespace driftd {

class DriftStage;
class PerformanceStage;

/// How the status page, `driftd status` and the series history name a model's segment:
/// "fraud-v7 [country=DE,channel=app]", or the model's name without segments.
std::string ModelLabel(std::string_view model, std::string_view segment);

/// One alert event, as the status page lists it.
struct AlertSummary {
  std::string alert_id;
  /// The alert id of the event that opened the incident this event belongs to.
  std::string incident_id;
  AlertLevel level = AlertLevel::kOk;
  AlertLevel previous_level = AlertLevel::kOk;
  std::string model;
  std::string segment;  // empty without segments
  std::string series;
  std::string detector;
  double statistic = 0;
  double threshold = 0;
  double score = 0;
  int64_t window_start_us = INT64_MIN;
  int64_t window_end_us = INT64_MIN;
  int64_t batch_id = -1;
  /// Wall clock when the batch that raised it was delivered; 0 when unknown (restored from
  /// the checkpoint, which keeps no wall clock).
  int64_t recorded_at_ms = 0;
};

AlertSummary SummarizeAlert(const AlertEvent& event, int64_t recorded_at_ms);

/// An incident open now: a (model, series) in WARN or ALERT since the event that opened it.
struct IncidentSummary {
  std::string incident_id;
  std::string model;
  std::string segment;
  std::string series;
  AlertLevel level = AlertLevel::kWarn;         // now
  AlertLevel opened_level = AlertLevel::kWarn;  // when it opened
  /// The detector of the last event, its statistic and the threshold it crossed.
  std::string detector;
  double statistic = 0;
  double threshold = 0;
  /// When it opened: the end of the window that opened it (the values' time, INT64_MIN when
  /// they had none), the wall clock when that was delivered (0: unknown, as after a restart),
  /// and its batch.
  int64_t since_us = INT64_MIN;
  int64_t since_ms = 0;
  int64_t since_batch = -1;
  /// The wall clock of its last event (0: unknown).
  int64_t updated_ms = 0;
};

/// The incidents open now, by (ModelLabel, series), kept up from the alert events.
class IncidentBook {
 public:
  using Key = std::pair<std::string, std::string>;
  /// Opens (a WARN or ALERT after OK or RESOLVED), updates (WARN <-> ALERT) or closes (OK,
  /// RESOLVED) the event's incident. Returns its key.
  Key Apply(const AlertSummary& event);
  /// An incident as restored.
  void Put(IncidentSummary incident);
  const std::map<Key, IncidentSummary>& open() const { return open_; }

 private:
  std::map<Key, IncidentSummary> open_;
};

/// A query's history as persisted: what the metrics are seeded with after a restart and what
/// `driftd report` reads from a checkpoint.
struct StatusHistory {
  std::vector<AlertSummary> alerts;  // oldest first
  std::vector<IncidentSummary> incidents;
  /// By (ModelLabel, series), oldest first; without their distributions.
  std::map<std::pair<std::string, std::string>, std::vector<SharedEvaluation>> points;
};

/// Reads one entry of the history stage's namespace (a key and value it wrote) into `history`;
/// points are appended in key order, which is their order. kCorruption on bytes it cannot read.
Status ReadHistoryEntry(std::string_view key, std::string_view value, StatusHistory& history);

struct HistoryOptions {
  /// Alert events kept. Default: 100.
  size_t alerts = 100;
  /// Evaluations kept per series. Default: 60.
  size_t points_per_series = 60;
  /// Evaluations kept in all. Default: 20,000.
  size_t points = 20'000;
};

class HistoryStage final : public Stage {
 public:
  /// Reads the alert events and evaluations of `drift` and `performance` (either may be
  /// null; both outlive this stage) in each Finish.
  HistoryStage(const DriftStage* drift, const PerformanceStage* performance,
               HistoryOptions options = {});
  ~HistoryStage() override;

  static constexpr std::string_view kNamespace = "history";
  std::string_view state_namespace() const override { return kNamespace; }
  Status Restore(std::string_view key, std::string_view value) override;
  Status FinishRestore() override;
  void Process(const RecordBatch&, const RowTimes&, BatchOutput&) override {}
  void Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
              StageProgress& progress) override;
  void FlushKept(int64_t now_ms, StateChanges& changes) override;

  /// What the checkpoint held at start; moved out (call once, after the restore).
  StatusHistory TakeRestored();

 private:
  /// Entries to write: a key made and dropped again before they are written is never written
  /// (the store applies a write's deletes before its puts).
  struct Entries {
    std::map<std::string, std::string> puts;
    std::set<std::string> deletes;
    void Put(std::string key, std::string value);
    void Drop(const std::string& key);
    /// Drops the front of `keys` (the oldest) until `keep` are left; returns how many.
    template <typename Keys>  // a deque or a vector of keys
    size_t DropOldest(Keys& keys, size_t keep);
    /// Appends them to `changes` (and their bytes to `progress`, when given), and forgets them.
    void MoveTo(StateChanges& changes, StageProgress* progress);
  };
  static constexpr int64_t kPointsFlushMs = 30'000;

  /// Points each series keeps now (0: none, see the header comment).
  size_t SeriesCap() const;

  const DriftStage* drift_;
  const PerformanceStage* performance_;
  HistoryOptions options_;
  StatusHistory restored_;
  IncidentBook incidents_;
  /// Keys of the alerts kept, oldest first, and the sequence number of the next entry.
  std::deque<std::string> alert_keys_;
  uint64_t next_seq_ = 0;
  /// Keys of each series' points kept, oldest first (a vector: with many series each keeps
  /// none, and an empty deque would still hold a block of its own).
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> point_keys_;
  size_t points_ = 0;
  size_t cap_ = 0;  // points per series now
  /// Points made and dropped since the points were last written, and when that was.
  Entries points_kept_;
  int64_t points_flushed_ms_ = INT64_MIN;
};

}  // namespace driftd
