// Parsing valid pipelines into PipelineSpec: values, defaults, interpolation, durations, and the
// rules that span sections.
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

using testing::ErrorCount;
using testing::kMinimalPipeline;
using testing::ParseText;
using testing::ProblemText;

constexpr std::string_view kFullPipeline = R"(# every section, most keys
name: fraud-models.v2
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: features, type: array<double>}
  - {name: prediction, type: double}
  - {name: label, type: double}
  - {name: region, type: string}
source:
  format: kafka
  options:
    kafka.bootstrap.servers: ${BROKERS:-localhost:9092}
    subscribe: inference-logs
    startingOffsets: {inference-logs: {"0": 23, "1": -2}}
    maxOffsetsPerTrigger: 50000
    kafka.security.protocol: SASL_SSL
  malformed:
    policy: dead_letter
    maxRecordBytes: 512 KiB
    maxDepth: 32
query:
  groupBy: [model_id, region]
  aggregates: [count(*), avg(prediction), stddev(features), max(prediction)]
  window: {column: event_time, size: 5 minutes, slide: 5 minutes}
  watermark: {column: event_time, delay: 10 minutes}
drift:
  series: [features, prediction]
  predictionColumn: prediction
  labelColumn: label
  baseline: {type: trailing, windows: 6}
  detectors:
    - {type: mean_shift, minEffect: 0.3}
    - {type: psi, bins: 20, alert: 7}
    - {type: cusum, allowance: 0.25}
    - {type: error_rate, warn: 4.5}
  minSamples: 500
  hysteresis: 3
  cooldown: 15 minutes
  overrides:
    - {model: model-3, series: "features[2]", detector: psi, alert: 8}
sinks:
  - name: stats
    format: kafka
    options: {kafka.bootstrap.servers: "localhost:9092", topic: drift-stats}
  - name: alerts
    format: kafka
    stream: alerts
    options: {kafka.bootstrap.servers: "localhost:9092", topic: drift-alerts, keyColumn: model_id}
  - {format: console, stream: dead_letter}
  - {format: console, outputMode: update}
trigger: {processingTime: 30s}
checkpointLocation: /var/lib/driftd/fraud
)";

