// The JSON decoder: typed columns from JSON records, and every malformed-record path under
// every policy.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/json_decoder.h"

namespace driftd {
namespace {

// 2026-11-29T10:15:02Z, computed independently (Python's datetime).
constexpr int64_t k20261129T101502Z = 1'795'947'302'000'000;

Schema InferenceSchema() {
  Schema schema;
  schema.fields = {
      {"model_id", FieldType::kString, false},
      {"event_time", FieldType::kTimestamp, true},
      {"feature_vector", FieldType::kDoubleArray, true},
      {"prediction", FieldType::kDouble, true},
      {"ground_truth", FieldType::kDouble, true},
  };
  return schema;
}

Schema AllTypesSchema() {
  Schema schema;
  schema.fields = {
      {"ts", FieldType::kTimestamp, true},       {"name", FieldType::kString, true},
      {"score", FieldType::kDouble, true},       {"total", FieldType::kLong, true},
      {"count", FieldType::kInt, true},          {"flag", FieldType::kBoolean, true},
      {"values", FieldType::kDoubleArray, true},
  };
  return schema;
}

RecordPosition PositionOf(size_t index) { return {2, static_cast<int64_t>(1000 + index * 10)}; }

InputChunk MakeChunk(const std::vector<std::string>& records, bool seal = true) {
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) chunk.Append(records[i], PositionOf(i));
  if (seal) chunk.Seal();
  return chunk;
}

std::string Describe(const RecordPosition& position) {
  return fmt::format("file part-{:04}.json byte {}", position.partition, position.offset);
}

struct Decoded {
  RecordBatch batch;
  std::vector<DeadLetter> dead_letters;
  Status status;
  MalformedCounts counts;
};

Decoded DecodeRecords(const Schema& schema, const MalformedSpec& spec,
                      const std::vector<std::string>& records, bool seal = true) {
  JsonDecoder decoder(schema, spec);
  Decoded decoded;
  decoded.batch.Reset(schema);
  const InputChunk chunk = MakeChunk(records, seal);
  decoded.status = decoder.Decode(chunk, decoded.batch, &decoded.dead_letters, Describe);
  decoded.counts = decoder.counts();
  return decoded;
}

MalformedSpec Policy(MalformedPolicy policy) {
  MalformedSpec spec;
  spec.policy = policy;
  return spec;
}

const std::string kGood0 =
    R"({"model_id":"model-1","event_time":"2026-11-29T10:15:02.123Z",)"
    R"("feature_vector":[0.5,1,-2.25e1],"prediction":0.73,"ground_truth":1.0})";
const std::string kGood2 = R"({"model_id":"model-2","prediction":0.25})";

// One kind of malformed record for the inference schema.
struct BadCase {
  std::string name;
  std::string record;
  MalformedReason reason;
  /// Under permissive: the row is kept with prediction null (a bad nullable field).
  bool permissive_keeps = false;
};

std::vector<BadCase> BadCases() {
  return {
      {"trailing comma", R"({"model_id":"m","prediction":0.5,})", MalformedReason::kNotJson},
      {"trailing content", R"({"model_id":"m","prediction":0.5}})", MalformedReason::kNotJson},
      {"garbage", "hello world", MalformedReason::kNotJson},
      {"bad literal in an ignored field", R"({"model_id":"m","x":tru,"prediction":0.5})",
       MalformedReason::kNotJson},
      {"cut in a number", R"({"model_id":"m","prediction":0.12)", MalformedReason::kTruncated},
      {"cut in a nested object", R"({"model_id":"m","x":{"a":1})", MalformedReason::kTruncated},
      {"string for a double", R"({"model_id":"m","prediction":"NaN"})", MalformedReason::kWrongType,
       true},
      {"object for a double", R"({"model_id":"m","prediction":{"v":1}})",
       MalformedReason::kWrongType, true},
      {"required field missing", R"({"prediction":0.5})", MalformedReason::kMissingField},
      {"required field null", R"({"model_id":null,"prediction":0.5})",
       MalformedReason::kMissingField},
      {"invalid UTF-8", "{\"model_id\":\"m\xff\xfe\",\"prediction\":0.5}",
       MalformedReason::kInvalidUtf8},
      {"too deep",
       R"({"model_id":"m","x":)" + std::string(100, '[') + std::string(100, ']') +
           R"(,"prediction":0.5})",
       MalformedReason::kTooDeep},
      {"too large", R"({"model_id":"m","pad":")" + std::string(2 << 20, 'x') + R"("})",
       MalformedReason::kTooLarge},
      {"1e400", R"({"model_id":"m","prediction":1e400})", MalformedReason::kNumberOutOfRange, true},
      {"array top level", "[1,2,3]", MalformedReason::kNotObject},
      {"empty line", "", MalformedReason::kEmpty},
      {"blank line", " \t\r", MalformedReason::kEmpty},
      {"duplicate field", R"({"model_id":"m","prediction":0.5,"prediction":0.6})",
       MalformedReason::kDuplicateField},
  };
}

}  // namespace

