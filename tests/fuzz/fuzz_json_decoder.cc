// libFuzzer harness: the schema-driven JSON decoder on arbitrary records, under every malformed
// policy and with small and default size and depth limits. The first byte picks the policy and
// the limits; the rest is split into records at newlines, as the file and socket sources split
// their input. Every record must end up as a row or as a counted malformed record, and a dead
// letter must hold the record's bytes exactly.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/json_decoder.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace driftd;

Schema FuzzSchema(bool nullable) {
  Schema schema;
  schema.fields = {
      {"model_id", FieldType::kString, false},
      {"event_time", FieldType::kTimestamp, nullable},
      {"feature_vector", FieldType::kDoubleArray, nullable},
      {"prediction", FieldType::kDouble, nullable},
      {"count", FieldType::kLong, nullable},
      {"bucket", FieldType::kInt, nullable},
      {"label", FieldType::kBoolean, nullable},
  };
  return schema;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  std::string_view input = fuzz::AsText(data + 1, size - 1);

  MalformedSpec spec;
  const MalformedPolicy policies[] = {MalformedPolicy::kPermissive, MalformedPolicy::kDrop,
                                      MalformedPolicy::kFail, MalformedPolicy::kDeadLetter};
  spec.policy = policies[control & 3];
  if (control & 4) spec.max_record_bytes = 64;
  if (control & 8) spec.max_depth = 3;
  const Schema schema = FuzzSchema(/*nullable=*/(control & 16) != 0);

  InputChunk chunk;
  std::vector<std::string_view> records;
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    std::string_view record = input.substr(start, end - start);
    chunk.Append(record, RecordPosition{0, static_cast<int64_t>(records.size())});
    records.push_back(record);
    start = end + 1;
  }
  // Half the inputs sealed (padded), half not: the decoder must handle both.
  if (control & 32) chunk.Seal();

  JsonDecoder decoder(schema, spec);
  RecordBatch batch;
  batch.Reset(schema);
  std::vector<DeadLetter> dead_letters;
  Status status = decoder.Decode(chunk, batch, &dead_letters);
  if (!status) {
    if (spec.policy != MalformedPolicy::kFail) std::abort();
    return 0;
  }
  const int64_t malformed = decoder.counts().total();
  if (static_cast<int64_t>(batch.num_rows) + malformed < static_cast<int64_t>(records.size())) {
    std::abort();  // a record neither kept nor counted
  }
  if (batch.positions.size() != batch.num_rows) std::abort();
  for (const DeadLetter& letter : dead_letters) {
    const int64_t index = letter.position.offset;
    if (index < 0 || index >= static_cast<int64_t>(records.size())) std::abort();
    if (letter.raw != records[static_cast<size_t>(index)]) std::abort();
  }
  return 0;
}
