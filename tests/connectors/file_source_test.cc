#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "connectors/connector_factories.h"
#include "connectors/inference_generator.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

using testing::AppendText;
using testing::ReadRange;
using testing::SourcePipeline;
using testing::TempDir;
using testing::Texts;
using testing::WriteText;

std::unique_ptr<Source> StartedFiles(const TempDir& dir,
                                     std::map<std::string, std::string> options = {},
                                     int64_t max_record_bytes = 1 << 20) {
  options["path"] = dir.path();
  PipelineSpec pipeline = SourcePipeline("file", options);
  pipeline.source.malformed.max_record_bytes = max_record_bytes;
  auto source = CreateFileSource(pipeline);
  REQUIRE(source);
  REQUIRE((*source)->Start({}));
  return std::move(*source);
}

SourceOffsets Plan(Source& source, const SourceOffsets& start) {
  auto end = source.PlanBatch(start);
  REQUIRE(end);
  return *end;
}

TEST_CASE("the file source reads the complete lines of matching files in name order",
          "[file][source]") {
  TempDir dir;
  WriteText(dir.Sub("b.jsonl"), "{\"n\":3}\n");
  WriteText(dir.Sub("a.json"), "{\"n\":1}\r\n\r\n   \n{\"n\":2}\n");
  WriteText(dir.Sub(".a.jsonl.tmp"), "{\"hidden\":1}\n");
  WriteText(dir.Sub("_b.jsonl"), "{\"underscore\":1}\n");
  WriteText(dir.Sub("notes.txt"), "{\"wrong extension\":1}\n");
  auto source = StartedFiles(dir);
  SourceOffsets start = *source->InitialOffsets();
  SourceOffsets end = Plan(*source, start);
  CHECK(end == SourceOffsets{{"a.json", 23}, {"b.jsonl", 8}});
  auto records = ReadRange(*source, start, end);
  CHECK(Texts(records) == std::vector<std::string>{"{\"n\":1}", "{\"n\":2}", "{\"n\":3}"});
  CHECK(records[1].position.offset == 15);
  CHECK(source->DescribePosition(records[1].position) == "file " + dir.Sub("a.json") + " byte 15");
  CHECK(source->DescribePosition(records[2].position) == "file " + dir.Sub("b.jsonl") + " byte 0");
  // Nothing new: the plan is the start.
  CHECK(Plan(*source, end) == end);
}

TEST_CASE("a half-written last line is consumed only once its newline arrives", "[file][source]") {
  TempDir dir;
  WriteText(dir.Sub("log.jsonl"), "{\"n\":1}\n{\"n\":");
  auto source = StartedFiles(dir);
  SourceOffsets first = Plan(*source, {});
  CHECK(first.at("log.jsonl") == 8);
  CHECK(Texts(ReadRange(*source, {}, first)) == std::vector<std::string>{"{\"n\":1}"});
  CHECK(Plan(*source, first) == first);

  AppendText(dir.Sub("log.jsonl"), "2}\n{\"n\":3}\n");
  SourceOffsets second = Plan(*source, first);
  CHECK(second.at("log.jsonl") == 24);
  CHECK(Texts(ReadRange(*source, first, second)) ==
        std::vector<std::string>{"{\"n\":2}", "{\"n\":3}"});
}

TEST_CASE("files added while running are picked up by the next batch", "[file][source]") {
  TempDir dir;
  WriteText(dir.Sub("2026-01.jsonl"), "{\"n\":1}\n");
  auto source = StartedFiles(dir);
  SourceOffsets first = Plan(*source, {});
  CHECK(Plan(*source, first) == first);
  WriteText(dir.Sub("2026-02.jsonl"), "{\"n\":2}\n");
  SourceOffsets second = Plan(*source, first);
  CHECK(second == SourceOffsets{{"2026-01.jsonl", 8}, {"2026-02.jsonl", 8}});
  CHECK(Texts(ReadRange(*source, first, second)) == std::vector<std::string>{"{\"n\":2}"});
  // Lag counts the bytes not yet consumed.
  auto lag = source->Lag(first);
  REQUIRE(lag.size() == 1);
  CHECK(lag[0].partition == "2026-02.jsonl");
  CHECK(lag[0].lag() == 8);
}

TEST_CASE("maxFilesPerTrigger bounds the files a batch touches", "[file][source]") {
  TempDir dir;
  for (int i = 0; i < 5; ++i) WriteText(dir.Sub(fmt::format("f{}.jsonl", i)), "{}\n{}\n");
  auto source = StartedFiles(dir, {{"maxFilesPerTrigger", "2"}});
  std::vector<size_t> records_per_batch;
  SourceOffsets position;
  while (true) {
    SourceOffsets next = Plan(*source, position);
    if (next == position) break;
    records_per_batch.push_back(ReadRange(*source, position, next).size());
    position = next;
  }
  CHECK(records_per_batch == std::vector<size_t>{4, 4, 2});
  CHECK(position.size() == 5);
}

