#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/drift/codec.h"
#include "engine/executor/row_block.h"

namespace driftd {
namespace {

Schema AllTypes() {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, true},
                   {"event_time", FieldType::kTimestamp, true},
                   {"feature_vector", FieldType::kDoubleArray, true},
                   {"prediction", FieldType::kDouble, true},
                   {"n", FieldType::kLong, true},
                   {"ok", FieldType::kBoolean, true}};
  return schema;
}

// Row i: every field set, except that every third row has nulls.
RecordBatch Rows(const Schema& schema, size_t rows) {
  RecordBatch batch;
  batch.Reset(schema);
  for (size_t i = 0; i < rows; ++i) {
    const bool nulls = i % 3 == 2;
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      Column& column = batch.columns[f];
      column.valid.push_back(nulls && f > 0 ? 0 : 1);
      switch (column.type) {
        case FieldType::kString:
          column.str_data += "model-" + std::to_string(i % 4);
          column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
          break;
        case FieldType::kDoubleArray:
          if (!nulls) {
            for (size_t e = 0; e < i % 5; ++e) column.f64.push_back(static_cast<double>(i) + e / 10.0);
          }
          column.arr_offsets.push_back(static_cast<uint32_t>(column.f64.size()));
          break;
        case FieldType::kDouble: column.f64.push_back(nulls ? 0 : i * 0.5); break;
        default: column.i64.push_back(nulls ? 0 : static_cast<int64_t>(i) * 1000); break;
      }
    }
    batch.positions.push_back({3, static_cast<int64_t>(1000 + i), i % 7 == 3});
    ++batch.num_rows;
  }
  return batch;
}

TEST_CASE("row blocks carry every type, nulls included, with each row's times and the clock",
          "[executor][scale-out][codec]") {
  const Schema schema = AllTypes();
  const RecordBatch rows = Rows(schema, 50);
  RowBlockWriter writer("logs-3");
  for (size_t i = 0; i < rows.num_rows; ++i) {
    writer.AddRow(rows, i, static_cast<int64_t>(i) - 10, static_cast<int64_t>(i) * 7,
                  static_cast<int64_t>(i) * 7);
  }
  ClockMark mark{"logs-3", 343, true, false};
  const std::vector<std::string> blocks = writer.Finish(mark);
  REQUIRE(blocks.size() == 1);
  CHECK(writer.empty());

  RecordBatch decoded;
  decoded.Reset(schema);
  RowTimes times;
  ClockMark read;
  REQUIRE(ReadRowBlock(blocks[0], schema, 9, decoded, times, read));
  CHECK(read.partition == "logs-3");
  CHECK(read.max_event_us == 343);
  CHECK(read.more_available);
  CHECK_FALSE(read.idle);
  REQUIRE(decoded.num_rows == rows.num_rows);
  for (size_t i = 0; i < rows.num_rows; ++i) {
    CHECK(times.late_before[i] == static_cast<int64_t>(i) - 10);
    CHECK(times.event_us[i] == static_cast<int64_t>(i) * 7);
    CHECK(decoded.positions[i].partition == 9);
    // The task orders a routed row by its offset and counts its model's malformed records.
    CHECK(decoded.positions[i].offset == static_cast<int64_t>(1000 + i));
    CHECK(decoded.positions[i].malformed == (i % 7 == 3));
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      const Column& a = rows.columns[f];
      const Column& b = decoded.columns[f];
      REQUIRE(a.IsNull(i) == b.IsNull(i));
      if (a.IsNull(i)) continue;
      switch (a.type) {
        case FieldType::kString: CHECK(a.String(i) == b.String(i)); break;
        case FieldType::kDoubleArray:
          REQUIRE(a.ArraySize(i) == b.ArraySize(i));
          for (size_t e = 0; e < a.ArraySize(i); ++e) CHECK(a.ArrayData(i)[e] == b.ArrayData(i)[e]);
          break;
        case FieldType::kDouble: CHECK(a.f64[i] == b.f64[i]); break;
        default: CHECK(a.i64[i] == b.i64[i]); break;
      }
    }
  }
}

