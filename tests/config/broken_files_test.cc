// Every file in tests/config/broken/ holds one mistake; each must be reported at the right
// YAML path and line, with a message that says what is wrong.
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

struct BrokenCase {
  const char* file;
  const char* path;
  int line;
  const char* fragment;
};

const std::vector<BrokenCase> kCases = {
    {"syntax_error", "", 12, "YAML syntax error"},
    {"top_level_list", "", 1, "expected a map"},
    {"empty", "", 0, "holds no pipeline"},
    {"multi_document", "", 16, "several YAML documents"},
    {"unknown_top_key", "sinkss", 13, "did you mean 'sinks'?"},
    {"duplicate_key", "name", 10, "duplicate key 'name' (first given at line 1)"},
    {"missing_name", "name", 1, "'name' is required"},
    {"bad_name", "name", 1, "may contain only letters"},
    {"schema_unknown_type", "schema[2].type", 5, "did you mean 'array<double>'?"},
    {"schema_duplicate_field", "schema[4].name", 7, "duplicate field 'features'"},
    {"schema_is_map", "schema", 3, "expected a list"},
    {"source_unknown_format", "source.format", 8, "did you mean 'file'?"},
    {"source_unknown_option", "source.options.maxOffsetPerTrigger", 10,
     "did you mean 'maxOffsetsPerTrigger'?"},
    {"source_option_wrong_type", "source.options.failOnDataLoss", 10, "expected true or false"},
    {"source_missing_required_option", "source.options.kafka.bootstrap.servers", 7,
     "missing required option 'kafka.bootstrap.servers'"},
    {"source_option_without_prefix", "source.options.security.protocol", 10,
     "did you mean 'kafka.security.protocol'?"},
    {"source_enum_choice", "source.options.mode", 8, "did you mean 'inference'?"},
    {"malformed_bad_policy", "source.malformed.policy", 11, "did you mean 'dead_letter'?"},
    {"malformed_bad_size", "source.malformed.maxRecordBytes", 11, "expected a size in bytes"},
    {"dead_letter_without_sink", "source.malformed.policy", 11, "would be lost"},
    {"dead_letter_sink_without_policy", "sinks[1].stream", 15, "policy dead_letter"},
    {"groupby_unknown_column", "query.groupBy[0]", 11, "'model' is not a schema column"},
    {"groupby_wrong_type", "query.groupBy[0]", 11, "expected a string, long, int or boolean"},
    {"aggregate_unknown_function", "query.aggregates[1]", 12, "did you mean 'mean'?"},
    {"aggregate_string_column", "query.aggregates[1]", 12, "'model_id' is of type string"},
    {"window_slide_exceeds_size", "query.window.slide", 16, "must not exceed the window size"},
    {"window_not_timestamp", "query.window.column", 13, "expected a timestamp column"},
    {"watermark_bad_duration", "query.watermark.delay", 14, "no known time unit"},
    {"select_on_aggregation", "query.select[0]", 13, "has no effect in a query with groupBy"},
    {"select_unknown_function", "query.select[0]", 12, "unknown function 'asb'; did you mean 'abs'?"},
    {"where_type_mismatch", "query.where", 10, "type mismatch: '>' cannot compare string with long"},
    {"append_without_watermark", "sinks[0].outputMode", 14, "requires query.window and"},
    {"append_watermark_other_column", "sinks[0].outputMode", 18,
     "watermark on the window's column 'event_time'"},
    {"complete_without_aggregation", "sinks[0].outputMode", 12,
     "complete requires an aggregation query"},
    {"alerts_stream_update", "sinks[1].outputMode", 16, "supports only outputMode append"},
    {"outputmode_case", "sinks[0].outputmode", 15, "did you mean 'outputMode'?"},
    {"duplicate_sink_names", "sinks[1].name", 15, "'out' is already used"},
    {"sink_unknown_option", "sinks[0].options.topc", 17,
     "unknown option 'topc' for the kafka sink; did you mean 'topic'?"},
    {"sink_missing_format", "sinks[0].format", 14, "'format' is required"},
    {"sinks_is_map", "sinks", 14, "expected a list"},
    {"trigger_two_kinds", "trigger.once", 17, "exactly one kind"},
    {"trigger_scalar", "trigger", 15, "{once: true}"},
    {"trigger_continuous_zero", "trigger.continuous", 15, "positive duration"},
    {"trigger_once_false", "trigger.once", 15, "'once: false' is not a trigger"},
    {"drift_series_model_column", "drift.series[0]", 16, "is the model column"},
    {"drift_series_timestamp", "drift.series[0]", 17,
     "is of type timestamp; expected a numeric (double, long, int), array<double> or "
     "map<string,double> column, or a categorical string, boolean"},
    {"drift_model_not_grouped", "drift.modelColumn", 17, "must be one of the query's groupBy"},
    {"drift_without_groupby", "drift", 14, "no groupBy"},
    {"detector_unknown_param", "drift.detectors[0].bin", 18, "did you mean 'bins'?"},
    {"detector_unknown_type", "drift.detectors[1].type", 19, "did you mean 'psi'?"},
    {"detector_warn_above_alert", "drift.detectors[0].warn", 18, "must not exceed the alert"},
    {"detector_not_a_map", "drift.detectors[0]", 17, "expected a map"},
    {"baseline_key_of_other_type", "drift.baseline.path", 19, "applies to baseline type file"},
    {"override_unknown_detector", "drift.overrides[0].detector", 19,
     "'ks' is not among drift.detectors"},
    {"error_rate_without_columns", "drift.detectors[0].type", 18, "drift.predictionColumn"},
    {"drift_window_below_min_samples", "drift.windowRecords", 18, "below minSamples (500)"},
    {"drift_sliding_window", "drift", 16, "query.window (line 12) slides"},
    {"drift_baseline_below_min_samples", "drift.baseline.records", 18, "below minSamples (200)"},
    {"drift_label_string", "drift.labelColumn", 18, "expected a numeric or boolean column"},
    {"detector_zero_alert", "drift.detectors[0].alert", 18, "levels are calibrated scores"},
    {"detector_statistic_threshold", "drift.detectors[0].alert", 18,
     "a floor on psi's own statistic is minEffect"},
    {"detector_page_hinkley", "drift.detectors[0].type", 18, "replaced by cusum"},
    {"baseline_seasonal_without_window", "drift.baseline.type", 17, "add query.window"},
    {"baseline_seasonal_period", "drift.baseline.period", 18, "a whole number of query windows"},
    {"undefined_env_variable", "source.options.path", 9, "'DRIFTD_TEST_UNDEFINED_DIR' is not set"},
};

