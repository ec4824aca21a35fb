#include "engine/executor/drift_stage.h"

#include <optional>

#include "engine/executor/drift_stage_impl.h"

namespace driftd {

Status DriftStage::Impl::Init(const PipelineSpec& spec, std::shared_ptr<KeyInterner> keys) {
  spec_ = spec.drift;
  for (const SinkSpec& sink : spec.sinks) {
    if (sink.stream == StreamKind::kEvaluations) want_evaluation_rows_ = true;
  }
  // Series may be derived columns: the stage reads the query's columns; reference records
  // are decoded by the declared schema and projected (and filtered) as input rows are.
  schema_ = QuerySchema(spec);
  input_schema_ = spec.schema;
  metadata_columns_ = spec.query.metadata;
  auto projection = Projection::Create(spec);
  if (!projection) return tl::unexpected(projection.error());
  projection_ = std::move(*projection);
  max_array_length_ = spec.source.malformed.max_array_length;
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
    SeriesColumn column;
    column.column = index;
    column.type = schema_.fields[index].type;
    column.is_array = column.type == FieldType::kDoubleArray;
    column.is_map = IsMap(column.type);
    // A boolean is categorical with two values ("true", "false"), as a JSON stream and a
    // reference file spell them.
    column.kind = column.type == FieldType::kString || column.type == FieldType::kStringArray ||
                          column.type == FieldType::kStringMap ||
                          column.type == FieldType::kBoolean
                      ? SeriesKind::kCategorical
                      : SeriesKind::kNumeric;
    if (column.is_map) {
      column.width = 0;
      key_slots_.emplace_back();
      key_slots_.back().column = columns_.size();
    }
    columns_.push_back(std::move(column));
  }
  for (const std::string& name : spec_.segment_by) {
    const int index = schema_.IndexOf(name);
    if (index < 0) {
      return MakeError(ErrorCode::kConfig, "drift segment column '{}' is not a column", name);
    }
    segment_columns_.push_back(index);
  }
  active_segments_ = spec_.segment_by;
  DRIFTD_TRY(InitMultivariate(spec));  // [multivariate]
  if (!segment_columns_.empty() && spec_.baseline.kind == BaselineKind::kFile) {
    return MakeError(ErrorCode::kConfig,
                     "drift.baseline type file holds statistics per model, but drift is per "
                     "(model, segment) ({}): use a warmup baseline, or set drift.segmentBy: []",
                     fmt::join(spec_.segment_by, ", "));
  }
  // Per model without segments, a row's model is the query's model id, shared with the
  // aggregation (one lookup per row for both).
  if (keys && segment_columns_.empty() && keys->column() == model_column_ &&
      schema_.fields[static_cast<size_t>(model_column_)].type == FieldType::kString) {
    model_keys_ = std::move(keys);
  }
  // Data-quality series exist when a detector watches them (every kind when drift.detectors
  // is not given), and only where they can see something: a non-nullable column is never
  // null in a row (a record without it is malformed), and only the permissive policy keeps
  // malformed records as rows (a row's flag crosses a scaled-out query's repartition topic
  // with it: engine/executor/row_block.h).
  const std::vector<DetectorSpec> detectors =
      spec_.detectors.empty() ? DefaultDetectorSpecs() : spec_.detectors;
  for (const DetectorSpec& detector : detectors) {
    const DetectorDefaults& defaults = DefaultsFor(detector.kind);
    if (defaults.Watches(SeriesKind::kMissing)) watch_missing_ = true;
    if (defaults.Watches(SeriesKind::kMalformed)) {
      watch_malformed_ = spec.source.malformed.policy == MalformedPolicy::kPermissive;
    }
  }
  // Event time of a record: the window or watermark column, else the first timestamp field.
  std::string time_column;
  if (spec.query.window) time_column = spec.query.window->column;
  if (time_column.empty() && spec.query.watermark) time_column = spec.query.watermark->column;
  time_column_ = time_column.empty() ? -1 : schema_.IndexOf(time_column);
  for (size_t i = 0; time_column_ < 0 && i < schema_.fields.size(); ++i) {
    if (schema_.fields[i].type == FieldType::kTimestamp) time_column_ = static_cast<int>(i);
  }
  // Only a source whose partitions are read in no fixed order (Kafka) needs it.
  // (Not when values come in event-time order: engine/executor/order_buffer.h.)
  track_partitions_ = spec.source.traits.unordered_partitions && !spec.query.window &&
                      spec_.window_ms == 0 && !DriftOrdersByEventTime(spec);
  if (!spec_.prediction_column.empty() && !spec_.label_column.empty()) {
    prediction_column_ = schema_.IndexOf(spec_.prediction_column);
    label_column_ = schema_.IndexOf(spec_.label_column);
  }
  if (spec.query.window) {
    if (spec.query.window->slide_ms != 0 &&
        spec.query.window->slide_ms != spec.query.window->size_ms) {
      return MakeError(ErrorCode::kConfig,
                       "drift evaluates tumbling event-time windows, but query.window slides "
                       "({} ms every {} ms): make slide equal to size, or drop the window "
                       "to evaluate windows of drift.windowRecords values",
                       spec.query.window->size_ms, spec.query.window->slide_ms);
    }
    window_ms_ = spec.query.window->size_ms;
  }
  if (spec_.window_ms > 0) window_ms_ = spec_.window_ms;
  // The monitor is built when the first records show the array lengths; check now that it
  // can be built at all, so an unsupported drift setup fails at start, not silently later.
  auto probe = DriftMonitor::Create(spec_, {"probe"});
  if (!probe) return tl::unexpected(probe.error().Wrap("drift"));
  return Ok();
}

