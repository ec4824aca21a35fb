// The avro value format: .avsc writer schemas, Confluent-framed records with writer schemas
// from a Schema Registry (a small compatible server in this process: tests/support/
// schema_registry_fake.h), resolution against a reader schema, and malformed records routed by
// the same policies as JSON.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "connectors/registry.h"
#include "tests/support/avro_records.h"
#include "tests/support/schema_registry_fake.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::AvroRecordWriter;

constexpr std::string_view kWriterV1 = R"({"type": "record", "name": "Inference",
  "namespace": "acme", "fields": [
    {"name": "model_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "feature_vector", "type": {"type": "array", "items": "float"}},
    {"name": "prediction", "type": ["null", "double"], "default": null},
    {"name": "label", "type": "int"}]})";

// v1 plus a new optional field, as a producer would evolve it.
constexpr std::string_view kWriterV2 = R"({"type": "record", "name": "Inference",
  "namespace": "acme", "fields": [
    {"name": "model_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "feature_vector", "type": {"type": "array", "items": "float"}},
    {"name": "prediction", "type": ["null", "double"], "default": null},
    {"name": "label", "type": "int"},
    {"name": "region", "type": ["null", "string"], "default": null}]})";

Schema PipelineSchema() {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false},
                   {"event_time", FieldType::kTimestamp, true},
                   {"feature_vector", FieldType::kDoubleArray, true},
                   {"prediction", FieldType::kDouble, true},
                   {"label", FieldType::kDouble, true}};
  return schema;
}

std::unique_ptr<ValueDecoder> MakeDecoder(const std::map<std::string, std::string>& given,
                                          MalformedPolicy policy = MalformedPolicy::kDrop,
                                          const Schema& schema = PipelineSchema()) {
  const ValueFormatDecl* decl = FindValueFormat(ValueFormats(), "avro");
  REQUIRE(decl != nullptr);
  Options options;
  for (const OptionDecl& option : decl->options) {
    if (!option.default_value.empty()) options.Set(option.name, option.default_value);
  }
  for (const auto& [name, value] : given) options.Set(name, value);
  MalformedSpec spec;
  spec.policy = policy;
  auto decoder = BindAndCreateDecoder(*decl, schema, spec, options);
  if (!decoder) FAIL(decoder.error().option << ": " << decoder.error().message);
  return std::move(*decoder);
}

std::string ProblemOf(const std::map<std::string, std::string>& given,
                      const Schema& schema = PipelineSchema()) {
  const ValueFormatDecl* decl = FindValueFormat(ValueFormats(), "avro");
  Options options;
  for (const auto& [name, value] : given) options.Set(name, value);
  auto decoder = BindAndCreateDecoder(*decl, schema, MalformedSpec{}, options);
  if (decoder) return "";
  return decoder.error().option + ": " + decoder.error().message;
}

struct Decoded {
  RecordBatch batch;
  std::vector<DeadLetter> dead;
  Status status = Ok();
};

