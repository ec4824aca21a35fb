#include "engine/executor/drift_stage.h"

#include <chrono>
#include <unordered_map>

#include "engine/drift/monitor.h"

namespace driftd {

namespace {

// Series layout (names after array expansion), persisted so a restart restores the monitor
// with the same series indices. Sorts before DriftMonitor's "drift/" keys in a state scan.
constexpr std::string_view kLayoutKey = "drift-layout";

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

class DriftStage::Impl {
 public:
  struct SeriesColumn {
    int column = -1;
    bool is_array = false;
    size_t first_series = 0;  // index of its first series in the monitor
    size_t width = 1;         // 1 for a scalar; array length from the layout
  };

  Status Init(const PipelineSpec& spec) {
    spec_ = spec.drift;
    schema_ = spec.schema;
    std::string model_column = spec_.model_column;
    if (model_column.empty() && !spec.query.group_by.empty()) model_column = spec.query.group_by[0];
    model_column_ = schema_.IndexOf(model_column);
    if (model_column_ < 0) {
      return MakeError(ErrorCode::kConfig,
                       "drift needs a model column: set drift.modelColumn or query.groupBy");
    }
    for (const std::string& name : spec_.series) {
      int index = schema_.IndexOf(name);
      if (index < 0) return MakeError(ErrorCode::kConfig, "drift series '{}' is not in the schema", name);
      columns_.push_back({index, schema_.fields[index].type == FieldType::kDoubleArray, 0, 1});
    }
    // Event time of a record: the window or watermark column, else the first timestamp field.
    std::string time_column;
    if (spec.query.window) time_column = spec.query.window->column;
    if (time_column.empty() && spec.query.watermark) time_column = spec.query.watermark->column;
    time_column_ = time_column.empty() ? -1 : schema_.IndexOf(time_column);
    for (size_t i = 0; time_column_ < 0 && i < schema_.fields.size(); ++i) {
      if (schema_.fields[i].type == FieldType::kTimestamp) time_column_ = static_cast<int>(i);
    }
    if (!spec_.prediction_column.empty() && !spec_.label_column.empty()) {
      prediction_column_ = schema_.IndexOf(spec_.prediction_column);
      label_column_ = schema_.IndexOf(spec_.label_column);
    }
    // The monitor is built when the first records show the array lengths; check now that it
    // can be built at all, so an unsupported drift setup fails at start, not silently later.
    auto probe = DriftMonitor::Create(spec_, {"probe"});
    if (!probe) return tl::unexpected(probe.error().Wrap("drift"));
    return Ok();
  }

  Status Restore(std::string_view key, std::string_view value) {
    if (key == kLayoutKey) {
      std::vector<size_t> widths;
      size_t start = 0;
      std::string_view text = value;
      while (start < text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string_view::npos) end = text.size();
        widths.push_back(std::stoul(std::string(text.substr(start, end - start))));
        start = end + 1;
      }
      if (widths.size() != columns_.size()) {
        return MakeError(ErrorCode::kIncompatible,
                         "the checkpoint's drift state has {} series columns, the pipeline {}",
                         widths.size(), columns_.size());
      }
      return CreateMonitor(widths);
    }
    if (!monitor_) {
      return MakeError(ErrorCode::kCorruption, "drift state entry before its layout in the checkpoint");
    }
    return monitor_->Restore(key, value);
  }

  void Observe(const RecordBatch& batch) {
    if (batch.num_rows == 0) return;
    if (!monitor_) {
      // The array lengths come from the data: the first non-null value of each array column.
      std::vector<size_t> widths;
      for (const SeriesColumn& series : columns_) {
        size_t width = 1;
        if (series.is_array) {
          width = 0;
          const Column& column = batch.columns[series.column];
          for (size_t row = 0; row < batch.num_rows && width == 0; ++row) {
            if (!column.IsNull(row)) width = column.ArraySize(row);
          }
        }
        widths.push_back(width);
      }
      // Cannot fail: Init built a monitor from the same spec.
      IgnoreError(CreateMonitor(widths));
      layout_dirty_ = true;
      if (!monitor_) return;
    }
    const Column& models = batch.columns[model_column_];
    int64_t now_us = NowUs();
    for (size_t row = 0; row < batch.num_rows; ++row) {
      if (models.IsNull(row)) continue;
      name_.clear();
      if (models.type == FieldType::kString) {
        name_.assign(models.String(row));
      } else {
        name_ = std::to_string(models.i64[row]);
      }
      uint32_t model = Intern(name_);
      int64_t event_time = now_us;
      if (time_column_ >= 0 && !batch.columns[time_column_].IsNull(row)) {
        event_time = batch.columns[time_column_].i64[row];
      }
      for (const SeriesColumn& series : columns_) {
        const Column& column = batch.columns[series.column];
        if (column.IsNull(row)) continue;
        if (!series.is_array) {
          double value = column.type == FieldType::kDouble ? column.f64[row]
                                                           : static_cast<double>(column.i64[row]);
          monitor_->Observe(model, name_, series.first_series, value, event_time);
          continue;
        }
        size_t size = std::min(column.ArraySize(row), series.width);
        const double* data = column.ArrayData(row);
        for (size_t e = 0; e < size; ++e) {
          monitor_->Observe(model, name_, series.first_series + e, data[e], event_time);
        }
      }
      if (prediction_column_ >= 0 && label_column_ >= 0) {
        const Column& prediction = batch.columns[prediction_column_];
        const Column& label = batch.columns[label_column_];
        if (!prediction.IsNull(row) && !label.IsNull(row)) {
          auto value = [&](const Column& c) {
            return c.type == FieldType::kDouble ? c.f64[row] : static_cast<double>(c.i64[row]);
          };
          monitor_->ObserveLabel(model, value(prediction), value(label), event_time);
        }
      }
    }
  }

