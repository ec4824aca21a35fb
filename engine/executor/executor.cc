#include "engine/executor/executor.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <span>
#include <thread>

#include <sched.h>

#include "engine/executor/checkpoint_claim.h"
#include "engine/executor/chunk_pipeline.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/event_clock.h"
#include "engine/executor/inputs.h"
#include "engine/executor/metrics_query.h"
#include "engine/executor/order_buffer.h"
#include "engine/executor/outbox_codec.h"
#include "engine/executor/output_limits.h"
#include "engine/executor/performance_stage.h"
#include "engine/executor/placement.h"
#include "engine/executor/progress.h"
#include "engine/executor/scale_out.h"
#include "engine/executor/status_history.h"
#include "engine/executor/stage.h"
#include "engine/executor/task.h"
#include "engine/expr/projection.h"
#include "engine/json_decoder.h"
#include "engine/json_writer.h"
#include "engine/key_guard.h"
#include "engine/log.h"
#include "engine/wall_clock.h"

namespace driftd {

namespace {

using Clock = std::chrono::steady_clock;

// The steady clock in milliseconds (idleness of partitions).
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             Clock::now().time_since_epoch())
      .count();
}

int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// The cores this process may run on (its CPU affinity, as taskset or a cpuset sets it).
int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

EventClockOptions ClockOptions(const PipelineSpec& spec) {
  EventClockOptions options;
  const QuerySpec& query = spec.query;
  std::string column;
  if (query.watermark) {
    column = query.watermark->column;
    options.delay_us = query.watermark->delay_ms * 1000;
    options.idle_timeout_ms = query.watermark->idle_timeout_ms;
  } else if (query.window) {
    column = query.window->column;  // drift's windows close by it (delay 0)
  }
  // The event time may be a metadata column (the Kafka timestamp) or a derived one.
  options.column = column.empty() ? -1 : QuerySchema(spec).IndexOf(column);
  // Drift's record-count windows over partitions take their values in event-time order
  // (engine/executor/order_buffer.h): without a declared watermark, drift's own time column is
  // the clock, without delay, and a partition silent for a minute stops holding it back.
  if (options.column < 0 && OrderBuffer::Applies(spec)) {
    options.column = OrderBuffer::TimeColumn(spec);
    options.idle_timeout_ms = 60'000;
  }
  return options;
}

}  // namespace

class QueryExecutor::Impl {
 public:
  /// What a thread of the batch decodes with (the executor's own for thread 0).
  struct ThreadContext {
    std::vector<ValueDecoder*> decoders;  // by input
    Projection* projection = nullptr;
    MetadataFiller* metadata = nullptr;
  };
  struct ThreadParts {
    std::vector<std::unique_ptr<ValueDecoder>> decoders;
    std::unique_ptr<Projection> projection;
    std::unique_ptr<MetadataFiller> metadata;
  };

  Impl(const PipelineSpec& spec, ExecutorOptions options, QueryIo io, QueryCounters& counters)
      : spec_(spec),
        options_(std::move(options)),
        io_(std::move(io)),
        counters_(counters),
        clock_column_(ClockOptions(spec).column),
        log_(GetLogger("engine")),
        metadata_(spec.query.metadata) {}

  Status Init() {
    // A scaled-out process runs its tasks on one thread.
    threads_ = spec_.scale_out.enabled ? 1 : (spec_.threads > 0 ? spec_.threads : AvailableCores());
    // Every input: its source and decoder, the first one's as a query of one input has them.
    std::vector<QueryInputs::Input> inputs;
    for (size_t input = 0; input <= spec_.inputs.size(); ++input) {
      const PipelineSpec spec = InputPipeline(input);
      auto decoder = CreateDecoder(spec);
      if (!decoder) return tl::unexpected(decoder.error());
      decoders_.push_back(std::move(*decoder));
      auto source = io_.create_source(spec);
      if (!source) {
        return tl::unexpected(input == 0 ? source.error()
                                         : source.error().Wrap(fmt::format(
                                               "input '{}'", spec_.inputs[input - 1].name)));
      }
      inputs.push_back({input == 0 ? std::string("main") : spec_.inputs[input - 1].name,
                        std::move(*source)});
    }
    if (spec_.labels.enabled) {
      const PipelineSpec labels = LabelsPipeline(spec_);
      auto decoder = CreateDecoder(labels);
      if (!decoder) return tl::unexpected(decoder.error().Wrap("labels"));
      decoders_.push_back(std::move(*decoder));
      auto source = io_.create_source(labels);
      if (!source) return tl::unexpected(source.error().Wrap("labels"));
      labels_input_ = inputs.size();
      labels_time_column_ = spec_.labels.schema.IndexOf(spec_.labels.event_time);
      inputs.push_back({"labels", std::move(*source)});
    }
    if (spec_.scale_out.enabled) {
      // One consumer group divides every input's partitions (the labels' too) among the
      // processes: the first input's source makes it, the others join it.
      for (size_t input = 1; input < inputs.size(); ++input) {
        DRIFTD_TRY(inputs[input].source->ShareGroupOf(*inputs[0].source).map_error(
            [&](const Error& e) { return e.Wrap(fmt::format("input '{}'", inputs[input].name)); }));
      }
    }
    auto query_inputs = std::make_unique<QueryInputs>(std::move(inputs));
    inputs_ = query_inputs.get();
    source_ = std::move(query_inputs);
    // The sinks see the first input (a scaled-out Kafka sink shares its group).
    auto sinks = io_.create_sinks(spec_, inputs_->source(0));
    if (!sinks) return tl::unexpected(sinks.error());
    sinks_ = std::move(*sinks);
    // The checkpoint's outbox and the deliveries know a sink by its name: two of one name
    // would be taken for each other (a batch marked delivered when one of them had it).
    std::set<std::string_view> names;
    for (const auto& sink : sinks_) {
      if (!names.insert(sink->name()).second) {
        return MakeError(ErrorCode::kConfig,
                         "two sinks deliver under the name '{}'; sink names must differ, also "
                         "from the name the sinks of a shared kind deliver under together",
                         sink->name());
      }
    }
    auto projection = Projection::Create(spec_);
    if (!projection) return tl::unexpected(projection.error());
    projection_ = std::move(*projection);
    // What this thread decodes with; threads > 1 add their own.
    ThreadContext own{{}, projection_.get(), &metadata_};
    for (auto& decoder : decoders_) own.decoders.push_back(decoder.get());
    contexts_.push_back(std::move(own));
    if (threads_ > 1) DRIFTD_TRY(InitThreads());
    return Ok();
  }

  // The schema of input `input`'s records.
  const Schema& SchemaOf(size_t input) const {
    return input == labels_input_ ? spec_.labels.schema : spec_.schema;
  }

  // The pipeline as the connectors see input `input`: its source in the source's place.
  PipelineSpec InputPipeline(size_t input) const {
    if (input == labels_input_) return LabelsPipeline(spec_);
    if (input == 0) return spec_;
    PipelineSpec spec = spec_;
    spec.source = spec_.inputs[input - 1].source;
    return spec;
  }