TEST_CASE("every field type is decoded into its column", "[decoder]") {
  const Schema schema = AllTypesSchema();
  const Decoded decoded = DecodeRecords(
      schema, MalformedSpec{},
      {R"({"ts":"2026-11-29T10:15:02.5Z","name":"caf\u00e9 \"x\"\n","score":-1.5e-3,)"
       R"("total":-9223372036854775807,"count":-2147483648,"flag":true,"values":[1,2.5,-3e2]})",
       R"({"ts":1795947302123,"name":"","score":7,"total":42,"count":2147483647,"flag":false,)"
       R"("values":[]})"});
  REQUIRE(decoded.status);
  const RecordBatch& batch = decoded.batch;
  REQUIRE(batch.num_rows == 2);
  CHECK(decoded.counts.total() == 0);

  CHECK(batch.columns[0].i64[0] == k20261129T101502Z + 500'000);
  CHECK(batch.columns[0].i64[1] == k20261129T101502Z + 123'000);
  CHECK(batch.columns[1].String(0) == "caf\xc3\xa9 \"x\"\n");
  CHECK(batch.columns[1].String(1).empty());
  CHECK_FALSE(batch.columns[1].IsNull(1));
  CHECK(batch.columns[2].f64[0] == -1.5e-3);
  CHECK(batch.columns[2].f64[1] == 7.0);
  CHECK(batch.columns[3].i64[0] == -9223372036854775807);
  CHECK(batch.columns[3].i64[1] == 42);
  CHECK(batch.columns[4].i64[0] == -2147483648);
  CHECK(batch.columns[4].i64[1] == 2147483647);
  CHECK(batch.columns[5].i64[0] == 1);
  CHECK(batch.columns[5].i64[1] == 0);
  const Column& values = batch.columns[6];
  REQUIRE(values.ArraySize(0) == 3);
  CHECK(values.ArrayData(0)[0] == 1.0);
  CHECK(values.ArrayData(0)[1] == 2.5);
  CHECK(values.ArrayData(0)[2] == -300.0);
  CHECK(values.ArraySize(1) == 0);
  CHECK_FALSE(values.IsNull(1));
  for (const Column& column : batch.columns) {
    CHECK_FALSE(column.IsNull(0));
    CHECK_FALSE(column.IsNull(1));
  }
  CHECK(batch.positions[0].offset == PositionOf(0).offset);
  CHECK(batch.positions[1].offset == PositionOf(1).offset);
}

TEST_CASE("timestamps accept ISO-8601 with offsets and fractions, and epoch milliseconds",
          "[decoder][timestamp]") {
  Schema schema;
  schema.fields = {{"t", FieldType::kTimestamp, true}};
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {R"("2026-11-29T10:15:02Z")", k20261129T101502Z},
      {R"("2026-11-29T11:15:02+01:00")", k20261129T101502Z},
      {R"("2026-11-29T04:45:02.25-05:30")", k20261129T101502Z + 250'000},
      {R"("2026-11-29T10:15:02.123456789Z")", k20261129T101502Z + 123'456},
      {R"("2026-11-29 10:15:02")", k20261129T101502Z},
      {"1795947302000", k20261129T101502Z},
      {"1795947302123.5", k20261129T101502Z + 123'500},
      {"-1", -1000},
      {"0", 0},
  };
  std::vector<std::string> records;
  for (const auto& [json, expected] : cases) records.push_back(R"({"t":)" + json + "}");
  const Decoded decoded = DecodeRecords(schema, MalformedSpec{}, records);
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].first);
    CHECK_FALSE(decoded.batch.columns[0].IsNull(i));
    CHECK(decoded.batch.columns[0].i64[i] == cases[i].second);
  }
}

TEST_CASE("bad timestamps are wrong_type and huge epoch values are out of range",
          "[decoder][timestamp]") {
  Schema schema;
  schema.fields = {{"t", FieldType::kTimestamp, true}};
  const Decoded decoded =
      DecodeRecords(schema, Policy(MalformedPolicy::kDeadLetter),
                    {R"({"t":"2026-13-01T00:00:00Z"})", R"({"t":"yesterday"})", R"({"t":true})",
                     R"({"t":9223372036854776})", R"({"t":1e300})"});
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 0);
  REQUIRE(decoded.dead_letters.size() == 5);
  CHECK(decoded.dead_letters[0].reason == MalformedReason::kWrongType);
  CHECK_THAT(decoded.dead_letters[0].detail, Catch::Contains("ISO-8601"));
  CHECK(decoded.dead_letters[1].reason == MalformedReason::kWrongType);
  CHECK(decoded.dead_letters[2].reason == MalformedReason::kWrongType);
  CHECK(decoded.dead_letters[3].reason == MalformedReason::kNumberOutOfRange);
  CHECK(decoded.dead_letters[4].reason == MalformedReason::kNumberOutOfRange);
}

