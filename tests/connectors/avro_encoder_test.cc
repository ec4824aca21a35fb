// The avro value format written by sinks: output rows (JSON objects of a stream's shape) as
// Avro binary of a derived or given writer schema, read back with libavro; rows that do not fit
// and schemas that do not cover the rows; Confluent framing with a Schema Registry (a small
// compatible server in this process, tests/support/schema_registry_fake.h).
#include <cstring>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "connectors/format/formats.h"
#include "connectors/registry.h"
#include "engine/drift/evaluation.h"
#include "engine/drift/monitor.h"
#include "tests/support/avro_rows.h"
#include "tests/support/schema_registry_fake.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using Kind = ShapeType::Kind;
using testing::AvroRowReader;

ShapeField Column(std::string name, Kind kind, bool nullable = false) {
  return {std::move(name), ShapeType::Scalar(kind, nullable), {}};
}

// Stats rows as an aggregation renders them, with a column of every kind.
RowShape StatsShape() {
  ShapeField stddev{"stddev(feature_vector)",
                    ShapeType::Array(ShapeType::Scalar(Kind::kDouble, true)),
                    ElementMembers{"stddev(feature_vector[", "])"}};
  return ShapeType::Record(
      "Stats",
      {Column("model_id", Kind::kString), Column("version", Kind::kLong, true),
       Column("replica", Kind::kInt, true), Column("shadow", Kind::kBoolean, true),
       {"window",
        ShapeType::Record("Window", {Column("start", Kind::kTimestamp),
                                     Column("end", Kind::kTimestamp)}),
        {}},
       Column("count", Kind::kLong), Column("mean(prediction)", Kind::kDouble, true), stddev,
       {"percentile_approx(prediction, array(0.5, 0.9), 100)",
        ShapeType::Array(ShapeType::Scalar(Kind::kDouble), true),
        {}}});
}

constexpr std::string_view kRow =
    R"j({"model_id":"m1","version":3,"replica":-2,"shadow":false,)j"
    R"j("window":{"start":"2026-11-29T10:00:00.000Z","end":"2026-11-29T10:01:00.000Z"},)j"
    R"j("count":2,"mean(prediction)":0.6000000000000001,)j"
    R"j("stddev(feature_vector[0])":0.7071067811865476,)j"
    R"j("stddev(feature_vector[1])":null,"stddev(feature_vector[2])":1e-300,)j"
    R"j("percentile_approx(prediction, array(0.5, 0.9), 100)":[0.5,0.7]})j";

// Every nullable column null or absent, no element of the array aggregate.
constexpr std::string_view kNullRow =
    R"j({"model_id":"m2","version":null,"shadow":null,)j"
    R"j("window":{"start":"1969-12-31T23:59:59.999Z","end":"2026-11-29T10:01:00.000Z"},)j"
    R"j("count":1,"mean(prediction)":null,)j"
    R"j("percentile_approx(prediction, array(0.5, 0.9), 100)":null})j";

const ValueFormatDecl& Avro() {
  const ValueFormatDecl* decl = FindValueFormat(ValueFormats(), "avro");
  REQUIRE(decl != nullptr);
  REQUIRE(decl->create_encoder);
  return *decl;
}

ValueEncoderResult MakeEncoder(const RowShape& shape,
                               const std::map<std::string, std::string>& given = {}) {
  Options options;
  for (const OptionDecl& option : Avro().sink_options) {
    if (!option.default_value.empty()) options.Set(option.name, option.default_value);
  }
  for (const auto& [name, value] : given) options.Set(name, value);
  return BindAndCreateEncoder(Avro(), ValueEncoderContext{shape, "model-stats-value"}, options);
}

void RequireOk(const Status& status) {
  INFO((status ? "" : status.error().message()));
  REQUIRE(status);
}

std::unique_ptr<ValueEncoder> RequireEncoder(const RowShape& shape,
                                             const std::map<std::string, std::string>& given = {}) {
  auto encoder = MakeEncoder(shape, given);
  INFO((encoder ? "" : encoder.error().option + ": " + encoder.error().message));
  REQUIRE(encoder);
  RequireOk((*encoder)->Open());
  return std::move(*encoder);
}