TEST_CASE("maxBytesPerTrigger cuts batches at line ends and lets a longer line go alone",
          "[file][source]") {
  TempDir dir;
  std::string long_line = "{\"x\":\"" + std::string(80, 'a') + "\"}";
  // Lines of 10 bytes with their newline, then one of 89.
  WriteText(dir.Sub("a.jsonl"), "{\"n\":111}\n{\"n\":222}\n{\"n\":333}\n" + long_line + "\n");
  WriteText(dir.Sub("b.jsonl"), "{\"n\":444}\n");
  auto source = StartedFiles(dir, {{"maxBytesPerTrigger", "25"}});
  std::vector<std::vector<std::string>> batches;
  SourceOffsets position;
  while (true) {
    SourceOffsets next = Plan(*source, position);
    if (next == position) break;
    batches.push_back(Texts(ReadRange(*source, position, next)));
    position = next;
  }
  CHECK(batches ==
        std::vector<std::vector<std::string>>{
            {"{\"n\":111}", "{\"n\":222}"}, {"{\"n\":333}"}, {long_line}, {"{\"n\":444}"}});
}

TEST_CASE("re-reading a planned range yields identical records whatever the chunk size",
          "[file][source]") {
  TempDir dir;
  InferenceGeneratorOptions options;
  options.rows_per_second = 100;
  auto generator = InferenceGenerator::Create(options);
  REQUIRE(generator);
  std::vector<std::string> expected;
  for (int file = 0; file < 3; ++file) {
    std::string text;
    generator->AppendJsonLines(file * 700, 700, text);
    WriteText(dir.Sub(fmt::format("part-{}.jsonl", file)), text);
    for (uint64_t row = file * 700; row < file * 700 + 700u; ++row) {
      std::string line;
      generator->AppendRecord(row, line);
      expected.push_back(line);
    }
  }
  auto source = StartedFiles(dir, {{"maxBytesPerTrigger", "50000"}});
  std::vector<std::string> all;
  SourceOffsets position;
  int batches = 0;
  while (true) {
    SourceOffsets next = Plan(*source, position);
    if (next == position) break;
    auto small_chunks = ReadRange(*source, position, next, 300);
    auto large_chunks = ReadRange(*source, position, next, 1 << 20);
    REQUIRE(Texts(small_chunks) == Texts(large_chunks));
    for (size_t i = 0; i < small_chunks.size(); ++i) {
      REQUIRE(small_chunks[i].position.partition == large_chunks[i].position.partition);
      REQUIRE(small_chunks[i].position.offset == large_chunks[i].position.offset);
    }
    for (auto& text : Texts(small_chunks)) all.push_back(text);
    position = next;
    ++batches;
  }
  CHECK(batches > 3);
  CHECK(all == expected);
}

TEST_CASE("records, positions and cut lines are the same whatever the chunk size", "[file][source]") {
  TempDir dir;
  std::string text = "\xEF\xBB\xBF{\"n\":1}\r\n\r\n   \n";
  for (int i = 2; i < 200; ++i) {
    text += fmt::format("{{\"n\":{},\"pad\":\"{}\"}}{}\n", i, std::string(i % 37, 'x'),
                        i % 5 == 0 ? "\r" : "");
    if (i % 50 == 0) text += "{\"long\":\"" + std::string(2500 + i, 'y') + "\"}\n";
  }
  WriteText(dir.Sub("a.jsonl"), text);
  WriteText(dir.Sub("b.jsonl"), "{\"n\":\"b\"}\n" + std::string(3000, 'z') + "\n{\"n\":\"c\"}\n");
  auto source = StartedFiles(dir, {}, 2000);
  SourceOffsets end = Plan(*source, {});
  const auto whole = ReadRange(*source, {}, end, 1 << 20);
  // a: n=1 (its mark and the blank lines are not records), n=2..199, three long lines cut;
  // b: two records and a line of z cut.
  REQUIRE(whole.size() == 1 + 198 + 3 + 3);
  CHECK(whole[0].text == "{\"n\":1}");
  CHECK(whole[0].position.offset == 3);
  for (size_t max_bytes : {size_t{1}, size_t{13}, size_t{300}, size_t{2001}, size_t{4096}}) {
    INFO("chunks of " << max_bytes << " bytes");
    const auto chunked = ReadRange(*source, {}, end, max_bytes);
    REQUIRE(chunked.size() == whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      INFO("record " << i);
      CHECK(chunked[i].text == whole[i].text);
      CHECK(chunked[i].position.partition == whole[i].position.partition);
      CHECK(chunked[i].position.offset == whole[i].position.offset);
      CHECK(chunked[i].cut == whole[i].cut);
    }
  }
}