Status DriftStage::Impl::LoadBaseline() {
  if (spec_.baseline.kind != BaselineKind::kFile) return Ok();
  // config/ read the file when the pipeline loaded (LoadOptions::read_references): what is
  // parsed here is what `validate` parsed.
  if (!spec_.baseline.reference) {
    return MakeError(ErrorCode::kConfig,
                     "drift.baseline.path '{}': the reference file was not read with the "
                     "pipeline (load it with config/'s LoadOptions::read_references)",
                     spec_.baseline.path);
  }
  Status loaded = LoadReference(*spec_.baseline.reference);
  if (!loaded) {
    return tl::unexpected(
        loaded.error().Wrap(fmt::format("drift.baseline.path '{}'", spec_.baseline.path)));
  }
  return Ok();
}

Status DriftStage::Impl::Restore(std::string_view key, std::string_view value) {
  if (key.starts_with(kEvaluationPrefix)) {
    // The key names the model as the monitor knows it (with its segment, if any), and the
    // series.
    std::string_view rest = key.substr(kEvaluationPrefix.size());
    const size_t slash = rest.find('/');
    auto monitor_name = UnescapeKeyPart(rest.substr(0, slash));
    if (!monitor_name) return tl::unexpected(monitor_name.error().Wrap(std::string(key)));
    auto series = slash == std::string_view::npos
                      ? Result<std::string>(MakeError(ErrorCode::kCorruption, "no series"))
                      : UnescapeKeyPart(rest.substr(slash + 1));
    if (!series) return tl::unexpected(series.error().Wrap(std::string(key)));
    std::string model;
    std::string segment;
    Name(*monitor_name, &model, &segment);
    auto evaluation = PackedEvaluation::FromBytes(std::string(value), model, segment);
    if (!evaluation) return tl::unexpected(evaluation.error().Wrap(std::string(key)));
    Latest& latest = latest_[std::make_pair(std::move(*monitor_name), std::move(*series))];
    latest.saved = true;
    latest.saved_level = evaluation->level();
    latest.saved_evaluated = evaluation->evaluated();
    latest.evaluation = std::move(*evaluation);
    return Ok();
  }
  if (key.starts_with(kMultivariatePrefix)) return RestoreMultivariate(key, value);
  if (key.starts_with(kAdmitPrefix)) {
    // Applied in FinishRestore, once the layout (which may come later) is known.
    restored_admits_.emplace_back(std::string(key.substr(kAdmitPrefix.size())),
                                  std::string(value));
    return Ok();
  }
  if (key == kLayoutKey) {
    auto layout = ParseLayout(value);
    if (!layout) return tl::unexpected(layout.error());
    DRIFTD_TRY(SegmentsOf(*layout));
    if (monitor_) {
      // Built from the reference file: the checkpoint must agree with its layout.
      for (size_t i = 0; i < layout->widths.size(); ++i) {
        if (!columns_[i].is_map && layout->widths[i] != columns_[i].width) {
          return MakeError(ErrorCode::kIncompatible,
                           "the checkpoint's drift state has {} elements of '{}', the "
                           "reference file {}",
                           layout->widths[i], schema_.fields[columns_[i].column].name,
                           columns_[i].width);
        }
        for (const std::string& name : layout->keys[i]) {
          if (KeyId(i, name) == kNoKey) WatchKey(i, name);
        }
      }
      layout_dirty_ = !layout->versioned;
      return Ok();
    }
    DRIFTD_TRY(CreateMonitor(*layout));
    layout_dirty_ = !layout->versioned;  // rewritten in the current version
    return Ok();
  }
  if (key == kClockKey) {
    const size_t comma = value.find(',');
    auto parse = [](std::string_view text, int64_t& out) {
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
      return ec == std::errc() && end == text.data() + text.size();
    };
    if (comma == std::string_view::npos || !parse(value.substr(0, comma), restored_max_us_) ||
        !parse(value.substr(comma + 1), restored_watermark_us_)) {
      return MakeError(ErrorCode::kCorruption, "drift: bad watermark entry '{}'", value);
    }
    if (monitor_) monitor_->RestoreClock(restored_max_us_, restored_watermark_us_);
    return Ok();
  }
  if (!monitor_) {
    return MakeError(ErrorCode::kCorruption, "drift state entry before its layout in the checkpoint");
  }
  return monitor_->Restore(key, value);
}

void DriftStage::Impl::EvaluateShard(const BatchContext& context) {
  records_fed_ = 0;
  events_.clear();
  packed_.clear();
  event_keys_.clear();
  evaluation_keys_.clear();
  if (!monitor_) return;
  std::vector<DriftMonitor::PackedRecord> evaluations;
  // Windows close by the watermark this batch's rows move the clock to: every row of a
  // window closed now was read (rows still to come for it are late by their own partition's
  // watermark), so closing now rather than one batch later changes nothing but latency.
  monitor_->AdvanceWatermark(context.next_watermark_us);
  monitor_->Evaluate(context.batch_id, context.now_ms, events_, evaluations);
  if (keep_merge_keys_) {
    auto keys = [](const std::vector<uint64_t>& records, auto&& model_of, size_t count,
                   std::vector<MergeKey>& out) {
      out.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        const uint64_t record = i < records.size() ? records[i] : DriftMonitor::kClosedWindow;
        out.push_back({record, record == DriftMonitor::kClosedWindow ? model_of(i) : ""});
      }
    };
    keys(monitor_->last_event_records(), [&](size_t i) { return events_[i].model; },
         events_.size(), event_keys_);
    keys(monitor_->last_evaluation_records(), [&](size_t i) { return evaluations[i].model; },
         evaluations.size(), evaluation_keys_);
  }
  // The monitor knows a segment's model as "<model>\x1f<value>...": events name the model
  // and the segment apart (evaluations were named so when packed: PackEvaluations).
  for (AlertEvent& event : events_) {
    const std::string monitor_name = event.model;
    Name(monitor_name, &event.model, &event.segment);
  }
  packed_.reserve(evaluations.size());
  for (DriftMonitor::PackedRecord& record : evaluations) {
    std::pair<std::string, std::string> key(std::move(record.model), record.evaluation.series());
    auto latest = latest_.try_emplace(std::move(key)).first;
    latest->second.evaluation = record.evaluation;
    packed_.push_back(std::move(record.evaluation));
    dirty_evaluations_.push_back(latest);
  }
}