std::string Encode(ValueEncoder& encoder, std::string_view row) {
  std::string out;
  RequireOk(encoder.Encode(row, out));
  return out;
}

// The message of a row's encoding error; the test fails when the row is written.
std::string Misfit(ValueEncoder& encoder, std::string_view row) {
  std::string out;
  Status status = encoder.Encode(row, out);
  REQUIRE_FALSE(status);
  CHECK(status.error().code() == ErrorCode::kConfig);
  return status.error().message();
}

std::string Problem(const RowShape& shape, const std::map<std::string, std::string>& given,
                    std::string* option = nullptr) {
  auto encoder = MakeEncoder(shape, given);
  REQUIRE_FALSE(encoder);
  if (option) *option = encoder.error().option;
  return encoder.error().message;
}

TEST_CASE("rows are written as Avro binary of the schema derived from their shape",
          "[connectors][format][avro][sink]") {
  auto encoder = RequireEncoder(StatsShape());
  const std::string& schema = encoder->schema_text();
  // Columns by their Avro names, the column's own name in the doc, nullable ones as unions.
  CHECK(schema.find(R"("name": "mean_prediction")") != std::string::npos);
  CHECK(schema.find(R"j("doc": "mean(prediction)")j") != std::string::npos);
  CHECK(schema.find(R"("name": "stddev_feature_vector")") != std::string::npos);
  CHECK(schema.find(R"("name": "percentile_approx_prediction_array_0_5_0_9_100")") !=
        std::string::npos);
  CHECK(schema.find(R"({"type": "long", "logicalType": "timestamp-millis"})") !=
        std::string::npos);

  AvroRowReader reader(schema);
  for (std::string_view row : {kRow, kNullRow}) {
    INFO(row);
    CHECK(reader.Compare(StatsShape(), Encode(*encoder, row), row).empty());
  }
  // The reader is not fooled: another row's values differ.
  CHECK_FALSE(reader.Compare(StatsShape(), Encode(*encoder, kRow), kNullRow).empty());
}

TEST_CASE("the same row gives the same bytes, from one encoder or a new one",
          "[connectors][format][avro][sink]") {
  auto first = RequireEncoder(StatsShape());
  auto second = RequireEncoder(StatsShape());
  const std::string bytes = Encode(*first, kRow);
  Encode(*first, kNullRow);
  CHECK(Encode(*first, kRow) == bytes);
  CHECK(Encode(*second, kRow) == bytes);
  CHECK(first->schema_text() == second->schema_text());
}

