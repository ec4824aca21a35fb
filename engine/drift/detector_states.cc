#include "engine/drift/detector_states.h"

#include "engine/drift/codec.h"

namespace driftd::monitor_detail {

DetectorSlots DetectorSlots::Of(std::span<const DetectorConfig> detectors) {
  DetectorSlots out;
  out.of_detector.assign(detectors.size(), -1);
  for (size_t d = 0; d < detectors.size(); ++d) {
    const DetectorDefaults& defaults = DefaultsFor(detectors[d].kind);
    if (defaults.state == nullptr) continue;
    // A later detector of a kind reads the first one's state (set up with its levels).
    for (size_t i = 0; i < out.slots.size(); ++i) {
      if (detectors[out.slots[i].detector].kind == detectors[d].kind) {
        out.of_detector[d] = static_cast<int>(i);
      }
    }
    if (out.of_detector[d] >= 0) continue;
    const DetectorStateOps& ops = *defaults.state;
    DetectorSlot slot;
    slot.detector = d;
    slot.ops = &ops;
    slot.name = defaults.name;
    slot.series = defaults.error_series ? 0 : defaults.series;
    out.bytes = (out.bytes + ops.align - 1) / ops.align * ops.align;
    slot.offset = static_cast<uint32_t>(out.bytes);
    out.bytes += ops.size;
    out.series |= slot.series;
    if (ops.add_value != nullptr) {
      out.per_value_series |= slot.series;
      out.per_value.push_back(
          {ops.add_value, slot.offset, slot.series, static_cast<uint8_t>(out.slots.size())});
    }
    out.of_detector[d] = static_cast<int>(out.slots.size());
    out.slots.push_back(slot);
  }
  return out;
}

bool DetectorSlots::IsNew(const DetectorStates& states, StatePart part) const {
  if (!states.made()) return true;
  for (const DetectorSlot& slot : slots) {
    if (!slot.ops->is_new(states.data() + slot.offset, part)) return false;
  }
  return true;
}

void DetectorSlots::Encode(const DetectorStates& states, StatePart part,
                           drift::ByteWriter& w) const {
  for (const DetectorSlot& slot : slots) slot.ops->encode(states.data() + slot.offset, part, w);
}

std::string_view DetectorSlots::Decode(DetectorStates& states, StatePart part,
                                       drift::ByteReader& r) const {
  std::byte* block = states.Make(*this);
  for (const DetectorSlot& slot : slots) {
    if (!slot.ops->decode(block + slot.offset, part, r)) return slot.name;
  }
  return {};
}

std::string_view DetectorSlots::DecodeOneRecord(DetectorStates& states,
                                                std::string_view record) const {
  for (const DetectorSlot& slot : slots) {
    if (slot.ops->decode_one_record == nullptr) continue;
    if (!slot.ops->decode_one_record(states.Make(*this) + slot.offset, record)) return slot.name;
  }
  return {};
}

}  // namespace driftd::monitor_detail
