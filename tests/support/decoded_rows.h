// JSON records decoded into a RecordBatch by the project's decoder, as a test's input rows: the
// i-th record at offset i of partition 0, every record required to decode.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/batch.h"
#include "engine/json_decoder.h"
#include "engine/schema.h"

namespace driftd::testing {

inline RecordBatch DecodedRows(const Schema& schema, const std::vector<std::string>& records) {
  JsonDecoder decoder(schema, MalformedSpec{});
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) {
    chunk.Append(records[i], {0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  RecordBatch batch;
  batch.Reset(schema);
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == records.size());
  return batch;
}

}  // namespace driftd::testing
