#include "engine/drift/evaluation.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <mutex>
#include <new>
#include <set>

#include <fmt/format.h>

#include "engine/drift/codec.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

// Version 2 adds each reading's score, thresholds, effect and floor; version 3 the series' kind
// (numeric, categorical, missing, malformed) at the end; version 4 the segment's label and the
// distributions compared: a varint cell count, a byte (1: categories), for bins the first lower
// edge, then per cell its category name or its upper edge (the compact decimal form) and the
// baseline's and the window's counts as varints. Version 5 is the same record in fewer bytes
// (~590 instead of ~950 at the default detectors: each series' latest evaluation is kept in
// memory and in the checkpoint this way): names and categories varint-prefixed, a reading's
// three levels in one byte, its configured levels and effect floor and its extras in the
// compact decimal form, and its extras' names left out when they are the ones its detector
// declares, in that order. Versions 1 to 4 are still read.
constexpr uint8_t kEncodingVersion = 5;

// The extras a detector declares (DetectorDefaults::extras), or null for a name no detector
// has.
const std::vector<std::string_view>* DeclaredExtras(std::string_view detector) {
  for (const DetectorDefaults& d : DetectorDefaultsTable()) {
    if (d.name == detector) return &d.extras;
  }
  return nullptr;
}

bool NamesDeclared(const DetectorReading& r) {
  const std::vector<std::string_view>* declared = DeclaredExtras(r.detector);
  if (declared == nullptr || r.extras.size() > declared->size()) return false;
  for (size_t i = 0; i < r.extras.size(); ++i) {
    if (r.extras[i].first != (*declared)[i]) return false;
  }
  return true;
}

// DetectorReading names are string_views into static storage; decoded names are looked up
// here (the known names first, anything else interned once per process).
std::string_view StaticName(std::string_view name) {
  // Every registered detector's name and extras, and the names that are not a detector's.
  static const std::vector<std::string_view> known = [] {
    std::vector<std::string_view> out = {"rollup", "kind", "effect"};
    for (const DetectorDefaults& detector : DetectorDefaultsTable()) {
      out.push_back(detector.name);
      out.insert(out.end(), detector.extras.begin(), detector.extras.end());
    }
    return out;
  }();
  for (std::string_view k : known) {
    if (k == name) return k;
  }
  static std::mutex mutex;
  static std::set<std::string, std::less<>> interned;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = interned.find(name);
  if (it == interned.end()) it = interned.emplace(name).first;
  return *it;
}

void AppendTime(JsonObject& obj, std::string_view key, int64_t us) {
  if (us != INT64_MIN) {
    obj.Timestamp(key, us);
  } else {
    obj.Null(key);
  }
}

}  // namespace

std::string_view LevelLabel(AlertLevel level) {
  switch (level) {
    case AlertLevel::kOk: return "ok";
    case AlertLevel::kWarn: return "warn";
    case AlertLevel::kAlert: return "alert";
    case AlertLevel::kResolved: return "resolved";
  }
  return "ok";
}

std::string EvaluationId(const Evaluation& e) {
  uint64_t h = 1469598103934665603ull;
  const std::string start = std::to_string(e.window_start_record);
  auto add = [&h](std::string_view part) {
    for (char c : part) {
      h ^= static_cast<uint8_t>(c);
      h *= 1099511628211ull;
    }
    h ^= 0x1f;
    h *= 1099511628211ull;
  };
  add(e.model);
  // Only with segments, so that ids without them are what they always were.
  if (!e.segment.empty()) add(e.segment);
  for (std::string_view part : {std::string_view(e.series), std::string_view("evaluation"),
                                std::string_view(start)}) {
    add(part);
  }
  return fmt::format("{:016x}", h);
}

