#include "engine/executor/executor.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <span>
#include <thread>

#include <sched.h>
#include <simdjson.h>

#include "engine/executor/chunk_pipeline.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/event_clock.h"
#include "engine/expr/projection.h"
#include "engine/executor/metrics_query.h"
#include "engine/executor/outbox_codec.h"
#include "engine/executor/progress.h"
#include "engine/executor/scale_out.h"
#include "engine/executor/stage.h"
#include "engine/json_decoder.h"
#include "engine/json_writer.h"
#include "engine/log.h"

namespace driftd {

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The steady clock in milliseconds (idleness of partitions).
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             Clock::now().time_since_epoch())
      .count();
}

int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// 128 random bits in hex: a checkpoint's identity, unique without coordination.
std::string NewCheckpointId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", static_cast<uint32_t>(random()));
  return id;
}

// Top-level keys whose values differ between two fingerprint objects.
std::vector<std::string> FingerprintDifferences(std::string_view stored, std::string_view current) {
  simdjson::dom::parser parser_a;
  simdjson::dom::parser parser_b;
  simdjson::dom::object a;
  simdjson::dom::object b;
  std::vector<std::string> changed;
  if (parser_a.parse(stored.data(), stored.size()).get(a) != simdjson::SUCCESS ||
      parser_b.parse(current.data(), current.size()).get(b) != simdjson::SUCCESS) {
    changed.push_back("(fingerprint unreadable)");
    return changed;
  }
  for (auto field : a) {
    simdjson::dom::element other;
    if (b.at_key(field.key).get(other) != simdjson::SUCCESS) {
      changed.emplace_back(field.key);
      continue;
    }
    if (simdjson::minify(field.value) != simdjson::minify(other)) changed.emplace_back(field.key);
  }
  for (auto field : b) {
    simdjson::dom::element other;
    if (a.at_key(field.key).get(other) != simdjson::SUCCESS) changed.emplace_back(field.key);
  }
  return changed;
}

// The scope of a query's state when one process runs all of it (one task).
constexpr uint32_t kQueryScope = 0;

// Checkpoint format 1 kept each stage's keys unscoped, told apart by their first bytes.
std::string_view LegacyNamespaceOf(std::string_view key) {
  if (key.starts_with("drift")) return "drift";
  if (!key.empty() && key[0] == 'a') return "agg";
  return "";
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
  return options;
}

}  // namespace

class QueryExecutor::Impl {
 public:
  Impl(const PipelineSpec& spec, ExecutorOptions options, QueryIo io, QueryCounters& counters)
      : spec_(spec),
        options_(std::move(options)),
        io_(std::move(io)),
        counters_(counters),
        clock_(ClockOptions(spec)),
        log_(GetLogger("engine")),
        metadata_(spec.query.metadata) {}

  Status Init() {
    // A scaled-out process runs its tasks on one thread.
    threads_ = spec_.scale_out.enabled ? 1 : (spec_.threads > 0 ? spec_.threads : AvailableCores());
    auto decoder = CreateDecoder();
    if (!decoder) return tl::unexpected(decoder.error());
    decoder_ = std::move(*decoder);
    auto source = io_.create_source(spec_);
    if (!source) return tl::unexpected(source.error());
    source_ = std::move(*source);
    auto sinks = io_.create_sinks(spec_, *source_);
    if (!sinks) return tl::unexpected(sinks.error());
    sinks_ = std::move(*sinks);
    auto projection = Projection::Create(spec_);
    if (!projection) return tl::unexpected(projection.error());
    projection_ = std::move(*projection);
    auto stages = CreateStages(spec_, static_cast<uint32_t>(threads_));
    if (!stages) return tl::unexpected(stages.error());
    stages_ = std::move(*stages);
    for (auto& stage : stages_) {
      if (auto* drift = dynamic_cast<DriftStage*>(stage.get())) drift_ = drift;
    }
    if (threads_ > 1) DRIFTD_TRY(InitThreads());
    return Ok();
  }