TEST_CASE("a full pipeline file parses into the expected spec", "[config][loader]") {
  auto result = ParsePipeline(kFullPipeline, "fraud.yaml", testing::TestOptions());
  INFO(ProblemText(result));
  REQUIRE(result);
  const PipelineSpec& spec = *result;
  CHECK(spec.name == "fraud-models.v2");
  CHECK(spec.file == "fraud.yaml");
  CHECK(spec.checkpoint_location == "/var/lib/driftd/fraud");

  REQUIRE(spec.schema.fields.size() == 6);
  CHECK(spec.schema.fields[0].name == "model_id");
  CHECK(spec.schema.fields[0].type == FieldType::kString);
  CHECK_FALSE(spec.schema.fields[0].nullable);
  CHECK(spec.schema.fields[1].type == FieldType::kTimestamp);
  CHECK(spec.schema.fields[1].nullable);
  CHECK(spec.schema.fields[2].type == FieldType::kDoubleArray);

  CHECK(spec.source.format == "kafka");
  CHECK(spec.source.mark.line == 10);
  const Options& in = spec.source.options;
  CHECK(in.GetString("kafka.bootstrap.servers") == "localhost:9092");
  CHECK(in.GetString("subscribe") == "inference-logs");
  CHECK(in.GetString("startingOffsets") == R"({"inference-logs":{"0":23,"1":-2}})");
  CHECK(in.GetInt("maxOffsetsPerTrigger") == 50000);
  CHECK(in.GetBool("failOnDataLoss") == true);     // declared default
  CHECK(in.GetDurationMs("pollTimeout") == 1000);  // declared default
  CHECK(in.WithPrefix("kafka.").at("security.protocol") == "SASL_SSL");
  CHECK_FALSE(in.Has("subscribePattern"));  // no default: stays unset
  CHECK(spec.source.malformed.policy == MalformedPolicy::kDeadLetter);
  CHECK(spec.source.malformed.max_record_bytes == 512 * 1024);
  CHECK(spec.source.malformed.max_depth == 32);

  const QuerySpec& query = spec.query;
  CHECK(query.group_by == std::vector<std::string>{"model_id", "region"});
  REQUIRE(query.aggregates.size() == 4);
  CHECK(query.aggregates[0].fn == AggregateFn::kCount);
  CHECK(query.aggregates[0].column.empty());
  CHECK(query.aggregates[0].output_name == "count");
  CHECK(query.aggregates[1].fn == AggregateFn::kMean);
  CHECK(query.aggregates[1].output_name == "avg(prediction)");
  CHECK(query.aggregates[2].fn == AggregateFn::kStddev);
  CHECK(query.aggregates[2].column == "features");
  CHECK(query.aggregates[3].fn == AggregateFn::kMax);
  CHECK(query.aggregates[3].mark.line == 24);
  REQUIRE(query.window);
  CHECK(query.window->column == "event_time");
  CHECK(query.window->size_ms == 300'000);
  CHECK(query.window->slide_ms == 300'000);
  REQUIRE(query.watermark);
  CHECK(query.watermark->delay_ms == 600'000);

  const DriftSpec& drift = spec.drift;
  CHECK(drift.enabled);
  CHECK(drift.model_column == "model_id");  // first groupBy column
  CHECK(drift.series == std::vector<std::string>{"features", "prediction"});
  CHECK(drift.prediction_column == "prediction");
  CHECK(drift.label_column == "label");
  CHECK(drift.baseline.kind == BaselineKind::kTrailing);
  CHECK(drift.baseline.windows == 6);
  CHECK(drift.min_samples == 500);
  CHECK(drift.hysteresis == 3);
  CHECK(drift.cooldown_ms == 15 * 60'000);
  REQUIRE(drift.detectors.size() == 4);
  CHECK(drift.detectors[0].kind == DetectorKind::kMeanShift);
  CHECK(drift.detectors[0].warn == 5);
  CHECK(drift.detectors[0].alert == 5.5);
  CHECK(drift.detectors[0].params.at("minEffect") == Approx(0.3));
  CHECK(drift.detectors[1].kind == DetectorKind::kPsi);
  CHECK(drift.detectors[1].warn == Approx(5));
  CHECK(drift.detectors[1].alert == Approx(7));
  CHECK(drift.detectors[1].params.at("bins") == 20);
  CHECK(drift.detectors[1].params.at("minEffect") == Approx(0.05));  // the engine's default
  CHECK(drift.detectors[2].name == "cusum");
  CHECK(drift.detectors[2].warn == 5);
  CHECK(drift.detectors[2].alert == 5.5);
  CHECK(drift.detectors[2].params.at("allowance") == Approx(0.25));
  CHECK(drift.detectors[3].kind == DetectorKind::kErrorRate);
  CHECK(drift.detectors[3].warn == Approx(4.5));
  CHECK(drift.detectors[3].alert == Approx(5.5));
  CHECK(drift.detectors[3].params.at("threshold") == Approx(0.5));
  REQUIRE(drift.overrides.size() == 1);
  CHECK(drift.overrides[0].model == "model-3");
  CHECK(drift.overrides[0].series == "features[2]");
  CHECK(drift.overrides[0].detector == "psi");
  CHECK_FALSE(drift.overrides[0].warn);
  CHECK(drift.overrides[0].alert == Approx(8));

  REQUIRE(spec.sinks.size() == 4);
  CHECK(spec.sinks[0].name == "stats");
  CHECK(spec.sinks[0].stream == StreamKind::kStats);
  // Windowed query with a watermark on the window column: final rows, so append by default.
  CHECK(spec.sinks[0].output_mode == OutputMode::kAppend);
  CHECK(spec.sinks[0].options.GetString("topic") == "drift-stats");
  CHECK(spec.sinks[1].stream == StreamKind::kAlerts);
  CHECK(spec.sinks[1].options.GetString("keyColumn") == "model_id");
  CHECK(spec.sinks[2].name == "console-2");
  CHECK(spec.sinks[2].stream == StreamKind::kDeadLetter);
  CHECK(spec.sinks[2].output_mode == OutputMode::kAppend);
  CHECK(spec.sinks[2].options.GetInt("numRows") == 20);
  CHECK(spec.sinks[3].output_mode == OutputMode::kUpdate);
  CHECK(spec.sinks[3].mark.line == 51);

  CHECK(spec.trigger.kind == TriggerKind::kProcessingTime);
  CHECK(spec.trigger.interval_ms == 30'000);
}

TEST_CASE("omitted keys take their documented defaults", "[config][loader]") {
  auto result = ParseText(kMinimalPipeline, {{"STATE_DIRECTORY", "/srv/state:/srv/other"}});
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->checkpoint_location == "/srv/state/minimal");
  CHECK(result->trigger.kind == TriggerKind::kProcessingTime);
  CHECK(result->trigger.interval_ms == 0);
  CHECK(result->source.malformed.policy == MalformedPolicy::kPermissive);
  CHECK(result->source.malformed.max_record_bytes == 1 << 20);
  CHECK(result->source.malformed.max_depth == 64);
  CHECK(result->source.options.GetInt("maxFilesPerTrigger") == 1000);
  REQUIRE(result->sinks.size() == 1);
  CHECK(result->sinks[0].name == "console-0");
  CHECK(result->sinks[0].stream == StreamKind::kStats);
  // An aggregation without a watermark never finalises rows: update, as Spark requires.
  CHECK(result->sinks[0].output_mode == OutputMode::kUpdate);
  CHECK_FALSE(result->drift.enabled);
  CHECK(result->threads == 0);  // the cores available

  auto without_state_dir = ParseText(kMinimalPipeline);
  REQUIRE(without_state_dir);
  CHECK(without_state_dir->checkpoint_location == "/var/lib/driftd/minimal");
}

TEST_CASE("a drift section without detectors gets every detector with default levels",
          "[config][loader][drift]") {
  std::string yaml = std::string(kMinimalPipeline) +
                     "  - {format: console, stream: alerts}\ndrift:\n  series: [features]\n";
  auto result = ParseText(yaml);
  INFO(ProblemText(result));
  REQUIRE(result);
  const DriftSpec& drift = result->drift;
  CHECK(drift.model_column == "model_id");
  CHECK(drift.baseline.kind == BaselineKind::kWarmup);
  CHECK(drift.baseline.records == 5000);
  CHECK(drift.resolve_evidence == 1e4);
  CHECK(drift.min_samples == 200);
  CHECK(drift.window_records == 1000);
  CHECK(drift.model_alert_series == 3);
  CHECK(drift.hysteresis == 2);
  CHECK(drift.cooldown_ms == 5 * 60'000);
  // error_rate needs prediction and label columns, which this pipeline does not name; the
  // categorical and data-quality detectors come with the numeric ones.
  REQUIRE(drift.detectors.size() == 10);
  CHECK(drift.detectors[0].kind == DetectorKind::kMeanShift);
  CHECK(drift.detectors[0].params.at("minEffect") == Approx(0.1));
  CHECK(drift.detectors[2].kind == DetectorKind::kPsi);
  CHECK(drift.detectors[2].warn == Approx(5));
  CHECK(drift.detectors[2].alert == Approx(5.5));
  CHECK(drift.detectors[2].params.at("bins") == 10);
  CHECK(drift.detectors[5].kind == DetectorKind::kCusum);
  for (const DetectorSpec& detector : drift.detectors) {
    CHECK(detector.kind != DetectorKind::kErrorRate);
  }

  auto labelled = ParseText(yaml + "  predictionColumn: prediction\n  labelColumn: prediction\n");
  INFO(ProblemText(labelled));
  REQUIRE(labelled);
  REQUIRE(labelled->drift.detectors.size() == 11);
  CHECK(labelled->drift.detectors[6].kind == DetectorKind::kErrorRate);
  CHECK(labelled->drift.detectors.back().kind == DetectorKind::kMalformedRate);
}

TEST_CASE("drift window and roll-up settings are read", "[config][loader][drift]") {
  std::string yaml = std::string(kMinimalPipeline) +
                     "  - {format: console, stream: alerts}\n"
                     "drift:\n  series: [features]\n  minSamples: 50\n  windowRecords: 500\n"
                     "  modelAlertSeries: 0\n  baseline: {records: 50}\n";
  auto result = ParseText(yaml);
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->drift.min_samples == 50);
  CHECK(result->drift.window_records == 500);
  CHECK(result->drift.model_alert_series == 0);
  CHECK(result->drift.baseline.records == 50);
}

TEST_CASE("each detector type has its documented default levels", "[config][loader][drift]") {
  struct Expected {
    const char* type;
    double warn, alert;
  };
  // Calibrated levels: the same false-alarm rates for every detector.
  for (const Expected& e :
       {Expected{"mean_shift", 5, 5.5}, Expected{"stddev_ratio", 5, 5.5},
        Expected{"psi", 5, 5.5}, Expected{"js", 5, 5.5}, Expected{"ks", 5, 5.5},
        Expected{"cusum", 5, 5.5}, Expected{"error_rate", 5, 5.5}}) {
    INFO(e.type);
    std::string yaml = std::string(kMinimalPipeline) +
                       "  - {format: console, stream: alerts}\n"
                       "drift:\n  series: [prediction]\n  predictionColumn: prediction\n"
                       "  labelColumn: prediction\n  detectors:\n    - type: " +
                       e.type + "\n";
    auto result = ParseText(yaml);
    INFO(ProblemText(result));
    REQUIRE(result);
    REQUIRE(result->drift.detectors.size() == 1);
    CHECK(result->drift.detectors[0].name == e.type);
    CHECK(result->drift.detectors[0].warn == Approx(e.warn));
    CHECK(result->drift.detectors[0].alert == Approx(e.alert));
  }
}

/// Warnings of a pipeline that loads.
std::vector<ConfigProblem> Warnings(const std::string& yaml, PipelineSpec* spec = nullptr) {
  std::vector<ConfigProblem> warnings;
  LoadOptions options = testing::TestOptions();
  options.warnings = &warnings;
  auto result = ParsePipeline(yaml, "p.yaml", options);
  INFO(ProblemText(result));
  REQUIRE(result);
  if (spec != nullptr) *spec = *result;
  return warnings;
}

TEST_CASE("the error rate is watched by default when the schema names prediction and label",
          "[config][loader][drift]") {
  std::string yaml(kMinimalPipeline);
  yaml.insert(yaml.find("source:"), "  - {name: ground_truth, type: double}\n");
  yaml += "  - {format: console, stream: alerts}\ndrift:\n  series: [features]\n";
  PipelineSpec spec;
  CHECK(Warnings(yaml, &spec).empty());
  CHECK(spec.drift.prediction_column == "prediction");
  CHECK(spec.drift.label_column == "ground_truth");
  REQUIRE(spec.drift.detectors.size() == 11);
  CHECK(spec.drift.detectors[6].kind == DetectorKind::kErrorRate);

  // Named detectors without error_rate: loads, and says how to watch it.
  auto warnings = Warnings(yaml + "  detectors: [{type: mean_shift}]\n");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].path == "drift.detectors");
  CHECK_THAT(warnings[0].message, Catch::Matchers::Contains("add {type: error_rate}"));

  // Only one of the two keys: nothing to compare, and a warning says what is missing.
  std::string half(kMinimalPipeline);
  half += "  - {format: console, stream: alerts}\ndrift:\n  series: [features]\n"
          "  predictionColumn: prediction\n";
  warnings = Warnings(half, &spec);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].path == "drift.predictionColumn");
  CHECK_THAT(warnings[0].message, Catch::Matchers::Contains("set drift.labelColumn too"));
  CHECK(spec.drift.label_column.empty());

  // A label-like column without a prediction by a usual name: a warning says how.
  std::string unnamed(kMinimalPipeline);
  unnamed.insert(unnamed.find("source:"), "  - {name: label, type: double}\n");
  const std::string prediction = "{name: prediction";
  unnamed.replace(unnamed.find(prediction), prediction.size(), "{name: p_fraud");
  unnamed.replace(unnamed.find("mean(prediction)"), 16, "mean(p_fraud)");
  unnamed += "  - {format: console, stream: alerts}\ndrift:\n  series: [features]\n";
  warnings = Warnings(unnamed, &spec);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].path == "drift");
  CHECK_THAT(warnings[0].message, Catch::Matchers::Contains("set drift.predictionColumn"));
  CHECK(spec.drift.label_column.empty());
}