std::string EvaluationToJson(const Evaluation& e) {
  std::string out;
  out.reserve(768);
  JsonObject obj(out);
  obj.String("evaluation_id", EvaluationId(e));
  obj.String("model", e.model);
  if (!e.segment.empty()) obj.String("segment", e.segment);
  obj.String("series", e.series);
  obj.String("kind", IsDataQuality(e.series_kind) ? "data_quality" : "drift");
  obj.Bool("evaluated", e.evaluated);
  obj.String("level", ToString(e.level));
  obj.String("previous_level", ToString(e.previous_level));
  {
    std::string w;
    JsonObject win(w);
    win.Int("start_record", e.window_start_record);
    win.Int("end_record", e.window_end_record);
    AppendTime(win, "start_time", e.window_start_us);
    AppendTime(win, "end_time", e.window_end_us);
    win.Int("n", e.window_n);
    if (e.window_n > 0 && e.series_kind != SeriesKind::kCategorical) {
      win.Number("mean", e.window_mean);
      win.Number("stddev", e.window_stddev);
    }
    win.Close();
    obj.Raw("window", w);
  }
  {
    std::string b;
    JsonObject base(b);
    base.String("type", ToString(e.baseline_kind));
    base.Int("n", e.baseline_n);
    if (e.baseline_n > 0 && e.series_kind != SeriesKind::kCategorical) {
      base.Number("mean", e.baseline_mean);
      base.Number("stddev", e.baseline_stddev);
    }
    base.Close();
    obj.Raw("baseline", b);
  }
  std::string arr = "[";
  for (size_t i = 0; i < e.detectors.size(); ++i) {
    if (i > 0) arr.push_back(',');
    const DetectorReading& r = e.detectors[i];
    JsonObject d(arr);
    d.String("detector", r.detector);
    d.Number("statistic", r.statistic);
    d.Number("score", r.score);
    d.Number("warn", r.warn);
    d.Number("alert", r.alert);
    d.Number("warn_threshold", r.warn_threshold);
    d.Number("alert_threshold", r.alert_threshold);
    d.Number("effect", r.effect);
    d.Number("min_effect", r.min_effect);
    d.String("level", ToString(r.level));
    if (r.held_from != AlertLevel::kOk) d.String("held_by_min_effect", ToString(r.held_from));
    for (const auto& [name, value] : r.extras) d.Number(name, value);
    d.Close();
  }
  arr.push_back(']');
  obj.Raw("detectors", arr);
  obj.Int("batch_id", e.batch_id);
  obj.Close();
  return out;
}

// ---- shapes, in step with EvaluationToJson and AlertEvent::ToJson ----------------------------

namespace {

ShapeField Member(std::string name, ShapeType::Kind kind, bool nullable = false) {
  return {std::move(name), ShapeType::Scalar(kind, nullable), {}};
}

}  // namespace

ShapeType EvaluationWindowShape() {
  using Kind = ShapeType::Kind;
  return ShapeType::Record("Window", {Member("start_record", Kind::kLong),
                                      Member("end_record", Kind::kLong),
                                      Member("start_time", Kind::kTimestamp, true),
                                      Member("end_time", Kind::kTimestamp, true),
                                      Member("n", Kind::kLong),
                                      Member("mean", Kind::kDouble, true),
                                      Member("stddev", Kind::kDouble, true)});
}

ShapeType BaselineShape(bool nullable) {
  using Kind = ShapeType::Kind;
  // Mean and stddev are left out when n is 0 (evaluations), and a number that is not finite
  // is written as null.
  return ShapeType::Record("Baseline",
                           {Member("type", Kind::kString), Member("n", Kind::kLong),
                            Member("mean", Kind::kDouble, true),
                            Member("stddev", Kind::kDouble, true)},
                           nullable);
}

ShapeType DetectorReadingShape() {
  using Kind = ShapeType::Kind;
  std::vector<ShapeField> fields = {
      Member("detector", Kind::kString),         Member("statistic", Kind::kDouble, true),
      Member("score", Kind::kDouble, true),      Member("warn", Kind::kDouble, true),
      Member("alert", Kind::kDouble, true),      Member("warn_threshold", Kind::kDouble, true),
      Member("alert_threshold", Kind::kDouble, true),
      Member("effect", Kind::kDouble, true),     Member("min_effect", Kind::kDouble, true),
      Member("level", Kind::kString),            Member("held_by_min_effect", Kind::kString, true),
  };
  // Every detector's extras, once each, in table order.
  for (const DetectorDefaults& detector : DetectorDefaultsTable()) {
    for (std::string_view extra : detector.extras) {
      const bool known = std::any_of(fields.begin(), fields.end(),
                                     [&](const ShapeField& f) { return f.name == extra; });
      if (!known) fields.push_back(Member(std::string(extra), Kind::kDouble, true));
    }
  }
  return ShapeType::Record("DetectorReading", std::move(fields));
}