  // A decoder of the source's value format that converts only the columns the pipeline reads.
  Result<std::unique_ptr<ValueDecoder>> CreateDecoder() {
    auto used = ColumnsUsed(spec_);
    if (!used) return tl::unexpected(used.error());
    Result<std::unique_ptr<ValueDecoder>> decoder =
        io_.create_decoder ? io_.create_decoder(spec_)
                           : std::unique_ptr<ValueDecoder>(std::make_unique<JsonDecoder>(
                                 spec_.schema, spec_.source.malformed));
    if (decoder) (*decoder)->Project(*used);
    return decoder;
  }

  // threads > 1: a decoder, projection and metadata filler per thread (the executor's own for
  // thread 0), a lane per stage shard, and the pipeline's workers.
  Status InitThreads() {
    contexts_.push_back({decoder_.get(), projection_.get(), &metadata_});
    for (int thread = 1; thread < threads_; ++thread) {
      auto decoder = CreateDecoder();
      if (!decoder) return tl::unexpected(decoder.error());
      auto projection = Projection::Create(spec_);
      if (!projection) return tl::unexpected(projection.error());
      auto& owned = thread_parts_.emplace_back();
      owned.decoder = std::move(*decoder);
      owned.projection = std::move(*projection);
      owned.metadata = std::make_unique<MetadataFiller>(spec_.query.metadata);
      contexts_.push_back(
          {owned.decoder.get(), owned.projection.get(), owned.metadata.get()});
    }
    for (auto& stage : stages_) {
      const uint32_t shards = stage->shard_count();
      for (uint32_t shard = 0; shard < shards; ++shard) {
        lanes_.push_back({stage.get(), shard, shards > 1});
      }
    }
    // Two chunks in flight per thread keep every thread busy while the slowest lane catches
    // up, at 2 x chunk_bytes of input (and its decoded rows) per thread.
    pipeline_ = std::make_unique<ChunkPipeline>(static_cast<size_t>(threads_), lanes_.size(),
                                                2 * static_cast<size_t>(threads_));
    return Ok();
  }

