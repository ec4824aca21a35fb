// A boolean column as a drift series: watched as a categorical series of two values, "true" and
// "false" (as a JSON stream spells them), so that its share of true moving is an alert that
// names the category, while a stable share is not; the same through a restart.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "engine/executor/drift_stage.h"
#include "engine/json_decoder.h"
#include "tests/executor/drift_run.h"

namespace driftd {
namespace {

using testing::DriftRun;

constexpr int64_t kT0Ms = 1'700'000'000'000;

constexpr const char* kPipeline = R"(
name: approvals
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: approved, type: boolean}
  - {name: amount, type: double}
source:
  format: file
  options: {path: /tmp/in}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [approved, amount]
  baseline: {type: warmup, records: 1000}
  windowRecords: 500
sinks:
  - {name: alerts, format: console, stream: alerts}
)";

// Records of one model: `approved` true with probability 0.3, 0.6 from record `shift_from` on.
std::vector<std::string> Approvals(size_t count, size_t shift_from) {
  std::mt19937_64 random(11);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::normal_distribution<double> normal(100, 15);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    const bool approved = uniform(random) < (i >= shift_from ? 0.6 : 0.3);
    out.push_back(fmt::format(R"({{"model_id":"m","event_time":{},"approved":{},"amount":{}}})",
                              kT0Ms + static_cast<int64_t>(i) * 10, approved, normal(random)));
  }
  return out;
}

PipelineSpec SpecOf(const std::string& yaml) {
  auto spec = ParsePipeline(yaml, "approvals.yaml", LoadOptions{});
  if (!spec) FAIL(FormatProblems("approvals.yaml", spec.error()));
  return *spec;
}

// (series, level, the categories an alert names) of each alert.
std::vector<std::string> Facts(const std::vector<std::string>& alerts) {
  simdjson::dom::parser parser;
  std::vector<std::string> facts;
  for (const std::string& row : alerts) {
    simdjson::dom::element alert = parser.parse(row);
    std::vector<std::string> categories;
    simdjson::dom::array top;
    if (alert["top_categories"].get_array().get(top) == simdjson::SUCCESS) {
      for (simdjson::dom::element c : top) {
        categories.emplace_back(std::string_view(c["category"]));
      }
    }
    facts.push_back(fmt::format("{} {} [{}]", std::string_view(alert["series"]),
                                std::string_view(alert["level"]), fmt::join(categories, ",")));
  }
  return facts;
}

TEST_CASE("a boolean series alerts when its share of true moves, naming true and false",
          "[drift][types][boolean]") {
  const PipelineSpec spec = SpecOf(kPipeline);
  const std::vector<std::string> records = Approvals(6000, 3000);

  DriftRun stable(spec, 1);
  stable.FeedAll(records, 700, 0, 3000);
  CHECK(stable.alerts.empty());  // a stable share is no drift

  stable.FeedAll(records, 700, 3000);
  const std::vector<std::string> facts = Facts(stable.alerts);
  REQUIRE_FALSE(facts.empty());
  bool named = false;
  for (const std::string& fact : facts) {
    CHECK(fact.rfind("approved ", 0) == 0);  // amount never moved
    if (fact.find("true") != std::string::npos && fact.find("false") != std::string::npos) {
      named = true;
    }
  }
  CHECK(named);

  // The same alerts through a restart half way, in other batch sizes.
  DriftRun first(spec, 1);
  first.FeedAll(records, 333, 0, 2500);
  auto second = first.Restarted();
  second->FeedAll(records, 1234, 2500);
  std::vector<std::string> restarted = first.alerts;
  restarted.insert(restarted.end(), second->alerts.begin(), second->alerts.end());
  CHECK(Facts(restarted) == facts);
}

}  // namespace
}  // namespace driftd