  void Evaluate(int64_t batch_id, int64_t now_ms, OutputRows& alerts) {
    if (!monitor_) return;
    events_.clear();
    monitor_->Evaluate(batch_id, now_ms, events_);
    if (alerts.columns.empty()) {
      alerts.columns = {"alert_id", "level", "model", "series", "detector", "statistic",
                        "threshold"};
    }
    for (const AlertEvent& event : events_) alerts.Add(event.model, event.ToJson());
  }

  void CollectDirty(std::vector<std::pair<std::string, std::string>>& puts) {
    if (!monitor_) return;
    if (layout_dirty_) {
      std::string layout;
      for (size_t i = 0; i < columns_.size(); ++i) {
        if (i > 0) layout.push_back(',');
        layout += std::to_string(columns_[i].width);
      }
      puts.emplace_back(std::string(kLayoutKey), layout);
      layout_dirty_ = false;
    }
    monitor_->CollectDirty(puts);
  }

 private:
  Status CreateMonitor(const std::vector<size_t>& widths) {
    std::vector<std::string> names;
    for (size_t i = 0; i < columns_.size(); ++i) {
      SeriesColumn& series = columns_[i];
      const std::string& column = schema_.fields[series.column].name;
      series.first_series = names.size();
      series.width = widths[i];
      if (!series.is_array) {
        names.push_back(column);
        continue;
      }
      for (size_t e = 0; e < widths[i]; ++e) names.push_back(fmt::format("{}[{}]", column, e));
    }
    auto monitor = DriftMonitor::Create(spec_, std::move(names));
    if (!monitor) return tl::unexpected(monitor.error());
    monitor_ = std::move(*monitor);
    return Ok();
  }

  uint32_t Intern(const std::string& name) {
    if (name == last_name_ && last_id_ != UINT32_MAX) return last_id_;
    auto [it, inserted] = ids_.try_emplace(name, static_cast<uint32_t>(ids_.size()));
    last_name_ = name;
    last_id_ = it->second;
    return it->second;
  }

  DriftSpec spec_;
  Schema schema_;
  int model_column_ = -1;
  int time_column_ = -1;
  int prediction_column_ = -1;
  int label_column_ = -1;
  std::vector<SeriesColumn> columns_;
  std::unique_ptr<DriftMonitor> monitor_;
  bool layout_dirty_ = false;
  std::unordered_map<std::string, uint32_t> ids_;
  std::string last_name_;
  uint32_t last_id_ = UINT32_MAX;
  std::string name_;
  std::vector<AlertEvent> events_;
};

Result<std::unique_ptr<DriftStage>> DriftStage::Create(const PipelineSpec& spec) {
  auto impl = std::make_unique<Impl>();
  DRIFTD_TRY(impl->Init(spec));
  return std::unique_ptr<DriftStage>(new DriftStage(std::move(impl)));
}

DriftStage::DriftStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DriftStage::~DriftStage() = default;

bool DriftStage::OwnsKey(std::string_view key) {
  return key.substr(0, kLayoutKey.size()) == kLayoutKey ||
         key.substr(0, DriftMonitor::kStateKeyPrefix.size()) == DriftMonitor::kStateKeyPrefix;
}

Status DriftStage::Restore(std::string_view key, std::string_view value) {
  return impl_->Restore(key, value);
}
void DriftStage::Observe(const RecordBatch& batch) { impl_->Observe(batch); }
void DriftStage::Evaluate(int64_t batch_id, int64_t now_ms, OutputRows& alerts) {
  impl_->Evaluate(batch_id, now_ms, alerts);
}
void DriftStage::CollectDirty(std::vector<std::pair<std::string, std::string>>& puts) {
  impl_->CollectDirty(puts);
}

}  // namespace driftd