  Status Start() {
    CheckpointOptions checkpoint_options;
    checkpoint_options.sync = options_.sync_commits;
    auto store = io_.open_checkpoint(spec_.checkpoint_location, checkpoint_options);
    if (!store) return tl::unexpected(store.error().Wrap("opening the checkpoint"));
    store_ = std::move(*store);
    DRIFTD_TRY(CheckMetadata());

    auto last = store_->LastCommit();
    if (!last) return tl::unexpected(last.error());
    Clock::time_point restore_start = Clock::now();
    int64_t restored = 0;
    // Scaled out, each task restores its own state once the group assigns it.
    if (!spec_.scale_out.enabled) DRIFTD_TRY(RestoreStages(restored));
    if (options_.metrics && drift_) {
      options_.metrics->RecordDriftModels(drift_->ModelStats());
      options_.metrics->RecordRestoredEvaluations(drift_->LatestEvaluations());
    }
    run_id_ = NewCheckpointId();

    SourceOffsets committed;
    if (*last) {
      next_batch_id_ = (*last)->batch_id + 1;
      committed = (*last)->end;
      clock_.Restore((*last)->max_event_us, (*last)->watermark_us);
      log_->info("pipeline {}: resuming after batch {} ({} state entries restored in {} ms)",
                 spec_.name, (*last)->batch_id, restored, MillisSince(restore_start));
    } else {
      log_->info("pipeline {}: starting with an empty checkpoint at {}", spec_.name,
                 spec_.checkpoint_location);
    }
    if (threads_ > 1) {
      log_->info("pipeline {}: batches run on {} threads ({} lanes)", spec_.name, threads_,
                 lanes_.size());
    }

    for (auto& sink : sinks_) {
      sink->SetCheckpointId(checkpoint_id_, *last ? (*last)->batch_id : -1);
      DRIFTD_TRY(sink->Open().map_error(
          [&](const Error& e) { return e.Wrap(fmt::format("opening sink '{}'", sink->name())); }));
    }
    DRIFTD_TRY(RefuseStaleCheckpoint(*last ? (*last)->batch_id : -1));
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
      ScaleOutRunner::Parts parts;
      parts.spec = &spec_;
      parts.source = source_.get();
      parts.group = group;
      for (auto& sink : sinks_) parts.sinks.push_back(sink.get());
      parts.store = store_.get();
      parts.decoder = decoder_.get();
      parts.projection = projection_.get();
      parts.metadata = &metadata_;
      parts.chunk_bytes = options_.chunk_bytes;
      parts.stop_requested = [this] { return stop_requested_.load(); };
      scale_out_ = std::make_unique<ScaleOutRunner>(std::move(parts));
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
        if (!*ran) break;
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

  bool IsReady() const { return started_ && source_ && source_->IsReady(); }

 private:
  // Hands every state entry of the query's scope to the stage whose namespace it is in.
  Status RestoreStages(int64_t& restored) {
    Status status = Ok();
    DRIFTD_TRY(store_->ScanState([&](std::string_view encoded, std::string_view value) {
      if (!status) return;
      StateKeyView key;
      if (!DecodeStateKey(encoded, key)) {
        status = MakeError(ErrorCode::kCorruption,
                           "checkpoint {}: a state key of {} bytes is unreadable",
                           spec_.checkpoint_location, encoded.size());
        return;
      }
      if (key.scope != kQueryScope) return;
      ++restored;
      for (auto& stage : stages_) {
        if (stage->state_namespace() == key.ns) {
          status = stage->Restore(key.key, value);
          return;
        }
      }
      // A stage the pipeline no longer has (drift removed, say): its state is left alone.
    }));
    DRIFTD_TRY(status);
    for (auto& stage : stages_) DRIFTD_TRY(stage->FinishRestore());
    return Ok();
  }

  // Format 1 checkpoints kept state keys unscoped: give each its scope and namespace, in one
  // atomic write with the new format version.
  Status MigrateFormat1(CheckpointMetadata metadata) {
    std::vector<std::pair<std::string, std::string>> puts;
    std::vector<std::string> deletes;
    DRIFTD_TRY(store_->ScanState([&](std::string_view key, std::string_view value) {
      deletes.emplace_back(key);
      const std::string_view ns = LegacyNamespaceOf(key);
      if (!ns.empty()) puts.emplace_back(EncodeStateKey(kQueryScope, ns, key), value);
    }));
    metadata.format_version = 2;
    DRIFTD_TRY(store_->RewriteState(puts, deletes, metadata));
    log_->info("pipeline {}: checkpoint {} upgraded to format 2 ({} state entries)", spec_.name,
               spec_.checkpoint_location, puts.size());
    return Ok();
  }

  Status CheckMetadata() {

    auto metadata = store_->ReadMetadata();
    if (!metadata) return tl::unexpected(metadata.error());
    if (!*metadata) {
      CheckpointMetadata fresh;
      fresh.pipeline_name = spec_.name;
      fresh.fingerprint_json = options_.fingerprint_json;
      fresh.created_at_ms = NowMs();
      fresh.checkpoint_id = NewCheckpointId();
      checkpoint_id_ = fresh.checkpoint_id;
      return store_->WriteMetadata(fresh);
    }
    const CheckpointMetadata& stored = **metadata;
    if (stored.pipeline_name != spec_.name) {
      return MakeError(ErrorCode::kIncompatible,
                       "checkpoint {} belongs to pipeline '{}', not '{}': point "
                       "checkpointLocation at a directory of this pipeline's own",
                       spec_.checkpoint_location, stored.pipeline_name, spec_.name);
    }
    if (!options_.fingerprint_json.empty() && stored.fingerprint_json != options_.fingerprint_json) {
      std::vector<std::string> changed =
          FingerprintDifferences(stored.fingerprint_json, options_.fingerprint_json);
      return MakeError(
          ErrorCode::kIncompatible,
          "pipeline '{}' changed in ways its checkpoint {} cannot serve: {} changed. The "
          "saved state and offsets were computed for the old definition. Revert the change, or "
          "start over with a new checkpointLocation (or delete the old one) to recompute from "
          "the source's startingOffsets",
          spec_.name, spec_.checkpoint_location, fmt::join(changed, ", "));
    }
    checkpoint_id_ = stored.checkpoint_id;
    if (stored.format_version < 2) {
      CheckpointMetadata upgraded = stored;
      if (upgraded.checkpoint_id.empty()) upgraded.checkpoint_id = NewCheckpointId();
      checkpoint_id_ = upgraded.checkpoint_id;
      return MigrateFormat1(upgraded);
    }
    if (stored.format_version > 2) {
      return MakeError(ErrorCode::kIncompatible,
                       "checkpoint {} has format {}, newer than this driftd reads (2): run the "
                       "driftd that wrote it, or start over with a new checkpointLocation",
                       spec_.checkpoint_location, stored.format_version);
    }
    if (checkpoint_id_.empty()) {
      // A checkpoint from before ids existed gets one now, kept from then on.
      CheckpointMetadata upgraded = stored;
      upgraded.checkpoint_id = NewCheckpointId();
      DRIFTD_TRY(store_->WriteMetadata(upgraded));
      checkpoint_id_ = upgraded.checkpoint_id;
    }
    return Ok();
  }

  // A checkpoint behind what its sinks delivered is a copy, or an old backup, of one that went
  // on running: starting from it would compute and deliver those batches a second time.
  Status RefuseStaleCheckpoint(int64_t last_batch) {
    for (auto& sink : sinks_) {
      auto delivered = sink->LastDelivered();
      if (!delivered) return tl::unexpected(delivered.error());
      if (!*delivered || **delivered <= last_batch) continue;
      return MakeError(
          ErrorCode::kIncompatible,
          "checkpoint {} is behind its output: sink '{}' has delivered batch {} of this "
          "checkpoint, whose last committed batch is {}. It is a copy or an older backup of a "
          "checkpoint that kept running; starting from it would deliver batches {} to {} "
          "again. Run from the current checkpoint, or start over with a new checkpointLocation",
          spec_.checkpoint_location, sink->name(), **delivered, last_batch, last_batch + 1,
          **delivered);
    }
    return Ok();
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
    std::vector<PartitionActivity> activity;
    const bool independent = source_->HasIndependentPartitions();
    PartitionActivity whole;  // a source that is one stream
    for (const auto& [key, offset] : end) {
      auto start = position_.find(key);
      const bool read = start == position_.end() || start->second != offset;
      auto it = latest.find(key);
      const bool more = it != latest.end() && it->second > offset;
      if (independent) {
        activity.push_back({key, more, read});
      } else {
        whole.more_available = whole.more_available || more;
        whole.read_in_batch = whole.read_in_batch || read;
      }
    }
    if (!independent) activity.push_back(whole);
    return activity;
  }

  std::string ClockPartitionName(uint32_t index) const {
    return source_->HasIndependentPartitions() ? source_->PartitionKeyOf(index) : std::string();
  }

  bool HasClosableWindows(int64_t watermark_us) const {
    for (const auto& stage : stages_) {
      if (stage->HasClosableWindows(watermark_us)) return true;
    }
    return false;
  }

  // Runs one batch. Returns false when there was nothing to do.
  Result<bool> RunBatch() {
    if (scale_out_) return RunScaledOutBatch();
    Clock::time_point batch_start = Clock::now();
    ProgressRecord progress;
    progress.batch_id = next_batch_id_;
    progress.timestamp_ms = NowMs();
    progress.id = checkpoint_id_;
    progress.run_id = run_id_;

    auto planned = source_->PlanBatch(position_);
    if (!planned) return tl::unexpected(planned.error());
    const SourceOffsets& end = *planned;
    progress.latest_offset_ms = MillisSince(batch_start);
    std::vector<PartitionLag> lag = source_->Lag(end);
    clock_.BeginBatch(Activity(end, lag), SteadyMs());
    const bool has_data = end != position_;
    // A batch without input is due when the watermark closes a window: the one in force (the
    // aggregation emits by it) or the one idle partitions let it move to.
    const bool closable =
        HasClosableWindows(clock_.watermark_us()) || HasClosableWindows(clock_.NextWatermark());
    std::vector<std::string> resets;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      resets.swap(baseline_resets_);
    }
    if (!has_data && !closable && resets.empty()) return false;
    for (const std::string& model : resets) {
      if (drift_ && drift_->ResetBaselines(model)) {
        log_->info("pipeline {}: model {} warms up a new baseline from batch {}", spec_.name,
                   model, next_batch_id_);
      }
    }

    BatchOutput output;
    output.batch_id = next_batch_id_;
    output.source_end = end;
    int64_t input_rows = 0;
    int64_t malformed_before = MalformedTotal();
    Clock::time_point read_start = Clock::now();
    if (has_data) {
      auto reader = source_->Read(position_, end);
      if (!reader) return tl::unexpected(reader.error());
      bool more = !pipeline_;
      if (pipeline_) DRIFTD_TRY(ReadInParallel(**reader, output, progress, input_rows));
      while (more) {
        if (stop_requested_.load()) {
          return MakeError(ErrorCode::kCancelled, "stopped during batch {}", next_batch_id_);
        }
        chunk_.Clear();
        auto next = (*reader)->Next(chunk_, options_.chunk_bytes);
        if (!next) return tl::unexpected(next.error());
        if (options_.metrics) options_.metrics->LoopProgress();
        more = *next;
        chunk_.Seal();
        input_rows += static_cast<int64_t>(chunk_.size());
        records_.Reset(spec_.schema);
        dead_letters_.clear();
        DRIFTD_TRY(decoder_->Decode(chunk_, records_, &dead_letters_,
                                   [&](const RecordPosition& position) {
                                     return source_->DescribePosition(position);
                                   }));
        for (const DeadLetter& dead : dead_letters_) {
          output.dead_letters.Add(
              "", DeadLetterToJson(dead, source_->DescribePosition(dead.position)));
        }
        metadata_.Fill(chunk_, *source_, records_);
        // Filtered rows leave before the clock: they neither advance nor are judged by it.
        progress.filtered_rows += projection_->Apply(records_);
        clock_.Stamp(
            records_, [&](uint32_t index) { return ClockPartitionName(index); }, times_);
        for (auto& stage : stages_) stage->Process(records_, times_, output);
      }
      progress.lost_records = (*reader)->lost_records();
    }
    progress.add_batch_ms = MillisSince(read_start);

    // Results, state changes and the watermark for the next batch.
    BatchContext context;
    context.batch_id = next_batch_id_;
    context.now_ms = NowMs();
    context.watermark_us = clock_.watermark_us();
    context.next_watermark_us = clock_.NextWatermark();
    std::vector<std::pair<std::string, std::string>> puts;
    std::vector<std::string> deletes;
    StageProgress stage_progress;
    for (auto& stage : stages_) {
      StateChanges changes;
      stage->Finish(context, output, changes, stage_progress);
      const std::string_view ns = stage->state_namespace();
      for (auto& [key, value] : changes.puts) {
        puts.emplace_back(EncodeStateKey(kQueryScope, ns, key), std::move(value));
      }
      for (const std::string& key : changes.deletes) {
        deletes.push_back(EncodeStateKey(kQueryScope, ns, key));
      }
    }
    progress.rows_updated = stage_progress.rows_updated;
    progress.dropped_by_watermark = stage_progress.dropped_by_watermark;
    progress.without_event_time = stage_progress.without_event_time;
    progress.num_groups = stage_progress.num_groups;
    progress.num_open_windows = stage_progress.num_open_windows;
    progress.max_event_time_us = clock_.MaxEventTime();
    progress.drift_dirty_series = stage_progress.drift_dirty_series;
    progress.drift_dirty_bytes = stage_progress.drift_dirty_bytes;
    progress.drift_put_bytes = stage_progress.drift_put_bytes;
    progress.state_dirty_bytes = stage_progress.state_dirty_bytes;
    progress.drift_values_over_key_cap = stage_progress.drift_values_over_key_cap;
    progress.drift_rows_over_segment_cap = stage_progress.drift_rows_over_segment_cap;
    progress.state_keys_written = static_cast<int64_t>(puts.size());
    progress.state_keys_deleted = static_cast<int64_t>(deletes.size());
    for (const auto& [key, value] : puts) {
      progress.state_bytes_written += static_cast<int64_t>(key.size() + value.size());
    }

    // Commit: state, offsets, watermark, commit record and outbox in one write.
    Clock::time_point commit_start = Clock::now();
    BatchWrite write;
    write.commit.batch_id = next_batch_id_;
    write.commit.start = position_;
    write.commit.end = end;
    write.commit.watermark_us = context.next_watermark_us;
    write.commit.max_event_us = clock_.MaxEventTimes();
    write.commit.committed_at_ms = NowMs();
    write.state_puts = std::move(puts);
    write.state_deletes = std::move(deletes);
    write.outbox.batch_id = next_batch_id_;
    for (const auto& sink : sinks_) write.outbox.pending_sinks.push_back(sink->name());
    if (!write.outbox.pending_sinks.empty()) write.outbox.payload = EncodeBatchOutput(output);
    // The previous batch's delivery ends (and is marked) before this one commits: one batch at
    // a time in the outbox, as on one thread.
    DRIFTD_TRY(FinishDelivery());
    DRIFTD_TRY(store_->Commit(std::move(write)));
    progress.wal_commit_ms = MillisSince(commit_start);
    clock_.CommitBatch();

    // Progress, then delivery: on this thread, or (threads > 1) on a thread of its own while
    // the next batch is read, decoded and folded.
    progress.start_offsets = position_;
    progress.end_offsets = end;
    progress.malformed_in_batch = MalformedTotal() - malformed_before;
    progress.watermark_us = clock_.watermark_us();
    progress.lag = std::move(lag);
    if (drift_) progress.models_across_partitions = drift_->ModelsAcrossPartitions();
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

  // What the metrics need of drift after a batch, taken when it ends (its delivery may be
  // reported after the next batch's values were observed).
  struct DriftSnapshot {
    bool taken = false;
    std::vector<AlertEvent> events;
    std::vector<SharedEvaluation> evaluations;
    std::optional<std::vector<DriftMonitor::ModelStats>> models;
  };
  DriftSnapshot DriftReport(bool alerts) const {
    DriftSnapshot snapshot;
    if (!drift_ || !options_.metrics) return snapshot;
    snapshot.taken = true;
    snapshot.events = drift_->LastEvents();
    snapshot.evaluations = drift_->LastEvaluations();
    // Levels change only with an alert event; value counts are refreshed with the report.
    if (alerts || WouldReport()) snapshot.models = drift_->ModelStats();
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
  // while it runs (FinishDelivery comes first in every path that uses them).
  void Deliver(Delivery& delivery) {
    const Clock::time_point start = Clock::now();
    for (auto& sink : sinks_) {
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
    if (defer_durability_) undurable_batches_.push_back(delivery->batch_id);
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
  // steps of RunBatch's loop, each lane of the stages fed the same rows in the same order.
  // Threads other than this one reach the source only under source_mutex_, which this thread
  // holds while it reads.
  Status ReadInParallel(SourceReader& reader, BatchOutput& output, ProgressRecord& progress,
                        int64_t& input_rows) {
    const DescribePosition describe = [this](const RecordPosition& position) {
      std::lock_guard<std::mutex> lock(source_mutex_);
      return source_->DescribePosition(position);
    };
    const std::function<std::optional<TopicPartition>(uint32_t)> topic_partition_of =
        [this](uint32_t index) {
          std::lock_guard<std::mutex> lock(source_mutex_);
          return source_->TopicPartitionOf(index);
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
      return more;
    };
    steps.decode = [&](size_t thread, ChunkPipeline::Chunk& chunk) -> Status {
      const ThreadContext& context = contexts_[thread];
      chunk.records.Reset(spec_.schema);
      chunk.dead_letters.clear();
      DRIFTD_TRY(context.decoder->Decode(chunk.input, chunk.records, &chunk.dead_letters,
                                         describe));
      context.metadata->Fill(chunk.input, topic_partition_of, chunk.records);
      chunk.filtered_rows = context.projection->Apply(chunk.records);
      chunk.lane_rows.resize(lanes_.size());
      for (size_t lane = 0; lane < lanes_.size(); ++lane) {
        const Lane& at = lanes_[lane];
        if (!at.sharded || at.shard != 0) continue;
        const std::span<std::vector<uint32_t>> shards(chunk.lane_rows.data() + lane,
                                                      at.stage->shard_count());
        for (std::vector<uint32_t>& rows : shards) rows.clear();
        at.stage->Route(chunk.records, shards);
      }
      return Ok();
    };
    steps.sequence = [&](ChunkPipeline::Chunk& chunk) {
      for (const DeadLetter& dead : chunk.dead_letters) {
        output.dead_letters.Add("", DeadLetterToJson(dead, describe(dead.position)));
      }
      // Filtered rows leave before the clock: they neither advance nor are judged by it.
      progress.filtered_rows += chunk.filtered_rows;
      clock_.Stamp(
          chunk.records,
          [&](uint32_t index) {
            std::lock_guard<std::mutex> lock(source_mutex_);
            return ClockPartitionName(index);
          },
          chunk.times);
    };
    steps.fold = [&](size_t lane, const ChunkPipeline::Chunk& chunk) {
      const Lane& at = lanes_[lane];
      if (at.sharded) {
        at.stage->ProcessShard(at.shard, chunk.records, chunk.times, chunk.lane_rows[lane]);
      } else {
        // Only the select stage writes rows here, and no other step writes them.
        at.stage->Process(chunk.records, chunk.times, output);
      }
    };
    return pipeline_->Run(steps);
  }

  // Malformed records counted by every thread's decoder.
  MalformedCounts Malformed() const {
    MalformedCounts counts = decoder_->counts();
    for (const ThreadParts& parts : thread_parts_) counts.Add(parts.decoder->counts());
    return counts;
  }
  int64_t MalformedTotal() const { return Malformed().total(); }

  // A scaled-out batch (engine/executor/scale_out.h).
  Result<bool> RunScaledOutBatch() {
    Clock::time_point batch_start = Clock::now();
    ProgressRecord progress;
    progress.batch_id = next_batch_id_;
    progress.timestamp_ms = NowMs();
    progress.id = checkpoint_id_;
    progress.run_id = run_id_;
    const int64_t malformed_before = MalformedTotal();
    BatchOutput output;
    ScaleOutRunner::BatchReport report;
    auto ran = scale_out_->RunBatch(next_batch_id_, output, report);
    if (!ran) return tl::unexpected(ran.error());
    tasks_owned_.store(report.tasks);
    if (!*ran) return false;
    progress.start_offsets = report.start;
    progress.end_offsets = report.end;
    progress.lag = std::move(report.lag);
    progress.lost_records = report.lost_records;
    progress.rows_updated = report.stages.rows_updated;
    progress.dropped_by_watermark = report.stages.dropped_by_watermark;
    progress.without_event_time = report.stages.without_event_time;
    progress.num_groups = report.stages.num_groups;
    progress.num_open_windows = report.stages.num_open_windows;
    progress.drift_dirty_series = report.stages.drift_dirty_series;
    progress.drift_dirty_bytes = report.stages.drift_dirty_bytes;
    progress.drift_put_bytes = report.stages.drift_put_bytes;
    progress.state_dirty_bytes = report.stages.state_dirty_bytes;
    progress.drift_values_over_key_cap = report.stages.drift_values_over_key_cap;
    progress.drift_rows_over_segment_cap = report.stages.drift_rows_over_segment_cap;
    progress.state_keys_written = report.state_keys_written;
    progress.state_bytes_written = report.state_bytes_written;
    progress.state_keys_deleted = report.state_keys_deleted;
    progress.max_event_time_us = report.max_event_us;
    progress.watermark_us = report.watermark_us;
    progress.malformed_in_batch = MalformedTotal() - malformed_before;
    progress.filtered_rows = report.filtered_rows;
    progress.scale_out_tasks = report.tasks;
    progress.restored_tasks = report.restored_tasks;
    progress.restore_ms = report.restore_ms;
    progress.aborted_batches = report.aborted;
    ReportBatch(progress, output, report.input_rows, report.output_rows, batch_start, Clock::now(),
                DriftReport(!output.alerts.empty()));
    ++next_batch_id_;
    return true;
  }

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
    last_batch_end_ = end;

    counters_.batches.fetch_add(1);
    counters_.input_rows.fetch_add(input_rows);
    counters_.output_rows.fetch_add(output_rows);
    counters_.malformed_rows.fetch_add(progress.malformed_in_batch);
    counters_.filtered_rows.fetch_add(progress.filtered_rows);
    counters_.dropped_by_watermark.fetch_add(progress.dropped_by_watermark);
    counters_.without_event_time.fetch_add(progress.without_event_time);
    counters_.alerts.fetch_add(progress.num_alerts);
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
  std::unique_ptr<ValueDecoder> decoder_;
  EventClock clock_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<Source> source_;
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
  std::vector<std::unique_ptr<Stage>> stages_;
  DriftStage* drift_ = nullptr;  // one of stages_, if drift is on
  /// scaleOut: the batch loop of a query shared by several processes.
  std::unique_ptr<ScaleOutRunner> scale_out_;
  std::atomic<int64_t> tasks_owned_{0};

  /// The batch's threads (the pipeline's `threads`, or the cores available); 1: the loop in
  /// RunBatch on this thread alone.
  int threads_ = 1;
  struct ThreadContext {
    ValueDecoder* decoder = nullptr;
    Projection* projection = nullptr;
    MetadataFiller* metadata = nullptr;
  };
  struct ThreadParts {
    std::unique_ptr<ValueDecoder> decoder;
    std::unique_ptr<Projection> projection;
    std::unique_ptr<MetadataFiller> metadata;
  };
  /// What each thread decodes with: index 0 the executor's own, then thread_parts_.
  std::vector<ThreadContext> contexts_;
  std::vector<ThreadParts> thread_parts_;
  /// A lane folds one stage, or one shard of a stage with several.
  struct Lane {
    Stage* stage = nullptr;
    uint32_t shard = 0;
    bool sharded = false;
  };
  std::vector<Lane> lanes_;
  std::unique_ptr<ChunkPipeline> pipeline_;  // threads_ > 1
  std::mutex source_mutex_;

  InputChunk chunk_;
  RecordBatch records_;
  RowTimes times_;
  std::vector<DeadLetter> dead_letters_;
  SourceOffsets position_;
  int64_t next_batch_id_ = 0;
  Clock::time_point last_batch_end_{};
  Clock::time_point last_report_{};
  /// Trigger continuous: sinks deliver without syncing; these epochs wait for SyncSinks to be
  /// marked delivered.
  bool defer_durability_ = false;
  std::vector<int64_t> undurable_batches_;

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> started_{false};
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
