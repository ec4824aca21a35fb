// The file baseline of the drift stage: reference records and reference statistics
// (engine/drift/README.md documents both formats) parsed from the bytes config/ read when the
// pipeline loaded, and reference statistics written for `driftd baseline build`.
#include "engine/executor/drift_stage_impl.h"

namespace driftd {

Status DriftStage::Impl::LoadReference(const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    return MakeError(ErrorCode::kConfig, "the file is empty");
  }
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(text).get(root) == simdjson::SUCCESS && root.is_object() &&
      root["driftd_reference"].error() == simdjson::SUCCESS) {
    return LoadReferenceStatistics(root);
  }
  return LoadReferenceRecords(text);
}

Status DriftStage::Impl::LoadReferenceRecords(const std::string& text) {
  InputChunk chunk;
  int64_t line = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line;
    std::string_view record(text.data() + start, end - start);
    if (!record.empty() && record.back() == '\r') record.remove_suffix(1);
    if (record.find_first_not_of(" \t") != std::string_view::npos) {
      chunk.Append(record, RecordPosition{0, line});
    }
    start = end + 1;
  }
  chunk.Seal();
  MalformedSpec strict;
  strict.policy = MalformedPolicy::kFail;
  JsonDecoder decoder(input_schema_, strict);
  RecordBatch batch;
  batch.Reset(input_schema_);
  DRIFTD_TRY(decoder.Decode(chunk, batch, nullptr, [](const RecordPosition& position) {
    return fmt::format("line {}", position.offset);
  }));
  // Reference records have no Kafka metadata: those columns are null for them. Reference
  // rows the filter rejects are not part of the reference.
  MetadataFiller(metadata_columns_).FillNulls(batch);
  static_cast<void>(projection_->Apply(batch));
  if (batch.num_rows == 0) return MakeError(ErrorCode::kConfig, "no reference records");
  if (!monitor_) {
    DRIFTD_TRY(CreateMonitor(LayoutOf(batch)));
    layout_dirty_ = true;
  }
  Feed</*kReference=*/true>(batch, nullptr, INT64_MIN);
  return monitor_->FreezeReferences();
}