RowShape EvaluationRowShape() {
  using Kind = ShapeType::Kind;
  return ShapeType::Record(
      "Evaluation",
      {Member("evaluation_id", Kind::kString), Member("model", Kind::kString),
       Member("segment", Kind::kString, true), Member("series", Kind::kString),
       Member("kind", Kind::kString, true),
       Member("evaluated", Kind::kBoolean),
       Member("level", Kind::kString), Member("previous_level", Kind::kString),
       {"window", EvaluationWindowShape(), {}},
       {"baseline", BaselineShape(/*nullable=*/false), {}},
       {"detectors", ShapeType::Array(DetectorReadingShape()), {}},
       Member("batch_id", Kind::kLong)});
}

std::string EncodeEvaluation(const Evaluation& e, bool with_distribution, size_t* batch_id_at) {
  std::string out;
  drift::ByteWriter w(out);
  w.U8(kEncodingVersion);
  w.Bytes(e.model);
  w.Bytes(e.series);
  w.U8(e.evaluated ? 1 : 0);
  w.U8(static_cast<uint8_t>(e.previous_level));
  w.U8(static_cast<uint8_t>(e.level));
  w.I64(e.window_start_record);
  w.I64(e.window_end_record);
  w.I64(e.window_start_us);
  w.I64(e.window_end_us);
  w.I64(e.window_n);
  w.F64(e.window_mean);
  w.F64(e.window_stddev);
  w.U8(static_cast<uint8_t>(e.baseline_kind));
  w.I64(e.baseline_n);
  w.F64(e.baseline_mean);
  w.F64(e.baseline_stddev);
  if (batch_id_at != nullptr) *batch_id_at = out.size();
  w.I64(e.batch_id);
  w.Varint(e.detectors.size());
  int hint = 0;
  for (const DetectorReading& r : e.detectors) {
    w.Bytes(r.detector);
    w.U8(static_cast<uint8_t>(static_cast<uint8_t>(r.level) |
                              static_cast<uint8_t>(r.held_from) << 2 |
                              static_cast<uint8_t>(r.window_level) << 4));
    w.F64(r.statistic);
    w.F64(r.score);
    w.F64(r.warn_threshold);
    w.F64(r.alert_threshold);
    w.F64(r.effect);
    w.Decimal(r.warn, hint);
    w.Decimal(r.alert, hint);
    w.Decimal(r.min_effect, hint);
    w.Varint(r.extras.size());
    const bool declared = NamesDeclared(r);
    w.U8(declared ? 1 : 0);
    for (const auto& [name, value] : r.extras) {
      if (!declared) w.Bytes(name);
      w.Decimal(value, hint);
    }
  }
  w.U8(static_cast<uint8_t>(e.series_kind));
  w.Bytes(e.segment);
  const bool categories = e.series_kind == SeriesKind::kCategorical;
  const size_t cells = with_distribution ? e.distribution.size() : 0;
  w.Varint(cells);
  w.U8(categories ? 1 : 0);
  // A histogram's bins are contiguous: the first lower edge, then each bin's upper one.
  if (!categories && cells > 0) w.Decimal(e.distribution_lower, hint);
  for (size_t i = 0; i < cells; ++i) {
    const DistributionCell& cell = e.distribution[i];
    if (categories) {
      w.Bytes(e.category(i));
    } else {
      w.Decimal(cell.upper, hint);
    }
    w.Varint(static_cast<uint64_t>(std::max<int64_t>(cell.baseline, 0)));
    w.Varint(static_cast<uint64_t>(std::max<int64_t>(cell.window, 0)));
  }
  return out;
}

