// A detector's state of each series (engine/drift/detectors.h, StateOps) and the block of states
// a series holds (engine/drift/detector_states.h): what a detector's file declares is what the
// monitor calls, places and persists, whatever the detector.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/codec.h"
#include "engine/drift/detector_states.h"
#include "engine/drift/detectors.h"

namespace driftd {
namespace {

using monitor_detail::DetectorSlot;
using monitor_detail::DetectorSlots;
using monitor_detail::DetectorStates;

/// The least a state has: it counts windows, persisted at window ends.
struct CountingState {
  int64_t windows = 0;

  void CloseWindow(const StateReference&, const ClosedWindow&) { ++windows; }
  bool IsNew(StatePart part) const { return part == StatePart::kValues || windows == 0; }
  void Encode(StatePart part, drift::ByteWriter& w) const {
    if (part == StatePart::kWindows) w.Zigzag(windows);
  }
  bool Decode(StatePart part, drift::ByteReader& r) {
    if (part == StatePart::kWindows) windows = r.Zigzag();
    return windows >= 0;
  }
};

/// One fed per value, larger than a block holds by itself: a sum of values that reads WARN once
/// it reaches 10 (once a window), and forgets them when an incident ends.
struct SummingState {
  double sum = 0;
  double history[24] = {};
  AlertLevel seen = AlertLevel::kOk;

