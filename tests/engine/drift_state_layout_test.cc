// The drift state's persisted layout: what a batch writes (only what changed), restores from
// those keys in any order, and checkpoints of the version-4 and version-5 layouts (one record
// per series) and of earlier builds' version 6 still read.
#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/codec.h"
#include "engine/drift/monitor.h"

namespace driftd {
namespace {

// Deterministic input, arithmetic only (no libm), so that the fixture written by an earlier
// build (data/drift_state_v4.txt) is the state of exactly these values.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Roughly normal: the sum of 4 uniforms, centred and scaled to variance 1.
double Value(uint64_t model, uint64_t series, uint64_t i) {
  double sum = 0;
  for (uint64_t k = 0; k < 4; ++k) {
    const uint64_t bits = Mix((model << 48) ^ (series << 40) ^ (i << 2) ^ k);
    sum += static_cast<double>(bits >> 11) * 0x1.0p-53;
  }
  return (sum - 2.0) * 1.7320508075688772;
}

DriftSpec Spec() {
  DriftSpec spec;
  spec.enabled = true;
  spec.detectors = DefaultDetectorSpecs();
  return spec;
}

constexpr int64_t kT0 = 1'700'000'000'000'000;
const char* const kModels[2] = {"warm", "frozen"};

/// Two models of two series ("x", "y"); "frozen" also has labels. Each step gives every model
/// that has not reached its end its next value; a batch ends every 500 steps. From value 9000
/// on, "frozen"'s x is shifted by 1 sd (alerts).
struct Scenario {
  explicit Scenario(DriftMonitor& m) : monitor(m) {}
  /// Event-time windows of `window_ms`, closed by a watermark `delay_ms` behind the largest
  /// event time at each batch's end (values are 1 ms apart).
  Scenario(DriftMonitor& m, int64_t window_ms, int64_t delay_ms)
      : monitor(m), delay_us(delay_ms * 1000) {
    monitor.UseEventTimeWindows(window_ms, 0);
  }

