// DriftMonitor::InsertSeries: a series added while the monitor runs (a map key found as
// records arrive) is watched from then on like one configured from the start, with its
// overrides, and the series around it keep their state, events and restored state.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/drift/monitor.h"

namespace driftd {
namespace {

DriftSpec Spec() {
  DriftSpec spec;
  spec.enabled = true;
  spec.detectors = DefaultDetectorSpecs();
  spec.baseline.records = 600;
  spec.window_records = 300;
  // Series "b" of model "m1" alerts at a lower level than the others.
  ThresholdOverride b;
  b.model = "m1";
  b.series = "b";
  b.detector = "mean_shift";
  b.warn = 3;
  b.alert = 3.5;
  spec.overrides.push_back(b);
  return spec;
}

// Values of series a, b, c of models m0 and m1; b exists from value `b_from` on; m1's b and
// c shift by 0.6 sd from value 4000.
struct Feed {
  explicit Feed(DriftMonitor& m) : monitor(m) {}
  void Run(int from, int to, const std::map<std::string, size_t>& index, int b_from) {
    for (int i = from; i < to; ++i) {
      for (uint32_t model = 0; model < 2; ++model) {
        const int64_t t = 1'700'000'000'000'000 + i * 1000;
        for (const char* series : {"a", "b", "c"}) {
          if (series[0] == 'b' && i < b_from) continue;
          const double shift = model == 1 && series[0] != 'a' && i >= 4000 ? 0.6 : 0.0;
          monitor.Observe(model, model == 0 ? "m0" : "m1", index.at(series),
                          normal(rng) + shift, t);
        }
      }
      if ((i + 1) % 250 == 0) {
        monitor.Evaluate(i, 1'700'000'000'000 + i, events);
        monitor.CollectDirty(puts);
        for (auto& [key, value] : puts) state[key] = value;
        puts.clear();
      }
    }
  }
  DriftMonitor& monitor;
  std::mt19937_64 rng{21};
  std::normal_distribution<double> normal{0, 1};
  std::vector<AlertEvent> events;
  StatePuts puts;
  std::map<std::string, std::string> state;
};

// The state keys whose values do not depend on the order series were added: series records
// and baselines. The series table ("drift/%series"), the model records ("drift/<model>") and
// warmup segments ("drift/<model>/%w<k>") name series by their position in the table, which
// is the order the names first reached the checkpoint; what they hold is compared through the
// events of a run that goes on from them.
std::map<std::string, std::string> SeriesRecords(const std::map<std::string, std::string>& state) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : state) {
    const size_t slash = key.find('/', 6);
    if (key == "drift/%series" || slash == std::string::npos ||
        key.compare(slash, 3, "/%w") == 0) {
      continue;
    }
    out.emplace(key, value);
  }
  return out;
}

std::set<std::string> Ids(const std::vector<AlertEvent>& events) {
  std::set<std::string> ids;
  for (const AlertEvent& e : events) ids.insert(e.alert_id + " " + e.model + " " + e.series);
  return ids;
}

TEST_CASE("a series inserted while running is watched as if configured from the start",
          "[drift][insert]") {
  DriftMonitor configured(Spec(), {"a", "b", "c"});
  Feed all(configured);
  all.Run(0, 1000, {{"a", 0}, {"b", 1}, {"c", 2}}, 1000);
  all.Run(1000, 8000, {{"a", 0}, {"b", 1}, {"c", 2}}, 1000);

  DriftMonitor growing(Spec(), {"a", "c"});
  Feed inserted(growing);
  inserted.Run(0, 1000, {{"a", 0}, {"c", 1}}, 1000);
  growing.InsertSeries(1, "b");
  CHECK(growing.series_names() == std::vector<std::string>{"a", "b", "c"});
  inserted.Run(1000, 8000, {{"a", 0}, {"b", 1}, {"c", 2}}, 1000);

  REQUIRE_FALSE(all.events.empty());
  CHECK(Ids(inserted.events) == Ids(all.events));
  bool b_alerted = false;
  for (const AlertEvent& e : all.events) b_alerted |= e.model == "m1" && e.series == "b";
  CHECK(b_alerted);
  CHECK(SeriesRecords(inserted.state) == SeriesRecords(all.state));

  SECTION("and after a restart that restores the others before it is inserted") {
    // Models restored but not seen yet grow with the insertion; the new series' own keys
    // (which a monitor without it ignores) are restored after it.
    DriftMonitor restored(Spec(), {"a", "c"});
    for (const auto& [key, value] : inserted.state) {
      if (key.find("/b") == std::string::npos) REQUIRE(restored.Restore(key, value));
    }
    restored.InsertSeries(1, "b");
    for (const auto& [key, value] : inserted.state) {
      if (key.find("/b") != std::string::npos) REQUIRE(restored.Restore(key, value));
    }
    REQUIRE(restored.FinishRestore());
    DriftMonitor reference(Spec(), {"a", "b", "c"});
    for (const auto& [key, value] : all.state) REQUIRE(reference.Restore(key, value));
    REQUIRE(reference.FinishRestore());
    Feed a(restored);
    Feed b(reference);
    a.Run(8000, 10000, {{"a", 0}, {"b", 1}, {"c", 2}}, 0);
    b.Run(8000, 10000, {{"a", 0}, {"b", 1}, {"c", 2}}, 0);
    CHECK(Ids(a.events) == Ids(b.events));
    CHECK(SeriesRecords(a.state) == SeriesRecords(b.state));
  }
}

}  // namespace
}  // namespace driftd
