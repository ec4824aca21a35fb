// Records that would make memory and state grow with their size: an array of 200,000 features
// (well under maxRecordBytes) is refused by malformed.maxArrayLength, so one such record costs
// neither memory nor checkpoint nor output.
#include <filesystem>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;

int64_t DirectoryBytes(const std::filesystem::path& dir) {
  int64_t bytes = 0;
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file(error)) bytes += static_cast<int64_t>(it->file_size(error));
  }
  return bytes;
}

std::string DriftPipeline(const std::string& dir) {
  return "name: wide\n"
         "schema:\n"
         "  - {name: model_id, type: string, nullable: false}\n"
         "  - {name: feature_vector, type: array<double>}\n"
         "  - {name: prediction, type: double}\n"
         "source: {format: file, options: {path: " + dir + "/in}, malformed: {policy: drop}}\n"
         "query: {groupBy: [model_id], aggregates: [count, mean(prediction)]}\n"
         "drift:\n"
         "  series: [feature_vector, prediction]\n"
         "  minSamples: 50\n"
         "  windowRecords: 100\n"
         "  baseline: {type: warmup, records: 100}\n"
         "sinks:\n"
         "  - {name: stats, format: file, stream: stats, outputMode: update, options: {path: " +
         dir + "/out}}\n"
         "  - {name: alerts, format: file, stream: alerts, options: {path: " + dir + "/alerts}}\n"
         "trigger: {availableNow: true}\n"
         "checkpointLocation: " + dir + "/checkpoint\n";
}

struct Costs {
  MeasuredRun run;
  int64_t checkpoint_bytes = 0;
  int64_t output_bytes = 0;
};

Costs RunOnce(const TempDir& dir, bool with_wide_record) {
  const std::string base = dir.path().string();
  std::string records;
  for (int i = 0; i < 400; ++i) {
    records += fmt::format(R"({{"model_id":"m{}","feature_vector":[{},{},0.5,1],"prediction":{}}})",
                           i % 2, i % 7, i % 3, (i % 10) * 0.1);
    records += "\n";
  }
  if (with_wide_record) {
    std::string wide = R"({"model_id":"m0","feature_vector":[)";
    for (int i = 0; i < 200'000; ++i) wide += i == 0 ? "0.5" : ",0.5";
    wide += R"(],"prediction":0.5})";
    REQUIRE(wide.size() < 1024 * 1024);  // under maxRecordBytes: only the array is too large
    records.insert(records.size() / 2, wide + "\n");
  }
  WriteFileAt(base + "/in/part-0.json", records);
  WriteFile(base + "/p.yaml", DriftPipeline(base));
  Costs costs;
  costs.run = RunDriftdMeasured({"run", base + "/p.yaml", "--http", "off"}, 4 * 1024 * 1024,
                                120s);
  costs.checkpoint_bytes = DirectoryBytes(base + "/checkpoint");
  costs.output_bytes = DirectoryBytes(base + "/out") + DirectoryBytes(base + "/alerts");
  return costs;
}

}  // namespace

TEST_CASE(
    "a record with a 200,000-element feature vector is dropped as too_large and costs neither "
    "memory, checkpoint nor output",
    "[service][malformed][e2e]") {
  TempDir plain_dir("driftd-wide-plain");
  TempDir wide_dir("driftd-wide");
  const Costs plain = RunOnce(plain_dir, false);
  const Costs wide = RunOnce(wide_dir, true);
  INFO(wide.run.output);
  REQUIRE(plain.run.exit_code == 0);
  REQUIRE(wide.run.exit_code == 0);
  CHECK_THAT(wide.run.output, Catch::Contains("\"too_large\":1"));
  INFO("peak RSS " << plain.run.peak_rss_kb << " KiB without, " << wide.run.peak_rss_kb
                   << " KiB with; checkpoint " << plain.checkpoint_bytes << " / "
                   << wide.checkpoint_bytes << " bytes; output " << plain.output_bytes << " / "
                   << wide.output_bytes << " bytes");
  // Without the cap: 370 MB more memory, a 31 MB checkpoint and 14 MB of output.
  CHECK(wide.run.peak_rss_kb < plain.run.peak_rss_kb + 50 * 1024);
  CHECK(wide.checkpoint_bytes < plain.checkpoint_bytes + 1024 * 1024);
  CHECK(wide.output_bytes < plain.output_bytes + 64 * 1024);
}

namespace {

std::string Base64Decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) break;  // '=' padding
    bits = bits << 6 | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  return out;
}

