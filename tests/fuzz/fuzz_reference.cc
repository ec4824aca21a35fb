// libFuzzer harness: the reference-file reader of a file baseline (drift.baseline {type: file}),
// which reads either reference statistics (a JSON object marked "driftd_reference") or
// reference records (JSON lines of the pipeline's schema), through DriftStage::Create as
// `driftd validate` and a query's start do.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/loader.h"
#include "engine/executor/drift_stage.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace driftd;

std::string PipelineWithBaseline(const std::string& path) {
  return R"(name: fuzz-reference
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
  - {name: label, type: double}
  - {name: device, type: string}
source: {format: file, options: {path: /nonexistent}}
query: {groupBy: [model_id], aggregates: [count]}
drift:
  series: [feature_vector, prediction, device]
  predictionColumn: prediction
  labelColumn: label
  minSamples: 2
  baseline: {type: file, path: ")" +
         path + R"("}
sinks:
  - {format: console, stream: alerts}
)";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::MemoryFile reference(fuzz::AsText(data, size));
  LoadOptions options;  // no catalog: the source and sink are not under test
  auto spec = ParsePipeline(PipelineWithBaseline(reference.path()), "fuzz.yaml", options);
  if (!spec) std::abort();  // the fixed pipeline must load
  auto stage = DriftStage::Create(*spec);
  if (!stage && stage.error().message().empty()) std::abort();
  return 0;
}
