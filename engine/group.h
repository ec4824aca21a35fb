// What a scaled-out query (scaleOut.enabled: several driftd processes sharing one pipeline)
// needs of the consumer group that divides its input among them. Kafka is the engine: the group
// decides which process owns which partitions, its committed offsets (written in each batch's
// transaction, with the consumer's group metadata so that a zombie of an older generation is
// fenced) are where every partition resumes, and two internal topics carry what crosses
// processes:
//   - the repartition topic: rows routed by model to the task that owns the model (task t reads
//     partition t), with the clock of the source partition they came from;
//   - the changelog topic (compacted): every state change of task t, on partition t, so that
//     whichever process owns t next restores it (from its local checkpoint's position when it
//     has one).
// The Kafka source implements this interface (connectors/kafka); the executor drives it
// (engine/executor/scale_out.h).
//
// Lifecycle: owned by the source; called from the executor's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace driftd {

/// Where the group left a partition: the next offset to read and the metadata committed with
/// it (a source partition's clock). offset -1: nothing committed yet.
struct GroupPosition {
  int64_t offset = -1;
  std::string metadata;
};

/// What this process owns now.
struct GroupAssignment {
  /// Source partitions, as offsets keys ("topic-3").
  std::vector<std::string> source;
  /// Tasks (partitions of the internal topics).
  std::vector<uint32_t> tasks;
  /// The group generation the assignment belongs to (it changes with every rebalance).
  int32_t generation = -1;
};

class GroupMember {
 public:
  virtual ~GroupMember() = default;

  /// Serves the group protocol (joins, rebalances, heartbeats are librdkafka's) and returns
  /// what this process owns now. Call between batches.
  virtual Result<GroupAssignment> PollAssignment() = 0;

  /// Number of tasks: the partitions of the repartition and changelog topics.
  virtual uint32_t task_count() const = 0;

  /// Every partition of the query's source topics, whoever owns it: the tasks' clocks wait for
  /// each of them.
  virtual std::vector<std::string> SourcePartitions() = 0;

  /// The offsets key of task `task`'s input (its repartition partition).
  virtual std::string TaskInputKey(uint32_t task) const = 0;
  /// The task whose input `key` is, if it is one.
  virtual std::optional<uint32_t> TaskOfInputKey(std::string_view key) const = 0;

  /// What the group committed for `keys` (source partitions and task inputs), waiting for
  /// transactions that are still deciding them.
  virtual Result<std::map<std::string, GroupPosition>> Committed(
      const std::vector<std::string>& keys) = 0;

  /// Reads task `task`'s changelog from offset `from` to its end (committed records only):
  /// `visit(key, value)` per record, value nullopt for a deletion. Returns the offset after
  /// the last record read (from, when there was none).
  virtual Result<int64_t> ReadChangelog(
      uint32_t task, int64_t from,
      const std::function<void(std::string_view key, std::optional<std::string_view> value)>&
          visit) = 0;

  /// After a batch's transaction committed: each task's changelog offset after its last
  /// record of that batch (tasks that wrote none are absent).
  virtual std::map<uint32_t, int64_t> LastChangelogEnds() = 0;

  /// How long the changelog keeps a deletion once compaction has reached it (its topic's
  /// delete.retention.ms). A deletion is never dropped sooner after it was written, so a local
  /// copy of a task that was current less long ago is caught up by replaying what came after
  /// it; an older one may miss deletions, and is restored whole instead.
  virtual int64_t changelog_deletions_kept_ms() const = 0;
};

}  // namespace driftd