void DriftStage::Impl::Render(std::span<const AlertEvent> events,
                              std::span<const PackedEvaluation> evaluations, OutputRows& alerts,
                              OutputRows* rows) const {
  if (alerts.columns.empty()) {
    alerts.columns = {"alert_id", "level", "model", "series", "detector", "statistic",
                      "threshold"};
  }
  for (const AlertEvent& event : events) alerts.Add(event.model, event.ToJson());
  if (rows != nullptr && want_evaluation_rows_) {
    if (rows->columns.empty()) {
      rows->columns = {"evaluation_id", "model", "series", "level", "evaluated", "window",
                       "detectors"};
    }
    for (const PackedEvaluation& evaluation : evaluations) {
      rows->Add(std::string(evaluation.model()), EvaluationToJson(*evaluation.Unpack()));
    }
  }
}

void DriftStage::Impl::CollectEvaluations(int64_t now_ms, bool all, StatePuts& puts) {
  auto save = [&](LatestMap::iterator it) {
    Latest& latest = it->second;
    puts.emplace_back(fmt::format("{}{}/{}", kEvaluationPrefix, EscapeKeyPart(it->first.first),
                                  EscapeKeyPart(it->first.second)),
                      StateValue(latest.evaluation.owner(), latest.evaluation.bytes()));
    latest.saved = true;
    latest.saved_level = latest.evaluation.level();
    latest.saved_evaluated = latest.evaluation.evaluated();
    latest.waiting = false;
  };
  if (evaluations_flushed_ms_ == INT64_MIN) evaluations_flushed_ms_ = now_ms;
  // Each series once (a batch may close several windows of one).
  auto node = [](LatestMap::iterator it) { return &*it; };
  std::sort(dirty_evaluations_.begin(), dirty_evaluations_.end(),
            [&](LatestMap::iterator a, LatestMap::iterator b) { return node(a) < node(b); });
  dirty_evaluations_.erase(std::unique(dirty_evaluations_.begin(), dirty_evaluations_.end()),
                           dirty_evaluations_.end());
  for (LatestMap::iterator it : dirty_evaluations_) {
    Latest& latest = it->second;
    const bool changed = !latest.saved || latest.saved_level != latest.evaluation.level() ||
                         latest.saved_evaluated != latest.evaluation.evaluated();
    if (changed) {
      save(it);
    } else if (!latest.waiting) {
      latest.waiting = true;
      unsaved_evaluations_.push_back(it);
    }
  }
  dirty_evaluations_.clear();
  if (!all && now_ms - evaluations_flushed_ms_ < kEvaluationFlushMs) return;
  evaluations_flushed_ms_ = now_ms;
  for (LatestMap::iterator it : unsaved_evaluations_) {
    if (it->second.waiting) save(it);  // a changed level may have saved it since
  }
  unsaved_evaluations_.clear();
}

void DriftStage::Impl::CollectDirty(int64_t now_ms, StatePuts& puts,
                                    std::vector<std::string>& deletes, StageProgress& progress) {
  const size_t first_put = puts.size();
  CollectEvaluations(now_ms, /*all=*/false, puts);
  progress.drift_values_over_key_cap += batch_counts_.values_over_key_cap;
  progress.drift_rows_over_segment_cap += batch_counts_.rows_over_segment_cap;
  batch_counts_ = DriftStage::ShapeCounts{};
  if (!monitor_) return;
  if (layout_dirty_) {
    puts.emplace_back(std::string(kLayoutKey), EncodeLayout());
    layout_dirty_ = false;
  }
  for (uint32_t base : dirty_bases_) {
    puts.emplace_back(std::string(kAdmitPrefix) + EscapeKeyPart(bases_[base].name),
                      EncodeAdmit(bases_[base]));
  }
  dirty_bases_.clear();
  CollectMultivariate(puts);  // [multivariate]
  for (size_t i = first_put; i < puts.size(); ++i) {
    progress.state_dirty_bytes += static_cast<int64_t>(puts[i].second.size());
  }
  monitor_->CollectDirty(puts, deletes);
  progress.state_dirty_bytes += monitor_->last_write().dirty_bytes;
  progress.drift_dirty_series += monitor_->last_write().dirty_series;
  progress.drift_dirty_bytes += monitor_->last_write().dirty_bytes;
  progress.drift_put_bytes += monitor_->last_write().put_bytes;
}

auto DriftStage::Impl::ParseLayout(std::string_view value) const -> Result<Layout> {
  Layout layout;
  layout.keys.resize(columns_.size());
  if (!value.empty() && value[0] == kLayoutVersion2) {
    drift::ByteReader r(value.substr(1));
    const uint32_t count = r.U32();
    if (r.failed() || count != columns_.size()) {
      if (r.failed()) return MakeError(ErrorCode::kCorruption, "drift: bad series layout");
      return MakeError(ErrorCode::kIncompatible,
                       "the checkpoint's drift state has {} series columns, the pipeline {}",
                       count, columns_.size());
    }
    for (uint32_t i = 0; i < count; ++i) {
      layout.widths.push_back(r.U32());
      if (!columns_[i].is_map) continue;
      const uint32_t keys = r.U32();
      if (keys > r.remaining() / 4) break;
      for (uint32_t k = 0; k < keys && !r.failed(); ++k) layout.keys[i].emplace_back(r.Str());
    }
    const uint32_t segments = r.U32();
    for (uint32_t i = 0; i < segments && !r.failed() && segments <= r.remaining() / 4; ++i) {
      layout.segments.emplace_back(r.Str());
    }
    if (r.failed() || !r.at_end()) {
      return MakeError(ErrorCode::kCorruption, "drift: bad series layout");
    }
  } else {
    layout.versioned = false;
    size_t start = 0;
    while (start < value.size()) {
      size_t end = value.find(',', start);
      if (end == std::string_view::npos) end = value.size();
      const std::string_view digits = value.substr(start, end - start);
      size_t width = 0;
      const auto [parsed, ec] =
          std::from_chars(digits.data(), digits.data() + digits.size(), width);
      if (digits.empty() || ec != std::errc() || parsed != digits.data() + digits.size() ||
          width < 1) {
        return MakeError(ErrorCode::kCorruption, "drift: bad series layout entry '{}'",
                         value.substr(0, 80));
      }
      layout.widths.push_back(width);
      start = end + 1;
    }
    if (layout.widths.size() != columns_.size()) {
      return MakeError(ErrorCode::kIncompatible,
                       "the checkpoint's drift state has {} series columns, the pipeline {}",
                       layout.widths.size(), columns_.size());
    }
  }
  for (size_t i = 0; i < layout.widths.size(); ++i) {
    if (!columns_[i].is_array) continue;
    const size_t width = layout.widths[i];
    if (static_cast<int64_t>(width) > std::max<int64_t>(max_array_length_, 1)) {
      return MakeError(ErrorCode::kIncompatible,
                       "the checkpoint's drift state has {} elements of an array series, "
                       "more than source.malformed.maxArrayLength ({}) lets through; raise "
                       "maxArrayLength to at least {}",
                       width, max_array_length_, width);
    }
  }
  return layout;
}

