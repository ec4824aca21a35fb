// Pipeline files with named and nested features: struct, map and array<string> types in the
// schema, their leaves as columns everywhere, drift segments and caps, and every problem with
// its YAML path, line and column.
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

using testing::ParseText;
using testing::ProblemText;

constexpr std::string_view kNamedFeatures = R"(name: named
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - name: segment
    type: struct<country:string, channel:string>
    nullable: false
  - name: features
    type: map<string, double>
  - name: labels
    type: map<string,string>
  - {name: tags, type: array<string>}
source:
  format: file
  options: {path: /tmp/in}
query:
  where: "features['amount'] > 0 AND segment.channel = 'app'"
  select: ["features.amount * 2 AS doubled", "size(tags) AS tag_count"]
  groupBy: [model_id, segment.country]
  window: {column: event_time, size: 1 minute}
  watermark: {column: event_time, delay: 10 seconds}
  aggregates: [count, mean(doubled)]
drift:
  series: [features, labels, segment.channel, tags]
  maxKeysPerModel: 64
  maxSegmentsPerModel: 20
sinks:
  - {format: console}
)";

TEST_CASE("a file with struct, map and array<string> fields loads, its leaves columns",
          "[config][types]") {
  auto spec = ParseText(kNamedFeatures);
  INFO(ProblemText(spec));
  REQUIRE(spec);
  const Schema& schema = spec->schema;
  REQUIRE(schema.IndexOf("segment.country") >= 0);
  CHECK(schema.fields[static_cast<size_t>(schema.IndexOf("segment.country"))].path ==
        std::vector<std::string>{"segment", "country"});
  CHECK(schema.fields[static_cast<size_t>(schema.IndexOf("features"))].type == FieldType::kDoubleMap);
  CHECK(schema.fields[static_cast<size_t>(schema.IndexOf("tags"))].type == FieldType::kStringArray);
  REQUIRE(schema.structs.size() == 1);
  CHECK_FALSE(schema.structs[0].nullable);
  // Drift per (model, segment.country): the groupBy column after the model's.
  CHECK(spec->drift.model_column == "model_id");
  CHECK(spec->drift.segment_by == std::vector<std::string>{"segment.country"});
  CHECK_FALSE(spec->drift.segment_by_given);
  CHECK(spec->drift.max_keys_per_model == 64);
  CHECK(spec->drift.max_segments_per_model == 20);
  CHECK(spec->drift.max_keys == 4096);
  // The fingerprint holds the leaves' paths; segments from groupBy are in its groupBy already.
  const std::string fingerprint = PipelineFingerprintJson(*spec);
  CHECK(fingerprint.find(R"("name":"segment.country","type":"string","nullable":true,"path":["segment","country"])") !=
        std::string::npos);
  CHECK(fingerprint.find(R"("requiredStructs":[["segment"]])") != std::string::npos);
  CHECK(fingerprint.find("segmentBy") == std::string::npos);
}

// The problem of a file that is kNamedFeatures with `from` replaced by `to`.
std::string ProblemOf(std::string_view from, std::string_view to) {
  std::string text(kNamedFeatures);
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  auto spec = ParseText(text);
  REQUIRE_FALSE(spec);
  UNSCOPED_INFO(ProblemText(spec));
  return ProblemText(spec);
}

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n') + 1); }

TEST_CASE("bad types are reported at their line and the offending character, once",
          "[config][types]") {
  CHECK(FirstLine(ProblemOf("struct<country:string, channel:string>",
                            "struct<country:strin, channel:string>")) ==
        "test.yaml:6:26: schema[2].type: type 'struct<country:strin, channel:string>': unknown "
        "type 'strin'; expected one of timestamp, string, double, long, int, boolean, "
        "array<double>, array<string>, map<string,double>, map<string,string>; did you mean "
        "'string'?\n");
  CHECK(FirstLine(ProblemOf("type: map<string, double>", "type: map<long, double>")) ==
        "test.yaml:9:15: schema[3].type: type 'map<long, double>': map keys must be strings "
        "(map<string,double> or map<string,string>), found 'long'\n");
  CHECK(FirstLine(ProblemOf("{name: tags, type: array<string>}",
                            "{name: tags, type: array<float>}")) ==
        "test.yaml:12:24: schema[5].type: unknown type 'array<float>'; expected one of "
        "timestamp, string, double, long, int, boolean, array<double>, array<string>, "
        "map<string,double>, map<string,string>, or struct<name:type, ...>; did you mean "
        "'array<double>'?\n");
  // The struct's leaves are not reported again where they are used.
  CHECK(testing::ErrorCount(ParseText(std::string(kNamedFeatures).replace(
            std::string(kNamedFeatures).find("country:string, channel"), 14,
            "country:strin"))) == 1);
  CHECK(ProblemOf("struct<country:string, channel:string>", "struct<country:string, country:int>")
            .find("test.yaml:6:34: schema[2].type: type 'struct<country:string, country:int>': "
                  "struct member 'country' is declared twice") != std::string::npos);
}

