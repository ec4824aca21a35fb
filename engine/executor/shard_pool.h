// Threads for a stage whose state is split in shards that it folds itself (the drift stage:
// engine/executor/drift_stage.h): Run hands each shard's work to a thread of its own and
// returns once every shard's is done, so a stage called on one lane of the batch pipeline
// (engine/executor/chunk_pipeline.h) still spreads its rows over the cores. The calling thread
// does shard 0's work; shards - 1 threads wait between runs and are joined by the destructor.
//
// Thread-safety: Run from one thread at a time.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace driftd {

class ShardPool {
 public:
  explicit ShardPool(size_t shards);
  ~ShardPool();
  ShardPool(const ShardPool&) = delete;
  ShardPool& operator=(const ShardPool&) = delete;

  size_t shards() const { return workers_.size() + 1; }

  /// Calls work(shard) for every shard in [0, shards()), each on its own thread, and returns
  /// when all have returned. `work` must not throw.
  void Run(const std::function<void(size_t shard)>& work);

 private:
  void WorkerLoop(size_t shard);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(size_t)>* work_ = nullptr;
  uint64_t generation_ = 0;  // runs started
  size_t running_ = 0;       // workers still busy with the current run
  bool shutdown_ = false;
};

}  // namespace driftd