void DriftStage::Impl::MonitorName(const RecordBatch& batch, size_t row, std::string_view model,
                                   std::string& out) const {
  out.assign(model);
  for (int index : segment_columns_) {
    out.push_back(kSegmentSeparator);
    const Column& column = batch.columns[static_cast<size_t>(index)];
    if (column.IsNull(row)) {
      out += kNullSegmentValue;
      continue;
    }
    switch (column.type) {
      case FieldType::kString:
        for (char c : column.String(row)) {
          if (c == '%') {
            out += "%25";
          } else if (c == kSegmentSeparator) {
            out += "%1F";
          } else {
            out.push_back(c);
          }
        }
        break;
      case FieldType::kBoolean:
        out += column.i64[row] != 0 ? "true" : "false";
        break;
      default:
        fmt::format_to(std::back_inserter(out), "{}", column.i64[row]);
        break;
    }
  }
}

void DriftStage::Impl::Name(std::string_view monitor_name, std::string* model,
                            std::string* segment) const {
  if (segment_columns_.empty()) {
    if (model != nullptr) model->assign(monitor_name);
    if (segment != nullptr) segment->clear();
    return;
  }
  std::vector<std::string_view> values(segment_columns_.size());
  std::string_view rest = monitor_name;
  for (size_t i = segment_columns_.size(); i-- > 0;) {
    const size_t separator = rest.rfind(kSegmentSeparator);
    if (separator == std::string_view::npos) {
      // A name without segment values (an evaluation restored from a checkpoint kept per
      // model, before its layout said so): the model's own.
      if (model != nullptr) model->assign(monitor_name);
      if (segment != nullptr) segment->clear();
      return;
    }
    values[i] = rest.substr(separator + 1);
    rest = rest.substr(0, separator);
  }
  if (model != nullptr) model->assign(rest);
  if (segment == nullptr) return;
  segment->clear();
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) segment->push_back(',');
    *segment += active_segments_[i];
    segment->push_back('=');
    if (values[i] == kNullSegmentValue) {
      *segment += "null";
      continue;
    }
    for (size_t c = 0; c < values[i].size(); ++c) {
      if (values[i][c] == '%' && values[i].substr(c + 1, 2) == "25") {
        segment->push_back('%');
        c += 2;
      } else if (values[i][c] == '%' && values[i].substr(c + 1, 2) == "1F") {
        segment->push_back(kSegmentSeparator);
        c += 2;
      } else {
        segment->push_back(values[i][c]);
      }
    }
  }
}

Status DriftStage::Impl::RestoreAdmit(std::string_view escaped, std::string_view value) {
  auto name = UnescapeKeyPart(escaped);
  if (!name) return tl::unexpected(name.error());
  const uint32_t base = BaseOf(*name);
  drift::ByteReader r(value);
  auto corrupt = [&] {
    return MakeError(ErrorCode::kCorruption, "drift: bad admitted segments and keys of '{}'",
                     *name);
  };
  if (r.U8() != kAdmitVersion) return corrupt();
  const uint32_t segments = r.U32();
  if (r.failed() || segments > r.remaining() / 4) return corrupt();
  for (uint32_t i = 0; i < segments; ++i) {
    const std::string monitor_name(r.Str());
    if (r.failed()) return corrupt();
    // Segments of a checkpoint that stays per model are not segments any more.
    if (segment_columns_.empty()) continue;
    const uint32_t id = Intern(monitor_name);
    if (id >= monitor_base_.size()) monitor_base_.resize(id + 1, UINT32_MAX);
    monitor_base_[id] = base;
    bases_[base].segments.push_back(id);
  }
  const uint32_t keys = r.U32();
  if (r.failed() || keys > r.remaining() / 8) return corrupt();
  Base& b = bases_[base];
  for (uint32_t i = 0; i < keys; ++i) {
    const uint32_t column = r.U32();
    const std::string key_name(r.Str());
    if (r.failed() || column >= columns_.size() || !columns_[column].is_map) return corrupt();
    uint32_t key = KeyId(column, key_name);
    if (key == kNoKey) key = WatchKey(column, key_name);
    if (key >= b.keys.size()) b.keys.resize(key + 1, 0);
    if (b.keys[key] == 0) ++b.key_count;
    b.keys[key] = 1;
  }
  if (!r.at_end()) return corrupt();
  return Ok();
}

