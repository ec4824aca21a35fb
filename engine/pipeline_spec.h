// The typed form of a pipeline file: what a query is. config/ parses and validates YAML into a PipelineSpec;
// everything downstream (executor, connectors, drift) reads only these structs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/metadata_columns.h"
#include "engine/options.h"
#include "engine/schema.h"

namespace driftd {

/// A place in the pipeline file, 1-based. line == 0 means "not from a file" (defaults).
struct SourceMark {
  int line = 0;
  int column = 0;
};

enum class MalformedPolicy {
  kPermissive,  // bad fields become null; the record is kept and counted
  kDrop,        // the record is dropped and counted
  kFail,        // the query stops with an error naming the record's position
  kDeadLetter,  // raw bytes + reason go to the dead_letter stream, counted
};

struct MalformedSpec {
  /// Default: permissive (as Spark's JSON reader).
  MalformedPolicy policy = MalformedPolicy::kPermissive;
  /// Records larger than this are malformed (reason too_large). Default: 1 MiB.
  int64_t max_record_bytes = 1 << 20;
  /// JSON nesting deeper than this is malformed (reason too_deep). Default: 64.
  int max_depth = 64;
  /// An array<double> value with more elements is malformed (reason too_large): every element
  /// is a drift series with state of its own, so this bounds memory and state per record and
  /// per model. Default: 4096 (embeddings of up to 4096 dimensions).
  int64_t max_array_length = 4096;
  /// A string value longer than this in a column that keys the query's state (the model
  /// column, segmentBy and groupBy columns) makes the record malformed (reason too_large), under
  /// every policy: a key is held in memory, in every state key and in every output row of its
  /// model, so one huge value would make rows no sink can take. Default: 1 KiB.
  int64_t max_key_bytes = 1024;
};

struct SourceSpec {
  std::string format;  // a source kind's name (connectors/registry.h): kafka, file, rate, ...
  Options options;     // validated against the connector's declaration, defaults filled in
  /// What the kind is, from its declaration (config/ copies it; a spec built by hand sets it).
  SourceTraits traits;
  /// The options that say which data it reads (OptionDecl::identity), for the checkpoint's
  /// fingerprint; config/ copies them from the declaration.
  std::vector<std::string> identity_options;
  /// The options as the connector's bind made them, once, at load (ConnectorDecl::bind);
  /// empty for a spec built without config/, which the connector then binds when created.
  BoundOptions bound;
  MalformedSpec malformed;
  /// How each record's bytes are decoded: the name of a value format (engine/value_decoder.h).
  /// Default: "json".
  std::string value_format = "json";
  /// source.valueOptions, validated against the value format's declaration, defaults filled in.
  Options value_options;
  /// The value options as the format's bind made them, once, at load (ValueFormatDecl::bind);
  /// empty for a spec built without config/, whose options are bound when the decoder is made.
  BoundOptions value_bound;
  SourceMark value_format_mark;
  std::map<std::string, SourceMark> value_option_marks;
  SourceMark mark;
  /// Where each option given in the file is, for problems found after loading (the
  /// connectors' own checks). Options filled in from defaults have none.
  std::map<std::string, SourceMark> option_marks;
};

enum class AggregateFn { kCount, kSum, kMean, kStddev, kVariance, kMin, kMax, kApproxPercentile };

struct AggregateSpec {
  AggregateFn fn = AggregateFn::kCount;
  /// approx_percentile / percentile_approx (Spark's names and arguments): the fractions asked
  /// for, each in [0, 1]; `percentage_array` when written as array(...), so the result is an
  /// array; `accuracy` as Spark's (1 / accuracy is the stated rank error), in
  /// [1, QuantileSketch::kMaxAccuracy]. Default: 10000.
  std::vector<double> percentages;
  bool percentage_array = false;
  int64_t accuracy = 10000;
  /// Column aggregated; empty for count(*). An array<double> column aggregates per element.
  std::string column;
  /// Output column name as Spark prints it: "count", "mean(prediction)", "stddev(x)".
  std::string output_name;
  SourceMark mark;
};

/// Tumbling (slide == size) or sliding event-time window on a timestamp column.
struct WindowSpec {
  std::string column;
  int64_t size_ms = 0;
  int64_t slide_ms = 0;
  SourceMark mark;
};

struct WatermarkSpec {
  std::string column;
  int64_t delay_ms = 0;
  SourceMark mark;
  /// Processing time after which an input partition with nothing to read stops holding the
  /// watermark back (engine/executor/event_clock.h); 0: never. Default: 1 minute.
  int64_t idle_timeout_ms = 60'000;
};

/// A column computed from others: a select item "expression AS name" (engine/expr/expr.h).
struct DerivedColumnSpec {
  std::string name;
  /// The whole select item as written, "abs(prediction - ground_truth) AS abs_error".
  std::string text;
  /// The expression's type, found when the file was validated.
  FieldType type = FieldType::kDouble;
  SourceMark mark;
};

enum class ModelOverflow {
  kDrop,   // the row is counted and left out
  kOther,  // the row is counted and kept under the model "(other)"
};

struct QuerySpec {
  /// query.where: a boolean expression; a row for which it is not TRUE is filtered out before
  /// every stage (counted as filtered, never as malformed). Empty: every row. Default: empty.
  std::string where;
  SourceMark where_mark;
  /// The source's metadata columns the query reads (key, partition, ...: engine/
  /// metadata_columns.h), in MetadataColumnDefs() order. Only these are produced; they follow
  /// the schema's fields. Found by config from every place a column is named. Default: none.
  std::vector<MetadataColumn> metadata;
  /// The select items with AS, in order. Every stage (groupBy, aggregates, drift, the output
  /// of a plain select) sees them as columns after the schema's own.
  std::vector<DerivedColumnSpec> derived;
  /// Key columns (e.g. model_id). An aggregation query has group_by and/or aggregates.
  std::vector<std::string> group_by;
  std::optional<WindowSpec> window;
  std::vector<AggregateSpec> aggregates;
  std::optional<WatermarkSpec> watermark;
  /// For a non-aggregation query: the columns to emit, schema or derived (empty: every schema
  /// column).
  std::vector<std::string> select;
  /// Models (values of the model column: drift's, else the first groupBy column) the query
  /// keeps state for; rows of further models are handled by `model_overflow` and counted, so
  /// that no producer can grow memory, state and metrics without bound (engine/executor/
  /// model_gate.h). Scaled out, each task takes its share. Default: 100'000.
  int64_t max_models = 100'000;
  SourceMark max_models_mark;
  /// What happens to a row of a model over max_models: kDrop (counted, not aggregated nor
  /// watched) or kOther (counted, and kept under the model "(other)"). Default: kDrop.
  ModelOverflow model_overflow = ModelOverflow::kDrop;

