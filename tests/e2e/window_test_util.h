// Helpers of the event-time end-to-end tests: a small schema with a value column, records at
// seconds after kT0, per-batch rows of a file sink, progress records from the daemon's log.
#pragma once

#include <simdjson.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "connectors/file_sink.h"
#include "engine/time_iso8601.h"
#include "tests/support/test_support.h"

namespace driftd::testing {

/// 2026-11-29T10:00:00Z, a multiple of every window size used here.
inline constexpr int64_t kWindowT0Us = 1'795'946'400'000'000;

inline constexpr const char* kValueSchema = R"(schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: value, type: double}
)";

inline std::string EventRow(std::string_view model, double seconds, double value) {
  int64_t micros = kWindowT0Us + static_cast<int64_t>(std::llround(seconds * 1e6));
  return fmt::format(R"({{"model_id":"{}","event_time":"{}","value":{}}})", model,
                     FormatIso8601Micros(micros), value);
}

inline std::string Lines(const std::vector<std::string>& rows) {
  std::string text;
  for (const std::string& row : rows) text += row + "\n";
  return text;
}

/// "m1 [0,10) n=2 sum=9" (window bounds in seconds after kWindowT0Us), or "m1 n=2 sum=9".
inline std::string CompactRow(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element row = parser.parse(json);
  std::string out(row["model_id"].get_string().value());
  simdjson::dom::element window;
  if (row.at_key("window").get(window) == simdjson::SUCCESS) {
    auto start = ParseIso8601Micros(window["start"].get_string().value());
    auto end = ParseIso8601Micros(window["end"].get_string().value());
    REQUIRE(start);
    REQUIRE(end);
    out += fmt::format(" [{:g},{:g})", (*start - kWindowT0Us) / 1e6, (*end - kWindowT0Us) / 1e6);
  }
  out += fmt::format(" n={}", int64_t(row["count"]));
  simdjson::dom::element sum = row["sum(value)"];
  out += sum.is_null() ? std::string(" sum=null") : fmt::format(" sum={:g}", double(sum));
  return out;
}

/// The rows sink `sink` delivered in batch `batch_id` (which must be in the manifest).
inline std::vector<std::string> BatchRows(const std::filesystem::path& dir, int64_t batch_id,
                                          const std::string& sink) {
  REQUIRE(
      std::filesystem::exists(dir / std::string(kFileSinkManifestDir) / std::to_string(batch_id)));
  std::filesystem::path part = dir / FileSinkPartName(batch_id, sink);
  if (!std::filesystem::exists(part)) return {};
  return SplitLines(ReadFile(part));
}

inline std::vector<std::string> CompactBatch(const std::filesystem::path& dir, int64_t batch_id,
                                             const std::string& sink) {
  std::vector<std::string> rows;
  for (const std::string& row : BatchRows(dir, batch_id, sink)) rows.push_back(CompactRow(row));
  return rows;
}

/// Progress records (JSON) the daemon logged, in order.
inline std::vector<std::string> ProgressRecords(const std::string& log) {
  std::vector<std::string> records;
  for (const std::string& line : SplitLines(log)) {
    size_t at = line.find("progress {");
    if (at != std::string::npos) records.push_back(line.substr(at + 9));
  }
  return records;
}

/// A number inside the first element of the progress record's stateOperators.
inline int64_t StateOperatorValue(const std::string& progress, const char* name) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(progress);
  simdjson::dom::element op = root["stateOperators"].at(0);
  simdjson::dom::element value;
  if (op.at_key(name).get(value) != simdjson::SUCCESS) return -1;
  return int64_t(value);
}

inline int64_t ProgressValue(const std::string& progress, const char* name) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(progress);
  return int64_t(root[name]);
}

}  // namespace driftd::testing