void DriftStage::Impl::ModelsOf(const RecordBatch& batch, std::span<const uint32_t> order,
                                std::span<const uint32_t> model_ids) {
  const Column& models = batch.columns[model_column_];
  row_models_.assign(batch.num_rows, kNoModel);
  // The rows fed: those `order` lists (the order buffer releases a part of the rows it holds,
  // and only those are looked up), or all.
  const size_t count = order.empty() ? batch.num_rows : order.size();
  auto row_at = [&](size_t i) -> size_t { return order.empty() ? i : order[i]; };
  if (model_keys_ && order.empty()) {
    // The ids the aggregation looked up already (or looks up for both).
    const std::vector<uint32_t>& ids = model_keys_->Ids(batch);
    SyncNames();
    for (size_t row = 0; row < batch.num_rows; ++row) {
      if (!models.IsNull(row)) row_models_[row] = ids[row];
    }
    return;
  }
  if (model_keys_) {
    // The order buffer's rows: their ids were looked up as they came (it shares model_keys_).
    for (size_t i = 0; i < count; ++i) {
      const size_t row = row_at(i);
      if (model_ids[row] != KeyInterner::kNull) row_models_[row] = model_ids[row];
    }
    SyncNames();
    return;
  }
  std::vector<std::pair<std::string, size_t>> fresh;  // (monitor name, first row)
  for (size_t i = 0; i < count; ++i) {
    const size_t row = row_at(i);
    if (models.IsNull(row)) continue;
    std::string_view model;
    if (models.type == FieldType::kString) {
      model = models.String(row);
    } else {
      name_ = std::to_string(models.i64[row]);
      model = name_;
    }
    if (segment_columns_.empty()) {
      row_models_[row] = Intern(model);
      continue;
    }
    MonitorName(batch, row, model, composite_);
    if (last_id_ != UINT32_MAX && composite_ == names_[last_id_]) {
      row_models_[row] = last_id_;
      continue;
    }
    auto it = ids_.find(composite_);
    if (it != ids_.end()) {
      last_id_ = it->second;
      row_models_[row] = last_id_;
    } else {
      fresh.emplace_back(composite_, row);
    }
  }
  if (fresh.empty()) return;
  std::sort(fresh.begin(), fresh.end());
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (i > 0 && fresh[i].first == fresh[i - 1].first) continue;
    std::string base_name;
    Name(fresh[i].first, &base_name, nullptr);
    AdmitSegment(BaseOf(base_name), fresh[i].first);
  }
  for (const auto& [monitor_name, row] : fresh) {
    auto it = ids_.find(monitor_name);
    if (it != ids_.end()) {
      row_models_[row] = it->second;
    } else {
      ++batch_counts_.rows_over_segment_cap;
      ++counts_.rows_over_segment_cap;
    }
  }
}

void DriftStage::Impl::KeysOf(const RecordBatch& batch) {
  // (base, column, key): bases by id, as BaseOfModel may add bases (and move their names).
  std::vector<std::tuple<uint32_t, size_t, std::string_view>> fresh;
  for (size_t c = 0; c < columns_.size(); ++c) {
    if (!columns_[c].is_map) continue;
    const Column& column = batch.columns[columns_[c].column];
    KeySlot& slot = SlotOf(c);
    for (size_t row = 0; row < batch.num_rows; ++row) {
      if (row_models_[row] == kNoModel || column.IsNull(row)) continue;
      const uint32_t base = BaseOfModel(row_models_[row]);
      for (size_t e = column.EntryBegin(row); e < column.EntryEnd(row); ++e) {
        const uint32_t key = LookupKey(slot, e - column.EntryBegin(row), column.Key(e));
        if (key != kNoKey && Watched(base, key)) continue;
        fresh.emplace_back(base, c, column.Key(e));
      }
    }
  }
  if (fresh.empty()) return;
  // By the base's name, so that which keys a capped model gets does not depend on ids.
  auto by_name = [&](const auto& a, const auto& b) {
    const std::string& name_a = bases_[std::get<0>(a)].name;
    const std::string& name_b = bases_[std::get<0>(b)].name;
    if (name_a != name_b) return name_a < name_b;
    return std::tie(std::get<1>(a), std::get<2>(a)) < std::tie(std::get<1>(b), std::get<2>(b));
  };
  std::sort(fresh.begin(), fresh.end(), by_name);
  fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
  for (const auto& [base, c, key] : fresh) AdmitKey(base, c, key);
}

Status DriftStage::Impl::CreateMonitor(const Layout& layout) {
  active_segments_ = layout.segments;
  std::vector<SeriesDef> defs;
  for (size_t i = 0; i < columns_.size(); ++i) {
    SeriesColumn& series = columns_[i];
    const std::string& column = schema_.fields[series.column].name;
    series.first_series = defs.size();
    if (series.is_map) {
      series.width = 0;
      continue;  // keys are added below, in name order
    }
    series.width = std::max<size_t>(layout.widths[i], 1);
    if (!series.is_array) {
      defs.push_back({column, series.kind});
      continue;
    }
    for (size_t e = 0; e < series.width; ++e) {
      defs.push_back({fmt::format("{}[{}]", column, e), SeriesKind::kNumeric});
    }
  }
  // Data quality: after the value series, each column's missing-value series (an array's
  // elements and a map's keys share their column's), then the model's malformed-record
  // series. Map keys inserted later go before them (Relayout).
  for (SeriesColumn& series : columns_) {
    series.missing = kNoSeries;
    if (!watch_missing_ || !schema_.fields[series.column].nullable) continue;
    series.missing = defs.size();
    defs.push_back({DriftMonitor::MissingSeriesName(schema_.fields[series.column].name),
                    SeriesKind::kMissing});
  }
  malformed_series_ = kNoSeries;
  if (watch_malformed_) {
    malformed_series_ = defs.size();
    defs.push_back({std::string(DriftMonitor::kMalformedSeries), SeriesKind::kMalformed});
  }
  CreateMultivariate(defs);  // [multivariate]
  kinds_.clear();
  for (const SeriesDef& def : defs) kinds_.push_back(def.kind);
  missing_values_.assign(defs.size(), 0);
  category_values_.assign(defs.size(), 0);
  auto monitor = DriftMonitor::Create(spec_, defs);
  if (!monitor) return tl::unexpected(monitor.error());
  monitor_ = std::move(*monitor);
  monitor_->CollectEvaluations(true);
  monitor_->PackEvaluations([this](Evaluation&& evaluation) {
    const std::string monitor_name = evaluation.model;
    Name(monitor_name, &evaluation.model, &evaluation.segment);
    return PackedEvaluation(evaluation);
  });
  monitor_->UseSegments(segment_columns_.size());
  if (window_ms_ > 0) {
    monitor_->UseEventTimeWindows(window_ms_, 0);
    monitor_->RestoreClock(restored_max_us_, restored_watermark_us_);
  }
  for (size_t i = 0; i < columns_.size(); ++i) {
    for (const std::string& key : layout.keys[i]) WatchKey(i, key);
  }
  return Ok();
}