TEST_CASE("a struct's leaf may not take the name of another field", "[config][types]") {
  CHECK(ProblemOf("  - {name: tags, type: array<string>}", "  - {name: segment.country, type: string}")
            .find("test.yaml:12:12: schema[5].name: duplicate field 'segment.country' (first "
                  "declared at line 5)") != std::string::npos);
}

TEST_CASE("columns of structs and maps are checked where they are used", "[config][types]") {
  CHECK(ProblemOf("groupBy: [model_id, segment.country]", "groupBy: [model_id, segment.cuntry]")
            .find("test.yaml:19:23: query.groupBy[1]: groupBy column 'segment.cuntry' is not a "
                  "schema column; did you mean 'segment.country'?") != std::string::npos);
  CHECK(ProblemOf("groupBy: [model_id, segment.country]", "groupBy: [model_id, features]")
            .find("query.groupBy[1]: groupBy column 'features' is of type map<string,double>; "
                  "expected a string, long, int or boolean column") != std::string::npos);
  CHECK(ProblemOf("segment.channel = 'app'", "segment.chanel = 'app'")
            .find("test.yaml:17:38: query.where: condition '") != std::string::npos);
  CHECK(ProblemOf("series: [features, labels, segment.channel, tags]",
                  "series: [features, event_time]")
            .find("drift.series[1]: drift series 'event_time' is of type timestamp; expected a "
                  "numeric (double, long, int), array<double> or map<string,double> column, or "
                  "a categorical string, boolean, array<string> or map<string,string> column") !=
        std::string::npos);
}

TEST_CASE("segmentBy names group columns, not the model's, and its caps are bounded",
          "[config][segments]") {
  CHECK(ProblemOf("  maxKeysPerModel: 64", "  segmentBy: [segment.channel, model_id, features]")
            .find("drift.segmentBy[1]: segment column 'model_id' is the model column") !=
        std::string::npos);
  CHECK(ProblemOf("  maxKeysPerModel: 64", "  segmentBy: [segment.channel, model_id, features]")
            .find("drift.segmentBy[2]: segment column 'features' is of type map<string,double>") !=
        std::string::npos);
  CHECK(ProblemOf("maxSegmentsPerModel: 20", "maxSegmentsPerModel: 0")
            .find("test.yaml:26:24: drift.maxSegmentsPerModel: must be at least 1") != std::string::npos);
  auto given = ParseText(std::string(kNamedFeatures).replace(
      std::string(kNamedFeatures).find("  maxKeysPerModel: 64"), 21,
      "  segmentBy: [segment.channel]"));
  INFO(ProblemText(given));
  REQUIRE(given);
  CHECK(given->drift.segment_by == std::vector<std::string>{"segment.channel"});
  CHECK(PipelineFingerprintJson(*given).find(R"("segmentBy":["segment.channel"])") !=
        std::string::npos);
}

}  // namespace
}  // namespace driftd

namespace driftd {
namespace {

TEST_CASE("an override may name one key of a map series, or a struct's leaves via the struct",
          "[config][types]") {
  std::string text(kNamedFeatures);
  text.replace(text.find("  maxKeysPerModel: 64"), std::string_view("  maxKeysPerModel: 64").size(),
               "  overrides: [{series: features.amount, detector: psi, alert: 7}, "
               "{series: \"features.amount[0]\", detector: psi, alert: 7}]");
  auto spec = ParseText(text);
  REQUIRE_FALSE(spec);
  // Only the indexed one is refused: features is a map, not an array<double>.
  CHECK(testing::ErrorCount(spec) == 1);
  INFO(ProblemText(spec));
  CHECK(ProblemText(spec).find("drift.overrides[1].series: series 'features.amount[0]' is not "
                               "among drift.series") != std::string::npos);
}

}  // namespace
}  // namespace driftd