Status DriftStage::Impl::LoadReferenceStatistics(simdjson::dom::element root) {
  auto bad = [](std::string_view what) {
    return MakeError(ErrorCode::kConfig, "reference statistics: {}", what);
  };
  int64_t version = 0;
  if (root["driftd_reference"].get_int64().get(version) != simdjson::SUCCESS || version != 1) {
    return bad("\"driftd_reference\" must be 1 (the only format version)");
  }
  simdjson::dom::object models;
  if (root["models"].get_object().get(models) != simdjson::SUCCESS) {
    return bad("\"models\" must be an object of model name -> series");
  }
  // Array widths from the series names: feature_vector[7] means at least 8 elements; a
  // map column's keys: features.amount.
  Layout layout;
  layout.widths.assign(columns_.size(), 1);
  layout.keys.resize(columns_.size());
  layout.segments = active_segments_;
  std::vector<std::set<std::string>> keys(columns_.size());
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].is_array || columns_[i].is_map) layout.widths[i] = 0;
  }
  std::vector<size_t>& widths = layout.widths;
  for (auto [model, series_map] : models) {
    simdjson::dom::object series_object;
    if (series_map.get_object().get(series_object) != simdjson::SUCCESS) {
      return bad(fmt::format("model '{}' must be an object of series name -> statistics",
                             std::string_view(model)));
    }
    for (auto [name, stats] : series_object) {
      const std::string_view series(name);
      if (series == DriftMonitor::kErrorSeries) continue;
      if (series == DriftMonitor::kMalformedSeries && watch_malformed_) continue;
      const size_t bracket = series.find('[');
      bool known = false;
      for (size_t i = 0; i < columns_.size() && watch_missing_; ++i) {
        const Field& field = schema_.fields[columns_[i].column];
        if (field.nullable && series == DriftMonitor::MissingSeriesName(field.name)) {
          known = true;
        }
      }
      for (size_t i = 0; i < columns_.size(); ++i) {
        const std::string& column = schema_.fields[columns_[i].column].name;
        if (columns_[i].is_array && bracket != std::string_view::npos &&
            series.substr(0, bracket) == column && series.back() == ']') {
          size_t element = 0;
          const std::string_view digits =
              series.substr(bracket + 1, series.size() - bracket - 2);
          const auto [end, ec] =
              std::from_chars(digits.data(), digits.data() + digits.size(), element);
          // Elements beyond maxArrayLength never reach the monitor: decoding refuses them.
          if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
              static_cast<int64_t>(element) >= max_array_length_) {
            break;
          }
          widths[i] = std::max(widths[i], element + 1);
          known = true;
        } else if (columns_[i].is_map && series.size() > column.size() + 1 &&
                   series.starts_with(column) && series[column.size()] == '.') {
          keys[i].emplace(series.substr(column.size() + 1));
          known = true;
        } else if (!columns_[i].is_array && !columns_[i].is_map && series == column) {
          known = true;
        }
        if (known) break;
      }
      if (!known) {
        return bad(fmt::format("model '{}': '{}' is not a drift series of this pipeline "
                               "(drift.series, an array column's element like {}[0], a map "
                               "column's key like features.amount, a column's missing-value "
                               "series like {}:missing, malformed or error)",
                               std::string_view(model), series,
                               schema_.fields[columns_[0].column].name,
                               schema_.fields[columns_[0].column].name));
      }
    }
  }
  if (!monitor_) {
    for (size_t& width : widths) width = std::max<size_t>(width, 1);
    for (size_t i = 0; i < columns_.size(); ++i) {
      layout.keys[i].assign(keys[i].begin(), keys[i].end());
    }
    DRIFTD_TRY(CreateMonitor(layout));
    layout_dirty_ = true;
  }
  const std::vector<std::string>& names = monitor_->series_names();
  for (auto [model_key, series_map] : models) {
    const std::string model(model_key);
    const uint32_t id = Intern(model);
    simdjson::dom::object series_object;
    if (series_map.get_object().get(series_object) != simdjson::SUCCESS) continue;  // checked
    // Not a structured binding: the lambdas below capture the value (clang before 16 cannot).
    for (simdjson::dom::key_value_pair field : series_object) {
      const std::string_view series(field.key);
      const simdjson::dom::element stats = field.value;
      auto where = [&](std::string_view what) {
        return bad(fmt::format("model '{}' series '{}': {}", model, series, what));
      };
      const auto named = std::find(names.begin(), names.end(), series);
      const SeriesKind kind = named == names.end()
                                  ? SeriesKind::kNumeric
                                  : monitor_->series_kind(static_cast<size_t>(named - names.begin()));
      if (kind == SeriesKind::kCategorical) {
        DRIFTD_TRY(LoadCategoricalStatistics(id, model, static_cast<size_t>(named - names.begin()),
                                             stats, where));
        continue;
      }
      int64_t n = 0;
      if (stats["n"].get_int64().get(n) != simdjson::SUCCESS || n < 1) {
        return where("needs \"n\", the number of reference values (an integer >= 1)");
      }
      auto number = [&](const char* key, double fallback, bool required) -> Result<double> {
        simdjson::dom::element value;
        if (stats[key].get(value) != simdjson::SUCCESS) {
          if (required) return where(fmt::format("needs \"{}\" (a number)", key));
          return fallback;
        }
        double x = 0;
        if (value.get_double().get(x) != simdjson::SUCCESS || !std::isfinite(x)) {
          return where(fmt::format("\"{}\" must be a finite number", key));
        }
        return x;
      };
      if (IsDataQuality(kind) && named != names.end()) {
        // {"n": records, "rate": share of them missing (or malformed)}.
        auto rate = number("rate", 0, true);
        if (!rate) return tl::unexpected(rate.error());
        if (*rate < 0 || *rate > 1) return where("\"rate\" must be in [0, 1]");
        const double k = std::round(*rate * static_cast<double>(n));
        const double nd = static_cast<double>(n);
        const Moments moments = Moments::FromParts(n, k / nd, k * (nd - k) / nd,
                                                   k > 0 && k < nd ? 0.0 : k / nd,
                                                   k > 0 ? 1.0 : 0.0, k);
        DRIFTD_TRY(monitor_->SetReference(id, model, static_cast<size_t>(named - names.begin()),
                                          moments, {}, {}));
        continue;
      }
      if (series == DriftMonitor::kErrorSeries) {
        auto rate = number("error_rate", 0, true);
        if (!rate) return tl::unexpected(rate.error());
        auto mae = number("mae", 0, true);
        if (!mae) return tl::unexpected(mae.error());
        auto mae_stddev = number("mae_stddev", 0, false);
        if (!mae_stddev) return tl::unexpected(mae_stddev.error());
        if (*rate < 0 || *rate > 1) return where("\"error_rate\" must be in [0, 1]");
        ErrorSummary summary;
        summary.errors = std::llround(*rate * static_cast<double>(n));
        const double m2 = *mae_stddev * *mae_stddev * static_cast<double>(n - 1);
        summary.abs_error =
            Moments::FromParts(n, *mae, m2, 0, std::max(1.0, 2 * *mae), *mae * n);
        DRIFTD_TRY(monitor_->SetErrorReference(id, model, summary));
        continue;
      }
      auto mean = number("mean", 0, true);
      if (!mean) return tl::unexpected(mean.error());
      auto stddev = number("stddev", 0, true);
      if (!stddev) return tl::unexpected(stddev.error());
      if (*stddev < 0) return where("\"stddev\" must not be negative");
      auto min = number("min", *mean, false);
      if (!min) return tl::unexpected(min.error());
      auto max = number("max", *mean, false);
      if (!max) return tl::unexpected(max.error());
      std::vector<double> edges;
      std::vector<int64_t> counts;
      simdjson::dom::array array;
      if (stats["edges"].get_array().get(array) == simdjson::SUCCESS) {
        for (simdjson::dom::element e : array) {
          double x = 0;
          if (e.get_double().get(x) != simdjson::SUCCESS) return where("edges must be numbers");
          edges.push_back(x);
        }
      }
      if (stats["counts"].get_array().get(array) == simdjson::SUCCESS) {
        for (simdjson::dom::element e : array) {
          int64_t c = 0;
          if (e.get_int64().get(c) != simdjson::SUCCESS) return where("counts must be integers");
          counts.push_back(c);
        }
      }
      // The winsorized values (optional; `driftd baseline build` writes them): what the
      // mean, spread and CUSUM tests compare with, so that the file gives the warm-up's
      // readings.
      std::optional<DriftMonitor::Winsorized> winsorized;
      simdjson::dom::element w_element;
      if (stats["winsorized"].get(w_element) == simdjson::SUCCESS) {
        simdjson::dom::object w_object;
        if (w_element.get_object().get(w_object) != simdjson::SUCCESS) {
          return where("\"winsorized\" must be an object");
        }
        auto w_number = [&](const char* key, double fallback,
                            bool required) -> Result<double> {
          simdjson::dom::element value;
          if (w_object[key].get(value) != simdjson::SUCCESS) {
            if (required) return where(fmt::format("winsorized needs \"{}\" (a number)", key));
            return fallback;
          }
          double x = 0;
          if (value.get_double().get(x) != simdjson::SUCCESS || !std::isfinite(x)) {
            return where(fmt::format("winsorized \"{}\" must be a finite number", key));
          }
          return x;
        };
        DriftMonitor::Winsorized w;
        auto low = w_number("low", w.low, false);
        if (!low) return tl::unexpected(low.error());
        auto high = w_number("high", w.high, false);
        if (!high) return tl::unexpected(high.error());
        auto w_mean = w_number("mean", 0, true);
        if (!w_mean) return tl::unexpected(w_mean.error());
        auto w_stddev = w_number("stddev", 0, true);
        if (!w_stddev) return tl::unexpected(w_stddev.error());
        auto skewness = w_number("skewness", 0, false);
        if (!skewness) return tl::unexpected(skewness.error());
        auto kurtosis = w_number("kurtosis", 3, false);
        if (!kurtosis) return tl::unexpected(kurtosis.error());
        if (*w_stddev < 0) return where("winsorized \"stddev\" must not be negative");
        const double nd = static_cast<double>(n);
        const double w_m2 = *w_stddev * *w_stddev * (nd - 1);
        w.low = *low;
        w.high = *high;
        w.moments = HigherMoments::FromCentral(n, *w_mean, w_m2,
                                               *skewness * std::pow(w_m2, 1.5) / std::sqrt(nd),
                                               *kurtosis * w_m2 * w_m2 / nd);
        winsorized = w;
      }
      for (size_t i = 0; i < columns_.size(); ++i) {
        const std::string& column = schema_.fields[columns_[i].column].name;
        if (columns_[i].is_map && series.starts_with(column) &&
            series.size() > column.size() + 1 && series[column.size()] == '.' &&
            !AdmitKey(BaseOf(model), i, series.substr(column.size() + 1))) {
          return where(fmt::format("more map keys than drift.maxKeysPerModel ({}) or "
                                   "drift.maxKeys ({})",
                                   spec_.max_keys_per_model, spec_.max_keys));
        }
      }
      const auto it = std::find(names.begin(), names.end(), series);
      if (it == names.end()) return where("not a series of this pipeline");
      const double m2 = *stddev * *stddev * static_cast<double>(n - 1);
      const Moments moments = Moments::FromParts(n, *mean, m2, std::min(*min, *mean),
                                                 std::max(*max, *mean), *mean * n);
      DRIFTD_TRY(monitor_->SetReference(id, model, static_cast<size_t>(it - names.begin()),
                                        moments, std::move(edges), std::move(counts),
                                        winsorized ? &*winsorized : nullptr));
    }
  }
  return Ok();
}