Result<std::unique_ptr<DriftStage>> DriftStage::Create(const PipelineSpec& spec,
                                                      std::shared_ptr<KeyInterner> keys,
                                                      SetupPart* failed, uint32_t shards) {
  std::vector<std::unique_ptr<Impl>> impls;
  impls.push_back(std::make_unique<Impl>());
  if (failed != nullptr) *failed = SetupPart::kSection;
  DRIFTD_TRY(impls[0]->Init(spec, keys));
  if (failed != nullptr) *failed = SetupPart::kBaseline;
  DRIFTD_TRY(impls[0]->LoadBaseline());
  // Map keys are let in under caps that count over every model (drift.maxKeys), and a file
  // baseline holds every model's reference: both stay with one shard.
  if (impls[0]->has_map_series() || spec.drift.baseline.kind == BaselineKind::kFile) shards = 1;
  for (uint32_t shard = 1; shard < shards; ++shard) {
    impls.push_back(std::make_unique<Impl>());
    DRIFTD_TRY(impls.back()->Init(spec, keys));
  }
  return std::unique_ptr<DriftStage>(new DriftStage(std::move(impls)));
}

DriftStage::DriftStage(std::vector<std::unique_ptr<Impl>> shards) : shards_(std::move(shards)) {
  if (shards_.size() > 1) {
    pool_ = std::make_unique<ShardPool>(shards_.size());
    for (auto& shard : shards_) shard->KeepMergeKeys();
    shard_rows_.resize(shards_.size());
    shard_ordinals_.resize(shards_.size());
  }
}
DriftStage::~DriftStage() = default;

uint32_t DriftStage::ShardOfName(std::string_view model) const {
  return static_cast<uint32_t>(std::hash<std::string_view>{}(model) % shards_.size());
}

Result<size_t> DriftStage::ShardOfKey(std::string_view key) const {
  // Keys that name a model (as the monitor knows it, escaped) up to the next '/': its
  // evaluations, multivariate state, admitted segments and keys, and the monitor's records.
  // (An empty name is a model's too: "drift/" is the record of the model "".)
  std::optional<std::string_view> rest;
  for (std::string_view prefix : {kEvaluationPrefix, kMultivariatePrefix, kAdmitPrefix}) {
    if (key.starts_with(prefix)) rest = key.substr(prefix.size());
  }
  if (!rest && key.starts_with(DriftMonitor::kStateKeyPrefix) &&
      key != DriftMonitor::kSeriesTableKey) {
    rest = key.substr(DriftMonitor::kStateKeyPrefix.size());
  }
  if (!rest) return shards_.size();  // the layout, the series table, an old clock
  auto monitor_name = UnescapeKeyPart(rest->substr(0, rest->find('/')));
  if (!monitor_name) return tl::unexpected(monitor_name.error().Wrap(std::string(key)));
  return ShardOfName(shards_[0]->BaseName(*monitor_name));
}

Status DriftStage::Restore(std::string_view key, std::string_view value) {
  if (shards_.size() == 1) return shards_[0]->Restore(key, value);
  auto shard = ShardOfKey(key);
  if (!shard) return tl::unexpected(shard.error());
  if (*shard < shards_.size()) return shards_[*shard]->Restore(key, value);
  for (auto& each : shards_) DRIFTD_TRY(each->Restore(key, value));
  return Ok();
}

Status DriftStage::FinishRestore() {
  for (auto& shard : shards_) DRIFTD_TRY(shard->FinishRestore());
  return Ok();
}

void DriftStage::Process(const RecordBatch& batch, const RowTimes& times, BatchOutput&) {
  if (shards_.size() == 1) {
    shards_[0]->Observe(batch, times);
    return;
  }
  FeedShards(batch, times, {}, {});
}

void DriftStage::ProcessInOrder(const RecordBatch& batch, const RowTimes& times,
                                std::span<const uint32_t> order,
                                std::span<const uint32_t> model_ids) {
  if (order.empty()) return;
  if (shards_.size() == 1) {
    shards_[0]->Observe(batch, times, order, model_ids);
    return;
  }
  FeedShards(batch, times, order, model_ids);
}

void DriftStage::RunShards(size_t rows, const std::function<void(size_t)>& work) {
  // Below this many rows a thread's wake-up costs more than the rows.
  constexpr size_t kParallelAbove = 2048;
  if (rows < kParallelAbove) {
    for (size_t shard = 0; shard < shards_.size(); ++shard) work(shard);
  } else {
    pool_->Run(work);
  }
}

