// Evaluations (engine/drift/monitor.h's Evaluation) as the evaluations stream's JSON rows and as
// persisted bytes: the drift stage keeps each (model, series)'s last evaluation in the
// checkpoint so the drift gauges survive a restart.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/drift/monitor.h"
#include "engine/result.h"
#include "engine/row_shape.h"

namespace driftd {

/// 16 hex digits, FNV-1a of model, series and the window's first record: the same window
/// gets the same id after a replay, so consumers can de-duplicate.
std::string EvaluationId(const Evaluation& evaluation);

/// One JSON object, no trailing newline (engine/drift/README.md shows the fields).
std::string EvaluationToJson(const Evaluation& evaluation);

/// The shape of EvaluationToJson's rows (engine/row_shape.h), the evaluations stream's.
RowShape EvaluationRowShape();

/// Parts of the alert and evaluation rows' shapes, which render them alike: the `window` and
/// `baseline` objects and one `detectors[]` reading, with every detector's extras
/// (DetectorDefaults::extras) as nullable numbers.
ShapeType EvaluationWindowShape();
ShapeType BaselineShape(bool nullable);
ShapeType DetectorReadingShape();

/// Versioned little-endian bytes (engine/drift/codec.h); `with_distribution` false leaves the
/// distribution out (a point of a series' history). `batch_id_at`, when given, is set to where
/// the bytes hold the batch id (8 bytes, little-endian).
std::string EncodeEvaluation(const Evaluation& evaluation, bool with_distribution = true,
                             size_t* batch_id_at = nullptr);
/// kCorruption on truncated or malformed bytes. Detector names map back to the static names.
Result<Evaluation> DecodeEvaluation(std::string_view bytes);

/// Lower-case level for metric labels: "ok", "warn", "alert", "resolved".
std::string_view LevelLabel(AlertLevel level);

}  // namespace driftd