TEST_CASE("null or missing nullable fields decode as null", "[decoder]") {
  const Decoded decoded = DecodeRecords(
      InferenceSchema(), MalformedSpec{},
      {R"({"model_id":"m","event_time":null,"feature_vector":null,"prediction":null})",
       R"({"model_id":"m"})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 2);
  CHECK(decoded.counts.total() == 0);
  for (size_t row = 0; row < 2; ++row) {
    CHECK(decoded.batch.columns[0].String(row) == "m");
    for (size_t column = 1; column < 5; ++column) {
      CHECK(decoded.batch.columns[column].IsNull(row));
    }
    CHECK(decoded.batch.columns[2].ArraySize(row) == 0);
  }
}

TEST_CASE("a null or missing non-nullable field makes the record missing_field", "[decoder]") {
  for (const auto policy : {MalformedPolicy::kPermissive, MalformedPolicy::kDrop}) {
    const Decoded decoded = DecodeRecords(InferenceSchema(), Policy(policy),
                                          {R"({"prediction":0.5})", R"({"model_id":null})"});
    REQUIRE(decoded.status);
    CHECK(decoded.batch.num_rows == 0);
    CHECK(decoded.counts[MalformedReason::kMissingField] == 2);
  }
  const Decoded failed =
      DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kFail), {R"({"prediction":0.5})"});
  REQUIRE_FALSE(failed.status);
  CHECK_THAT(failed.status.error().message(), Catch::Contains("model_id"));
}

TEST_CASE("extra fields are ignored, in any order and at any depth", "[decoder]") {
  const Decoded decoded = DecodeRecords(
      InferenceSchema(), MalformedSpec{},
      {R"({"request":{"id":"r-1","tags":["a","b",{"c":[1,2,{"d":null}]}]},"prediction":0.5,)"
       R"("latency_ms":12.5,"ok":true,"note":null,"model_id":"m","big":1e400,"z":-0})",
       R"({"ground_truth":0,"prediction":1,"model_id":"n","event_time":"2026-11-29T10:15:02Z"})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 2);
  CHECK(decoded.counts.total() == 0);
  CHECK(decoded.batch.columns[0].String(0) == "m");
  CHECK(decoded.batch.columns[3].f64[0] == 0.5);
  CHECK(decoded.batch.columns[0].String(1) == "n");
  CHECK(decoded.batch.columns[1].i64[1] == k20261129T101502Z);
  CHECK(decoded.batch.columns[3].f64[1] == 1.0);
  CHECK(decoded.batch.columns[4].f64[1] == 0.0);
  CHECK_FALSE(decoded.batch.columns[4].IsNull(1));
}

TEST_CASE("field names are matched after JSON unescaping", "[decoder]") {
  const Decoded decoded =
      DecodeRecords(InferenceSchema(), MalformedSpec{},
                    {R"({"model\u005fid":"m","pred\"iction":1,"prediction":2})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(decoded.batch.columns[0].String(0) == "m");
  CHECK(decoded.batch.columns[3].f64[0] == 2.0);
}

TEST_CASE("numbers and booleans in a string field keep their JSON text", "[decoder]") {
  const Decoded decoded =
      DecodeRecords(InferenceSchema(), MalformedSpec{},
                    {R"({"model_id":3})", R"({"model_id":-1.5e3 })", R"({"model_id":true})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 3);
  CHECK(decoded.batch.columns[0].String(0) == "3");
  CHECK(decoded.batch.columns[0].String(1) == "-1.5e3");
  CHECK(decoded.batch.columns[0].String(2) == "true");
}

TEST_CASE("integers are range-checked for int and long", "[decoder]") {
  // A whole number written as a double (3.0, 1e3) is that integer; a fraction is a wrong type
  // (tests/engine/decoder_numbers_test.cc has more of both).
  Schema schema;
  schema.fields = {{"i", FieldType::kInt, true}, {"l", FieldType::kLong, true}};
  const Decoded decoded =
      DecodeRecords(schema, Policy(MalformedPolicy::kDeadLetter),
                    {R"({"i":2147483648})", R"({"i":-2147483649})", R"({"l":9223372036854775808})",
                     R"({"l":-9223372036854775809})", R"({"i":3.0})", R"({"l":1e3})",
                     R"({"i":3.5})", R"({"l":1e-3})", R"({"i":"7"})",
                     R"({"i":-0,"l":9223372036854775807})"});
  REQUIRE(decoded.status);
  const std::vector<MalformedReason> expected = {
      MalformedReason::kNumberOutOfRange, MalformedReason::kNumberOutOfRange,
      MalformedReason::kNumberOutOfRange, MalformedReason::kNumberOutOfRange,
      MalformedReason::kWrongType,        MalformedReason::kWrongType,
      MalformedReason::kWrongType};
  REQUIRE(decoded.dead_letters.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO(decoded.dead_letters[i].raw << " " << decoded.dead_letters[i].detail);
    CHECK(decoded.dead_letters[i].reason == expected[i]);
  }
  CHECK_THAT(decoded.dead_letters[0].detail,
             Catch::Contains("field 'i'") && Catch::Contains("out of range for int"));
  REQUIRE(decoded.batch.num_rows == 3);
  CHECK(decoded.batch.columns[0].i64[0] == 3);
  CHECK(decoded.batch.columns[1].i64[1] == 1000);
  CHECK(decoded.batch.columns[0].i64[2] == 0);
  CHECK(decoded.batch.columns[1].i64[2] == 9223372036854775807);
}

TEST_CASE("booleans and arrays reject values of other types", "[decoder]") {
  Schema schema;
  schema.fields = {{"b", FieldType::kBoolean, true}, {"v", FieldType::kDoubleArray, true}};
  const Decoded decoded =
      DecodeRecords(schema, Policy(MalformedPolicy::kDrop),
                    {R"({"b":"true"})", R"({"b":1})", R"({"v":[1,"2"]})", R"({"v":[1,null]})",
                     R"({"v":[[1]]})", R"({"v":{"0":1}})", R"({"v":[1,1e400]})", R"({"v":"[1]"})"});
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 0);
  CHECK(decoded.counts[MalformedReason::kWrongType] == 7);
  CHECK(decoded.counts[MalformedReason::kNumberOutOfRange] == 1);
}

TEST_CASE("permissive keeps a row whose bad nullable fields become null", "[decoder]") {
  const Decoded decoded =
      DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kPermissive),
                    {R"({"model_id":"m","event_time":"soon","feature_vector":[1,"x",[2,[3]],4],)"
                     R"("prediction":"NaN","ground_truth":0.5})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(decoded.counts.total() == 1);
  CHECK(decoded.counts[MalformedReason::kWrongType] == 1);
  const RecordBatch& batch = decoded.batch;
  CHECK(batch.columns[0].String(0) == "m");
  CHECK(batch.columns[1].IsNull(0));
  CHECK(batch.columns[2].IsNull(0));
  CHECK(batch.columns[2].ArraySize(0) == 0);
  CHECK(batch.columns[3].IsNull(0));
  CHECK(batch.columns[4].f64[0] == 0.5);
}

TEST_CASE("permissive still drops a record that is broken after a bad field", "[decoder]") {
  const Decoded decoded = DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kPermissive),
                                        {R"({"model_id":"m","prediction":"x","junk":[1,2}})",
                                         R"({"model_id":"m","prediction":"x","deep":)" +
                                             std::string(80, '[') + std::string(80, ']') + "}"});
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 0);
  CHECK(decoded.counts[MalformedReason::kNotJson] == 1);
  CHECK(decoded.counts[MalformedReason::kTooDeep] == 1);
  CHECK(decoded.counts.total() == 2);
}