void DriftStage::FeedShards(const RecordBatch& batch, const RowTimes& times,
                            std::span<const uint32_t> order,
                            std::span<const uint32_t> model_ids) {
  const size_t count = order.empty() ? batch.num_rows : order.size();
  if (count == 0) return;
  // Every shard builds its monitor from the same rows, so their layouts agree.
  for (auto& shard : shards_) shard->EnsureMonitor(batch, order);
  if (!shards_[0]->has_monitor()) return;
  const std::shared_ptr<KeyInterner>& keys = shards_[0]->model_keys();
  if (keys && order.empty()) model_ids = keys->Ids(batch);
  if (order.empty()) {
    // Shards feed the rows a list names: here, all of them.
    all_rows_.resize(count);
    for (uint32_t row = 0; row < count; ++row) all_rows_[row] = row;
    order = all_rows_;
  }
  for (size_t shard = 0; shard < shards_.size(); ++shard) {
    shard_rows_[shard].clear();
    shard_ordinals_[shard].clear();
  }
  const Column& models = batch.columns[static_cast<size_t>(shards_[0]->model_column())];
  std::string name;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t row = order[i];
    uint32_t shard = 0;
    if (keys) {
      const uint32_t id = model_ids[row];
      if (id != KeyInterner::kNull) {
        if (id >= shard_of_id_.size()) shard_of_id_.resize(id + 1, UINT32_MAX);
        if (shard_of_id_[id] == UINT32_MAX) shard_of_id_[id] = ShardOfName(keys->Name(id));
        shard = shard_of_id_[id];
      }
    } else if (!models.IsNull(row)) {
      // The model's name as state keys spell it (a segment's rows go with their model).
      if (models.type == FieldType::kString) {
        shard = ShardOfName(models.String(row));
      } else {
        name = std::to_string(models.i64[row]);
        shard = ShardOfName(name);
      }
    }
    shard_rows_[shard].push_back(row);
    shard_ordinals_[shard].push_back(records_fed_ + i);
  }
  records_fed_ += count;
  // The interner is read on this thread only.
  for (auto& shard : shards_) shard->SyncModelNames();
  RunShards(count, [&](size_t shard) {
    shards_[shard]->ObserveShard(batch, times, shard_rows_[shard], model_ids,
                                 shard_ordinals_[shard]);
  });
}

const std::shared_ptr<KeyInterner>& DriftStage::model_keys() const {
  return shards_[0]->model_keys();
}

bool DriftStage::HasClosableWindows(int64_t watermark_us) const {
  for (const auto& shard : shards_) {
    if (shard->HasClosableWindows(watermark_us)) return true;
  }
  return false;
}

int64_t DriftStage::ModelsAcrossPartitions() const {
  int64_t models = 0;
  for (const auto& shard : shards_) models += shard->ModelsAcrossPartitions();
  return models;
}

const DriftStage::ShapeCounts& DriftStage::Counts() const {
  if (shards_.size() == 1) return shards_[0]->Counts();
  counts_ = {};
  for (const auto& shard : shards_) {
    counts_.values_over_key_cap += shard->Counts().values_over_key_cap;
    counts_.rows_over_segment_cap += shard->Counts().rows_over_segment_cap;
  }
  return counts_;
}

std::vector<DriftStage::SeriesValues> DriftStage::SeriesValueCounts() const {
  // Every shard has the same series (their monitors are built from the same rows).
  std::vector<SeriesValues> values = shards_[0]->SeriesValueCounts();
  for (size_t shard = 1; shard < shards_.size(); ++shard) {
    const std::vector<SeriesValues> more = shards_[shard]->SeriesValueCounts();
    for (size_t i = 0; i < more.size() && i < values.size(); ++i) {
      values[i].categories += more[i].categories;
      values[i].missing += more[i].missing;
    }
  }
  return values;
}

std::vector<DriftMonitor::ModelStats> DriftStage::ModelStats() const {
  std::vector<DriftMonitor::ModelStats> stats = shards_[0]->ModelStats();
  for (size_t shard = 1; shard < shards_.size(); ++shard) {
    std::vector<DriftMonitor::ModelStats> more = shards_[shard]->ModelStats();
    stats.insert(stats.end(), std::make_move_iterator(more.begin()),
                 std::make_move_iterator(more.end()));
  }
  // By name, whatever shard holds a model.
  std::sort(stats.begin(), stats.end(), [](const auto& a, const auto& b) {
    return std::tie(a.model, a.segment) < std::tie(b.model, b.segment);
  });
  return stats;
}

DriftMonitorStats DriftStage::Stats() const {
  DriftMonitorStats total;
  for (const auto& shard : shards_) total.Add(shard->Stats());
  return total;
}

const std::vector<AlertEvent>& DriftStage::LastEvents() const {
  return shards_.size() == 1 ? shards_[0]->LastEvents() : events_;
}

bool DriftStage::ResetBaselines(const std::string& model) {
  bool any = false;
  for (auto& shard : shards_) any = shard->ResetBaselines(model) || any;
  return any;
}

const std::vector<PackedEvaluation>& DriftStage::LastEvaluations() const {
  return shards_.size() == 1 ? shards_[0]->LastEvaluations() : evaluations_;
}

std::vector<PackedEvaluation> DriftStage::LatestEvaluations() const {
  std::vector<PackedEvaluation> latest = shards_[0]->LatestEvaluations();
  for (size_t shard = 1; shard < shards_.size(); ++shard) {
    std::vector<PackedEvaluation> more = shards_[shard]->LatestEvaluations();
    latest.insert(latest.end(), std::make_move_iterator(more.begin()),
                  std::make_move_iterator(more.end()));
  }
  if (shards_.size() > 1) {
    // By model, segment and series, as one shard's map holds them.
    std::sort(latest.begin(), latest.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(a.model(), a.segment(), a.series()) <
             std::make_tuple(b.model(), b.segment(), b.series());
    });
  }
  return latest;
}

namespace {

// The items of every shard in one order: by merge key, ties (only ever within one shard: a
// record and a model each belong to one) in the shard's own order.
template <typename Key>
std::vector<std::pair<uint32_t, uint32_t>> MergeOrder(
    const std::vector<const std::vector<Key>*>& keys) {
  std::vector<std::pair<uint32_t, uint32_t>> order;
  for (uint32_t shard = 0; shard < keys.size(); ++shard) {
    for (uint32_t i = 0; i < keys[shard]->size(); ++i) order.emplace_back(shard, i);
  }
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    const Key& ka = (*keys[a.first])[a.second];
    const Key& kb = (*keys[b.first])[b.second];
    if (ka < kb) return true;
    if (kb < ka) return false;
    return a < b;
  });
  return order;
}