  // A decoder of the input's value format that converts only the columns the pipeline reads.
  Result<std::unique_ptr<ValueDecoder>> CreateDecoder(const PipelineSpec& spec) {
    auto used = ColumnsUsed(spec);
    if (!used) return tl::unexpected(used.error());
    Result<std::unique_ptr<ValueDecoder>> decoder =
        io_.create_decoder ? io_.create_decoder(spec)
                           : std::unique_ptr<ValueDecoder>(std::make_unique<JsonDecoder>(
                                 spec.schema, spec.source.malformed));
    if (!decoder) return decoder;
    (*decoder)->Project(*used);
    return GuardKeyLengths(std::move(*decoder), spec);
  }

  // The input of a chunk's records (a chunk holds one input's only: engine/executor/inputs.h).
  size_t InputOfChunk(const InputChunk& chunk) const {
    return chunk.empty() ? 0 : inputs_->InputOf(chunk.records()[0].position.partition);
  }

  // threads > 1: a decoder, projection and metadata filler per thread (the executor's own for
  // thread 0). The pipeline's workers and lanes come with the task they fold (StartThreads).
  Status InitThreads() {
    for (int thread = 1; thread < threads_; ++thread) {
      auto& owned = thread_parts_.emplace_back();
      ThreadContext context;
      for (size_t input = 0; input < decoders_.size(); ++input) {
        auto decoder = CreateDecoder(InputPipeline(input));  // the labels' too
        if (!decoder) return tl::unexpected(decoder.error());
        context.decoders.push_back(decoder->get());
        owned.decoders.push_back(std::move(*decoder));
      }
      auto projection = Projection::Create(spec_);
      if (!projection) return tl::unexpected(projection.error());
      owned.projection = std::move(*projection);
      owned.metadata = std::make_unique<MetadataFiller>(spec_.query.metadata);
      context.projection = owned.projection.get();
      context.metadata = owned.metadata.get();
      contexts_.push_back(std::move(context));
    }
    return Ok();
  }

  // The pipeline's workers, one lane per stage shard of the task the source's rows go straight
  // into (threads > 1; a placement that routes rows elsewhere folds them on this thread).
  void StartThreads() {
    QueryTask* task = placement_->DirectTask(tasks_);
    if (threads_ <= 1 || task == nullptr) return;
    // Two chunks in flight per thread keep every thread busy while the slowest lane catches
    // up, at 2 x chunk_bytes of input (and its decoded rows) per thread.
    pipeline_ = std::make_unique<ChunkPipeline>(static_cast<size_t>(threads_), task->lane_count(),
                                                2 * static_cast<size_t>(threads_));
  }

  // How the query's tasks are made: the clock, the partitions' names for drift's order, the
  // shards of a stage that splits its state over the batch's threads.
  QueryTask::Options TaskOptions() {
    QueryTask::Options options;
    options.shards = static_cast<uint32_t>(threads_);
    options.clock = ClockOptions(spec_);
    options.partition_key = [this](uint32_t index) {
      std::lock_guard<std::mutex> lock(source_mutex_);
      return source_->PartitionKeyOf(index);
    };
    return options;
  }

  Status Start() {
    CheckpointOptions checkpoint_options;
    checkpoint_options.sync = options_.sync_commits;
    auto store = io_.open_checkpoint(spec_.checkpoint_location, checkpoint_options);
    if (!store) return tl::unexpected(store.error().Wrap("opening the checkpoint"));
    store_ = std::move(*store);
    auto claimed = ClaimCheckpoint(*store_, spec_, options_.fingerprint_json,
                                   options_.checkpoint_name);
    if (!claimed) return tl::unexpected(claimed.error());
    checkpoint_id_ = std::move(*claimed);

    auto last = store_->LastCommit();
    if (!last) return tl::unexpected(last.error());
    Clock::time_point restore_start = Clock::now();
    int64_t restored = 0;
    // Scaled out, the tasks come with the group's assignment (after the source started); one
    // process runs its one task from here.
    if (!spec_.scale_out.enabled) {
      placement_ = std::make_unique<LocalPlacement>(spec_, TaskOptions(), *store_, sinks_);
      DRIFTD_TRY(placement_->Start(*last, tasks_, restored));
      StartThreads();
    }
    if (options_.metrics) {
      const TaskTotals totals = Totals();
      if (totals.gated) {
        options_.metrics->RecordRestoredModels(totals.models, spec_.query.max_models);
      }
      if (totals.drift) {
        options_.metrics->RecordDriftModels(DriftModelStats());
        std::vector<PackedEvaluation> evaluations;
        for (const auto& [id, task] : tasks_) {
          if (!task->drift()) continue;
          std::vector<PackedEvaluation> latest = task->drift()->LatestEvaluations();
          evaluations.insert(evaluations.end(), std::make_move_iterator(latest.begin()),
                             std::make_move_iterator(latest.end()));
        }
        options_.metrics->RecordRestoredEvaluations(evaluations);
      }
      for (auto& [id, task] : tasks_) {
        if (HistoryStage* history = task->history()) {
          options_.metrics->RecordRestoredHistory(history->TakeRestored());
        }
      }
    }
    run_id_ = NewCheckpointId();

    SourceOffsets committed;
    if (*last) {
      next_batch_id_ = (*last)->batch_id + 1;
      committed = (*last)->end;
      log_->info("pipeline {}: resuming after batch {} ({} state entries restored in {} ms)",
                 spec_.name, (*last)->batch_id, restored, MillisSince(restore_start));
    } else {
      log_->info("pipeline {}: starting with an empty checkpoint at {}", spec_.name,
                 spec_.checkpoint_location);
    }
    if (pipeline_) {
      const QueryTask* task = placement_->DirectTask(tasks_);
      log_->info("pipeline {}: batches run on {} threads ({} lanes{})", spec_.name, threads_,
                 task->lane_count(),
                 task->drift() != nullptr
                     ? fmt::format(", drift's models in {} shards", task->drift()->shards())
                     : std::string());
    }

    for (auto& sink : sinks_) {
      sink->SetCheckpointId(checkpoint_id_, *last ? (*last)->batch_id : -1);
      DRIFTD_TRY(sink->Open().map_error(
          [&](const Error& e) { return e.Wrap(fmt::format("opening sink '{}'", sink->name())); }));
    }
    RefreshLimits();
    DRIFTD_TRY(RefuseStaleCheckpoint(sinks_, spec_, *last ? (*last)->batch_id : -1));
    DRIFTD_TRY(FinishOutbox());
    DRIFTD_TRY(source_->Start(committed));
    if (committed.empty()) {
      auto initial = source_->InitialOffsets();
      if (!initial) return tl::unexpected(initial.error());
      position_ = std::move(*initial);
    } else {
      position_ = committed;
    }
    if (spec_.trigger.kind == TriggerKind::kAvailableNow) DRIFTD_TRY(source_->FreezeAvailable());
    if (spec_.scale_out.enabled) {
      GroupMember* group = source_->group();
      if (group == nullptr) {
        return MakeError(ErrorCode::kConfig, "scaleOut: the source is not a consumer group member");
      }
      ScaledOutPlacement::Parts parts;
      parts.spec = &spec_;
      parts.source = source_.get();
      parts.group = group;
      for (auto& sink : sinks_) parts.sinks.push_back(sink.get());
      parts.store = store_.get();
      parts.clock = ClockOptions(spec_);
      if (labels_input_ != SIZE_MAX) parts.labels_prefix = inputs_->Prefix(labels_input_);
      placement_ = std::make_unique<ScaledOutPlacement>(std::move(parts));
      DRIFTD_TRY(placement_->Start(*last, tasks_, restored));
    }
    started_ = true;
    return Ok();
  }