Decoded DecodeAll(ValueDecoder& decoder, const std::vector<std::string>& records) {
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) {
    chunk.Append(records[i], RecordPosition{0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  Decoded out;
  out.batch.Reset(decoder.schema());
  out.status = decoder.Decode(chunk, out.batch, &out.dead);
  return out;
}

TEST_CASE("records of an .avsc writer schema decode into the pipeline's columns",
          "[format][avro]") {
  testing::TempDir dir;
  testing::WriteFile(dir / "v1.avsc", kWriterV1);
  auto decoder = MakeDecoder({{"schemaFile", dir / "v1.avsc"}});
  AvroRecordWriter writer(kWriterV1);
  auto decoded = DecodeAll(
      *decoder, {writer.Write({{"model_id", std::string("m-1")},
                               {"event_time", int64_t{1'764'590'400'123}},
                               {"feature_vector", std::vector<double>{0.5, -1.25}},
                               {"prediction", 0.75},
                               {"label", int64_t{1}}}),
                 writer.Write({{"model_id", std::string("m-2")},
                               {"event_time", int64_t{1'764'590'400'000}},
                               {"prediction", nullptr},
                               {"label", int64_t{0}}})});
  REQUIRE(decoded.status);
  const RecordBatch& b = decoded.batch;
  REQUIRE(b.num_rows == 2);
  CHECK(b.columns[0].String(0) == "m-1");
  CHECK(b.columns[1].i64[0] == 1'764'590'400'123'000);  // timestamp-millis -> microseconds
  REQUIRE(b.columns[2].ArraySize(0) == 2);
  CHECK(b.columns[2].ArrayData(0)[1] == -1.25);
  CHECK(b.columns[3].f64[0] == 0.75);
  CHECK(b.columns[4].f64[0] == 1.0);  // int promoted to the pipeline's double
  CHECK(b.columns[2].ArraySize(1) == 0);
  CHECK(b.columns[3].IsNull(1));
  CHECK(b.positions[1].offset == 1);
  CHECK(decoder->counts().total() == 0);
}

TEST_CASE("malformed Avro records are counted and routed by the same policies as JSON",
          "[format][avro]") {
  testing::TempDir dir;
  testing::WriteFile(dir / "v1.avsc", kWriterV1);
  AvroRecordWriter writer(kWriterV1);
  const std::string good = writer.Write({{"model_id", std::string("m-1")},
                                         {"event_time", int64_t{1000}},
                                         {"label", int64_t{1}}});
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
  const std::string cut = good.substr(0, 3);
  const std::string longer = good + "xyz";
  const std::vector<std::string> records = {good, garbage, cut, "", longer, good};

  SECTION("drop counts each bad record once and keeps the good ones") {
    auto decoder = MakeDecoder({{"schemaFile", dir / "v1.avsc"}});
    auto decoded = DecodeAll(*decoder, records);
    REQUIRE(decoded.status);
    CHECK(decoded.batch.num_rows == 2);
    CHECK(decoded.batch.positions[1].offset == 5);
    CHECK(decoder->counts()[MalformedReason::kUndecodable] == 3);
    CHECK(decoder->counts()[MalformedReason::kEmpty] == 1);
    CHECK(decoded.dead.empty());
  }
  SECTION("dead_letter keeps the raw bytes, the reason and the position") {
    auto decoder = MakeDecoder({{"schemaFile", dir / "v1.avsc"}}, MalformedPolicy::kDeadLetter);
    auto decoded = DecodeAll(*decoder, records);
    REQUIRE(decoded.status);
    REQUIRE(decoded.dead.size() == 4);
    CHECK(decoded.dead[0].raw == garbage);
    CHECK(decoded.dead[0].reason == MalformedReason::kUndecodable);
    CHECK(decoded.dead[0].position.offset == 1);
    CHECK_THAT(decoded.dead[0].detail, Catch::Contains("not an Avro record"));
    CHECK(decoded.dead[2].reason == MalformedReason::kEmpty);
    CHECK_THAT(decoded.dead[3].detail, Catch::Contains("left over"));
  }
  SECTION("fail stops at the first bad record, naming its position") {
    auto decoder = MakeDecoder({{"schemaFile", dir / "v1.avsc"}}, MalformedPolicy::kFail);
    auto decoded = DecodeAll(*decoder, records);
    REQUIRE_FALSE(decoded.status);
    CHECK(decoded.status.error().code() == ErrorCode::kMalformedRecord);
    CHECK_THAT(decoded.status.error().message(),
               Catch::StartsWith("malformed record at partition 0 offset 1: undecodable"));
    CHECK(decoded.batch.num_rows == 1);
  }
  SECTION("permissive cannot make a row of undecodable bytes: they are counted and dropped") {
    auto decoder = MakeDecoder({{"schemaFile", dir / "v1.avsc"}}, MalformedPolicy::kPermissive);
    auto decoded = DecodeAll(*decoder, records);
    REQUIRE(decoded.status);
    CHECK(decoded.batch.num_rows == 2);
    CHECK(decoder->counts().total() == 4);
  }
}

TEST_CASE("a bad value in a nullable field is null under permissive, the record kept",
          "[format][avro]") {
  testing::TempDir dir;
  constexpr std::string_view kStrings = R"({"type": "record", "name": "Inference", "fields": [
      {"name": "model_id", "type": "string"}, {"name": "prediction", "type": "string"}]})";
  testing::WriteFile(dir / "s.avsc", kStrings);
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false}, {"prediction", FieldType::kString}};
  auto decoder = MakeDecoder({{"schemaFile", dir / "s.avsc"}}, MalformedPolicy::kPermissive,
                             schema);
  AvroRecordWriter writer(kStrings);
  auto decoded = DecodeAll(*decoder, {writer.Write({{"model_id", std::string("m")},
                                                    {"prediction", std::string("\xc3\x28")}})});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(decoded.batch.columns[1].IsNull(0));
  CHECK(decoder->counts()[MalformedReason::kInvalidUtf8] == 1);
}