void AddDriftProgress(const StageProgress& from, StageProgress& to) {
  to.drift_dirty_series += from.drift_dirty_series;
  to.drift_dirty_bytes += from.drift_dirty_bytes;
  to.drift_put_bytes += from.drift_put_bytes;
  to.state_dirty_bytes += from.state_dirty_bytes;
  to.drift_values_over_key_cap += from.drift_values_over_key_cap;
  to.drift_rows_over_segment_cap += from.drift_rows_over_segment_cap;
}

}  // namespace

void DriftStage::Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
                        StageProgress& progress) {
  if (shards_.size() == 1) {
    shards_[0]->Evaluate(context, output.alerts, &output.evaluations);
    shards_[0]->CollectDirty(context.now_ms, changes.puts, changes.deletes, progress);
    return;
  }
  records_fed_ = 0;
  std::vector<StateChanges> shard_changes(shards_.size());
  std::vector<StageProgress> shard_progress(shards_.size());
  RunShards(SIZE_MAX, [&](size_t shard) {
    shards_[shard]->EvaluateShard(context);
    shards_[shard]->CollectDirty(context.now_ms, shard_changes[shard].puts,
                                 shard_changes[shard].deletes, shard_progress[shard]);
  });
  // Events and evaluations in the order one shard holding every model gives them.
  std::vector<const std::vector<Impl::MergeKey>*> event_keys;
  std::vector<const std::vector<Impl::MergeKey>*> evaluation_keys;
  for (const auto& shard : shards_) {
    event_keys.push_back(&shard->event_keys());
    evaluation_keys.push_back(&shard->evaluation_keys());
  }
  events_.clear();
  for (const auto& [shard, i] : MergeOrder(event_keys)) {
    events_.push_back(shards_[shard]->LastEvents()[i]);
  }
  evaluations_.clear();
  for (const auto& [shard, i] : MergeOrder(evaluation_keys)) {
    evaluations_.push_back(shards_[shard]->LastEvaluations()[i]);
  }
  if (shards_[0]->has_monitor()) {
    shards_[0]->Render(events_, evaluations_, output.alerts, &output.evaluations);
  }
  // State: what every shard writes alike (the layout, the series table), once, when it
  // differs from what was written last (a shard may write the table in a later batch, when it
  // first has a model), with the counters of one shard.
  for (size_t shard = 0; shard < shards_.size(); ++shard) {
    StageProgress& counted = shard_progress[shard];
    for (auto& [key, value] : shard_changes[shard].puts) {
      std::string* written = key == kLayoutKey                     ? &written_layout_
                             : key == DriftMonitor::kSeriesTableKey ? &written_table_
                                                                    : nullptr;
      if (written != nullptr && *written == value) {
        const auto bytes = static_cast<int64_t>(value.size());
        counted.state_dirty_bytes -= bytes;
        if (written == &written_table_) {
          counted.drift_dirty_bytes -= bytes;
          counted.drift_put_bytes -= bytes + static_cast<int64_t>(key.size());
        }
        continue;
      }
      if (written != nullptr) *written = value;
      changes.puts.emplace_back(std::move(key), std::move(value));
    }
    for (std::string& key : shard_changes[shard].deletes) changes.deletes.push_back(std::move(key));
    AddDriftProgress(counted, progress);
  }
}

void DriftStage::FlushKept(int64_t now_ms, StateChanges& changes) {
  for (auto& shard : shards_) shard->CollectEvaluations(now_ms, /*all=*/true, changes.puts);
}


// ---- Multivariate drift (engine/executor/drift_multivariate.h) -------------------------------
// Each model's vectors of the features fit a PCA; the reconstruction error of each later one
// is a value of the numeric series multivariate:pca, judged by the monitor as any series.
// Hooks, each marked [multivariate]: Init, CreateMonitor, Relayout, FeedRow, Restore and
// CollectDirty.

Status DriftStage::Impl::InitMultivariate(const PipelineSpec& spec) {
  std::vector<int> numeric;
  std::vector<int> arrays;
  for (const SeriesColumn& series : columns_) {
    if (series.kind != SeriesKind::kNumeric || series.is_map) continue;
    numeric.push_back(series.column);
    if (series.is_array) arrays.push_back(series.column);
  }
  auto created = DriftMultivariate::Create(spec, schema_, numeric, arrays);
  if (!created) return tl::unexpected(created.error());
  mv_ = std::move(*created);
  return Ok();
}

// The error's series after the data-quality ones, once the array widths are known.
void DriftStage::Impl::CreateMultivariate(std::vector<SeriesDef>& defs) {
  mv_series_ = kNoSeries;
  if (!mv_) return;
  mv_->SetWidths([&](int column) {
    for (const SeriesColumn& series : columns_) {
      if (series.column == column) return series.width;
    }
    return size_t{1};
  });
  mv_series_ = defs.size();
  defs.push_back({std::string(DriftMultivariate::kSeries), SeriesKind::kNumeric});
}

Status DriftStage::Impl::RestoreMultivariate(std::string_view key, std::string_view value) {
  auto name = UnescapeKeyPart(key.substr(kMultivariatePrefix.size()));
  if (!name) return tl::unexpected(name.error());
  if (!mv_) return Ok();  // no longer configured: the state is left unread
  return mv_->Restore(Intern(*name), *name, value);
}

void DriftStage::Impl::CollectMultivariate(StatePuts& puts) {
  if (!mv_) return;
  for (auto& [id, bytes] : mv_->TakeDirty()) {
    puts.emplace_back(std::string(kMultivariatePrefix) + EscapeKeyPart(names_[id]),
                      std::move(bytes));
  }
}

}  // namespace driftd
