// The drift stage's shard threads on their own: every shard's work runs once per Run, each
// shard on a thread of its own (shard 0 on the caller's), and Run returns only once all of it
// is done, run after run.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "engine/executor/shard_pool.h"

namespace driftd {
namespace {

TEST_CASE("the shard pool runs each shard's work once per run, on a thread per shard, and "
          "returns when all of it is done",
          "[executor][threads]") {
  for (size_t shards : {1, 2, 3}) {
    INFO(shards << " shards");
    ShardPool pool(shards);
    REQUIRE(pool.shards() == shards);
    std::vector<int> runs(shards, 0);  // written by each shard's own thread only
    std::vector<std::thread::id> threads(shards);
    for (int run = 0; run < 200; ++run) {
      std::atomic<size_t> finished{0};
      pool.Run([&](size_t shard) {
        // The later shards take longer: Run must still wait for them.
        if (run % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(shard));
        ++runs[shard];
        threads[shard] = std::this_thread::get_id();
        finished.fetch_add(1);
      });
      REQUIRE(finished.load() == shards);
    }
    for (size_t shard = 0; shard < shards; ++shard) CHECK(runs[shard] == 200);
    CHECK(threads[0] == std::this_thread::get_id());
    CHECK(std::set<std::thread::id>(threads.begin(), threads.end()).size() == shards);
  }
}

}  // namespace
}  // namespace driftd
