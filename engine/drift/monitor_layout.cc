// The persisted layout of the drift monitor's state: see monitor_layout.h.
#include "engine/drift/monitor_layout.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <set>

#include <fmt/format.h>

namespace driftd {

namespace monitor_detail {

uint64_t HashBytes(std::string_view bytes) {
  uint64_t h = std::hash<std::string_view>{}(bytes);
  return h == 0 ? 1 : h;
}

// Event times: 0 for none (INT64_MIN), else zigzag + 1.
void PutTime(drift::ByteWriter& w, int64_t us) {
  if (us == INT64_MIN) {
    w.Varint(0);
    return;
  }
  w.Varint(drift::ToZigzag(us) + 1);
}

int64_t GetTime(drift::ByteReader& r) {
  const uint64_t t = r.Varint();
  if (t == 0) return INT64_MIN;
  return drift::FromZigzag(t - 1);
}

void PutCounts(drift::ByteWriter& w, const std::vector<int64_t>& counts) {
  w.Varint(counts.size());
  for (int64_t c : counts) w.Varint(static_cast<uint64_t>(c));
}

bool GetCounts(drift::ByteReader& r, std::vector<int64_t>& counts, size_t limit) {
  const uint64_t n = r.Varint();
  if (r.failed() || n > limit || n > r.remaining()) return false;
  counts.resize(n);
  for (auto& c : counts) c = static_cast<int64_t>(r.Varint());
  return !r.failed();
}

bool IsDefault(const Incident& inc) {
  static const Incident kNone;
  return inc.families == kNone.families && inc.lead == kNone.lead &&
         inc.evidence == kNone.evidence && inc.loc_n == 0 && inc.loc_sum == 0 &&
         inc.spread_dof == 0 && inc.spread_sum == 0 && inc.shape_n == 0 &&
         inc.shape_delta.empty() && inc.error_n == 0 && inc.error_errors == 0;
}

}  // namespace monitor_detail

void DriftMonitor::SeriesState::ReleaseDefaultParts() {
  if (!evaluation) return;
  auto unused = [](const ErrorSummary& e) { return e.count() == 0 && e.errors == 0; };
  if (IsDefault(*evaluation->inc)) evaluation->inc.reset();
  if (unused(*evaluation->err_baseline)) evaluation->err_baseline.reset();
  if (unused(*evaluation->err_window)) evaluation->err_window.reset();
}

namespace monitor_detail {

/// A warmup's moments are those of its kept values (in order), so they need not be written.
bool BaselineFromWarmup(const DriftMonitor::SeriesState& s) {
  return !s.edges_ready && s.baseline_from_warmup;
}

Moments MomentsOf(const WarmupValues& warmup, std::vector<double>& scratch) {
  warmup.Values(scratch);
  Moments m;
  for (double v : scratch) m.Add(v);
  return m;
}

bool ReadMoments(drift::ByteReader& r, Moments& m) {
  std::array<char, Moments::kEncodedSize> buf{};
  for (auto& c : buf) c = static_cast<char>(r.U8());
  if (r.failed()) return false;
  auto decoded = Moments::Decode(std::string_view(buf.data(), buf.size()));
  if (!decoded) return false;
  m = *decoded;
  return true;
}

bool ReadFixed(drift::ByteReader& r, size_t n, std::string& buf) {
  buf.clear();
  for (size_t i = 0; i < n; ++i) buf.push_back(static_cast<char>(r.U8()));
  return !r.failed();
}

bool DecodeSummary(drift::ByteReader& r, WindowSummary& t) {
  return ReadMoments(r, t.moments) && t.clipped.Decode(r) && DecodeCounts(r, t.counts);
}

// The baseline's fields that freeze with it (in the series record until then).
void EncodeBaseFields(drift::ByteWriter& w, std::string& out, const DriftMonitor::SeriesState& s) {
  s.baseline.Encode(out);
  s.baseline_c.Encode(w);
  w.F64(s.clip_lo);
  w.F64(s.clip_hi);
  w.U32(static_cast<uint32_t>(s.edges.inner().size()));
  for (double e : s.edges.inner()) w.F64(e);
  EncodeCounts(w, s.ref_counts);
}

/// "<series>/base": a frozen baseline, written once when it freezes.
void EncodeBase(const DriftMonitor::SeriesState& s, std::string& out) {
  drift::ByteWriter w(out);
  w.U8(kBaseEncodingVersion);
  EncodeBaseFields(w, out, s);
  w.I64(s.eval().err_baseline->errors);
  s.eval().err_baseline->abs_error.Encode(out);
}

HigherMoments NormalShaped(const Moments& m) {
  return HigherMoments::Normal(m.count(), m.count() > 0 ? m.mean() : 0, m.m2());
}

// ---- parts that several versions of the records write alike --------------------------------

// A decoder's error for what it found wrong, naming the record (and its size).
using Corrupt = std::function<Status(std::string_view)>;

/// An alert state machine and its open incident's id: its fixed encoding, then a u64. `name`
/// says what it is in an error.
Status ReadAlert(drift::ByteReader& r, std::string_view name, AlertStateMachine& alert,
                 uint64_t& incident, const Corrupt& corrupt) {
  std::string buf;
  if (!ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) {
    return corrupt(fmt::format("truncated {}", name));
  }
  auto decoded = AlertStateMachine::Decode(buf);
  if (!decoded) return tl::unexpected(decoded.error());
  alert = *decoded;
  incident = r.U64();
  return Ok();
}

/// The fences of winsorizing: f64 low, then high.
Status ReadFences(drift::ByteReader& r, DriftMonitor::SeriesState& s, const Corrupt& corrupt) {
  s.clip_lo = r.F64();
  s.clip_hi = r.F64();
  if (std::isnan(s.clip_lo) || std::isnan(s.clip_hi) || s.clip_lo > s.clip_hi) {
    return corrupt("bad fences");
  }
  return Ok();
}

/// `count` inner bin edges, f64 each and increasing (the count as wide as its version writes
/// it, read by the caller).
Status ReadEdges(drift::ByteReader& r, uint64_t count, size_t bins_limit, BinEdges& edges,
                 const Corrupt& corrupt) {
  if (count > r.remaining() / 8 || count + 1 > bins_limit) return corrupt("bad bin edges");
  std::vector<double> inner(count);
  for (auto& e : inner) e = r.F64();
  edges = BinEdges(std::move(inner));
  if (edges.inner().size() != count) return corrupt("bin edges not increasing");
  return Ok();
}

/// An error series' summary as versions 1 to 5 write it: i64 errors, then the moments of the
/// absolute errors.
bool ReadErrors(drift::ByteReader& r, ErrorSummary& e) {
  e.errors = r.I64();
  return ReadMoments(r, e.abs_error);
}

/// A window summary as its version writes it.
using SummaryDecoder = bool (*)(drift::ByteReader& r, WindowSummary& t);

/// Versions 1 and 2: moments and counts; no winsorized moments (they are read as normal-shaped).
bool DecodeLegacySummary(drift::ByteReader& r, WindowSummary& t) {
  if (!ReadMoments(r, t.moments) || !DecodeCounts(r, t.counts)) return false;
  t.clipped = NormalShaped(t.moments);
  return true;
}

/// The trailing windows as versions 1 to 5 write them: a u32 count and the next slot, then the
/// summaries.
Status ReadTrailing(drift::ByteReader& r, SummaryDecoder decode,
                    DriftMonitor::SeriesState::Evaluation& e, const Corrupt& corrupt) {
  const uint32_t trailing = r.U32();
  e.trailing_next = r.U32();
  if (trailing > 10'000 || r.failed()) return corrupt("bad trailing windows");
  e.trailing.assign(trailing, {});
  for (WindowSummary& t : e.trailing) {
    if (!decode(r, t)) return corrupt("bad trailing window");
  }
  return Ok();
}

/// An open window's sums and counts as its version writes them.
using OpenSumsDecoder = bool (*)(drift::ByteReader& r, OpenWindow& o);

/// Version 2: the moments of raw values (normal-shaped, none winsorized) and the counts.
bool DecodeLegacyOpenSums(drift::ByteReader& r, OpenWindow& o) {
  Moments moments;
  if (!ReadMoments(r, moments) || !DecodeCounts(r, o.counts)) return false;
  o.raw = PowerSums::FromMoments(NormalShaped(moments));
  o.sums = o.raw;
  return true;
}

/// Versions 3 to 5: the power sums of raw and of winsorized values, and the counts.
bool DecodeOpenSums(drift::ByteReader& r, OpenWindow& o) {
  return o.raw.Decode(r) && o.sums.Decode(r) && DecodeCounts(r, o.counts);
}

/// The open event-time windows as versions 2 to 5 write them: a u32 count, then each window's
/// start, first value index, sums and counts, and event-time span, by increasing start.
Status ReadOpenWindows(drift::ByteReader& r, OpenSumsDecoder decode, std::vector<OpenWindow>& open,
                       const Corrupt& corrupt) {
  const uint32_t count = r.U32();
  if (count > 100'000 || count > r.remaining() / 16) return corrupt("bad open windows");
  open.resize(count);
  int64_t previous_start = INT64_MIN;
  for (OpenWindow& o : open) {
    o.start_us = r.I64();
    o.first_index = r.I64();
    if (!decode(r, o)) return corrupt("bad open window");
    o.min_us = r.I64();
    o.max_us = r.I64();
    if (r.failed() || o.start_us <= previous_start) return corrupt("bad open window");
    previous_start = o.start_us;
  }
  return Ok();
}

// ---- versions 1 to 5 of the series record ----------------------------------------------------

/// Versions 1 and 2: no winsorizing, no higher moments, and the state of a detector since
/// removed (Page-Hinkley) instead of today's detector states, which start afresh. The baseline is
/// read as unwinsorized and normal-shaped; an open incident has no summary yet, so every family
/// must show it is back.
Status DecodeLegacySeries(drift::ByteReader& r, uint8_t version, DriftMonitor::SeriesState& s,
                          size_t bins_limit, const Corrupt& corrupt) {
  s.frozen = r.U8() != 0;
  s.seen = r.I64();
  s.first_event_us = r.I64();
  const uint32_t warmup = r.U32();
  if (warmup > r.remaining() / 8) return corrupt("truncated warmup values");
  s.warmup.Clear();
  for (uint32_t i = 0; i < warmup; ++i) s.warmup.Add(r.F64());
  if (!ReadMoments(r, s.baseline)) return corrupt("bad baseline moments");
  DRIFTD_TRY(ReadEdges(r, r.U32(), bins_limit, s.edges, corrupt));
  if (!DecodeCounts(r, s.ref_counts)) return corrupt("bad reference counts");
  DRIFTD_TRY(ReadTrailing(r, DecodeLegacySummary, s.mut_eval(), corrupt));
  Moments window;
  if (!ReadMoments(r, window)) return corrupt("bad window moments");
  if (!DecodeCounts(r, s.mut_eval().window_counts)) return corrupt("bad window counts");
  s.mut_eval().window_raw = PowerSums::FromMoments(NormalShaped(window));
  s.mut_eval().window_sums = s.mut_eval().window_raw;
  s.mut_eval().window_start = r.I64();
  s.mut_eval().window_min_us = r.I64();
  s.mut_eval().window_max_us = r.I64();
  (void)r.Str();  // Page-Hinkley's state: dropped
  DRIFTD_TRY(ReadAlert(r, "alert", s.alert, s.mut_eval().incident, corrupt));
  if (!ReadErrors(r, s.mut_eval().err_baseline.mut())) return corrupt("bad error baseline");
  if (!ReadErrors(r, s.mut_eval().err_window.mut())) return corrupt("bad error window");
  s.open.clear();
  if (version >= 2) {
    DRIFTD_TRY(ReadOpenWindows(r, DecodeLegacyOpenSums, s.open, corrupt));
    for (const OpenWindow& o : s.open) {
      if (!o.counts.empty() && o.counts.size() != s.edges.bins()) {
        return corrupt("bad open window");
      }
    }
  }
  // Frozen baselines of old state had no fences: nothing is clipped.
  s.edges_ready = s.frozen;
  s.baseline_c = NormalShaped(s.baseline);
  // An open incident keeps no summary of its change (families 0): it clears when a window reads
  // below WARN on every detector (Decide).
  return Ok();
}

Status DecodeBaseFields(drift::ByteReader& r, DriftMonitor::SeriesState& s, size_t bins_limit,
                        const Corrupt& corrupt) {
  if (!ReadMoments(r, s.baseline) || !s.baseline_c.Decode(r)) {
    return corrupt("bad baseline moments");
  }
  DRIFTD_TRY(ReadFences(r, s, corrupt));
  DRIFTD_TRY(ReadEdges(r, r.U32(), bins_limit, s.edges, corrupt));
  if (!DecodeCounts(r, s.ref_counts)) return corrupt("bad reference counts");
  return Ok();
}

Status DecodeBase(std::string_view bytes, DriftMonitor::SeriesState& s, size_t bins_limit) {
  drift::ByteReader r(bytes);
  Corrupt corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift baseline state: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kBaseEncodingVersion) return corrupt("unknown version");
  DRIFTD_TRY(DecodeBaseFields(r, s, bins_limit, corrupt));
  if (!ReadErrors(r, s.mut_eval().err_baseline.mut())) return corrupt("bad error baseline");
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  return Ok();
}

// ---- categorical series records ------------------------------------------------------------
// "<series>" (kCategoricalEncodingVersion):
//   u8 version, u8 flags (1 frozen, 2 category set fixed, 4 baseline in the base key),
//   i64 seen, first_event_us, window_start, window_min_us, window_max_us, season_end_us,
//   alert state, u64 incident, incident (u8 families, u32 lead, 4 x f64 evidence, i64 shape_n,
//   u32 + f64 shape deltas), i64 baseline values,
//   [not fixed] first part's counts; [fixed, not frozen] the baseline's fields (as in the base
//   key), then the window's cells, values and unseen names, open event-time windows (start,
//   min, max, cells, sample, unseen names), trailing windows' cells and their next slot,
//   seasonal phases' cells.
// "<series>/base" (kCategoricalEncodingVersion): the category set, the baseline's cells, its
//   held-out values, first part's size and singletons, and the unseen share's reference.

bool IsCategoricalRecord(std::string_view bytes) {
  return !bytes.empty() && static_cast<uint8_t>(bytes[0]) == kCategoricalEncodingVersion;
}

void EncodeCategoricalBaseFields(drift::ByteWriter& w, const CategoricalState& c) {
  c.set.Encode(w);
  EncodeCounts(w, c.ref);
  w.I64(c.held_out);
  w.I64(c.first_total);
  w.I64(c.first_singletons);
  w.I64(c.ref_unseen);
  w.I64(c.ref_unseen_n);
}

bool DecodeCategoricalBaseFields(drift::ByteReader& r, CategoricalState& c) {
  if (!c.set.Decode(r) || !DecodeCounts(r, c.ref)) return false;
  c.held_out = r.I64();
  c.first_total = r.I64();
  c.first_singletons = r.I64();
  c.ref_unseen = r.I64();
  c.ref_unseen_n = r.I64();
  c.set_ready = true;
  return !r.failed() && c.ref.size() == c.set.cells() && c.held_out >= 0 &&
         c.first_total >= 0 && c.first_singletons >= 0 && c.ref_unseen >= 0 &&
         c.ref_unseen <= std::max(c.ref_unseen_n, c.first_total);
}

void EncodeCategoricalBase(const DriftMonitor::SeriesState& s, std::string& out) {
  drift::ByteWriter w(out);
  w.U8(kCategoricalEncodingVersion);
  EncodeCategoricalBaseFields(w, *s.cat);
}

Status DecodeCategoricalBase(std::string_view bytes, CategoricalState& c) {
  drift::ByteReader r(bytes);
  if (r.U8() != kCategoricalEncodingVersion || !DecodeCategoricalBaseFields(r, c) ||
      !r.at_end()) {
    return MakeError(ErrorCode::kCorruption, "drift categorical baseline state: unreadable ({} "
                     "bytes)", bytes.size());
  }
  return Ok();
}

void EncodeCategoricalSeries(const DriftMonitor::SeriesState& s, std::string& out) {
  const CategoricalState& c = *s.cat;
  drift::ByteWriter w(out);
  w.U8(kCategoricalEncodingVersion);
  w.U8(static_cast<uint8_t>((s.frozen ? 1 : 0) | (c.set_ready ? 2 : 0) |
                            (s.frozen ? kBaseApart : 0)));
  w.I64(s.seen);
  w.I64(s.first_event_us);
  w.I64(s.eval().window_start);
  w.I64(s.eval().window_min_us);
  w.I64(s.eval().window_max_us);
  w.I64(s.eval().season_end_us);
  s.alert.Encode(out);
  w.U64(s.eval().incident);
  const Incident& inc = *s.eval().inc;
  w.U8(inc.families);
  w.U32(static_cast<uint32_t>(inc.lead));
  for (double e : inc.evidence) w.F64(e);
  w.I64(inc.shape_n);
  w.U32(static_cast<uint32_t>(inc.shape_delta.size()));
  for (double d : inc.shape_delta) w.F64(d);
  w.I64(c.baseline_values);
  if (!c.set_ready) {
    c.first.Encode(w);
  } else if (!s.frozen) {
    EncodeCategoricalBaseFields(w, c);
  }
  EncodeCounts(w, c.window);
  w.I64(c.window_n);
  c.window_unseen.Encode(w);
  w.U32(static_cast<uint32_t>(c.open.size()));
  for (const CategoryWindow& o : c.open) {
    w.I64(o.start_us);
    w.I64(o.min_us);
    w.I64(o.max_us);
    EncodeCounts(w, o.cells);
    o.sample.Encode(w);
    o.unseen.Encode(w);
  }
  w.U32(static_cast<uint32_t>(c.trailing.size()));
  w.U32(c.trailing_next);
  for (const auto& t : c.trailing) EncodeCounts(w, t);
  w.U32(static_cast<uint32_t>(c.phases.size()));
  for (const auto& p : c.phases) EncodeCounts(w, p);
}

Status DecodeCategoricalSeries(std::string_view bytes, DriftMonitor::SeriesState& s,
                               bool& base_apart) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift categorical series state: {} ({} bytes)",
                     what, bytes.size());
  };
  if (r.U8() != kCategoricalEncodingVersion) return corrupt("unknown version");
  const uint8_t flags = r.U8();
  s.frozen = (flags & 1) != 0;
  base_apart = (flags & kBaseApart) != 0;
  if (base_apart != s.frozen || (s.frozen && (flags & 2) == 0)) return corrupt("bad flags");
  s.cat = std::make_unique<CategoricalState>();
  CategoricalState& c = *s.cat;
  s.seen = r.I64();
  s.first_event_us = r.I64();
  s.mut_eval().window_start = r.I64();
  s.mut_eval().window_min_us = r.I64();
  s.mut_eval().window_max_us = r.I64();
  s.mut_eval().season_end_us = r.I64();
  DRIFTD_TRY(ReadAlert(r, "alert", s.alert, s.mut_eval().incident, corrupt));
  Incident& inc = s.mut_eval().inc.mut();
  inc.families = r.U8();
  inc.lead = static_cast<int32_t>(r.U32());
  for (double& e : inc.evidence) e = r.F64();
  inc.shape_n = r.I64();
  const uint32_t delta = r.U32();
  if (delta > r.remaining() / 8) return corrupt("bad incident");
  inc.shape_delta.resize(delta);
  for (double& d : inc.shape_delta) d = r.F64();
  if (inc.lead < -1 || inc.shape_n < 0) return corrupt("bad incident");
  c.baseline_values = r.I64();
  if ((flags & 2) == 0) {
    if (!c.first.Decode(r)) return corrupt("bad first part");
  } else if (!s.frozen) {
    if (!DecodeCategoricalBaseFields(r, c)) return corrupt("bad baseline");
  } else {
    c.set_ready = true;  // the rest is in the base key
  }
  if (!DecodeCounts(r, c.window)) return corrupt("bad window");
  c.window_n = r.I64();
  if (!c.window_unseen.Decode(r)) return corrupt("bad window's unseen categories");
  const uint32_t open = r.U32();
  if (r.failed() || open > 100'000 || open > r.remaining() / 24) return corrupt("bad open windows");
  c.open.resize(open);
  int64_t previous_start = INT64_MIN;
  for (CategoryWindow& o : c.open) {
    o.start_us = r.I64();
    o.min_us = r.I64();
    o.max_us = r.I64();
    if (!DecodeCounts(r, o.cells) || !o.sample.Decode(r) || !o.unseen.Decode(r) ||
        o.start_us <= previous_start) {
      return corrupt("bad open window");
    }
    previous_start = o.start_us;
  }
  const uint32_t trailing = r.U32();
  c.trailing_next = r.U32();
  if (r.failed() || trailing > 10'000 || c.trailing_next > trailing) {
    return corrupt("bad trailing windows");
  }
  c.trailing.resize(trailing);
  for (auto& t : c.trailing) {
    if (!DecodeCounts(r, t)) return corrupt("bad trailing window");
  }
  const uint32_t phases = r.U32();
  if (r.failed() || phases > 100'000) return corrupt("bad seasonal phases");
  c.phases.resize(phases);
  for (auto& p : c.phases) {
    if (!DecodeCounts(r, p)) return corrupt("bad seasonal phase");
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  if (s.seen < 0 || c.baseline_values < 0 || c.window_n < 0) return corrupt("bad counts");
  s.prepared = false;
  return Ok();
}

/// Checks of a categorical series that need both its record and its baseline.
Status CheckCategorical(const DriftMonitor::SeriesState& s, std::string_view key) {
  const CategoricalState& c = *s.cat;
  auto bad = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "{}: drift categorical series state: {}", key, what);
  };
  const size_t cells = c.set.cells();
  if (c.set_ready && c.ref.size() != cells) return bad("baseline cells disagree");
  if (s.frozen && c.window.size() != cells) return bad("window cells disagree");
  for (const CategoryWindow& o : c.open) {
    if (s.frozen ? o.cells.size() != cells : !o.cells.empty()) return bad("bad open window");
  }
  for (const auto& t : c.trailing) {
    if (t.size() != cells) return bad("bad trailing window");
  }
  for (const auto& p : c.phases) {
    if (p.size() != cells) return bad("bad seasonal phase");
  }
  const std::vector<double>& shape_delta = s.eval().inc->shape_delta;
  if (!shape_delta.empty() && shape_delta.size() != c.set.tracked() + 1) {
    return bad("bad incident");
  }
  return Ok();
}

/// Checks that need both the series record and its baseline.
Status CheckHistograms(const DriftMonitor::SeriesState& s, std::string_view key) {
  const size_t bins = s.edges.bins();
  for (const OpenWindow& o : s.open) {
    if (!o.counts.empty() && o.counts.size() != bins) {
      return MakeError(ErrorCode::kCorruption, "{}: drift series state: bad open window", key);
    }
  }
  if (s.frozen && !s.ref_counts.empty() &&
      (s.ref_counts.size() != bins || s.eval().window_counts.size() != bins)) {
    return MakeError(ErrorCode::kCorruption, "{}: drift series state: histogram sizes disagree",
                     key);
  }
  return Ok();
}

/// Versions 1 to 5 of the series record (one record per series). `warmup_count`: for version
/// 5, the warmup values the record counts (they are in block keys).
Status DecodeSeries(std::string_view bytes, DriftMonitor::SeriesState& s,
                    const DetectorSlots& slots, size_t bins_limit, bool& base_apart,
                    uint32_t& warmup_count) {
  base_apart = false;
  warmup_count = 0;
  drift::ByteReader r(bytes);
  Corrupt corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift series state: {} ({} bytes)", what,
                     bytes.size());
  };
  const uint8_t version = r.U8();
  if (version == 1 || version == 2) {
    DRIFTD_TRY(DecodeLegacySeries(r, version, s, bins_limit, corrupt));
  } else if (version >= 3 && version <= kLastOneRecordVersion) {
    const uint8_t flags = r.U8();
    s.frozen = (flags & 1) != 0;
    s.edges_ready = (flags & 2) != 0;
    base_apart = version >= 5 && (flags & kBaseApart) != 0;
    if (base_apart && !s.frozen) return corrupt("bad flags");
    s.seen = r.I64();
    s.first_event_us = r.I64();
    const uint32_t warmup = r.U32();
    s.warmup.Clear();
    if (version >= 5) {
      if (warmup > DriftMonitor::kMaxWarmupValues || (warmup > 0 && s.edges_ready)) {
        return corrupt("bad warmup count");
      }
      warmup_count = warmup;
    } else {
      if (warmup > r.remaining() / 8) return corrupt("truncated warmup values");
      for (uint32_t i = 0; i < warmup; ++i) s.warmup.Add(r.F64());
    }
    if (!base_apart) DRIFTD_TRY(DecodeBaseFields(r, s, bins_limit, corrupt));
    DRIFTD_TRY(ReadTrailing(r, DecodeSummary, s.mut_eval(), corrupt));
    const uint32_t phases = r.U32();
    s.mut_eval().season_end_us = r.I64();
    if (phases > 100'000 || r.failed()) return corrupt("bad seasonal phases");
    s.mut_eval().phases.assign(phases, {});
    for (WindowSummary& p : s.mut_eval().phases) {
      if (!DecodeSummary(r, p)) return corrupt("bad seasonal phase");
    }
    if (!s.mut_eval().window_raw.Decode(r) || !s.mut_eval().window_sums.Decode(r)) {
      return corrupt("bad window moments");
    }
    if (!DecodeCounts(r, s.mut_eval().window_counts)) return corrupt("bad window counts");
    s.mut_eval().window_start = r.I64();
    s.mut_eval().window_min_us = r.I64();
    s.mut_eval().window_max_us = r.I64();
    const uint32_t recent = r.U32();
    s.mut_eval().recent_next = r.U32();
    if (recent > DriftMonitor::kLookbackWindows || s.eval().recent_next > recent ||
        recent > r.remaining() / 24) {
      return corrupt("bad look-back windows");
    }
    s.mut_eval().recent.resize(recent);
    for (RecentWindow& w : s.mut_eval().recent) {
      w.n = r.I64();
      w.sum = r.F64();
      w.m2 = r.F64();
    }
    // The state of the one detector that kept one then, for the slots that read it.
    std::string state;
    if (ReadFixed(r, kOneRecordStateBytes, state)) {
      const std::string_view bad = slots.DecodeOneRecord(s.mut_eval().detector_states, state);
      if (!bad.empty()) return corrupt(fmt::format("bad {}", bad));
    }
    DRIFTD_TRY(ReadAlert(r, "alert", s.alert, s.mut_eval().incident, corrupt));
    Incident& inc = s.mut_eval().inc.mut();
    inc.families = r.U8();
    inc.lead = static_cast<int32_t>(r.U32());
    for (double& e : inc.evidence) e = r.F64();
    inc.loc_n = r.I64();
    inc.loc_sum = r.F64();
    inc.spread_dof = r.I64();
    inc.spread_sum = r.F64();
    inc.shape_n = r.I64();
    const uint32_t delta = r.U32();
    if (delta > r.remaining() / 8 || delta + 1 > bins_limit + 1) return corrupt("bad incident");
    inc.shape_delta.resize(delta);
    for (double& d : inc.shape_delta) d = r.F64();
    inc.error_n = r.I64();
    inc.error_errors = r.I64();
    if (!base_apart && !ReadErrors(r, s.mut_eval().err_baseline.mut())) {
      return corrupt("bad error baseline");
    }
    if (!ReadErrors(r, s.mut_eval().err_window.mut())) return corrupt("bad error window");
    DRIFTD_TRY(ReadOpenWindows(r, DecodeOpenSums, s.open, corrupt));
    if (version >= 4) {
      for (OpenWindow& o : s.open) {
        auto sample = ValueSample::Decode(r.Str());
        if (!sample) return corrupt("bad open window sample");
        o.sample = std::move(*sample);
      }
    }
    if (inc.lead < -1 || inc.loc_n < 0 || inc.spread_dof < 0 || inc.shape_n < 0 ||
        inc.error_n < 0) {
      return corrupt("bad incident");
    }
  } else {
    return corrupt("unknown version");
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  if (s.eval().trailing_next >= std::max<size_t>(1, s.eval().trailing.size() + 1)) {
    return corrupt("bad trailing position");
  }
  s.prepared = false;
  return Ok();
}

// ---- Version 6: the model record, the series record, warmup segments, the series table ----

uint32_t HotSectionsOf(const DriftMonitor::SeriesState& s, const DetectorSlots& slots) {
  if (s.cat) return 0;  // a categorical series' record holds it whole
  uint32_t bits = 0;
  if (s.frozen || s.edges_ready || s.seen != 0) bits |= kHotState;
  if (ValidTime(s.first_event_us)) bits |= kHotFirstEvent;
  if (!s.edges_ready && !s.warmup.empty()) bits |= kHotWarmup;
  if (!s.frozen && s.baseline.count() > 0 && !BaselineFromWarmup(s)) bits |= kHotBaseline;
  if (!s.frozen && s.edges_ready) bits |= kHotClipped;
  if (s.eval().window_raw.count() > 0 || s.eval().window_sums.count() > 0) bits |= kHotWindow;
  if (s.eval().window_raw.count() > 0 || s.eval().err_window->count() > 0) bits |= kHotSpan;
  if (!slots.IsNew(s.eval().detector_states, StatePart::kValues)) bits |= kHotStates;
  if (!s.frozen && (s.eval().err_baseline->count() > 0 || s.eval().err_baseline->errors != 0)) {
    bits |= kHotErrBaseline;
  }
  if (s.eval().err_window->count() > 0 || s.eval().err_window->errors != 0) bits |= kHotErrWindow;
  if (!s.open.empty()) bits |= kHotOpen;
  return bits;
}

/// A series' entry of the model record: its sections bits, then the sections.
void EncodeHot(const DriftMonitor::SeriesState& s, const DetectorSlots& slots, uint32_t bits,
               std::string& out) {
  drift::ByteWriter w(out);
  w.Varint(bits);
  if (bits & kHotState) {
    w.U8(static_cast<uint8_t>((s.frozen ? 1 : 0) | (s.edges_ready ? 2 : 0)));
    w.Varint(static_cast<uint64_t>(s.seen));
  }
  if (bits & kHotFirstEvent) PutTime(w, s.first_event_us);
  if (bits & kHotWarmup) w.Varint(s.warmup.size());
  if (bits & kHotBaseline) s.baseline.Encode(out);
  if (bits & kHotClipped) {
    s.baseline_c.Encode(w);
    PutCounts(w, s.ref_counts);
  }
  if (bits & kHotWindow) {
    s.eval().window_raw.Encode(w);
    s.eval().window_sums.Encode(w);
    PutCounts(w, s.eval().window_counts);
  }
  if (bits & kHotSpan) {
    w.Zigzag(s.eval().window_start);
    PutTime(w, s.eval().window_min_us);
    PutTime(w, s.eval().window_max_us);
  }
  if (bits & kHotStates) slots.Encode(s.eval().detector_states, StatePart::kValues, w);
  if (bits & kHotErrBaseline) {
    w.Zigzag(s.eval().err_baseline->errors);
    s.eval().err_baseline->abs_error.Encode(out);
  }
  if (bits & kHotErrWindow) {
    w.Zigzag(s.eval().err_window->errors);
    s.eval().err_window->abs_error.Encode(out);
  }
  if (bits & kHotOpen) {
    w.Varint(s.open.size());
    std::string sample;
    for (const OpenWindow& o : s.open) {
      w.Zigzag(o.start_us);
      w.Zigzag(o.first_index);
      o.raw.Encode(w);
      o.sums.Encode(w);
      PutCounts(w, o.counts);
      PutTime(w, o.min_us);
      PutTime(w, o.max_us);
      sample.clear();
      o.sample.Encode(sample);
      w.Bytes(sample);
    }
  }
}

/// Reads a series' entry of the model record into `s` (its other fields untouched).
/// `bits_out`: the sections read; `warmup`: the warmup values the segments must give.
Status DecodeHot(drift::ByteReader& r, DriftMonitor::SeriesState& s, const DetectorSlots& slots,
                 uint32_t& bits_out, uint32_t& warmup) {
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift model record: {}", what);
  };
  const uint64_t bits = r.Varint();
  if (r.failed() || (bits & ~uint64_t{kHotAll}) != 0) return corrupt("unknown sections");
  bits_out = static_cast<uint32_t>(bits);
  warmup = 0;
  if (bits & kHotState) {
    const uint8_t flags = r.U8();
    if ((flags & ~3u) != 0) return corrupt("bad flags");
    s.frozen = (flags & 1) != 0;
    s.edges_ready = (flags & 2) != 0;
    s.seen = static_cast<int64_t>(r.Varint());
    if (s.seen < 0) return corrupt("bad value count");
  }
  if (bits & kHotFirstEvent) s.first_event_us = GetTime(r);
  if (bits & kHotWarmup) {
    const uint64_t count = r.Varint();
    if (count == 0 || count > DriftMonitor::kMaxWarmupValues || s.edges_ready) {
      return corrupt("bad warmup count");
    }
    warmup = static_cast<uint32_t>(count);
  }
  if ((bits & kHotBaseline) && !ReadMoments(r, s.baseline)) return corrupt("bad baseline");
  if ((bits & kHotClipped) &&
      (!s.baseline_c.Decode(r) || !GetCounts(r, s.ref_counts, kBinsLimit))) {
    return corrupt("bad winsorized baseline");
  }
  if ((bits & kHotWindow) &&
      (!s.mut_eval().window_raw.Decode(r) || !s.mut_eval().window_sums.Decode(r) ||
       !GetCounts(r, s.mut_eval().window_counts, kBinsLimit))) {
    return corrupt("bad window");
  }
  if (bits & kHotSpan) {
    s.mut_eval().window_start = r.Zigzag();
    s.mut_eval().window_min_us = GetTime(r);
    s.mut_eval().window_max_us = GetTime(r);
  }
  if (bits & kHotStates) {
    if (slots.empty()) return corrupt("state of detectors that are not configured");
    const std::string_view bad = slots.Decode(s.mut_eval().detector_states, StatePart::kValues, r);
    if (!bad.empty()) return corrupt(fmt::format("bad {}", bad));
  }
  if (bits & kHotErrBaseline) {
    ErrorSummary& baseline = s.mut_eval().err_baseline.mut();
    baseline.errors = r.Zigzag();
    if (!ReadMoments(r, baseline.abs_error)) return corrupt("bad error baseline");
  }
  if (bits & kHotErrWindow) {
    ErrorSummary& window = s.mut_eval().err_window.mut();
    window.errors = r.Zigzag();
    if (!ReadMoments(r, window.abs_error)) return corrupt("bad error window");
  }
  if (bits & kHotOpen) {
    const uint64_t open = r.Varint();
    if (open == 0 || open > 100'000 || open > r.remaining()) return corrupt("bad open windows");
    s.open.resize(open);
    int64_t previous_start = INT64_MIN;
    for (OpenWindow& o : s.open) {
      o.start_us = r.Zigzag();
      o.first_index = r.Zigzag();
      if (!o.raw.Decode(r) || !o.sums.Decode(r) || !GetCounts(r, o.counts, kBinsLimit)) {
        return corrupt("bad open window");
      }
      o.min_us = GetTime(r);
      o.max_us = GetTime(r);
      auto sample = ValueSample::Decode(r.Bytes());
      if (r.failed() || !sample || o.start_us <= previous_start) {
        return corrupt("bad open window");
      }
      o.sample = std::move(*sample);
      previous_start = o.start_us;
    }
  }
  if (r.failed()) return corrupt("truncated");
  s.prepared = false;
  return Ok();
}

void EncodeSummaryCompact(drift::ByteWriter& w, std::string& out, const WindowSummary& t) {
  t.moments.Encode(out);
  t.clipped.Encode(w);
  PutCounts(w, t.counts);
}

bool DecodeSummaryCompact(drift::ByteReader& r, WindowSummary& t) {
  return ReadMoments(r, t.moments) && t.clipped.Decode(r) && GetCounts(r, t.counts, kBinsLimit);
}

uint32_t ColdSectionsOf(const DriftMonitor::SeriesState& s, const DetectorSlots& slots) {
  static const AlertStateMachine kNoAlert;
  uint32_t bits = 0;
  if (!s.frozen && s.edges_ready) bits |= kColdFences;
  if (!s.eval().trailing.empty() || s.eval().trailing_next != 0) bits |= kColdTrailing;
  if (!s.eval().phases.empty() || ValidTime(s.eval().season_end_us)) bits |= kColdPhases;
  if (!s.eval().recent.empty() || s.eval().recent_next != 0) bits |= kColdRecent;
  if (!slots.IsNew(s.eval().detector_states, StatePart::kWindows)) bits |= kColdStates;
  if (!(s.alert == kNoAlert) || s.eval().incident != 0) bits |= kColdAlert;
  if (!IsDefault(*s.eval().inc)) bits |= kColdIncident;
  return bits;
}

/// The series record (version 6): the sections that differ from a new series'; nothing at all
/// when none does (no record is kept then).
void EncodeCold(const DriftMonitor::SeriesState& s, const DetectorSlots& slots, std::string& out) {
  const uint32_t bits = ColdSectionsOf(s, slots);
  if (bits == 0) return;
  drift::ByteWriter w(out);
  w.U8(kSeriesEncodingVersion);
  w.Varint(bits);
  if (bits & kColdFences) {
    w.F64(s.clip_lo);
    w.F64(s.clip_hi);
    w.Varint(s.edges.inner().size());
    for (double e : s.edges.inner()) w.F64(e);
  }
  if (bits & kColdTrailing) {
    w.Varint(s.eval().trailing.size());
    w.Varint(s.eval().trailing_next);
    for (const WindowSummary& t : s.eval().trailing) EncodeSummaryCompact(w, out, t);
  }
  if (bits & kColdPhases) {
    w.Varint(s.eval().phases.size());
    PutTime(w, s.eval().season_end_us);
    for (const WindowSummary& p : s.eval().phases) EncodeSummaryCompact(w, out, p);
  }
  if (bits & kColdRecent) {
    w.Varint(s.eval().recent.size());
    w.Varint(s.eval().recent_next);
    for (const RecentWindow& rw : s.eval().recent) {
      w.Zigzag(rw.n);
      w.F64(rw.sum);
      w.F64(rw.m2);
    }
  }
  if (bits & kColdStates) slots.Encode(s.eval().detector_states, StatePart::kWindows, w);
  if (bits & kColdAlert) {
    s.alert.Encode(out);
    w.U64(s.eval().incident);
  }
  if (bits & kColdIncident) {
    const Incident& inc = *s.eval().inc;
    w.U8(inc.families);
    w.Zigzag(inc.lead);
    for (double e : inc.evidence) w.F64(e);
    w.Zigzag(inc.loc_n);
    w.F64(inc.loc_sum);
    w.Zigzag(inc.spread_dof);
    w.F64(inc.spread_sum);
    w.Zigzag(inc.shape_n);
    w.Varint(inc.shape_delta.size());
    for (double d : inc.shape_delta) w.F64(d);
    w.Zigzag(inc.error_n);
    w.Zigzag(inc.error_errors);
  }
}

Status DecodeCold(std::string_view bytes, DriftMonitor::SeriesState& s,
                  const DetectorSlots& slots) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift series state: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kSeriesEncodingVersion) return corrupt("unknown version");
  const uint64_t bits = r.Varint();
  if (r.failed() || bits == 0 || (bits & ~uint64_t{kColdAll}) != 0) {
    return corrupt("unknown sections");
  }
  if (bits & kColdFences) {
    DRIFTD_TRY(ReadFences(r, s, corrupt));
    DRIFTD_TRY(ReadEdges(r, r.Varint(), kBinsLimit, s.edges, corrupt));
  }
  if (bits & kColdTrailing) {
    const uint64_t trailing = r.Varint();
    s.mut_eval().trailing_next = static_cast<uint32_t>(r.Varint());
    if (trailing > 10'000 || trailing > r.remaining() || r.failed()) {
      return corrupt("bad trailing windows");
    }
    s.mut_eval().trailing.assign(trailing, {});
    for (WindowSummary& t : s.mut_eval().trailing) {
      if (!DecodeSummaryCompact(r, t)) return corrupt("bad trailing window");
    }
    if (s.eval().trailing_next >= std::max<size_t>(1, s.eval().trailing.size() + 1)) {
      return corrupt("bad trailing position");
    }
  }
  if (bits & kColdPhases) {
    const uint64_t phases = r.Varint();
    s.mut_eval().season_end_us = GetTime(r);
    if (phases > 100'000 || phases > r.remaining() || r.failed()) {
      return corrupt("bad seasonal phases");
    }
    s.mut_eval().phases.assign(phases, {});
    for (WindowSummary& p : s.mut_eval().phases) {
      if (!DecodeSummaryCompact(r, p)) return corrupt("bad seasonal phase");
    }
  }
  if (bits & kColdRecent) {
    const uint64_t recent = r.Varint();
    s.mut_eval().recent_next = static_cast<uint32_t>(r.Varint());
    if (recent > DriftMonitor::kLookbackWindows || s.eval().recent_next > recent ||
        recent > r.remaining() / 17) {
      return corrupt("bad look-back windows");
    }
    s.mut_eval().recent.resize(recent);
    for (RecentWindow& rw : s.mut_eval().recent) {
      rw.n = r.Zigzag();
      rw.sum = r.F64();
      rw.m2 = r.F64();
    }
  }
  if (bits & kColdStates) {
    if (slots.empty()) return corrupt("state of detectors that are not configured");
    const std::string_view bad = slots.Decode(s.mut_eval().detector_states, StatePart::kWindows, r);
    if (!bad.empty()) return corrupt(fmt::format("bad {}", bad));
  }
  if (bits & kColdAlert) {
    DRIFTD_TRY(ReadAlert(r, "alert", s.alert, s.mut_eval().incident, corrupt));
  }
  if (bits & kColdIncident) {
    Incident& inc = s.mut_eval().inc.mut();
    inc.families = r.U8();
    inc.lead = static_cast<int32_t>(r.Zigzag());
    for (double& e : inc.evidence) e = r.F64();
    inc.loc_n = r.Zigzag();
    inc.loc_sum = r.F64();
    inc.spread_dof = r.Zigzag();
    inc.spread_sum = r.F64();
    inc.shape_n = r.Zigzag();
    const uint64_t delta = r.Varint();
    if (delta > r.remaining() / 8 || delta > kBinsLimit) return corrupt("bad incident");
    inc.shape_delta.resize(delta);
    for (double& d : inc.shape_delta) d = r.F64();
    inc.error_n = r.Zigzag();
    inc.error_errors = r.Zigzag();
    if (inc.lead < -1 || inc.loc_n < 0 || inc.spread_dof < 0 || inc.shape_n < 0 ||
        inc.error_n < 0) {
      return corrupt("bad incident");
    }
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  s.prepared = false;
  return Ok();
}