TEST_CASE("Confluent-framed records fetch each writer schema once and resolve a new optional "
          "field",
          "[format][avro][registry]") {
  testing::FakeSchemaRegistry registry;
  REQUIRE(registry.running());
  const int v1 = registry.Add(std::string(kWriterV1));
  const int v2 = registry.Add(std::string(kWriterV2));
  AvroRecordWriter w1(kWriterV1);
  AvroRecordWriter w2(kWriterV2);
  auto decoder = MakeDecoder({{"schemaRegistryUrl", registry.url()}},
                             MalformedPolicy::kDeadLetter);
  std::vector<std::string> records;
  for (int i = 0; i < 3; ++i) {
    records.push_back(w1.Write({{"model_id", std::string("old")},
                                {"prediction", 0.25 * i},
                                {"label", int64_t{1}}},
                               static_cast<uint32_t>(v1)));
    records.push_back(w2.Write({{"model_id", std::string("new")},
                                {"prediction", 0.5},
                                {"region", std::string("eu-west")},
                                {"label", int64_t{0}}},
                               static_cast<uint32_t>(v2)));
  }
  records.push_back(w1.Write({{"model_id", std::string("lost")}}, 999));  // unknown id
  records.push_back("{\"model_id\": \"json\"}");                          // not framed
  auto decoded = DecodeAll(*decoder, records);
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 6);
  CHECK(decoded.batch.columns[0].String(0) == "old");
  CHECK(decoded.batch.columns[0].String(1) == "new");
  CHECK(decoded.batch.columns[3].f64[1] == 0.5);
  CHECK(decoded.batch.columns[3].f64[4] == 0.5);
  CHECK(registry.fetches(v1) == 1);
  CHECK(registry.fetches(v2) == 1);
  REQUIRE(decoded.dead.size() == 2);
  CHECK(decoded.dead[0].reason == MalformedReason::kUnknownSchema);
  CHECK_THAT(decoded.dead[0].detail, Catch::Contains("schema id 999"));
  CHECK(decoded.dead[1].reason == MalformedReason::kUndecodable);
  CHECK_THAT(decoded.dead[1].detail, Catch::Contains("not Confluent-framed"));

  // The unknown id is not asked for again: the answer is kept like the known ones.
  auto again = DecodeAll(*decoder, {records.back(), records[records.size() - 2]});
  CHECK(registry.fetches(999) == 1);
  CHECK(decoder->counts()[MalformedReason::kUnknownSchema] == 2);
}

