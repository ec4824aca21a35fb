// Pipelines, input files and output readers shared by the end-to-end tests.
#pragma once

#include <catch2/catch.hpp>
#include <simdjson.h>

#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "connectors/file_sink.h"
#include "connectors/inference_generator.h"
#include "tests/support/test_support.h"

namespace driftd::testing {

inline constexpr const char* kInferenceSchema = R"(schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
  - {name: ground_truth, type: double}
)";

/// Writes `files` JSON-lines files of `rows_per_file` generated inference records into `dir`
/// (input-0000.jsonl ...), rows numbered consecutively across files. Returns all records.
inline std::vector<std::string> WriteInferenceFiles(const std::string& dir, int files,
                                                    int rows_per_file, int models = 8,
                                                    uint64_t seed = 42) {
  InferenceGeneratorOptions options;
  options.models = models;
  options.features = 8;
  options.seed = seed;
  options.rows_per_second = 1000;
  options.start_time_ms = 1'795'000'000'000;
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  std::filesystem::create_directories(dir);
  std::vector<std::string> records;
  uint64_t row = 0;
  for (int f = 0; f < files; ++f) {
    std::string content;
    for (int r = 0; r < rows_per_file; ++r) {
      std::string record;
      generator->AppendRecord(row++, record);
      content += record;
      content += '\n';
      records.push_back(std::move(record));
    }
    WriteFile(std::filesystem::path(dir) / fmt::format("input-{:04}.jsonl", f), content);
  }
  return records;
}

/// Committed rows of a file sink, failing the test if they cannot be read.
inline std::vector<std::string> CommittedRows(const std::string& path) {
  auto rows = ReadCommittedFileSinkRows(path);
  REQUIRE(rows);
  return *rows;
}

/// The value of a top-level field of a JSON object, as text (strings without quotes).
inline std::string JsonField(const std::string& json, const std::string& field) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(json);
  simdjson::dom::element value;
  if (root.at_key(field).get(value) != simdjson::SUCCESS) return "<missing>";
  if (value.is_string()) return std::string(value.get_string().value());
  return simdjson::minify(value);
}

inline double JsonNumber(const std::string& json, const std::string& field) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(json);
  return double(root[field]);
}

}  // namespace driftd::testing
