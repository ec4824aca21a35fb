// The schema-driven JSON decoder: turns the raw records of an InputChunk into the typed columns
// of a RecordBatch, applying the source's malformed-record policy. This is the first step of
// every batch and the hottest loop of the daemon, so it decodes with simdjson's on-demand API
// straight from the chunk's buffer and allocates nothing per record in steady state.
//
// Thread-safety: a JsonDecoder is used by one thread at a time (it owns a simdjson parser);
// give each decoding thread its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/schema.h"

namespace driftd {

/// Why a record was malformed. The spelling of ToString() is the metric / progress label.
enum class MalformedReason : uint8_t {
  kNotJson,           // "not_json": not valid JSON (bad token, trailing content, bad escape)
  kTruncated,         // "truncated": the record ends inside an object, array or string
  kWrongType,         // "wrong_type": a field's value does not fit its schema type
  kMissingField,      // "missing_field": a non-nullable field is absent or null
  kInvalidUtf8,       // "invalid_utf8": the record's bytes are not valid UTF-8
  kTooDeep,           // "too_deep": nesting deeper than MalformedSpec::max_depth
  kTooLarge,          // "too_large": longer than MalformedSpec::max_record_bytes (not parsed),
                      // or an array<double> longer than MalformedSpec::max_array_length
  kNumberOutOfRange,  // "number_out_of_range": 1e400, an int beyond int32 / int64, ...
  kNotObject,         // "not_object": valid-looking JSON whose top level is not an object
  kEmpty,             // "empty": a record of zero bytes or only whitespace
  kDuplicateField,    // "duplicate_field": a schema field appears twice in one record
};
inline constexpr size_t kMalformedReasonCount = 11;

std::string_view ToString(MalformedReason reason);
std::optional<MalformedReason> ParseMalformedReason(std::string_view name);

/// Malformed records counted by reason; each record counts once, under its first reason.
struct MalformedCounts {
  std::array<int64_t, kMalformedReasonCount> by_reason{};

  int64_t operator[](MalformedReason reason) const {
    return by_reason[static_cast<size_t>(reason)];
  }
  int64_t total() const;
  void Add(const MalformedCounts& other);
};

/// A record rejected under the dead_letter policy, for the dead-letter stream.
struct DeadLetter {
  /// The record's bytes exactly as received; for a record the source cut (truncated), its
  /// first bytes only.
  std::string raw;
  MalformedReason reason = MalformedReason::kNotJson;
  std::string detail;  // e.g. "field 'prediction': expected double, got string"
  RecordPosition position;
  /// The record was longer than `raw`: the source kept only its first maxRecordBytes + 1
  /// bytes (InputChunk::Record::cut).
  bool truncated = false;
};

/// Decodes JSON object records against a Schema.
///
/// Value mapping (JSON -> column):
///  - timestamp: an RFC 3339 / ISO-8601 string (see ParseIso8601Micros) or a number of epoch
///    milliseconds (fractions allowed) -> int64 microseconds UTC.
///  - string: a JSON string; a number or boolean is kept as its JSON text, as Spark does.
///  - double: any JSON number; long: an integer within int64; int: an integer within int32;
///    boolean: true / false; array<double>: an array of numbers (integers accepted).
///  - null or absent: null if the field is nullable, else the record is malformed
///    (missing_field). Fields not in the schema are ignored but must still be valid JSON within
///    max_depth. Field names are matched exactly (after JSON unescaping).
///
/// Malformed policies:
///  - permissive: a bad value in a nullable field becomes null and the row is kept; a record
///    that cannot yield a row without breaking the schema (not JSON, truncated, a bad
///    non-nullable field, ...) is dropped. Either way the record is counted.
///  - drop: the row is skipped and counted.
///  - dead_letter: the row is skipped, counted, and a DeadLetter is appended to
///    `dead_letters` (if it is null the record is only counted).
///  - fail: Decode stops and returns Error(kMalformedRecord) naming the record's position.
///
/// max_depth is capped at kMaxSupportedDepth. A record of max_record_bytes or fewer is never
/// rejected for its size.
class JsonDecoder {
 public:
  /// The deepest nesting the decoder accepts whatever MalformedSpec::max_depth says.
  static constexpr int kMaxSupportedDepth = 1024;

  JsonDecoder(const Schema& schema, const MalformedSpec& spec);
  ~JsonDecoder();
  JsonDecoder(JsonDecoder&&) noexcept;
  JsonDecoder& operator=(JsonDecoder&&) noexcept;

  /// Appends the decoded rows of `chunk` to `out` (out.Reset(schema) is the caller's job), with
  /// out.positions[row] the record's position. Rows keep the chunk's order. `describe` turns a
  /// position into words for the fail policy's message ("topic t partition 3 offset 42"); when
  /// empty the message says "partition P offset O". The chunk need not be sealed: records too
  /// close to the end of an unpadded buffer are copied to a padded scratch buffer first.
  Status Decode(const InputChunk& chunk, RecordBatch& out, std::vector<DeadLetter>* dead_letters,
                const std::function<std::string(const RecordPosition&)>& describe = {});

  /// Malformed records seen since construction or ResetCounts().
  const MalformedCounts& counts() const;
  void ResetCounts();

  const Schema& schema() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace driftd
