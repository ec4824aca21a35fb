// A series' block of detector states: the state each configured detector with one
// (DetectorDefaults::state, engine/drift/detectors.h) keeps of a series, held by the drift
// monitor as an opaque slot it calls through the detector's DetectorStateOps. Not thread-safe,
// as the monitor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/drift/detectors.h"

namespace driftd::monitor_detail {

class DetectorStates;

/// A configured detector that keeps a state of each series (DetectorDefaults::state): the first
/// configured detector of its kind (later ones of the kind read the same state), and where its
/// state is in a series' block of detector states.
struct DetectorSlot {
  /// Index of the detector among the monitor's configured detectors.
  size_t detector = 0;
  const DetectorStateOps* ops = nullptr;
  std::string_view name;
  /// The series kinds it watches (SeriesBit of each).
  uint8_t series = 0;
  uint32_t offset = 0;
};

/// A slot whose state takes values one by one, as the per-value path calls it: its operation
/// itself, not through the slot's DetectorStateOps (one load less per value).
struct PerValueSlot {
  AlertLevel (*add_value)(void* state, double value) = nullptr;
  uint32_t offset = 0;
  /// The series kinds it watches (SeriesBit of each).
  uint8_t series = 0;
  /// Its index in DetectorSlots::slots.
  uint8_t slot = 0;
};

/// The monitor's detectors with state, in configuration order: a series' block of detector
/// states holds theirs, and its persisted form is theirs in this order.
struct DetectorSlots {
  std::vector<DetectorSlot> slots;
  /// The slots whose states take values one by one (DetectorStateOps::add_value), in order.
  std::vector<PerValueSlot> per_value;
  /// Bytes of a series' block.
  size_t bytes = 0;
  /// The series kinds some slot watches, and those some slot is fed per value on.
  uint8_t series = 0;
  uint8_t per_value_series = 0;
  /// The slot each configured detector reads (-1: none), by detector index.
  std::vector<int> of_detector;

  /// The slots of the monitor's configured detectors (in their order).
  static DetectorSlots Of(std::span<const DetectorConfig> detectors);
  bool empty() const { return slots.empty(); }

  // The persisted form of a series' block (engine/drift/monitor_layout.h): each slot's part, in
  // slot order.
  /// Whether `part` of every state is a new series' (so of a block never made).
  bool IsNew(const DetectorStates& states, StatePart part) const;
  void Encode(const DetectorStates& states, StatePart part, drift::ByteWriter& w) const;
  /// Reads each slot's part into `states` (made if need be). Returns the name of the first
  /// detector whose bytes hold no valid state, or an empty view.
  std::string_view Decode(DetectorStates& states, StatePart part, drift::ByteReader& r) const;
  /// Versions 3 to 5: the kOneRecordStateBytes of detector state, for the slots that read them.
  std::string_view DecodeOneRecord(DetectorStates& states, std::string_view record) const;
};

/// A series' block of detector states, made at its first use (a series that was never evaluated
/// has none). Up to kInlineBytes of states are in the block itself, beside the window's sums a
/// value updates with them; more take an allocation of their own.
class DetectorStates {
 public:
  /// Bytes of states the block holds itself.
  static constexpr size_t kInlineBytes = 96;

  bool made() const { return made_; }
  /// The block, each slot's state new when it is first made.
  std::byte* Make(const DetectorSlots& slots) {
    if (!made_) {
      if (slots.bytes > kInlineBytes) heap_ = std::make_unique<std::byte[]>(slots.bytes);
      for (const DetectorSlot& slot : slots.slots) slot.ops->construct(data() + slot.offset);
      made_ = true;
    }
    return data();
  }
  /// The block, once made.
  std::byte* data() { return heap_ ? heap_.get() : inline_.data(); }
  const std::byte* data() const { return heap_ ? heap_.get() : inline_.data(); }

 private:
  alignas(std::max_align_t) std::array<std::byte, kInlineBytes> inline_{};
  std::unique_ptr<std::byte[]> heap_;
  bool made_ = false;
};

}  // namespace driftd::monitor_detail
