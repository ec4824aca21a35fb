// What a batch of the drift monitor writes to the checkpoint, and reading it back
// (engine/drift/monitor.h lists the keys; monitor_layout.h holds their byte formats).
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

#include "engine/drift/evaluation.h"

namespace driftd {

std::string_view DriftMonitor::SeriesName(size_t index) const {
  return index < series_names_.size() ? std::string_view(series_names_[index]) : kErrorSeries;
}

void DriftMonitor::ResolveTable() {
  if (table_resolved_) return;
  // Positions of names already in the checkpoint (or in use, after InsertSeries) stay; new
  // series are appended.
  if (!table_resolved_once_) table_ = std::move(restored_table_);
  restored_table_.clear();
  table_resolved_ = table_resolved_once_ = true;
  const size_t n = series_names_.size() + 1;
  series_table_index_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view name = SeriesName(i);
    auto it = std::find(table_.begin(), table_.end(), name);
    if (it == table_.end()) {
      table_.emplace_back(name);
      it = table_.end() - 1;
      table_dirty_ = true;
    }
    series_table_index_[i] = static_cast<uint32_t>(it - table_.begin());
  }
  table_series_.assign(table_.size(), -1);
  for (size_t i = 0; i < n; ++i) table_series_[series_table_index_[i]] = static_cast<int32_t>(i);
}

void DriftMonitor::CollectDirty(StatePuts& puts) {
  std::vector<std::string> deletes;
  CollectDirty(puts, deletes);
}

void DriftMonitor::CollectDirty(StatePuts& puts, std::vector<std::string>& deletes) {
  last_write_ = {};
  const size_t first_put = puts.size();
  ResolveTable();
  for (auto& mp : models_) {
    if (!mp) continue;
    ModelState& m = *mp;
    if (m.dirty.empty() && !m.rollup_dirty && !m.consolidate) continue;
    if (table_dirty_) {
      std::string table;
      drift::ByteWriter w(table);
      w.U8(kTableEncodingVersion);
      w.Varint(table_.size());
      for (const std::string& name : table_) w.Bytes(name);
      last_write_.dirty_bytes += static_cast<int64_t>(table.size());
      puts.emplace_back(std::string(kTableKey), std::move(table));
      table_dirty_ = false;
    }
    WriteModel(m, puts, deletes);
  }
  for (size_t i = first_put; i < puts.size(); ++i) {
    last_write_.put_bytes += static_cast<int64_t>(puts[i].first.size() + puts[i].second.size());
  }
}