TEST_CASE("with only labelColumn set, the prediction column is found by its usual name",
          "[config][loader][drift]") {
  // A ground truth by a name of its own: naming it is all it takes, as config/README.md's
  // predictionColumn default says (the schema's `prediction`).
  std::string yaml(kMinimalPipeline);
  yaml.insert(yaml.find("source:"), "  - {name: outcome, type: int}\n");
  yaml += "  - {format: console, stream: alerts}\ndrift:\n  series: [features]\n"
          "  labelColumn: outcome\n";
  PipelineSpec spec;
  CHECK(Warnings(yaml, &spec).empty());
  CHECK(spec.drift.prediction_column == "prediction");
  CHECK(spec.drift.label_column == "outcome");
  CHECK(std::any_of(spec.drift.detectors.begin(), spec.drift.detectors.end(),
                    [](const DetectorSpec& d) { return d.kind == DetectorKind::kErrorRate; }));

  // And the other way round: a prediction by a name of its own finds `label`.
  std::string other(kMinimalPipeline);
  other.insert(other.find("source:"), "  - {name: label, type: double}\n");
  other += "  - {format: console, stream: alerts}\ndrift:\n  series: [features]\n"
           "  predictionColumn: prediction\n";
  CHECK(Warnings(other, &spec).empty());
  CHECK(spec.drift.label_column == "label");

  // Two prediction-like columns: which one is not guessed, and the warning says so.
  std::string two(yaml);
  two.insert(two.find("source:"), "  - {name: score, type: double}\n");
  auto warnings = Warnings(two, &spec);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].path == "drift.labelColumn");
  CHECK_THAT(warnings[0].message, Catch::Matchers::Contains("set drift.predictionColumn too"));
  CHECK(spec.drift.prediction_column.empty());
}

