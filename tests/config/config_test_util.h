// Helpers for config tests: parse YAML text with the test catalog and a fake environment.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "config/loader.h"
#include "tests/config/test_catalog.h"

namespace driftd::testing {

using EnvMap = std::map<std::string, std::string, std::less<>>;

inline EnvLookup FakeEnv(EnvMap vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

inline LoadOptions TestOptions(EnvMap env = {}) {
  LoadOptions options;
  options.catalog = &TestCatalog();
  options.env = FakeEnv(std::move(env));
  return options;
}

inline PipelineResult ParseText(std::string_view yaml, EnvMap env = {}) {
  return ParsePipeline(yaml, "test.yaml", TestOptions(std::move(env)));
}

/// All problems, formatted, for failure messages and substring checks ("" when it parsed).
inline std::string ProblemText(const PipelineResult& result) {
  return result ? std::string() : FormatProblems("test.yaml", result.error());
}

inline size_t ErrorCount(const PipelineResult& result) {
  if (result) return 0;
  size_t n = 0;
  for (const auto& problem : result.error()) n += problem.severity == ProblemSeverity::kError;
  return n;
}

/// A small valid pipeline; tests append or replace parts of it.
inline constexpr std::string_view kMinimalPipeline = R"(name: minimal
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: features, type: array<double>}
  - {name: prediction, type: double}
source:
  format: file
  options: {path: /tmp/in}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
sinks:
  - {format: console}
)";

}  // namespace driftd::testing