void DriftMonitor::WriteModel(ModelState& m, StatePuts& puts, std::vector<std::string>& deletes) {
  const std::string model_key = std::string(kStateKeyPrefix) + EscapeKeyPart(m.name);
  last_write_.dirty_series += static_cast<int64_t>(m.dirty.size());
  for (uint32_t series : m.dirty) m.series[series].dirty = false;
  m.dirty.clear();
  m.rollup_dirty = false;

  // Series records and frozen baselines: written when they changed, which a value alone does
  // not do (MarkHot).
  for (size_t i = 0; i < m.series.size(); ++i) {
    SeriesState& s = m.series[i];
    const bool categorical = i < series_kinds_.size() && series_kinds_[i] == SeriesKind::kCategorical;
    if (!s.cold_dirty && s.warmup_blocks == 0) {
      if (categorical) continue;
#ifndef NDEBUG
      // What changed of the series record must have been marked (MarkDirty), or a restart
      // would lose it: debug builds (the sanitizer tests) check every write.
      scratch_.clear();
      EncodeCold(s, detector_slots_, scratch_);
      assert((scratch_.empty() ? 0 : HashBytes(scratch_)) == (s.cold_in_store ? s.cold_hash : 0) &&
             "a field of the series record changed without MarkDirty");
#endif
      continue;
    }
    const std::string key = model_key + "/" + EscapeKeyPart(SeriesName(i));
    for (uint32_t b = 0; b < s.warmup_blocks; ++b) {
      deletes.push_back(fmt::format("{}{}{}", key, kWarmupSuffix, b));
    }
    s.warmup_blocks = 0;
    if (!s.cold_dirty) continue;
    s.cold_dirty = false;
    if (categorical) {
      // A categorical series is written whole (its counts are small and bounded): the record,
      // and the frozen baseline's key when it changes, which is once.
      CategoricalOf(s);
      if (s.frozen) {
        scratch_.clear();
        EncodeCategoricalBase(s, scratch_);
        const uint64_t hash = HashBytes(scratch_);
        if (hash != s.base_hash) {
          last_write_.dirty_bytes += static_cast<int64_t>(scratch_.size());
          puts.emplace_back(key + std::string(kBaseSuffix), scratch_);
          s.base_hash = hash;
          s.base_in_store = true;
        }
      } else {
        s.base_hash = 0;
        if (s.base_in_store) {
          deletes.push_back(key + std::string(kBaseSuffix));
          s.base_in_store = false;
        }
      }
      std::string value;
      EncodeCategoricalSeries(s, value);
      last_write_.dirty_bytes += static_cast<int64_t>(value.size());
      puts.emplace_back(key, std::move(value));
      s.cold_in_store = true;
      continue;
    }
    if (s.frozen) {
      scratch_.clear();
      EncodeBase(s, scratch_);
      const uint64_t hash = HashBytes(scratch_);
      if (hash != s.base_hash) {
        last_write_.dirty_bytes += static_cast<int64_t>(scratch_.size());
        puts.emplace_back(key + std::string(kBaseSuffix), scratch_);
        s.base_hash = hash;
        s.base_in_store = true;
      }
    } else {
      s.base_hash = 0;
      if (s.base_in_store) {
        deletes.push_back(key + std::string(kBaseSuffix));
        s.base_in_store = false;
      }
    }
    scratch_.clear();
    EncodeCold(s, detector_slots_, scratch_);
    if (scratch_.empty()) {
      if (s.cold_in_store) deletes.push_back(key);
      s.cold_in_store = false;
      s.cold_hash = 0;
      continue;
    }
    const uint64_t hash = HashBytes(scratch_);
    if (s.cold_in_store && hash == s.cold_hash) continue;
    last_write_.dirty_bytes += static_cast<int64_t>(scratch_.size());
    puts.emplace_back(key, scratch_);
    s.cold_in_store = true;
    s.cold_hash = hash;
  }

  // Warmup segments: the values each series added since the last write, in one new key. When
  // the segments hold more values of series that no longer keep them than of series that do,
  // or a series started over, the values still kept are rewritten into one segment instead.
  int64_t saved_live = 0;
  int64_t kept = 0;
  bool restart = m.consolidate;
  for (SeriesState& s : m.series) {
    if (s.edges_ready) {
      s.warmup_saved = 0;
      s.warmup_saved_bytes = 0;
      continue;
    }
    if (s.warmup.size() < s.warmup_saved) restart = true;
    saved_live += s.warmup_saved;
    kept += s.warmup.size();
  }
  m.consolidate = false;
  const int64_t dead = m.seg_values - saved_live;
  if (m.seg_first != m.seg_next &&
      (restart || kept == 0 || (dead > saved_live && m.seg_values >= kMinSegmentValues))) {
    for (uint32_t seq = m.seg_first; seq < m.seg_next; ++seq) {
      deletes.push_back(fmt::format("{}/{}{}", model_key, kSegmentTag, seq));
    }
    m.seg_first = m.seg_next;
    m.seg_values = 0;
    for (SeriesState& s : m.series) {
      // Values new since the last write count as changes; those rewritten do not.
      const uint32_t rewritten = std::min(s.warmup_saved, s.warmup.size());
      s.warmup_saved = 0;
      s.warmup_saved_bytes = 0;
      if (rewritten > 0) {
        drift::ByteReader r(s.warmup.bytes());
        for (uint32_t k = 0; k < rewritten; ++k) (void)r.Decimal();
        last_write_.dirty_bytes -= static_cast<int64_t>(s.warmup.bytes().size() - r.remaining());
      }
    }
  }
  for (uint32_t seq : m.stale_segments) {
    deletes.push_back(fmt::format("{}/{}{}", model_key, kSegmentTag, seq));
  }
  m.stale_segments.clear();
  std::string segment;
  uint32_t pieces = 0;
  size_t segment_bytes = 8;
  for (size_t i = 0; i < m.series.size(); ++i) {
    const SeriesState& s = m.series[i];
    if (!s.edges_ready && s.warmup.size() > s.warmup_saved) {
      ++pieces;
      // Four varints and the values.
      segment_bytes += 40 + s.warmup.bytes().size() - s.warmup_saved_bytes;
    }
  }
  if (pieces > 0) {
    // Sized once: at 10,000 models, segments grown by doubling held 45 MB for 30 of values.
    segment.reserve(segment_bytes);
    drift::ByteWriter w(segment);
    w.U8(kSegmentEncodingVersion);
    w.Varint(pieces);
    for (size_t i = 0; i < m.series.size(); ++i) {
      SeriesState& s = m.series[i];
      if (s.edges_ready || s.warmup.size() <= s.warmup_saved) continue;
      const std::string_view values =
          std::string_view(s.warmup.bytes()).substr(s.warmup_saved_bytes);
      w.Varint(series_table_index_[i]);
      w.Varint(s.warmup_saved);
      w.Varint(s.warmup.size() - s.warmup_saved);
      w.Bytes(values);
      last_write_.dirty_bytes += static_cast<int64_t>(values.size());
      m.seg_values += s.warmup.size() - s.warmup_saved;
      s.warmup_saved = s.warmup.size();
      s.warmup_saved_bytes = static_cast<uint32_t>(s.warmup.bytes().size());
    }
    puts.emplace_back(fmt::format("{}/{}{}", model_key, kSegmentTag, m.seg_next), std::move(segment));
    ++m.seg_next;
  }

  // The model record: the roll-up, the segments' range and what values changed of each series.
  uint32_t entries = 0;
  std::string& body = scratch_;
  body.clear();
  drift::ByteWriter b(body);
  for (size_t i = 0; i < m.series.size(); ++i) {
    const uint32_t bits = HotSectionsOf(m.series[i], detector_slots_);
    if (bits == 0) continue;
    ++entries;
    b.Varint(series_table_index_[i]);
    EncodeHot(m.series[i], detector_slots_, bits, body);
  }
  std::string record;
  record.reserve(64 + body.size());
  drift::ByteWriter w(record);
  w.U8(kModelEncodingVersion);
  static const AlertStateMachine kNoRollup;
  const bool rollup = !(m.rollup == kNoRollup) || m.rollup_incident != 0;
  w.Varint(rollup ? 1 : 0);
  if (rollup) {
    m.rollup.Encode(record);
    w.U64(m.rollup_incident);
  }
  w.Varint(m.seg_first);
  w.Varint(m.seg_next);
  w.Varint(entries);
  record.append(body);
  last_write_.dirty_bytes += static_cast<int64_t>(record.size());
  puts.emplace_back(model_key, std::move(record));
  m.record_in_store = true;
}