TEST_CASE("a seasonal baseline is read with its period and cycles", "[config][loader][drift]") {
  std::string yaml(kMinimalPipeline);
  yaml.insert(yaml.find("sinks:"), "  window: {column: event_time, size: 5 minutes}\n");
  yaml += "  - {format: console, stream: alerts}\ndrift:\n  series: [features]\n"
          "  baseline: {type: seasonal, period: 1 hour, cycles: 3}\n  resolveEvidence: 1e6\n";
  PipelineSpec spec;
  Warnings(yaml, &spec);
  CHECK(spec.drift.baseline.kind == BaselineKind::kSeasonal);
  CHECK(spec.drift.baseline.period_ms == 3'600'000);
  CHECK(spec.drift.baseline.cycles == 3);
  CHECK(spec.drift.resolve_evidence == 1e6);
}

TEST_CASE("a file with several problems reports all of them, in line order", "[config][loader]") {
  constexpr std::string_view yaml = R"(name: many problems
schema:
  - {name: model_id, type: strng}
  - {name: prediction, type: double}
source:
  format: file
  options: {path: /tmp/in, maxFilesPerTriger: 5}
query:
  groupBy: [model_id]
  aggregates: [count, mean(predicton)]
sinks:
  - {format: console, outputmode: update}
  - {format: kafka, options: {kafka.bootstrap.servers: "b:9092", topic: t}, stream: alert}
trigger: {processingTime: 10 parsecs}
checkpointLocaton: /tmp/cp
)";
  auto result = ParseText(yaml);
  REQUIRE_FALSE(result);
  const auto& problems = result.error();
  INFO(FormatProblems("many.yaml", problems));
  REQUIRE(problems.size() == 8);
  CHECK(problems[0].path == "name");
  CHECK(problems[1].path == "schema[0].type");
  CHECK_THAT(problems[1].message, Catch::Matchers::Contains("did you mean 'string'?"));
  CHECK(problems[2].path == "source.options.maxFilesPerTriger");
  CHECK_THAT(problems[2].message, Catch::Matchers::Contains("did you mean 'maxFilesPerTrigger'?"));
  CHECK(problems[3].path == "query.aggregates[1]");
  CHECK_THAT(problems[3].message, Catch::Matchers::Contains("did you mean 'prediction'?"));
  CHECK(problems[4].path == "sinks[0].outputmode");
  CHECK(problems[5].path == "sinks[1].stream");
  CHECK_THAT(problems[5].message, Catch::Matchers::Contains("did you mean 'alerts'?"));
  CHECK(problems[6].path == "trigger.processingTime");
  CHECK(problems[7].path == "checkpointLocaton");
  CHECK_THAT(problems[7].message, Catch::Matchers::Contains("did you mean 'checkpointLocation'?"));
  for (size_t i = 1; i < problems.size(); ++i) {
    CHECK(problems[i - 1].mark.line <= problems[i].mark.line);
  }
}