// The value of "key" in a flat JSON object row: a string's raw text between its quotes (the
// rows here hold no escapes where it matters), or the literal.
std::string Field(const std::string& row, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = row.find(needle);
  if (at == std::string::npos) return "<absent>";
  size_t begin = at + needle.size();
  if (row[begin] == '"') {
    const size_t end = row.find('"', begin + 1);
    return row.substr(begin + 1, end - begin - 1);
  }
  const size_t end = row.find_first_of(",}", begin);
  return row.substr(begin, end - begin);
}

// `text` as a JSON string's content (the texts here need only quotes escaped).
std::string Escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "dead letters hold the bytes received: invalid UTF-8 in base64, a cut record marked "
    "truncated with the size it holds",
    "[service][malformed][e2e]") {
  TempDir dir("driftd-dead-letters");
  const std::string base = dir.path().string();
  const std::string invalid_utf8 = "{\"model_id\":\"m\xff\xfe\",\"prediction\":1}";
  // Over maxRecordBytes: one read whole with its neighbours, one longer than the source's read
  // block, which it cuts to maxRecordBytes + 1 bytes rather than hold in memory.
  const std::string too_large = "{\"model_id\":\"m\",\"pad\":\"" + std::string(5000, 'x') + "\"}";
  const std::string huge = "{\"model_id\":\"m\",\"pad\":\"" + std::string(3 << 20, 'y') + "\"}";
  const std::string not_json = "{\"model_id\": nope}";
  WriteFileAt(base + "/in/part-0.json", invalid_utf8 + "\n" + too_large + "\n" + huge + "\n" +
                                           not_json + "\n" +
                                           "{\"model_id\":\"m\",\"prediction\":2}\n");
  WriteFile(base + "/p.yaml",
            "name: letters\n"
            "schema:\n"
            "  - {name: model_id, type: string, nullable: false}\n"
            "  - {name: prediction, type: double}\n"
            "source:\n"
            "  format: file\n"
            "  options: {path: " + base + "/in}\n"
            "  malformed: {policy: dead_letter, maxRecordBytes: 1000}\n"
            "query: {groupBy: [model_id], aggregates: [count]}\n"
            "sinks:\n"
            "  - {name: stats, format: file, stream: stats, outputMode: update, options: {path: " +
                base + "/out}}\n"
            "  - {name: rejects, format: file, stream: dead_letter, options: {path: " + base +
                "/rejects}}\n"
            "trigger: {availableNow: true}\n"
            "checkpointLocation: " + base + "/checkpoint\n");
  RunResult run = RunDriftd({"run", base + "/p.yaml", "--http", "off"});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::vector<std::string> rows;
  for (const auto& entry : std::filesystem::directory_iterator(base + "/rejects")) {
    if (entry.path().filename().string().rfind("part-", 0) != 0) continue;
    for (const std::string& line : SplitLines(ReadFile(entry.path()))) rows.push_back(line);
  }
  REQUIRE(rows.size() == 4);
  const std::string& utf8_row = rows[0];
  INFO(utf8_row);
  CHECK(Field(utf8_row, "raw") == "null");
  CHECK(Base64Decode(Field(utf8_row, "rawBase64")) == invalid_utf8);
  CHECK(Field(utf8_row, "rawBytes") == std::to_string(invalid_utf8.size()));
  CHECK(Field(utf8_row, "truncated") == "false");
  const std::string& large_row = rows[1];
  INFO(large_row.substr(0, 300));
  CHECK(Field(large_row, "reason") == "too_large");
  CHECK(Field(large_row, "truncated") == "false");
  CHECK(Field(large_row, "rawBytes") == std::to_string(too_large.size()));
  CHECK_THAT(large_row, Catch::Contains("\"raw\":\"" + Escaped(too_large) + "\""));
  const std::string& huge_row = rows[2];
  INFO(huge_row.substr(0, 300));
  CHECK(Field(huge_row, "reason") == "too_large");
  CHECK(Field(huge_row, "truncated") == "true");
  CHECK(Field(huge_row, "rawBytes") == "1001");
  CHECK_THAT(huge_row, Catch::Contains("\"raw\":\"" + Escaped(huge.substr(0, 1001)) + "\""));
  CHECK_THAT(Field(huge_row, "detail"), Catch::Contains("more than 1000 bytes"));
  const std::string& json_row = rows[3];
  CHECK_THAT(json_row, Catch::Contains("\"raw\":\"" + Escaped(not_json) + "\""));
  CHECK(Field(json_row, "truncated") == "false");
}

}  // namespace driftd::testing
