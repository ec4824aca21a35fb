#include "engine/executor/drift_stage.h"

#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "engine/drift/codec.h"
#include "engine/drift/evaluation.h"
#include "engine/drift/monitor.h"
#include "engine/expr/projection.h"
#include "engine/json_decoder.h"
#include "engine/json_writer.h"
#include "engine/log.h"

namespace driftd {

namespace {

// Series layout (names after array expansion), persisted so a restart restores the monitor
// with the same series indices. Sorts before DriftMonitor's "drift/" keys in a state scan.
// Version 1 (written before map series and segments): the array widths, "8,1,1". Version 2:
// byte kLayoutVersion2, then (drift/codec.h) u32 columns, per column u32 width and, for a map
// column, u32 keys + each key's name in name order; then u32 segment columns + their names.
constexpr std::string_view kLayoutKey = "drift-layout";
constexpr char kLayoutVersion2 = '\x02';
// What a model was let in to (drift.maxSegmentsPerModel, maxKeysPerModel), per model:
// "drift-admit/<model>" (escaped), u8 version 1, u32 segments + each segment's model name (the
// "<model>\x1f<value>..." the monitor knows it by), u32 keys + (u32 column, key name) each.
constexpr std::string_view kAdmitPrefix = "drift-admit/";
constexpr uint8_t kAdmitVersion = 1;
// Separates a model's name from its segment values in the name the monitor keys state and
// alert ids by; a value's own '%' and separator are escaped, a null value is "%00".
constexpr char kSegmentSeparator = '\x1f';
constexpr std::string_view kNullSegmentValue = "%00";
// Written by versions whose drift stage kept a watermark of its own (event-time windows): the
// largest event time seen and the watermark, "<max>,<watermark>" in microseconds. Read for
// such checkpoints only; the query's clock is in the commit record now.
constexpr std::string_view kClockKey = "drift-watermark";
// The last evaluation of each (model, series), "drift-eval/<model>/<series>" (names escaped
// as in DriftMonitor's keys), so the drift gauges show every series again after a restart.
constexpr std::string_view kEvaluationPrefix = "drift-eval/";

struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
};

Result<std::string> UnescapeKeyPart(std::string_view part) {
  std::string out;
  for (size_t i = 0; i < part.size(); ++i) {
    if (part[i] != '%') {
      out.push_back(part[i]);
      continue;
    }
    const std::string_view code = part.substr(i + 1, 2);
    if (code == "25") {
      out.push_back('%');
    } else if (code == "2F") {
      out.push_back('/');
    } else {
      return MakeError(ErrorCode::kCorruption, "drift state key: bad escape in '{}'", part);
    }
    i += 2;
  }
  return out;
}

std::string EscapeKeyPart(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// The largest reference file read: reference records are decoded at once, so this bounds the
// memory a start may take for them.
constexpr size_t kMaxReferenceBytes = 256u << 20;

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
    FieldType type = FieldType::kDouble;
    bool is_array = false;  // array<double>: a series per element
    bool is_map = false;    // a series per key
    SeriesKind kind = SeriesKind::kNumeric;
    size_t first_series = 0;  // index of its first series in the monitor
    size_t width = 1;         // 1 for a scalar; array length from the layout; a map's keys
    std::vector<uint32_t> keys;  // a map's watched keys (ids into keys_), in name order
    size_t missing = kNoSeries;  // its missing-value series, when watched
  };
  static constexpr size_t kNoSeries = SIZE_MAX;