  void Run(int64_t to_step, const int64_t (&ends)[2]) {
    for (; step < to_step; ++step) {
      for (uint32_t m = 0; m < 2; ++m) {
        if (index[m] >= ends[m]) continue;
        const int64_t i = index[m]++;
        const int64_t t = kT0 + i * 1000;
        for (size_t s = 0; s < 2; ++s) {
          const double shift = (m == 1 && s == 0 && i >= 9'000) ? 1.0 : 0.0;
          monitor.Observe(m, kModels[m], s, Value(m, s, i) + shift, t);
        }
        if (m == 1) {
          const double label = (Mix(i * 7 + 1) & 1) ? 1.0 : 0.0;
          const double prediction = (Mix(i * 7 + 2) % 10 == 0) ? 1.0 - label : label;
          monitor.ObserveLabel(m, prediction, label, t);
        }
      }
      if ((step + 1) % 500 == 0) EndBatch();
    }
  }

  void EndBatch() {
    if (monitor.event_time_windows()) {
      monitor.AdvanceWatermark(monitor.max_event_time_us() - delay_us);
    }
    monitor.Evaluate(batch, 1'700'000'000'000 + batch, events);
    ++batch;
    puts.clear();
    deletes.clear();
    monitor.CollectDirty(puts, deletes);
    for (auto& [k, v] : puts) store[k] = v;
    for (const std::string& k : deletes) store.erase(k);
  }

  std::vector<std::string> EventsJson(size_t from = 0) const {
    std::vector<std::string> out;
    for (size_t i = from; i < events.size(); ++i) out.push_back(events[i].ToJson());
    return out;
  }

  DriftMonitor& monitor;
  int64_t delay_us = 0;
  std::map<std::string, std::string> store;  // what the checkpoint holds
  StatePuts puts;  // the last batch's
  std::vector<std::string> deletes;
  std::vector<AlertEvent> events;
  int64_t step = 0;
  int64_t index[2] = {0, 0};
  int64_t batch = 0;
};

constexpr int64_t kEnds[2] = {1'500, 14'000};

size_t Count(const StatePuts& puts, const std::string& prefix) {
  return static_cast<size_t>(std::count_if(puts.begin(), puts.end(), [&](const auto& p) {
    return p.first.compare(0, prefix.size(), prefix) == 0;
  }));
}

bool Has(const StatePuts& puts, const std::string& key) {
  return std::any_of(puts.begin(), puts.end(), [&](const auto& p) { return p.first == key; });
}

TEST_CASE("a batch writes what changed: the model record, new warmup values, a baseline once",
          "[drift][monitor][state]") {
  DriftMonitor monitor(Spec(), {"x", "y"});
  Scenario sc(monitor);
  int64_t base_puts = 0;
  bool segments_deleted = false;
  for (int64_t to = 500; to <= kEnds[1]; to += 500) {
    sc.Run(to, kEnds);
    INFO("batch ending at step " << to);
    const DriftMonitor::WriteStats& w = monitor.last_write();
    // What the batch puts is what its values changed, give or take keys and headers.
    CHECK(w.put_bytes > 0);
    CHECK(w.put_bytes <= 2 * w.dirty_bytes);
    base_puts += static_cast<int64_t>(Has(sc.puts, "drift/frozen/x/base"));
    if (to == 1'000) {
      // warm's values 500..999 of both series, in one new segment. Its series hold nothing but
      // counts and values yet: no record of their own, a few bytes each in the model record.
      CHECK(Count(sc.puts, "drift/warm/%w") == 1);
      REQUIRE(Has(sc.puts, "drift/warm/%w1"));
      CHECK(Has(sc.puts, "drift/warm"));
      CHECK(Count(sc.puts, "drift/warm/x") == 0);
      // 2 x 500 values of 9 bytes (the test's values are not short decimals, which take 2 to 4).
      CHECK(sc.store.at("drift/warm/%w1").size() <= 2 * 500 * 9 + 16);
      CHECK(sc.store.at("drift/warm").size() <= 24);
    }
    if (to == 2'000) {
      // The bin edges are fixed at 2000 values: frozen's warmup values are not kept any more,
      // and its fences and edges are in its series records.
      segments_deleted =
          std::count(sc.deletes.begin(), sc.deletes.end(), "drift/frozen/%w0") == 1;
      CHECK(sc.store.lower_bound("drift/frozen/%w") == sc.store.upper_bound("drift/frozen/%wz"));
      CHECK(Has(sc.puts, "drift/frozen/x"));
    }
    if (to == 5'500) {
      // Frozen, in the middle of windows: the values changed the model record only.
      CHECK(Has(sc.puts, "drift/frozen"));
      CHECK(Count(sc.puts, "drift/frozen/") == 0);
    }
    if (to > 1'500) {
      // warm has no more values: nothing of it is written again.
      CHECK(Count(sc.puts, "drift/warm") == 0);
    }
  }
  CHECK(segments_deleted);
  CHECK(base_puts == 1);
  // warm's warmup (1500 values) stays in the segments of its three batches; frozen has its
  // base and no segments.
  CHECK(sc.store.count("drift/warm/%w0") == 1);
  CHECK(sc.store.count("drift/warm/%w2") == 1);
  CHECK(sc.store.count("drift/frozen/x/base") == 1);
  CHECK(sc.events.size() >= 1);

  // A retrain: the frozen baseline's key goes with the next write.
  REQUIRE(monitor.ResetBaselines("frozen"));
  sc.EndBatch();
  CHECK(std::count(sc.deletes.begin(), sc.deletes.end(), "drift/frozen/x/base") == 1);
  CHECK(sc.store.count("drift/frozen/x/base") == 0);
}

TEST_CASE("warmup values are kept exactly in a compact decimal form", "[drift][state]") {
  auto round_trip = [](double v) {
    std::string bytes;
    drift::ByteWriter w(bytes);
    int digits = 0;
    w.Decimal(v, digits);
    drift::ByteReader r(bytes);
    const double back = r.Decimal();
    INFO(v);
    CHECK(r.at_end());
    CHECK(std::bit_cast<uint64_t>(back) == std::bit_cast<uint64_t>(v));
    return bytes.size();
  };
  // What inference logs hold: short decimals, in 2 to 4 bytes.
  CHECK(round_trip(-2.7323) == 3);
  CHECK(round_trip(0.4286) == 3);
  CHECK(round_trip(1.0) == 1);
  CHECK(round_trip(0.0) == 1);
  CHECK(round_trip(123.25) == 3);
  CHECK(round_trip(123456.75) == 5);
  // Anything else, exactly, in 9.
  CHECK(round_trip(-0.0) == 9);
  CHECK(round_trip(0.1 + 0.2) == 9);
  CHECK(round_trip(1e300) == 9);
  CHECK(round_trip(5e-324) == 9);
  CHECK(round_trip(1.0 / 3.0) == 9);
  // The form does not depend on the values before (the digits tried first).
  std::string a, b;
  drift::ByteWriter wa(a), wb(b);
  int da = 0, db = 0;
  wa.Decimal(0.123456, da);
  wa.Decimal(0.5, da);
  wb.Decimal(0.5, db);
  CHECK(a.substr(a.size() - b.size()) == b);
}

TEST_CASE("the compact decimal form tried once for a value of many digits is the one every "
          "number of digits tried gives",
          "[drift][state]") {
  // The plain search: the fewest digits whose m / 10^k is exactly the value.
  auto scanned = [](double v, int64_t& m, int& k) {
    constexpr double kLimit = 4503599627370496.0;  // 2^52
    for (int digits = 0; digits < drift::kDecimalRaw; ++digits) {
      const double scaled = v * drift::kPow10[digits];
      if (!(std::fabs(scaled) < kLimit)) continue;
      const double r = std::nearbyint(scaled);
      if (r == 0 && std::signbit(v)) continue;  // -0.0 is no m / 10^k
      if (std::bit_cast<uint64_t>(r / drift::kPow10[digits]) == std::bit_cast<uint64_t>(v)) {
        m = static_cast<int64_t>(r);
        k = digits;
        return true;
      }
    }
    return false;
  };
  std::mt19937_64 random(41);
  std::vector<double> values;
  for (int i = 0; i < 200'000; ++i) {
    // Short decimals of every scale up to the limit of the one try and past it, values of
    // full precision, and values on either side of the limit.
    const int digits = static_cast<int>(random() % 15);
    const int64_t m = static_cast<int64_t>(random() % 4'000'000'000'000'000ull) >> (random() % 60);
    const double sign = random() % 2 ? -1.0 : 1.0;
    values.push_back(sign * static_cast<double>(m) / drift::kPow10[digits]);
    values.push_back(sign * std::ldexp(static_cast<double>(random() >> 11), -53) *
                     static_cast<double>(1 + random() % 64));
    values.push_back(std::nextafter(11.258999068426240, sign * 100.0) * (1 + 1e-16 * (i % 7)));
  }
  for (double v : {0.0, -0.0, 1e-300, 11.25899906842624, 11.258999068426241, 45.03599627370496,
                   0.1 + 0.2, 1.0 / 3.0, 123456.75, 9.99999999999999, 4503599627370495.0}) {
    values.push_back(v);
  }
  size_t compact = 0;
  size_t raw = 0;
  for (int hint_start : {0, 3, 14}) {
    int hint = hint_start;
    for (double v : values) {
      int64_t m = 0, want_m = 0;
      int k = 0, want_k = 0;
      const bool got = drift::ToDecimal(v, hint, m, k);
      const bool want = scanned(v, want_m, want_k);
      INFO(v);
      REQUIRE(got == want);
      if (want) {
        // The scan's digits, less trailing zeros.
        while (want_k > 0 && want_m % 10 == 0) {
          want_m /= 10;
          --want_k;
        }
        REQUIRE(m == want_m);
        REQUIRE(k == want_k);
        ++compact;
      } else {
        ++raw;
      }
    }
  }
  // Both kinds were tried, many of each.
  CHECK(compact > 3 * 50'000);
  CHECK(raw > 3 * 50'000);
}

TEST_CASE("state restored from its keys in any order continues as if never stopped",
          "[drift][monitor][state]") {
  // Stops mid-segment in the warmup, after the edges are fixed, and with a frozen baseline in
  // the middle of a window; with record and event-time windows (open windows, their samples);
  // keys restored sorted, reversed and shuffled.
  for (int64_t window_ms : {0, 250}) {
    for (int64_t stop : {300, 2'500, 7'777}) {
      for (int order = 0; order < 3; ++order) {
        INFO("windows of " << window_ms << " ms, stop at step " << stop << ", order " << order);
        auto scenario = [&](DriftMonitor& monitor) {
          return window_ms > 0 ? Scenario(monitor, window_ms, 300) : Scenario(monitor);
        };
        DriftMonitor straight_monitor(Spec(), {"x", "y"});
        Scenario straight = scenario(straight_monitor);
        straight.Run(stop, kEnds);
        straight.EndBatch();
        const size_t before = straight.events.size();

        DriftMonitor restored_monitor(Spec(), {"x", "y"});
        std::vector<std::pair<std::string, std::string>> keys(straight.store.begin(),
                                                              straight.store.end());
        if (order == 1) std::reverse(keys.begin(), keys.end());
        if (order == 2) std::shuffle(keys.begin(), keys.end(), std::mt19937_64(stop));
        for (const auto& [key, value] : keys) {
          INFO(key);
          REQUIRE(restored_monitor.Restore(key, value));
        }
        REQUIRE(restored_monitor.FinishRestore());
        if (window_ms > 0) {
          restored_monitor.RestoreClock(straight_monitor.max_event_time_us(),
                                        straight_monitor.watermark_us());
        }
        Scenario restored = scenario(restored_monitor);
        restored.store = straight.store;
        restored.step = straight.step;
        restored.index[0] = straight.index[0];
        restored.index[1] = straight.index[1];
        restored.batch = straight.batch;

        straight.Run(kEnds[1], kEnds);
        straight.EndBatch();
        restored.Run(kEnds[1], kEnds);
        restored.EndBatch();
        CHECK(straight.EventsJson(before).size() >= 1);
        CHECK(restored.EventsJson() == straight.EventsJson(before));
        CHECK(restored.store == straight.store);
      }
    }
  }
}

TEST_CASE("a checkpoint missing a key its records refer to is refused",
          "[drift][monitor][state]") {
  DriftMonitor monitor(Spec(), {"x", "y"});
  Scenario sc(monitor);
  sc.Run(7'000, kEnds);
  REQUIRE(sc.store.count("drift/frozen/x/base") == 1);
  REQUIRE(sc.store.count("drift/warm/%w0") == 1);
  for (const std::string missing :
       {"drift/frozen/x/base", "drift/warm/%w0", "drift/frozen", "drift/%series"}) {
    INFO(missing);
    DriftMonitor restored(Spec(), {"x", "y"});
    for (const auto& [key, value] : sc.store) {
      if (key != missing) REQUIRE(restored.Restore(key, value));
    }
    auto finished = restored.FinishRestore();
    REQUIRE_FALSE(finished);
    CHECK(finished.error().code() == ErrorCode::kCorruption);
  }
  DriftMonitor bad(Spec(), {"x", "y"});
  CHECK_FALSE(bad.Restore("drift/warm/x/w9999", std::string(8, '\0')));
  CHECK_FALSE(bad.Restore("drift/warm/x/w1", std::string(7, '\0')));
  CHECK_FALSE(bad.Restore("drift/warm/x/base", std::string(3, '\1')));
  CHECK_FALSE(bad.Restore("drift/warm/%wx", sc.store.at("drift/warm/%w0")));
  const std::string segment = sc.store.at("drift/warm/%w0");
  CHECK_FALSE(bad.Restore("drift/warm/%w0", segment.substr(0, segment.size() - 1)));
  const std::string record = sc.store.at("drift/frozen");
  CHECK_FALSE(bad.Restore("drift/frozen", record.substr(0, record.size() - 1)));
  CHECK_FALSE(bad.Restore("drift/%series", std::string(1, '\7')));
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Whether two texts are the same but for numbers whose last digits differ (relative 1e-9): the
// fixture below holds thresholds an optimized build computed, and an -O0 build (libm at run time
// instead of folded constants) may round their last bit the other way.
bool SameUpToRounding(const std::string& a, const std::string& b) {
  const auto number_at = [](const std::string& s, size_t i) {
    return std::isdigit(static_cast<unsigned char>(s[i])) ||
           (s[i] == '-' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])));
  };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (number_at(a, i) && number_at(b, j)) {
      char* a_end = nullptr;
      char* b_end = nullptr;
      const double x = std::strtod(a.c_str() + i, &a_end);
      const double y = std::strtod(b.c_str() + j, &b_end);
      if (std::fabs(x - y) > 1e-9 * std::max(std::fabs(x), std::fabs(y))) return false;
      i = static_cast<size_t>(a_end - a.c_str());
      j = static_cast<size_t>(b_end - b.c_str());
    } else if (a[i++] != b[j++]) {
      return false;
    }
  }
  return i == a.size() && j == b.size();
}

TEST_CASE("SameUpToRounding tells a last-digit difference from a real one", "[drift][state]") {
  CHECK(SameUpToRounding(R"({"t":80.7989348455176,"n":5})", R"({"t":80.79893484551761,"n":5})"));
  CHECK_FALSE(SameUpToRounding(R"({"t":80.79,"n":5})", R"({"t":80.80,"n":5})"));
  CHECK_FALSE(SameUpToRounding(R"({"t":1,"n":5})", R"({"t":1,"n":6})"));
  CHECK_FALSE(SameUpToRounding(R"({"level":"ALERT"})", R"({"level":"WARN"})"));
  CHECK_FALSE(SameUpToRounding("1,2", "1,2,3"));
}

std::map<std::string, std::string> ReadFixture(const std::string& name) {
  std::ifstream in(std::string(DRIFTD_TESTS_DIR) + "/engine/data/" + name);
  REQUIRE(in);
  std::map<std::string, std::string> fixture;
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    fixture[line.substr(0, tab)] = Unhex(line.substr(tab + 1));
  }
  return fixture;
}

bool IsSegment(const std::string& key) { return key.find("/%w") != std::string::npos; }

/// Restores `store` (a Scenario's, with event-time windows of `window_ms` and the clock of
/// `clock`) and gives model "warm" 1400 more values after everything else: with those it kept
/// (1500, or 700 with event-time windows, where its later ones came late) they fix its bin
/// edges and fences. Returns what that writes and raises.
std::pair<std::map<std::string, std::string>, std::vector<std::string>> FixWarmEdges(
    const std::map<std::string, std::string>& store, int64_t window_ms, const DriftMonitor& clock,
    int64_t batch) {
  DriftMonitor monitor(Spec(), {"x", "y"});
  if (window_ms > 0) {
    monitor.UseEventTimeWindows(window_ms, 0);
    monitor.RestoreClock(clock.max_event_time_us(), clock.watermark_us());
  }
  for (const auto& [key, value] : store) REQUIRE(monitor.Restore(key, value));
  REQUIRE(monitor.FinishRestore());
  const int64_t t0 = clock.max_event_time_us() + 1'000'000;
  for (int64_t i = 1'500; i < 2'900; ++i) {
    for (size_t s = 0; s < 2; ++s) monitor.Observe(0, "warm", s, Value(0, s, i), t0 + i * 1000);
  }
  if (window_ms > 0) monitor.AdvanceWatermark(monitor.max_event_time_us() + 1'000'000);
  std::vector<AlertEvent> events;
  monitor.Evaluate(batch, 1'700'000'000'000 + batch, events);
  StatePuts puts;
  std::vector<std::string> deletes;
  monitor.CollectDirty(puts, deletes);
  std::map<std::string, std::string> written(puts.begin(), puts.end());
  std::vector<std::string> json;
  for (const AlertEvent& e : events) json.push_back(e.ToJson());
  return {written, json};
}

/// A checkpoint written by an earlier build (`fixture`: the store of Scenario stopped at
/// `stop`) continues exactly as an uninterrupted run of this build: the same events, and a
/// state that holds the same (the same keys and bytes but for which segments hold which warmup
/// values, and so the range the model records name; the warmup values themselves shown equal by
/// the edges they fix).
void CheckOlderCheckpointContinues(const std::map<std::string, std::string>& fixture,
                                   const int64_t (&stop)[2], int64_t window_ms) {
  auto scenario = [&](DriftMonitor& monitor) {
    return window_ms > 0 ? Scenario(monitor, window_ms, 300) : Scenario(monitor);
  };
  // What an uninterrupted run of the current build writes and raises.
  DriftMonitor fresh_monitor(Spec(), {"x", "y"});
  Scenario fresh = scenario(fresh_monitor);
  fresh.Run(stop[1], stop);
  const size_t before = fresh.events.size();

  DriftMonitor old_monitor(Spec(), {"x", "y"});
  for (const auto& [key, value] : fixture) {
    INFO(key);
    REQUIRE(old_monitor.Restore(key, value));
  }
  REQUIRE(old_monitor.FinishRestore());
  if (window_ms > 0) {
    old_monitor.RestoreClock(fresh_monitor.max_event_time_us(), fresh_monitor.watermark_us());
  }
  Scenario old = scenario(old_monitor);
  old.store = fixture;
  old.step = fresh.step;
  old.index[0] = fresh.index[0];
  old.index[1] = fresh.index[1];
  old.batch = fresh.batch;

  fresh.Run(14'000, kEnds);
  fresh.EndBatch();
  old.Run(14'000, kEnds);
  old.EndBatch();
  const std::vector<std::string> want = fresh.EventsJson(before);
  const std::vector<std::string> got = old.EventsJson();
  CHECK(want.size() >= 1);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i] << "\n  vs a run without the restore:\n" << want[i]);
    CHECK(SameUpToRounding(got[i], want[i]));
  }
  // Every series changed since: the old records are all rewritten in the current layout, the
  // same keys (but segments) of the same sizes (and, in the optimized build that wrote the
  // fixture, the same bytes but for the model records' segment range).
  std::map<std::string, std::string> old_keys, fresh_keys;
  for (const auto& [key, value] : old.store) {
    if (!IsSegment(key)) old_keys[key] = value;
  }
  for (const auto& [key, value] : fresh.store) {
    if (!IsSegment(key)) fresh_keys[key] = value;
  }
  REQUIRE(old_keys.size() == fresh_keys.size());
  for (auto o = old_keys.begin(), f = fresh_keys.begin(); o != old_keys.end(); ++o, ++f) {
    INFO(o->first);
    CHECK(o->first == f->first);
    CHECK(o->second.size() == f->second.size());
#ifdef NDEBUG
    if (o->first.find('/', 6) != std::string::npos) CHECK(o->second == f->second);
#endif
  }
  CHECK(old.store.count("drift/frozen/x/base") == 1);
  CHECK(old.store.count("drift/warm/%w0") == 1);
  // Nothing of the older layout is left (its warmup blocks neither).
  for (const auto& [key, value] : old.store) {
    INFO(key);
    if (key.find('/', 6) != std::string::npos && !IsSegment(key) && !key.ends_with("/base")) {
      CHECK(static_cast<int>(value[0]) == 6);
    }
  }

