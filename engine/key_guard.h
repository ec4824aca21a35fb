// Key length guard: a decoder wrapper that refuses records whose key columns (the model,
// segment and groupBy columns) hold a string longer than malformed.maxKeyBytes. A key is kept
// in memory, in the state key of every series of its model and in every output row about it:
// one model id of 600 KB made stats rows that no Kafka topic takes, and so stopped delivery for
// good. Such a record is malformed (too_large) under every policy: counted, dead-lettered under
// dead_letter, the query stopped under fail, dropped otherwise (a row cannot be kept without
// its key, so permissive drops it too).
//
// Thread-safety: as the wrapped decoder (one per thread).
#pragma once

#include <memory>
#include <vector>

#include "engine/pipeline_spec.h"
#include "engine/value_decoder.h"

namespace driftd {

/// The schema fields (indexes into `spec.schema`) of type string that key the query's state.
std::vector<int> KeyColumns(const PipelineSpec& spec);

/// `decoder` wrapped so that records with a key longer than `spec.source.malformed
/// .max_key_bytes` are malformed; `decoder` itself when the query has no string key column.
std::unique_ptr<ValueDecoder> GuardKeyLengths(std::unique_ptr<ValueDecoder> decoder,
                                              const PipelineSpec& spec);

}  // namespace driftd