  bool IsAggregation() const { return !aggregates.empty() || !group_by.empty() || window; }
};

enum class BaselineKind {
  kWarmup,    // the first N records or the first T of event time per model
  kFile,      // reference statistics or records loaded at start
  kTrailing,  // the previous K windows
  kSeasonal,  // the same phase of a period (event-time windows), from the first cycles
};

struct BaselineSpec {
  BaselineKind kind = BaselineKind::kWarmup;
  /// warmup: values per series (labeled records for the error series) that form the baseline;
  /// seasonal: values that fix the bins. Default: 5000.
  int64_t records = 5000;
  /// warmup: event time span instead of a record count (0 = use records). Default: 0.
  int64_t duration_ms = 0;
  /// file: path to reference statistics or records.
  std::string path;
  /// file: the bytes of that file, read by config/ when the pipeline loads
  /// (LoadOptions::read_references), so the drift stage does no file I/O and `validate` reads it
  /// as `run` does. Null when the spec was not loaded so.
  std::shared_ptr<const std::string> reference;
  /// trailing: number of previous windows. Default: 3.
  int windows = 3;
  /// seasonal: length of the cycle (a multiple of the query window's size), and how many whole
  /// cycles of windows form each phase's baseline. Default: unset (required), 2.
  int64_t period_ms = 0;
  int cycles = 2;
  SourceMark mark;
};

/// A drift detector: its position in the detector registry (engine/drift/detectors.h,
/// DetectorDefaultsTable). The built-in detectors that code names are spelled here; a detector
/// registered later needs no name here, it is found by its registered name
/// (ParseDetectorKind).
enum class DetectorKind {
  kMeanShift,
  kStddevRatio,
  kPsi,
  kJensenShannon,
  kKs,
  kCusum,
  kErrorRate,
  // Categorical series (string columns).
  kChiSquare,
  kUnseenCategories,
  // Data quality: the missing-value rate of a series, a model's malformed-record rate.
  kMissingRate,
  kMalformedRate,
};

struct DetectorSpec {
  DetectorKind kind = DetectorKind::kMeanShift;
  std::string name;  // as written: a registered detector's name (mean_shift, psi, ...)
  /// Thresholds on the detector's statistic; defaults depend on the detector.
  double warn = 0;
  double alert = 0;
  /// Detector-specific parameters (e.g. min_effect, bins), defaults filled in.
  std::map<std::string, double> params;
  SourceMark mark;
};

/// Per-model or per-series overrides of detector thresholds.
struct ThresholdOverride {
  std::string model;   // empty: any model
  std::string series;  // empty: any series
  std::string detector;
  std::optional<double> warn;
  std::optional<double> alert;
  SourceMark mark;
};

/// Multivariate drift (YAML: drift.multivariate): per model, the reconstruction error of a PCA
/// fitted on its first complete vectors of numeric features, watched as one more numeric series
/// named `multivariate:pca` (engine/drift/multivariate.h).
struct MultivariateSpec {
  bool enabled = false;
  /// The features: numeric columns and array<double> columns (each element one), in this order.
  /// Default: every numeric and array<double> drift series.
  std::vector<std::string> features;
  /// Complete vectors of a model that fix its PCA. Default: drift.baseline.records.
  int64_t records = 0;
  /// Share of the standardized features' variance the kept components explain. Default: 0.65.
  double explained_variance = 0.65;
  SourceMark mark;
};

struct DriftSpec {
  bool enabled = false;
  /// Column identifying the model. Default: the first group_by column.
  std::string model_column;
  /// Columns watched for drift: numeric and array<double> columns (each element a series),
  /// map<string,double> columns (each key a series, "features.amount", found as records
  /// arrive), and as categorical series string, array<string> and map<string,string> columns.
  std::vector<std::string> series;
  /// Columns whose values split each model into segments with drift of their own (YAML:
  /// segmentBy; a struct's fields by dotted path). Default: the query's groupBy columns after
  /// the model column (config fills it in); `segment_by_given` when the file lists them (an
  /// empty list then means per model only).
  std::vector<std::string> segment_by;
  bool segment_by_given = false;
  /// Segments a model may have; rows of a model's further segments are counted, not watched
  /// (YAML: maxSegmentsPerModel). Default: 100.
  int64_t max_segments_per_model = 100;
  /// Keys of its map series a model may have; values of further keys are counted, not watched
  /// (YAML: maxKeysPerModel). Default: 256.
  int64_t max_keys_per_model = 256;
  /// Map keys watched over all models: each model (and segment) keeps room for every one
  /// (YAML: maxKeys). Default: 4096.
  int64_t max_keys = 4096;
  /// Optional label and prediction columns for error-rate drift.
  std::string prediction_column;
  std::string label_column;
  BaselineSpec baseline;
  std::vector<DetectorSpec> detectors;
  std::vector<ThresholdOverride> overrides;
  /// Records in the current window before a detector may fire. Default: 200.
  int64_t min_samples = 200;
  /// Consecutive evaluations above a threshold before the level rises. Default: 2.
  int hysteresis = 2;
  /// After RESOLVED, no new ALERT for the same series for this long. Default: 5 minutes.
  int64_t cooldown_ms = 5 * 60 * 1000;
  /// Likelihood ratio of "back at the baseline" over "still changed" that a series in WARN or
  /// ALERT needs before it clears (YAML: resolveEvidence). Default: 10'000.
  double resolve_evidence = 1e4;
  /// Records per tumbling evaluation window of each (model, series) when drift has no
  /// event-time windows (YAML: windowRecords). Default: 1000.
  int64_t window_records = 1000;
  /// Event-time windows of this size for drift (YAML: window), closed by the query's watermark;
  /// 0: the query's window if it has one, else record-count windows. Default: 0.
  int64_t window_ms = 0;
  /// A model with at least this many series in ALERT also gets one model-level alert
  /// (YAML: modelAlertSeries; 0 disables the roll-up). Default: 3.
  int model_alert_series = 3;
  /// Default: off.
  MultivariateSpec multivariate;
  SourceMark mark;
};

enum class OutputMode { kAppend, kUpdate, kComplete };

/// Which of a pipeline's result streams a sink receives.
enum class StreamKind {
  kStats,
  kAlerts,
  kDeadLetter,
  /// Every closed drift window of every (model, series): its statistics and each detector's
  /// reading and level, whether or not the level changed.
  kEvaluations,
  /// Each model's performance per window (labels): estimated when the window closes, realized
  /// once its labels are in (engine/executor/performance_stage.h).
  kPerformance,
};

struct SinkSpec {
  std::string name;    // unique in the pipeline; default "<format>-<index>"
  std::string format;  // a sink kind's name (connectors/registry.h): kafka, file, console, ...
  Options options;     // validated against the kind's declaration, defaults filled in
  /// The options as the kind's bind made them, once, at load (ConnectorDecl::bind_sink); empty
  /// for a spec built without config/, which the kind then binds when the sink is made.
  BoundOptions bound;
  OutputMode output_mode = OutputMode::kAppend;
  StreamKind stream = StreamKind::kStats;
  SourceMark mark;
  /// Where each option given in the file is (see SourceSpec::option_marks).
  std::map<std::string, SourceMark> option_marks;
  /// How each row becomes a message's bytes, for sinks that write one message per row
  /// (ConnectorDecl::value_formats: kafka): a value format that can be written
  /// (engine/value_encoder.h). Default: "json", the row as it is.
  std::string value_format = "json";
  /// sinks[i].valueOptions, validated against the format's sink options, defaults filled in.
  Options value_options;
  /// The value options as the format's bind_sink made them, once, at load; empty for a spec
  /// built without config/, whose options are bound when the encoder is made.
  BoundOptions value_bound;
  SourceMark value_format_mark;
  std::map<std::string, SourceMark> value_option_marks;
};

enum class TriggerKind {
  kProcessingTime,  // a batch every interval (0: as fast as possible)
  kOnce,            // one batch, then exit
  kAvailableNow,    // everything available at start in rate-limited batches, then exit
  kContinuous,      // record at a time, checkpoint every interval
};

struct TriggerSpec {
  /// Default: processingTime 0 (next batch as soon as the previous one ends), as Spark.
  TriggerKind kind = TriggerKind::kProcessingTime;
  int64_t interval_ms = 0;
  SourceMark mark;
};

/// scaleOut: several driftd processes share the pipeline's Kafka source through its consumer
/// group (engine/group.h).
struct ScaleOutSpec {
  bool enabled = false;
  /// This process's name in the group: its transactional.id and local checkpoint
  /// (<checkpointLocation>/<instance>). Default: the host name.
  std::string instance;
  SourceMark mark;
};

/// One more input of a query (YAML `inputs`): records of the query's schema, read with the
/// source's as one stream, with offsets, partitions and clocks of their own (engine/executor/
/// inputs.h).
struct InputSpec {
  /// Names the input in the checkpoint's offsets ("<name>/<key>") and the progress record.
  std::string name;
  SourceSpec source;
};

/// Ground truth that arrives later, on an input of its own (YAML `labels`), joined to the
/// predictions by a key within an event-time bound (engine/executor/performance_stage.h).
struct LabelsSpec {
  bool enabled = false;
  /// The labels input and its records' schema.
  SourceSpec source;
  Schema schema;
  /// The join key: a string column of the labels (`key`) and of the predictions
  /// (`predictionKey`, default: the same name).
  std::string key;
  std::string prediction_key;
  /// The labels' column holding the ground truth (double, long, int or boolean).
  std::string label;
  /// The labels' event time (a timestamp column). Default: the labels' first timestamp field.
  std::string event_time;
  /// A label belongs to its prediction when their event times are at most this far apart; a
  /// prediction waits this long (of event time) for its label. Default: 1 hour.
  int64_t within_ms = 3'600'000;
  SourceMark mark;
};

enum class PerformanceTask { kClassification, kRegression };

/// What is judged of the joined predictions (YAML `performance`).
struct PerformanceSpec {
  /// Default: classification (the prediction a probability or score in [0, 1], the label 0/1).
  PerformanceTask task = PerformanceTask::kClassification;
  /// The predictions' column with the score (classification) or predicted value (regression).
  /// Default: drift.predictionColumn, else `prediction`.
  std::string prediction;
  /// A score at or above it predicts the positive class. Default: 0.5.
  double threshold = 0.5;
  /// Event-time windows of the predictions' time in which performance is judged. Default: 1 h.
  int64_t window_ms = 3'600'000;
  /// A window's realized performance is judged once this share of its predictions is labelled.
  /// Default: 0.8.
  double min_coverage = 0.8;
  /// Windows (with the coverage) that form each model's baseline. Default: 3.
  int baseline_windows = 3;
  /// The smallest drop of accuracy (classification) or rise of MAE in baseline MAEs
  /// (regression) that raises a level, whatever the evidence. Default: 0.02.
  double min_drop = 0.02;
  /// Score levels of WARN and ALERT (calibrated: engine/drift/calibration.h). Default: 5, 5.5.
  double warn = 5.0;
  double alert = 5.5;
  /// Score bins (classification: equal-width over [0, 1]) of the ROC AUC, the calibration and
  /// the estimates. Default: 50.
  int bins = 50;
};

struct PipelineSpec {
  std::string name;
  std::string file;  // where it was loaded from, for messages
  Schema schema;
  /// The query's first input (progress names it "main" when there are more).
  SourceSpec source;
  /// The query's other inputs of the same schema. Default: none.
  std::vector<InputSpec> inputs;
  /// Labels joined to the predictions, and the performance judged from them. Default: off.
  LabelsSpec labels;
  PerformanceSpec performance;
  QuerySpec query;
  DriftSpec drift;
  std::vector<SinkSpec> sinks;
  TriggerSpec trigger;
  std::string checkpoint_location;
  /// Values that must never be printed (engine/redact.h): the values of options whose names look
  /// secret, the texts secret environment variables put into any value, and URL passwords.
  std::vector<std::string> secrets;
  ScaleOutSpec scale_out;
  /// `threads`: how many threads decode and aggregate a batch (engine/executor/chunk_pipeline.h);
  /// 1 runs everything on the executor's thread. Results do not depend on it. Default: 0, the
  /// cores available to the process.
  int threads = 0;
};

/// The columns the query's stages see: the schema's fields, the metadata columns it reads,
/// then the derived columns.
Schema QuerySchema(const PipelineSpec& spec);

/// Whether drift takes its values in event-time order (engine/executor/order_buffer.h):
/// record-count windows on a Kafka input (whose partitions are read in no fixed order), with an
/// event-time column, in one process or scaled out (each task orders its own models' values).
bool DriftOrdersByEventTime(const PipelineSpec& spec);
/// Whether some input of the query has SourceTraits::unordered_partitions.
bool ReadsUnorderedPartitions(const PipelineSpec& spec);
/// The event-time column drift orders by (a QuerySchema index): the watermark column, else the
/// first timestamp column; -1 when there is none.
int DriftTimeColumn(const PipelineSpec& spec);

std::string_view ToString(MalformedPolicy policy);
std::string_view ToString(AggregateFn fn);
std::string_view ToString(OutputMode mode);
std::string_view ToString(StreamKind stream);
std::string_view ToString(TriggerKind kind);
std::string_view ToString(DetectorKind kind);
std::string_view ToString(BaselineKind kind);

}  // namespace driftd