std::string BrokenPath(const char* name) {
  return std::string(DRIFTD_TESTS_DIR) + "/config/broken/" + name + ".yaml";
}

TEST_CASE("each broken pipeline file is rejected with its one problem at the right path and line",
          "[config][broken]") {
  for (const BrokenCase& c : kCases) {
    INFO("file " << c.file);
    auto result = LoadPipelineFile(BrokenPath(c.file), testing::TestOptions());
    REQUIRE_FALSE(result);
    INFO(FormatProblems(c.file, result.error()));
    REQUIRE(testing::ErrorCount(result) == 1);
    const ConfigProblem& problem = result.error().front();
    CHECK(problem.severity == ProblemSeverity::kError);
    CHECK(problem.path == c.path);
    CHECK(problem.mark.line == c.line);
    CHECK_THAT(problem.message, Catch::Matchers::Contains(c.fragment));
  }
}

TEST_CASE("every file in the broken folder is covered by the table", "[config][broken]") {
  size_t files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(DRIFTD_TESTS_DIR) + "/config/broken")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const std::string stem = entry.path().stem().string();
    bool listed = false;
    for (const BrokenCase& c : kCases) listed = listed || stem == c.file;
    INFO("file " << stem);
    CHECK(listed);
  }
  CHECK(files == kCases.size());
  CHECK(files >= 30);
}

TEST_CASE("a problem is printed as file:line:column: path: message", "[config][broken]") {
  auto result = LoadPipelineFile(BrokenPath("sink_unknown_option"), testing::TestOptions());
  REQUIRE_FALSE(result);
  CHECK(FormatProblems("pipe.yaml", result.error()) ==
        "pipe.yaml:17:7: sinks[0].options.topc: unknown option 'topc' for the kafka sink; did "
        "you mean 'topic'?\n");
}

TEST_CASE("a file that cannot be read is one problem naming the reason", "[config][broken]") {
  auto result =
      LoadPipelineFile("/tmp/driftd-config-test-no-such-dir/pipeline.yaml", testing::TestOptions());
  REQUIRE_FALSE(result);
  REQUIRE(result.error().size() == 1);
  CHECK_THAT(result.error()[0].message, Catch::Matchers::Contains("No such file"));
}

}  // namespace
}  // namespace driftd
