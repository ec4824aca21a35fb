// The byte encodings of the checkpoint's records, exposed to read them outside a database: the
// fuzz harness of every persisted-state codec (tests/fuzz/fuzz_state_codecs.cc). The encodings
// themselves are described at the top of state/checkpoint_store.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"
#include "state/checkpoint_store.h"

namespace driftd::checkpoint_codec {

std::string EncodeBatchIdKey(int64_t batch_id);
std::string EncodeCommitValue(const CommitRecord& commit);
std::string EncodeOutboxValue(const std::vector<std::string>& sinks, std::string_view payload);

/// A commit log key (the batch id, big-endian). kCorruption when malformed.
Result<int64_t> DecodeBatchIdKey(std::string_view key);
/// A commit log value. kCorruption or kIncompatible when it cannot be read.
Result<CommitRecord> DecodeCommitValue(std::string_view value);
/// An outbox value of batch `batch_id`.
Result<OutboxEntry> DecodeOutboxValue(int64_t batch_id, std::string_view value);

}  // namespace driftd::checkpoint_codec