  Status Run() {
    if (spec_.trigger.kind == TriggerKind::kContinuous) return RunContinuous();
    const TriggerSpec& trigger = spec_.trigger;
    auto interval = std::chrono::milliseconds(trigger.interval_ms);
    while (!stop_requested_.load()) {
      Clock::time_point trigger_start = Clock::now();
      if (options_.metrics) options_.metrics->LoopBusy();
      auto ran = RunBatch();
      if (options_.metrics) options_.metrics->LoopIdle();
      if (!ran) {
        if (ran.error().code() == ErrorCode::kCancelled) break;
        IgnoreError(FinishDelivery());  // the batch before it stays committed; this one fails
        return tl::unexpected(ran.error());
      }
      if (trigger.kind == TriggerKind::kOnce) break;
      if (trigger.kind == TriggerKind::kAvailableNow) {
        if (*ran) continue;
        // No batch: everything available is read, unless the plan could not see the source
        // (brokers unreachable for a moment plan "no new data" until they are back). That is
        // waited out as a processingTime query waits it out; ending would leave the rest unread.
        if (!last_plan_blind_) break;
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait_for(lock, std::chrono::milliseconds(200),
                       [&] { return stop_requested_.load(); });
        continue;
      }
      if (*ran && !(interval.count() > 0)) continue;
      DRIFTD_TRY(AwaitDelivery());
      // processingTime: the next batch starts at the next interval boundary; an overrun batch is
      // followed at once. With no data, poll again after the interval (or 100 ms if it is 0).
      Clock::time_point next = trigger_start + (interval.count() > 0
                                                    ? std::chrono::duration_cast<Clock::duration>(interval)
                                                    : std::chrono::milliseconds(100));
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_until(lock, next, [&] { return stop_requested_.load(); });
    }
    FlushKept();
    store_->PrepareClose();  // only delivery marks follow
    DRIFTD_TRY(AwaitDelivery());
    for (auto& sink : sinks_) IgnoreError(sink->Close());  // best effort on shutdown
    return Ok();
  }