TEST_CASE("a file that shrank or vanished under a committed position is data loss",
          "[file][source]") {
  TempDir dir;
  WriteText(dir.Sub("a.jsonl"), "{\"n\":1}\n{\"n\":2}\n");
  auto source = StartedFiles(dir);
  SourceOffsets committed = Plan(*source, {});

  WriteText(dir.Sub("a.jsonl"), "{\"n\":1}\n");
  auto shrank = source->PlanBatch(committed);
  REQUIRE_FALSE(shrank);
  CHECK(shrank.error().code() == ErrorCode::kDataLoss);
  CHECK_THAT(shrank.error().message(), Catch::Contains(dir.Sub("a.jsonl")));

  std::filesystem::remove(dir.Sub("a.jsonl"));
  auto vanished = source->PlanBatch(committed);
  REQUIRE_FALSE(vanished);
  CHECK(vanished.error().code() == ErrorCode::kDataLoss);

  // Replaying a range whose file is gone is data loss too.
  auto reader = source->Read({}, committed);
  REQUIRE(reader);
  InputChunk chunk;
  auto next = (*reader)->Next(chunk, 1 << 20);
  REQUIRE_FALSE(next);
  CHECK(next.error().code() == ErrorCode::kDataLoss);

  // With failOnDataLoss off, removing processed files is tolerated.
  auto tolerant = StartedFiles(dir, {{"failOnDataLoss", "false"}});
  WriteText(dir.Sub("b.jsonl"), "{\"n\":3}\n");
  auto next_plan = tolerant->PlanBatch(committed);
  REQUIRE(next_plan);
  CHECK(next_plan->at("b.jsonl") == 8);
}

TEST_CASE("a line longer than maxRecordBytes is cut instead of held whole", "[file][source]") {
  TempDir dir;
  std::string huge = "{\"x\":\"" + std::string(3 << 20, 'z') + "\"}";
  WriteText(dir.Sub("a.jsonl"), huge + "\n{\"n\":2}\n");
  auto source = StartedFiles(dir, {}, 1000);
  SourceOffsets end = Plan(*source, {});
  auto records = ReadRange(*source, {}, end, 4096);
  REQUIRE(records.size() == 2);
  CHECK(records[0].text.size() == 1001);  // over the limit, so the decoder flags it too large
  CHECK(records[0].cut);                  // and a dead letter says it holds only the start
  CHECK_FALSE(records[1].cut);
  CHECK(records[0].position.offset == 0);
  CHECK(records[1].text == "{\"n\":2}");
  CHECK(records[1].position.offset == static_cast<int64_t>(huge.size()) + 1);
}

TEST_CASE("a UTF-8 byte order mark at the start of a file does not cost its first record",
          "[file][source]") {
  TempDir dir;
  WriteText(dir.Sub("a.jsonl"), "\xEF\xBB\xBF{\"n\":1}\r\n{\"n\":2}\n");
  // Only at the very start: elsewhere the bytes are the record's own.
  WriteText(dir.Sub("b.jsonl"), "{\"n\":3}\n\xEF\xBB\xBF{\"n\":4}\n");
  auto source = StartedFiles(dir);
  SourceOffsets end = Plan(*source, {});
  auto records = ReadRange(*source, {}, end);
  REQUIRE(records.size() == 4);
  CHECK(records[0].text == "{\"n\":1}");
  CHECK(records[0].position.offset == 3);
  CHECK(records[1].text == "{\"n\":2}");
  CHECK(records[3].text == "\xEF\xBB\xBF{\"n\":4}");
}

TEST_CASE("availableNow sees only the files and bytes present when it froze", "[file][source]") {
  TempDir dir;
  WriteText(dir.Sub("a.jsonl"), "{\"n\":1}\n");
  auto source = StartedFiles(dir);
  REQUIRE(source->FreezeAvailable());
  AppendText(dir.Sub("a.jsonl"), "{\"n\":2}\n");
  WriteText(dir.Sub("b.jsonl"), "{\"n\":3}\n");
  SourceOffsets end = Plan(*source, {});
  CHECK(end == SourceOffsets{{"a.jsonl", 8}});
  CHECK(Plan(*source, end) == end);
}

TEST_CASE("the file source refuses a path that is not a directory", "[file][source]") {
  TempDir dir;
  auto source = CreateFileSource(SourcePipeline("file", {{"path", dir.Sub("missing")}}));
  REQUIRE(source);
  auto started = (*source)->Start({});
  REQUIRE_FALSE(started);
  CHECK_THAT(started.error().message(), Catch::Contains("missing"));
}

}  // namespace
}  // namespace driftd
