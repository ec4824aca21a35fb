// Numbers: array<double> elements go through the decoder's own fast scanner, scalar doubles
// through simdjson. Both must give the correctly rounded double (checked against strtod) and
// agree on what is malformed.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/json_decoder.h"

namespace driftd {
namespace {

Schema ArrayAndScalarSchema() {
  Schema schema;
  schema.fields = {{"a", FieldType::kDoubleArray, true}, {"d", FieldType::kDouble, true}};
  return schema;
}

uint64_t Bits(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Numbers of every shape the scanner distinguishes: signs, one- and many-digit integer parts,
// short and long fractions, exponents, values at the edge of the exact fast path.
std::vector<std::string> NumberTexts() {
  std::vector<std::string> texts = {"0",
                                    "-0",
                                    "1",
                                    "-1",
                                    "0.5",
                                    "-0.5",
                                    "10",
                                    "123456789",
                                    "0.000001",
                                    "0.1",
                                    "0.2",
                                    "0.3",
                                    "1e22",
                                    "1e23",
                                    "-1e-22",
                                    "1e-23",
                                    "9007199254740991",
                                    "9007199254740992",
                                    "9007199254740993",
                                    "18446744073709551615",
                                    "18446744073709551616",
                                    "123456789012345678901234567890",
                                    "0.12345678901234567890",
                                    "1.7976931348623157e308",
                                    "2.2250738585072014e-308",
                                    "4.9e-324",
                                    "1e-320",
                                    "1E5",
                                    "1e+5",
                                    "2.5E-3",
                                    "-0.0",
                                    "0.000000000000000000000000001",
                                    "1234567.1234567",
                                    "3.141592653589793",
                                    "12345678.12345678",
                                    "99999999",
                                    "100000000",
                                    "0.99999999",
                                    "123456789012345678"};
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_int_distribution<int> precision(0, 17);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (int i = 0; i < 3000; ++i) {
    const double value = normal(rng);
    switch (i % 4) {
      case 0:
        texts.push_back(fmt::format("{:.{}f}", value, precision(rng)));
        break;
      case 1:
        texts.push_back(fmt::format("{}", value));  // shortest round-trip form
        break;
      case 2:
        texts.push_back(fmt::format("{:.{}e}", value, precision(rng)));
        break;
      default:
        texts.push_back(fmt::format("{}e{}", static_cast<int64_t>(value * 1e6), exponent(rng)));
        break;
    }
  }
  return texts;
}

}  // namespace

TEST_CASE("array elements and scalar doubles decode to the correctly rounded double",
          "[decoder][numbers]") {
  const std::vector<std::string> texts = NumberTexts();
  std::vector<std::string> records;
  for (const std::string& text : texts) {
    records.push_back(fmt::format(R"({{"a":[{0}, {0},{0}],"d":{0}}})", text));
  }
  JsonDecoder decoder(ArrayAndScalarSchema(), MalformedSpec{});
  RecordBatch batch;
  batch.Reset(ArrayAndScalarSchema());
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i)
    chunk.Append(records[i], {0, static_cast<int64_t>(i)});
  chunk.Seal();
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == texts.size());
  CHECK(decoder.counts().total() == 0);
  for (size_t row = 0; row < texts.size(); ++row) {
    INFO(texts[row]);
    const double expected = std::strtod(texts[row].c_str(), nullptr);
    REQUIRE_FALSE(batch.columns[1].IsNull(row));
    CHECK(Bits(batch.columns[1].f64[row]) == Bits(expected));
    REQUIRE_FALSE(batch.columns[0].IsNull(row));
    REQUIRE(batch.columns[0].ArraySize(row) == 3);
    for (size_t k = 0; k < 3; ++k) {
      CHECK(Bits(batch.columns[0].ArrayData(row)[k]) == Bits(expected));
    }
  }
}