TEST_CASE("a row of any size is written whole", "[connectors][format][avro][sink]") {
  auto encoder = RequireEncoder(StatsShape());
  AvroRowReader reader(encoder->schema_text());
  for (size_t size : {size_t{10}, size_t{5000}, size_t{300'000}}) {
    const std::string row = fmt::format(
        R"j({{"model_id":"{}","window":{{"start":"2026-11-29T10:00:00.000Z",)j"
        R"j("end":"2026-11-29T10:01:00.000Z"}},"count":1}})j",
        std::string(size, 'm'));
    const std::string bytes = Encode(*encoder, row);
    CHECK(bytes.size() > size);
    CHECK(reader.Compare(StatsShape(), bytes, row).empty());
  }
}

TEST_CASE("a row that does not fit the writer schema is an error naming the column and types",
          "[connectors][format][avro][sink]") {
  auto encoder = RequireEncoder(StatsShape());
  std::string out = "untouched";
  SECTION("a string where a number belongs") {
    const std::string message = Misfit(
        *encoder, R"j({"model_id":"m1","window":{"start":"2026-11-29T10:00:00Z",)j"
                  R"j("end":"2026-11-29T10:01:00Z"},"count":1,"mean(prediction)":"high"})j");
    CHECK(message ==
          "the row does not fit the Avro writer schema: column 'mean(prediction)': expected a "
          "number (Avro [null, double]), found \"high\"");
  }
  SECTION("a column that may not be null is missing") {
    CHECK(Misfit(*encoder, R"({"model_id":"m1","count":1})")
              .find("column 'window' is missing, and the writer schema's type record Window "
                    "does not allow null") != std::string::npos);
  }
  SECTION("a member no field takes") {
    CHECK(Misfit(*encoder, R"({"model_id":"m1","region":"eu"})")
              .find("column 'region' has no field in the writer schema") != std::string::npos);
  }
  SECTION("a timestamp that is not RFC 3339") {
    CHECK(Misfit(*encoder, R"({"model_id":"m1","window":{"start":"yesterday"}})")
              .find("column 'window.start': expected an RFC 3339 timestamp") !=
          std::string::npos);
  }
  SECTION("numbered members out of order") {
    CHECK(Misfit(*encoder, R"j({"model_id":"m1","stddev(feature_vector[1])":1})j")
              .find("member 'stddev(feature_vector[1])' out of order (element 0 expected)") !=
          std::string::npos);
  }
  // A misfit writes nothing, and the encoder goes on with the next row.
  CHECK(encoder->Encode(kRow, out));
}

class TempFile {
 public:
  explicit TempFile(std::string_view text) : dir_("driftd-avsc") {
    path_ = dir_ / "writer.avsc";
    std::ofstream(path_, std::ios::binary) << text;
  }
  const std::string& path() const { return path_; }

 private:
  testing::TempDir dir_;
  std::string path_;
};

// The stats rows' columns in another order, with other (compatible) types, and a field no
// column fills.
constexpr std::string_view kGivenSchema = R"({"type": "record", "name": "ModelStats",
  "namespace": "acme.monitoring", "fields": [
    {"name": "count", "type": "double"},
    {"name": "model_id", "type": {"type": "enum", "name": "Model", "symbols": ["m1", "m2"]}},
    {"name": "team", "type": ["null", "string"], "default": null},
    {"name": "version", "type": ["null", "long"]},
    {"name": "replica", "type": ["null", "long"]},
    {"name": "shadow", "type": ["null", "boolean"]},
    {"name": "window", "type": {"type": "record", "name": "Span", "fields": [
      {"name": "end", "type": "string"},
      {"name": "start", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}},
    {"name": "mean_prediction", "type": ["double", "null"]},
    {"name": "stddev_feature_vector", "type": {"type": "array", "items": ["null", "double"]}},
    {"name": "percentile_approx_prediction_array_0_5_0_9_100",
     "type": ["null", {"type": "array", "items": "double"}]}]})";

TEST_CASE("a given .avsc takes the columns by Avro name in its own order and types",
          "[connectors][format][avro][sink]") {
  TempFile avsc(kGivenSchema);
  auto encoder = RequireEncoder(StatsShape(), {{"schemaFile", avsc.path()}});
  CHECK(encoder->schema_text() == kGivenSchema);  // registered and shown as written
  AvroRowReader reader(kGivenSchema);
  reader.micros = true;  // window.start; window.end is the text as written
  for (std::string_view row : {kRow, kNullRow}) {
    INFO(row);
    CHECK(reader.Compare(StatsShape(), Encode(*encoder, row), row).empty());
  }
  // An enum takes only its symbols.
  CHECK(Misfit(*encoder, R"({"model_id":"m9"})")
            .find("column 'model_id': 'm9' is not a symbol of enum Model") != std::string::npos);
}

TEST_CASE("a writer schema that does not cover the rows is refused when the encoder is made",
          "[connectors][format][avro][sink]") {
  std::string option;
  SECTION("an unreadable file") {
    const std::string message = Problem(StatsShape(), {{"schemaFile", "/nonexistent/x.avsc"}},
                                        &option);
    CHECK(option == "schemaFile");
    CHECK(message == "cannot read '/nonexistent/x.avsc': No such file or directory");
  }
  SECTION("not a schema") {
    TempFile avsc(R"({"type": "record", "name": "x", "fields": [{"name": "a"}]})");
    CHECK(Problem(StatsShape(), {{"schemaFile", avsc.path()}}, &option)
              .find("not an Avro schema") != std::string::npos);
    CHECK(option == "schemaFile");
  }
  const RowShape shape = ShapeType::Record(
      "Alert", {Column("alert_id", Kind::kString), Column("statistic", Kind::kDouble, true)});
  std::string path;
  auto refused = [&](std::string_view schema) {
    TempFile avsc(schema);
    path = avsc.path();
    return Problem(shape, {{"schemaFile", avsc.path()}}, &option);
  };
  SECTION("a column without a field") {
    const std::string message = refused(R"({"type": "record", "name": "A", "fields": [
              {"name": "alert_id", "type": "string"}]})");
    CHECK(message == fmt::format("'{}' does not cover the rows: the writer schema's record A "
                                 "has no field 'statistic' for column 'statistic' (double)",
                                 path));
  }
  SECTION("a field of another type") {
    CHECK(refused(R"({"type": "record", "name": "A", "fields": [
              {"name": "alert_id", "type": "long"},
              {"name": "statistic", "type": ["null", "double"]}]})")
              .find("field 'alert_id' is long in the writer schema; column 'alert_id' holds "
                    "string values") != std::string::npos);
  }
  SECTION("a column that may be null, a field that may not") {
    CHECK(refused(R"({"type": "record", "name": "A", "fields": [
              {"name": "alert_id", "type": "string"},
              {"name": "statistic", "type": "double"}]})")
              .find("field 'statistic' is double in the writer schema, which does not allow "
                    "null; column 'statistic' may be null") != std::string::npos);
  }
  SECTION("a field no column fills, that may not be null") {
    CHECK(refused(R"({"type": "record", "name": "A", "fields": [
              {"name": "alert_id", "type": "string"},
              {"name": "statistic", "type": ["null", "double"]},
              {"name": "team", "type": "string"}]})")
              .find("the writer schema's field 'team' (string) is not a column of these rows "
                    "and does not allow null") != std::string::npos);
  }
  CHECK(option == "schemaFile");
}