template <typename Where>
Status DriftStage::Impl::LoadCategoricalStatistics(uint32_t id, const std::string& model,
                                                   size_t series, simdjson::dom::element stats,
                                                   const Where& where) {
  DriftMonitor::CategoricalReference reference;
  simdjson::dom::object categories;
  if (stats["categories"].get_object().get(categories) != simdjson::SUCCESS) {
    return where("a string series needs \"categories\", an object of category -> count");
  }
  for (auto [category, count] : categories) {
    int64_t c = 0;
    if (count.get_int64().get(c) != simdjson::SUCCESS || c < 0) {
      return where(fmt::format("the count of category '{}' must be an integer >= 0",
                               std::string_view(category)));
    }
    reference.categories.emplace_back(std::string(category), c);
  }
  simdjson::dom::element element;
  if (stats["other"].get(element) == simdjson::SUCCESS &&
      (element.get_int64().get(reference.other) != simdjson::SUCCESS || reference.other < 0)) {
    return where("\"other\" must be an integer >= 0");
  }
  if (stats["seen"].get(element) == simdjson::SUCCESS) {
    std::string_view hex;
    if (element.get_string().get(hex) != simdjson::SUCCESS || hex.size() % 8 != 0) {
      return where("\"seen\" must be a string of 8 hex digits per category");
    }
    for (size_t at = 0; at < hex.size(); at += 8) {
      uint32_t fingerprint = 0;
      const auto [end, ec] =
          std::from_chars(hex.data() + at, hex.data() + at + 8, fingerprint, 16);
      if (ec != std::errc() || end != hex.data() + at + 8) {
        return where("\"seen\" must be a string of 8 hex digits per category");
      }
      reference.seen.push_back(fingerprint);
    }
  }
  if (stats["unseen"].get(element) == simdjson::SUCCESS) {
    if (element["n"].get_int64().get(reference.unseen_n) != simdjson::SUCCESS ||
        element["count"].get_int64().get(reference.unseen) != simdjson::SUCCESS ||
        reference.unseen_n < 1 || reference.unseen < 0 ||
        reference.unseen > reference.unseen_n) {
      return where("\"unseen\" must be {\"n\": values >= 1, \"count\": of them unseen}");
    }
  }
  int64_t n = reference.other;
  for (const auto& [category, count] : reference.categories) n += count;
  int64_t given = 0;
  if (stats["n"].get(element) == simdjson::SUCCESS &&
      (element.get_int64().get(given) != simdjson::SUCCESS || given != n)) {
    return where(fmt::format("\"n\" must be the sum of the categories' counts and other ({})",
                             n));
  }
  return monitor_->SetCategoricalReference(id, model, series, reference);
}