TEST_CASE("each malformed reason is counted under every policy", "[decoder][malformed]") {
  for (const BadCase& bad : BadCases()) {
    INFO("case: " << bad.name);
    const std::vector<std::string> records = {kGood0, bad.record, kGood2};

    DYNAMIC_SECTION("drop skips the record and counts it: " << bad.name) {
      const Decoded decoded =
          DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kDrop), records);
      REQUIRE(decoded.status);
      REQUIRE(decoded.batch.num_rows == 2);
      CHECK(decoded.batch.positions[0].offset == PositionOf(0).offset);
      CHECK(decoded.batch.positions[1].offset == PositionOf(2).offset);
      CHECK(decoded.batch.columns[0].String(1) == "model-2");
      CHECK(decoded.counts[bad.reason] == 1);
      CHECK(decoded.counts.total() == 1);
      CHECK(decoded.dead_letters.empty());
    }
    DYNAMIC_SECTION("dead_letter keeps the raw bytes, reason and position: " << bad.name) {
      const Decoded decoded =
          DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kDeadLetter), records);
      REQUIRE(decoded.status);
      CHECK(decoded.batch.num_rows == 2);
      REQUIRE(decoded.dead_letters.size() == 1);
      const DeadLetter& letter = decoded.dead_letters[0];
      CHECK(letter.raw == bad.record);
      CHECK(letter.reason == bad.reason);
      CHECK_FALSE(letter.detail.empty());
      CHECK(letter.position.partition == PositionOf(1).partition);
      CHECK(letter.position.offset == PositionOf(1).offset);
      CHECK(decoded.counts[bad.reason] == 1);
    }
    DYNAMIC_SECTION("fail stops with an error naming position and reason: " << bad.name) {
      const Decoded decoded =
          DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kFail), records);
      REQUIRE_FALSE(decoded.status);
      CHECK(decoded.status.error().code() == ErrorCode::kMalformedRecord);
      CHECK_THAT(decoded.status.error().message(),
                 Catch::Contains(Describe(PositionOf(1))) &&
                     Catch::Contains(std::string(ToString(bad.reason))));
      CHECK(decoded.counts[bad.reason] == 1);
      CHECK(decoded.batch.num_rows == 1);  // the rows before it
    }
    DYNAMIC_SECTION("permissive nulls a bad field or drops the record: " << bad.name) {
      const Decoded decoded =
          DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kPermissive), records);
      REQUIRE(decoded.status);
      CHECK(decoded.counts[bad.reason] == 1);
      CHECK(decoded.counts.total() == 1);
      if (bad.permissive_keeps) {
        REQUIRE(decoded.batch.num_rows == 3);
        CHECK(decoded.batch.positions[1].offset == PositionOf(1).offset);
        CHECK(decoded.batch.columns[0].String(1) == "m");
        CHECK(decoded.batch.columns[3].IsNull(1));
        CHECK(decoded.batch.columns[3].f64[2] == 0.25);
      } else {
        REQUIRE(decoded.batch.num_rows == 2);
        CHECK(decoded.batch.positions[1].offset == PositionOf(2).offset);
      }
    }
  }
}

