// Column::AppendRows: a range of rows copied in one piece is the same as the rows appended one
// by one, for every column type, with nulls, empty collections and ranges that start mid-column.
// KeepRows: the rows it keeps in place are those a copy of the kept rows would hold.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "engine/expr/projection.h"
#include "engine/json_decoder.h"

namespace driftd {
namespace {

Schema EveryType() {
  Schema schema;
  schema.fields = {
      {"name", FieldType::kString, true},         {"score", FieldType::kDouble, true},
      {"total", FieldType::kLong, true},          {"count", FieldType::kInt, true},
      {"flag", FieldType::kBoolean, true},        {"ts", FieldType::kTimestamp, true},
      {"values", FieldType::kDoubleArray, true},  {"tags", FieldType::kStringArray, true},
      {"weights", FieldType::kDoubleMap, true},   {"labels", FieldType::kStringMap, true},
  };
  return schema;
}

// `rows` records, each field present, null or absent at random.
RecordBatch Decode(size_t rows, std::mt19937_64& random) {
  std::vector<std::string> records;
  std::uniform_int_distribution<int> pick(0, 3);
  for (size_t i = 0; i < rows; ++i) {
    std::string r = "{";
    auto field = [&](const char* name, const std::string& value) {
      const int p = pick(random);
      if (p == 0) return;  // absent
      if (r.size() > 1) r += ",";
      r += std::string("\"") + name + "\":" + (p == 1 ? "null" : value);
    };
    const std::string n = std::to_string(i);
    field("name", "\"name-" + n + "\"");
    field("score", n + ".5");
    field("total", std::to_string(i * 100));
    field("count", n);
    field("flag", i % 2 ? "true" : "false");
    field("ts", "\"2026-12-05T10:00:0" + std::to_string(i % 10) + "Z\"");
    field("values", i % 5 == 0 ? "[]" : "[1.5," + n + "]");
    field("tags", i % 4 == 0 ? "[]" : "[\"a" + n + "\",null,\"b\"]");
    field("weights", i % 3 == 0 ? "{}" : "{\"w" + n + "\":0.25,\"v\":null}");
    field("labels", "{\"k\":\"v" + n + "\",\"z\":null}");
    r += "}";
    records.push_back(r);
  }
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) {
    chunk.Append(records[i], RecordPosition{0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  MalformedSpec spec;
  spec.policy = MalformedPolicy::kFail;
  JsonDecoder decoder(EveryType(), spec);
  RecordBatch batch;
  batch.Reset(EveryType());
  const Status decoded =
      decoder.Decode(chunk, batch, nullptr, [](const RecordPosition&) { return std::string(); });
  INFO((decoded ? std::string() : decoded.error().message()));
  REQUIRE(decoded);
  REQUIRE(batch.num_rows == rows);
  return batch;
}

std::vector<std::string> Rendered(const Column& column, size_t rows) {
  std::vector<std::string> out;
  for (size_t row = 0; row < rows; ++row) {
    std::string value;
    AppendJsonValue(value, column, row);
    out.push_back(value);
  }
  return out;
}

}  // namespace

TEST_CASE("a range of rows appended in one piece equals the rows appended one by one",
          "[engine][batch]") {
  std::mt19937_64 random(5);
  const RecordBatch from = Decode(200, random);
  for (int trial = 0; trial < 30; ++trial) {
    RecordBatch by_range;
    RecordBatch by_row;
    by_range.Reset(EveryType());
    by_row.Reset(EveryType());
    size_t rows = 0;
    // Several ranges after one another, some empty.
    for (int part = 0; part < 4; ++part) {
      size_t begin = std::uniform_int_distribution<size_t>(0, from.num_rows)(random);
      size_t end = std::uniform_int_distribution<size_t>(0, from.num_rows)(random);
      if (begin > end) std::swap(begin, end);
      for (size_t c = 0; c < from.columns.size(); ++c) {
        by_range.columns[c].AppendRows(from.columns[c], begin, end);
        for (size_t row = begin; row < end; ++row) by_row.columns[c].AppendRow(from.columns[c], row);
      }
      rows += end - begin;
    }
    for (size_t c = 0; c < from.columns.size(); ++c) {
      INFO("column " << EveryType().fields[c].name);
      const Column& a = by_range.columns[c];
      const Column& b = by_row.columns[c];
      REQUIRE(a.valid.size() == rows);
      CHECK(a.valid == b.valid);
      CHECK(Rendered(a, rows) == Rendered(b, rows));
      // The same shape underneath: offsets, entries and data.
      CHECK(a.str_offsets == b.str_offsets);
      CHECK(a.arr_offsets == b.arr_offsets);
      CHECK(a.key_offsets == b.key_offsets);
      CHECK(a.entry_valid == b.entry_valid);
      CHECK(a.str_data == b.str_data);
      CHECK(a.key_data == b.key_data);
    }
  }
}

TEST_CASE("rows kept in place, in runs or one by one, are the rows a copy of them holds",
          "[engine][batch]") {
  std::mt19937_64 random(9);
  for (int trial = 0; trial < 30; ++trial) {
    RecordBatch batch = Decode(150, random);
    // Runs of kept and dropped rows of random lengths, from single rows to long runs.
    std::vector<uint8_t> keep;
    const size_t longest = trial % 3 == 0 ? 1 : 40;
    while (keep.size() < batch.num_rows) {
      const size_t run = std::uniform_int_distribution<size_t>(1, longest)(random);
      const uint8_t kept = std::uniform_int_distribution<int>(0, 1)(random);
      for (size_t i = 0; i < run && keep.size() < batch.num_rows; ++i) keep.push_back(kept);
    }
    RecordBatch copied;
    copied.Reset(EveryType());
    for (size_t c = 0; c < batch.columns.size(); ++c) {
      for (size_t row = 0; row < batch.num_rows; ++row) {
        if (keep[row]) copied.columns[c].AppendRow(batch.columns[c], row);
      }
    }
    const size_t rows = static_cast<size_t>(std::count(keep.begin(), keep.end(), 1));
    KeepRows(batch, keep);
    REQUIRE(batch.num_rows == rows);
    for (size_t c = 0; c < batch.columns.size(); ++c) {
      INFO("column " << EveryType().fields[c].name);
      const Column& a = batch.columns[c];
      const Column& b = copied.columns[c];
      CHECK(a.valid == b.valid);
      CHECK(Rendered(a, rows) == Rendered(b, rows));
      CHECK(a.str_offsets == b.str_offsets);
      CHECK(a.arr_offsets == b.arr_offsets);
      CHECK(a.str_data == b.str_data);
      CHECK(a.f64.size() == b.f64.size());
    }
  }
}

}  // namespace driftd
