// The embedded Kafka stand-in behind `driftd demo` (connectors/kafka/embedded_cluster.h): what
// the feeder writes at its steady rate, the tail reads back, every record once and in order.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "connectors/kafka/embedded_cluster.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using Clock = std::chrono::steady_clock;

TEST_CASE("records fed into the embedded cluster are read back once each, in order per key",
          "[e2e][demo][kafka]") {
  auto cluster = EmbeddedKafkaCluster::Start();
  REQUIRE(cluster);
  CHECK((*cluster)->bootstrap_servers().rfind("127.0.0.1:", 0) == 0);
  REQUIRE((*cluster)->CreateTopic("records", 3));
  CHECK_FALSE((*cluster)->CreateTopic("records", 3));  // exists already

  std::mutex mutex;
  std::map<std::string, std::vector<uint64_t>> values_by_key;
  TopicTailOptions tail_options;
  tail_options.bootstrap_servers = (*cluster)->bootstrap_servers();
  tail_options.topic = "records";
  tail_options.on_record = [&](const TailRecord& record) {
    std::lock_guard<std::mutex> lock(mutex);
    values_by_key[std::string(record.key)].push_back(std::stoull(std::string(record.value)));
  };
  auto tail = TopicTail::Start(std::move(tail_options));
  REQUIRE(tail);

  constexpr int64_t kRate = 2000;
  TopicFeederOptions feeder_options;
  feeder_options.bootstrap_servers = (*cluster)->bootstrap_servers();
  feeder_options.topic = "records";
  feeder_options.records_per_second = kRate;
  feeder_options.make_record = [](uint64_t n, std::string& key, std::string& value) {
    key = fmt::format("key-{}", n % 5);
    value = std::to_string(n);
  };
  const Clock::time_point start = Clock::now();
  auto feeder = TopicFeeder::Start(std::move(feeder_options));
  REQUIRE(feeder);

  REQUIRE(WaitFor([&] { return (*tail)->records() >= 1000; }, std::chrono::seconds(20)));
  (*feeder)->Stop();
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t delivered = (*feeder)->delivered();
  CHECK((*feeder)->failed() == 0);
  // The feeder keeps its pace: never ahead of the rate (one tick of slack).
  CHECK(static_cast<double>(delivered) <= kRate * elapsed_s + kRate / 10.0);
  REQUIRE(WaitFor([&] { return (*tail)->records() == delivered; }, std::chrono::seconds(20)));
  (*tail)->Stop();

  std::vector<bool> seen(delivered, false);
  for (const auto& [key, values] : values_by_key) {
    INFO(key);
    for (size_t i = 0; i < values.size(); ++i) {
      REQUIRE(values[i] < delivered);
      CHECK(key == fmt::format("key-{}", values[i] % 5));
      if (i > 0) CHECK(values[i] > values[i - 1]);  // one key, one partition, in order
      CHECK_FALSE(seen[values[i]]);
      seen[values[i]] = true;
    }
  }
  CHECK(std::count(seen.begin(), seen.end(), true) == static_cast<long>(delivered));
}

TEST_CASE("a feeder or tail without a topic or a callback is refused before it starts",
          "[e2e][demo][kafka]") {
  auto cluster = EmbeddedKafkaCluster::Start();
  REQUIRE(cluster);
  TopicFeederOptions feeder;
  feeder.bootstrap_servers = (*cluster)->bootstrap_servers();
  feeder.make_record = [](uint64_t, std::string&, std::string&) {};
  CHECK_FALSE(TopicFeeder::Start(feeder));
  feeder.topic = "records";
  feeder.make_record = nullptr;
  CHECK_FALSE(TopicFeeder::Start(feeder));

  TopicTailOptions tail;
  tail.bootstrap_servers = (*cluster)->bootstrap_servers();
  tail.topic = "records";
  CHECK_FALSE(TopicTail::Start(tail));
}

}  // namespace
}  // namespace driftd::testing
