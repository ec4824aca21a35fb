// The chunk pipeline on its own: chunks of numbered records go through decode, sequence and
// fold steps that record what they saw, on 1 to 4 threads, with steps slowed down at random so
// that threads overtake each other.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/executor/chunk_pipeline.h"

namespace driftd {
namespace {

// Sleeps a pseudo-random 0-300 us (seeded per chunk and step, so runs differ only by timing).
void Jitter(int64_t seq, int step) {
  std::mt19937 random(static_cast<uint32_t>(seq * 7919 + step));
  std::this_thread::sleep_for(std::chrono::microseconds(random() % 300));
}

struct Recorder {
  int64_t chunks = 40;
  int64_t records_per_chunk = 5;
  int64_t fail_read_at = -1;        // the read of this chunk fails
  std::set<int64_t> fail_decode;    // these chunks' decodes fail
  std::atomic<bool> stop{false};
  int64_t stop_after_reads = -1;    // stop_requested once this many chunks were read

  // What the steps saw.
  std::vector<int64_t> sequenced;
  std::vector<std::vector<int64_t>> folded;  // per lane: the records, in fold order
  std::atomic<int> decoding{0};
  std::atomic<int> max_in_flight{0};
  std::atomic<int> in_flight{0};  // read and not yet folded by every lane
  std::vector<std::atomic<int>> folds_of_chunk = std::vector<std::atomic<int>>(1000);
  std::mutex lane_mutex;
  int64_t read = 0;

  ChunkPipeline::Steps Steps(size_t lanes) {
    folded.assign(lanes, {});
    ChunkPipeline::Steps steps;
    steps.read = [this](InputChunk& input) -> Result<bool> {
      if (stop_after_reads >= 0 && read >= stop_after_reads) stop = true;
      if (stop) return MakeError(ErrorCode::kCancelled, "stopped");
      if (read == fail_read_at) return MakeError(ErrorCode::kIo, "read {} failed", read);
      for (int64_t r = 0; r < records_per_chunk; ++r) {
        const int64_t record = read * records_per_chunk + r;
        input.Append(std::to_string(record), RecordPosition{0, record});
      }
      max_in_flight = std::max(max_in_flight.load(), ++in_flight);
      ++read;
      return read < chunks;
    };
    steps.decode = [this](size_t, ChunkPipeline::Chunk& chunk) -> Status {
      Jitter(chunk.seq, 1);
      if (fail_decode.count(chunk.seq)) {
        return MakeError(ErrorCode::kMalformedRecord, "chunk {} is malformed", chunk.seq);
      }
      // The decoded "rows": one per record, its number in positions.
      chunk.records.positions.clear();
      for (size_t i = 0; i < chunk.input.size(); ++i) {
        chunk.records.positions.push_back(chunk.input.records()[i].position);
      }
      chunk.records.num_rows = chunk.input.size();
      return Ok();
    };
    steps.sequence = [this](ChunkPipeline::Chunk& chunk) {
      Jitter(chunk.seq, 2);
      sequenced.push_back(chunk.seq);
    };
    steps.fold = [this, lanes](size_t lane, const ChunkPipeline::Chunk& chunk) {
      Jitter(chunk.seq, 3 + static_cast<int>(lane));
      for (const RecordPosition& position : chunk.records.positions) {
        folded[lane].push_back(position.offset);
      }
      if (++folds_of_chunk[static_cast<size_t>(chunk.seq)] == static_cast<int>(lanes)) {
        --in_flight;
      }
    };
    return steps;
  }
};

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(i);
  return out;
}

TEST_CASE("every lane folds every chunk in read order, whatever the number of threads",
          "[executor][threads]") {
  for (size_t threads : {1, 2, 3, 4}) {
    DYNAMIC_SECTION(threads << " threads") {
      ChunkPipeline pipeline(threads, 3, 2 * threads);
      // Two batches on one pipeline: workers wait between them.
      for (int batch = 0; batch < 2; ++batch) {
        Recorder recorder;
        const auto steps = recorder.Steps(3);
        REQUIRE(pipeline.Run(steps));
        CHECK(recorder.sequenced == Iota(recorder.chunks));
        for (const auto& lane : recorder.folded) {
          CHECK(lane == Iota(recorder.chunks * recorder.records_per_chunk));
        }
        CHECK(recorder.max_in_flight <= static_cast<int>(2 * threads));
      }
    }
  }
}

TEST_CASE("the error of the earliest chunk is the batch's, as on one thread",
          "[executor][threads]") {
  for (size_t threads : {1, 2, 4}) {
    DYNAMIC_SECTION(threads << " threads") {
      ChunkPipeline pipeline(threads, 2, 2 * threads);
      SECTION("two chunks fail to decode") {
        Recorder recorder;
        recorder.fail_decode = {7, 9};
        auto steps = recorder.Steps(2);
        // Chunk 7 decodes slowly: chunk 9's error is known first.
        steps.decode = [inner = steps.decode](size_t thread, ChunkPipeline::Chunk& chunk) {
          if (chunk.seq == 7) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return inner(thread, chunk);
        };
        const Status status = pipeline.Run(steps);
        REQUIRE(!status);
        CHECK(status.error().message() == "chunk 7 is malformed");
        CHECK(recorder.sequenced == Iota(7));
      }
      SECTION("a read fails after a chunk that fails to decode") {
        Recorder recorder;
        recorder.fail_decode = {3};
        recorder.fail_read_at = 5;
        const Status status = pipeline.Run(recorder.Steps(2));
        REQUIRE(!status);
        CHECK(status.error().code() == ErrorCode::kMalformedRecord);
      }
      SECTION("a read fails") {
        Recorder recorder;
        recorder.fail_read_at = 5;
        const Status status = pipeline.Run(recorder.Steps(2));
        REQUIRE(!status);
        CHECK(status.error().message() == "read 5 failed");
        CHECK(recorder.sequenced == Iota(5));
      }
      SECTION("a stop") {
        Recorder recorder;
        recorder.stop_after_reads = 6;
        const Status status = pipeline.Run(recorder.Steps(2));
        REQUIRE(!status);
        CHECK(status.error().code() == ErrorCode::kCancelled);
      }
      // The pipeline runs the next batch normally after a failed one.
      Recorder next;
      REQUIRE(pipeline.Run(next.Steps(2)));
      CHECK(next.sequenced == Iota(next.chunks));
    }
  }
}

TEST_CASE("a batch of one empty chunk runs through every step", "[executor][threads]") {
  ChunkPipeline pipeline(2, 1, 4);
  Recorder recorder;
  recorder.chunks = 1;
  recorder.records_per_chunk = 0;
  REQUIRE(pipeline.Run(recorder.Steps(1)));
  CHECK(recorder.sequenced == std::vector<int64_t>{0});
  CHECK(recorder.folded[0].empty());
}

}  // namespace
}  // namespace driftd