TEST_CASE("the fail message falls back to partition and offset without a describer",
          "[decoder][malformed]") {
  JsonDecoder decoder(InferenceSchema(), Policy(MalformedPolicy::kFail));
  RecordBatch batch;
  batch.Reset(InferenceSchema());
  const InputChunk chunk = MakeChunk({kGood0, "{"});
  const Status status = decoder.Decode(chunk, batch, nullptr);
  REQUIRE_FALSE(status);
  CHECK_THAT(status.error().message(),
             Catch::Contains("partition 2 offset 1010") && Catch::Contains("truncated"));
}

TEST_CASE("counts accumulate by reason across chunks until reset", "[decoder][malformed]") {
  JsonDecoder decoder(InferenceSchema(), Policy(MalformedPolicy::kDrop));
  RecordBatch batch;
  batch.Reset(InferenceSchema());
  REQUIRE(decoder.Decode(MakeChunk({kGood0, "", "[1]", R"({"prediction":1})"}), batch, nullptr));
  REQUIRE(decoder.Decode(MakeChunk({"", kGood2, "{\"model_id\":\"\xc0\xaf\"}"}), batch, nullptr));
  CHECK(batch.num_rows == 2);  // appended, not replaced
  CHECK(batch.columns[0].String(0) == "model-1");
  CHECK(batch.columns[0].String(1) == "model-2");
  const MalformedCounts& counts = decoder.counts();
  CHECK(counts[MalformedReason::kEmpty] == 2);
  CHECK(counts[MalformedReason::kNotObject] == 1);
  CHECK(counts[MalformedReason::kMissingField] == 1);
  CHECK(counts[MalformedReason::kInvalidUtf8] == 1);
  CHECK(counts.total() == 5);

  MalformedCounts sum;
  sum.Add(counts);
  sum.Add(counts);
  CHECK(sum[MalformedReason::kEmpty] == 4);
  CHECK(sum.total() == 10);

  decoder.ResetCounts();
  CHECK(decoder.counts().total() == 0);
}

TEST_CASE("reason names round-trip", "[decoder][malformed]") {
  for (size_t i = 0; i < kMalformedReasonCount; ++i) {
    const auto reason = static_cast<MalformedReason>(i);
    CHECK(ParseMalformedReason(ToString(reason)) == reason);
  }
  CHECK(ToString(MalformedReason::kNotJson) == "not_json");
  CHECK(ToString(MalformedReason::kTooLarge) == "too_large");
  CHECK_FALSE(ParseMalformedReason("bogus"));
}

TEST_CASE("a 10 MB record is too_large under the default limit and decoded above it",
          "[decoder][large]") {
  std::string record = R"({"model_id":"big","feature_vector":[)";
  const size_t elements = 2'000'000;
  for (size_t i = 0; i < elements; ++i) record += i == 0 ? "0.25" : ",0.25";
  record += R"(],"blob":")" + std::string(2'000'000, 'b') + R"(","prediction":1.5})";
  REQUIRE(record.size() > 10'000'000);

  const Decoded limited =
      DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kDeadLetter), {record, kGood2});
  REQUIRE(limited.status);
  CHECK(limited.counts[MalformedReason::kTooLarge] == 1);
  REQUIRE(limited.dead_letters.size() == 1);
  CHECK(limited.dead_letters[0].raw.size() == record.size());
  CHECK_THAT(limited.dead_letters[0].detail, Catch::Contains("1048576"));
  CHECK(limited.batch.num_rows == 1);

  MalformedSpec raised = Policy(MalformedPolicy::kFail);
  raised.max_record_bytes = 16 << 20;
  raised.max_array_length = elements;
  const Decoded decoded = DecodeRecords(InferenceSchema(), raised, {kGood2, record, kGood0});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 3);
  const Column& features = decoded.batch.columns[2];
  REQUIRE(features.ArraySize(1) == elements);
  CHECK(features.ArrayData(1)[0] == 0.25);
  CHECK(features.ArrayData(1)[elements - 1] == 0.25);
  CHECK(decoded.batch.columns[3].f64[1] == 1.5);
  CHECK(features.ArraySize(2) == 3);  // the next record's array starts where it should
  CHECK(features.ArrayData(2)[2] == -22.5);
}