TEST_CASE("environment variables are interpolated in values", "[config][loader][env]") {
  auto parse_path = [](std::string_view value, testing::EnvMap env) {
    std::string yaml(kMinimalPipeline);
    yaml.replace(yaml.find("{path: /tmp/in}"), 15, fmt::format("{{path: \"{}\"}}", value));
    return ParseText(yaml, std::move(env));
  };
  SECTION("a set variable is substituted") {
    auto result = parse_path("${DATA}/in", {{"DATA", "/data"}});
    REQUIRE(result);
    CHECK(result->source.options.GetString("path") == "/data/in");
  }
  SECTION("an unset variable takes its default") {
    auto result = parse_path("${DATA:-/var/in}", {});
    REQUIRE(result);
    CHECK(result->source.options.GetString("path") == "/var/in");
  }
  SECTION("a set variable wins over its default") {
    auto result = parse_path("${DATA:-/var/in}", {{"DATA", "/data"}});
    REQUIRE(result);
    CHECK(result->source.options.GetString("path") == "/data");
  }
  SECTION("an empty variable takes its default, as in the shell") {
    auto result = parse_path("${DATA:-/var/in}", {{"DATA", ""}});
    REQUIRE(result);
    CHECK(result->source.options.GetString("path") == "/var/in");
  }
  SECTION("an unset variable without default is an error naming variable, path and line") {
    auto result = parse_path("${DATA}/in", {});
    REQUIRE_FALSE(result);
    REQUIRE(result.error().size() == 1);
    CHECK(result.error()[0].path == "source.options.path");
    CHECK(result.error()[0].mark.line == 9);
    CHECK_THAT(result.error()[0].message, Catch::Matchers::Contains("'DATA' is not set"));
  }
  SECTION("$${ is a literal ${") {
    auto result = parse_path("/in/$${DATA}", {{"DATA", "/data"}});
    REQUIRE(result);
    CHECK(result->source.options.GetString("path") == "/in/${DATA}");
  }
  SECTION("numbers come from variables too, and are type-checked after substitution") {
    std::string yaml(kMinimalPipeline);
    yaml += "trigger: {processingTime: \"${INTERVAL:-10 seconds}\"}\n";
    auto with_default = ParseText(yaml);
    REQUIRE(with_default);
    CHECK(with_default->trigger.interval_ms == 10'000);
    auto bad = ParseText(yaml, {{"INTERVAL", "often"}});
    REQUIRE_FALSE(bad);
    CHECK(bad.error()[0].path == "trigger.processingTime");
    CHECK_THAT(bad.error()[0].message, Catch::Matchers::Contains("often"));
  }
  SECTION("keys are not interpolated") {
    std::string yaml(kMinimalPipeline);
    yaml += "${KEY}: 1\n";
    auto result = ParseText(yaml, {{"KEY", "trigger"}});
    REQUIRE_FALSE(result);
    CHECK(result.error()[0].path == "${KEY}");
  }
}

TEST_CASE("durations accept Spark's spellings", "[config][loader][duration]") {
  struct Case {
    const char* text;
    int64_t ms;
  };
  for (const Case& c : {Case{"30 seconds", 30'000}, Case{"30s", 30'000}, Case{"5 minutes", 300'000},
                        Case{"1h", 3'600'000}, Case{"250ms", 250}, Case{"0", 0},
                        Case{"1.5 minutes", 90'000}, Case{"2 days", 172'800'000}}) {
    INFO(c.text);
    auto result =
        ParseText(std::string(kMinimalPipeline) + "trigger: {processingTime: " + c.text + "}\n");
    INFO(ProblemText(result));
    REQUIRE(result);
    CHECK(result->trigger.interval_ms == c.ms);
  }
  for (const char* bad : {"5 parsecs", "-5s", "soon", "s"}) {
    INFO(bad);
    auto result =
        ParseText(std::string(kMinimalPipeline) + "trigger: {processingTime: \"" + bad + "\"}\n");
    REQUIRE_FALSE(result);
    CHECK(result.error()[0].path == "trigger.processingTime");
    CHECK(result.error()[0].mark.line == 15);
  }
}

TEST_CASE("each trigger kind is read", "[config][loader][trigger]") {
  auto trigger = [](std::string_view text) {
    auto result = ParseText(std::string(kMinimalPipeline) + "trigger: " + std::string(text) + "\n");
    INFO(ProblemText(result));
    REQUIRE(result);
    return result->trigger;
  };
  CHECK(trigger("{once: true}").kind == TriggerKind::kOnce);
  CHECK(trigger("{availableNow: true}").kind == TriggerKind::kAvailableNow);
  TriggerSpec continuous = trigger("{continuous: 1 second}");
  CHECK(continuous.kind == TriggerKind::kContinuous);
  CHECK(continuous.interval_ms == 1000);
  CHECK(continuous.mark.line == 15);
}

TEST_CASE("threads is a count from 1 to 256, checked at its line", "[config][loader][threads]") {
  auto parse = [](std::string_view value) {
    return ParseText(std::string(kMinimalPipeline) + "threads: " + std::string(value) + "\n");
  };
  auto two = parse("2");
  INFO(ProblemText(two));
  REQUIRE(two);
  CHECK(two->threads == 2);
  for (const char* bad : {"0", "257", "two", "1.5", "-1"}) {
    INFO(bad);
    auto result = parse(bad);
    REQUIRE_FALSE(result);
    CHECK(ErrorCount(result) == 1);
    CHECK_THAT(ProblemText(result), Catch::Contains("threads") && Catch::Contains(":15:"));
  }
}

TEST_CASE("record size limits accept byte counts and binary or decimal units", "[config][loader]") {
  struct Case {
    const char* text;
    int64_t bytes;
  };
  for (const Case& c : {Case{"4096", 4096}, Case{"512 KiB", 512 * 1024}, Case{"1 MiB", 1 << 20},
                        Case{"2MB", 2'000'000}, Case{"1 GiB", 1LL << 30}, Case{"100 B", 100}}) {
    INFO(c.text);
    std::string yaml(kMinimalPipeline);
    yaml.insert(yaml.find("query:"), fmt::format("  malformed: {{maxRecordBytes: {}}}\n", c.text));
    auto result = ParseText(yaml);
    INFO(ProblemText(result));
    REQUIRE(result);
    CHECK(result->source.malformed.max_record_bytes == c.bytes);
  }
}

TEST_CASE("a non-aggregation query appends by default and may select columns",
          "[config][loader][outputMode]") {
  std::string yaml(kMinimalPipeline);
  yaml.replace(yaml.find("  groupBy"), yaml.find("sinks:") - yaml.find("  groupBy"),
               "  select: [model_id, prediction]\n");
  auto result = ParseText(yaml);
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK_FALSE(result->query.IsAggregation());
  CHECK(result->query.select == std::vector<std::string>{"model_id", "prediction"});
  CHECK(result->sinks[0].output_mode == OutputMode::kAppend);
}

TEST_CASE("complete output of a windowed query loads with a warning", "[config][loader]") {
  std::string yaml(kMinimalPipeline);
  yaml.insert(yaml.find("sinks:"), "  window: {column: event_time, size: 1 minute}\n");
  yaml.replace(yaml.find("{format: console}"), 17, "{format: console, outputMode: complete}");
  std::vector<ConfigProblem> warnings;
  LoadOptions options = testing::TestOptions();
  options.warnings = &warnings;
  auto result = ParsePipeline(yaml, "w.yaml", options);
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->sinks[0].output_mode == OutputMode::kComplete);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].severity == ProblemSeverity::kWarning);
  CHECK(warnings[0].path == "sinks[0].outputMode");
  CHECK_THAT(warnings[0].message, Catch::Matchers::Contains("grows without bound"));
  CHECK_THAT(FormatProblems("w.yaml", warnings), Catch::Matchers::Contains(": warning: "));
}

TEST_CASE("windowRecords with a windowed drift query loads with a warning that it is ignored",
          "[config][loader]") {
  std::string yaml(kMinimalPipeline);
  yaml.insert(yaml.find("sinks:"), "  window: {column: event_time, size: 1 minute}\n");
  yaml +=
      "  - {format: console, stream: alerts}\ndrift:\n  series: [prediction]\n  windowRecords: "
      "500\n";
  std::vector<ConfigProblem> warnings;
  LoadOptions options = testing::TestOptions();
  options.warnings = &warnings;
  auto result = ParsePipeline(yaml, "w.yaml", options);
  INFO(ProblemText(result));
  REQUIRE(result);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].path == "drift.windowRecords");
  CHECK_THAT(warnings[0].message, Catch::Matchers::Contains("ignored"));
}

