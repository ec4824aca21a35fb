#include "engine/executor/drift_multivariate.h"

#include <algorithm>
#include <cmath>

namespace driftd {

Result<std::unique_ptr<DriftMultivariate>> DriftMultivariate::Create(
    const PipelineSpec& spec, const Schema& schema, const std::vector<int>& numeric_series,
    const std::vector<int>& array_series) {
  const MultivariateSpec& mv = spec.drift.multivariate;
  if (!mv.enabled) return std::unique_ptr<DriftMultivariate>();
  std::vector<int> columns;
  for (const std::string& name : mv.features) {
    const int index = schema.IndexOf(name);
    if (index < 0) {
      return MakeError(ErrorCode::kConfig, "drift.multivariate: feature '{}' is not a column",
                       name);
    }
    columns.push_back(index);
  }
  if (mv.features.empty()) columns = numeric_series;
  std::vector<Feature> features;
  bool arrays = false;
  for (int index : columns) {
    const Field& field = schema.fields[static_cast<size_t>(index)];
    if (field.type == FieldType::kDoubleArray) {
      if (std::find(array_series.begin(), array_series.end(), index) == array_series.end()) {
        return MakeError(ErrorCode::kConfig,
                         "drift.multivariate: the array feature '{}' must be a drift series "
                         "too (its width comes from drift's layout)",
                         field.name);
      }
      arrays = true;
    } else if (!IsNumeric(field.type)) {
      return MakeError(ErrorCode::kConfig,
                       "drift.multivariate: feature '{}' is a {}, not a number", field.name,
                       FieldTypeName(field.type));
    }
    features.push_back({index, field.type, 1});
  }
  if (features.size() < 2 && !arrays) {
    return MakeError(ErrorCode::kConfig,
                     "drift.multivariate needs at least two numeric features (found {}): list "
                     "them in drift.multivariate.features or as drift series",
                     features.size());
  }
  drift::MultivariateOptions options;
  options.records = mv.records;
  options.explained_variance = mv.explained_variance;
  return std::unique_ptr<DriftMultivariate>(new DriftMultivariate(std::move(features), options));
}

void DriftMultivariate::SetWidths(const std::function<size_t(int column)>& width_of) {
  size_t dimensions = 0;
  for (Feature& feature : features_) {
    feature.width = feature.type == FieldType::kDoubleArray ? width_of(feature.column) : 1;
    dimensions += feature.width;
  }
  models_ = std::make_unique<drift::MultivariateModels>(dimensions, options_);
  vector_.assign(dimensions, 0.0);
}

std::optional<double> DriftMultivariate::Observe(const RecordBatch& batch, size_t row,
                                                 uint32_t model) {
  size_t at = 0;
  for (const Feature& feature : features_) {
    const Column& column = batch.columns[static_cast<size_t>(feature.column)];
    if (column.IsNull(row)) return std::nullopt;
    switch (feature.type) {
      case FieldType::kDouble: vector_[at++] = column.f64[row]; break;
      case FieldType::kDoubleArray: {
        if (column.ArraySize(row) < feature.width) return std::nullopt;
        const double* data = column.ArrayData(row);
        for (size_t e = 0; e < feature.width; ++e) vector_[at++] = data[e];
        break;
      }
      default: vector_[at++] = static_cast<double>(column.i64[row]); break;
    }
  }
  for (double x : vector_) {
    if (!std::isfinite(x)) return std::nullopt;
  }
  return models_->Add(model, vector_);
}

Status DriftMultivariate::Restore(uint32_t model, std::string_view model_name,
                                  std::string_view bytes) {
  if (!models_) {
    return MakeError(ErrorCode::kCorruption,
                     "drift: multivariate state before the series layout in the checkpoint");
  }
  if (!models_->Restore(model, bytes)) {
    return MakeError(ErrorCode::kIncompatible,
                     "the checkpoint's multivariate drift state of model '{}' is not one of the "
                     "pipeline's {} features (drift.multivariate.features changed?): start a "
                     "new checkpoint",
                     model_name, models_->dimensions());
  }
  return Ok();
}

std::vector<std::pair<uint32_t, std::string>> DriftMultivariate::TakeDirty() {
  return models_ ? models_->TakeDirty() : std::vector<std::pair<uint32_t, std::string>>{};
}

}  // namespace driftd