TEST_CASE("a batch's rows for a task are cut into bounded blocks whose clock never runs ahead "
          "of rows still to come",
          "[executor][scale-out][codec]") {
  const Schema schema = AllTypes();
  const RecordBatch rows = Rows(schema, 200);
  RowBlockWriter writer("logs-0");
  size_t added = 0;
  // Enough rows for several blocks of at most RowBlockWriter::kMaxBlockBytes.
  while (added < 40'000) {
    for (size_t i = 0; i < rows.num_rows; ++i, ++added) {
      writer.AddRow(rows, i, INT64_MIN, static_cast<int64_t>(added),
                    static_cast<int64_t>(added));
    }
  }
  const std::vector<std::string> blocks = writer.Finish(ClockMark{"logs-0", 99'999, false, false});
  REQUIRE(blocks.size() > 1);
  size_t total = 0;
  int64_t previous_max = INT64_MIN;
  for (size_t b = 0; b < blocks.size(); ++b) {
    CHECK(blocks[b].size() <= RowBlockWriter::kMaxBlockBytes + 4096);
    RecordBatch decoded;
    decoded.Reset(schema);
    RowTimes times;
    ClockMark mark;
    REQUIRE(ReadRowBlock(blocks[b], schema, 0, decoded, times, mark));
    total += decoded.num_rows;
    CHECK(mark.partition == "logs-0");
    if (b + 1 < blocks.size()) {
      // A partial block: the clock as of its own last row, with more to come.
      CHECK(mark.more_available);
      CHECK(mark.max_event_us == times.event_us.back());
    } else {
      CHECK(mark.max_event_us == 99'999);
    }
    CHECK(mark.max_event_us >= previous_max);
    previous_max = mark.max_event_us;
  }
  CHECK(total == added);
}

TEST_CASE("a row block of version 1 (written before blocks carried offsets) is still read",
          "[executor][scale-out][codec]") {
  // Version 1, partition "logs-2", clock 77 with more to come, one row: late_before -5,
  // event 70, model_id "m", the other fields null.
  std::string block;
  drift::ByteWriter w(block);
  w.U8(1);
  w.Str("logs-2");
  w.I64(77);
  w.U8(1);
  w.U32(1);
  w.I64(-5);
  w.I64(70);
  w.U8(1);
  w.Str("m");
  for (int field = 1; field < 6; ++field) w.U8(0);
  const Schema schema = AllTypes();
  RecordBatch decoded;
  decoded.Reset(schema);
  RowTimes times;
  ClockMark mark;
  REQUIRE(ReadRowBlock(block, schema, 4, decoded, times, mark));
  CHECK(mark.partition == "logs-2");
  CHECK(mark.max_event_us == 77);
  CHECK(mark.more_available);
  REQUIRE(decoded.num_rows == 1);
  CHECK(decoded.columns[0].String(0) == "m");
  CHECK(decoded.columns[1].IsNull(0));
  CHECK(times.late_before[0] == -5);
  CHECK(times.event_us[0] == 70);
  CHECK(decoded.positions[0].partition == 4);
  CHECK(decoded.positions[0].offset == 0);
  CHECK_FALSE(decoded.positions[0].malformed);
}

TEST_CASE("a truncated row block is refused, not misread", "[executor][scale-out][codec]") {
  const Schema schema = AllTypes();
  const RecordBatch rows = Rows(schema, 5);
  RowBlockWriter writer("logs-1");
  for (size_t i = 0; i < rows.num_rows; ++i) writer.AddRow(rows, i, 0, 0, 0);
  const std::string block = writer.Finish(ClockMark{"logs-1", 0, false, false}).front();
  for (size_t cut : {size_t{1}, block.size() / 2, block.size() - 1}) {
    RecordBatch decoded;
    decoded.Reset(schema);
    RowTimes times;
    ClockMark mark;
    auto status = ReadRowBlock(std::string_view(block).substr(0, cut), schema, 0, decoded, times,
                               mark);
    REQUIRE_FALSE(status);
    CHECK(status.error().code() == ErrorCode::kCorruption);
  }
}

}  // namespace
}  // namespace driftd

#include "engine/json_decoder.h"

namespace driftd {
namespace {

TEST_CASE("row blocks carry struct members, maps and array<string>, null entries included",
          "[executor][scale-out][codec][types]") {
  Schema schema;
  for (const auto& [name, type] :
       std::vector<std::pair<std::string, std::string>>{{"segment", "struct<country:string>"},
                                                        {"features", "map<string,double>"},
                                                        {"labels", "map<string,string>"},
                                                        {"tags", "array<string>"}}) {
    auto spec = ParseTypeSpec(type);
    REQUIRE(spec);
    AddDeclaredField(schema, name, *spec, true);
  }
  JsonDecoder decoder(schema, MalformedSpec{});
  InputChunk chunk;
  const std::vector<std::string> records = {
      R"({"segment":{"country":"DE"},"features":{"amount":1.5,"age":null},"labels":{"d":"ios"},"tags":["a",null]})",
      R"({"segment":null,"features":null,"labels":{},"tags":[]})",
      R"({"features":{"x":-2}})"};
  for (size_t i = 0; i < records.size(); ++i) chunk.Append(records[i], {0, static_cast<int64_t>(i)});
  chunk.Seal();
  RecordBatch rows;
  rows.Reset(schema);
  REQUIRE(decoder.Decode(chunk, rows, nullptr));
  RowBlockWriter writer("logs-0");
  for (size_t i = 0; i < rows.num_rows; ++i) writer.AddRow(rows, i, INT64_MIN, 0, 0);
  const std::vector<std::string> blocks = writer.Finish(ClockMark{"logs-0", 0, false, false});
  REQUIRE(blocks.size() == 1);
  RecordBatch read;
  read.Reset(schema);
  RowTimes times;
  ClockMark mark;
  REQUIRE(ReadRowBlock(blocks[0], schema, 0, read, times, mark));
  REQUIRE(read.num_rows == rows.num_rows);
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    for (size_t row = 0; row < rows.num_rows; ++row) {
      std::string sent;
      std::string received;
      AppendJsonValue(sent, rows.columns[f], row);
      AppendJsonValue(received, read.columns[f], row);
      INFO(schema.fields[f].name << " row " << row);
      CHECK(received == sent);
    }
  }
  std::string first;
  AppendJsonValue(first, read.columns[1], 0);
  CHECK(first == R"({"amount":1.5,"age":null})");
}

}  // namespace

TEST_CASE("a block of rows for the labels' join only says so, and its partition reads from its "
          "header",
          "[executor][scale-out][codec][labels]") {
  const Schema schema = AllTypes();
  const RecordBatch rows = Rows(schema, 12);
  RowBlockWriter copies("logs-1", /*join_only=*/true);
  RowBlockWriter routed("logs-1");
  for (size_t i = 0; i < rows.num_rows; ++i) {
    copies.AddRow(rows, i, 0, static_cast<int64_t>(i), static_cast<int64_t>(i));
    routed.AddRow(rows, i, 0, static_cast<int64_t>(i), static_cast<int64_t>(i));
  }
  const ClockMark mark{"logs-1", 11, false, false};
  const std::string copy_block = copies.Finish(mark).at(0);
  const std::string routed_block = routed.Finish(mark).at(0);
  // The same rows either way; only the version byte tells them apart (an older driftd refuses
  // the copies rather than folding them into every stage).
  CHECK(copy_block.substr(1) == routed_block.substr(1));
  CHECK(static_cast<uint8_t>(copy_block[0]) == 3);
  CHECK(static_cast<uint8_t>(routed_block[0]) == 2);
  for (const std::string* block : {&copy_block, &routed_block}) {
    auto partition = RowBlockPartition(*block);
    REQUIRE(partition);
    CHECK(*partition == "logs-1");
    RecordBatch read;
    read.Reset(schema);
    RowTimes times;
    ClockMark read_mark;
    bool join_only = !(block == &copy_block);
    REQUIRE(ReadRowBlock(*block, schema, 0, read, times, read_mark, &join_only));
    CHECK(join_only == (block == &copy_block));
    CHECK(read.num_rows == rows.num_rows);
    CHECK(read_mark.max_event_us == 11);
  }
  CHECK_FALSE(RowBlockPartition(std::string_view(copy_block).substr(0, 3)));
  std::string unknown = copy_block;
  unknown[0] = 4;
  CHECK_FALSE(RowBlockPartition(unknown));
}

}  // namespace driftd