TEST_CASE("json options take JSON text, words, or YAML maps", "[config][loader][options]") {
  auto offsets = [](std::string_view value) {
    std::string yaml = R"(name: k
schema: [{name: model_id, type: string}]
source:
  format: kafka
  options:
    kafka.bootstrap.servers: b:9092
    subscribe: t
    startingOffsets: )" +
                       std::string(value) + "\nsinks: [{format: console}]\n";
    return ParseText(yaml);
  };
  auto earliest = offsets("earliest");
  REQUIRE(earliest);
  CHECK(earliest->source.options.GetString("startingOffsets") == "earliest");
  auto text = offsets(R"('{"t":{"0":5}}')");
  REQUIRE(text);
  CHECK(text->source.options.GetString("startingOffsets") == R"({"t":{"0":5}})");
  auto broken = offsets(R"('{"t":{"0":5}')");
  REQUIRE_FALSE(broken);
  CHECK(broken.error()[0].path == "source.options.startingOffsets");
  CHECK_THAT(broken.error()[0].message, Catch::Matchers::Contains("expected a JSON document"));
}

TEST_CASE("without a catalog, formats and options pass through unchecked", "[config][loader]") {
  std::string yaml(kMinimalPipeline);
  yaml.replace(yaml.find("{path: /tmp/in}"), 15, "{anything: goes, path: /x}");
  yaml.replace(yaml.find("format: file"), 12, "format: custom");
  LoadOptions options;
  options.env = testing::FakeEnv({});
  auto result = ParsePipeline(yaml, "x.yaml", options);
  INFO(ProblemText(result));
  REQUIRE(result);
  CHECK(result->source.format == "custom");
  CHECK(result->source.options.GetString("anything") == "goes");
}

