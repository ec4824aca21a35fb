// libFuzzer harness: pipeline files through everything `driftd validate`, `run` and a SIGHUP
// reload do with them before a query starts. The input is one file, or two versions of one file
// separated by a NUL byte (the first as loaded at start, the second as re-read on reload):
// bounded reading (ReadPipelineText), the libyaml precheck, yaml-cpp, every rule of the loader
// against the real connector declarations, the fingerprint comparison of a reload, problem
// formatting, and the drift stage's set-up for pipelines that validate.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/drift_stage.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace driftd;

// The environment a pipeline may refer to: a secret and a plain variable.
std::optional<std::string> FuzzEnv(std::string_view name) {
  if (name == "API_TOKEN") return std::string("tok-5e3a9c71");
  if (name == "KAFKA_BOOTSTRAP") return std::string("127.0.0.1:9092");
  return std::nullopt;
}

std::optional<PipelineSpec> Load(std::string_view text, bool through_file) {
  LoadOptions options;
  options.catalog = &ConnectorDeclarations();
  options.env = FuzzEnv;
  std::vector<ConfigProblem> warnings;
  options.warnings = &warnings;
  PipelineResult result;
  if (through_file) {
    fuzz::MemoryFile file(text);
    result = LoadPipelineFile(file.path(), options);
  } else {
    result = ParsePipeline(text, "fuzz.yaml", options);
  }
  if (!result) {
    // Every refusal is at least one error, and each formats to one line.
    bool has_error = false;
    for (const ConfigProblem& problem : result.error()) {
      has_error = has_error || problem.severity == ProblemSeverity::kError;
      if (problem.message.empty()) std::abort();
    }
    if (!has_error) std::abort();
    (void)FormatProblems("fuzz.yaml", result.error());
    return std::nullopt;
  }
  (void)FormatProblems("fuzz.yaml", warnings);
  return std::move(*result);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input = fuzz::AsText(data, size);
  const size_t split = input.find('\0');
  std::string_view first = input.substr(0, split);
  auto loaded = Load(first, /*through_file=*/true);
  if (loaded) {
    std::string fingerprint = PipelineFingerprintJson(*loaded);
    if (fingerprint.empty() || fingerprint.front() != '{') std::abort();
    // validate's extra check; a file baseline would read a path named by the input.
    if (loaded->drift.enabled && loaded->drift.baseline.kind != BaselineKind::kFile) {
      (void)DriftStage::Create(*loaded);
    }
  }
  if (split != std::string_view::npos) {
    auto reloaded = Load(input.substr(split + 1), /*through_file=*/false);
    if (loaded && reloaded) {
      (void)(PipelineFingerprintJson(*loaded) == PipelineFingerprintJson(*reloaded));
    }
  }
  return 0;
}