TEST_CASE("columns whose Avro names collide are refused, the derived schema names both",
          "[connectors][format][avro][sink]") {
  const RowShape shape = ShapeType::Record(
      "Stats", {Column("mean(x)", Kind::kDouble), Column("mean_x", Kind::kDouble)});
  std::string option = "?";
  CHECK(Problem(shape, {}, &option) ==
        "columns 'mean(x)' and 'mean_x' both become the Avro field 'mean_x'; rename one (a "
        "derived column's AS name), or give a schemaFile");
  CHECK(option.empty());
  CHECK(AvroFieldName("approx_percentile(x, 0.5, 100)") == "approx_percentile_x_0_5_100");
  CHECK(AvroFieldName("9lives") == "_9lives");
  CHECK(AvroFieldName("`odd-name`") == "odd_name");
}

TEST_CASE("with a schema registry the schema is registered under <topic>-value and records are "
          "Confluent-framed",
          "[connectors][format][avro][sink][registry]") {
  testing::FakeSchemaRegistry registry;
  REQUIRE(registry.running());
  const int other = registry.Add(R"({"type": "string"})");  // ids are not all ours
  auto encoder = RequireEncoder(AlertRowShape(), {{"schemaRegistryUrl", registry.url()}});
  const std::vector<int> ids = registry.registrations("model-stats-value");
  REQUIRE(ids.size() == 1);
  CHECK(ids[0] != other);
  CHECK(registry.schema(ids[0]) == encoder->schema_text());
  RequireOk(encoder->Open());  // once only
  CHECK(registry.registrations("model-stats-value").size() == 1);

  const std::string row =
      R"({"alert_id":"3fc400f78ac91fd3","incident_id":"3fc400f78ac91fd3","level":"ALERT",)"
      R"("previous_level":"WARN","model":"m","series":"*","detector":"rollup","statistic":3,)"
      R"("threshold":3,"window":{"start_record":5,"end_record":10,"start_time":null,)"
      R"("end_time":"2026-11-29T10:01:00.000Z","n":5},"alerting_series":["a","b","c"],)"
      R"("trigger_series":"c","batch_id":4})";
  const std::string bytes = Encode(*encoder, row);
  REQUIRE(bytes.size() > 5);
  CHECK(bytes[0] == '\0');
  const uint32_t id = (uint32_t{static_cast<unsigned char>(bytes[1])} << 24) |
                      (uint32_t{static_cast<unsigned char>(bytes[2])} << 16) |
                      (uint32_t{static_cast<unsigned char>(bytes[3])} << 8) |
                      uint32_t{static_cast<unsigned char>(bytes[4])};
  CHECK(id == static_cast<uint32_t>(ids[0]));
  AvroRowReader reader(registry.schema(static_cast<int>(id)));
  CHECK(reader.Compare(AlertRowShape(), std::string_view(bytes).substr(5), row).empty());

  SECTION("a subject of its own") {
    auto named = RequireEncoder(AlertRowShape(), {{"schemaRegistryUrl", registry.url()},
                                                  {"subject", "driftd-alerts"}});
    CHECK(registry.registrations("driftd-alerts") == ids);  // the same schema, the same id
    CHECK(Encode(*named, row) == bytes);
  }
}

