// Multivariate drift in the drift stage (engine/executor/drift_stage.cc): which columns are a
// model's features, each row's vector of them, and every model's PCA state
// (engine/drift/multivariate.h). The stage gives each row's vector to its model here and the
// reconstruction error, once the model's PCA is fitted, to the series multivariate:pca, which
// the monitor judges like any numeric series; it persists the states this hands it.
//
// Lifecycle: Create when the stage is; SetWidths once the series' layout (array widths) is
// known, before any Observe or Restore. Thread-compatible: the drift stage's lane only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/batch.h"
#include "engine/drift/multivariate.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/schema.h"

namespace driftd {

class DriftMultivariate {
 public:
  /// The series the reconstruction error is a value of.
  static constexpr std::string_view kSeries = "multivariate:pca";

  /// nullptr when `spec.drift.multivariate` is off. `schema`: the query's (derived columns
  /// included); `numeric_series`: the drift series' columns watched as numbers (the default
  /// features), `array_series` those of them that are array<double> (an array feature must be
  /// one: its width is the drift layout's).
  static Result<std::unique_ptr<DriftMultivariate>> Create(const PipelineSpec& spec,
                                                           const Schema& schema,
                                                           const std::vector<int>& numeric_series,
                                                           const std::vector<int>& array_series);

  /// The array features' widths (by column index) from the series' layout; (re)creates the
  /// models' states empty.
  void SetWidths(const std::function<size_t(int column)>& width_of);

  /// Row `row`'s vector to model `model`'s state when it is complete (every feature present and
  /// finite, an array at its full width): the reconstruction error once the PCA is fitted.
  std::optional<double> Observe(const RecordBatch& batch, size_t row, uint32_t model);

  /// A persisted state of model `model`: an error if it is not one of this pipeline's features.
  Status Restore(uint32_t model, std::string_view model_name, std::string_view bytes);
  /// The states changed since the last call, by model id, encoded.
  std::vector<std::pair<uint32_t, std::string>> TakeDirty();

 private:
  struct Feature {
    int column = -1;
    FieldType type = FieldType::kDouble;
    size_t width = 1;  // array<double>: from the layout
  };
  DriftMultivariate(std::vector<Feature> features, drift::MultivariateOptions options)
      : features_(std::move(features)), options_(options) {}

  std::vector<Feature> features_;
  drift::MultivariateOptions options_;
  std::unique_ptr<drift::MultivariateModels> models_;
  std::vector<double> vector_;
};

}  // namespace driftd
