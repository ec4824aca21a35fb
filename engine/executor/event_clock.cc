#include "engine/executor/event_clock.h"

#include <algorithm>

namespace driftd {

EventClock::EventClock(EventClockOptions options) : options_(options) {}

EventClock::Partition& EventClock::Slot(std::string_view name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return partitions_[it->second];
  by_name_.emplace(std::string(name), partitions_.size());
  partitions_.push_back(Partition{std::string(name)});
  return partitions_.back();
}

int64_t EventClock::SlotIndexFor(uint32_t /*partition_index*/, std::string_view name) {
  Slot(name);
  return static_cast<int64_t>(by_name_.find(name)->second);
}

void EventClock::Restore(const std::map<std::string, int64_t>& max_event_us,
                         int64_t watermark_us) {
  for (const auto& [name, max_us] : max_event_us) Slot(name).max_us = max_us;
  watermark_us_ = watermark_us;
}

void EventClock::BeginBatch(const std::vector<PartitionActivity>& activity, int64_t now_ms) {
  auto note = [&](Partition& partition, bool more_available, bool read_in_batch) {
    const bool active = more_available || read_in_batch;
    if (active || partition.last_active_ms == INT64_MIN) partition.last_active_ms = now_ms;
    partition.more_available = more_available;
    partition.read_in_batch = read_in_batch;
    partition.idle = !active && options_.idle_timeout_ms > 0 &&
                     now_ms - partition.last_active_ms >= options_.idle_timeout_ms;
  };
  listed_.assign(partitions_.size(), 0);
  for (const PartitionActivity& seen : activity) {
    Partition& partition = Slot(seen.name);
    listed_.resize(partitions_.size(), 0);
    listed_[by_name_.find(seen.name)->second] = 1;
    note(partition, seen.more_available, seen.read_in_batch);
  }
  // A partition the plan no longer lists (its topic deleted, a pattern that stopped matching
  // it, a partition restored from the checkpoint that is gone) has nothing to read: as an empty
  // one, it stops holding the watermark once idle_timeout passed.
  for (size_t slot = 0; slot < partitions_.size(); ++slot) {
    if (!listed_[slot]) note(partitions_[slot], false, false);
  }
  // Slot indexes stay valid: slots are only ever added.
}

void EventClock::Expect(std::string_view name) {
  const bool known = by_name_.count(name) > 0;
  Partition& partition = Slot(name);
  if (!known) partition.more_available = true;
}

void EventClock::Report(std::string_view name, int64_t max_us, bool more_available, bool idle) {
  Partition& partition = Slot(name);
  partition.max_us = std::max(partition.max_us, max_us);
  partition.more_available = more_available;
  partition.idle = idle;
  partition.reported_idle = idle;
}

void EventClock::Delist(const std::vector<std::string>& listed, int64_t now_ms) {
  listed_.assign(partitions_.size(), 0);
  for (const std::string& name : listed) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) listed_[it->second] = 1;
  }
  for (size_t slot = 0; slot < partitions_.size(); ++slot) {
    Partition& partition = partitions_[slot];
    if (listed_[slot]) {
      if (partition.delisted_since_ms != INT64_MIN) {
        // Listed again (a gap in the source's metadata, its topic made again): what its
        // reader's last mark said holds again.
        partition.delisted_since_ms = INT64_MIN;
        partition.idle = partition.reported_idle;
      }
      continue;
    }
    if (partition.delisted_since_ms == INT64_MIN) partition.delisted_since_ms = now_ms;
    // Until idle_timeout passed it holds the watermark as before, records not read yet
    // included: the gap may be a moment's (a broker restarting), its reader still there.
    if (options_.idle_timeout_ms > 0 &&
        now_ms - partition.delisted_since_ms >= options_.idle_timeout_ms) {
      partition.idle = true;
    }
  }
}

void EventClock::Reset(std::string_view name, int64_t max_us) {
  Partition& partition = Slot(name);
  partition.max_us = max_us;
  partition.more_available = false;
  partition.last_active_ms = INT64_MIN;
  partition.idle = false;
}

EventClock::PartitionState EventClock::StateOf(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return {std::string(name)};
  const Partition& partition = partitions_[it->second];
  return {partition.name, partition.max_us, partition.more_available, partition.idle};
}

std::vector<EventClock::PartitionState> EventClock::Partitions() const {
  std::vector<PartitionState> out;
  for (const Partition& partition : partitions_) {
    out.push_back({partition.name, partition.max_us, partition.more_available, partition.idle});
  }
  return out;
}

int64_t EventClock::Watermark(bool batch_read) const {
  if (!enabled()) return watermark_us_;
  bool any = false;
  int64_t low = INT64_MAX;
  int64_t high = INT64_MIN;
  bool all_idle = true;
  for (const Partition& partition : partitions_) {
    if (partition.max_us == INT64_MIN) {
      // Never read: it holds the watermark only while it has records waiting (beyond the
      // batch, or in it while it is read).
      const bool waiting = partition.more_available || (!batch_read && partition.read_in_batch);
      if (waiting && !partition.idle) return watermark_us_;
      continue;
    }
    high = std::max(high, partition.max_us);
    if (partition.idle) continue;
    all_idle = false;
    any = true;
    low = std::min(low, partition.max_us);
  }
  if (high == INT64_MIN) return watermark_us_;
  // Every partition idle: nothing holds the watermark back any more.
  const int64_t bound = any && !all_idle ? low : high;
  const int64_t candidate = LessDelay(bound);
  return std::max(candidate, watermark_us_);
}

std::map<std::string, int64_t> EventClock::MaxEventTimes() const {
  std::map<std::string, int64_t> out;
  for (const Partition& partition : partitions_) {
    if (partition.max_us != INT64_MIN) out[partition.name] = partition.max_us;
  }
  return out;
}

int64_t EventClock::MaxEventTime() const {
  int64_t high = INT64_MIN;
  for (const Partition& partition : partitions_) high = std::max(high, partition.max_us);
  return high;
}

}  // namespace driftd
