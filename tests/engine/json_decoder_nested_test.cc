// The JSON decoder on named and nested features: struct fields (one column per leaf),
// map<string,double>, map<string,string> and array<string>, with nulls, missing values, wrong
// types under every policy, repeated keys and bounded nesting.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/json_decoder.h"

namespace driftd {
namespace {

Schema SchemaOf(const std::vector<std::pair<std::string, std::string>>& declared,
                bool first_nullable = true) {
  Schema schema;
  bool first = true;
  for (const auto& [name, type] : declared) {
    auto spec = ParseTypeSpec(type);
    REQUIRE(spec);
    AddDeclaredField(schema, name, *spec, first ? first_nullable : true);
    first = false;
  }
  return schema;
}

// The issue's record: a segment object, named features of mixed kinds, one of them null.
const std::string kExample =
    R"({"model_id": "fraud-v7", "segment": {"country": "DE", "channel": "app"}, )"
    R"("features": {"amount": 42.1, "merchant_category": "5411", "device": "ios", )"
    R"("age_days": null}, "prediction": 0.08})";

struct Decoded {
  RecordBatch batch;
  std::vector<DeadLetter> dead_letters;
  Status status;
  MalformedCounts counts;
};

Decoded Decode(const Schema& schema, MalformedPolicy policy, const std::vector<std::string>& records,
               int max_depth = 64, int64_t max_array_length = 4096) {
  MalformedSpec spec;
  spec.policy = policy;
  spec.max_depth = max_depth;
  spec.max_array_length = max_array_length;
  JsonDecoder decoder(schema, spec);
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) {
    chunk.Append(records[i], {0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  Decoded decoded;
  decoded.batch.Reset(schema);
  decoded.status = decoder.Decode(chunk, decoded.batch, &decoded.dead_letters);
  decoded.counts = decoder.counts();
  return decoded;
}

const Column& ColumnNamed(const Decoded& decoded, const Schema& schema, const std::string& name) {
  const int index = schema.IndexOf(name);
  REQUIRE(index >= 0);
  return decoded.batch.columns[static_cast<size_t>(index)];
}

// A map row's entries as "key=value" ("key=null" for a null value).
std::vector<std::string> Entries(const Column& column, size_t row) {
  std::vector<std::string> out;
  for (size_t e = column.EntryBegin(row); e < column.EntryEnd(row); ++e) {
    std::string text = IsMap(column.type) ? std::string(column.Key(e)) + "=" : std::string();
    if (column.EntryNull(e)) {
      text += "null";
    } else if (column.type == FieldType::kDoubleMap) {
      text += std::to_string(column.f64[e]);
    } else {
      text += std::string(column.String(e));
    }
    out.push_back(text);
  }
  return out;
}

TEST_CASE("struct<...> types parse into one column per leaf named by its dotted path",
          "[decoder][types]") {
  const Schema schema = SchemaOf({{"model_id", "string"},
                                  {"segment", "struct<country:string, channel: string>"},
                                  {"ctx", "struct<user:struct<age:int,tags:array<string>>>"}});
  std::vector<std::string> names;
  for (const Field& field : schema.fields) {
    names.push_back(field.name + ":" + std::string(FieldTypeName(field.type)));
  }
  CHECK(names == std::vector<std::string>{"model_id:string", "segment.country:string",
                                          "segment.channel:string", "ctx.user.age:int",
                                          "ctx.user.tags:array<string>"});
  CHECK(schema.fields[3].path == std::vector<std::string>{"ctx", "user", "age"});
  REQUIRE(schema.structs.size() == 3);
  CHECK(schema.structs[1].path == std::vector<std::string>{"ctx"});
  CHECK(schema.structs[2].path == std::vector<std::string>{"ctx", "user"});
  CHECK(ParseFieldType("map<string, double>") == FieldType::kDoubleMap);
  CHECK(ParseFieldType("map< string ,string >") == FieldType::kStringMap);
}

TEST_CASE("bad type texts say what is wrong and where", "[decoder][types]") {
  auto error = [](std::string_view text) {
    auto parsed = ParseTypeSpec(text);
    REQUIRE_FALSE(parsed);
    return parsed.error();
  };
  CHECK(error("struct<country:strin>").unknown == "strin");
  CHECK(error("struct<country:strin>").offset == 15);
  CHECK(error("map<long,double>").message.find("map keys must be strings") != std::string::npos);
  CHECK(error("array<long>").message.find("array of 'long' is not supported") !=
        std::string::npos);
  CHECK(error("struct<a:int,a:int>").message == "struct member 'a' is declared twice");
  CHECK(error("struct<a.b:int>").message == "struct member name 'a.b' cannot contain '.'");
  CHECK(error("struct<a:int").message == "expected ',' or '>' in struct<...>, found the end");
  std::string deep = "double";
  for (int i = 0; i < kMaxStructDepth + 1; ++i) deep = "struct<x:" + deep + ">";
  CHECK(error(deep).message == "structs nest at most 16 deep");
}

TEST_CASE("the example record decodes into struct leaves and named features",
          "[decoder][types]") {
  const Schema schema =
      SchemaOf({{"model_id", "string"},
                {"segment", "struct<country:string,channel:string>"},
                {"features", "struct<amount:double,merchant_category:string,device:string,"
                             "age_days:double>"},
                {"prediction", "double"}});
  const Decoded decoded = Decode(schema, MalformedPolicy::kFail, {kExample});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 1);
  CHECK(ColumnNamed(decoded, schema, "segment.country").String(0) == "DE");
  CHECK(ColumnNamed(decoded, schema, "segment.channel").String(0) == "app");
  CHECK(ColumnNamed(decoded, schema, "features.amount").f64[0] == 42.1);
  CHECK(ColumnNamed(decoded, schema, "features.merchant_category").String(0) == "5411");
  CHECK(ColumnNamed(decoded, schema, "features.age_days").IsNull(0));
  CHECK(ColumnNamed(decoded, schema, "prediction").f64[0] == 0.08);
  CHECK(decoded.counts.total() == 0);
}

TEST_CASE("a map<string,string> keeps every named feature, numbers as their text",
          "[decoder][types]") {
  const Schema schema = SchemaOf({{"model_id", "string"}, {"features", "map<string,string>"}});
  const Decoded decoded = Decode(schema, MalformedPolicy::kFail, {kExample});
  REQUIRE(decoded.status);
  CHECK(Entries(ColumnNamed(decoded, schema, "features"), 0) ==
        std::vector<std::string>{"amount=42.1", "merchant_category=5411", "device=ios",
                                 "age_days=null"});
}

TEST_CASE("a string in a map<string,double> is a wrong type: that value null under permissive, "
          "the record malformed otherwise",
          "[decoder][types][malformed]") {
  const Schema schema = SchemaOf({{"model_id", "string"}, {"features", "map<string,double>"}});
  const std::string numeric = R"({"model_id":"m","features":{"amount":42.1,"age_days":null,"n":3}})";

  const Decoded permissive = Decode(schema, MalformedPolicy::kPermissive, {kExample, numeric});
  REQUIRE(permissive.status);
  REQUIRE(permissive.batch.num_rows == 2);
  const Column& features = ColumnNamed(permissive, schema, "features");
  CHECK(Entries(features, 0) == std::vector<std::string>{"amount=42.100000",
                                                         "merchant_category=null",
                                                         "device=null", "age_days=null"});
  CHECK(Entries(features, 1) ==
        std::vector<std::string>{"amount=42.100000", "age_days=null", "n=3.000000"});
  CHECK(permissive.counts[MalformedReason::kWrongType] == 1);

  const Decoded dead = Decode(schema, MalformedPolicy::kDeadLetter, {kExample, numeric});
  REQUIRE(dead.status);
  CHECK(dead.batch.num_rows == 1);
  REQUIRE(dead.dead_letters.size() == 1);
  CHECK(dead.dead_letters[0].reason == MalformedReason::kWrongType);
  CHECK(dead.dead_letters[0].detail ==
        "field 'features': map values must be numbers, got string");

  const Decoded failed = Decode(schema, MalformedPolicy::kFail, {numeric, kExample});
  CHECK_FALSE(failed.status);
  CHECK(failed.status.error().message().find("wrong_type") != std::string::npos);
  CHECK(failed.batch.num_rows == 1);
}

TEST_CASE("null and missing structs and maps leave their columns null, and a required struct must "
          "be there",
          "[decoder][types][malformed]") {
  Schema schema = SchemaOf({{"segment", "struct<country:string,channel:string>"},
                            {"features", "map<string,double>"},
                            {"tags", "array<string>"}});
  const Decoded decoded =
      Decode(schema, MalformedPolicy::kFail,
             {R"({"segment":null,"features":null,"tags":null})", R"({})",
              R"({"segment":{"country":"FR"},"features":{},"tags":["a",null,7,true]})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 3);
  const Column& country = ColumnNamed(decoded, schema, "segment.country");
  const Column& channel = ColumnNamed(decoded, schema, "segment.channel");
  const Column& features = ColumnNamed(decoded, schema, "features");
  const Column& tags = ColumnNamed(decoded, schema, "tags");
  for (size_t row : {0, 1}) {
    CHECK(country.IsNull(row));
    CHECK(channel.IsNull(row));
    CHECK(features.IsNull(row));
    CHECK(tags.IsNull(row));
  }
  CHECK(country.String(2) == "FR");
  CHECK(channel.IsNull(2));
  CHECK_FALSE(features.IsNull(2));
  CHECK(Entries(features, 2).empty());
  CHECK(Entries(tags, 2) == std::vector<std::string>{"a", "null", "7", "true"});

  schema.structs[0].nullable = false;
  const Decoded required =
      Decode(schema, MalformedPolicy::kDeadLetter,
             {R"({"segment":null})", R"({"features":{}})", R"({"segment":{}})"});
  REQUIRE(required.status);
  CHECK(required.batch.num_rows == 1);
  REQUIRE(required.dead_letters.size() == 2);
  CHECK(required.dead_letters[0].detail == "field 'segment' is null but not nullable");
  CHECK(required.dead_letters[1].detail == "field 'segment' is missing");
  CHECK(required.counts[MalformedReason::kMissingField] == 2);
}

TEST_CASE("a struct, map or array of the wrong kind follows the malformed policy",
          "[decoder][types][malformed]") {
  const Schema schema = SchemaOf({{"model_id", "string"},
                                  {"segment", "struct<country:string>"},
                                  {"features", "map<string,double>"},
                                  {"tags", "array<string>"}});
  const std::vector<std::string> records = {
      R"({"model_id":"a","segment":"DE"})",
      R"({"model_id":"b","features":[1,2]})",
      R"({"model_id":"c","tags":["x",{"y":1},"z"]})",
      R"({"model_id":"d","features":{"amount":{"nested":true}}})",
  };
  const Decoded permissive = Decode(schema, MalformedPolicy::kPermissive, records);
  REQUIRE(permissive.status);
  REQUIRE(permissive.batch.num_rows == 4);
  CHECK(ColumnNamed(permissive, schema, "segment.country").IsNull(0));
  CHECK(ColumnNamed(permissive, schema, "features").IsNull(1));
  CHECK(Entries(ColumnNamed(permissive, schema, "tags"), 2) ==
        std::vector<std::string>{"x", "null", "z"});
  CHECK(Entries(ColumnNamed(permissive, schema, "features"), 3) ==
        std::vector<std::string>{"amount=null"});
  CHECK(permissive.counts[MalformedReason::kWrongType] == 4);

  const Decoded dropped = Decode(schema, MalformedPolicy::kDeadLetter, records);
  REQUIRE(dropped.status);
  CHECK(dropped.batch.num_rows == 0);
  REQUIRE(dropped.dead_letters.size() == 4);
  CHECK(dropped.dead_letters[0].detail == "field 'segment': expected struct, got string");
  CHECK(dropped.dead_letters[1].detail == "field 'features': expected map<string,double>, got array");
  CHECK(dropped.dead_letters[2].detail == "field 'tags': array elements must be strings, got object");
  CHECK(dropped.dead_letters[3].detail == "field 'features': map values must be numbers, got object");
}

TEST_CASE("a key given twice in a map or a struct is duplicate_field", "[decoder][types][malformed]") {
  const Schema schema = SchemaOf({{"segment", "struct<country:string>"},
                                  {"features", "map<string,double>"}});
  std::string many = R"({"features":{)";
  for (int i = 0; i < 40; ++i) many += "\"feature_" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  many += R"("feature_17":1}})";
  const Decoded decoded = Decode(
      schema, MalformedPolicy::kDeadLetter,
      {R"({"features":{"a":1,"b":2,"a":3}})", many, R"({"segment":{"country":"DE","country":"FR"}})",
       R"({"features":{"a\u0062":1,"ab":2}})", R"({"features":{"ab":1,"ba":2,"abc":3}})"});
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 1);
  REQUIRE(decoded.dead_letters.size() == 4);
  CHECK(decoded.dead_letters[0].detail == "field 'features': key 'a' appears more than once");
  CHECK(decoded.dead_letters[1].detail == "field 'features': key 'feature_17' appears more than once");
  CHECK(decoded.dead_letters[2].detail == "field 'segment.country' appears more than once");
  CHECK(decoded.dead_letters[3].detail == "field 'features': key 'ab' appears more than once");
  CHECK(decoded.counts[MalformedReason::kDuplicateField] == 4);
}

TEST_CASE("nesting below a struct or in a map counts towards maxDepth", "[decoder][types][malformed]") {
  const Schema schema = SchemaOf({{"a", "struct<b:struct<c:struct<d:double>>>"},
                                  {"features", "map<string,string>"}});
  const std::string nested = R"({"a":{"b":{"c":{"d":1.5}}}})";
  // The record is level 1, a 2, b 3, c 4.
  const Decoded deep_enough = Decode(schema, MalformedPolicy::kDrop, {nested}, 4);
  CHECK(deep_enough.batch.num_rows == 1);
  CHECK(ColumnNamed(deep_enough, schema, "a.b.c.d").f64[0] == 1.5);
  const Decoded too_deep = Decode(schema, MalformedPolicy::kDrop, {nested}, 3);
  CHECK(too_deep.batch.num_rows == 0);
  CHECK(too_deep.counts[MalformedReason::kTooDeep] == 1);
  // An ignored member of a struct and a map value are walked within the limit too.
  std::string hostile = R"({"a":{"b":{"x":)" + std::string(200, '[') + std::string(200, ']') + "}}}";
  const std::string in_map =
      R"({"features":{"k":)" + std::string(100, '[') + std::string(100, ']') + "}}";
  // (Under permissive, which walks a bad map value to keep the rest of the record.)
  const Decoded hostile_decoded = Decode(schema, MalformedPolicy::kPermissive, {hostile, in_map});
  CHECK(hostile_decoded.batch.num_rows == 0);
  CHECK(hostile_decoded.counts[MalformedReason::kTooDeep] == 2);
}

TEST_CASE("a map with more entries than maxArrayLength is too_large", "[decoder][types][malformed]") {
  const Schema schema = SchemaOf({{"features", "map<string,double>"}, {"tags", "array<string>"}});
  const Decoded decoded =
      Decode(schema, MalformedPolicy::kDeadLetter,
             {R"({"features":{"a":1,"b":2,"c":3}})", R"({"features":{"a":1,"b":2}})",
              R"({"tags":["a","b","c"]})"},
             64, 2);
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 1);
  REQUIRE(decoded.dead_letters.size() == 2);
  CHECK(decoded.dead_letters[0].detail ==
        "field 'features': map of 3 entries exceeds maxArrayLength 2");
  CHECK(decoded.dead_letters[1].detail ==
        "field 'tags': array of 3 elements exceeds maxArrayLength 2");
}

TEST_CASE("escaped keys are matched after unescaping in structs and kept unescaped in maps",
          "[decoder][types]") {
  const Schema schema = SchemaOf({{"segment", "struct<country:string>"},
                                  {"features", "map<string,double>"}});
  const Decoded decoded = Decode(
      schema, MalformedPolicy::kFail,
      {R"({"seg\u006dent":{"countr\u0079":"DE"},"features":{"a\"b":1,"caf\u00e9":2}})"});
  REQUIRE(decoded.status);
  CHECK(ColumnNamed(decoded, schema, "segment.country").String(0) == "DE");
  CHECK(Entries(ColumnNamed(decoded, schema, "features"), 0) ==
        std::vector<std::string>{"a\"b=1.000000", "caf\xC3\xA9=2.000000"});
}

TEST_CASE("rows of many records keep each row's entries apart, rejected rows leave none behind",
          "[decoder][types]") {
  const Schema schema = SchemaOf({{"model_id", "string"}, {"features", "map<string,double>"},
                                  {"tags", "array<string>"}});
  const Decoded decoded = Decode(
      schema, MalformedPolicy::kDrop,
      {R"({"model_id":"a","features":{"x":1},"tags":["t1"]})",
       R"({"model_id":"b","features":{"x":2,"y":3},"tags":["t2","t3"],"broken":)",
       R"({"model_id":"c","features":{"z":4},"tags":[]})"});
  REQUIRE(decoded.status);
  REQUIRE(decoded.batch.num_rows == 2);
  const Column& features = ColumnNamed(decoded, schema, "features");
  CHECK(Entries(features, 0) == std::vector<std::string>{"x=1.000000"});
  CHECK(Entries(features, 1) == std::vector<std::string>{"z=4.000000"});
  CHECK(Entries(ColumnNamed(decoded, schema, "tags"), 1).empty());
  CHECK(features.NumEntries() == 2);
}

}  // namespace
}  // namespace driftd