Result<Evaluation> DecodeEvaluation(std::string_view bytes) {
  drift::ByteReader r(bytes);
  auto corrupt = [&](std::string_view what) {
    return MakeError(ErrorCode::kCorruption, "drift evaluation: {} ({} bytes)", what,
                     bytes.size());
  };
  auto level = [&](uint8_t v, AlertLevel& out) {
    if (v > static_cast<uint8_t>(AlertLevel::kResolved)) return false;
    out = static_cast<AlertLevel>(v);
    return true;
  };
  const uint8_t version = r.U8();
  if (version < 1 || version > kEncodingVersion) return corrupt("unknown version");
  const bool compact = version >= 5;
  // Names and categories: u32-prefixed before version 5, varint-prefixed since.
  auto name = [&] { return compact ? r.Bytes() : r.Str(); };
  Evaluation e;
  e.model = std::string(name());
  e.series = std::string(name());
  e.evaluated = r.U8() != 0;
  if (!level(r.U8(), e.previous_level) || !level(r.U8(), e.level)) return corrupt("bad level");
  e.window_start_record = r.I64();
  e.window_end_record = r.I64();
  e.window_start_us = r.I64();
  e.window_end_us = r.I64();
  e.window_n = r.I64();
  e.window_mean = r.F64();
  e.window_stddev = r.F64();
  const uint8_t kind = r.U8();
  if (kind > static_cast<uint8_t>(BaselineKind::kSeasonal)) return corrupt("bad baseline kind");
  e.baseline_kind = static_cast<BaselineKind>(kind);
  e.baseline_n = r.I64();
  e.baseline_mean = r.F64();
  e.baseline_stddev = r.F64();
  e.batch_id = r.I64();
  const uint64_t detectors = compact ? r.Varint() : r.U32();
  if (detectors > 64 || r.failed()) return corrupt("bad detector count");
  e.detectors.reserve(static_cast<size_t>(detectors));
  for (uint64_t i = 0; i < detectors; ++i) {
    DetectorReading reading;
    reading.detector = StaticName(name());
    if (compact) {
      const uint8_t levels = r.U8();
      if (levels >> 6 != 0 || !level(levels & 3, reading.level) ||
          !level(levels >> 2 & 3, reading.held_from) ||
          !level(levels >> 4 & 3, reading.window_level)) {
        return corrupt("bad detector level");
      }
      reading.statistic = r.F64();
      reading.score = r.F64();
      reading.warn_threshold = r.F64();
      reading.alert_threshold = r.F64();
      reading.effect = r.F64();
      reading.warn = r.Decimal();
      reading.alert = r.Decimal();
      reading.min_effect = r.Decimal();
    } else {
      reading.statistic = r.F64();
      reading.warn = r.F64();
      reading.alert = r.F64();
      if (!level(r.U8(), reading.level)) return corrupt("bad detector level");
      if (version >= 2) {
        reading.score = r.F64();
        reading.warn_threshold = r.F64();
        reading.alert_threshold = r.F64();
        reading.effect = r.F64();
        reading.min_effect = r.F64();
        if (!level(r.U8(), reading.held_from) || !level(r.U8(), reading.window_level)) {
          return corrupt("bad detector level");
        }
      }
    }
    const uint64_t extras = compact ? r.Varint() : r.U32();
    // Since version 5 an extra's name is left out when it is the one its detector declares.
    const bool declared = compact && r.U8() != 0;
    if (extras > 64 || r.failed()) return corrupt("bad extras");
    const std::vector<std::string_view>* names =
        declared ? DeclaredExtras(reading.detector) : nullptr;
    if (declared && (names == nullptr || extras > names->size())) {
      return corrupt("extras the detector does not declare");
    }
    reading.extras.reserve(static_cast<size_t>(extras));
    for (uint64_t x = 0; x < extras; ++x) {
      const std::string_view extra = declared ? (*names)[x] : StaticName(name());
      reading.extras.emplace_back(extra, compact ? r.Decimal() : r.F64());
    }
    e.detectors.push_back(std::move(reading));
  }
  if (version >= 3) {
    const uint8_t series_kind = r.U8();
    if (series_kind >= kSeriesKinds) return corrupt("bad series kind");
    e.series_kind = static_cast<SeriesKind>(series_kind);
  }
  if (version >= 4) {
    e.segment = std::string(name());
    const uint64_t cells = r.Varint();
    const bool categories = r.U8() != 0;
    if (r.failed() || cells > r.remaining()) return corrupt("bad distribution");
    e.distribution.resize(static_cast<size_t>(cells));
    if (categories) e.categories.resize(static_cast<size_t>(cells));
    if (!categories && cells > 0) e.distribution_lower = r.Decimal();
    for (size_t i = 0; i < e.distribution.size(); ++i) {
      DistributionCell& cell = e.distribution[i];
      if (categories) {
        e.categories[i] = std::string(name());
      } else {
        cell.upper = r.Decimal();
      }
      cell.baseline = static_cast<int64_t>(r.Varint());
      cell.window = static_cast<int64_t>(r.Varint());
    }
  }
  if (r.failed() || !r.at_end()) return corrupt("trailing or missing bytes");
  return e;
}