TEST_CASE("1e400 and NaN are not doubles", "[decoder][malformed]") {
  const Decoded decoded = DecodeRecords(
      InferenceSchema(), Policy(MalformedPolicy::kDeadLetter),
      {R"({"model_id":"m","prediction":1e400})", R"({"model_id":"m","prediction":-1e400})",
       R"({"model_id":"m","prediction":"NaN"})", R"({"model_id":"m","prediction":NaN})",
       R"({"model_id":"m","feature_vector":[1,1e400]})", R"({"model_id":"m","prediction":1e308})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.dead_letters.size() == 5);
  CHECK(decoded.dead_letters[0].reason == MalformedReason::kNumberOutOfRange);
  CHECK(decoded.dead_letters[1].reason == MalformedReason::kNumberOutOfRange);
  CHECK(decoded.dead_letters[2].reason == MalformedReason::kWrongType);
  CHECK_THAT(decoded.dead_letters[2].detail,
             Catch::Contains("prediction") && Catch::Contains("expected double, got string"));
  CHECK(decoded.dead_letters[3].reason == MalformedReason::kNotJson);
  CHECK(decoded.dead_letters[4].reason == MalformedReason::kNumberOutOfRange);
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(decoded.batch.columns[3].f64[0] == 1e308);
}

TEST_CASE("a 1000-deep nesting is too_deep, and decodes when maxDepth allows it",
          "[decoder][malformed]") {
  const std::string arrays = std::string(1000, '[') + std::string(1000, ']');
  std::string objects;
  for (int i = 0; i < 1000; ++i) objects += R"({"a":)";
  objects += "1" + std::string(1000, '}');
  const std::vector<std::string> records = {
      R"({"model_id":"m","deep":)" + arrays + R"(,"prediction":1})",
      R"({"model_id":"m","deep":)" + objects + R"(,"prediction":2})",
      R"({"model_id":"m","prediction":)" + arrays + "}",
      R"({"model_id":"m","feature_vector":)" + arrays + "}",
  };
  const Decoded limited = DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kDrop), records);
  REQUIRE(limited.status);
  CHECK(limited.batch.num_rows == 0);
  CHECK(limited.counts[MalformedReason::kTooDeep] == 2);
  CHECK(limited.counts[MalformedReason::kWrongType] == 2);  // drop stops at the wrong type

  const Decoded permissive =
      DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kPermissive), records);
  CHECK(permissive.batch.num_rows == 0);
  CHECK(permissive.counts[MalformedReason::kTooDeep] == 4);  // walked, then found too deep

  MalformedSpec deep = Policy(MalformedPolicy::kFail);
  deep.max_depth = 1024;
  const Decoded decoded = DecodeRecords(InferenceSchema(), deep, {records[0], records[1]});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 2);
  CHECK(decoded.batch.columns[3].f64[0] == 1.0);
  CHECK(decoded.batch.columns[3].f64[1] == 2.0);
}

TEST_CASE("maxDepth counts the record's own object as level one", "[decoder][malformed]") {
  MalformedSpec spec = Policy(MalformedPolicy::kDrop);
  spec.max_depth = 2;
  const Decoded decoded = DecodeRecords(
      InferenceSchema(), spec,
      {R"({"model_id":"m","feature_vector":[1,2],"x":{"y":1}})", R"({"model_id":"m","x":[[1]]})"});
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 1);
  CHECK(decoded.counts[MalformedReason::kTooDeep] == 1);
}

TEST_CASE("a record cut in the middle of a number is truncated, never read past",
          "[decoder][malformed]") {
  // The next record starts with digits: a parser reading past the cut would see 0.1234.
  for (const bool seal : {true, false}) {
    const Decoded decoded = DecodeRecords(
        InferenceSchema(), Policy(MalformedPolicy::kDeadLetter),
        {R"({"model_id":"m","prediction":0.12)", "34}", kGood2,
         R"({"model_id":"m","feature_vector":[1,2.)", R"({"model_id":"m","prediction":-)"},
        seal);
    REQUIRE(decoded.status);
    REQUIRE(decoded.dead_letters.size() == 4);
    CHECK(decoded.dead_letters[0].reason == MalformedReason::kTruncated);
    CHECK(decoded.dead_letters[1].reason == MalformedReason::kNotObject);
    CHECK(decoded.dead_letters[2].reason == MalformedReason::kTruncated);
    CHECK(decoded.dead_letters[3].reason == MalformedReason::kTruncated);
    REQUIRE(decoded.batch.num_rows == 1);
    CHECK(decoded.batch.columns[3].f64[0] == 0.25);
  }
}

TEST_CASE("invalid UTF-8 anywhere in the record is malformed", "[decoder][malformed]") {
  const Decoded decoded = DecodeRecords(
      InferenceSchema(), Policy(MalformedPolicy::kDeadLetter),
      {"{\"model_id\":\"m\xff\"}",                           // invalid byte in a value
       "{\"model_id\":\"m\",\"ign\xc3\x28red\":1}",          // bad continuation in an ignored key
       "{\"model_id\":\"m\",\"x\":[\"\xed\xa0\x80\"]}",      // UTF-16 surrogate in an ignored value
       "{\"model_id\":\"\xc0\xaf\"}",                        // overlong encoding
       "{\"model_id\":\"m\xe2\x82\"}",                       // sequence cut short
       "{\"model_id\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}"});  // valid two- and four-byte chars
  REQUIRE(decoded.status);
  REQUIRE(decoded.dead_letters.size() == 5);
  for (const DeadLetter& letter : decoded.dead_letters) {
    CHECK(letter.reason == MalformedReason::kInvalidUtf8);
  }
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(decoded.batch.columns[0].String(0) == "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST_CASE("invalid JSON in an ignored field is not_json", "[decoder][malformed]") {
  const Decoded decoded =
      DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kDeadLetter),
                    {R"({"model_id":"m","x":[1,2}})", R"({"model_id":"m","x":01})",
                     R"({"model_id":"m","x":"\q"})", R"({"model_id":"m","x":nul})",
                     R"({"model_id":"m" "x":1})", R"({"model_id":"m","x":1.})"});
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 0);
  CHECK(decoded.counts[MalformedReason::kNotJson] == 6);
}

