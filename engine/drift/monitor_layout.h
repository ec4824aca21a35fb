// The drift monitor's persisted layout (engine/drift/monitor.h, CollectDirty and Restore, list
// its keys): the byte formats of the model record, the series record, the frozen baseline, warmup
// segments and the series table, written in version 6 and read in every version since 1
// (tests/engine/drift_state_layout_test.cc keeps real checkpoints of each). Encoders and decoders
// only: what to write when, and putting a model's keys together, is monitor_persist.cc's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/drift/monitor_state.h"

namespace driftd::monitor_detail {

constexpr std::string_view kBaseSuffix = "/base";
constexpr std::string_view kWarmupSuffix = "/w";
// "<model>/%w<seq>": a warmup segment (escaped series names never start with a bare '%').
constexpr std::string_view kSegmentTag = "%w";
// The series table: every series name the model records and segments refer to by position.
// Escaped model names never start with a bare '%', so no model's key is this one.
constexpr std::string_view kTableKey = DriftMonitor::kSeriesTableKey;
constexpr uint8_t kTableEncodingVersion = 1;
constexpr uint8_t kModelEncodingVersion = 2;  // version 1 (kRollupEncodingVersion): roll-up only
constexpr uint8_t kSegmentEncodingVersion = 1;
constexpr uint8_t kLastOneRecordVersion = 5;  // versions 1 to 5 hold a whole series in its record
// A model's warmup segments are rewritten as one when they hold more values of series that no
// longer keep them than of series that do (and at least this many): what a segment rewrite
// costs is then paid for by the dead values it drops, so warmup values are written at most
// about twice.
constexpr int64_t kMinSegmentValues = 256;
constexpr size_t kBinsLimit = 1'000'001;


// Sections of a series' part of the model record: what values change. Each is written only
// when it differs from a new series' (so a series in its warmup costs a few bytes).
enum HotSection : uint32_t {
  kHotState = 1u << 0,        // frozen, edges ready; values seen
  kHotFirstEvent = 1u << 1,   // first event time (duration warmups)
  kHotWarmup = 1u << 2,       // warmup values kept (the values are in segments)
  kHotBaseline = 1u << 3,     // the baseline's moments while warming up, unless those of the
                              // warmup values kept (recomputed on restore)
  kHotClipped = 1u << 4,      // winsorized baseline and reference counts (edges fixed)
  kHotWindow = 1u << 5,       // the current window's sums and counts
  kHotSpan = 1u << 6,         // its first value index and event-time span
  kHotStates = 1u << 7,       // detector states: the part values change
  kHotErrBaseline = 1u << 8,  // the error series' baseline while warming up
  kHotErrWindow = 1u << 9,    // the error series' window
  kHotOpen = 1u << 10,        // open event-time windows (with their samples)
  kHotAll = (1u << 11) - 1,
};

// Sections of the series record (version 6): what changes when a window closes, an alert moves
// or the baseline freezes. Absent sections hold a new series' values; a record without any is
// not written.
enum ColdSection : uint32_t {
  kColdFences = 1u << 0,    // fences and bin edges (fixed, baseline not frozen yet)
  kColdTrailing = 1u << 1,  // trailing window summaries
  kColdPhases = 1u << 2,    // seasonal phases
  kColdRecent = 1u << 3,    // look-back windows
  kColdStates = 1u << 4,    // detector states: the part window ends change
  kColdAlert = 1u << 5,     // alert state machine and incident id
  kColdIncident = 1u << 6,  // the open incident's evidence
  kColdAll = (1u << 7) - 1,
};

/// The model record (version 2): the roll-up, the warmup segments' range, and each series'
/// entry (table index, then EncodeHot). `entry` reads one entry's sections.
struct ModelRecordHead {
  AlertStateMachine rollup;
  uint64_t rollup_incident = 0;
  uint32_t seg_first = 0;
  uint32_t seg_next = 0;
};

uint64_t HashBytes(std::string_view bytes);

Moments MomentsOf(const WarmupValues& warmup, std::vector<double>& scratch);

bool ReadFixed(drift::ByteReader& r, size_t n, std::string& buf);

/// "<series>/base": a frozen baseline, written once when it freezes.
void EncodeBase(const DriftMonitor::SeriesState& s, std::string& out);

HigherMoments NormalShaped(const Moments& m);

Status DecodeBase(std::string_view bytes, DriftMonitor::SeriesState& s, size_t bins_limit);

bool IsCategoricalRecord(std::string_view bytes);

void EncodeCategoricalBase(const DriftMonitor::SeriesState& s, std::string& out);

Status DecodeCategoricalBase(std::string_view bytes, CategoricalState& c);

void EncodeCategoricalSeries(const DriftMonitor::SeriesState& s, std::string& out);

Status DecodeCategoricalSeries(std::string_view bytes, DriftMonitor::SeriesState& s,
                               bool& base_apart);

/// Checks of a categorical series that need both its record and its baseline.
Status CheckCategorical(const DriftMonitor::SeriesState& s, std::string_view key);

/// Checks that need both the series record and its baseline.
Status CheckHistograms(const DriftMonitor::SeriesState& s, std::string_view key);

// The detector states of a series (engine/drift/detector_states.h) are written as each
// configured detector with state (`slots`, in their order) writes its part; which detectors
// those are is part of the pipeline's fingerprint, so a checkpoint is read with the slots it was
// written with.

/// Versions 1 to 5 of the series record (one record per series). `warmup_count`: for version
/// 5, the warmup values the record counts (they are in block keys).
Status DecodeSeries(std::string_view bytes, DriftMonitor::SeriesState& s,
                    const DetectorSlots& slots, size_t bins_limit, bool& base_apart,
                    uint32_t& warmup_count);

uint32_t HotSectionsOf(const DriftMonitor::SeriesState& s, const DetectorSlots& slots);

/// A series' entry of the model record: its sections bits, then the sections.
void EncodeHot(const DriftMonitor::SeriesState& s, const DetectorSlots& slots, uint32_t bits,
               std::string& out);

/// Reads a series' entry of the model record into `s` (its other fields untouched).
/// `bits_out`: the sections read; `warmup`: the warmup values the segments must give.
Status DecodeHot(drift::ByteReader& r, DriftMonitor::SeriesState& s, const DetectorSlots& slots,
                 uint32_t& bits_out, uint32_t& warmup);

/// The series record (version 6): the sections that differ from a new series'; nothing at all
/// when none does (no record is kept then).
void EncodeCold(const DriftMonitor::SeriesState& s, const DetectorSlots& slots, std::string& out);

Status DecodeCold(std::string_view bytes, DriftMonitor::SeriesState& s, const DetectorSlots& slots);

Status DecodeModelRecord(std::string_view bytes, ModelRecordHead& head,
                         const std::function<Status(uint32_t, drift::ByteReader&)>& entry);

/// A warmup segment (version 1): pieces (table index, index of the first value in the
/// series' warmup, count, the values in the compact decimal form).
Status DecodeSegment(
    std::string_view bytes,
    const std::function<Status(uint32_t, uint32_t, uint32_t, std::string_view)>& piece);

Result<std::vector<std::string>> DecodeTable(std::string_view bytes);

}  // namespace driftd::monitor_detail