namespace {

double MaxScore(const Evaluation& evaluation) {
  double score = -std::numeric_limits<double>::infinity();
  for (const DetectorReading& r : evaluation.detectors) {
    if (!std::isnan(r.score)) score = std::max(score, r.score);
  }
  return score;
}

}  // namespace

PackedEvaluation::PackedEvaluation(const Evaluation& evaluation) {
  size_t batch_id_at = 0;
  const std::string bytes = EncodeEvaluation(evaluation, /*with_distribution=*/true, &batch_id_at);
  const std::array<std::string_view, 4> parts = {bytes, evaluation.model, evaluation.segment,
                                                 evaluation.series};
  Header header;
  size_t size = sizeof(Header);
  for (size_t i = 0; i < parts.size(); ++i) {
    header.sizes[i] = static_cast<uint32_t>(parts[i].size());
    size += parts[i].size();
  }
  header.max_score = MaxScore(evaluation);
  header.batch_id_at = static_cast<uint32_t>(batch_id_at);
  header.level = evaluation.level;
  header.evaluated = evaluation.evaluated;
  static_assert(alignof(Header) <= alignof(uint64_t));
  data_ = std::make_shared_for_overwrite<uint64_t[]>((size + 7) / 8);
  new (data_.get()) Header(header);
  char* at = chars();
  for (std::string_view part : parts) {
    std::copy(part.begin(), part.end(), at);
    at += part.size();
  }
}

Result<PackedEvaluation> PackedEvaluation::FromBytes(std::string bytes, std::string_view model,
                                                     std::string_view segment) {
  auto evaluation = DecodeEvaluation(bytes);
  if (!evaluation) return tl::unexpected(evaluation.error());
  evaluation->model = std::string(model);
  evaluation->segment = std::string(segment);
  return PackedEvaluation(*evaluation);
}

SharedEvaluation PackedEvaluation::Unpack() const {
  if (!data_) return std::make_shared<const Evaluation>();
  auto evaluation = DecodeEvaluation(bytes());
  // The bytes were written by EncodeEvaluation here.
  assert(evaluation.has_value());
  if (!evaluation) return std::make_shared<const Evaluation>();
  return std::make_shared<const Evaluation>(std::move(*evaluation));
}

std::string_view PackedEvaluation::Part(int index) const {
  if (!data_) return {};
  const Header& h = header();
  size_t at = 0;
  for (int i = 0; i < index; ++i) at += h.sizes[i];
  return std::string_view(chars() + at, h.sizes[index]);
}

std::string_view PackedEvaluation::bytes() const { return Part(0); }

double PackedEvaluation::max_score() const {
  return data_ ? header().max_score : -std::numeric_limits<double>::infinity();
}

void PackedEvaluation::SetBatchId(int64_t batch_id) {
  if (!data_) return;
  assert(data_.use_count() == 1);
  const auto v = static_cast<uint64_t>(batch_id);
  char* at = chars() + header().batch_id_at;
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace driftd
