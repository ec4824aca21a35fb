// Helpers for connector tests: temporary directories, pipelines built by hand with the
// connector's declared defaults (as config/ would fill them in), and draining a source range.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "connectors/registry.h"
#include "tests/support/test_support.h"

namespace driftd::testing {

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

inline void AppendText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << text;
  REQUIRE(out.good());
}

/// Options with the declared defaults of `format` (of `role`), overridden by `given`.
inline Options WithDefaults(std::string_view format, ConnectorRole role,
                            const std::map<std::string, std::string>& given) {
  Options options;
  for (const ConnectorDecl& decl : ConnectorDeclarations()) {
    if (decl.format != format || decl.role != role) continue;
    for (const OptionDecl& option : decl.options) {
      if (!option.default_value.empty()) options.Set(option.name, option.default_value);
    }
  }
  for (const auto& [name, value] : given) options.Set(name, value);
  return options;
}

inline PipelineSpec SourcePipeline(std::string format,
                                   const std::map<std::string, std::string>& given) {
  PipelineSpec pipeline;
  pipeline.name = "connector-test";
  pipeline.source.format = format;
  pipeline.source.options = WithDefaults(format, ConnectorRole::kSource, given);
  return pipeline;
}

struct ReadRecord {
  std::string text;
  RecordPosition position;
  bool cut = false;  // InputChunk::Record::cut
};

/// Every record of [start, end), read in chunks of about `max_bytes`.
inline std::vector<ReadRecord> ReadRange(Source& source, const SourceOffsets& start,
                                         const SourceOffsets& end, size_t max_bytes = 1 << 20) {
  auto reader = source.Read(start, end);
  REQUIRE(reader);
  std::vector<ReadRecord> records;
  InputChunk chunk;
  bool more = true;
  while (more) {
    chunk.Clear();
    auto next = (*reader)->Next(chunk, max_bytes);
    REQUIRE(next);
    more = *next;
    for (size_t i = 0; i < chunk.size(); ++i) {
      records.push_back(
          {std::string(chunk.record(i)), chunk.records()[i].position, chunk.records()[i].cut});
    }
  }
  return records;
}

inline std::vector<std::string> Texts(const std::vector<ReadRecord>& records) {
  std::vector<std::string> texts;
  for (const auto& record : records) texts.push_back(record.text);
  return texts;
}

}  // namespace driftd::testing
