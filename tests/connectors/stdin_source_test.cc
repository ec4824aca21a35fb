// The stdin source, with the process's standard input replaced by a pipe the test writes.
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "connectors/fs_util.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

using testing::ReadRange;
using testing::SourcePipeline;
using testing::Texts;

// Standard input replaced by a pipe while it lives; the old one put back after.
class PipedStdin {
 public:
  PipedStdin() {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    read_ = UniqueFd(fds[0]);
    write_ = UniqueFd(fds[1]);
    saved_ = UniqueFd(::dup(STDIN_FILENO));
    REQUIRE(saved_.valid());
    REQUIRE(::dup2(read_.get(), STDIN_FILENO) == STDIN_FILENO);
    read_ = UniqueFd();
  }
  ~PipedStdin() { ::dup2(saved_.get(), STDIN_FILENO); }

  void Write(std::string_view text) {
    REQUIRE(::write(write_.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  }
  // The end of the input: the writer goes away.
  void Close() { write_ = UniqueFd(); }

 private:
  UniqueFd read_;
  UniqueFd write_;
  UniqueFd saved_;
};

std::unique_ptr<Source> StartedStdin(const std::map<std::string, std::string>& options = {}) {
  const ConnectorDecl* kind = FindSourceKind("stdin");
  REQUIRE(kind != nullptr);
  auto source = kind->create_source(SourcePipeline("stdin", options));
  REQUIRE(source);
  REQUIRE((*source)->Start({}));
  return std::move(*source);
}

// Plans until the source has read `lines` lines in total, or five seconds pass.
SourceOffsets AwaitLines(Source& source, const SourceOffsets& start, int64_t lines) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    auto end = source.PlanBatch(start);
    REQUIRE(end);
    if (end->at("stdin") >= lines || std::chrono::steady_clock::now() > deadline) return *end;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST_CASE("the stdin source reads JSON lines as they are written, and is not replayable",
          "[connectors][stdin]") {
  PipedStdin input;
  {
    auto source = StartedStdin();
    CHECK_FALSE(source->IsReplayable());
    auto start = source->InitialOffsets();
    REQUIRE(start);
    CHECK(start->at("stdin") == 0);
    input.Write("{\"a\":1}\n\r\n{\"a\":2}\r\n{\"a\":");  // a blank line, a line still coming
    SourceOffsets end = AwaitLines(*source, *start, 2);
    CHECK(end.at("stdin") == 2);
    CHECK(Texts(ReadRange(*source, *start, end)) ==
          std::vector<std::string>{"{\"a\":1}", "{\"a\":2}"});
    source->OnCheckpointed(end);
    input.Write("3}\n");
    SourceOffsets next = AwaitLines(*source, end, 3);
    CHECK(Texts(ReadRange(*source, end, next)) == std::vector<std::string>{"{\"a\":3}"});
    CHECK(source->DescribePosition(RecordPosition{0, 2}) == "stdin line 3");
  }
}

TEST_CASE("with availableNow the stdin source drains its input to the end, beyond its buffer",
          "[connectors][stdin]") {
  PipedStdin input;
  auto source = StartedStdin({{"maxBufferedBytes", "1024"}});
  REQUIRE(source->FreezeAvailable());
  // 600 lines of ~20 bytes: many times the buffer, read as batches commit.
  std::thread writer([&input] {
    for (int i = 0; i < 600; ++i) input.Write("{\"n\":" + std::to_string(i) + ",\"x\":1}\n");
    input.Write("{\"n\":600}");  // the last line needs no newline
    input.Close();
  });
  auto position = source->InitialOffsets();
  REQUIRE(position);
  SourceOffsets at = *position;
  std::vector<std::string> read;
  std::optional<SourceOffsets> delivering;  // the batch whose delivery ends in the next one
  while (true) {
    // As the executor does: a batch is checkpointed, then the next one is planned and read
    // while the last one's delivery goes on; its OnCommitted comes only then.
    auto end = source->PlanBatch(at);  // waits for lines, or the end
    REQUIRE(end);
    if (delivering) REQUIRE(source->OnCommitted(*delivering));
    if (*end == at) break;
    for (std::string& text : Texts(ReadRange(*source, at, *end))) read.push_back(std::move(text));
    source->OnCheckpointed(*end);
    delivering = *end;
    at = *end;
  }
  writer.join();
  REQUIRE(read.size() == 601);
  CHECK(read.front() == "{\"n\":0,\"x\":1}");
  CHECK(read.back() == "{\"n\":600}");
  CHECK(at.at("stdin") == 601);
}

TEST_CASE("the stdin source's options are declared with their range", "[connectors][stdin]") {
  const ConnectorDecl* kind = FindSourceKind("stdin");
  REQUIRE(kind != nullptr);
  CHECK_THAT(kind->doc, Catch::Contains("NOT fault-tolerant"));
  auto refused = kind->create_source(SourcePipeline("stdin", {{"maxBufferedBytes", "10"}}));
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message(),
             Catch::Contains("stdin source: maxBufferedBytes: must be at least 1024, found 10"));
}

}  // namespace
}  // namespace driftd