Status DriftMonitor::Restore(std::string_view key, std::string_view value) {
  if (!key.starts_with(kStateKeyPrefix)) {
    return MakeError(ErrorCode::kInvalidArgument, "drift: not a drift state key: '{}'", key);
  }
  if (key == kTableKey) {
    auto names = DecodeTable(value);
    if (!names) return tl::unexpected(names.error().Wrap(std::string(key)));
    if (table_resolved_once_) {
      // Read after the state was first used (unusual): it must be what is in use.
      if (names->size() > table_.size() || !std::equal(names->begin(), names->end(), table_.begin())) {
        return MakeError(ErrorCode::kCorruption, "drift: the series table was read too late");
      }
      return Ok();
    }
    restored_table_ = std::move(*names);
    table_from_store_ = true;
    return Ok();
  }
  const std::string_view rest = key.substr(kStateKeyPrefix.size());
  const size_t slash = rest.find('/');
  auto model_name = UnescapeKeyPart(rest.substr(0, slash));
  if (!model_name) return tl::unexpected(model_name.error());

  // The model may already be live (a restore after the first Observe is unusual but harmless).
  ModelState* m = nullptr;
  for (auto& live : models_) {
    if (live && live->name == *model_name) m = live.get();
  }
  if (m == nullptr) {
    auto& slot = pending_[*model_name];
    if (!slot) {
      slot = std::make_unique<ModelState>();
      slot->name = *model_name;
      slot->series.resize(series_names_.size() + 1);
    }
    m = slot.get();
  }
  auto model_pieces = [&]() -> ModelState::RestorePieces& {
    if (!m->restoring) m->restoring = std::make_unique<ModelState::RestorePieces>();
    return *m->restoring;
  };

  if (slash == std::string_view::npos) {
    m->record_in_store = true;
    if (!value.empty() && static_cast<uint8_t>(value[0]) == kModelEncodingVersion) {
      // Read once the whole state is there (it refers to series by the table's positions).
      ModelRecordHead head;
      SeriesState scratch;
      uint32_t bits = 0;
      uint32_t warmup = 0;
      auto checked = DecodeModelRecord(value, head, [&](uint32_t, drift::ByteReader& r) {
        scratch = SeriesState();
        return DecodeHot(r, scratch, detector_slots_, bits, warmup);
      });
      if (!checked) return tl::unexpected(checked.error().Wrap(std::string(key)));
      model_pieces().record.assign(value);
      return Ok();
    }
    drift::ByteReader r(value);
    std::string buf;
    if (r.U8() != kRollupEncodingVersion || !ReadFixed(r, AlertStateMachine::kEncodedSize, buf)) {
      return MakeError(ErrorCode::kCorruption, "drift: bad roll-up state for model '{}'",
                       *model_name);
    }
    auto rollup = AlertStateMachine::Decode(buf);
    if (!rollup) return tl::unexpected(rollup.error().Wrap(key));
    const uint64_t incident = r.U64();
    if (r.failed() || !r.at_end()) {
      return MakeError(ErrorCode::kCorruption, "drift: bad roll-up state for model '{}'",
                       *model_name);
    }
    m->rollup = *rollup;
    m->rollup_incident = incident;
    return Ok();
  }

  // "<series>", "<series>/base", "<series>/w<block>" (series names are escaped: no '/') or a
  // warmup segment "%w<seq>".
  std::string_view series_part = rest.substr(slash + 1);
  if (series_part.starts_with(kSegmentTag)) {
    const std::string_view digits = series_part.substr(kSegmentTag.size());
    uint32_t seq = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
      return MakeError(ErrorCode::kCorruption, "drift: bad warmup segment key '{}'", key);
    }
    auto checked = DecodeSegment(value, [](uint32_t, uint32_t, uint32_t, std::string_view) {
      return Ok();
    });
    if (!checked) return tl::unexpected(checked.error().Wrap(std::string(key)));
    model_pieces().segments[seq].assign(value);
    return Ok();
  }
  std::string_view piece;
  if (const size_t sub = series_part.find('/'); sub != std::string_view::npos) {
    piece = series_part.substr(sub);
    series_part = series_part.substr(0, sub);
  }
  auto series_name = UnescapeKeyPart(series_part);
  if (!series_name) return tl::unexpected(series_name.error());
  size_t index = series_names_.size();
  if (*series_name != kErrorSeries) {
    auto it = std::find(series_names_.begin(), series_names_.end(), *series_name);
    if (it == series_names_.end()) return Ok();  // series no longer watched
    index = static_cast<size_t>(it - series_names_.begin());
  }
  SeriesState& target = m->series[index];
  if (!target.restoring) target.restoring = std::make_unique<SeriesState::RestorePieces>();
  SeriesState::RestorePieces& pieces = *target.restoring;

  const bool categorical = index < series_kinds_.size() &&
                           series_kinds_[index] == SeriesKind::kCategorical;
  if (piece == kBaseSuffix) {
    if (categorical != IsCategoricalRecord(value)) {
      return MakeError(ErrorCode::kCorruption, "drift: state key '{}' is not of a {} series", key,
                       categorical ? "categorical" : "numeric");
    }
    SeriesState scratch;
    if (categorical) {
      if (auto st = DecodeCategoricalBase(value, CategoricalOf(scratch)); !st) {
        return tl::unexpected(st.error().Wrap(std::string(key)));
      }
    } else if (auto st = DecodeBase(value, scratch, kBinsLimit); !st) {
      return tl::unexpected(st.error().Wrap(std::string(key)));
    }
    target.base_in_store = true;
    pieces.base.assign(value);
    pieces.has_base = true;
  } else if (piece.starts_with(kWarmupSuffix)) {
    const std::string_view digits = piece.substr(kWarmupSuffix.size());
    uint32_t block = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), block);
    const uint32_t max_blocks =
        static_cast<uint32_t>(kMaxWarmupValues / kWarmupBlockValues + 1);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
        block >= max_blocks || value.size() % 8 != 0 || value.size() > 8 * kWarmupBlockValues) {
      return MakeError(ErrorCode::kCorruption, "drift: bad warmup block '{}' ({} bytes)", key,
                       value.size());
    }
    target.warmup_blocks = std::max(target.warmup_blocks, block + 1);
    if (pieces.blocks.size() <= block) {
      pieces.blocks.resize(block + 1);
      pieces.have_block.resize(block + 1, false);
    }
    pieces.blocks[block].assign(value);
    pieces.have_block[block] = true;
  } else if (piece.empty()) {
    SeriesState scratch;
    Status checked = Ok();
    if (categorical != IsCategoricalRecord(value)) {
      return MakeError(ErrorCode::kCorruption, "drift: state key '{}' is not of a {} series", key,
                       categorical ? "categorical" : "numeric");
    }
    if (categorical) {
      bool base_apart = false;
      checked = DecodeCategoricalSeries(value, scratch, base_apart);
    } else if (!value.empty() && static_cast<uint8_t>(value[0]) == kSeriesEncodingVersion) {
      checked = DecodeCold(value, scratch, detector_slots_);
    } else {
      bool base_apart = false;
      uint32_t warmup = 0;
      checked = DecodeSeries(value, scratch, detector_slots_, kBinsLimit, base_apart, warmup);
    }
    if (!checked) return tl::unexpected(checked.error().Wrap(std::string(key)));
    target.cold_in_store = true;
    pieces.record.assign(value);
    pieces.has_record = true;
  } else {
    return MakeError(ErrorCode::kCorruption, "drift: unknown state key '{}'", key);
  }
  return Ok();
}