  // The warmup values came over exactly: they fix the same edges and fences.
  const auto [old_fixed, old_events] = FixWarmEdges(old.store, window_ms, fresh_monitor, old.batch);
  const auto [fresh_fixed, fresh_events] =
      FixWarmEdges(fresh.store, window_ms, fresh_monitor, fresh.batch);
  REQUIRE(fresh_fixed.count("drift/warm/x") == 1);
  CHECK(old_fixed.at("drift/warm/x") == fresh_fixed.at("drift/warm/x"));
  CHECK(old_fixed.at("drift/warm/y") == fresh_fixed.at("drift/warm/y"));
  CHECK(old_events == fresh_events);
}

TEST_CASE("a checkpoint of the version-4 layout is read and rewritten in the current one",
          "[drift][monitor][state]") {
  // data/drift_state_v4.txt: the store of Scenario run to step 6500, written by the build
  // before the layout split (one record per series, warmup values inline), as "key<TAB>hex".
  const auto fixture = ReadFixture("drift_state_v4.txt");
  REQUIRE(fixture.count("drift/warm/x") == 1);
  REQUIRE(fixture.count("drift/frozen/error") == 1);
  for (const auto& [key, value] : fixture) {
    if (key.find('/', 6) != std::string::npos) CHECK(static_cast<int>(value[0]) == 4);
  }
  constexpr int64_t kStop[2] = {700, 6'500};
  CheckOlderCheckpointContinues(fixture, kStop, 0);
}

TEST_CASE("a checkpoint of the version-5 layout is read and rewritten in the current one",
          "[drift][monitor][state]") {
  // data/drift_state_v5.txt: the store of Scenario run to step 6500, written by the build
  // before the model records (a record per series with every section, frozen baselines in
  // base keys, raw warmup values in blocks of 32).
  const auto fixture = ReadFixture("drift_state_v5.txt");
  REQUIRE(fixture.count("drift/warm/x/w21") == 1);
  REQUIRE(fixture.count("drift/frozen/x/base") == 1);
  REQUIRE(static_cast<int>(fixture.at("drift/frozen/x")[0]) == 5);
  constexpr int64_t kStop[2] = {700, 6'500};
  CheckOlderCheckpointContinues(fixture, kStop, 0);
}

TEST_CASE("a version-5 checkpoint of event-time windows is read and rewritten in the current one",
          "[drift][monitor][state][window]") {
  // data/drift_state_v5_event.txt: the store of Scenario with windows of 250 ms, 300 ms behind,
  // run to step 4000 by the same build: "frozen" is still warming up, in open windows that keep
  // samples of their values (written whole in the record, in fixed 16-byte entries).
  const auto fixture = ReadFixture("drift_state_v5_event.txt");
  REQUIRE(static_cast<int>(fixture.at("drift/frozen/x")[0]) == 5);
  REQUIRE(fixture.at("drift/frozen/x").size() > 4'000);
  constexpr int64_t kStop[2] = {700, 4'000};
  CheckOlderCheckpointContinues(fixture, kStop, 250);
}

TEST_CASE("a version-6 checkpoint written before detector states were the detectors' own "
          "continues exactly",
          "[drift][monitor][state]") {
  // data/drift_state_v6.txt: the store of Scenario run to step 6500, written by the build whose
  // monitor kept the CUSUM's state itself (before engine/drift/detectors/cusum.cc did): frozen's
  // sums in its model record, the last window's sd in its series records.
  const auto fixture = ReadFixture("drift_state_v6.txt");
  REQUIRE(static_cast<int>(fixture.at("drift/frozen/x")[0]) == 6);
  REQUIRE(fixture.count("drift/frozen") == 1);
  constexpr int64_t kStop[2] = {700, 6'500};
  CheckOlderCheckpointContinues(fixture, kStop, 0);
#ifdef NDEBUG
  // This build writes the same bytes at the same step (an optimized build, as the fixture's).
  DriftMonitor monitor(Spec(), {"x", "y"});
  Scenario sc(monitor);
  sc.Run(6'500, kStop);
  CHECK(sc.store == fixture);
#endif
}

}  // namespace
}  // namespace driftd
