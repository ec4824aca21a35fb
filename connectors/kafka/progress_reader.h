// Reading a pipeline's progress records back from its progress topic: the kafka sink's recovery
// (which batches were delivered) and its takeover check (did another instance commit past us).
// Private to connectors/kafka/.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/result.h"

namespace driftd::kafka {

/// What a progress record says: the batch, and the sink object that wrote it (empty: written
/// before records named their writer). Batch id -1: no record of this checkpoint.
struct ProgressMark {
  int64_t batch_id = -1;
  std::string writer;
};

/// Which records to read, and as whom.
struct ProgressQuery {
  std::string topic;
  /// The records' key.
  std::string pipeline_name;
  /// Records of another checkpoint (or of none) say nothing about this one's batches.
  std::string checkpoint_id;
  /// The reader's group.id; it never commits offsets.
  std::string group_id;
  /// The sink's client settings: the reader takes bootstrap.servers and the security ones.
  std::map<std::string, std::string> client;
  /// How long `settle` waits for transactions open on the topic to end.
  int64_t settle_timeout_ms = 70'000;
};

/// The pipeline's newest committed progress record: batch id -1 if there is none or it
/// belongs to another checkpoint. `settle`: first wait for the transactions open on the progress
/// topic to end, so that the answer is final (after init_transactions fenced our own); without,
/// the newest committed record as of now (records after another pipeline's open transaction on
/// the same topic are not seen).
[[nodiscard]] Result<ProgressMark> ReadLatestProgress(const ProgressQuery& query, bool settle);

}  // namespace driftd::kafka
