#include "engine/executor/scale_out.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <set>

#include <fmt/format.h>

#include "engine/json_writer.h"
#include "engine/log.h"

namespace driftd {

namespace {

using Clock = std::chrono::steady_clock;

// State namespaces of a task besides its stages': its clock (one entry per source partition)
// and its changelog position (the local checkpoint's, never in the changelog itself).
constexpr std::string_view kClockNamespace = "clock";
constexpr std::string_view kChangelogNamespace = "changelog";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// FNV-1a 64: a stable hash of a model's name, the same in every process and build.
uint64_t StableHash(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

bool ParseI64(std::string_view text, int64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string EncodeClockEntry(const EventClock::PartitionState& partition) {
  return fmt::format("{},{},{}", partition.max_us, partition.more_available ? 1 : 0,
                     partition.idle ? 1 : 0);
}

bool DecodeClockEntry(std::string_view value, int64_t& max_us, bool& more, bool& idle) {
  const size_t a = value.find(',');
  const size_t b = a == std::string_view::npos ? a : value.find(',', a + 1);
  if (b == std::string_view::npos) return false;
  if (!ParseI64(value.substr(0, a), max_us)) return false;
  more = value.substr(a + 1, b - a - 1) == "1";
  idle = value.substr(b + 1) == "1";
  return true;
}

}  // namespace

// A task this process owns: its models' stages and its clock over every source partition.
struct ScaleOutRunner::Task {
  uint32_t id = 0;
  std::vector<std::unique_ptr<Stage>> stages;
  EventClock clock;
  /// Clock entries as last persisted, to write only what changed.
  std::map<std::string, std::string> saved_clock;
  RecordBatch batch;
  RowTimes times;

  Task(uint32_t task, EventClockOptions options) : id(task), clock(options) {}
};

// A source partition this process reads.
struct ScaleOutRunner::SourcePartition {
  int64_t max_event_us = INT64_MIN;
  int64_t last_active_ms = INT64_MIN;
  /// The clock mark last sent to the tasks, to send a new one only when it changed.
  ClockMark sent;
  bool sent_any = false;
  std::vector<RowBlockWriter> writers;  // one per task
};

ScaleOutRunner::ScaleOutRunner(Parts parts) : parts_(std::move(parts)) {
  const PipelineSpec& spec = *parts_.spec;
  std::string column;
  if (spec.query.watermark) {
    column = spec.query.watermark->column;
    clock_options_.delay_us = spec.query.watermark->delay_ms * 1000;
    clock_options_.idle_timeout_ms = spec.query.watermark->idle_timeout_ms;
  } else if (spec.query.window) {
    column = spec.query.window->column;
  }
  clock_options_.column = column.empty() ? -1 : QuerySchema(spec).IndexOf(column);
  std::string model = spec.drift.model_column;
  if (model.empty() && !spec.query.group_by.empty()) model = spec.query.group_by[0];
  model_column_ = model.empty() ? -1 : QuerySchema(spec).IndexOf(model);
}

ScaleOutRunner::~ScaleOutRunner() = default;

uint32_t ScaleOutRunner::TaskOf(const RecordBatch& batch, size_t row,
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

void ScaleOutRunner::DropEverything() {
  tasks_.clear();
  sources_.clear();
  position_.clear();
  generation_ = -1;
}

Status ScaleOutRunner::Reconcile(BatchReport& report) {
  auto assignment = parts_.group->PollAssignment();
  if (!assignment) return tl::unexpected(assignment.error());
  if (assignment->generation == generation_) return Ok();
  GroupMember& group = *parts_.group;
  std::set<std::string> wanted_sources(assignment->source.begin(), assignment->source.end());
  std::set<uint32_t> wanted_tasks(assignment->tasks.begin(), assignment->tasks.end());
  for (auto it = sources_.begin(); it != sources_.end();) {
    if (wanted_sources.count(it->first)) {
      ++it;
      continue;
    }
    position_.erase(it->first);
    it = sources_.erase(it);
  }
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (wanted_tasks.count(it->first)) {
      ++it;
      continue;
    }
    position_.erase(group.TaskInputKey(it->first));
    it = tasks_.erase(it);
  }
  std::vector<std::string> added;
  for (const std::string& key : wanted_sources) {
    if (!sources_.count(key)) added.push_back(key);
  }
  std::vector<uint32_t> added_tasks;
  for (uint32_t task : wanted_tasks) {
    if (!tasks_.count(task)) {
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
      const GroupPosition& position = committed->at(key);
      position_[key] = position.offset;
      if (group.TaskOfInputKey(key)) continue;
      auto partition = std::make_unique<SourcePartition>();
      int64_t max_us = INT64_MIN;
      if (!position.metadata.empty() && ParseI64(position.metadata, max_us)) {
        partition->max_event_us = max_us;
      }
      partition->writers.assign(group.task_count(), RowBlockWriter(key));
      sources_[key] = std::move(partition);
    }
    for (uint32_t task : added_tasks) DRIFTD_TRY(AddTask(task, report));
  }
  generation_ = assignment->generation;
  return Ok();
}

Status ScaleOutRunner::AddTask(uint32_t id, BatchReport& report) {
  const Clock::time_point start = Clock::now();
  CheckpointStore& store = *parts_.store;
  const std::string prefix = StateScopePrefix(id);
  // Where the local checkpoint's copy of the task stands in its changelog.
  int64_t position = 0;
  Status status = Ok();
  const std::string position_key = EncodeStateKey(id, kChangelogNamespace, "");
  DRIFTD_TRY(store.ScanStatePrefix(position_key, [&](std::string_view key, std::string_view value) {
    if (key == position_key && !ParseI64(value, position)) {
      status = MakeError(ErrorCode::kCorruption, "task {}: bad changelog position '{}'", id,
                         value);
    }
  }));
  DRIFTD_TRY(status);
  // Catch the local copy up with the changelog: what other processes (or this one, before a
  // crash) committed since. The last record of a key wins (a deletion is a record too).
  std::map<std::string, std::optional<std::string>> latest;
  int64_t from_changelog = 0;
  auto end = parts_.group->ReadChangelog(
      id, position, [&](std::string_view key, std::optional<std::string_view> value) {
        StateKeyView decoded;
        if (!DecodeStateKey(key, decoded) || decoded.scope != id) return;
        ++from_changelog;
        latest[std::string(key)] =
            value ? std::optional<std::string>(std::string(*value)) : std::nullopt;
      });
  if (!end) return tl::unexpected(end.error().Wrap(fmt::format("restoring task {}", id)));
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
  for (auto& [key, value] : latest) {
    if (value) {
      puts.emplace_back(key, std::move(*value));
    } else {
      deletes.push_back(key);
    }
  }
  puts.emplace_back(position_key, std::to_string(*end));
  DRIFTD_TRY(store.ApplyState(puts, deletes));

  auto stages = CreateStages(*parts_.spec);
  if (!stages) return tl::unexpected(stages.error());
  auto task = std::make_unique<Task>(id, clock_options_);
  task->stages = std::move(*stages);
  for (const std::string& partition : parts_.group->SourcePartitions()) task->clock.Expect(partition);
  int64_t entries = 0;
  DRIFTD_TRY(store.ScanStatePrefix(prefix, [&](std::string_view encoded, std::string_view value) {
    if (!status) return;
    StateKeyView key;
    if (!DecodeStateKey(encoded, key)) return;
    ++entries;
    if (key.ns == kChangelogNamespace) return;
    if (key.ns == kClockNamespace) {
      int64_t max_us = INT64_MIN;
      bool more = false;
      bool idle = false;
      if (!DecodeClockEntry(value, max_us, more, idle)) {
        status = MakeError(ErrorCode::kCorruption, "task {}: bad clock entry '{}'", id, value);
        return;
      }
      task->clock.Report(key.key, max_us, more, idle);
      task->saved_clock[std::string(key.key)] = std::string(value);
      return;
    }
    for (auto& stage : task->stages) {
      if (stage->state_namespace() == key.ns) {
        status = stage->Restore(key.key, value);
        return;
      }
    }
  }));
  DRIFTD_TRY(status);
  for (auto& stage : task->stages) DRIFTD_TRY(stage->FinishRestore());
  // The clock's watermark: what its partitions' restored marks say.
  task->clock.CommitBatch();
  tasks_[id] = std::move(task);
  const int64_t took = MillisSince(start);
  ++report.restored_tasks;
  report.restore_ms += took;
  GetLogger("engine")->info(
      "pipeline {}: task {} restored in {} ms ({} state entries, {} of them from the changelog "
      "after offset {})",
      parts_.spec->name, id, took, entries, from_changelog, position);
  return Ok();
}

Result<bool> ScaleOutRunner::RunBatch(int64_t batch_id, BatchOutput& output,
                                      BatchReport& report) {
  GroupMember& group = *parts_.group;
  DRIFTD_TRY(Reconcile(report));
  report.tasks = static_cast<int64_t>(tasks_.size());
  report.aborted = aborted_;
  if (position_.empty()) return false;  // nothing owned (yet)

  auto planned = parts_.source->PlanBatch(position_);
  if (!planned) return tl::unexpected(planned.error());
  const SourceOffsets end = *planned;
  report.lag = parts_.source->Lag(end);
  std::map<std::string, int64_t> latest;
  for (const PartitionLag& lag : report.lag) latest[lag.partition] = lag.latest;

  // The source partitions' clock marks after this batch.
  const int64_t now_steady = SteadyMs();
  bool marks_changed = false;
  std::map<std::string, ClockMark> marks;
  for (auto& [key, partition] : sources_) {
    const int64_t to = end.count(key) ? end.at(key) : position_[key];
    const bool read = to != position_[key];
    const bool more = latest.count(key) && latest[key] > to;
    if (read || more || partition->last_active_ms == INT64_MIN) {
      partition->last_active_ms = now_steady;
    }
    ClockMark mark;
    mark.partition = key;
    mark.more_available = more;
    mark.idle = !read && !more && clock_options_.idle_timeout_ms > 0 &&
                now_steady - partition->last_active_ms >= clock_options_.idle_timeout_ms;
    marks[key] = mark;
    if (!partition->sent_any || partition->sent.more_available != mark.more_available ||
        partition->sent.idle != mark.idle) {
      marks_changed = true;
    }
  }
  const bool has_data = end != position_;
  bool closable = false;
  for (const auto& [id, task] : tasks_) {
    for (const auto& stage : task->stages) {
      closable = closable || stage->HasClosableWindows(task->clock.watermark_us()) ||
                 stage->HasClosableWindows(task->clock.NextWatermark());
    }
  }
  if (!has_data && !closable && !marks_changed) return false;

  output.batch_id = batch_id;
  output.source_end = end;
  // Tasks' row blocks carry the derived columns too.
  const Schema schema = QuerySchema(*parts_.spec);
  // Read: the source partitions' records, then the tasks' row blocks.
  SourceOffsets source_start, source_end, task_start, task_end;
  for (const auto& [key, offset] : end) {
    const bool task_input = group.TaskOfInputKey(key).has_value();
    (task_input ? task_start : source_start)[key] = position_[key];
    (task_input ? task_end : source_end)[key] = offset;
  }
  auto read = [&](const SourceOffsets& from, const SourceOffsets& to,
                  const std::function<Status()>& on_chunk) -> Status {
    if (from == to) return Ok();
    auto reader = parts_.source->Read(from, to);
    if (!reader) return tl::unexpected(reader.error());
    bool more = true;
    while (more) {
      if (parts_.stop_requested()) {
        return MakeError(ErrorCode::kCancelled, "stopped during batch {}", batch_id);
      }
      chunk_.Clear();
      auto next = (*reader)->Next(chunk_, parts_.chunk_bytes);
      if (!next) return tl::unexpected(next.error());
      more = *next;
      chunk_.Seal();
      DRIFTD_TRY(on_chunk());
    }
    report.lost_records += (*reader)->lost_records();
    return Ok();
  };
  const std::function<Status()> on_source_chunk = [&]() -> Status {
    report.input_rows += static_cast<int64_t>(chunk_.size());
    records_.Reset(parts_.spec->schema);
    dead_letters_.clear();
    DRIFTD_TRY(parts_.decoder->Decode(chunk_, records_, &dead_letters_,
                                      [&](const RecordPosition& position) {
                                        return parts_.source->DescribePosition(position);
                                      }));
    for (const DeadLetter& dead : dead_letters_) {
      output.dead_letters.Add(
          "", DeadLetterToJson(dead, parts_.source->DescribePosition(dead.position)));
    }
    parts_.metadata->Fill(chunk_, *parts_.source, records_);
    report.filtered_rows += parts_.projection->Apply(records_);
    const Column* time = clock_options_.column >= 0 ? &records_.columns[clock_options_.column]
                                                    : nullptr;
    std::string key;
    uint32_t last_index = UINT32_MAX;
    SourcePartition* partition = nullptr;
    for (size_t row = 0; row < records_.num_rows; ++row) {
      const uint32_t index = records_.positions[row].partition;
      if (index != last_index) {
        key = parts_.source->PartitionKeyOf(index);
        auto it = sources_.find(key);
        if (it == sources_.end()) continue;  // cannot happen: only owned partitions are read
        partition = it->second.get();
        last_index = index;
      }
      // Judged by its own partition's watermark just before it (event_clock.h).
      const int64_t late_before = partition->max_event_us == INT64_MIN
                                      ? INT64_MIN
                                      : partition->max_event_us - clock_options_.delay_us;
      int64_t event_us = INT64_MIN;
      if (time && !time->IsNull(row)) {
        event_us = time->i64[row];
        partition->max_event_us = std::max(partition->max_event_us, event_us);
      }
      partition->writers[TaskOf(records_, row, key)].AddRow(records_, row, late_before, event_us,
                                                            partition->max_event_us);
    }
    return Ok();
  };
  DRIFTD_TRY(read(source_start, source_end, on_source_chunk));
  const std::vector<std::string> all_sources = group.SourcePartitions();
  const std::function<Status()> on_task_chunk = [&]() -> Status {
    for (size_t i = 0; i < chunk_.size(); ++i) {
      const std::string key = parts_.source->PartitionKeyOf(chunk_.records()[i].position.partition);
      auto task_id = group.TaskOfInputKey(key);
      if (!task_id || !tasks_.count(*task_id)) continue;
      Task& task = *tasks_[*task_id];
      task.batch.Reset(schema);
      task.times.event_us.clear();
      task.times.late_before.clear();
      ClockMark mark;
      // Rows keep the index of their source partition among all of them, so that a model's
      // partitions stay told apart (drift's record-count windows warn across partitions).
      DRIFTD_TRY(ReadRowBlock(chunk_.record(i), schema, 0, task.batch, task.times, mark));
      const auto at = std::find(all_sources.begin(), all_sources.end(), mark.partition);
      const uint32_t source_index = static_cast<uint32_t>(at - all_sources.begin());
      for (RecordPosition& position : task.batch.positions) position.partition = source_index;
      // The task's own watermark closes windows too: a row behind it is late.
      const int64_t watermark = task.clock.watermark_us();
      for (int64_t& late : task.times.late_before) late = std::max(late, watermark);
      for (auto& stage : task.stages) stage->Process(task.batch, task.times, output);
      task.clock.Report(mark.partition, mark.max_event_us, mark.more_available, mark.idle);
    }
    return Ok();
  };
  DRIFTD_TRY(read(task_start, task_end, on_task_chunk));

  // Each task ends its batch: rows, state changes (local and changelog), its clock.
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
  report.watermark_us = INT64_MAX;
  for (auto& [id, task] : tasks_) {
    BatchContext context;
    context.batch_id = batch_id;
    context.now_ms = NowMs();
    context.watermark_us = task->clock.watermark_us();
    context.next_watermark_us = task->clock.NextWatermark();
    report.watermark_us = std::min(report.watermark_us, context.next_watermark_us);
    for (auto& stage : task->stages) {
      StateChanges changes;
      stage->Finish(context, output, changes, report.stages);
      const std::string_view ns = stage->state_namespace();
      for (auto& [key, value] : changes.puts) {
        std::string encoded = EncodeStateKey(id, ns, key);
        output.changelog.push_back({id, encoded, value, false});
        puts.emplace_back(std::move(encoded), std::move(value));
      }
      for (const std::string& key : changes.deletes) {
        std::string encoded = EncodeStateKey(id, ns, key);
        output.changelog.push_back({id, encoded, "", true});
        deletes.push_back(std::move(encoded));
      }
    }
    for (const EventClock::PartitionState& partition : task->clock.Partitions()) {
      if (partition.max_us == INT64_MIN && partition.more_available && !partition.idle) {
        continue;  // still waiting for its first mark: nothing to keep
      }
      std::string value = EncodeClockEntry(partition);
      auto saved = task->saved_clock.find(partition.name);
      if (saved != task->saved_clock.end() && saved->second == value) continue;
      std::string encoded = EncodeStateKey(id, kClockNamespace, partition.name);
      output.changelog.push_back({id, encoded, value, false});
      puts.emplace_back(std::move(encoded), value);
    }
  }
  if (tasks_.empty()) report.watermark_us = INT64_MIN;
  // Row blocks, and clock marks for every task when a partition's clock moved.
  for (auto& [key, partition] : sources_) {
    ClockMark& mark = marks[key];
    mark.max_event_us = partition->max_event_us;
    const bool moved = !partition->sent_any || partition->sent.max_event_us != mark.max_event_us ||
                       partition->sent.more_available != mark.more_available ||
                       partition->sent.idle != mark.idle;
    for (uint32_t t = 0; t < partition->writers.size(); ++t) {
      RowBlockWriter& writer = partition->writers[t];
      if (writer.empty() && !moved) continue;
      for (std::string& block : writer.Finish(mark)) {
        output.repartition.push_back({t, key, std::move(block), false});
      }
    }
    if (partition->max_event_us != INT64_MIN) {
      output.offset_metadata[key] = std::to_string(partition->max_event_us);
    }
  }

  // Commit: one transaction through the Kafka sink, then the local cache.
  Sink* committer = nullptr;
  for (Sink* sink : parts_.sinks) {
    if (sink->CommitsScaledOutBatches()) committer = sink;
  }
  if (committer == nullptr) {
    return MakeError(ErrorCode::kInternal, "scaled out without a Kafka sink to commit with");
  }
  Status delivered = committer->Deliver(output);
  if (!delivered) {
    if (delivered.error().code() == ErrorCode::kUnrecoverable) {
      return tl::unexpected(delivered.error());
    }
    // Everything this batch changed in memory goes: the tasks are restored again, and the
    // batch is computed once more from what the group committed.
    ++aborted_;
    GetLogger("engine")->warn("pipeline {}: batch {} not committed, computing it again: {}",
                              parts_.spec->name, batch_id, delivered.error().message());
    DropEverything();
    return false;
  }
  for (const auto& [task, offset] : group.LastChangelogEnds()) {
    puts.emplace_back(EncodeStateKey(task, kChangelogNamespace, ""), std::to_string(offset));
  }
  BatchWrite write;
  write.commit.batch_id = batch_id;
  write.commit.start = position_;
  write.commit.end = end;
  write.commit.watermark_us = report.watermark_us;
  write.commit.committed_at_ms = NowMs();
  report.state_keys_written = static_cast<int64_t>(puts.size());
  report.state_keys_deleted = static_cast<int64_t>(deletes.size());
  for (const auto& [key, value] : puts) {
    report.state_bytes_written += static_cast<int64_t>(key.size() + value.size());
  }
  write.state_puts = std::move(puts);
  write.state_deletes = std::move(deletes);
  DRIFTD_TRY(parts_.store->Commit(std::move(write)));
  for (Sink* sink : parts_.sinks) {
    if (sink == committer) continue;
    Status best_effort = sink->Deliver(output);
    if (!best_effort) {
      GetLogger("engine")->warn("batch {}: sink '{}': {}", batch_id, sink->name(),
                                best_effort.error().message());
    }
  }

  for (auto& [id, task] : tasks_) {
    task->clock.CommitBatch();
    for (const EventClock::PartitionState& partition : task->clock.Partitions()) {
      task->saved_clock[partition.name] = EncodeClockEntry(partition);
    }
    report.max_event_us = std::max(report.max_event_us, task->clock.MaxEventTime());
  }
  for (auto& [key, partition] : sources_) {
    partition->sent = marks[key];
    partition->sent_any = true;
  }
  report.start = position_;
  report.end = end;
  for (const SinkSpec& spec : parts_.spec->sinks) {
    report.output_rows += static_cast<int64_t>(output.For(spec.stream, spec.output_mode).rows.size());
  }
  position_ = end;
  return true;
}

}  // namespace driftd