TEST_CASE("array whitespace is accepted and malformed arrays are classified like simdjson's",
          "[decoder][numbers]") {
  Schema schema;
  schema.fields = {{"a", FieldType::kDoubleArray, true}};
  const std::vector<std::pair<std::string, std::vector<double>>> good = {
      {"[ 1 , 2 ]", {1, 2}}, {"[\n1,\t2\r]", {1, 2}}, {"[]", {}},
      {"[ ]", {}},           {"[-0.5e1]", {-5}},      {"[0]", {0}}};
  const std::vector<std::pair<std::string, MalformedReason>> bad = {
      {"[1,]", MalformedReason::kNotJson},
      {"[01]", MalformedReason::kNotJson},
      {"[1 2]", MalformedReason::kNotJson},
      {"[-]", MalformedReason::kNotJson},
      {"[.5]", MalformedReason::kNotJson},
      {"[1.]", MalformedReason::kNotJson},
      {"[1e]", MalformedReason::kNotJson},
      {"[+1]", MalformedReason::kNotJson},
      {"[1,,2]", MalformedReason::kNotJson},
      {"[1e5x]", MalformedReason::kNotJson},
      {"[-01.5]", MalformedReason::kNotJson},
      {"[1e400]", MalformedReason::kNumberOutOfRange},
      {"[2,-1e400]", MalformedReason::kNumberOutOfRange}};
  MalformedSpec spec;
  spec.policy = MalformedPolicy::kDeadLetter;
  JsonDecoder decoder(schema, spec);
  RecordBatch batch;
  batch.Reset(schema);
  InputChunk chunk;
  int64_t offset = 0;
  for (const auto& [text, values] : good) chunk.Append(R"({"a":)" + text + "}", {0, offset++});
  for (const auto& [text, reason] : bad) chunk.Append(R"({"a":)" + text + "}", {0, offset++});
  chunk.Seal();
  std::vector<DeadLetter> dead_letters;
  REQUIRE(decoder.Decode(chunk, batch, &dead_letters));

  REQUIRE(batch.num_rows == good.size());
  size_t row = 0;
  for (const auto& [text, values] : good) {
    INFO(text);
    CHECK_FALSE(batch.columns[0].IsNull(row));
    REQUIRE(batch.columns[0].ArraySize(row) == values.size());
    for (size_t k = 0; k < values.size(); ++k) {
      CHECK(batch.columns[0].ArrayData(row)[k] == values[k]);
    }
    ++row;
  }
  REQUIRE(dead_letters.size() == bad.size());
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO(bad[i].first << ": " << dead_letters[i].detail);
    CHECK(dead_letters[i].reason == bad[i].second);
  }
}

TEST_CASE("a permissive array with a bad element is null while the rest of the row stays",
          "[decoder][numbers]") {
  MalformedSpec spec;
  JsonDecoder decoder(ArrayAndScalarSchema(), spec);
  RecordBatch batch;
  batch.Reset(ArrayAndScalarSchema());
  InputChunk chunk;
  chunk.Append(R"({"a":[1,2,"x",4],"d":3})", {0, 0});
  chunk.Append(R"({"a":[5,6],"d":7})", {0, 1});
  chunk.Seal();
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == 2);
  CHECK(batch.columns[0].IsNull(0));
  CHECK(batch.columns[0].ArraySize(0) == 0);
  CHECK(batch.columns[1].f64[0] == 3.0);
  REQUIRE(batch.columns[0].ArraySize(1) == 2);
  CHECK(batch.columns[0].ArrayData(1)[0] == 5.0);
  CHECK(batch.columns[0].ArrayData(1)[1] == 6.0);
  CHECK(decoder.counts()[MalformedReason::kWrongType] == 1);
}

TEST_CASE("an int or long column takes a whole number written as a double, not a fraction",
          "[decoder][numbers]") {
  // Python's json and pandas write an integer label held as a float as 1.0: under the permissive
  // policy it was nulled (and the row counted malformed), so an error series or a join lost
  // every label. A whole number is that integer; a fraction is still the wrong type, counted.
  Schema schema;
  schema.fields = {{"i", FieldType::kInt, true}, {"l", FieldType::kLong, true}};
  const std::vector<std::pair<std::string, int64_t>> whole = {
      {"1.0", 1},     {"0.0", 0},       {"-0.0", 0},          {"-3.0", -3},
      {"2e3", 2000},  {"1.5e1", 15},    {"2147483647.0", 2147483647},
      {"7", 7}};
  const std::vector<std::string> not_whole = {"1.5", "0.1", "-2.25", "1e-3"};
  JsonDecoder decoder(schema, MalformedSpec{});  // permissive
  RecordBatch batch;
  batch.Reset(schema);
  InputChunk chunk;
  int64_t offset = 0;
  for (const auto& [text, value] : whole) {
    chunk.Append(fmt::format(R"({{"i":{0},"l":{0}}})", text), {0, offset++});
  }
  for (const std::string& text : not_whole) {
    chunk.Append(fmt::format(R"({{"i":{0},"l":{0}}})", text), {0, offset++});
  }
  // Whole, but beyond the column's range: out of range, as the integer would be.
  chunk.Append(R"({"i":3e9,"l":1e19})", {0, offset++});
  chunk.Seal();
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == whole.size() + not_whole.size() + 1);
  size_t row = 0;
  for (const auto& [text, value] : whole) {
    INFO(text);
    REQUIRE_FALSE(batch.columns[0].IsNull(row));
    CHECK(batch.columns[0].i64[row] == value);
    REQUIRE_FALSE(batch.columns[1].IsNull(row));
    CHECK(batch.columns[1].i64[row] == value);
    ++row;
  }
  for (const std::string& text : not_whole) {
    INFO(text);
    CHECK(batch.columns[0].IsNull(row));
    CHECK(batch.columns[1].IsNull(row));
    ++row;
  }
  CHECK(batch.columns[0].IsNull(row));
  CHECK(batch.columns[1].IsNull(row));
  // Counted once per record (its first problem).
  CHECK(decoder.counts()[MalformedReason::kWrongType] == static_cast<int64_t>(not_whole.size()));
  CHECK(decoder.counts()[MalformedReason::kNumberOutOfRange] == 1);
}

}  // namespace driftd
