// libFuzzer harness: the schema-driven JSON decoder on arbitrary records, under every malformed
// policy and with small and default size and depth limits. The first byte picks the policy and
// the limits; the rest is split into records at newlines, as the file and socket sources split
// their input. Every record must end up as a row or as a counted malformed record, and a dead
// letter must hold the record's bytes exactly.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/batch.h"
#include "engine/json_decoder.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace driftd;

Schema FuzzSchema(bool nullable, bool nested) {
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
  if (!nested) return schema;
  // Named features and nested objects: a struct (with a struct, a map and an array inside), maps
  // of both kinds and an array<string>.
  for (const auto& [name, type] : {
           std::pair<const char*, const char*>{"segment", "struct<country:string,user:struct<age:int>,"
                                                          "extra:map<string,string>,tags:array<string>>"},
           {"features", "map<string,double>"},
           {"labels", "map<string,string>"},
           {"tags", "array<string>"}}) {
    auto spec = ParseTypeSpec(type);
    if (!spec) std::abort();
    AddDeclaredField(schema, name, *spec, nullable);
  }
  return schema;
}

// The columns' offsets hold together: one per row (plus one), ascending, and the entries of
// collections as many as their last offset says.
void CheckColumns(const RecordBatch& batch) {
  for (const Column& column : batch.columns) {
    if (column.valid.size() != batch.num_rows) std::abort();
    if (column.type == FieldType::kString &&
        (column.str_offsets.size() != batch.num_rows + 1 ||
         column.str_offsets.back() != column.str_data.size())) {
      std::abort();
    }
    if (!IsCollection(column.type)) continue;
    if (column.arr_offsets.size() != batch.num_rows + 1) std::abort();
    for (size_t row = 0; row < batch.num_rows; ++row) {
      if (column.arr_offsets[row] > column.arr_offsets[row + 1]) std::abort();
    }
    if (column.type == FieldType::kDoubleArray) {
      if (column.arr_offsets.back() != column.f64.size()) std::abort();
      continue;
    }
    const size_t entries = column.arr_offsets.back();
    if (column.entry_valid.size() != entries) std::abort();
    if (IsMap(column.type) && (column.key_offsets.size() != entries + 1 ||
                               column.key_offsets.back() != column.key_data.size())) {
      std::abort();
    }
    if (column.type == FieldType::kDoubleMap ? column.f64.size() != entries
                                             : (column.str_offsets.size() != entries + 1 ||
                                                column.str_offsets.back() != column.str_data.size())) {
      std::abort();
    }
  }
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
  const Schema schema = FuzzSchema(/*nullable=*/(control & 16) != 0, /*nested=*/(control & 64) != 0);

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
  CheckColumns(batch);
  for (const DeadLetter& letter : dead_letters) {
    const int64_t index = letter.position.offset;
    if (index < 0 || index >= static_cast<int64_t>(records.size())) std::abort();
    if (letter.raw != records[static_cast<size_t>(index)]) std::abort();
  }
  return 0;
}