TEST_CASE("a registry that cannot be reached fails the sink's open, not the rows",
          "[connectors][format][avro][sink][registry]") {
  auto encoder = MakeEncoder(AlertRowShape(), {{"schemaRegistryUrl", "http://127.0.0.1:1"},
                                               {"schemaRegistryTimeout", "1 second"}});
  REQUIRE(encoder);
  Status opened = (*encoder)->Open();
  REQUIRE_FALSE(opened);
  CHECK(opened.error().code() == ErrorCode::kExternal);
  CHECK(opened.error().message().find("schema registry http://127.0.0.1:1: POST "
                                      "/subjects/model-stats-value/versions") == 0);
  std::string out;
  CHECK_FALSE((*encoder)->Encode("{}", out));  // never unframed bytes by mistake
  // A URL that is not one is refused when the encoder is made.
  std::string option;
  CHECK(Problem(AlertRowShape(), {{"schemaRegistryUrl", "registry:8081"}}, &option)
            .find("is not an http:// or https:// URL") != std::string::npos);
  CHECK(option == "schemaRegistryUrl");
}

TEST_CASE("the json format writes each row as it is", "[connectors][format][sink]") {
  const ValueFormatDecl* json = FindValueFormat(ValueFormats(), "json");
  REQUIRE(json != nullptr);
  REQUIRE(json->create_encoder);
  auto encoder = BindAndCreateEncoder(*json, ValueEncoderContext{StatsShape(), ""}, Options());
  REQUIRE(encoder);
  CHECK(Encode(**encoder, kRow) == kRow);
  CHECK((*encoder)->schema_text().empty());
  // Protobuf is read only.
  CHECK_FALSE(FindValueFormat(ValueFormats(), "protobuf")->create_encoder);
}

// deploy/avro/ ships the writer schemas of the rows whose shape is fixed, for consumers that
// read without a registry; `driftd_connectors_tests '[.avro-schemas]'` rewrites them.
const std::vector<std::pair<std::string, RowShape>>& ShippedSchemas() {
  static const std::vector<std::pair<std::string, RowShape>> schemas = {
      {"driftd-alert.avsc", AlertRowShape()},
      {"driftd-evaluation.avsc", EvaluationRowShape()},
      {"driftd-dead-letter.avsc", DeadLetterRowShape()},
  };
  return schemas;
}

std::string ShippedPath(const std::string& name) {
  return std::string(DRIFTD_SOURCE_DIR) + "/deploy/avro/" + name;
}

TEST_CASE("the shipped Avro schemas of the alert, evaluation and dead-letter rows are the ones "
          "their sinks derive",
          "[connectors][format][avro][sink]") {
  for (const auto& [name, shape] : ShippedSchemas()) {
    INFO(name << " differs: regenerate with driftd_connectors_tests '[.avro-schemas]'");
    auto encoder = RequireEncoder(shape);
    CHECK(testing::ReadFile(ShippedPath(name)) == encoder->schema_text());
    // A sink given the shipped file as its schemaFile writes the same bytes.
    auto given = RequireEncoder(shape, {{"schemaFile", ShippedPath(name)}});
    CHECK(given->schema_text() == encoder->schema_text());
  }
}

TEST_CASE("regenerate the Avro schemas in deploy/avro", "[.avro-schemas]") {
  for (const auto& [name, shape] : ShippedSchemas()) {
    auto encoder = RequireEncoder(shape);
    testing::WriteFile(ShippedPath(name), encoder->schema_text());
    CHECK(testing::ReadFile(ShippedPath(name)) == encoder->schema_text());
  }
}

}  // namespace
}  // namespace driftd