Result<std::string> DriftStage::Impl::ExportReference() const {
  if (!monitor_) return MakeError(ErrorCode::kConfig, "no reference records");
  std::map<std::string, std::vector<const DriftMonitor::BaselineExport*>> by_model;
  std::vector<DriftMonitor::BaselineExport> baselines = monitor_->ExportBaselines();
  for (const auto& b : baselines) by_model[b.model].push_back(&b);
  std::string out = "{\"driftd_reference\": 1,\n \"models\": {";
  bool first_model = true;
  for (const auto& [model, series] : by_model) {
    out += first_model ? "\n  " : ",\n  ";
    first_model = false;
    AppendJsonString(out, model);
    out += ": {";
    bool first = true;
    for (const auto* b : series) {
      out += first ? "\n   " : ",\n   ";
      first = false;
      AppendJsonString(out, b->series);
      out += ": ";
      std::string stats;
      JsonObject o(stats);
      if (b->kind == SeriesKind::kCategorical) {
        const DriftMonitor::CategoricalReference& c = b->categorical;
        int64_t n = c.other;
        std::string categories = "{";
        for (size_t i = 0; i < c.categories.size(); ++i) {
          if (i > 0) categories.push_back(',');
          AppendJsonString(categories, c.categories[i].first);
          categories += ":" + std::to_string(c.categories[i].second);
          n += c.categories[i].second;
        }
        categories.push_back('}');
        o.Int("n", n);
        o.Raw("categories", categories);
        o.Int("other", c.other);
        std::string seen;
        for (uint32_t f : c.seen) seen += fmt::format("{:08x}", f);
        o.String("seen", seen);
        std::string unseen;
        JsonObject u(unseen);
        u.Int("n", c.unseen_n);
        u.Int("count", c.unseen);
        u.Close();
        o.Raw("unseen", unseen);
        o.Close();
        out += stats;
        continue;
      }
      const int64_t n = b->moments.count();
      o.Int("n", n);
      if (IsDataQuality(b->kind)) {
        o.Number("rate", n > 0 ? b->moments.mean() : 0);
      } else if (b->series == DriftMonitor::kErrorSeries) {
        o.Number("error_rate", n > 0 ? static_cast<double>(b->errors) / static_cast<double>(n) : 0);
        o.Number("mae", b->moments.mean());
        o.Number("mae_stddev", n > 1 ? b->moments.Stddev() : 0);
      } else {
        o.Number("mean", b->moments.mean());
        o.Number("stddev", n > 1 ? b->moments.Stddev() : 0);
        o.Number("min", b->moments.min());
        o.Number("max", b->moments.max());
        if (!b->counts.empty()) {
          std::string edges = "[";
          for (size_t i = 0; i < b->inner_edges.size(); ++i) {
            if (i > 0) edges.push_back(',');
            AppendJsonNumber(edges, b->inner_edges[i]);
          }
          edges.push_back(']');
          o.Raw("edges", edges);
          std::string counts = "[";
          for (size_t i = 0; i < b->counts.size(); ++i) {
            if (i > 0) counts.push_back(',');
            counts += std::to_string(b->counts[i]);
          }
          counts.push_back(']');
          o.Raw("counts", counts);
        }
        const DriftMonitor::Winsorized& w = b->winsorized;
        if (w.moments.count() == n) {
          std::string winsorized;
          JsonObject wo(winsorized);
          if (std::isfinite(w.low)) wo.Number("low", w.low);
          if (std::isfinite(w.high)) wo.Number("high", w.high);
          wo.Number("mean", w.moments.mean());
          wo.Number("stddev", w.moments.Stddev());
          wo.Number("skewness", w.moments.Skewness());
          wo.Number("kurtosis", w.moments.Kurtosis());
          wo.Close();
          o.Raw("winsorized", winsorized);
        }
      }
      o.Close();
      out += stats;
    }
    out += "}";
  }
  out += "}}\n";
  return out;
}

Result<std::string> DriftStage::BuildReferenceStatistics(const PipelineSpec& spec,
                                                         const std::string& records) {
  PipelineSpec copy = spec;
  if (!copy.drift.enabled) {
    return MakeError(ErrorCode::kConfig, "pipeline '{}' has no drift section", spec.name);
  }
  // The records are the reference: the pipeline's own baseline setting does not matter here
  // (a file baseline would load the very file being built).
  copy.drift.baseline.kind = BaselineKind::kWarmup;
  copy.drift.baseline.duration_ms = 0;
  auto impl = std::make_unique<Impl>();
  DRIFTD_TRY(impl->Init(copy, nullptr));
  DRIFTD_TRY(impl->LoadReferenceRecords(records));
  return impl->ExportReference();
}

}  // namespace driftd