Status DecodeModelRecord(std::string_view bytes, ModelRecordHead& head,
                         const std::function<Status(uint32_t, drift::ByteReader&)>& entry) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift model record: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kModelEncodingVersion) return corrupt("unknown version");
  const uint64_t flags = r.Varint();
  if ((flags & ~uint64_t{1}) != 0) return corrupt("bad flags");
  if (flags & 1) DRIFTD_TRY(ReadAlert(r, "roll-up", head.rollup, head.rollup_incident, corrupt));
  const uint64_t first = r.Varint();
  const uint64_t next = r.Varint();
  if (r.failed() || first > next || next > UINT32_MAX) return corrupt("bad segment range");
  head.seg_first = static_cast<uint32_t>(first);
  head.seg_next = static_cast<uint32_t>(next);
  const uint64_t entries = r.Varint();
  if (r.failed() || entries > r.remaining()) return corrupt("bad series count");
  for (uint64_t i = 0; i < entries; ++i) {
    const uint64_t index = r.Varint();
    if (r.failed() || index > UINT32_MAX) return corrupt("bad series index");
    DRIFTD_TRY(entry(static_cast<uint32_t>(index), r));
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  return Ok();
}

/// A warmup segment (version 1): pieces (table index, index of the first value in the
/// series' warmup, count, the values in the compact decimal form).
Status DecodeSegment(
    std::string_view bytes,
    const std::function<Status(uint32_t, uint32_t, uint32_t, std::string_view)>& piece) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) -> Status {
    return MakeError(ErrorCode::kCorruption, "drift warmup segment: {} ({} bytes)", what,
                     bytes.size());
  };
  if (r.U8() != kSegmentEncodingVersion) return corrupt("unknown version");
  const uint64_t pieces = r.Varint();
  if (r.failed() || pieces > r.remaining()) return corrupt("bad piece count");
  for (uint64_t i = 0; i < pieces; ++i) {
    const uint64_t index = r.Varint();
    const uint64_t first = r.Varint();
    const uint64_t count = r.Varint();
    const std::string_view values = r.Bytes();
    if (r.failed() || index > UINT32_MAX || count == 0 ||
        first + count > DriftMonitor::kMaxWarmupValues) {
      return corrupt("bad piece");
    }
    // The values must decode to exactly `count` doubles.
    drift::ByteReader v(values);
    for (uint64_t k = 0; k < count; ++k) (void)v.Decimal();
    if (v.failed() || !v.at_end()) return corrupt("bad values");
    DRIFTD_TRY(piece(static_cast<uint32_t>(index), static_cast<uint32_t>(first),
                     static_cast<uint32_t>(count), values));
  }
  if (!r.at_end()) return corrupt("trailing bytes");
  return Ok();
}

Result<std::vector<std::string>> DecodeTable(std::string_view bytes) {
  drift::ByteReader r(bytes);
  std::vector<std::string> names;
  if (r.U8() != kTableEncodingVersion) {
    return MakeError(ErrorCode::kCorruption, "drift series table: unknown version");
  }
  const uint64_t n = r.Varint();
  if (r.failed() || n > r.remaining()) {
    return MakeError(ErrorCode::kCorruption, "drift series table: bad count");
  }
  for (uint64_t i = 0; i < n; ++i) names.emplace_back(r.Bytes());
  if (r.failed() || !r.at_end()) {
    return MakeError(ErrorCode::kCorruption, "drift series table: truncated");
  }
  return names;
}

}  // namespace monitor_detail

}  // namespace driftd
