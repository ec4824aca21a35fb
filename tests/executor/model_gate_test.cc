// The cap on models (engine/executor/model_gate.h) on its own: names that differ in one byte
// anywhere, at every length, are told apart, so a model over the cap is never taken for one
// admitted before (the gate remembers recent names by a sketch of their bytes).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/loader.h"
#include "engine/executor/model_gate.h"
#include "tests/support/decoded_rows.h"

namespace driftd {
namespace {

constexpr const char* kPipeline = R"(
name: gate
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: x, type: double}
source: {format: file, options: {path: /tmp/none}}
query:
  groupBy: [model_id]
  aggregates: [count]
  maxModels: 1
sinks:
  - {name: stats, format: console, stream: stats}
)";

TEST_CASE("the model cap tells apart names that differ in any one byte, at every length",
          "[executor][models]") {
  auto spec = ParsePipeline(kPipeline, "gate.yaml", LoadOptions{});
  INFO((spec ? std::string() : FormatProblems("gate.yaml", spec.error())));
  REQUIRE(spec);
  const Schema schema = spec->schema;
  for (size_t length = 1; length <= 20; ++length) {
    for (size_t at = 0; at < length; ++at) {
      auto gate = ModelGate::Create(*spec);
      REQUIRE(gate);
      const std::string admitted(length, 'a');
      std::string other = admitted;
      other[at] = 'b';
      // The first name takes the only place; the second, seen right after it, is over the cap.
      auto record = [](const std::string& model) {
        return R"({"model_id":")" + model + R"(","x":1})";
      };
      RecordBatch rows = testing::DecodedRows(
          schema, {record(admitted), record(other), record(admitted), record(other)});
      INFO("length " << length << ", differing at " << at);
      CHECK(gate->Apply(rows));
      REQUIRE(rows.num_rows == 2);
      CHECK(rows.columns[0].String(0) == admitted);
      CHECK(rows.columns[0].String(1) == admitted);
      StateChanges changes;
      StageProgress progress;
      gate->Finish(changes, progress);
      CHECK(progress.rows_over_model_cap == 2);
      CHECK(progress.models == 1);
    }
  }
}

}  // namespace
}  // namespace driftd