TEST_CASE("a chunk of mixed records keeps the good rows in order with their positions",
          "[decoder]") {
  std::vector<std::string> records;
  std::vector<size_t> good;
  for (size_t i = 0; i < 200; ++i) {
    if (i % 7 == 3) {
      records.push_back(R"({"model_id":"m","prediction":)");
    } else if (i % 11 == 5) {
      records.push_back(R"({"model_id":"m","prediction":"bad"})");
    } else {
      records.push_back(fmt::format(R"({{"model_id":"model-{}","prediction":{},"tag":"t{}"}})", i,
                                    static_cast<double>(i) / 4, i));
      good.push_back(i);
    }
  }
  const Decoded decoded =
      DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kDrop), records, /*seal=*/false);
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == good.size());
  CHECK(decoded.counts.total() == static_cast<int64_t>(records.size() - good.size()));
  for (size_t row = 0; row < good.size(); ++row) {
    const size_t i = good[row];
    CHECK(decoded.batch.positions[row].offset == PositionOf(i).offset);
    CHECK(decoded.batch.columns[0].String(row) == fmt::format("model-{}", i));
    CHECK(decoded.batch.columns[3].f64[row] == static_cast<double>(i) / 4);
  }
}

TEST_CASE("a batch that does not match the schema is refused", "[decoder]") {
  JsonDecoder decoder(InferenceSchema(), MalformedSpec{});
  RecordBatch batch;  // not Reset
  const Status status = decoder.Decode(MakeChunk({kGood0}), batch, nullptr);
  REQUIRE_FALSE(status);
  CHECK(status.error().code() == ErrorCode::kInvalidArgument);
}

}  // namespace driftd

namespace driftd {

TEST_CASE("an array longer than maxArrayLength is too_large: dropped, or null under permissive",
          "[decoder][malformed]") {
  std::string long_array = "[";
  for (int i = 0; i < 5000; ++i) long_array += i == 0 ? "0.5" : ",0.5";
  long_array += "]";
  // The fast scanner takes plain numbers; an exponent sends the array through simdjson.
  const std::string slow_array = "[1e0,2,3,4,5]";
  const std::vector<std::string> records = {
      R"({"model_id":"m","feature_vector":)" + long_array + R"(,"prediction":1})",
      R"({"model_id":"m","feature_vector":)" + slow_array + R"(,"prediction":2})",
      R"({"model_id":"m","feature_vector":[1,2,3,4],"prediction":3})",
  };
  MalformedSpec spec = Policy(MalformedPolicy::kDeadLetter);
  spec.max_array_length = 4;
  Decoded dropped = DecodeRecords(InferenceSchema(), spec, records);
  REQUIRE(dropped.status);
  CHECK(dropped.batch.num_rows == 1);
  CHECK(dropped.counts[MalformedReason::kTooLarge] == 2);
  REQUIRE(dropped.dead_letters.size() == 2);
  CHECK(dropped.dead_letters[0].raw == records[0]);
  CHECK(dropped.dead_letters[0].detail ==
        "field 'feature_vector': array of 5000 elements exceeds maxArrayLength 4");
  CHECK(dropped.dead_letters[1].detail ==
        "field 'feature_vector': array of 5 elements exceeds maxArrayLength 4");

  Decoded nulled = DecodeRecords(InferenceSchema(), Policy(MalformedPolicy::kPermissive), records);
  REQUIRE(nulled.status);
  CHECK(nulled.batch.num_rows == 3);
  CHECK(nulled.counts.total() == 1);  // the default cap, 4096, takes the 5 and 4 elements
  const Column& vectors = nulled.batch.columns[2];
  CHECK(vectors.valid[0] == 0);
  CHECK(vectors.ArraySize(0) == 0);
  CHECK(vectors.ArraySize(1) == 5);
  CHECK(nulled.batch.columns[3].f64[0] == 1.0);  // the rest of the record is kept
}

}  // namespace driftd

