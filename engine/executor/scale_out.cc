#include "engine/executor/scale_out.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <iterator>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "engine/log.h"
#include "engine/string_hash.h"
#include "engine/wall_clock.h"

namespace driftd {

namespace {

using Clock = std::chrono::steady_clock;

// The namespace of a task's changelog position (the local checkpoint's, never in the changelog
// itself).
constexpr std::string_view kChangelogNamespace = "changelog";
// Its key for when (wall-clock ms) the local copy was last written at that position.
constexpr std::string_view kPositionTimeKey = "at_ms";

int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

bool ParseI64(std::string_view text, int64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

// A source partition this process reads.
struct ScaledOutPlacement::SourcePartition {
  /// The clock mark last sent to the tasks, to send a new one only when it changed.
  ClockMark sent;
  bool sent_any = false;
  std::vector<RowBlockWriter> writers;  // one per task
  /// Copies of predictions for the labels' join, one writer per task: a prediction whose key
  /// another task joins than the one that owns its model goes to both. Empty without labels.
  std::vector<RowBlockWriter> join_copies;
};

ScaledOutPlacement::ScaledOutPlacement(Parts parts)
    : parts_(std::move(parts)), read_clock_(parts_.clock) {
  const PipelineSpec& spec = *parts_.spec;
  std::string model = spec.drift.model_column;
  if (model.empty() && !spec.query.group_by.empty()) model = spec.query.group_by[0];
  model_column_ = model.empty() ? -1 : QuerySchema(spec).IndexOf(model);
  if (spec.labels.enabled) {
    prediction_key_column_ = QuerySchema(spec).IndexOf(spec.labels.prediction_key);
    label_key_column_ = spec.labels.schema.IndexOf(spec.labels.key);
  }
  for (Sink* sink : parts_.sinks) {
    if (sink->CommitsScaledOutBatches()) committer_ = sink;
  }
}

ScaledOutPlacement::~ScaledOutPlacement() = default;

Status ScaledOutPlacement::Start(const std::optional<CommitRecord>& last, TaskMap& tasks,
                                 int64_t& restored) {
  // Each task restores its own state once the group assigns it.
  (void)last;
  (void)tasks;
  (void)restored;
  if (committer_ == nullptr) {
    return MakeError(ErrorCode::kInternal, "scaled out without a Kafka sink to commit with");
  }
  return Ok();
}

uint32_t ScaledOutPlacement::TaskOf(const RecordBatch& batch, size_t row,
                                    const std::string& partition) const {
  const uint32_t tasks = std::max<uint32_t>(1, parts_.group->task_count());
  if (model_column_ < 0) return static_cast<uint32_t>(StableHash(partition) % tasks);
  const Column& column = batch.columns[model_column_];
  if (column.IsNull(row)) return 0;
  if (column.type == FieldType::kString) {
    return static_cast<uint32_t>(StableHash(column.String(row)) % tasks);
  }
  return static_cast<uint32_t>(StableHash(std::to_string(column.i64[row])) % tasks);
}

uint32_t ScaledOutPlacement::JoinTaskOf(const RecordBatch& batch, size_t row, int column,
                                        uint32_t otherwise) const {
  if (column < 0) return otherwise;
  const Column& keys = batch.columns[static_cast<size_t>(column)];
  if (keys.IsNull(row) || keys.type != FieldType::kString) return otherwise;
  // As the labels' join splits its keys (engine/executor/performance_stage.h).
  const uint32_t tasks = std::max<uint32_t>(1, parts_.group->task_count());
  return static_cast<uint32_t>(StableHash(keys.String(row)) % tasks);
}

Result<bool> ScaledOutPlacement::Assign(TaskMap& tasks, SourceOffsets& position,
                                        Report& report) {
  if (drop_everything_ || !assigned_) {
    // Whatever an aborted batch changed goes; the group's committed positions say where each
    // partition resumes.
    tasks.clear();
    sources_.clear();
    position.clear();
    generation_ = -1;
    drop_everything_ = false;
    assigned_ = true;
  }
  auto assignment = parts_.group->PollAssignment();
  if (!assignment) return tl::unexpected(assignment.error());
  report.aborted = aborted_;
  if (assignment->generation != generation_) {
    GroupMember& group = *parts_.group;
    std::set<std::string> wanted_sources(assignment->source.begin(), assignment->source.end());
    std::set<uint32_t> wanted_tasks(assignment->tasks.begin(), assignment->tasks.end());
    for (auto it = sources_.begin(); it != sources_.end();) {
      if (wanted_sources.count(it->first)) {
        ++it;
        continue;
      }
      position.erase(it->first);
      it = sources_.erase(it);
    }
    for (auto it = tasks.begin(); it != tasks.end();) {
      if (wanted_tasks.count(it->first)) {
        ++it;
        continue;
      }
      position.erase(group.TaskInputKey(it->first));
      it = tasks.erase(it);
    }
    std::vector<std::string> added;
    for (const std::string& key : wanted_sources) {
      if (!sources_.count(key)) added.push_back(key);
    }
    std::vector<uint32_t> added_tasks;
    for (uint32_t task : wanted_tasks) {
      if (!tasks.count(task)) {
        added_tasks.push_back(task);
        added.push_back(group.TaskInputKey(task));
      }
    }
    if (!added.empty()) {
      // The group's committed positions first: they wait for the previous owner's last
      // transaction to be decided, so the changelog read next holds everything it committed.
      auto committed = group.Committed(added);
      if (!committed) return tl::unexpected(committed.error());
      for (const std::string& key : added) {
        const GroupPosition& at = committed->at(key);
        position[key] = at.offset;
        if (group.TaskOfInputKey(key)) continue;
        // The partition's clock as its last reader committed it with its offset.
        int64_t max_us = INT64_MIN;
        if (at.metadata.empty() || !ParseI64(at.metadata, max_us)) max_us = INT64_MIN;
        read_clock_.Reset(key, max_us);
        auto partition = std::make_unique<SourcePartition>();
        partition->writers.assign(group.task_count(), RowBlockWriter(key));
        if (parts_.spec->labels.enabled && !IsLabelsPartition(key)) {
          partition->join_copies.assign(group.task_count(),
                                        RowBlockWriter(key, /*join_only=*/true));
        }
        sources_[key] = std::move(partition);
      }
      for (uint32_t task : added_tasks) DRIFTD_TRY(AddTask(task, tasks, report));
    }
    generation_ = assignment->generation;
  }
  report.tasks = static_cast<int64_t>(tasks.size());
  return !position.empty();
}

Status ScaledOutPlacement::AddTask(uint32_t id, TaskMap& tasks, Report& report) {
  const Clock::time_point start = Clock::now();
  CheckpointStore& store = *parts_.store;
  // Where the local checkpoint's copy of the task stands in its changelog.
  int64_t position = 0;
  int64_t position_ms = -1;  // when the copy was current there; -1: not known (older driftd)
  Status status = Ok();
  const std::string position_key = EncodeStateKey(id, kChangelogNamespace, "");
  const std::string position_time_key = EncodeStateKey(id, kChangelogNamespace, kPositionTimeKey);
  DRIFTD_TRY(store.ScanStatePrefix(position_key, [&](std::string_view key, std::string_view value) {
    if (key == position_key && !ParseI64(value, position)) {
      status = MakeError(ErrorCode::kCorruption, "task {}: bad changelog position '{}'", id,
                         value);
    }
    if (key == position_time_key && !ParseI64(value, position_ms)) position_ms = -1;
  }));
  DRIFTD_TRY(status);
  // Catch the local copy up with the changelog: what other processes (or this one, before a
  // crash) committed since. The last record of a key wins (a deletion is a record too).
  std::map<std::string, std::optional<std::string>> latest;
  int64_t from_changelog = 0;
  auto collect = [&](std::string_view key, std::optional<std::string_view> value) {
    StateKeyView decoded;
    if (!DecodeStateKey(key, decoded) || decoded.scope != id) return;
    ++from_changelog;
    latest[std::string(key)] =
        value ? std::optional<std::string>(std::string(*value)) : std::nullopt;
  };
  auto end = parts_.group->ReadChangelog(id, position, collect);
  if (!end) return tl::unexpected(end.error().Wrap(fmt::format("restoring task {}", id)));
  // Compaction drops a deletion some time after it was written (the changelog's
  // delete.retention.ms): replayed onto a copy older than that, what came after it could leave
  // a deleted key in place (an emitted window emitted again). Such a copy goes, and the task
  // comes back whole from the changelog, which holds the latest value of every key still there.
  // Half the time, so that clocks that disagree a little do not matter. "Behind" is records
  // read after the position: a tail compacted down to nothing would pass unseen, but deletions
  // come of the watermark's moving (windows closing, buffered rows released), and the
  // watermark's own entry, rewritten when it moves, keeps its latest record through compaction.
  const int64_t kept_ms = parts_.group->changelog_deletions_kept_ms();
  if (from_changelog > 0 && position > 0 &&
      (position_ms < 0 || NowMs() - position_ms > kept_ms / 2)) {
    std::vector<std::string> stale;
    DRIFTD_TRY(store.ScanStatePrefix(StateScopePrefix(id),
                                     [&](std::string_view key, std::string_view) {
                                       stale.emplace_back(key);
                                     }));
    DRIFTD_TRY(store.ApplyState({}, stale));
    GetLogger("engine")->info(
        "pipeline {}: task {}: the local copy was last written {}, longer ago than half the {} ms "
        "the changelog keeps deletions; restoring the task whole from the changelog",
        parts_.spec->name, id,
        position_ms < 0 ? std::string("at an unknown time")
                        : fmt::format("{} s ago", (NowMs() - position_ms) / 1000),
        kept_ms);
    latest.clear();
    from_changelog = 0;
    position = 0;
    end = parts_.group->ReadChangelog(id, 0, collect);
    if (!end) return tl::unexpected(end.error().Wrap(fmt::format("restoring task {}", id)));
  }
  StatePuts puts;
  std::vector<std::string> deletes;
  for (auto& [key, value] : latest) {
    if (value) {
      puts.emplace_back(key, std::move(*value));
    } else {
      deletes.push_back(key);
    }
  }
  puts.emplace_back(position_key, std::to_string(*end));
  puts.emplace_back(position_time_key, std::to_string(NowMs()));
  DRIFTD_TRY(store.ApplyState(puts, deletes));

  QueryTask::Options options;
  options.id = id;
  options.tasks = std::max<uint32_t>(1, parts_.group->task_count());
  options.clock = parts_.clock;
  // A task's rows name their source partition by its index among all of them.
  options.partition_key = [this](uint32_t index) {
    return index < all_sources_.size() ? all_sources_[index] : std::string();
  };
  auto created = QueryTask::Create(*parts_.spec, std::move(options));
  if (!created) return tl::unexpected(created.error());
  QueryTask& task = **created;
  for (const std::string& partition : parts_.group->SourcePartitions()) {
    task.clock().Expect(partition);
  }
  int64_t entries = 0;
  DRIFTD_TRY(store.ScanStatePrefix(StateScopePrefix(id), [&](std::string_view encoded,
                                                             std::string_view value) {
    if (!status) return;
    StateKeyView key;
    if (!DecodeStateKey(encoded, key)) return;
    ++entries;
    if (key.ns == kChangelogNamespace) return;
    status = task.Restore(key.ns, key.key, value);
  }));
  DRIFTD_TRY(status);
  DRIFTD_TRY(task.FinishRestore());
  // The clock's watermark: what its partitions' restored marks say.
  task.clock().CommitBatch();
  tasks[id] = std::move(*created);
  const int64_t took = MillisSince(start);
  ++report.restored_tasks;
  report.restore_ms += took;
  GetLogger("engine")->info(
      "pipeline {}: task {} restored in {} ms ({} state entries, {} of them from the changelog "
      "after offset {})",
      parts_.spec->name, id, took, entries, from_changelog, position);
  return Ok();
}

EventClock& ScaledOutPlacement::ReadClock(TaskMap& tasks) {
  (void)tasks;
  return read_clock_;
}

bool ScaledOutPlacement::BeginBatch(const std::vector<PartitionActivity>& activity,
                                    int64_t now_ms, TaskMap& tasks) {
  all_sources_ = parts_.group->SourcePartitions();
  read_clock_.BeginBatch(activity, now_ms);
  // A task's clock hears of its partitions from their readers' marks; one that left the
  // source (its topic deleted, a pattern that no longer matches it) has no reader any more,
  // and would hold the task's watermark at its last mark for good.
  for (auto& [id, task] : tasks) task->clock().Delist(all_sources_, now_ms);
  // The source partitions' clock marks after this batch: a batch runs when one changed, for
  // the tasks elsewhere that wait for it.
  bool changed = false;
  marks_.clear();
  for (auto& [key, partition] : sources_) {
    const EventClock::PartitionState state = read_clock_.StateOf(key);
    ClockMark& mark = marks_[key];
    mark.partition = key;
    mark.more_available = state.more_available;
    mark.idle = state.idle;
    if (!partition->sent_any || partition->sent.more_available != mark.more_available ||
        partition->sent.idle != mark.idle) {
      changed = true;
    }
  }
  return changed;
}

bool ScaledOutPlacement::IsTaskInput(std::string_view key) const {
  return parts_.group->TaskOfInputKey(key).has_value();
}

QueryTask* ScaledOutPlacement::DirectTask(TaskMap& tasks) {
  (void)tasks;
  return nullptr;
}

Status ScaledOutPlacement::Route(RecordBatch& rows, RowTimes& times, bool labels, TaskMap& tasks,
                                 BatchOutput& output) {
  (void)tasks;
  (void)output;
  // The read clock commits no watermark: a row's late_before is its own partition's watermark
  // just before it, which gives the partition's largest event time before the row.
  const int64_t delay = parts_.clock.delay_us;
  std::string key;
  uint32_t last_index = UINT32_MAX;
  SourcePartition* partition = nullptr;
  for (size_t row = 0; row < rows.num_rows; ++row) {
    const uint32_t index = rows.positions[row].partition;
    if (index != last_index) {
      key = parts_.source->PartitionKeyOf(index);
      auto it = sources_.find(key);
      partition = it == sources_.end() ? nullptr : it->second.get();
      last_index = index;
    }
    if (partition == nullptr) continue;  // cannot happen: only owned partitions are read
    const int64_t late_before = times.late_before[row];
    const int64_t event_us = times.event_us[row];
    const int64_t max_before = late_before == INT64_MIN ? INT64_MIN : late_before + delay;
    const int64_t max_after = std::max(max_before, event_us);
    // A label goes to the task that joins its key; a prediction to its model's task, and a
    // copy to the task that joins its key when that is another.
    if (labels) {
      const uint32_t task = JoinTaskOf(rows, row, label_key_column_, 0);
      partition->writers[task].AddRow(rows, row, late_before, event_us, max_after);
      continue;
    }
    const uint32_t task = TaskOf(rows, row, key);
    partition->writers[task].AddRow(rows, row, late_before, event_us, max_after);
    if (partition->join_copies.empty()) continue;
    const uint32_t joins = JoinTaskOf(rows, row, prediction_key_column_, task);
    if (joins != task) {
      partition->join_copies[joins].AddRow(rows, row, late_before, event_us, max_after);
    }
  }
  return Ok();
}

bool ScaledOutPlacement::IsLabelsPartition(std::string_view key) const {
  return !parts_.labels_prefix.empty() && key.starts_with(parts_.labels_prefix);
}

Status ScaledOutPlacement::TakeTaskInput(const InputChunk& chunk, TaskMap& tasks,
                                         BatchOutput& output) {
  // Tasks' row blocks carry the derived columns too; the labels' blocks their own schema.
  const Schema schema = QuerySchema(*parts_.spec);
  for (size_t i = 0; i < chunk.size(); ++i) {
    const std::string key = parts_.source->PartitionKeyOf(chunk.records()[i].position.partition);
    auto task_id = parts_.group->TaskOfInputKey(key);
    if (!task_id) continue;
    auto found = tasks.find(*task_id);
    if (found == tasks.end()) continue;
    QueryTask& task = *found->second;
    if (auto message = TaskMessageBody(chunk.record(i))) {
      DRIFTD_TRY(task.Receive(*message));
      continue;
    }
    auto from = RowBlockPartition(chunk.record(i));
    if (!from) return tl::unexpected(from.error());
    const bool labels = IsLabelsPartition(*from);
    const Schema& rows_schema = labels ? parts_.spec->labels.schema : schema;
    block_rows_.Reset(rows_schema);
    block_times_.event_us.clear();
    block_times_.late_before.clear();
    ClockMark mark;
    bool join_only = false;
    // Rows keep the index of their source partition among all of them, so that a model's
    // partitions stay told apart (drift's order, and its warning across partitions).
    DRIFTD_TRY(ReadRowBlock(chunk.record(i), rows_schema, 0, block_rows_, block_times_, mark,
                            &join_only));
    auto at = std::find(all_sources_.begin(), all_sources_.end(), mark.partition);
    if (at == all_sources_.end()) {
      // A partition the source's latest look did not list (a gap in its metadata, a topic
      // deleted with rows still on their way): its rows keep their own partition's name.
      all_sources_.push_back(mark.partition);
      at = std::prev(all_sources_.end());
    }
    const uint32_t source_index = static_cast<uint32_t>(at - all_sources_.begin());
    for (RecordPosition& position : block_rows_.positions) position.partition = source_index;
    // The task's own watermark closes windows too: a row behind it is late.
    const int64_t watermark = task.clock().watermark_us();
    for (int64_t& late : block_times_.late_before) late = std::max(late, watermark);
    if (labels) {
      task.FoldLabels(block_rows_, block_times_);
    } else if (join_only) {
      task.FoldForJoin(block_rows_, block_times_, output);
    } else {
      // The labels' join takes the rows as they came, as it takes other tasks' copies: every
      // model under its own name, whichever task's gate would turn it away.
      if (task.joins_before_gate()) task.FoldForJoin(block_rows_, block_times_, output);
      task.Admit(block_rows_, block_times_);
      task.Fold(block_rows_, block_times_, output);
    }
    task.clock().Report(mark.partition, mark.max_event_us, mark.more_available, mark.idle);
  }
  return Ok();
}

void ScaledOutPlacement::TaskFinished(QueryTask& task, StateWrites& writes, size_t puts_from,
                                      size_t deletes_from, BatchOutput& output) {
  // The task may run elsewhere next: its clock goes with its state.
  task.PersistClock(writes);
  const uint32_t id = task.id();
  for (size_t i = puts_from; i < writes.puts.size(); ++i) {
    output.changelog.push_back({id, writes.puts[i].first, writes.puts[i].second.str(), false});
  }
  for (size_t i = deletes_from; i < writes.deletes.size(); ++i) {
    output.changelog.push_back({id, writes.deletes[i], "", true});
  }
}

void ScaledOutPlacement::EndBatch(BatchOutput& output) {
  // Row blocks, and clock marks for every task when a partition's clock moved.
  for (auto& [key, partition] : sources_) {
    ClockMark& mark = marks_[key];
    mark.partition = key;
    mark.max_event_us = read_clock_.StateOf(key).max_us;
    const bool moved = !partition->sent_any || partition->sent.max_event_us != mark.max_event_us ||
                       partition->sent.more_available != mark.more_available ||
                       partition->sent.idle != mark.idle;
    for (uint32_t t = 0; t < partition->writers.size(); ++t) {
      // The joining task's copies first: the partition's last mark to it comes after them.
      if (t < partition->join_copies.size() && !partition->join_copies[t].empty()) {
        for (std::string& block : partition->join_copies[t].Finish(mark)) {
          output.repartition.push_back({t, key, std::move(block), false});
        }
      }
      RowBlockWriter& writer = partition->writers[t];
      if (writer.empty() && !moved) continue;
      for (std::string& block : writer.Finish(mark)) {
        output.repartition.push_back({t, key, std::move(block), false});
      }
    }
    if (mark.max_event_us != INT64_MIN) {
      output.offset_metadata[key] = std::to_string(mark.max_event_us);
    }
  }
}

Result<bool> ScaledOutPlacement::PrepareCommit(BatchWrite& write, BatchOutput& output) {
  // One transaction through the Kafka sink is the batch's commit; the checkpoint follows it.
  Status delivered = committer_->Deliver(output);
  if (!delivered) {
    if (delivered.error().code() == ErrorCode::kUnrecoverable) {
      return tl::unexpected(delivered.error());
    }
    // Everything this batch changed in memory goes: the tasks are restored again, and the
    // batch is computed once more from what the group committed.
    ++aborted_;
    GetLogger("engine")->warn("pipeline {}: batch {} not committed, computing it again: {}",
                              parts_.spec->name, write.commit.batch_id,
                              delivered.error().message());
    drop_everything_ = true;
    return false;
  }
  const std::string now_ms = std::to_string(NowMs());
  for (const auto& [task, offset] : parts_.group->LastChangelogEnds()) {
    write.state_puts.emplace_back(EncodeStateKey(task, kChangelogNamespace, ""),
                                  std::to_string(offset));
    write.state_puts.emplace_back(EncodeStateKey(task, kChangelogNamespace, kPositionTimeKey),
                                  now_ms);
  }
  return true;
}

void ScaledOutPlacement::Committed() {
  for (auto& [key, partition] : sources_) {
    partition->sent = marks_[key];
    partition->sent_any = true;
  }
}

}  // namespace driftd