TEST_CASE("misspelt keys and values get a did-you-mean", "[config][loader][suggest]") {
  struct Case {
    const char* find;
    const char* replace;
    const char* path;
    const char* suggestion;
  };
  for (const Case& c : {
           Case{"groupBy:", "groupby:", "query.groupby", "'groupBy'"},
           Case{"aggregates:", "aggregate:", "query.aggregate", "'aggregates'"},
           Case{"type: string", "type: String", "schema[0].type", "'string'"},
           Case{"format: console", "format: consol", "sinks[0].format", "'console'"},
           Case{"{format: console}", "{format: console, strem: stats}", "sinks[0].strem",
                "'stream'"},
           Case{"{path: /tmp/in}", "{pth: /tmp/in}", "source.options.pth", "'path'"},
           Case{"count,", "cout,", "query.aggregates[0]", "'count'"},
           Case{"schema:", "shema:", "shema", "'schema'"},
       }) {
    INFO(c.replace);
    std::string yaml(kMinimalPipeline);
    yaml.replace(yaml.find(c.find), std::string_view(c.find).size(), c.replace);
    auto result = ParseText(yaml);
    REQUIRE_FALSE(result);
    INFO(ProblemText(result));
    CHECK(ErrorCount(result) == 1);
    CHECK(result.error()[0].path == c.path);
    CHECK_THAT(result.error()[0].message,
               Catch::Matchers::Contains(std::string("did you mean ") + c.suggestion + "?"));
  }
}

}  // namespace
}  // namespace driftd

namespace driftd {
namespace {

TEST_CASE("YAML aliases are followed and merge keys are reported as unsupported",
          "[config][loader]") {
  constexpr std::string_view yaml = R"(name: alias
schema:
  - {name: model_id, type: string}
  - {name: prediction, type: double}
source:
  format: file
  options: {path: /tmp/in, maxFilesPerTrigger: &limit 10}
query:
  groupBy: [model_id]
sinks:
  - {format: file, options: {path: /tmp/out}, name: *limit}
  - <<: {format: console}
    format: console
)";
  auto result = testing::ParseText(yaml);
  REQUIRE_FALSE(result);
  REQUIRE(result.error().size() == 1);
  CHECK(result.error()[0].path == "sinks[1].<<");
  CHECK(result.error()[0].mark.line == 12);
  CHECK_THAT(result.error()[0].message, Catch::Matchers::Contains("merge keys"));

  std::string without_merge(yaml);
  without_merge.replace(without_merge.find("  - <<: {format: console}\n    format"), 36,
                        "  - format");
  auto fixed = testing::ParseText(without_merge);
  INFO(testing::ProblemText(fixed));
  REQUIRE(fixed);
  CHECK(fixed->sinks[0].name == "10");  // the alias of the source's maxFilesPerTrigger
}

TEST_CASE("approx_percentile and percentile_approx take Spark's arguments and names",
          "[config][loader][quantiles]") {
  std::string yaml(kMinimalPipeline);
  yaml.replace(yaml.find("[count, mean(prediction)]"), 25,
               "\n    - approx_percentile(prediction, 0.5)\n"
               "    - PERCENTILE_APPROX(prediction, array(0.25, 0.75, 0.99), 100)\n"
               "    - \"approx_percentile(features, 0.9, 50)\"");
  auto result = ParseText(yaml);
  INFO(ProblemText(result));
  REQUIRE(result);
  const auto& aggregates = result->query.aggregates;
  REQUIRE(aggregates.size() == 3);
  CHECK(aggregates[0].fn == AggregateFn::kApproxPercentile);
  CHECK(aggregates[0].column == "prediction");
  CHECK(aggregates[0].percentages == std::vector<double>{0.5});
  CHECK_FALSE(aggregates[0].percentage_array);
  CHECK(aggregates[0].accuracy == 10000);  // Spark's default
  CHECK(aggregates[0].output_name == "approx_percentile(prediction, 0.5, 10000)");
  CHECK(aggregates[1].percentages == std::vector<double>{0.25, 0.75, 0.99});
  CHECK(aggregates[1].percentage_array);
  CHECK(aggregates[1].accuracy == 100);
  CHECK(aggregates[1].output_name ==
        "percentile_approx(prediction, array(0.25, 0.75, 0.99), 100)");
  CHECK(aggregates[2].column == "features");
}

TEST_CASE("a malformed percentile aggregate is an error that says what is wrong",
          "[config][loader][quantiles]") {
  struct Case {
    const char* aggregate;
    const char* message;
  };
  for (const Case& c : {
           Case{"approx_percentile(prediction)", "it takes 2 or 3 arguments, not 1"},
           Case{"approx_percentile(prediction, 1.5)", "percentage '1.5' is not a number in [0, 1]"},
           Case{"approx_percentile(prediction, array(0.5, x))", "percentage 'x'"},
           Case{"approx_percentile(prediction, 0.5, 0)", "accuracy '0' is not an integer"},
           Case{"approx_percentile(prediction, 0.5, 2000000)", "accuracy '2000000'"},
           Case{"approx_percentile(model_id, 0.5)", "numeric"},
           Case{"approx_percentile(nope, 0.5)", "nope"},
       }) {
    INFO(c.aggregate);
    std::string yaml(kMinimalPipeline);
    yaml.replace(yaml.find("[count, mean(prediction)]"), 25,
                 fmt::format("[\"{}\"]", c.aggregate));
    auto result = ParseText(yaml);
    REQUIRE_FALSE(result);
    INFO(ProblemText(result));
    CHECK(result.error()[0].path == "query.aggregates[0]");
    CHECK(result.error()[0].mark.line == 12);
    CHECK_THAT(result.error()[0].message, Catch::Matchers::Contains(c.message));
  }
  // Unquoted in a flow list, the commas split it: the error says so.
  std::string yaml(kMinimalPipeline);
  yaml.replace(yaml.find("[count, mean(prediction)]"), 25, "[approx_percentile(prediction, 0.5)]");
  auto result = ParseText(yaml);
  REQUIRE_FALSE(result);
  CHECK_THAT(result.error()[0].message, Catch::Matchers::Contains("quote it"));
}

}  // namespace
}  // namespace driftd