namespace driftd {
namespace {

// Decodes `records` with only the `used` fields of the inference schema (Project).
Decoded DecodeProjected(const std::vector<bool>& used, const MalformedSpec& spec,
                        const std::vector<std::string>& records) {
  const Schema schema = InferenceSchema();
  JsonDecoder decoder(schema, spec);
  decoder.Project(used);
  Decoded decoded;
  decoded.batch.Reset(schema);
  const InputChunk chunk = MakeChunk(records);
  decoded.status = decoder.Decode(chunk, decoded.batch, &decoded.dead_letters, Describe);
  decoded.counts = decoder.counts();
  return decoded;
}

TEST_CASE("columns left out of a projection are null and not type-checked, but still JSON",
          "[decoder][projection]") {
  // model_id and prediction used; event_time, feature_vector and ground_truth not.
  const std::vector<bool> used = {true, false, false, true, false};
  const Decoded good = DecodeProjected(used, Policy(MalformedPolicy::kDrop), {kGood0});
  REQUIRE(good.status);
  REQUIRE(good.batch.num_rows == 1);
  CHECK(good.batch.columns[0].String(0) == "model-1");
  CHECK(good.batch.columns[3].f64[0] == 0.73);
  for (int field : {1, 2, 4}) CHECK(good.batch.columns[field].IsNull(0));
  CHECK(good.batch.columns[2].ArraySize(0) == 0);

  // A value of the wrong type in a column nobody reads is not a malformed record...
  const std::vector<std::string> records = {
      R"({"model_id":"a","event_time":12.5e999,"feature_vector":"none","prediction":0.5,)"
      R"("ground_truth":"yes"})",
      R"({"model_id":"b","event_time":"not a time","prediction":0.25})",
      // ...but a value that is not JSON is, wherever it is,
      R"({"model_id":"c","ground_truth":01,"prediction":0.5})",
      R"({"model_id":"d","feature_vector":[1,tru],"prediction":0.5})",
      // as are a duplicate field, a bad used column and a missing non-nullable one.
      R"({"model_id":"e","ground_truth":1,"ground_truth":2,"prediction":0.5})",
      R"({"model_id":"f","prediction":"x"})",
      R"({"prediction":0.5})",
  };
  const Decoded decoded = DecodeProjected(used, Policy(MalformedPolicy::kDrop), records);
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 2);
  CHECK(decoded.batch.columns[0].String(0) == "a");
  CHECK(decoded.batch.columns[0].String(1) == "b");
  CHECK(decoded.batch.columns[3].f64[1] == 0.25);
  CHECK(decoded.counts[MalformedReason::kNotJson] == 2);
  CHECK(decoded.counts[MalformedReason::kDuplicateField] == 1);
  CHECK(decoded.counts[MalformedReason::kWrongType] == 1);
  CHECK(decoded.counts[MalformedReason::kMissingField] == 1);
  CHECK(decoded.counts.total() == 5);

  // Without the projection, the first two are malformed too.
  const Decoded full =
      DecodeProjected({true, true, true, true, true}, Policy(MalformedPolicy::kDrop), records);
  CHECK(full.batch.num_rows == 0);
  CHECK(full.counts.total() == 7);
}

TEST_CASE("an array left out of a projection is judged exactly as a field outside the schema is",
          "[decoder][projection]") {
  // Arrays of numbers the decoder scans in place, and others it walks value by value.
  const std::vector<std::string> arrays = {
      "[]",       "[ ]",        "[0.5, -1, 2.25e1, 0]", "[1e400, 12345678901234567890]",
      "[1.]",     "[01]",       "[-]",                  "[1,]",
      "[1 2]",    "[1,[2]]",    "[1,\"x\",null]",       "[1e+]",
      "[.5]",     "[1,2]]",     "[1,2",                 "[1e0000001]",
  };
  auto records = [&](const char* key) {
    std::vector<std::string> out;
    for (const std::string& array : arrays) {
      out.push_back(fmt::format(R"({{"model_id":"m","{}":{},"prediction":0.5}})", key, array));
    }
    return out;
  };
  for (const int max_depth : {1, 2, 64}) {
    MalformedSpec spec = Policy(MalformedPolicy::kDeadLetter);
    spec.max_depth = max_depth;
    const Decoded projected =
        DecodeProjected({true, false, false, true, false}, spec, records("feature_vector"));
    const Decoded outside =
        DecodeProjected({true, false, false, true, false}, spec, records("other_vector"));
    REQUIRE(projected.status);
    REQUIRE(outside.status);
    CAPTURE(max_depth);
    CHECK(projected.batch.num_rows == outside.batch.num_rows);
    CHECK(projected.counts.by_reason == outside.counts.by_reason);
    REQUIRE(projected.dead_letters.size() == outside.dead_letters.size());
    for (size_t i = 0; i < projected.dead_letters.size(); ++i) {
      CHECK(projected.dead_letters[i].reason == outside.dead_letters[i].reason);
      CHECK(projected.dead_letters[i].detail == outside.dead_letters[i].detail);
      CHECK(projected.dead_letters[i].position.offset == outside.dead_letters[i].position.offset);
    }
    for (size_t row = 0; row < projected.batch.num_rows; ++row) {
      CHECK(projected.batch.columns[2].IsNull(row));
    }
  }
  // Under the default depth the 7 valid arrays are kept whatever they hold; the rest are not
  // JSON (or cut short).
  const Decoded kept = DecodeProjected({true, false, false, true, false},
                                       Policy(MalformedPolicy::kDrop), records("feature_vector"));
  CHECK(kept.batch.num_rows == 7);
  CHECK(kept.counts[MalformedReason::kNotJson] + kept.counts[MalformedReason::kTruncated] == 9);
}

TEST_CASE("a non-nullable column is decoded and checked even when nothing reads it",
          "[decoder][projection]") {
  const Decoded decoded = DecodeProjected({false, false, false, true, false},
                                          Policy(MalformedPolicy::kDrop),
                                          {R"({"model_id":[7],"prediction":0.5})",
                                           R"({"model_id":null,"prediction":0.5})",
                                           R"({"model_id":"m","prediction":0.5})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(decoded.batch.columns[0].String(0) == "m");
  CHECK(decoded.counts[MalformedReason::kWrongType] == 1);
  CHECK(decoded.counts[MalformedReason::kMissingField] == 1);
}

}  // namespace
}  // namespace driftd
