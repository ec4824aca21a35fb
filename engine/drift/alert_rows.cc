// AlertEvent as the alerts stream's JSON rows (engine/drift/README.md shows the payload), and
// their shape (engine/row_shape.h), from which the Avro schema is derived.
#include "engine/drift/monitor_state.h"

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
#include "engine/json_writer.h"

namespace driftd {

namespace {

void AppendTime(JsonObject& obj, std::string_view key, int64_t us) {
  if (ValidTime(us)) {
    obj.Timestamp(key, us);
  } else {
    obj.Null(key);
  }
}

}  // namespace

namespace {

// "key": [{...}, ...], each object written by `write`; nothing when `items` is empty.
template <typename T, typename Write>
void ObjectArray(JsonObject& obj, std::string_view key, const std::vector<T>& items,
                 const Write& write) {
  if (items.empty()) return;
  std::string arr = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) arr.push_back(',');
    JsonObject d(arr);
    write(d, items[i]);
    d.Close();
  }
  arr.push_back(']');
  obj.Raw(key, arr);
}

}  // namespace

std::string AlertEvent::ToJson() const {
  std::string out;
  out.reserve(1024);
  JsonObject obj(out);
  obj.String("alert_id", alert_id);
  obj.String("incident_id", incident_id);
  obj.String("level", ToString(level));
  obj.String("previous_level", ToString(previous_level));
  obj.String("model", model);
  if (!segment.empty()) obj.String("segment", segment);
  obj.String("series", series);
  // Data quality (a feature arriving null, malformed records) or distribution drift: different
  // owners act on them.
  // Performance (labels: engine/executor/performance_stage.h) series are named for it.
  const bool performance = series.starts_with("performance:") || series.starts_with("estimated:");
  obj.String("kind", performance               ? "performance"
                     : IsDataQuality(series_kind) ? "data_quality"
                                                  : "drift");
  obj.String("detector", detector);
  obj.Number("statistic", statistic);
  obj.Number("threshold", threshold);
  if (series != kRollupSeries) obj.Number("score", score);
  {
    std::string w;
    JsonObject win(w);
    win.Int("start_record", window_start_record);
    win.Int("end_record", window_end_record);
    AppendTime(win, "start_time", window_start_us);
    AppendTime(win, "end_time", window_end_us);
    win.Int("n", window_n);
    // A categorical series has counts, not a mean; a rate series' mean is its rate.
    if (window_n > 0 && series_kind != SeriesKind::kCategorical) {
      win.Number("mean", window_mean);
      win.Number("stddev", window_stddev);
    }
    win.Close();
    obj.Raw("window", w);
  }
  if (series != kRollupSeries) {
    std::string b;
    JsonObject base(b);
    base.String("type", ToString(baseline_kind));
    base.Int("n", baseline_n);
    if (series_kind != SeriesKind::kCategorical) {
      base.Number("mean", baseline_mean);
      base.Number("stddev", baseline_stddev);
    }
    base.Close();
    obj.Raw("baseline", b);
  }
  if (!detectors.empty()) {
    std::string arr = "[";
    for (size_t i = 0; i < detectors.size(); ++i) {
      if (i > 0) arr.push_back(',');
      const DetectorReading& r = detectors[i];
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
      // The effect floor is stated when it held a significant reading down.
      if (r.held_from != AlertLevel::kOk) d.String("held_by_min_effect", ToString(r.held_from));
      for (const auto& [name, value] : r.extras) d.Number(name, value);
      d.Close();
    }
    arr.push_back(']');
    obj.Raw("detectors", arr);
  }
  ObjectArray(obj, "top_bins", top_bins, [](JsonObject& d, const BinChange& b) {
    d.Int("bin", b.bin);
    d.Number("lower", b.lower);
    d.Number("upper", b.upper);
    d.Number("baseline_share", b.baseline_share);
    d.Number("window_share", b.window_share);
    d.Number("psi_term", b.psi_term);
  });
  ObjectArray(obj, "top_categories", top_categories, [](JsonObject& d, const CategoryChange& c) {
    d.String("category", c.category);
    d.Number("baseline_share", c.baseline_share);
    d.Number("window_share", c.window_share);
    d.Number("psi_term", c.psi_term);
  });
  ObjectArray(obj, "new_categories", new_categories, [](JsonObject& d, const NewCategory& c) {
    d.String("category", c.category);
    d.Number("window_share", c.window_share);
  });
  if (!alerting_series.empty()) {
    std::string arr = "[";
    for (size_t i = 0; i < alerting_series.size(); ++i) {
      if (i > 0) arr.push_back(',');
      AppendJsonString(arr, alerting_series[i]);
    }
    arr.push_back(']');
    obj.Raw("alerting_series", arr);
  }
  if (!trigger_series.empty()) obj.String("trigger_series", trigger_series);
  obj.Int("batch_id", batch_id);
  obj.Close();
  return out;
}

// In step with ToJson above.
RowShape AlertRowShape() {
  using Kind = ShapeType::Kind;
  auto member = [](std::string name, Kind kind, bool nullable = false) {
    return ShapeField{std::move(name), ShapeType::Scalar(kind, nullable), {}};
  };
  ShapeType bin = ShapeType::Record(
      "BinChange", {member("bin", Kind::kLong), member("lower", Kind::kDouble, true),
                    member("upper", Kind::kDouble, true),
                    member("baseline_share", Kind::kDouble, true),
                    member("window_share", Kind::kDouble, true),
                    member("psi_term", Kind::kDouble, true)});
  ShapeType category = ShapeType::Record(
      "CategoryChange", {member("category", Kind::kString),
                         member("baseline_share", Kind::kDouble, true),
                         member("window_share", Kind::kDouble, true),
                         member("psi_term", Kind::kDouble, true)});
  ShapeType new_category = ShapeType::Record(
      "NewCategory",
      {member("category", Kind::kString), member("window_share", Kind::kDouble, true)});
  return ShapeType::Record(
      "Alert",
      {member("alert_id", Kind::kString), member("incident_id", Kind::kString),
       member("level", Kind::kString), member("previous_level", Kind::kString),
       member("model", Kind::kString), member("segment", Kind::kString, /*nullable=*/true),
       member("series", Kind::kString), member("kind", Kind::kString, /*nullable=*/true),  // a default for readers of older rows
       member("detector", Kind::kString), member("statistic", Kind::kDouble, true),
       member("threshold", Kind::kDouble, true), member("score", Kind::kDouble, true),
       {"window", EvaluationWindowShape(), {}},
       {"baseline", BaselineShape(/*nullable=*/true), {}},
       {"detectors", ShapeType::Array(DetectorReadingShape(), /*nullable=*/true), {}},
       {"top_bins", ShapeType::Array(std::move(bin), /*nullable=*/true), {}},
       {"top_categories", ShapeType::Array(std::move(category), /*nullable=*/true), {}},
       {"new_categories", ShapeType::Array(std::move(new_category), /*nullable=*/true), {}},
       {"alerting_series", ShapeType::Array(ShapeType::Scalar(Kind::kString), true), {}},
       member("trigger_series", Kind::kString, true), member("batch_id", Kind::kLong)});
}

}  // namespace driftd
