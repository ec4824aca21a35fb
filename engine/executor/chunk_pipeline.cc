#include "engine/executor/chunk_pipeline.h"

#include <algorithm>

namespace driftd {

ChunkPipeline::ChunkPipeline(size_t threads, size_t lanes, size_t depth)
    : slots_(std::max<size_t>(depth, 1)) {
  lane_next_.assign(std::max<size_t>(lanes, 1), 0);
  lane_busy_.assign(lane_next_.size(), 0);
  for (size_t worker = 1; worker < std::max<size_t>(threads, 1); ++worker) {
    workers_.emplace_back([this, worker] { WorkerLoop(worker); });
  }
}

ChunkPipeline::~ChunkPipeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  changed_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ChunkPipeline::WorkerLoop(size_t worker) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!shutdown_) {
    const Task task = PickLocked();
    if (task.kind == TaskKind::kNone) {
      changed_.wait(lock);
      continue;
    }
    RunTask(lock, task, worker);
  }
}

int64_t ChunkPipeline::FoldedLocked() const {
  return *std::min_element(lane_next_.begin(), lane_next_.end());
}

void ChunkPipeline::FailLocked(Status status) {
  if (failed_) return;
  failed_ = true;
  failure_ = std::move(status);
  changed_.notify_all();
}

ChunkPipeline::Task ChunkPipeline::PickLocked() {
  if (steps_ == nullptr || failed_) return {};
  Task best;
  int64_t best_seq = INT64_MAX;
  // The earliest chunk first: it frees its slot soonest, and the lane that lags (the one that
  // bounds the batch) gets a thread as soon as its next chunk is ready.
  for (size_t lane = 0; lane < lane_next_.size(); ++lane) {
    const int64_t seq = lane_next_[lane];
    if (lane_busy_[lane] || seq >= next_sequence_ || seq >= best_seq) continue;
    best = {TaskKind::kFold, seq, lane};
    best_seq = seq;
  }
  if (!sequencing_) {
    if (next_sequence_ == read_error_seq_) {
      // Every chunk read before the failed read was decoded without an error.
      FailLocked(read_error_);
      return {};
    }
    if (next_sequence_ < next_read_ && SlotOf(next_sequence_).state == SlotState::kDecoded) {
      Slot& slot = SlotOf(next_sequence_);
      if (!slot.status) {
        // The earliest error in read order: every chunk before it was sequenced.
        FailLocked(slot.status);
        return {};
      }
      if (next_sequence_ < best_seq) {
        best = {TaskKind::kSequence, next_sequence_, 0};
        best_seq = next_sequence_;
      }
    }
  }
  for (int64_t seq = next_sequence_; seq < next_read_ && seq < best_seq; ++seq) {
    if (SlotOf(seq).state == SlotState::kRead) {
      best = {TaskKind::kDecode, seq, 0};
      break;
    }
  }
  return best;
}

void ChunkPipeline::RunTask(std::unique_lock<std::mutex>& lock, const Task& task, size_t worker) {
  Slot& slot = SlotOf(task.seq);
  const Steps& steps = *steps_;  // Run does not return while a task runs
  ++running_;
  switch (task.kind) {
    case TaskKind::kDecode: {
      slot.state = SlotState::kDecoding;
      lock.unlock();
      Status status = steps.decode(worker, slot.chunk);
      lock.lock();
      slot.status = std::move(status);
      slot.state = SlotState::kDecoded;
      break;
    }
    case TaskKind::kSequence:
      sequencing_ = true;
      lock.unlock();
      steps.sequence(slot.chunk);
      lock.lock();
      sequencing_ = false;
      slot.state = SlotState::kSequenced;
      ++next_sequence_;
      break;
    case TaskKind::kFold:
      lane_busy_[task.lane] = 1;
      lock.unlock();
      steps.fold(task.lane, slot.chunk);
      lock.lock();
      lane_busy_[task.lane] = 0;
      ++lane_next_[task.lane];
      if (FoldedLocked() > task.seq) slot.state = SlotState::kFree;
      break;
    case TaskKind::kNone:
      break;
  }
  --running_;
  changed_.notify_all();
}

bool ChunkPipeline::DoneLocked() const {
  return reading_done_ && read_error_seq_ == INT64_MAX && next_sequence_ == next_read_ &&
         FoldedLocked() == next_read_ && running_ == 0;
}

Status ChunkPipeline::Run(const Steps& steps) {
  std::unique_lock<std::mutex> lock(mutex_);
  steps_ = &steps;
  next_read_ = 0;
  reading_done_ = false;
  next_sequence_ = 0;
  sequencing_ = false;
  std::fill(lane_next_.begin(), lane_next_.end(), 0);
  std::fill(lane_busy_.begin(), lane_busy_.end(), 0);
  read_error_seq_ = INT64_MAX;
  read_error_ = Ok();
  failed_ = false;
  failure_ = Ok();
  for (Slot& slot : slots_) slot.state = SlotState::kFree;
  const int64_t depth = static_cast<int64_t>(slots_.size());
  while (true) {
    if (failed_) {
      if (running_ == 0) break;
      changed_.wait(lock);
      continue;
    }
    if (DoneLocked()) break;
    if (!reading_done_ && next_read_ < FoldedLocked() + depth) {
      // Reading comes first: it is the one step no other thread can do.
      Slot& slot = SlotOf(next_read_);
      lock.unlock();
      slot.chunk.input.Clear();
      Result<bool> more = steps.read(slot.chunk.input);
      lock.lock();
      if (!more) {
        read_error_seq_ = next_read_;
        read_error_ = tl::unexpected(more.error());
        reading_done_ = true;
      } else {
        slot.chunk.seq = next_read_;
        slot.state = SlotState::kRead;
        ++next_read_;
        reading_done_ = !*more;
      }
      changed_.notify_all();
      continue;
    }
    const Task task = PickLocked();
    if (task.kind != TaskKind::kNone) {
      RunTask(lock, task, 0);
      continue;
    }
    if (!failed_) changed_.wait(lock);
  }
  steps_ = nullptr;
  return failed_ ? failure_ : Ok();
}

}  // namespace driftd