namespace driftd {
namespace {

ConfigProblem OnlyErrorOf(const PipelineResult& result) {
  REQUIRE_FALSE(result);
  INFO(FormatProblems("test.yaml", result.error()));
  REQUIRE(testing::ErrorCount(result) == 1);
  return result.error().front();
}

std::string WithDevice(std::string_view drift) {
  std::string yaml(testing::kMinimalPipeline);
  yaml.insert(yaml.find("source:"), "  - {name: device, type: string}\n");
  return yaml + "  - {format: console, stream: alerts}\n" + std::string(drift);
}

TEST_CASE("a string column is a categorical drift series, watched by the category detectors",
          "[config][loader][drift][categorical]") {
  auto result = testing::ParseText(WithDevice("drift:\n  series: [device, prediction]\n"));
  INFO(testing::ProblemText(result));
  REQUIRE(result);
  CHECK(result->drift.series == std::vector<std::string>{"device", "prediction"});
  std::vector<DetectorKind> kinds;
  for (const DetectorSpec& d : result->drift.detectors) kinds.push_back(d.kind);
  CHECK(std::count(kinds.begin(), kinds.end(), DetectorKind::kChiSquare) == 1);
  CHECK(std::count(kinds.begin(), kinds.end(), DetectorKind::kUnseenCategories) == 1);
  CHECK(std::count(kinds.begin(), kinds.end(), DetectorKind::kMissingRate) == 1);
  CHECK(std::count(kinds.begin(), kinds.end(), DetectorKind::kMalformedRate) == 1);

  // A detectors list that reads no categories leaves the string series unwatched: refused.
  auto numeric_only = testing::ParseText(
      WithDevice("drift:\n  series: [prediction, device]\n  detectors: [{type: mean_shift}]\n"));
  REQUIRE_FALSE(numeric_only);
  const ConfigProblem problem = OnlyErrorOf(numeric_only);
  CHECK(problem.path == "drift.series[1]");
  CHECK_THAT(problem.message, Catch::Matchers::Contains("chi_square"));
  // psi reads categories too.
  CHECK(testing::ParseText(
      WithDevice("drift:\n  series: [device]\n  detectors: [{type: psi}, {type: chi_square, "
                 "categories: 50}]\n")));
  // Parameters are checked against the table's ranges.
  auto too_many = testing::ParseText(
      WithDevice("drift:\n  series: [device]\n  detectors: [{type: chi_square, categories: 1}]\n"));
  REQUIRE_FALSE(too_many);
  CHECK(OnlyErrorOf(too_many).path == "drift.detectors[0].categories");
}

TEST_CASE("overrides may name a missing-value series and the malformed series",
          "[config][loader][drift][categorical]") {
  auto result = testing::ParseText(WithDevice(R"(drift:
  series: [device]
  overrides:
    - {series: "device:missing", detector: missing_rate, alert: 8}
    - {series: malformed, detector: malformed_rate, warn: 6, alert: 7}
)"));
  INFO(testing::ProblemText(result));
  REQUIRE(result);
  CHECK(result->drift.overrides.size() == 2);
  auto unknown = testing::ParseText(WithDevice(R"(drift:
  series: [device]
  overrides:
    - {series: "country:missing", detector: missing_rate, alert: 8}
)"));
  REQUIRE_FALSE(unknown);
  CHECK(OnlyErrorOf(unknown).path == "drift.overrides[0].series");
}

TEST_CASE("a pipeline name too long for a directory is refused by validate, not at start",
          "[config][checkpoint]") {
  std::string yaml(testing::kMinimalPipeline);
  yaml.replace(yaml.find("name: minimal"), 13, "name: " + std::string(300, 'n'));
  auto result = testing::ParseText(yaml);
  REQUIRE_FALSE(result);
  CHECK_THAT(testing::ProblemText(result), Catch::Contains("more than a file name may have (255)"));
  CHECK_THAT(testing::ProblemText(result), Catch::Contains("set checkpointLocation"));
  // With a checkpointLocation of sane parts it is fine.
  yaml += "checkpointLocation: /tmp/checkpoints/long\n";
  CHECK(testing::ParseText(yaml));
}

}  // namespace
}  // namespace driftd