Status DriftMonitor::CompleteModel(ModelState& m, bool lenient) {
  const bool any_series = std::any_of(m.series.begin(), m.series.end(),
                                      [](const SeriesState& s) { return s.restoring != nullptr; });
  if (!m.restoring && !any_series) return Ok();
  ResolveTable();
  std::unique_ptr<ModelState::RestorePieces> model = std::move(m.restoring);
  const size_t n = m.series.size();
  std::vector<std::unique_ptr<SeriesState::RestorePieces>> pieces(n);
  for (size_t i = 0; i < n; ++i) pieces[i] = std::move(m.series[i].restoring);

  // What each series' keys say, and the model's segments.
  struct Info {
    bool legacy = false;      // a record of versions 1 to 5 (everything in it)
    bool v6 = false;          // a series record of version 6
    bool base_apart = false;  // version 5: the frozen baseline is in the base key
    bool hot = false;         // an entry in the model record
    uint32_t hot_bits = 0;
    uint32_t warmup = 0;      // warmup values the record or the model record counts
    bool categorical = false;  // a categorical series: its record and base key hold it all
  };
  std::vector<Info> info(n);
  auto fresh_series = [](const SeriesState& old) {
    SeriesState fresh;
    fresh.warmup_blocks = old.warmup_blocks;
    fresh.base_in_store = old.base_in_store;
    fresh.cold_in_store = old.cold_in_store;
    return fresh;
  };
  auto name_of = [&](size_t i) { return std::string(SeriesName(i)); };

  auto assemble = [&]() -> Status {
    // 1. Series records (the series starts from what its record holds).
    bool any_v6 = false;
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      s = fresh_series(s);
      info[i].categorical =
          i < series_kinds_.size() && series_kinds_[i] == SeriesKind::kCategorical;
      if (!pieces[i] || !pieces[i]->has_record) continue;
      const std::string& record = pieces[i]->record;
      Status st = Ok();
      if (info[i].categorical) {
        bool base_apart = false;
        st = DecodeCategoricalSeries(record, s, base_apart);
        if (st && base_apart) {
          if (!pieces[i]->has_base) {
            return MakeError(ErrorCode::kCorruption,
                             "drift series state: the frozen baseline is missing (series '{}')",
                             name_of(i));
          }
          st = DecodeCategoricalBase(pieces[i]->base, CategoricalOf(s));
        }
      } else if (static_cast<uint8_t>(record[0]) == kSeriesEncodingVersion) {
        info[i].v6 = any_v6 = true;
        st = DecodeCold(record, s, detector_slots_);
      } else {
        info[i].legacy = true;
        st = DecodeSeries(record, s, detector_slots_, kBinsLimit, info[i].base_apart,
                          info[i].warmup);
      }
      if (!st) return tl::unexpected(st.error().Wrap(fmt::format("series '{}'", name_of(i))));
    }
    // 2. The model record: the roll-up, the segments' range, each series' changing part.
    if (model && !model->record.empty()) {
      if (!table_from_store_) {
        return MakeError(ErrorCode::kCorruption, "drift: the series table is missing");
      }
      ModelRecordHead head;
      SeriesState scratch;
      DRIFTD_TRY(DecodeModelRecord(model->record, head,
                                   [&](uint32_t t, drift::ByteReader& r) -> Status {
        const int32_t i = t < table_series_.size() ? table_series_[t] : -1;
        uint32_t bits = 0;
        uint32_t warmup = 0;
        if (i < 0 || info[static_cast<size_t>(i)].legacy || info[static_cast<size_t>(i)].hot ||
            info[static_cast<size_t>(i)].categorical) {
          scratch = SeriesState();
          return DecodeHot(r, scratch, detector_slots_, bits, warmup);
        }
        Info& in = info[static_cast<size_t>(i)];
        in.hot = true;
        return DecodeHot(r, m.series[static_cast<size_t>(i)], detector_slots_, in.hot_bits,
                         in.warmup);
      }));
      m.rollup = head.rollup;
      m.rollup_incident = head.rollup_incident;
      m.seg_first = head.seg_first;
      m.seg_next = head.seg_next;
    } else if (any_v6) {
      return MakeError(ErrorCode::kCorruption, "drift: the model record is missing");
    }
    // 3. Frozen baselines.
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (info[i].categorical) continue;
      const bool needs_base = s.frozen && (info[i].v6 || info[i].hot || info[i].base_apart);
      const bool has_base = pieces[i] && pieces[i]->has_base;
      if (needs_base && !has_base) {
        return MakeError(ErrorCode::kCorruption,
                         "drift series state: the frozen baseline is missing (series '{}')",
                         name_of(i));
      }
      if (needs_base) {
        if (auto st = DecodeBase(pieces[i]->base, s, kBinsLimit); !st) {
          return tl::unexpected(st.error().Wrap(fmt::format("series '{}'", name_of(i))));
        }
      }
    }
    // 4. Warmup values: version-5 blocks, or the segments of the model record's range.
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (!info[i].legacy || s.edges_ready || info[i].warmup == 0) continue;
      const uint32_t count = info[i].warmup;
      const uint32_t blocks = (count + kWarmupBlockValues - 1) / kWarmupBlockValues;
      for (uint32_t b = 0; b < blocks; ++b) {
        const size_t need = std::min<size_t>(kWarmupBlockValues, count - b * kWarmupBlockValues);
        if (b >= pieces[i]->blocks.size() || !pieces[i]->have_block[b] ||
            pieces[i]->blocks[b].size() < 8 * need) {
          return MakeError(ErrorCode::kCorruption,
                           "drift series state: warmup values are missing (series '{}')",
                           name_of(i));
        }
        drift::ByteReader r(pieces[i]->blocks[b]);
        for (size_t k = 0; k < need; ++k) s.warmup.Add(r.F64());
      }
    }
    if (model) {
      for (auto& [seq, bytes] : model->segments) {
        if (seq < m.seg_first || seq >= m.seg_next) {
          m.stale_segments.push_back(seq);
          continue;
        }
        DRIFTD_TRY(DecodeSegment(bytes, [&](uint32_t t, uint32_t first, uint32_t count,
                                            std::string_view values) -> Status {
          m.seg_values += count;
          const int32_t i = t < table_series_.size() ? table_series_[t] : -1;
          if (i < 0 || !info[static_cast<size_t>(i)].hot) return Ok();
          SeriesState& s = m.series[static_cast<size_t>(i)];
          if (s.edges_ready) return Ok();  // values of a warmup that is over
          if (first != s.warmup.size() || !s.warmup.Append(values, count)) {
            return MakeError(ErrorCode::kCorruption,
                             "drift series state: warmup values out of order (series '{}')",
                             name_of(static_cast<size_t>(i)));
          }
          return Ok();
        }));
      }
    }
    // New segments are numbered past any left-over one (a put and a delete of one key in a
    // batch would leave it deleted).
    if (!m.stale_segments.empty()) {
      const uint32_t top =
          *std::max_element(m.stale_segments.begin(), m.stale_segments.end()) + 1;
      if (top > m.seg_next) {
        if (m.seg_first == m.seg_next) m.seg_first = top;
        m.seg_next = top;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (info[i].hot && !s.edges_ready && s.warmup.size() != info[i].warmup) {
        return MakeError(ErrorCode::kCorruption,
                         "drift series state: warmup values are missing (series '{}')",
                         name_of(i));
      }
    }
    // 5. What follows from the rest, and the bookkeeping of what is in the store.
    for (size_t i = 0; i < n; ++i) {
      SeriesState& s = m.series[i];
      if (info[i].categorical) {
        if (s.cat) DRIFTD_TRY(CheckCategorical(s, name_of(i)));
        s.base_hash = 0;
        if (s.frozen && s.cat && pieces[i] && pieces[i]->has_base) {
          scratch_.clear();
          EncodeCategoricalBase(s, scratch_);
          s.base_hash = HashBytes(scratch_);
        }
        // The record is rewritten whole when the series next changes (cold_hash 0).
        s.cold_hash = 0;
        if (s.base_in_store && s.base_hash == 0) s.cold_dirty = true;  // a left-over base key
        if (s.warmup_blocks > 0) s.cold_dirty = true;
        s.dirty = false;
        continue;
      }
      if (!s.frozen && !s.edges_ready && !(info[i].hot && !(info[i].hot_bits & kHotBaseline))) {
        // A baseline read with the values it was made of: kept up to date from now on only if
        // it is not theirs.
        s.baseline_from_warmup = s.baseline == MomentsOf(s.warmup, edge_values_);
        if (s.baseline_from_warmup) s.baseline.Clear();
      }
      if (has_histogram_ && i < series_names_.size() && s.frozen &&
          s.eval().window_counts.empty() && !(info[i].hot_bits & kHotWindow) &&
          (info[i].v6 || info[i].hot)) {
        s.mut_eval().window_counts.assign(s.edges.bins(), 0);  // an empty window
      }
      DRIFTD_TRY(CheckHistograms(s, name_of(i)));
      s.ReleaseDefaultParts();
      // A histogram that the current configuration does not use is dropped; one it needs but
      // the state lacks is rebuilt empty (the baseline then has no reference shares).
      if (has_histogram_ && i < series_names_.size() && s.frozen &&
          s.eval().window_counts.size() != s.edges.bins()) {
        s.mut_eval().window_counts.assign(s.edges.bins(), 0);
        s.ref_counts.assign(s.edges.bins(), 0);
      }
      if (s.frozen && pieces[i] && pieces[i]->has_base &&
          (info[i].v6 || info[i].hot || info[i].base_apart)) {
        scratch_.clear();
        EncodeBase(s, scratch_);
        s.base_hash = HashBytes(scratch_);
      }
      if (info[i].legacy) {
        // Written in the current layout when the model is next written: the record, a baseline
        // key, the warmup values into a segment, the blocks deleted.
        s.cold_dirty = true;
        s.warmup_saved = 0;
        s.warmup_saved_bytes = 0;
      } else {
        scratch_.clear();
        EncodeCold(s, detector_slots_, scratch_);
        s.cold_hash = scratch_.empty() ? 0 : HashBytes(scratch_);
        if (s.cold_in_store && !info[i].v6) s.cold_dirty = true;  // a left-over record
        s.warmup_saved = s.warmup.size();
        s.warmup_saved_bytes = static_cast<uint32_t>(s.warmup.bytes().size());
      }
      if (s.base_in_store && s.base_hash == 0) s.cold_dirty = true;  // a left-over base key
      if (s.warmup_blocks > 0 && !info[i].legacy) s.cold_dirty = true;
      s.dirty = false;
    }
    return Ok();
  };

  Status st = assemble();
  if (st) return Ok();
  if (!lenient) return tl::unexpected(st.error().Wrap(fmt::format("model '{}'", m.name)));
  // The model starts afresh; its keys go with its first write.
  for (SeriesState& s : m.series) {
    s = fresh_series(s);
    s.cold_dirty = s.cold_in_store || s.base_in_store || s.warmup_blocks > 0;
  }
  m.rollup = AlertStateMachine();
  m.rollup_incident = 0;
  m.stale_segments.clear();
  uint32_t top = 0;
  if (model) {
    for (const auto& [seq, bytes] : model->segments) {
      m.stale_segments.push_back(seq);
      top = std::max(top, seq + 1);
    }
  }
  m.seg_first = m.seg_next = std::max(top, m.seg_next);
  m.seg_values = 0;
  return Ok();
}

Status DriftMonitor::FinishRestore() {
  for (auto& [name, m] : pending_) DRIFTD_TRY(CompleteModel(*m, /*lenient=*/false));
  for (auto& m : models_) {
    if (m) DRIFTD_TRY(CompleteModel(*m, /*lenient=*/false));
  }
  return Ok();
}

}  // namespace driftd