  Status Init(const PipelineSpec& spec, std::shared_ptr<KeyInterner> keys) {
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
      column.kind = column.type == FieldType::kString || column.type == FieldType::kStringArray ||
                            column.type == FieldType::kStringMap
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
    // malformed records as rows. A malformed row's flag does not cross a scaled-out query's
    // repartition topic, so there the malformed series is not kept rather than kept wrong.
    const std::vector<DetectorSpec> detectors =
        spec_.detectors.empty() ? DefaultDetectorSpecs() : spec_.detectors;
    for (const DetectorSpec& detector : detectors) {
      const DetectorDefaults& defaults = DefaultsFor(detector.kind);
      if (defaults.Watches(SeriesKind::kMissing)) watch_missing_ = true;
      if (defaults.Watches(SeriesKind::kMalformed)) {
        watch_malformed_ = !spec.scale_out.enabled &&
                           spec.source.malformed.policy == MalformedPolicy::kPermissive;
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
    // Only a Kafka source has partitions that are read in an order of their own.
    track_partitions_ = spec.source.format == "kafka" && !spec.query.window && spec_.window_ms == 0;
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
    if (spec_.baseline.kind == BaselineKind::kFile) {
      std::filesystem::path path = spec_.baseline.path;
      if (path.is_relative() && !spec.file.empty()) {
        path = std::filesystem::path(spec.file).parent_path() / path;
      }
      Status loaded = LoadReference(path.string());
      if (!loaded) {
        return tl::unexpected(loaded.error().Wrap(
            fmt::format("drift.baseline.path '{}'", path.string())));
      }
    }
    return Ok();
  }

  // The file baseline: reference statistics (a JSON object marked "driftd_reference") or
  // reference records (JSON lines with the pipeline's schema). engine/drift/README.md
  // documents both formats.
  Status LoadReference(const std::string& path) {
    // Bounded like a pipeline file: not a FIFO or device (opening one may block, reading it
    // need not end), and no larger than kMaxReferenceBytes.
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
    }
    if (!S_ISREG(info.st_mode)) {
      return MakeError(ErrorCode::kConfig, "cannot read the file: not a regular file");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
    // In blocks, to at most a block past the limit: memory follows the file, not the limit.
    std::string text;
    char block[64 * 1024];
    while (text.size() <= kMaxReferenceBytes && in.read(block, sizeof block).gcount() > 0) {
      text.append(block, static_cast<size_t>(in.gcount()));
    }
    if (in.bad()) {
      return MakeError(ErrorCode::kConfig, "cannot read the file: {}", std::strerror(errno));
    }
    if (text.size() > kMaxReferenceBytes) {
      return MakeError(ErrorCode::kConfig,
                       "the file is larger than {} bytes; give reference statistics (a few KB "
                       "per model) rather than that many reference records",
                       kMaxReferenceBytes);
    }
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

  Status LoadReferenceRecords(const std::string& text) {
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

  Status LoadReferenceStatistics(simdjson::dom::element root) {
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

  // A categorical series' reference statistics: {"categories": {name: count, ...}, "other":
  // count, "seen": hex fingerprints, "unseen": {"n": values, "count": unseen}} (engine/drift/
  // README.md).
  template <typename Where>
  Status LoadCategoricalStatistics(uint32_t id, const std::string& model, size_t series,
                                   simdjson::dom::element stats, const Where& where) {
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

  Status Restore(std::string_view key, std::string_view value) {
    if (key.starts_with(kEvaluationPrefix)) {
      auto evaluation = DecodeEvaluation(value);
      if (!evaluation) return tl::unexpected(evaluation.error().Wrap(std::string(key)));
      // The key names the model as the monitor knows it (with its segment, if any).
      std::string_view rest = key.substr(kEvaluationPrefix.size());
      const size_t slash = rest.find('/');
      auto monitor_name = UnescapeKeyPart(rest.substr(0, slash));
      if (!monitor_name) return tl::unexpected(monitor_name.error().Wrap(std::string(key)));
      Name(*monitor_name, &evaluation->model, &evaluation->segment);
      auto series_key = std::make_pair(*monitor_name, evaluation->series);
      latest_[std::move(series_key)] = std::make_shared<const Evaluation>(std::move(*evaluation));
      return Ok();
    }
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

  void Observe(const RecordBatch& batch, const RowTimes& times) {
    if (batch.num_rows == 0) return;
    if (!monitor_) {
      // Cannot fail: Init built a monitor from the same spec.
      IgnoreError(CreateMonitor(LayoutOf(batch)));
      layout_dirty_ = true;
      if (!monitor_) return;
    }
    Feed</*kReference=*/false>(batch, &times, NowUs());
  }

  bool HasClosableWindows(int64_t watermark_us) const {
    return monitor_ && monitor_->HasClosableWindows(watermark_us);
  }

  int64_t ModelsAcrossPartitions() const { return models_across_partitions_; }

  std::vector<DriftMonitor::ModelStats> ModelStats() const {
    std::vector<DriftMonitor::ModelStats> stats =
        monitor_ ? monitor_->model_stats() : std::vector<DriftMonitor::ModelStats>{};
    // The monitor keeps room for every map key of every model; a model's own series are its
    // other series, the keys it was let in to, and the error series (as the monitor counts).
    size_t fixed = 0;
    for (const SeriesColumn& series : columns_) fixed += series.is_map ? 0 : series.width;
    for (DriftMonitor::ModelStats& model : stats) {
      const std::string monitor_name = model.model;
      Name(monitor_name, &model.model, &model.segment);
      auto base = base_ids_.find(model.model);
      if (!keys_.empty()) {
        model.series = static_cast<int64_t>(fixed) + 1 +
                       (base == base_ids_.end() ? 0 : bases_[base->second].key_count);
      }
    }
    return stats;
  }
  DriftMonitorStats Stats() const { return monitor_ ? monitor_->stats() : DriftMonitorStats{}; }
  const DriftStage::ShapeCounts& Counts() const { return counts_; }
  std::vector<DriftStage::SeriesValues> SeriesValueCounts() const {
    std::vector<DriftStage::SeriesValues> out;
    if (!monitor_) return out;
    const std::vector<std::string>& names = monitor_->series_names();
    for (size_t i = 0; i < names.size(); ++i) {
      out.push_back({names[i], kinds_[i] == SeriesKind::kCategorical, category_values_[i],
                     missing_values_[i]});
    }
    return out;
  }

  void Evaluate(const BatchContext& context, OutputRows& alerts, OutputRows* rows) {
    events_.clear();
    evaluations_.clear();
    if (!monitor_) return;
    std::vector<Evaluation> evaluations;
    // Windows close by the watermark this batch's rows move the clock to: every row of a
    // window closed now was read (rows still to come for it are late by their own partition's
    // watermark), so closing now rather than one batch later changes nothing but latency.
    monitor_->AdvanceWatermark(context.next_watermark_us);
    monitor_->Evaluate(context.batch_id, context.now_ms, events_, &evaluations);
    // The monitor knows a segment's model as "<model>\x1f<value>...": events and evaluations
    // name the model and the segment apart.
    for (AlertEvent& event : events_) {
      const std::string monitor_name = event.model;
      Name(monitor_name, &event.model, &event.segment);
    }
    evaluations_.reserve(evaluations.size());
    for (Evaluation& evaluation : evaluations) {
      std::string monitor_name = evaluation.model;
      Name(monitor_name, &evaluation.model, &evaluation.segment);
      auto series_key = std::make_pair(std::move(monitor_name), evaluation.series);
      auto& shared =
          evaluations_.emplace_back(std::make_shared<const Evaluation>(std::move(evaluation)));
      auto latest = latest_.try_emplace(std::move(series_key)).first;
      latest->second = shared;
      dirty_evaluations_.push_back(latest);
    }
    if (alerts.columns.empty()) {
      alerts.columns = {"alert_id", "level", "model", "series", "detector", "statistic",
                        "threshold"};
    }
    for (const AlertEvent& event : events_) alerts.Add(event.model, event.ToJson());
    if (rows != nullptr && want_evaluation_rows_) {
      if (rows->columns.empty()) {
        rows->columns = {"evaluation_id", "model", "series", "level", "evaluated", "window",
                         "detectors"};
      }
      for (const SharedEvaluation& evaluation : evaluations_) {
        rows->Add(evaluation->model, EvaluationToJson(*evaluation));
      }
    }
  }

  // Every segment of the model starts over.
  bool ResetBaselines(const std::string& model) {
    if (!monitor_) return false;
    if (segment_columns_.empty()) return monitor_->ResetBaselines(model);
    bool any = false;
    for (const std::string& monitor_name : names_) {
      std::string base;
      Name(monitor_name, &base, nullptr);
      if (base == model) any = monitor_->ResetBaselines(monitor_name) || any;
    }
    return any;
  }

  Result<std::string> ExportReference() const {
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

  const std::vector<AlertEvent>& LastEvents() const { return events_; }
  const std::vector<SharedEvaluation>& LastEvaluations() const { return evaluations_; }
  std::vector<SharedEvaluation> LatestEvaluations() const {
    std::vector<SharedEvaluation> out;
    out.reserve(latest_.size());
    for (const auto& [key, evaluation] : latest_) out.push_back(evaluation);
    return out;
  }

  Status FinishRestore() {
    if (!restored_admits_.empty() && !monitor_) {
      return MakeError(ErrorCode::kCorruption,
                       "drift: the checkpoint has models' admitted segments and keys but no "
                       "series layout");
    }
    for (const auto& [key, value] : restored_admits_) DRIFTD_TRY(RestoreAdmit(key, value));
    restored_admits_.clear();
    return monitor_ ? monitor_->FinishRestore() : Ok();
  }

  void CollectDirty(std::vector<std::pair<std::string, std::string>>& puts,
                    std::vector<std::string>& deletes, StageProgress& progress) {
    const size_t first_put = puts.size();
    // In key order, each series once (a batch may close several windows of one).
    std::sort(dirty_evaluations_.begin(), dirty_evaluations_.end(),
              [](LatestMap::iterator a, LatestMap::iterator b) { return a->first < b->first; });
    dirty_evaluations_.erase(std::unique(dirty_evaluations_.begin(), dirty_evaluations_.end()),
                             dirty_evaluations_.end());
    for (LatestMap::iterator it : dirty_evaluations_) {
      puts.emplace_back(fmt::format("{}{}/{}", kEvaluationPrefix, EscapeKeyPart(it->first.first),
                                    EscapeKeyPart(it->first.second)),
                        EncodeEvaluation(*it->second));
    }
    dirty_evaluations_.clear();
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
    for (size_t i = first_put; i < puts.size(); ++i) {
      progress.state_dirty_bytes += static_cast<int64_t>(puts[i].second.size());
    }
    monitor_->CollectDirty(puts, deletes);
    progress.state_dirty_bytes += monitor_->last_write().dirty_bytes;
    progress.drift_dirty_series += monitor_->last_write().dirty_series;
    progress.drift_dirty_bytes += monitor_->last_write().dirty_bytes;
    progress.drift_put_bytes += monitor_->last_write().put_bytes;
  }

 private:
  // What the series are: array widths, map keys, and the segment columns state is keyed by.
  struct Layout {
    std::vector<size_t> widths;                  // per series column (arrays)
    std::vector<std::vector<std::string>> keys;  // per series column (maps), in name order
    std::vector<std::string> segments;
    bool versioned = true;  // false: read from a version-1 layout (no keys, no segments)
  };

  Result<Layout> ParseLayout(std::string_view value) const {
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

  // Whether the checkpoint's segments fit the pipeline's. A checkpoint written before drift
  // had segments keeps drift per model when segments would only come from groupBy (so that
  // its state and alert ids carry on); segments the file names must match.
  Status SegmentsOf(const Layout& layout) {
    if (layout.segments == spec_.segment_by) return Ok();
    if (!layout.versioned && !spec_.segment_by_given) {
      GetLogger("engine")->warn(
          "drift: the checkpoint keeps drift per model, written before drift was kept per "
          "(model, segment); it stays per model. Drift per ({}) needs a new checkpoint (or set "
          "drift.segmentBy: [] to say per model)",
          fmt::join(spec_.segment_by, ", "));
      segment_columns_.clear();
      active_segments_.clear();
      return Ok();
    }
    auto show = [](const std::vector<std::string>& columns) {
      return columns.empty() ? std::string("none")
                             : fmt::format("{}", fmt::join(columns, ", "));
    };
    return MakeError(ErrorCode::kIncompatible,
                     "the checkpoint's drift state is kept per model and segment of ({}), the "
                     "pipeline's per ({}); start a new checkpoint",
                     show(layout.segments), show(spec_.segment_by));
  }

  std::string EncodeLayout() const {
    std::string out(1, kLayoutVersion2);
    drift::ByteWriter w(out);
    w.U32(static_cast<uint32_t>(columns_.size()));
    for (const SeriesColumn& column : columns_) {
      w.U32(static_cast<uint32_t>(column.width));
      if (!column.is_map) continue;
      w.U32(static_cast<uint32_t>(column.keys.size()));
      for (uint32_t key : column.keys) w.Str(keys_[key].name);
    }
    w.U32(static_cast<uint32_t>(active_segments_.size()));
    for (const std::string& name : active_segments_) w.Str(name);
    return out;
  }

  // The array lengths come from the data: the first non-null value of each array column.
  Layout LayoutOf(const RecordBatch& batch) const {
    Layout layout;
    layout.keys.resize(columns_.size());
    layout.segments = active_segments_;
    for (const SeriesColumn& series : columns_) {
      size_t width = 1;
      if (series.is_array) {
        width = 0;
        const Column& column = batch.columns[series.column];
        for (size_t row = 0; row < batch.num_rows && width == 0; ++row) {
          if (!column.IsNull(row)) width = column.ArraySize(row);
        }
      }
      layout.widths.push_back(series.is_map ? 0 : width);
    }
    return layout;
  }

  // ---- Models and segments ------------------------------------------------------------------

  // The name the monitor knows a row's model by: the model's, or with segments
  // "<model>\x1f<value>\x1f<value>..." (values escaped, null "%00"), so that each segment has
  // state and alert ids of its own while a pipeline without segments keeps its names.
  void MonitorName(const RecordBatch& batch, size_t row, std::string_view model,
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

  // The model and the segment ("region=eu,channel=app"; empty without segments) of a name the
  // monitor knows.
  void Name(std::string_view monitor_name, std::string* model, std::string* segment) const {
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

  // A model as the caps count it, whatever its segments.
  struct Base {
    std::string name;
    std::vector<uint32_t> segments;  // monitor ids of its segments
    std::vector<uint8_t> keys;       // by key id: watched for this model
    int64_t key_count = 0;
    bool warned_segments = false;
    bool warned_keys = false;
    bool dirty = false;
  };

  uint32_t BaseOf(std::string_view name) {
    auto it = base_ids_.find(name);
    if (it != base_ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(bases_.size());
    base_ids_.emplace(std::string(name), id);
    bases_.push_back(Base{std::string(name), {}, {}, 0, false, false, false});
    return id;
  }

  void MarkBaseDirty(uint32_t base) {
    if (!bases_[base].dirty) {
      bases_[base].dirty = true;
      dirty_bases_.push_back(base);
    }
  }

  // Lets a new segment of `base` in (true), or counts it out once the model has
  // maxSegmentsPerModel.
  bool AdmitSegment(uint32_t base, const std::string& monitor_name) {
    Base& b = bases_[base];
    if (static_cast<int64_t>(b.segments.size()) >= spec_.max_segments_per_model) {
      if (!b.warned_segments) {
        b.warned_segments = true;
        GetLogger("engine")->warn(
            "drift: model '{}' has drift.maxSegmentsPerModel ({}) segments; rows of its further "
            "segments are counted (driftRowsOverSegmentCap), not watched",
            b.name, spec_.max_segments_per_model);
      }
      return false;
    }
    const uint32_t id = Intern(monitor_name);
    b.segments.push_back(id);
    if (id >= monitor_base_.size()) monitor_base_.resize(id + 1, UINT32_MAX);
    monitor_base_[id] = base;
    MarkBaseDirty(base);
    return true;
  }

  // ---- Map keys -----------------------------------------------------------------------------

  static constexpr uint32_t kNoKey = UINT32_MAX;
  // A key of a map series column, watched: a series of its own ("features.amount").
  struct MapKey {
    size_t column = 0;  // into columns_
    std::string name;
    size_t series = 0;  // its monitor series
  };
  // A map series column's keys by name, and the key last seen at each position of a record's
  // map (producers write their keys in one order, so most lookups compare one string).
  struct KeySlot {
    size_t column = 0;
    std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> ids;
    std::vector<uint32_t> at_position;
  };

  KeySlot& SlotOf(size_t column) {
    for (KeySlot& slot : key_slots_) {
      if (slot.column == column) return slot;
    }
    return key_slots_.front();  // unreachable: every map column has a slot
  }

  uint32_t KeyId(size_t column, std::string_view name) {
    KeySlot& slot = SlotOf(column);
    auto it = slot.ids.find(name);
    return it == slot.ids.end() ? kNoKey : it->second;
  }

  // The key at `position` of a row's map, by the position's last key or by name.
  uint32_t LookupKey(KeySlot& slot, size_t position, std::string_view name) {
    if (position < slot.at_position.size()) {
      const uint32_t cached = slot.at_position[position];
      if (cached != kNoKey && keys_[cached].name == name) return cached;
    }
    auto it = slot.ids.find(name);
    if (it == slot.ids.end()) return kNoKey;
    if (position >= slot.at_position.size()) slot.at_position.resize(position + 1, kNoKey);
    slot.at_position[position] = it->second;
    return it->second;
  }

  // Makes `name` a series of map column `column`, placed among the column's keys by name, so
  // that the order of series does not depend on the order keys came in.
  uint32_t WatchKey(size_t column, const std::string& name) {
    SeriesColumn& series = columns_[column];
    const auto id = static_cast<uint32_t>(keys_.size());
    keys_.push_back(MapKey{column, name, 0});
    SlotOf(column).ids.emplace(name, id);
    const auto at = std::lower_bound(
        series.keys.begin(), series.keys.end(), name,
        [&](uint32_t key, const std::string& n) { return keys_[key].name < n; });
    const size_t position = static_cast<size_t>(at - series.keys.begin());
    series.keys.insert(at, id);
    const std::string series_name =
        fmt::format("{}.{}", schema_.fields[series.column].name, name);
    const size_t index = series.first_series + position;
    monitor_->InsertSeries(index, series_name, series.kind);
    kinds_.insert(kinds_.begin() + static_cast<ptrdiff_t>(index), series.kind);
    missing_values_.insert(missing_values_.begin() + static_cast<ptrdiff_t>(index), 0);
    category_values_.insert(category_values_.begin() + static_cast<ptrdiff_t>(index), 0);
    Relayout();
    layout_dirty_ = true;
    return id;
  }

  // Series indices after a key was added: each column's first series and each key's.
  void Relayout() {
    size_t next = 0;
    for (SeriesColumn& series : columns_) {
      series.first_series = next;
      if (series.is_map) {
        series.width = series.keys.size();
        for (size_t k = 0; k < series.keys.size(); ++k) keys_[series.keys[k]].series = next + k;
      }
      next += series.width;
    }
    // The data-quality series follow the value series (CreateMonitor).
    for (SeriesColumn& series : columns_) {
      if (series.missing != kNoSeries) series.missing = next++;
    }
    if (malformed_series_ != kNoSeries) malformed_series_ = next++;
  }

  bool Watched(uint32_t base, uint32_t key) const {
    const std::vector<uint8_t>& keys = bases_[base].keys;
    return key < keys.size() && keys[key] != 0;
  }

  // Lets key `name` of map column `column` in for model `base` (true), or counts it out once
  // the model has maxKeysPerModel keys, or the pipeline maxKeys.
  bool AdmitKey(uint32_t base, size_t column, std::string_view name) {
    Base& b = bases_[base];
    uint32_t key = KeyId(column, name);
    if (key != kNoKey && Watched(base, key)) return true;
    const bool over_model = b.key_count >= spec_.max_keys_per_model;
    const bool over_pipeline =
        key == kNoKey && static_cast<int64_t>(keys_.size()) >= spec_.max_keys;
    if (over_model || over_pipeline) {
      if (!b.warned_keys) {
        b.warned_keys = true;
        GetLogger("engine")->warn(
            "drift: model '{}' has {} map keys ({}); values of its further keys are counted "
            "(driftValuesOverKeyCap), not watched",
            b.name, over_model ? b.key_count : static_cast<int64_t>(keys_.size()),
            over_model ? "drift.maxKeysPerModel" : "drift.maxKeys over all models");
      }
      return false;
    }
    if (key == kNoKey) key = WatchKey(column, std::string(name));
    if (key >= b.keys.size()) b.keys.resize(key + 1, 0);
    b.keys[key] = 1;
    ++b.key_count;
    MarkBaseDirty(base);
    return true;
  }

  std::string EncodeAdmit(Base& base) const {
    base.dirty = false;
    std::string out;
    drift::ByteWriter w(out);
    w.U8(kAdmitVersion);
    w.U32(static_cast<uint32_t>(base.segments.size()));
    for (uint32_t id : base.segments) w.Str(names_[id]);
    w.U32(static_cast<uint32_t>(base.key_count));
    for (uint32_t key = 0; key < base.keys.size(); ++key) {
      if (base.keys[key] == 0) continue;
      w.U32(static_cast<uint32_t>(keys_[key].column));
      w.Str(keys_[key].name);
    }
    return out;
  }

  Status RestoreAdmit(std::string_view escaped, std::string_view value) {
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

  // ---- Categorical values and null values -------------------------------------------------
  // Categorical values (string columns, array<string> elements, map<string,string> values) go
  // to the monitor's categorical series; null values of a series are counted per series (a
  // column's missing-value series is fed in Feed, per record). SeriesValueCounts reports both.
  template <bool kReference>
  void ObserveCategory(uint32_t model, const std::string& model_name, size_t series,
                       std::string_view category, int64_t event_time_us,
                       int64_t late_before_us) {
    if constexpr (kReference) {
      monitor_->ObserveReferenceCategory(model, model_name, series, category);
    } else {
      ++category_values_[series];
      monitor_->ObserveCategory(model, model_name, series, category, event_time_us,
                                late_before_us);
    }
  }

  template <bool kReference>
  void ObserveMissing(uint32_t, const std::string&, size_t series, int64_t, int64_t) {
    if constexpr (!kReference) ++missing_values_[series];
  }

  // ---- Feeding the monitor ------------------------------------------------------------------

  // Each row's monitor model id (kNoModel: no model, or a segment over the cap). New segments
  // are let in by name within the batch, so which ones a capped model keeps does not depend on
  // the order of a batch's rows.
  static constexpr uint32_t kNoModel = UINT32_MAX;
  void ModelsOf(const RecordBatch& batch) {
    const Column& models = batch.columns[model_column_];
    row_models_.assign(batch.num_rows, kNoModel);
    if (model_keys_) {
      // The ids the aggregation looked up already (or looks up for both).
      const std::vector<uint32_t>& ids = model_keys_->Ids(batch);
      SyncNames();
      for (size_t row = 0; row < batch.num_rows; ++row) {
        if (!models.IsNull(row)) row_models_[row] = ids[row];
      }
      return;
    }
    std::vector<std::pair<std::string, size_t>> fresh;  // (monitor name, first row)
    for (size_t row = 0; row < batch.num_rows; ++row) {
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

  uint32_t BaseOfModel(uint32_t model) {
    if (model < monitor_base_.size() && monitor_base_[model] != UINT32_MAX) {
      return monitor_base_[model];
    }
    std::string base_name;
    Name(names_[model], &base_name, nullptr);
    const uint32_t base = BaseOf(base_name);
    if (model >= monitor_base_.size()) monitor_base_.resize(model + 1, UINT32_MAX);
    monitor_base_[model] = base;
    return base;
  }

  // The keys of the batch's maps that their models do not watch yet, let in by name (per
  // model, column and key), so that the series a capped model gets do not depend on the order
  // of a batch's rows, and every value of this batch reaches its series.
  void KeysOf(const RecordBatch& batch) {
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

  // The batch's rows grouped by model when it has many models (more than kGroupAbove): the
  // models in the order their first rows come, each model's rows in order, linked by
  // next_row_. Feed then observes a model's rows one after another, while its state is in
  // cache (with thousands of models, state read once a row costs a cache miss a series).
  // Models are independent and the monitor puts events back in record order (AtRecord), so
  // the results are those of observing the rows in order. False: feed in row order.
  static constexpr size_t kGroupAbove = 64;
  static constexpr uint32_t kNoRow = UINT32_MAX;
  bool GroupRowsByModel(size_t num_rows) {
    model_first_rows_.clear();
    next_row_.resize(num_rows);
    for (size_t row = 0; row < num_rows; ++row) {
      const uint32_t model = row_models_[row];
      if (model == kNoModel) continue;
      if (model >= last_row_of_.size()) last_row_of_.resize(static_cast<size_t>(model) + 1, kNoRow);
      next_row_[row] = kNoRow;
      uint32_t& last = last_row_of_[model];
      if (last == kNoRow) {
        model_first_rows_.push_back(static_cast<uint32_t>(row));
      } else {
        next_row_[last] = static_cast<uint32_t>(row);
      }
      last = static_cast<uint32_t>(row);
    }
    for (uint32_t first : model_first_rows_) last_row_of_[row_models_[first]] = kNoRow;
    return model_first_rows_.size() > kGroupAbove;
  }

  // Every record of `batch` to the monitor: as stream values, or (kReference) as reference
  // values of a file baseline.
  template <bool kReference>
  void Feed(const RecordBatch& batch, const RowTimes* times, int64_t now_us) {
    ModelsOf(batch);
    KeysOf(batch);
    if (!GroupRowsByModel(batch.num_rows)) {
      for (size_t row = 0; row < batch.num_rows; ++row) {
        if (row_models_[row] != kNoModel) FeedRow<kReference>(batch, row, times, now_us);
      }
      return;
    }
    const size_t models = model_first_rows_.size();
    for (size_t i = 0; i < models; ++i) {
      // The state of the next three models on its way into cache.
      for (int step = 0; step < 3; ++step) {
        if (i + 3 - step < models) {
          monitor_->Prefetch(row_models_[model_first_rows_[i + 3 - step]], step);
        }
      }
      for (uint32_t row = model_first_rows_[i]; row != kNoRow; row = next_row_[row]) {
        FeedRow<kReference>(batch, row, times, now_us);
      }
    }
  }

  // One record (of a model) to the monitor.
  template <bool kReference>
  void FeedRow(const RecordBatch& batch, size_t row, const RowTimes* times, int64_t now_us) {
    const uint32_t model = row_models_[row];
    const std::string& name = names_[model];
    if constexpr (!kReference) monitor_->AtRecord(row);
    if (track_partitions_ && !kReference) NotePartition(model, batch.positions[row].partition);
    const int64_t late_before = times ? times->late_before[row] : INT64_MIN;
    // Event-time windows need the record's own time; record-count windows date a record
    // without one by the batch's processing time.
    int64_t event_time = window_ms_ > 0 ? INT64_MIN : now_us;
    if (time_column_ >= 0 && !batch.columns[time_column_].IsNull(row)) {
      event_time = batch.columns[time_column_].i64[row];
    }
    auto observe = [&](size_t series, double value) {
      if constexpr (kReference) {
        monitor_->ObserveReference(model, name, series, value);
      } else {
        monitor_->Observe(model, name, series, value, event_time, late_before);
      }
    };
    auto flag = [&](size_t series, bool flagged) {
      if constexpr (kReference) {
        monitor_->ObserveReferenceFlag(model, name, series, flagged);
      } else {
        monitor_->ObserveFlag(model, name, series, flagged, event_time, late_before);
      }
    };
    for (size_t c = 0; c < columns_.size(); ++c) {
      const SeriesColumn& series = columns_[c];
      const Column& column = batch.columns[series.column];
      if (column.IsNull(row)) {
        if (series.missing != kNoSeries) flag(series.missing, true);
        if (!series.is_array && !series.is_map) {
          ObserveMissing<kReference>(model, name, series.first_series, event_time, late_before);
        }
        continue;
      }
      if (series.is_map) {
        if (series.missing != kNoSeries) flag(series.missing, false);
        FeedMap<kReference>(c, column, row, model, name, event_time, late_before, observe);
        continue;
      }
      switch (series.type) {
        case FieldType::kDouble:
          if (series.missing != kNoSeries) flag(series.missing, false);
          observe(series.first_series, column.f64[row]);
          break;
        case FieldType::kString:
          if (series.missing != kNoSeries) flag(series.missing, false);
          ObserveCategory<kReference>(model, name, series.first_series, column.String(row),
                                      event_time, late_before);
          break;
        case FieldType::kStringArray:
          if (series.missing != kNoSeries) flag(series.missing, false);
          for (size_t e = column.EntryBegin(row); e < column.EntryEnd(row); ++e) {
            if (column.EntryNull(e)) {
              ObserveMissing<kReference>(model, name, series.first_series, event_time,
                                         late_before);
            } else {
              ObserveCategory<kReference>(model, name, series.first_series, column.String(e),
                                          event_time, late_before);
            }
          }
          break;
        case FieldType::kDoubleArray: {
          // An array shorter than its series' width misses its last elements.
          const size_t size = std::min(column.ArraySize(row), series.width);
          if (series.missing != kNoSeries) flag(series.missing, size < series.width);
          const double* data = column.ArrayData(row);
          if constexpr (kReference) {
            for (size_t e = 0; e < size; ++e) observe(series.first_series + e, data[e]);
          } else {
            monitor_->Observe(model, name, series.first_series,
                              std::span<const double>(data, size), event_time, late_before);
          }
          break;
        }
        default:  // long, int
          if (series.missing != kNoSeries) flag(series.missing, false);
          observe(series.first_series, static_cast<double>(column.i64[row]));
          break;
      }
    }
    // Reference records are never malformed (they are read with the fail policy): the
    // malformed series warms up on the stream.
    if (!kReference && malformed_series_ != kNoSeries) {
      flag(malformed_series_, batch.positions[row].malformed);
    }
    if (prediction_column_ >= 0 && label_column_ >= 0) {
      const Column& prediction = batch.columns[prediction_column_];
      const Column& label = batch.columns[label_column_];
      if (!prediction.IsNull(row) && !label.IsNull(row)) {
        auto value = [&](const Column& c) {
          return c.type == FieldType::kDouble ? c.f64[row] : static_cast<double>(c.i64[row]);
        };
        if constexpr (kReference) {
          monitor_->ObserveReferenceLabel(model, name, value(prediction), value(label));
        } else {
          monitor_->ObserveLabel(model, value(prediction), value(label), event_time);
        }
      }
    }
  }

  // One row's map: each watched key's value to its series (a null value is missing); values of
  // keys the model does not watch (over a cap) are counted.
  template <bool kReference, typename Observe>
  void FeedMap(size_t c, const Column& column, size_t row, uint32_t model,
               const std::string& name, int64_t event_time, int64_t late_before,
               Observe& observe) {
    KeySlot& slot = SlotOf(c);
    const uint32_t base = BaseOfModel(model);
    const size_t begin = column.EntryBegin(row);
    for (size_t e = begin; e < column.EntryEnd(row); ++e) {
      const uint32_t key = LookupKey(slot, e - begin, column.Key(e));
      if (key == kNoKey || !Watched(base, key)) {
        ++batch_counts_.values_over_key_cap;
        ++counts_.values_over_key_cap;
        continue;
      }
      const size_t series = keys_[key].series;
      if (column.EntryNull(e)) {
        ObserveMissing<kReference>(model, name, series, event_time, late_before);
      } else if (column.type == FieldType::kDoubleMap) {
        observe(series, column.f64[e]);
      } else {
        ObserveCategory<kReference>(model, name, series, column.String(e), event_time,
                                    late_before);
      }
    }
  }

  Status CreateMonitor(const Layout& layout) {
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
    kinds_.clear();
    for (const SeriesDef& def : defs) kinds_.push_back(def.kind);
    missing_values_.assign(defs.size(), 0);
    category_values_.assign(defs.size(), 0);
    auto monitor = DriftMonitor::Create(spec_, defs);
    if (!monitor) return tl::unexpected(monitor.error());
    monitor_ = std::move(*monitor);
    monitor_->CollectEvaluations(true);
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

  // Record-count windows of a model read from two partitions depend on how reads interleave.
  void NotePartition(uint32_t model, uint32_t partition) {
    if (model >= model_partition_.size()) model_partition_.resize(model + 1, UINT32_MAX);
    uint32_t& first = model_partition_[model];
    if (first == UINT32_MAX) {
      first = partition;
    } else if (first != partition && first != kSpansPartitions) {
      first = kSpansPartitions;
      ++models_across_partitions_;
      GetLogger("engine")->warn(
          "drift: model '{}' has records in more than one Kafka partition: its record-count "
          "windows (drift.windowRecords) then depend on batching and read order. Key the input "
          "records by model, or use event-time windows (query.window) for results that do not",
          names_[model]);
    }
  }

  // The model's dense id: one hash lookup of the record's bytes (no copy), none when the
  // record is of the same model as the one before. With `model_keys_`, its ids: the monitor's
  // ids must come from one place.
  uint32_t Intern(std::string_view name) {
    if (model_keys_) {
      const uint32_t id = model_keys_->Intern(name);
      SyncNames();
      return id;
    }
    if (last_id_ != UINT32_MAX && name == names_[last_id_]) return last_id_;
    auto it = ids_.find(name);
    if (it == ids_.end()) {
      it = ids_.emplace(std::string(name), static_cast<uint32_t>(names_.size())).first;
      names_.emplace_back(name);
    }
    last_id_ = it->second;
    return last_id_;
  }

  // names_ and ids_ for the ids model_keys_ gave since the last call.
  void SyncNames() {
    while (names_.size() < model_keys_->size()) {
      const auto id = static_cast<uint32_t>(names_.size());
      names_.push_back(model_keys_->Name(id));
      ids_.emplace(names_.back(), id);
    }
  }

  DriftSpec spec_;
  std::vector<MetadataColumn> metadata_columns_;  // the metadata columns of schema_
  Schema schema_;        // the query's columns (engine/pipeline_spec.h QuerySchema)
  Schema input_schema_;  // the declared schema, for reference records
  std::unique_ptr<Projection> projection_;
  int64_t max_array_length_ = 4096;
  int model_column_ = -1;
  int time_column_ = -1;
  int prediction_column_ = -1;
  int label_column_ = -1;
  // Event-time windows (the query's tumbling window); 0: record-count windows.
  int64_t window_ms_ = 0;
  int64_t restored_max_us_ = INT64_MIN;
  int64_t restored_watermark_us_ = INT64_MIN;
  bool track_partitions_ = false;
  static constexpr uint32_t kSpansPartitions = UINT32_MAX - 1;
  /// Record position partition of each model's first record, kSpansPartitions once it had two.
  std::vector<uint32_t> model_partition_;
  int64_t models_across_partitions_ = 0;
  std::vector<SeriesColumn> columns_;
  bool watch_missing_ = false;
  bool watch_malformed_ = false;
  size_t malformed_series_ = kNoSeries;
  /// Per monitor series: numeric or categorical, and (until the monitor watches them) the
  /// categorical values and the null values the seams above took.
  std::vector<SeriesKind> kinds_;
  std::vector<int64_t> category_values_;
  std::vector<int64_t> missing_values_;
  std::vector<MapKey> keys_;       // watched map keys, by id
  std::vector<KeySlot> key_slots_;  // one per map series column
  /// Segments: the columns (indices into schema_) and their names as the state was keyed by
  /// (empty: per model, also for a checkpoint written before segments).
  std::vector<int> segment_columns_;
  std::vector<std::string> active_segments_;
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> base_ids_;
  std::vector<Base> bases_;
  std::vector<uint32_t> monitor_base_;  // by monitor id
  std::vector<uint32_t> dirty_bases_;
  std::vector<std::pair<std::string, std::string>> restored_admits_;
  std::vector<uint32_t> row_models_;  // per row of the batch being fed
  // GroupRowsByModel: the first row of each model, the next row of a row's model, and (by
  // model, kNoRow between batches) the last row seen.
  std::vector<uint32_t> model_first_rows_;
  std::vector<uint32_t> next_row_;
  std::vector<uint32_t> last_row_of_;
  std::string composite_;
  DriftStage::ShapeCounts counts_;        // since start
  DriftStage::ShapeCounts batch_counts_;  // this batch
  std::unique_ptr<DriftMonitor> monitor_;
  bool layout_dirty_ = false;
  /// The query's model ids, shared with the aggregation (per model only, no segments): ids_
  /// and names_ follow its ids.
  std::shared_ptr<KeyInterner> model_keys_;
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> ids_;
  std::vector<std::string> names_;  // by id
  uint32_t last_id_ = UINT32_MAX;
  std::string name_;
  std::vector<AlertEvent> events_;
  std::vector<SharedEvaluation> evaluations_;
  bool want_evaluation_rows_ = false;
  /// By (the model as the monitor knows it, series); entries are never removed, so the dirty
  /// list may hold iterators.
  using LatestMap = std::map<std::pair<std::string, std::string>, SharedEvaluation>;
  LatestMap latest_;
  std::vector<LatestMap::iterator> dirty_evaluations_;
};

Result<std::unique_ptr<DriftStage>> DriftStage::Create(const PipelineSpec& spec,
                                                      std::shared_ptr<KeyInterner> keys) {
  auto impl = std::make_unique<Impl>();
  DRIFTD_TRY(impl->Init(spec, std::move(keys)));
  return std::unique_ptr<DriftStage>(new DriftStage(std::move(impl)));
}

DriftStage::DriftStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DriftStage::~DriftStage() = default;

Status DriftStage::Restore(std::string_view key, std::string_view value) {
  return impl_->Restore(key, value);
}
void DriftStage::Process(const RecordBatch& batch, const RowTimes& times, BatchOutput&) {
  impl_->Observe(batch, times);
}
bool DriftStage::HasClosableWindows(int64_t watermark_us) const {
  return impl_->HasClosableWindows(watermark_us);
}
int64_t DriftStage::ModelsAcrossPartitions() const { return impl_->ModelsAcrossPartitions(); }
const DriftStage::ShapeCounts& DriftStage::Counts() const { return impl_->Counts(); }
std::vector<DriftStage::SeriesValues> DriftStage::SeriesValueCounts() const {
  return impl_->SeriesValueCounts();
}
std::vector<DriftMonitor::ModelStats> DriftStage::ModelStats() const {
  return impl_->ModelStats();
}
DriftMonitorStats DriftStage::Stats() const { return impl_->Stats(); }
const std::vector<AlertEvent>& DriftStage::LastEvents() const { return impl_->LastEvents(); }
bool DriftStage::ResetBaselines(const std::string& model) { return impl_->ResetBaselines(model); }

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
const std::vector<SharedEvaluation>& DriftStage::LastEvaluations() const {
  return impl_->LastEvaluations();
}
std::vector<SharedEvaluation> DriftStage::LatestEvaluations() const {
  return impl_->LatestEvaluations();
}
void DriftStage::Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
                        StageProgress& progress) {
  impl_->Evaluate(context, output.alerts, &output.evaluations);
  impl_->CollectDirty(changes.puts, changes.deletes, progress);
}
Status DriftStage::FinishRestore() { return impl_->FinishRestore(); }

}  // namespace driftd
