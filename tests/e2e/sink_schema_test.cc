// `driftd sink-schema`: the Avro writer schema a sink writes with, for consumers without a
// schema registry; and `driftd validate` refusing an Avro sink whose schema does not cover its
// rows, at the option's line. Neither touches a broker.
#include <catch2/catch.hpp>

#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

// (A file source: a Kafka source would add a warning about record-count drift windows.)
std::string Pipeline(const TempDir& dir, const std::string& stats_value_options) {
  return R"(name: sink-schema
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: prediction, type: double}
source:
  format: file
  options: {path: )" + dir / "in" + R"(}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
drift:
  series: [prediction]
sinks:
  - name: stats
    format: kafka
    options: {topic: model-stats, kafka.bootstrap.servers: "127.0.0.1:9"}
    valueFormat: avro
)" + stats_value_options +
         R"(  - {name: alerts, format: kafka, stream: alerts, valueFormat: avro,
     options: {topic: model-alerts, kafka.bootstrap.servers: "127.0.0.1:9"}}
  - {name: raw, format: kafka, options: {topic: raw, kafka.bootstrap.servers: "127.0.0.1:9"}}
)";
}

TEST_CASE("driftd sink-schema prints a sink's Avro writer schema", "[e2e][avro]") {
  TempDir dir("driftd-sink-schema");
  WriteFile(dir / "p.yaml", Pipeline(dir, ""));

  RunResult stats = RunDriftd({"sink-schema", dir / "p.yaml", "stats"});
  INFO(stats.output);
  REQUIRE(stats.exit_code == 0);
  CHECK(stats.output.find(R"("name": "Stats")") != std::string::npos);
  CHECK(stats.output.find(R"("name": "mean_prediction")") != std::string::npos);

  // The alerts sink's is the shipped file, to the byte.
  RunResult alerts = RunDriftd({"sink-schema", dir / "p.yaml", "alerts"});
  REQUIRE(alerts.exit_code == 0);
  CHECK(alerts.output ==
        ReadFile(std::string(DRIFTD_SOURCE_DIR) + "/deploy/avro/driftd-alert.avsc"));

  // Several Avro sinks: name one; a JSON sink has no writer schema.
  RunResult unnamed = RunDriftd({"sink-schema", dir / "p.yaml"});
  CHECK(unnamed.exit_code == 64);
  CHECK(unnamed.output.find("name the sink; the sinks with an Avro writer schema: 'stats', "
                            "'alerts'") != std::string::npos);
  RunResult raw = RunDriftd({"sink-schema", dir / "p.yaml", "raw"});
  CHECK(raw.exit_code == 64);
  CHECK(raw.output.find("sink 'raw' writes no Avro") != std::string::npos);
}

TEST_CASE("driftd validate refuses an Avro sink whose schemaFile does not cover its rows",
          "[e2e][avro]") {
  TempDir dir("driftd-sink-schema");
  WriteFile(dir / "s.avsc", R"({"type": "record", "name": "S", "fields": [
    {"name": "model_id", "type": "string"}, {"name": "count", "type": "long"}]})");
  WriteFile(dir / "p.yaml",
            Pipeline(dir, "    valueOptions: {schemaFile: " + dir / "s.avsc" + "}\n"));
  RunResult result = RunDriftd({"validate", dir / "p.yaml"});
  INFO(result.output);
  CHECK(result.exit_code == 78);
  CHECK(result.output.find("p.yaml:18:32: sinks[0].valueOptions.schemaFile: sink 'stats' "
                           "(stats stream): '" +
                           dir / "s.avsc" +
                           "' does not cover the rows: the writer schema's record S has no "
                           "field 'mean_prediction' for column 'mean(prediction)' (double)") !=
        std::string::npos);
}

}  // namespace
}  // namespace driftd::testing
