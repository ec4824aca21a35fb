// A batch's chunks on several threads (the pipeline's `threads`, config/README.md). A batch is
// read chunk after chunk, and each chunk goes through three steps:
//   decode    on any thread, chunks in any order: work that reads nothing but its own chunk
//             (decoding, the Kafka metadata columns, derived columns and the filter, routing
//             rows to the stages' shards);
//   sequence  one chunk at a time, in read order: what depends on every row before (the
//             event-time clock, dead letters);
//   fold      per lane, chunks in read order, different lanes at once: a lane owns a part of
//             the stages' state (a stage, or one shard of a stage's groups) and folds its rows
//             into it.
// So each lane sees exactly the rows, in exactly the order, that a run on one thread gives it,
// and results do not depend on the number of threads. It is Flink's and Kafka Streams' data
// parallelism (state partitioned by key, each partition on one thread, fed in its input order)
// inside one batch, with decoding spread over every thread.
//
// The thread that calls Run reads the chunks (the source is used by that thread only) and takes
// part in the work; threads - 1 workers are started by the constructor, wait between batches,
// and are joined by the destructor.
//
// Thread-safety: Run from one thread at a time. The steps run concurrently as said above; a
// step may touch only its chunk and what its lane (fold) or the sequence step owns.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/batch.h"
#include "engine/result.h"
#include "engine/value_decoder.h"

namespace driftd {

class ChunkPipeline {
 public:
  /// One chunk in flight: the source's records and what the steps derive from them. Slots are
  /// reused from batch to batch, so steady-state batches allocate nothing per chunk.
  struct Chunk {
    /// Position in the batch's read order, from 0.
    int64_t seq = 0;
    InputChunk input;
    RecordBatch records;
    RowTimes times;
    std::vector<DeadLetter> dead_letters;
    /// For a lane that folds only some rows (a shard of a stage): their indexes into
    /// `records`, ascending. Filled by the decode step; unused for lanes that fold every row.
    std::vector<std::vector<uint32_t>> lane_rows;
    /// Rows the query's filter removed (decode step).
    int64_t filtered_rows = 0;
    /// Which of the query's inputs the records are of (decode step; engine/executor/inputs.h).
    size_t input_index = 0;
    /// The clock's next watermark once it stamped the chunk's rows (sequence step).
    int64_t stamped_watermark_us = INT64_MIN;
  };

  struct Steps {
    /// Reads the next chunk into `input` (cleared); returns false when it was the last one of
    /// the batch. Called on Run's thread only.
    std::function<Result<bool>(InputChunk& input)> read;
    /// `worker` in [0, threads): the calling thread's index (0 is Run's thread), for state
    /// kept per thread (a decoder). An error ends the batch once every chunk before this one
    /// was sequenced without one.
    std::function<Status(size_t worker, Chunk& chunk)> decode;
    std::function<void(Chunk& chunk)> sequence;
    std::function<void(size_t lane, const Chunk& chunk)> fold;
    /// Asked before each read; true ends the batch with kCancelled.
    std::function<bool()> stop_requested;
  };

  /// `threads` >= 1 threads in all (Run's included); `lanes` >= 1 folds per chunk; at most
  /// `depth` >= 1 chunks in flight (read and not yet folded by every lane).
  ChunkPipeline(size_t threads, size_t lanes, size_t depth);
  ~ChunkPipeline();
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  /// Runs one batch to its end. Returns the error that a run on one thread would have returned:
  /// that of the earliest chunk in read order whose read or decode failed; kCancelled when
  /// stop_requested said so. Every step has ended when Run returns, whatever the outcome.
  Status Run(const Steps& steps);

  size_t threads() const { return workers_.size() + 1; }

 private:
  enum class SlotState { kFree, kRead, kDecoding, kDecoded, kSequenced };
  struct Slot {
    Chunk chunk;
    SlotState state = SlotState::kFree;
    Status status;
  };
  enum class TaskKind { kNone, kDecode, kSequence, kFold };
  struct Task {
    TaskKind kind = TaskKind::kNone;
    int64_t seq = 0;
    size_t lane = 0;
  };

  void WorkerLoop(size_t worker);
  Slot& SlotOf(int64_t seq) { return slots_[static_cast<size_t>(seq) % slots_.size()]; }
  /// The chunks every lane has folded (their slots are free again).
  int64_t FoldedLocked() const;
  /// The runnable task of the earliest chunk, or kNone; may end the batch with an error.
  Task PickLocked();
  void RunTask(std::unique_lock<std::mutex>& lock, const Task& task, size_t worker);
  bool DoneLocked() const;
  void FailLocked(Status status);

  std::vector<std::thread> workers_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool shutdown_ = false;

  // The batch being run (all guarded by mutex_).
  const Steps* steps_ = nullptr;
  int64_t next_read_ = 0;      // seq of the next chunk to read
  bool reading_done_ = false;  // the last chunk was read (or reading failed)
  int64_t next_sequence_ = 0;  // seq of the next chunk to sequence
  bool sequencing_ = false;
  std::vector<int64_t> lane_next_;  // per lane: seq of the next chunk it folds
  std::vector<uint8_t> lane_busy_;
  /// A read that failed: the error belongs after every chunk read before it.
  int64_t read_error_seq_ = INT64_MAX;
  Status read_error_;
  /// The batch's outcome once known (an error, or cancellation): no task starts any more.
  bool failed_ = false;
  Status failure_;
  int running_ = 0;  // tasks in progress
};

}  // namespace driftd