TEST_CASE("a registry out of reach is an error for the batch, not malformed records",
          "[format][avro][registry]") {
  int port = 0;
  {
    testing::FakeSchemaRegistry gone;  // a port that nothing listens on afterwards
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  auto decoder = MakeDecoder({{"schemaRegistryUrl", fmt::format("http://127.0.0.1:{}", port)},
                              {"schemaRegistryTimeout", "2 seconds"}});
  AvroRecordWriter writer(kWriterV1);
  auto decoded = DecodeAll(*decoder, {writer.Write({{"model_id", std::string("m")}}, 1)});
  REQUIRE_FALSE(decoded.status);
  CHECK(decoded.status.error().code() == ErrorCode::kExternal);
  CHECK(decoder->counts().total() == 0);
}

TEST_CASE("writer schemas resolve against readerSchemaFile by Avro's rules", "[format][avro]") {
  testing::TempDir dir;
  // The reader skips the writer's new field and reads its int label as a double.
  constexpr std::string_view kReader = R"({"type": "record", "name": "Inference",
    "namespace": "acme", "fields": [
      {"name": "model_id", "type": "string"},
      {"name": "label", "type": "double"}]})";
  testing::WriteFile(dir / "v2.avsc", kWriterV2);
  testing::WriteFile(dir / "reader.avsc", kReader);
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false}, {"label", FieldType::kDouble}};
  auto decoder = MakeDecoder(
      {{"schemaFile", dir / "v2.avsc"}, {"readerSchemaFile", dir / "reader.avsc"}},
      MalformedPolicy::kFail, schema);
  AvroRecordWriter writer(kWriterV2);
  auto decoded = DecodeAll(*decoder, {writer.Write({{"model_id", std::string("m")},
                                                    {"label", int64_t{1}},
                                                    {"region", std::string("us")}})});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(decoded.batch.columns[0].String(0) == "m");
  CHECK(decoded.batch.columns[1].f64[0] == 1.0);

  // A writer schema without a field the reader requires does not resolve: it is refused when
  // the writer is the schemaFile, and its records are unknown_schema when it comes from a
  // registry.
  constexpr std::string_view kNeedsSegment = R"({"type": "record", "name": "Inference",
    "namespace": "acme", "fields": [{"name": "model_id", "type": "string"},
                                    {"name": "segment", "type": "string"}]})";
  testing::WriteFile(dir / "segment.avsc", kNeedsSegment);
  Schema model_only;
  model_only.fields = {{"model_id", FieldType::kString, false}};
  CHECK_THAT(ProblemOf({{"schemaFile", dir / "v2.avsc"}, {"readerSchemaFile", dir / "segment.avsc"}},
                       model_only),
             Catch::StartsWith("schemaFile: the writer schema does not resolve"));
  testing::FakeSchemaRegistry registry;
  REQUIRE(registry.running());
  const auto id = static_cast<uint32_t>(registry.Add(std::string(kWriterV2)));
  auto framed = MakeDecoder({{"schemaRegistryUrl", registry.url()},
                             {"readerSchemaFile", dir / "segment.avsc"}},
                            MalformedPolicy::kDeadLetter, model_only);
  auto refused = DecodeAll(*framed, {writer.Write({{"model_id", std::string("m")}}, id)});
  REQUIRE(refused.status);
  REQUIRE(refused.dead.size() == 1);
  CHECK(refused.dead[0].reason == MalformedReason::kUnknownSchema);
  CHECK_THAT(refused.dead[0].detail, Catch::Contains("does not resolve"));
}

TEST_CASE("bad avro options name the option and say what is wrong", "[format][avro]") {
  testing::TempDir dir;
  CHECK_THAT(ProblemOf({}), Catch::Contains("needs valueOptions.schemaFile"));
  CHECK_THAT(ProblemOf({{"schemaFile", dir / "missing.avsc"}}),
             Catch::StartsWith("schemaFile: cannot read") && Catch::Contains("missing.avsc"));
  testing::WriteFile(dir / "bad.avsc", "{\"type\": \"record\", \"name\": ");
  CHECK_THAT(ProblemOf({{"schemaFile", dir / "bad.avsc"}}),
             Catch::StartsWith("schemaFile: ") && Catch::Contains("not an Avro schema"));
  testing::WriteFile(dir / "v1.avsc", kWriterV1);
  Schema wrong;
  wrong.fields = {{"model_id", FieldType::kDouble}};
  CHECK_THAT(ProblemOf({{"schemaFile", dir / "v1.avsc"}}, wrong),
             Catch::Contains("field 'model_id' is string in the writer schema; the pipeline's "
                             "schema says double"));
  Schema required;
  required.fields = {{"segment", FieldType::kString, false}};
  CHECK_THAT(ProblemOf({{"schemaFile", dir / "v1.avsc"}}, required),
             Catch::Contains("no field 'segment'"));
  CHECK_THAT(ProblemOf({{"schemaRegistryUrl", "registry:8081"}}),
             Catch::StartsWith("schemaRegistryUrl: ") && Catch::Contains("not an http://"));
  CHECK_THAT(ProblemOf({{"schemaFile", dir / "v1.avsc"}, {"schemaRegistryUrl", "http://r"}}),
             Catch::Contains("not both"));
}

}  // namespace
}  // namespace driftd
