#include "engine/offsets.h"

#include <simdjson.h>

#include "engine/json_writer.h"

namespace driftd {

std::string OffsetsToJson(const SourceOffsets& offsets) {
  std::string out = "{";
  bool first = true;
  for (const auto& [partition, offset] : offsets) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, partition);
    out.push_back(':');
    out += std::to_string(offset);
  }
  out.push_back('}');
  return out;
}

Result<SourceOffsets> OffsetsFromJson(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto error = parser.parse(json.data(), json.size()).get(root); error) {
    return MakeError(ErrorCode::kCorruption, "offsets are not JSON: {}",
                     simdjson::error_message(error));
  }
  simdjson::dom::object object;
  if (root.get(object) != simdjson::SUCCESS) {
    return MakeError(ErrorCode::kCorruption, "offsets are not a JSON object");
  }
  SourceOffsets offsets;
  for (auto field : object) {
    int64_t value = 0;
    if (field.value.get(value) != simdjson::SUCCESS) {
      return MakeError(ErrorCode::kCorruption, "offset of '{}' is not an integer",
                       std::string(field.key));
    }
    offsets.emplace(std::string(field.key), value);
  }
  return offsets;
}

}  // namespace driftd
