#include "engine/executor/status_history.h"

#include <algorithm>
#include <charconv>
#include <type_traits>

#include <fmt/format.h>

#include "engine/codec.h"
#include "engine/drift/codec.h"
#include "engine/drift/evaluation.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/performance_stage.h"

namespace driftd {

namespace {

// The history namespace's keys (names escaped: '%' and '/' percent-encoded):
//   "a/<seq>"                    an alert event (AlertSummary)
//   "i/<model label>/<series>"   an incident open now (IncidentSummary)
//   "p/<model label>/<series>/<seq>"  a point of the series' history (EncodeEvaluation,
//                                     without its distribution)
// <seq> is 16 hex digits from one counter, so key order is the order entries were made.
constexpr std::string_view kAlertPrefix = "a/";
constexpr std::string_view kIncidentPrefix = "i/";
constexpr std::string_view kPointPrefix = "p/";
constexpr uint8_t kAlertVersion = 1;
constexpr uint8_t kIncidentVersion = 1;

// Names in keys: engine/codec.h's key-path escaping (an escape it never writes is kept as read).
std::string Escape(std::string_view part) { return codec::EscapeKeyPart(part); }
std::string Unescape(std::string_view part) {
  return codec::UnescapeKeyPart(part).value_or(std::string(part));
}

std::string SeqKey(std::string_view prefix, uint64_t seq) {
  return fmt::format("{}{:016x}", prefix, seq);
}

// The sequence number at the end of a key, or nullopt.
std::optional<uint64_t> SeqOf(std::string_view key) {
  if (key.size() < 16) return std::nullopt;
  uint64_t seq = 0;
  const char* begin = key.data() + key.size() - 16;
  auto [end, ec] = std::from_chars(begin, key.data() + key.size(), seq, 16);
  if (ec != std::errc() || end != key.data() + key.size()) return std::nullopt;
  return seq;
}

bool LevelOf(uint8_t byte, AlertLevel& out) {
  if (byte > static_cast<uint8_t>(AlertLevel::kResolved)) return false;
  out = static_cast<AlertLevel>(byte);
  return true;
}

std::string EncodeAlert(const AlertSummary& a) {
  std::string out;
  drift::ByteWriter w(out);
  w.U8(kAlertVersion);
  w.Str(a.alert_id);
  w.Str(a.incident_id);
  w.U8(static_cast<uint8_t>(a.level));
  w.U8(static_cast<uint8_t>(a.previous_level));
  w.Str(a.model);
  w.Str(a.segment);
  w.Str(a.series);
  w.Str(a.detector);
  w.F64(a.statistic);
  w.F64(a.threshold);
  w.F64(a.score);
  w.I64(a.window_start_us);
  w.I64(a.window_end_us);
  w.I64(a.batch_id);
  w.I64(a.recorded_at_ms);
  return out;
}

Result<AlertSummary> DecodeAlert(std::string_view bytes) {
  drift::ByteReader r(bytes);
  AlertSummary a;
  const uint8_t version = r.U8();
  a.alert_id = std::string(r.Str());
  a.incident_id = std::string(r.Str());
  const bool levels = LevelOf(r.U8(), a.level) && LevelOf(r.U8(), a.previous_level);
  a.model = std::string(r.Str());
  a.segment = std::string(r.Str());
  a.series = std::string(r.Str());
  a.detector = std::string(r.Str());
  a.statistic = r.F64();
  a.threshold = r.F64();
  a.score = r.F64();
  a.window_start_us = r.I64();
  a.window_end_us = r.I64();
  a.batch_id = r.I64();
  a.recorded_at_ms = r.I64();
  if (version != kAlertVersion || !levels || r.failed() || !r.at_end()) {
    return MakeError(ErrorCode::kCorruption, "history: an alert entry of {} bytes is unreadable",
                     bytes.size());
  }
  return a;
}

std::string EncodeIncident(const IncidentSummary& i) {
  std::string out;
  drift::ByteWriter w(out);
  w.U8(kIncidentVersion);
  w.Str(i.incident_id);
  w.Str(i.model);
  w.Str(i.segment);
  w.Str(i.series);
  w.U8(static_cast<uint8_t>(i.level));
  w.U8(static_cast<uint8_t>(i.opened_level));
  w.Str(i.detector);
  w.F64(i.statistic);
  w.F64(i.threshold);
  w.I64(i.since_us);
  w.I64(i.since_ms);
  w.I64(i.since_batch);
  w.I64(i.updated_ms);
  return out;
}

Result<IncidentSummary> DecodeIncident(std::string_view bytes) {
  drift::ByteReader r(bytes);
  IncidentSummary i;
  const uint8_t version = r.U8();
  i.incident_id = std::string(r.Str());
  i.model = std::string(r.Str());
  i.segment = std::string(r.Str());
  i.series = std::string(r.Str());
  const bool levels = LevelOf(r.U8(), i.level) && LevelOf(r.U8(), i.opened_level);
  i.detector = std::string(r.Str());
  i.statistic = r.F64();
  i.threshold = r.F64();
  i.since_us = r.I64();
  i.since_ms = r.I64();
  i.since_batch = r.I64();
  i.updated_ms = r.I64();
  if (version != kIncidentVersion || !levels || r.failed() || !r.at_end()) {
    return MakeError(ErrorCode::kCorruption,
                     "history: an incident entry of {} bytes is unreadable", bytes.size());
  }
  return i;
}

// "<label>/<series>[/<seq>]" -> (label, series).
std::optional<std::pair<std::string, std::string>> SeriesOf(std::string_view rest, bool seq) {
  if (seq) {
    const size_t slash = rest.rfind('/');
    if (slash == std::string_view::npos) return std::nullopt;
    rest = rest.substr(0, slash);
  }
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  return std::make_pair(Unescape(rest.substr(0, slash)), Unescape(rest.substr(slash + 1)));
}

std::string SeriesKey(std::string_view prefix, const std::pair<std::string, std::string>& key) {
  return fmt::format("{}{}/{}", prefix, Escape(key.first), Escape(key.second));
}

bool Open(AlertLevel level) { return level == AlertLevel::kWarn || level == AlertLevel::kAlert; }

}  // namespace

std::string ModelLabel(std::string_view model, std::string_view segment) {
  if (segment.empty()) return std::string(model);
  return fmt::format("{} [{}]", model, segment);
}

AlertSummary SummarizeAlert(const AlertEvent& event, int64_t recorded_at_ms) {
  AlertSummary summary;
  summary.alert_id = event.alert_id;
  summary.incident_id = event.incident_id.empty() ? event.alert_id : event.incident_id;
  summary.level = event.level;
  summary.previous_level = event.previous_level;
  summary.model = event.model;
  summary.segment = event.segment;
  summary.series = event.series;
  summary.detector = event.detector;
  summary.statistic = event.statistic;
  summary.threshold = event.threshold;
  summary.score = event.score;
  summary.window_start_us = event.window_start_us;
  summary.window_end_us = event.window_end_us;
  summary.batch_id = event.batch_id;
  summary.recorded_at_ms = recorded_at_ms;
  return summary;
}

IncidentBook::Key IncidentBook::Apply(const AlertSummary& event) {
  Key key(ModelLabel(event.model, event.segment), event.series);
  if (!Open(event.level)) {
    open_.erase(key);
    return key;
  }
  auto found = open_.find(key);
  if (found == open_.end() || !Open(event.previous_level)) {
    IncidentSummary& incident = open_[key];
    incident = IncidentSummary();
    incident.incident_id = event.incident_id.empty() ? event.alert_id : event.incident_id;
    incident.model = event.model;
    incident.segment = event.segment;
    incident.series = event.series;
    incident.opened_level = event.level;
    incident.since_us = event.window_end_us;
    incident.since_ms = event.recorded_at_ms;
    incident.since_batch = event.batch_id;
    found = open_.find(key);
  }
  IncidentSummary& incident = found->second;
  incident.level = event.level;
  incident.detector = event.detector;
  incident.statistic = event.statistic;
  incident.threshold = event.threshold;
  incident.updated_ms = event.recorded_at_ms;
  return key;
}

void IncidentBook::Put(IncidentSummary incident) {
  Key key(ModelLabel(incident.model, incident.segment), incident.series);
  open_[std::move(key)] = std::move(incident);
}

Status ReadHistoryEntry(std::string_view key, std::string_view value, StatusHistory& history) {
  if (key.starts_with(kAlertPrefix)) {
    auto alert = DecodeAlert(value);
    if (!alert) return tl::unexpected(alert.error());
    history.alerts.push_back(std::move(*alert));
    return Ok();
  }
  if (key.starts_with(kIncidentPrefix)) {
    auto incident = DecodeIncident(value);
    if (!incident) return tl::unexpected(incident.error());
    history.incidents.push_back(std::move(*incident));
    return Ok();
  }
  if (key.starts_with(kPointPrefix)) {
    auto series = SeriesOf(key.substr(kPointPrefix.size()), /*seq=*/true);
    if (!series) {
      return MakeError(ErrorCode::kCorruption, "history: a point's key '{}' is unreadable", key);
    }
    auto evaluation = DecodeEvaluation(value);
    if (!evaluation) return tl::unexpected(evaluation.error().Wrap(std::string(key)));
    history.points[*series].push_back(std::make_shared<const Evaluation>(std::move(*evaluation)));
    return Ok();
  }
  return Ok();  // a later version's entry: not this one's to read
}

HistoryStage::HistoryStage(const DriftStage* drift, const PerformanceStage* performance,
                           HistoryOptions options)
    : drift_(drift), performance_(performance), options_(options) {
  cap_ = SeriesCap();
}

HistoryStage::~HistoryStage() = default;

Status HistoryStage::Restore(std::string_view key, std::string_view value) {
  DRIFTD_TRY(ReadHistoryEntry(key, value, restored_));
  if (key.starts_with(kIncidentPrefix)) {
    incidents_.Put(restored_.incidents.back());
    return Ok();
  }
  const std::optional<uint64_t> seq = SeqOf(key);
  if (key.starts_with(kAlertPrefix)) {
    alert_keys_.emplace_back(key);
  } else if (key.starts_with(kPointPrefix)) {
    point_keys_[*SeriesOf(key.substr(kPointPrefix.size()), true)].emplace_back(key);
    ++points_;
  } else {
    return Ok();
  }
  if (seq) next_seq_ = std::max(next_seq_, *seq + 1);
  return Ok();
}

Status HistoryStage::FinishRestore() {
  cap_ = SeriesCap();
  return Ok();
}

StatusHistory HistoryStage::TakeRestored() { return std::exchange(restored_, StatusHistory()); }

size_t HistoryStage::SeriesCap() const {
  const size_t series = std::max<size_t>(point_keys_.size(), 1);
  const size_t cap = std::min(options_.points_per_series, options_.points / series);
  // One point is the series' latest evaluation, which the drift stage keeps already.
  return cap < 2 ? 0 : cap;
}

void HistoryStage::Entries::Put(std::string key, std::string value) {
  puts[std::move(key)] = std::move(value);
}

void HistoryStage::Entries::Drop(const std::string& key) {
  if (puts.erase(key) == 0) deletes.insert(key);
}

template <typename Keys>
size_t HistoryStage::Entries::DropOldest(Keys& keys, size_t keep) {
  if (keys.size() <= keep) return 0;
  const size_t dropped = keys.size() - keep;
  for (size_t i = 0; i < dropped; ++i) Drop(keys[i]);
  keys.erase(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(dropped));
  return dropped;
}

void HistoryStage::Entries::MoveTo(StateChanges& changes, StageProgress* progress) {
  for (auto& [key, value] : puts) {
    if (progress != nullptr) progress->state_dirty_bytes += static_cast<int64_t>(value.size());
    changes.puts.emplace_back(key, std::move(value));
  }
  for (const std::string& key : deletes) changes.deletes.push_back(key);
  puts.clear();
  deletes.clear();
}

void HistoryStage::Finish(const BatchContext& context, BatchOutput&, StateChanges& changes,
                          StageProgress& progress) {
  Entries batch;
  std::set<IncidentBook::Key> touched;
  auto take = [&](const std::vector<AlertEvent>& events) {
    for (const AlertEvent& event : events) {
      // No wall clock: the checkpoint's state depends on the input alone (the same bytes
      // whatever the threads), so an alert restored after a restart has no recorded time,
      // only its window's and its batch.
      const AlertSummary summary = SummarizeAlert(event, /*recorded_at_ms=*/0);
      std::string key = SeqKey(kAlertPrefix, next_seq_++);
      batch.Put(key, EncodeAlert(summary));
      alert_keys_.push_back(std::move(key));
      batch.DropOldest(alert_keys_, options_.alerts);
      touched.insert(incidents_.Apply(summary));
    }
  };
  auto keep = [&](const auto& evaluations) {
    for (const auto& item : evaluations) {
      // Past 10,000 series no series keeps points here (SeriesCap), and the series only grow.
      if (cap_ == 0) break;
      SharedEvaluation shared;
      if constexpr (std::is_same_v<std::decay_t<decltype(item)>, PackedEvaluation>) {
        shared = item.Unpack();
      } else {
        shared = item;
      }
      const Evaluation& e = *shared;
      auto [found, added] = point_keys_.try_emplace({ModelLabel(e.model, e.segment), e.series});
      if (added) {
        const size_t cap = SeriesCap();
        if (cap < cap_) {
          // More series: each keeps fewer.
          for (auto& [series, keys] : point_keys_) points_ -= points_kept_.DropOldest(keys, cap);
        }
        cap_ = cap;
      }
      if (cap_ == 0) continue;
      std::vector<std::string>& keys = found->second;
      std::string key = SeriesKey(kPointPrefix, found->first) + SeqKey("/", next_seq_++);
      points_kept_.Put(key, EncodeEvaluation(e, /*with_distribution=*/false));
      keys.push_back(std::move(key));
      ++points_;
      points_ -= points_kept_.DropOldest(keys, cap_);
    }
  };
  if (drift_ != nullptr) {
    take(drift_->LastEvents());
    keep(drift_->LastEvaluations());
  }
  if (performance_ != nullptr) {
    take(performance_->last_events());
    keep(performance_->last_evaluations());
  }
  for (const IncidentBook::Key& key : touched) {
    std::string entry = SeriesKey(kIncidentPrefix, key);
    auto open = incidents_.open().find(key);
    if (open == incidents_.open().end()) {
      batch.deletes.insert(std::move(entry));
    } else {
      batch.puts[std::move(entry)] = EncodeIncident(open->second);
    }
  }
  batch.MoveTo(changes, &progress);
  // While a backlog is read the points wait up to kPointsFlushMs: its batches would otherwise
  // each write a chart's worth of points that the next ones drop again.
  if (points_flushed_ms_ == INT64_MIN) points_flushed_ms_ = context.now_ms;
  if (!context.more_available || context.now_ms - points_flushed_ms_ >= kPointsFlushMs) {
    points_flushed_ms_ = context.now_ms;
    points_kept_.MoveTo(changes, &progress);
  }
}

void HistoryStage::FlushKept(int64_t now_ms, StateChanges& changes) {
  points_flushed_ms_ = now_ms;
  points_kept_.MoveTo(changes, nullptr);
}

}  // namespace driftd
