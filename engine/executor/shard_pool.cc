#include "engine/executor/shard_pool.h"

namespace driftd {

ShardPool::ShardPool(size_t shards) {
  for (size_t shard = 1; shard < shards; ++shard) {
    workers_.emplace_back([this, shard] { WorkerLoop(shard); });
  }
}

ShardPool::~ShardPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  start_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ShardPool::Run(const std::function<void(size_t)>& work) {
  if (workers_.empty()) {
    work(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work_ = &work;
    running_ = workers_.size();
    ++generation_;
  }
  start_.notify_all();
  auto wait = [this] {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return running_ == 0; });
    work_ = nullptr;
  };
  try {
    work(0);
  } catch (...) {
    wait();  // the other shards still use `work` and what it refers to
    throw;
  }
  wait();
}

void ShardPool::WorkerLoop(size_t shard) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return shutdown_ || generation_ != seen; });
    if (shutdown_) return;
    seen = generation_;
    const std::function<void(size_t)>* work = work_;
    lock.unlock();
    (*work)(shard);
    lock.lock();
    if (--running_ == 0) done_.notify_one();
  }
}

}  // namespace driftd
