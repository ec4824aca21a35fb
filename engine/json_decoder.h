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
#include "engine/value_decoder.h"

namespace driftd {

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
class JsonDecoder final : public ValueDecoder {
 public:
  /// The deepest nesting the decoder accepts whatever MalformedSpec::max_depth says.
  static constexpr int kMaxSupportedDepth = 1024;

  JsonDecoder(const Schema& schema, const MalformedSpec& spec);
  ~JsonDecoder();
  JsonDecoder(JsonDecoder&&) noexcept;
  JsonDecoder& operator=(JsonDecoder&&) noexcept;

  /// The declaration of the `json` value format (it has no options).
  static ValueFormatDecl Declaration();

  /// Appends the decoded rows of `chunk` to `out` (out.Reset(schema) is the caller's job), with
  /// out.positions[row] the record's position. Rows keep the chunk's order. `describe` turns a
  /// position into words for the fail policy's message ("topic t partition 3 offset 42"); when
  /// empty the message says "partition P offset O". The chunk need not be sealed: records too
  /// close to the end of an unpadded buffer are copied to a padded scratch buffer first.
  Status Decode(const InputChunk& chunk, RecordBatch& out, std::vector<DeadLetter>* dead_letters,
                const DescribePosition& describe = {}) override;

  /// A field left out (used[f] false, and nullable) is null in every row; its value is walked
  /// as a field outside the schema is (valid JSON within max_depth) and not checked against its
  /// type: a value of the wrong type there does not make the record malformed.
  void Project(const std::vector<bool>& used) override;

  const MalformedCounts& counts() const override;
  void ResetCounts() override;
  const Schema& schema() const override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace driftd