  // Trigger continuous: an epoch starts as soon as the previous one ends and the source has
  // records (or a window became closable); nothing waits for an interval boundary. Each epoch is
  // committed before it is delivered, so the exactly-once protocol holds per epoch.
  //
  // The commit is an epoch's only durable write: the sinks deliver without syncing
  // (Sink::DeferDurability), and once per trigger interval a thread of its own makes their
  // output durable (Sink::Sync) while epochs go on; the epochs it covered are then marked
  // delivered in the checkpoint, on this thread. A killed process loses nothing (what it wrote
  // is in the OS's cache); after a machine crash, recovery finds the epochs since the last
  // sync still pending and asks each sink whether it holds them whole.
  Status RunContinuous() {
    auto poll = std::chrono::milliseconds(std::max<int64_t>(1, options_.continuous_poll_ms));
    const auto sync_interval =
        std::chrono::milliseconds(std::max<int64_t>(1, spec_.trigger.interval_ms));
    for (auto& sink : sinks_) sink->DeferDurability(true);
    defer_durability_ = true;
    SinkSyncer syncer(sinks_);
    Clock::time_point last_sync = Clock::now();
    Status status = Ok();
    while (!stop_requested_.load()) {
      if (options_.metrics) options_.metrics->LoopBusy();
      auto ran = RunBatch();
      if (ran) status = MarkSynced(syncer);
      if (status && !undurable_batches_.empty() && Clock::now() - last_sync >= sync_interval &&
          syncer.Request(undurable_batches_.back())) {
        last_sync = Clock::now();
      }
      if (options_.metrics) options_.metrics->LoopIdle();
      if (!status) break;
      if (!ran) {
        if (ran.error().code() != ErrorCode::kCancelled) {
          IgnoreError(FinishDelivery());  // the batch before it stays committed; this one fails
          status = tl::unexpected(ran.error());
        }
        break;
      }
      if (*ran) continue;
      status = AwaitDelivery();
      if (!status) break;
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, poll, [&] { return stop_requested_.load(); });
    }
    if (status) FlushKept();
    store_->PrepareClose();  // only delivery marks follow
    Status awaited = AwaitDelivery();
    if (status) status = awaited;
    // The last epochs are made durable before the query ends, so a clean stop leaves no
    // pending output.
    if (status && !undurable_batches_.empty()) {
      syncer.WaitIdle();  // a sync under way may cover fewer epochs
      syncer.Request(undurable_batches_.back());
      syncer.WaitIdle();
      status = MarkSynced(syncer);
    }
    syncer.Stop();
    for (auto& sink : sinks_) IgnoreError(sink->Close());  // best effort on shutdown
    return status;
  }

  // At a clean stop: what the stages keep back from their batches' commits (Stage::FlushKept),
  // written once the last batch committed. Nothing a batch reads is among it, so a stop that
  // cannot write it loses only what the status page would show of the last seconds.
  void FlushKept() {
    if (finished_uncommitted_) return;  // a batch ended in memory only: it runs again
    StateWrites writes;
    for (auto& [id, task] : tasks_) task->FlushKept(NowMs(), writes);
    if (writes.puts.empty() && writes.deletes.empty()) return;
    Status written = store_->ApplyState(writes.puts, writes.deletes);
    if (!written) {
      log_->warn("pipeline {}: the latest drift evaluations were not written at the stop: {}",
                 spec_.name, written.error().message());
    }
  }

  // Syncs the sinks on a thread of its own when asked (trigger continuous).
  class SinkSyncer {
   public:
    explicit SinkSyncer(std::vector<std::unique_ptr<Sink>>& sinks)
        : sinks_(sinks), thread_([this] { Loop(); }) {}
    ~SinkSyncer() { Stop(); }

    // Asks for a sync covering epochs up to `batch_id`; false while one is under way.
    bool Request(int64_t batch_id) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (requested_ >= 0) return false;
      requested_ = batch_id;
      wake_.notify_all();
      return true;
    }
    void WaitIdle() {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait(lock, [&] { return requested_ < 0; });
    }
    // The newest epoch a finished sync covered (-1: none), and its error if it failed.
    int64_t synced_through(Status& status) {
      std::lock_guard<std::mutex> lock(mutex_);
      status = status_;
      return synced_through_;
    }
    void Stop() {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        wake_.notify_all();
      }
      if (thread_.joinable()) thread_.join();
    }

   private:
    void Loop() {
      std::unique_lock<std::mutex> lock(mutex_);
      while (true) {
        wake_.wait(lock, [&] { return stopping_ || requested_ >= 0; });
        if (requested_ < 0) return;  // stopping, nothing asked
        const int64_t batch_id = requested_;
        lock.unlock();
        Status status = Ok();
        for (auto& sink : sinks_) {
          status = sink->Sync().map_error([&](const Error& e) {
            return e.Wrap(fmt::format("syncing sink '{}'", sink->name()));
          });
          if (!status) break;
        }
        lock.lock();
        if (status) {
          synced_through_ = batch_id;
        } else {
          status_ = status;
        }
        requested_ = -1;
        idle_.notify_all();
        if (stopping_) return;
      }
    }

    std::vector<std::unique_ptr<Sink>>& sinks_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable idle_;
    int64_t requested_ = -1;
    int64_t synced_through_ = -1;
    Status status_ = Ok();
    bool stopping_ = false;
    std::thread thread_;
  };

  // Marks the epochs a finished sync covered delivered (unsynced writes; see MarkDelivered).
  Status MarkSynced(SinkSyncer& syncer) {
    Status status = Ok();
    const int64_t through = syncer.synced_through(status);
    DRIFTD_TRY(status);
    size_t done = 0;
    while (done < undurable_batches_.size() && undurable_batches_[done] <= through) {
      for (auto& sink : sinks_) {
        DRIFTD_TRY(store_->MarkDelivered(undurable_batches_[done], sink->name()));
      }
      ++done;
    }
    undurable_batches_.erase(undurable_batches_.begin(),
                             undurable_batches_.begin() + static_cast<std::ptrdiff_t>(done));
    return Ok();
  }

  void RequestBaselineReset(std::string model) {
    std::lock_guard<std::mutex> lock(mutex_);
    baseline_resets_.push_back(std::move(model));
    wake_.notify_all();
  }

  void Stop() {
    stop_requested_.store(true);
    // A sink still connecting (Start) gives up; sinks_ is fixed since Init.
    for (auto& sink : sinks_) sink->Cancel();
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }

  std::string LastProgress() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_progress_;
  }

  // Not ready while a batch cannot be delivered: the query makes no progress, whatever its
  // source says.
  bool IsReady() const {
    return started_ && source_ && source_->IsReady() && !delivery_failing_.load();
  }

 private:
  // What the sinks take of one row, asked again before each batch (a Kafka sink may learn its
  // topics' limits late). Only while no delivery runs: the sinks' limits are theirs to change.
  void RefreshLimits() {
    std::vector<RowLimit> row_limits;
    for (auto& sink : sinks_) {
      std::vector<RowLimit> limits = sink->RowLimits();
      row_limits.insert(row_limits.end(), limits.begin(), limits.end());
    }
    const bool dead_letter_sink =
        std::any_of(spec_.sinks.begin(), spec_.sinks.end(),
                    [](const SinkSpec& sink) { return sink.stream == StreamKind::kDeadLetter; });
    limits_ = OutputLimits(std::move(row_limits), dead_letter_sink);
  }

  // Delivers batches committed before a restart whose delivery did not finish.
  Status FinishOutbox() {
    auto pending = store_->PendingOutbox();
    if (!pending) return tl::unexpected(pending.error());
    for (const OutboxEntry& entry : *pending) {
      auto output = DecodeBatchOutput(entry.payload);
      if (!output) return tl::unexpected(output.error());
      for (const std::string& name : entry.pending_sinks) {
        Sink* sink = FindSink(name);
        if (!sink) {
          // The sink was removed from the pipeline: nothing can deliver it any more.
          log_->warn("batch {}: sink '{}' is no longer in the pipeline; its undelivered output "
                     "is dropped",
                     entry.batch_id, name);
          DRIFTD_TRY(store_->MarkDelivered(entry.batch_id, name));
          continue;
        }
        auto delivered = sink->IsDelivered(entry.batch_id);
        if (!delivered) return tl::unexpected(delivered.error());
        if (!*delivered) {
          log_->info("batch {}: finishing delivery to sink '{}' after restart", entry.batch_id,
                     name);
          DRIFTD_TRY(DeliverWithRetry(*sink, *output));
        }
        DRIFTD_TRY(store_->MarkDelivered(entry.batch_id, name));
      }
    }
    return Ok();
  }

  Sink* FindSink(const std::string& name) {
    for (auto& sink : sinks_) {
      if (sink->name() == name) return sink.get();
    }
    return nullptr;
  }

  Status DeliverWithRetry(Sink& sink, const BatchOutput& output) {
    std::chrono::milliseconds backoff(100);
    for (int attempt = 1;; ++attempt) {
      Status status = sink.Deliver(output);
      delivery_failing_.store(!status);
      if (status) return status;
      bool retriable = status.error().code() == ErrorCode::kExternal ||
                       status.error().code() == ErrorCode::kIo;
      if (!retriable || attempt >= options_.delivery_attempts || stop_requested_.load()) {
        return tl::unexpected(status.error().Wrap(
            fmt::format("delivering batch {} to sink '{}'", output.batch_id, sink.name())));
      }
      log_->warn("batch {}: sink '{}' failed (attempt {}/{}), retrying in {} ms: {}",
                 output.batch_id, sink.name(), attempt, options_.delivery_attempts,
                 backoff.count(), status.error().message());
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, backoff, [&] { return stop_requested_.load(); });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(10'000));
    }
  }

  // What the plan says of each clock partition: records left beyond the batch, records read.
  std::vector<PartitionActivity> Activity(const SourceOffsets& end,
                                          const std::vector<PartitionLag>& lag) const {
    std::map<std::string, int64_t> latest;
    for (const PartitionLag& partition : lag) latest[partition.partition] = partition.latest;
    // By clock partition: a Kafka partition is one, an input that is one stream (files read
    // one after the other) is one whatever its offsets keys.
    std::map<std::string, PartitionActivity> by_clock;
    for (const auto& [key, offset] : end) {
      auto start = position_.find(key);
      const bool read = start == position_.end() || start->second != offset;
      auto it = latest.find(key);
      const bool more = it != latest.end() && it->second > offset;
      const std::string name = source_->ClockPartitionOfKey(key);
      PartitionActivity& partition = by_clock[name];
      partition.name = name;
      partition.more_available = partition.more_available || more;
      partition.read_in_batch = partition.read_in_batch || read;
    }
    std::vector<PartitionActivity> activity;
    for (auto& [name, partition] : by_clock) activity.push_back(std::move(partition));
    return activity;
  }

  // What the tasks this process runs add up to.
  struct TaskTotals {
    bool gated = false;  // the query has a cap on models (a string model column)
    int64_t models = 0;
    bool drift = false;
    bool ordered = false;  // drift takes its values in event-time order
    int64_t order_buffered = 0;
    int64_t models_across_partitions = 0;
    /// The lowest watermark and the largest event time over the tasks' clocks.
    int64_t watermark_us = INT64_MIN;
    int64_t next_watermark_us = INT64_MIN;
    int64_t max_event_us = INT64_MIN;
    std::map<std::string, int64_t> max_event_by_partition;
  };
  TaskTotals Totals() const {
    TaskTotals totals;
    int64_t watermark = INT64_MAX;
    int64_t next = INT64_MAX;
    for (const auto& [id, task] : tasks_) {
      totals.gated = totals.gated || task->max_models() > 0;
      totals.models += task->models();
      if (task->drift()) {
        totals.drift = true;
        totals.models_across_partitions += task->drift()->ModelsAcrossPartitions();
      }
      if (task->order_buffered() >= 0) {
        totals.ordered = true;
        totals.order_buffered += task->order_buffered();
      }
      const EventClock& clock = task->clock();
      watermark = std::min(watermark, clock.watermark_us());
      next = std::min(next, clock.NextWatermark());
      totals.max_event_us = std::max(totals.max_event_us, clock.MaxEventTime());
      for (const auto& [name, max_us] : clock.MaxEventTimes()) {
        auto [it, fresh] = totals.max_event_by_partition.emplace(name, max_us);
        if (!fresh) it->second = std::max(it->second, max_us);
      }
    }
    if (!tasks_.empty()) {
      totals.watermark_us = watermark;
      totals.next_watermark_us = next;
    }
    return totals;
  }

  // Every task's models' drift state, for the metrics.
  std::vector<DriftMonitor::ModelStats> DriftModelStats() const {
    std::vector<DriftMonitor::ModelStats> stats;
    for (const auto& [id, task] : tasks_) {
      if (!task->drift()) continue;
      std::vector<DriftMonitor::ModelStats> own = task->drift()->ModelStats();
      std::move(own.begin(), own.end(), std::back_inserter(stats));
    }
    return stats;
  }

  bool HasClosableWindows() const {
    for (const auto& [id, task] : tasks_) {
      if (task->HasClosableWindows()) return true;
    }
    return false;
  }

  // Runs one batch, the same in every mode: the placement (engine/executor/placement.h) says
  // which tasks run here and carries rows to them. Returns false when there was nothing to do.
  Result<bool> RunBatch() {
    Clock::time_point batch_start = Clock::now();
    ProgressRecord progress;
    progress.batch_id = next_batch_id_;
    progress.timestamp_ms = NowMs();
    progress.id = checkpoint_id_;
    progress.run_id = run_id_;

    Placement::Report placed;
    auto owns = placement_->Assign(tasks_, position_, placed);
    if (!owns) return tl::unexpected(owns.error());
    last_plan_blind_ = false;
    if (!*owns) {
      // Nothing owned (yet, or any more: the group moved its partitions away).
      if (options_.metrics) options_.metrics->RecordLag({});
      return false;
    }
    auto planned = source_->PlanBatch(position_);
    if (!planned) return tl::unexpected(planned.error());
    last_plan_blind_ = source_->PlannedBlind();
    const SourceOffsets end = std::move(*planned);
    progress.latest_offset_ms = MillisSince(batch_start);
    std::vector<PartitionLag> lag = source_->Lag(end);
    const std::vector<PartitionActivity> activity = Activity(end, lag);
    const bool backlog = std::any_of(activity.begin(), activity.end(),
                                     [](const PartitionActivity& p) { return p.more_available; });
    const bool clock_moved = placement_->BeginBatch(activity, SteadyMs(), tasks_);
    const bool has_data = end != position_;
    // A batch without input is due when the watermark closes a window: the one in force (the
    // aggregation emits by it) or the one idle partitions let it move to.
    const bool closable = HasClosableWindows();
    std::vector<std::string> resets;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      resets.swap(baseline_resets_);
    }
    if (!has_data && !closable && resets.empty() && !clock_moved) {
      if (options_.metrics) options_.metrics->RecordLag(lag);
      return false;
    }
    for (const std::string& model : resets) {
      bool reset = false;
      for (auto& [id, task] : tasks_) reset = task->ResetBaselines(model) || reset;
      if (reset) {
        log_->info("pipeline {}: model {} warms up a new baseline from batch {}", spec_.name,
                   model, next_batch_id_);
      }
    }

    BatchOutput output;
    output.batch_id = next_batch_id_;
    output.source_end = end;
    int64_t input_rows = 0;
    const int64_t malformed_before = MalformedTotal();
    Clock::time_point read_start = Clock::now();
    if (has_data) DRIFTD_TRY(ReadBatch(end, output, progress, input_rows));
    progress.add_batch_ms = MillisSince(read_start);

    // Every task ends its batch: its rows, its state changes under its scope.
    finished_uncommitted_ = true;
    StateWrites writes;
    StageProgress stages;
    for (auto& [id, task] : tasks_) {
      BatchContext context;
      context.batch_id = next_batch_id_;
      context.now_ms = NowMs();
      context.watermark_us = task->clock().watermark_us();
      context.next_watermark_us = task->clock().NextWatermark();
      context.more_available = backlog;
      const size_t puts_from = writes.puts.size();
      const size_t deletes_from = writes.deletes.size();
      task->Finish(context, output, writes, stages);
      placement_->TaskFinished(*task, writes, puts_from, deletes_from, output);
    }
    placement_->EndBatch(output);
    const TaskTotals before_commit = Totals();
    AddStageProgress(stages, before_commit, progress);

    // Commit: state, offsets, watermark, commit record and outbox in one write (scaled out, the
    // Kafka transaction comes first: PrepareCommit).
    Clock::time_point commit_start = Clock::now();
    // The previous batch's delivery ends (and is marked) before this one commits: one batch at
    // a time in the outbox, as on one thread.
    DRIFTD_TRY(FinishDelivery());
    RefreshLimits();
    progress.rows_over_sink_limit = limits_.SetAsideOversized(output);
    BatchWrite write;
    write.commit.batch_id = next_batch_id_;
    write.commit.start = position_;
    write.commit.end = end;
    write.commit.watermark_us = before_commit.next_watermark_us;
    write.commit.max_event_us = before_commit.max_event_by_partition;
    write.commit.committed_at_ms = NowMs();
    write.state_puts = std::move(writes.puts);
    write.state_deletes = std::move(writes.deletes);
    auto prepared = placement_->PrepareCommit(write, output);
    if (!prepared) return tl::unexpected(prepared.error());
    if (!*prepared) return false;  // computed again from what was committed
    progress.state_keys_written = static_cast<int64_t>(write.state_puts.size());
    progress.state_keys_deleted = static_cast<int64_t>(write.state_deletes.size());
    for (const auto& [key, value] : write.state_puts) {
      progress.state_bytes_written += static_cast<int64_t>(key.size() + value.size());
    }
    DRIFTD_TRY(store_->Commit(std::move(write)));
    finished_uncommitted_ = false;
    source_->OnCheckpointed(end);
    progress.wal_commit_ms = MillisSince(commit_start);
    for (auto& [id, task] : tasks_) task->Committed();
    placement_->Committed();

    // Progress, then delivery: on this thread, or (threads > 1) on a thread of its own while
    // the next batch is read, decoded and folded.
    const TaskTotals after_commit = Totals();
    progress.start_offsets = position_;
    progress.end_offsets = end;
    progress.malformed_in_batch = MalformedTotal() - malformed_before;
    progress.watermark_us = after_commit.watermark_us;
    progress.max_event_time_us = after_commit.max_event_us;
    progress.lag = std::move(lag);
    progress.scale_out_tasks = placed.tasks;
    progress.restored_tasks = placed.restored_tasks;
    progress.restore_ms = placed.restore_ms;
    progress.aborted_batches = placed.aborted;
    auto delivery = std::make_unique<Delivery>();
    delivery->batch_id = next_batch_id_;
    delivery->end = end;
    delivery->input_rows = input_rows;
    for (const SinkSpec& spec : spec_.sinks) {
      delivery->output_rows +=
          static_cast<int64_t>(output.For(spec.stream, spec.output_mode).rows.size());
    }
    delivery->batch_start = batch_start;
    delivery->drift = DriftReport(!output.alerts.empty());
    delivery->output = std::move(output);
    delivery->progress = std::move(progress);
    position_ = end;
    ++next_batch_id_;
    if (threads_ > 1) {
      Delivery* pending = delivery.get();
      delivery->thread = std::thread([this, pending] { Deliver(*pending); });
      delivery_ = std::move(delivery);
      return true;
    }
    Deliver(*delivery);
    delivery_ = std::move(delivery);
    DRIFTD_TRY(FinishDelivery());
    return true;
  }

  // The stages' counters, and what the tasks add up to, in the progress record: one place for
  // every mode.
  void AddStageProgress(const StageProgress& stages, const TaskTotals& totals,
                        ProgressRecord& progress) const {
    progress.models = stages.models;
    progress.max_models = totals.gated ? spec_.query.max_models : 0;
    progress.rows_over_model_cap = stages.rows_over_model_cap;
    progress.join = stages.join;
    progress.labels = spec_.labels.enabled;
    progress.rows_updated = stages.rows_updated;
    progress.dropped_by_watermark = stages.dropped_by_watermark;
    progress.without_event_time = stages.without_event_time;
    progress.num_groups = stages.num_groups;
    progress.num_open_windows = stages.num_open_windows;
    progress.drift_dirty_series = stages.drift_dirty_series;
    progress.drift_dirty_bytes = stages.drift_dirty_bytes;
    progress.drift_put_bytes = stages.drift_put_bytes;
    progress.state_dirty_bytes = stages.state_dirty_bytes;
    progress.drift_values_over_key_cap = stages.drift_values_over_key_cap;
    progress.drift_rows_over_segment_cap = stages.drift_rows_over_segment_cap;
    progress.order_buffered = totals.ordered ? totals.order_buffered : -1;
    progress.models_across_partitions = totals.models_across_partitions;
  }

  // Reads [position_, end): the source's own partitions chunk after chunk (on the pipeline's
  // threads when their rows go straight into one task), then the tasks' own inputs.
  Status ReadBatch(const SourceOffsets& end, BatchOutput& output, ProgressRecord& progress,
                   int64_t& input_rows) {
    SourceOffsets source_from = position_;
    SourceOffsets source_to = end;
    SourceOffsets tasks_from;
    SourceOffsets tasks_to;
    const bool task_inputs = std::any_of(end.begin(), end.end(), [&](const auto& entry) {
      return placement_->IsTaskInput(entry.first);
    });
    if (task_inputs) {
      source_from.clear();
      source_to.clear();
      for (const auto& [key, offset] : end) {
        const bool task_input = placement_->IsTaskInput(key);
        auto at = position_.find(key);
        (task_input ? tasks_from : source_from)[key] = at == position_.end() ? 0 : at->second;
        (task_input ? tasks_to : source_to)[key] = offset;
      }
    }
    if (source_from != source_to) {
      auto reader = source_->Read(source_from, source_to);
      if (!reader) return tl::unexpected(reader.error());
      QueryTask* direct = placement_->DirectTask(tasks_);
      if (pipeline_ && direct != nullptr) {
        DRIFTD_TRY(ReadInParallel(**reader, *direct, output, progress, input_rows));
      } else {
        DRIFTD_TRY(ReadChunks(**reader, [&]() -> Status {
          input_rows += static_cast<int64_t>(chunk_.size());
          CountInputRows(chunk_, progress);
          return IngestChunk(output, progress);
        }));
      }
      progress.lost_records += (*reader)->lost_records();
    }
    if (tasks_from != tasks_to) {
      auto reader = source_->Read(tasks_from, tasks_to);
      if (!reader) return tl::unexpected(reader.error());
      DRIFTD_TRY(ReadChunks(**reader, [&]() -> Status {
        return placement_->TakeTaskInput(chunk_, tasks_, output);
      }));
      progress.lost_records += (*reader)->lost_records();
    }
    return Ok();
  }

  // Reads every chunk of `reader` into chunk_, calling `take` for each.
  Status ReadChunks(SourceReader& reader, const std::function<Status()>& take) {
    bool more = true;
    while (more) {
      if (stop_requested_.load()) {
        return MakeError(ErrorCode::kCancelled, "stopped during batch {}", next_batch_id_);
      }
      chunk_.Clear();
      auto next = reader.Next(chunk_, options_.chunk_bytes);
      if (!next) return tl::unexpected(next.error());
      if (options_.metrics) options_.metrics->LoopProgress();
      more = *next;
      chunk_.Seal();
      DRIFTD_TRY(take());
    }
    return Ok();
  }

  // How a record's position reads in an error, and which Kafka partition a position's index
  // names, from any thread of the batch (the source only under source_mutex_).
  std::string Describe(const RecordPosition& position) {
    std::lock_guard<std::mutex> lock(source_mutex_);
    return source_->DescribePosition(position);
  }
  std::optional<TopicPartition> TopicPartitionOfIndex(uint32_t index) {
    std::lock_guard<std::mutex> lock(source_mutex_);
    return source_->TopicPartitionOf(index);
  }

  // The one place where records become rows, in every mode and on every thread: decodes a
  // chunk of input `input` into `records` (its dead letters into `dead_letters`), then, for
  // the query's own inputs, fills the metadata columns and applies the derived columns and the
  // filter. Returns the rows the filter removed.
  Result<int64_t> DecodeChunk(const ThreadContext& context, const InputChunk& chunk, size_t input,
                              RecordBatch& records, std::vector<DeadLetter>& dead_letters) {
    records.Reset(SchemaOf(input));
    dead_letters.clear();
    DRIFTD_TRY(context.decoders[input]->Decode(
        chunk, records, &dead_letters,
        [this](const RecordPosition& position) { return Describe(position); }));
    // Labels: their own schema and clock column, for the stage that joins them.
    if (input == labels_input_) return int64_t{0};
    context.metadata->Fill(
        chunk, [this](uint32_t index) { return TopicPartitionOfIndex(index); }, records);
    return context.projection->Apply(records);
  }

  // Stamps rows with their event time and the watermark they are judged by, with the clock
  // that reads them. Filtered rows left before: they neither advance nor are judged by it.
  void Stamp(const RecordBatch& records, bool labels, RowTimes& times) {
    placement_->ReadClock(tasks_).Stamp(
        records, labels ? labels_time_column_ : clock_column_,
        [this](uint32_t index) {
          std::lock_guard<std::mutex> lock(source_mutex_);
          return source_->ClockPartitionOf(index);
        },
        times);
  }

  // A chunk of the source's own partitions on this thread: decoded, its dead letters set
  // aside, stamped, and handed to the placement for its tasks.
  Status IngestChunk(BatchOutput& output, ProgressRecord& progress) {
    const size_t input = InputOfChunk(chunk_);
    const bool labels = input == labels_input_;
    auto filtered = DecodeChunk(contexts_[0], chunk_, input, records_, dead_letters_);
    if (!filtered) return tl::unexpected(filtered.error());
    limits_.AddDeadLetters(
        dead_letters_, [this](const RecordPosition& position) { return Describe(position); },
        output.dead_letters);
    progress.filtered_rows += *filtered;
    Stamp(records_, labels, times_);
    return placement_->Route(records_, times_, labels, tasks_, output);
  }

  // What the metrics need of drift after a batch, taken when it ends (its delivery may be
  // reported after the next batch's values were observed).
  struct DriftSnapshot {
    bool taken = false;
    std::vector<AlertEvent> events;
    std::vector<PackedEvaluation> evaluations;
    std::optional<std::vector<DriftMonitor::ModelStats>> models;
  };
  DriftSnapshot DriftReport(bool alerts) const {
    DriftSnapshot snapshot;
    if (!options_.metrics) return snapshot;
    bool drift = false;
    for (const auto& [id, task] : tasks_) {
      if (const DriftStage* stage = task->drift()) {
        drift = true;
        snapshot.taken = true;
        const auto& events = stage->LastEvents();
        const auto& evaluations = stage->LastEvaluations();
        snapshot.events.insert(snapshot.events.end(), events.begin(), events.end());
        snapshot.evaluations.insert(snapshot.evaluations.end(), evaluations.begin(),
                                    evaluations.end());
      }
      if (const PerformanceStage* stage = task->performance()) {
        snapshot.taken = true;
        const auto& events = stage->last_events();
        snapshot.events.insert(snapshot.events.end(), events.begin(), events.end());
        for (const SharedEvaluation& evaluation : stage->last_evaluations()) {
          snapshot.evaluations.push_back(PackedEvaluation(*evaluation));
        }
      }
    }
    // Levels change only with an alert event; value counts are refreshed with the report.
    if (drift && (alerts || WouldReport())) snapshot.models = DriftModelStats();
    return snapshot;
  }

  // A committed batch on its way to the sinks.
  struct Delivery {
    int64_t batch_id = 0;
    SourceOffsets end;
    BatchOutput output;
    ProgressRecord progress;
    DriftSnapshot drift;
    int64_t input_rows = 0;
    int64_t output_rows = 0;
    Clock::time_point batch_start;
    Clock::time_point delivered_at;
    Status status;
    std::thread thread;  // when delivering on a thread of its own

    ~Delivery() {
      if (thread.joinable()) thread.join();
    }
  };

  // Delivers to every sink and marks each delivered. The only use of the sinks and the store
  // while it runs (FinishDelivery comes first in every path that uses them). When the commit
  // delivered the batch already (scaled out, the Kafka transaction), the other sinks get it
  // once, at best, and nothing is marked: there is no outbox.
  void Deliver(Delivery& delivery) {
    const Clock::time_point start = Clock::now();
    const Sink* committed = placement_->committed_through();
    for (auto& sink : sinks_) {
      if (committed != nullptr) {
        if (sink.get() == committed) continue;
        Status best_effort = sink->Deliver(delivery.output);
        if (!best_effort) {
          log_->warn("batch {}: sink '{}': {}", delivery.batch_id, sink->name(),
                     best_effort.error().message());
        }
        continue;
      }
      delivery.status = DeliverWithRetry(*sink, delivery.output);
      if (!delivery.status) return;
      if (defer_durability_) continue;  // marked once synced (RunContinuous)
      delivery.status = store_->MarkDelivered(delivery.batch_id, sink->name());
      if (!delivery.status) return;
    }
    delivery.delivered_at = Clock::now();
    delivery.progress.delivery_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(delivery.delivered_at - start)
            .count();
  }

  // FinishDelivery outside RunBatch: a delivery that hangs is a batch that hangs (liveness).
  Status AwaitDelivery() {
    if (!delivery_) return Ok();
    if (options_.metrics) options_.metrics->LoopBusy();
    Status status = FinishDelivery();
    if (options_.metrics) options_.metrics->LoopIdle();
    return status;
  }

  // Waits for the batch being delivered, if any, and reports it: the source learns of the
  // commit, counters, metrics and the progress record follow.
  Status FinishDelivery() {
    if (!delivery_) return Ok();
    std::unique_ptr<Delivery> delivery = std::move(delivery_);
    if (delivery->thread.joinable()) delivery->thread.join();
    DRIFTD_TRY(delivery->status);
    if (defer_durability_ && placement_->committed_through() == nullptr) {
      undurable_batches_.push_back(delivery->batch_id);
    }
    Status committed = source_->OnCommitted(delivery->end);
    if (!committed) {
      log_->warn("batch {}: source could not record the commit: {}", delivery->batch_id,
                 committed.error().message());
    }
    ReportBatch(delivery->progress, delivery->output, delivery->input_rows,
                delivery->output_rows, delivery->batch_start, delivery->delivered_at,
                delivery->drift);
    return Ok();
  }

  // The chunks of a batch on the pipeline's threads (engine/executor/chunk_pipeline.h): the
  // steps of IngestChunk, each lane of `task` fed the same rows in the same order. Threads
  // other than this one reach the source only under source_mutex_, which this thread holds
  // while it reads.
  Status ReadInParallel(SourceReader& reader, QueryTask& task, BatchOutput& output,
                        ProgressRecord& progress, int64_t& input_rows) {
    const DescribePosition describe = [this](const RecordPosition& position) {
      return Describe(position);
    };
    ChunkPipeline::Steps steps;
    steps.read = [&](InputChunk& input) -> Result<bool> {
      if (stop_requested_.load()) {
        return MakeError(ErrorCode::kCancelled, "stopped during batch {}", next_batch_id_);
      }
      Result<bool> more = false;
      {
        std::lock_guard<std::mutex> lock(source_mutex_);
        more = reader.Next(input, options_.chunk_bytes);
      }
      if (!more) return more;
      if (options_.metrics) options_.metrics->LoopProgress();
      input.Seal();
      input_rows += static_cast<int64_t>(input.size());
      CountInputRows(input, progress);
      return more;
    };
    steps.decode = [&](size_t thread, ChunkPipeline::Chunk& chunk) -> Status {
      {
        // The inputs learn of partitions as the reader (under the mutex) comes to them.
        std::lock_guard<std::mutex> lock(source_mutex_);
        chunk.input_index = InputOfChunk(chunk.input);
      }
      auto filtered = DecodeChunk(contexts_[thread], chunk.input, chunk.input_index,
                                  chunk.records, chunk.dead_letters);
      if (!filtered) return tl::unexpected(filtered.error());
      chunk.filtered_rows = *filtered;
      chunk.lane_rows.resize(task.lane_count());
      if (chunk.input_index == labels_input_) {
        for (auto& rows : chunk.lane_rows) rows.clear();
        return Ok();
      }
      task.RouteToLanes(chunk.records, chunk.lane_rows);
      return Ok();
    };
    steps.sequence = [&](ChunkPipeline::Chunk& chunk) {
      const bool labels = chunk.input_index == labels_input_;
      limits_.AddDeadLetters(chunk.dead_letters, describe, output.dead_letters);
      progress.filtered_rows += chunk.filtered_rows;
      Stamp(chunk.records, labels, chunk.times);
      chunk.stamped_watermark_us = placement_->ReadClock(tasks_).StampedWatermark();
      // Models are admitted in input order, here where the chunks come in order; the rare
      // chunk whose rows the gate dropped or renamed is routed again.
      if (!labels && task.Admit(chunk.records, chunk.times)) {
        task.RouteToLanes(chunk.records, chunk.lane_rows);
      }
    };
    steps.fold = [&](size_t lane, const ChunkPipeline::Chunk& chunk) {
      task.FoldLane(lane, chunk.records, chunk.times, chunk.lane_rows[lane],
                    chunk.input_index == labels_input_, output, chunk.stamped_watermark_us);
    };
    return pipeline_->Run(steps);
  }

  // Rows read by input, for the progress record's sources.
  void CountInputRows(const InputChunk& chunk, ProgressRecord& progress) const {
    if (inputs_->size() == 1) return;
    progress.input_rows_by_input.resize(inputs_->size(), 0);
    progress.input_rows_by_input[InputOfChunk(chunk)] += static_cast<int64_t>(chunk.size());
  }

  // Malformed records counted by every thread's decoder.
  MalformedCounts Malformed() const {
    MalformedCounts counts;
    for (const auto& decoder : decoders_) counts.Add(decoder->counts());
    for (const ThreadParts& parts : thread_parts_) {
      for (const auto& decoder : parts.decoders) counts.Add(decoder->counts());
    }
    return counts;
  }
  int64_t MalformedTotal() const { return Malformed().total(); }

  // Continuous epochs can run hundreds of times a second: a progress record once per interval.
  bool WouldReport() const {
    return spec_.trigger.kind != TriggerKind::kContinuous || last_report_ == Clock::time_point{} ||
           Clock::now() - last_report_ >= std::chrono::milliseconds(spec_.trigger.interval_ms);
  }

  // Counters, metrics and the progress record of a batch that committed and was delivered at
  // `end`.
  void ReportBatch(ProgressRecord& progress, const BatchOutput& output, int64_t input_rows,
                   int64_t output_rows, Clock::time_point batch_start, Clock::time_point end,
                   const DriftSnapshot& drift) {
    auto seconds = [&](Clock::time_point from) {
      return std::chrono::duration<double>(end - from).count();
    };
    progress.num_input_rows = input_rows;
    progress.num_output_rows = output_rows;
    progress.num_alerts = static_cast<int64_t>(output.alerts.rows.size());
    progress.malformed = Malformed();
    progress.trigger_execution_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - batch_start).count();
    progress.processed_rows_per_second = input_rows / std::max(seconds(batch_start), 1e-6);
    double since_last = last_batch_end_ == Clock::time_point{} ? seconds(batch_start)
                                                               : seconds(last_batch_end_);
    progress.input_rows_per_second = input_rows / std::max(since_last, 1e-6);
    progress.state = store_->Stats();
    progress.source_description = source_->Describe();
    progress.sources = source_->Summaries();
    last_batch_end_ = end;

    counters_.batches.fetch_add(1);
    counters_.input_rows.fetch_add(input_rows);
    counters_.output_rows.fetch_add(output_rows);
    counters_.malformed_rows.fetch_add(progress.malformed_in_batch);
    counters_.filtered_rows.fetch_add(progress.filtered_rows);
    counters_.dropped_by_watermark.fetch_add(progress.dropped_by_watermark);
    counters_.without_event_time.fetch_add(progress.without_event_time);
    counters_.alerts.fetch_add(progress.num_alerts);
    counters_.rows_over_sink_limit.fetch_add(progress.rows_over_sink_limit);
    counters_.rows_over_model_cap.fetch_add(progress.rows_over_model_cap);
    counters_.last_batch_id.store(progress.batch_id);

    // Continuous epochs can run hundreds of times a second: report once per interval.
    const bool report = WouldReport();
    if (report && spec_.trigger.kind == TriggerKind::kContinuous) last_report_ = Clock::now();
    if (options_.metrics) {
      options_.metrics->RecordBatch(progress);
      if (drift.taken) options_.metrics->RecordDrift(drift.events, drift.evaluations, NowMs());
      if (drift.models) options_.metrics->RecordDriftModels(*drift.models);
    }
    std::string json = RenderProgress(spec_, progress);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_progress_ = json;
    }
    if (report && options_.on_progress) options_.on_progress(json);
  }

  PipelineSpec spec_;
  ExecutorOptions options_;
  QueryIo io_;
  QueryCounters& counters_;
  /// The decoder of each input (engine/executor/inputs.h), for this thread.
  std::vector<std::unique_ptr<ValueDecoder>> decoders_;
  /// The query's event-time column (-1: none); the labels input has its own.
  int clock_column_ = -1;
  std::shared_ptr<spdlog::logger> log_;
  /// The query's inputs as one source (QueryInputs).
  std::unique_ptr<Source> source_;
  QueryInputs* inputs_ = nullptr;
  /// The labels input's index among the inputs (SIZE_MAX: none), and its event-time column.
  size_t labels_input_ = SIZE_MAX;
  int labels_time_column_ = -1;
  std::vector<std::unique_ptr<Sink>> sinks_;
  std::unique_ptr<CheckpointStore> store_;
  /// CheckpointMetadata::checkpoint_id, handed to the sinks before they open.
  std::string checkpoint_id_;
  /// A new random id per start (Spark's runId).
  std::string run_id_;
  /// query.where and the derived columns, applied to each decoded chunk before the stages.
  std::unique_ptr<Projection> projection_;
  /// The Kafka metadata columns the query reads, filled beside the decoded ones.
  MetadataFiller metadata_;
  /// What the sinks take of one row (after they opened).
  OutputLimits limits_;
  /// Where the query's tasks run and how rows reach them (engine/executor/placement.h): one
  /// process, or scaled out. Set by Start.
  std::unique_ptr<Placement> placement_;
  /// The tasks this process runs (the placement's assignment), by id.
  TaskMap tasks_;

  /// The batch's threads (the pipeline's `threads`, or the cores available); 1: the loop in
  /// RunBatch on this thread alone.
  int threads_ = 1;
  /// What each thread decodes with: index 0 the executor's own, then thread_parts_.
  std::vector<ThreadContext> contexts_;
  std::vector<ThreadParts> thread_parts_;
  std::unique_ptr<ChunkPipeline> pipeline_;  // threads_ > 1 and rows into one task
  std::mutex source_mutex_;

  // The last batch's plan could not see the source (Source::PlannedBlind).
  bool last_plan_blind_ = false;
  InputChunk chunk_;
  RecordBatch records_;
  RowTimes times_;
  std::vector<DeadLetter> dead_letters_;
  SourceOffsets position_;
  int64_t next_batch_id_ = 0;
  Clock::time_point last_batch_end_{};
  /// A batch's stages ended (Finish) and its commit has not been made: in memory, the tasks
  /// hold what the checkpoint does not.
  bool finished_uncommitted_ = false;
  Clock::time_point last_report_{};
  /// Trigger continuous: sinks deliver without syncing; these epochs wait for SyncSinks to be
  /// marked delivered.
  bool defer_durability_ = false;
  std::vector<int64_t> undurable_batches_;

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> started_{false};
  /// The last delivery attempt failed (DeliverWithRetry), until one succeeds.
  std::atomic<bool> delivery_failing_{false};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::string last_progress_;
  std::vector<std::string> baseline_resets_;  // guarded by mutex_
  /// The last committed batch while it is delivered (threads > 1: on a thread of its own).
  /// Last, so that it is joined before the sinks and the store go.
  std::unique_ptr<Delivery> delivery_;
};

Result<std::unique_ptr<QueryExecutor>> QueryExecutor::Create(const PipelineSpec& spec,
                                                             ExecutorOptions options,
                                                             QueryIo io) {
  std::unique_ptr<QueryExecutor> executor(new QueryExecutor(nullptr));
  executor->impl_ =
      std::make_unique<Impl>(spec, std::move(options), std::move(io), executor->counters_);
  DRIFTD_TRY(executor->impl_->Init());
  return executor;
}

QueryExecutor::QueryExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
QueryExecutor::~QueryExecutor() = default;

Status QueryExecutor::Start() { return impl_->Start(); }
Status QueryExecutor::Run() { return impl_->Run(); }
void QueryExecutor::Stop() { impl_->Stop(); }
void QueryExecutor::RequestBaselineReset(std::string model) {
  impl_->RequestBaselineReset(std::move(model));
}
std::string QueryExecutor::LastProgress() const { return impl_->LastProgress(); }
bool QueryExecutor::IsReady() const { return impl_->IsReady(); }

}  // namespace driftd