  AlertLevel AddValue(double value) {
    sum += value;
    if (sum < 10 || seen >= AlertLevel::kWarn) return AlertLevel::kOk;
    seen = AlertLevel::kWarn;
    return seen;
  }
  void StartWindow() { seen = AlertLevel::kOk; }
  void CloseWindow(const StateReference&, const ClosedWindow&) {}
  void EndIncident() { sum = 0; }
  bool IsNew(StatePart part) const { return part == StatePart::kWindows || sum == 0; }
  void Encode(StatePart part, drift::ByteWriter& w) const {
    if (part == StatePart::kValues) w.F64(sum);
  }
  bool Decode(StatePart part, drift::ByteReader& r) {
    if (part == StatePart::kValues) sum = r.F64();
    return sum >= 0;
  }
};

/// The two as the configured detectors 0 and 2 of a monitor (detector 1 keeps no state).
DetectorSlots TwoSlots() {
  DetectorSlots slots;
  const DetectorStateOps* counting = StateOps<CountingState>();
  const DetectorStateOps* summing = StateOps<SummingState>();
  slots.slots.push_back({0, counting, "counting", SeriesBit(SeriesKind::kNumeric), 0});
  slots.slots.push_back({2, summing, "summing", SeriesBit(SeriesKind::kNumeric),
                         static_cast<uint32_t>(sizeof(CountingState))});
  slots.bytes = sizeof(CountingState) + sizeof(SummingState);
  slots.series = SeriesBit(SeriesKind::kNumeric);
  slots.per_value_series = SeriesBit(SeriesKind::kNumeric);
  slots.per_value.push_back(
      {summing->add_value, slots.slots[1].offset, SeriesBit(SeriesKind::kNumeric), 1});
  slots.of_detector = {0, -1, 1};
  return slots;
}

template <typename State>
State& In(DetectorStates& states, const DetectorSlot& slot) {
  return *reinterpret_cast<State*>(states.data() + slot.offset);
}

TEST_CASE("a state type's optional operations are left out when it does not have them",
          "[drift][detector-state]") {
  const DetectorStateOps& counting = *StateOps<CountingState>();
  CHECK(counting.size == sizeof(CountingState));
  CHECK(counting.prepare == nullptr);
  CHECK(counting.add_value == nullptr);  // fed at window ends only
  CHECK(counting.start_window == nullptr);
  CHECK(counting.end_incident == nullptr);
  CHECK(counting.decode_one_record == nullptr);
  CHECK(counting.close_window != nullptr);
  const DetectorStateOps& summing = *StateOps<SummingState>();
  CHECK(summing.add_value != nullptr);
  CHECK(summing.start_window != nullptr);
  CHECK(summing.end_incident != nullptr);
  // The same type gives the same operations (a detector file registers them once).
  CHECK(StateOps<SummingState>() == &summing);
}

TEST_CASE("a series' block holds each state apart, new when first made, even beyond its room",
          "[drift][detector-state]") {
  const DetectorSlots slots = TwoSlots();
  REQUIRE(slots.bytes > DetectorStates::kInlineBytes);
  DetectorStates states;
  CHECK_FALSE(states.made());
  // A block never made is a new series' states: nothing to write.
  CHECK(slots.IsNew(states, StatePart::kValues));
  CHECK(slots.IsNew(states, StatePart::kWindows));

  states.Make(slots);
  REQUIRE(states.made());
  const DetectorSlot& counting = slots.slots[0];
  const DetectorSlot& summing = slots.slots[1];
  CHECK(In<CountingState>(states, counting).windows == 0);
  CHECK(In<SummingState>(states, summing).sum == 0);

  const HigherMoments none;
  const DetectorConfig config;
  const StateReference reference{none, 5, 5.5, config, 1000};
  slots.slots[0].ops->close_window(states.data() + counting.offset, reference, {none, false});
  CHECK(summing.ops->add_value(states.data() + summing.offset, 6) == AlertLevel::kOk);
  CHECK(summing.ops->add_value(states.data() + summing.offset, 6) == AlertLevel::kWarn);
  CHECK(summing.ops->add_value(states.data() + summing.offset, 6) == AlertLevel::kOk);  // once
  summing.ops->start_window(states.data() + summing.offset);
  CHECK(summing.ops->add_value(states.data() + summing.offset, 1) == AlertLevel::kWarn);
  // Made once: a second Make keeps what the states hold.
  states.Make(slots);
  CHECK(In<CountingState>(states, counting).windows == 1);
  CHECK(In<SummingState>(states, summing).sum == 19);
  summing.ops->end_incident(states.data() + summing.offset);
  CHECK(In<SummingState>(states, summing).sum == 0);
}

TEST_CASE("a block is persisted as each detector's part in slot order and reads back the same",
          "[drift][detector-state]") {
  const DetectorSlots slots = TwoSlots();
  DetectorStates states;
  states.Make(slots);
  In<CountingState>(states, slots.slots[0]).windows = 300;
  In<SummingState>(states, slots.slots[1]).sum = 2.5;
  In<SummingState>(states, slots.slots[1]).seen = AlertLevel::kWarn;  // not persisted

  std::string values, windows;
  drift::ByteWriter wv(values), ww(windows);
  CHECK_FALSE(slots.IsNew(states, StatePart::kValues));
  CHECK_FALSE(slots.IsNew(states, StatePart::kWindows));
  slots.Encode(states, StatePart::kValues, wv);
  slots.Encode(states, StatePart::kWindows, ww);
  CHECK(values.size() == 8);   // the sum
  CHECK(windows.size() == 2);  // the count (a varint)

  DetectorStates back;
  drift::ByteReader rv(values), rw(windows);
  CHECK(slots.Decode(back, StatePart::kValues, rv).empty());
  CHECK(slots.Decode(back, StatePart::kWindows, rw).empty());
  CHECK(rv.at_end());
  CHECK(rw.at_end());
  CHECK(In<CountingState>(back, slots.slots[0]).windows == 300);
  CHECK(In<SummingState>(back, slots.slots[1]).sum == 2.5);
  CHECK(In<SummingState>(back, slots.slots[1]).seen == AlertLevel::kOk);

  // Bytes that hold no valid state name the detector they were for.
  std::string negative;
  drift::ByteWriter wn(negative);
  wn.F64(-1);
  drift::ByteReader rn(negative);
  DetectorStates bad;
  CHECK(std::string(slots.Decode(bad, StatePart::kValues, rn)) == "summing");
}

TEST_CASE("the first configured detector of a kind keeps the state its later ones read",
          "[drift][detector-state]") {
  std::vector<DetectorConfig> detectors = {
      ResolveDetector(DefaultDetectorSpec(DetectorKind::kMeanShift)),
      ResolveDetector(DefaultDetectorSpec(DetectorKind::kCusum)),
      ResolveDetector(DefaultDetectorSpec(DetectorKind::kPsi)),
      ResolveDetector(DefaultDetectorSpec(DetectorKind::kCusum))};
  const DetectorSlots slots = DetectorSlots::Of(detectors);
  REQUIRE(slots.slots.size() == 1);
  CHECK(slots.slots[0].detector == 1);
  CHECK(slots.slots[0].name == "cusum");
  CHECK(slots.of_detector == std::vector<int>{-1, 0, -1, 0});
  CHECK(slots.series == SeriesBit(SeriesKind::kNumeric));
  CHECK(slots.per_value_series == SeriesBit(SeriesKind::kNumeric));
  // Fed per value: the per-value path calls its update directly.
  REQUIRE(slots.per_value.size() == 1);
  CHECK(slots.per_value[0].add_value == slots.slots[0].ops->add_value);
  CHECK(slots.per_value[0].offset == slots.slots[0].offset);
  CHECK(slots.per_value[0].slot == 0);
  CHECK(DetectorSlots::Of(std::vector<DetectorConfig>{detectors[0], detectors[2]}).empty());
}

TEST_CASE("a registered detector with state is part of the fingerprint and watches value series",
          "[drift][detector-state]") {
  // Which detectors with state are configured decides how the checkpoint lays out their
  // states: the fingerprint must change with them. The categorical series' record and the
  // error series have no place for a detector's state.
  int with_state = 0;
  for (const DetectorDefaults& d : DetectorDefaultsTable()) {
    if (d.state == nullptr) continue;
    INFO(d.name);
    ++with_state;
    CHECK(d.in_fingerprint);
    CHECK_FALSE(d.error_series);
    CHECK((d.series & SeriesBit(SeriesKind::kCategorical)) == 0);
  }
  CHECK(with_state >= 1);
  // The CUSUM's state is in a series' block itself, beside the window's sums: the per-value
  // path follows no pointer of its own.
  REQUIRE(DefaultsFor(DetectorKind::kCusum).state != nullptr);
  CHECK(DefaultsFor(DetectorKind::kCusum).state->size <= DetectorStates::kInlineBytes);
}

}  // namespace
}  // namespace driftd
