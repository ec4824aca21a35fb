// The pipeline a new user writes, on the most common topic there is: unkeyed records (every
// model in every one of 8 partitions) and drift's default windows (record counts). Against the
// real broker, maxOffsetsPerTrigger 1,000, 7,777 and 200,000 give one set of alert ids.
#include <random>
#include <set>
#include <string>
#include <vector>

#include <simdjson.h>

#include "tests/kafka/kafka_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using testing::RunDriftd;
using testing::RunResult;
using testing::TempDir;
using testing::WriteFile;

std::string Pipeline(const std::string& name, const std::string& input, const std::string& alerts,
                     int64_t max_offsets, const std::string& checkpoint) {
  return fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: x, type: double}}
source:
  format: kafka
  options:
    subscribe: {input}
    startingOffsets: earliest
    maxOffsetsPerTrigger: {max}
    kafka.bootstrap.servers: "{bootstrap}"
query:
  groupBy: [model_id]
  aggregates: [count, mean(x)]
drift:
  series: [x]
sinks:
  - name: alerts
    format: kafka
    stream: alerts
    options: {{topic: {alerts}, kafka.bootstrap.servers: "{bootstrap}"}}
trigger: {{availableNow: true}}
checkpointLocation: {checkpoint}
)",
                     fmt::arg("name", name), fmt::arg("input", input), fmt::arg("max", max_offsets),
                     fmt::arg("alerts", alerts), fmt::arg("checkpoint", checkpoint),
                     fmt::arg("bootstrap", Bootstrap()));
}

}  // namespace

TEST_CASE("default drift windows on an unkeyed 8-partition topic give one set of alert ids for "
          "maxOffsetsPerTrigger 1,000, 7,777 and 200,000",
          "[kafka][drift][order]") {
  Admin admin;
  const std::string input = UniqueName("unkeyed-in");
  admin.CreateTopic(input, 8);
  // 4 models, 40,000 records spread at random over the partitions, each partition in time order
  // with jitter; model-2's x shifts by 1.5 sd half way.
  std::mt19937_64 random(20261204);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_int_distribution<int> pick(0, 7);
  std::uniform_int_distribution<int> jitter(-1500, 1500);
  std::vector<std::vector<std::string>> partitions(8);
  const int kRows = 40'000;
  for (int i = 0; i < kRows; ++i) {
    const int model = i % 4;
    double x = normal(random);
    if (model == 2 && i > kRows / 2) x += 1.5;
    const int64_t t = 1'795'946'400'000 + i * 10 + jitter(random);
    partitions[static_cast<size_t>(pick(random))].push_back(
        fmt::format(R"({{"model_id":"model-{}","event_time":{},"x":{:.6f}}})", model, t, x));
  }
  for (int p = 0; p < 8; ++p) Produce(input, p, partitions[static_cast<size_t>(p)]);

  std::vector<std::set<std::string>> runs;
  for (int64_t max_offsets : {1'000, 7'777, 200'000}) {
    TempDir dir("driftd-unkeyed");
    const std::string alerts = UniqueName("unkeyed-alerts");
    admin.CreateTopic(alerts, 1);
    WriteFile(dir / "p.yaml",
              Pipeline(UniqueName("unkeyed"), input, alerts, max_offsets, dir / "checkpoint"));
    RunResult run = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120));
    INFO("maxOffsetsPerTrigger " << max_offsets << ": " << run.output.substr(0, 3000));
    REQUIRE(run.exit_code == 0);
    // A new user is not warned: the default is right.
    CHECK(run.output.find("windowRecords") == std::string::npos);
    std::set<std::string> ids;
    simdjson::dom::parser parser;
    for (const Consumed& record : ReadSettled(alerts)) {
      simdjson::dom::element alert = parser.parse(record.value);
      ids.insert(fmt::format("{} {} {}", std::string_view(alert["alert_id"]),
                             std::string_view(alert["model"]), std::string_view(alert["level"])));
    }
    runs.push_back(std::move(ids));
  }
  REQUIRE(!runs[0].empty());
  bool model2 = false;
  for (const std::string& id : runs[0]) model2 = model2 || id.find(" model-2 ALERT") != std::string::npos;
  CHECK(model2);
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}

}  // namespace driftd
