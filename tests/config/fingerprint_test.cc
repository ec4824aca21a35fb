// The pipeline fingerprint decides whether a checkpoint can serve a pipeline: it must be
// deterministic and change exactly when state-relevant parts change.
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "engine/drift/detectors.h"
#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

constexpr std::string_view kBase = R"(name: fp
schema:
  - {name: model_id, type: string}
  - {name: event_time, type: timestamp}
  - {name: features, type: array<double>}
  - {name: prediction, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "b1:9092", subscribe: logs, maxOffsetsPerTrigger: 1000}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
  window: {column: event_time, size: 5 minutes}
  watermark: {column: event_time, delay: 1 minute}
drift:
  series: [features]
  baseline: {type: warmup, records: 1000}
  detectors: [{type: psi, warn: 5, alert: 5.5, bins: 10}]
  minSamples: 200
sinks:
  - {format: console}
  - {format: console, stream: alerts}
trigger: {processingTime: 10 seconds}
)";

std::string Fingerprint(std::string_view yaml) {
  auto result = testing::ParseText(yaml);
  INFO(testing::ProblemText(result));
  REQUIRE(result);
  return PipelineFingerprintJson(*result);
}

TEST_CASE("the fingerprint is deterministic canonical JSON", "[config][fingerprint]") {
  const std::string fingerprint = Fingerprint(kBase);
  CHECK(fingerprint == Fingerprint(kBase));
  CHECK(fingerprint ==
        R"({"version":1,"source":{"format":"kafka","identity":{"subscribe":"logs"}},)"
        R"("schema":[{"name":"model_id","type":"string","nullable":true},)"
        R"({"name":"event_time","type":"timestamp","nullable":true},)"
        R"({"name":"features","type":"array<double>","nullable":true},)"
        R"({"name":"prediction","type":"double","nullable":true}],)"
        R"("groupBy":["model_id"],"window":{"column":"event_time","sizeMs":300000,)"
        R"("slideMs":300000},"aggregates":[{"fn":"count","column":""},)"
        R"({"fn":"mean","column":"prediction"}],"drift":{"modelColumn":"model_id",)"
        R"("series":["features"],"baseline":{"type":"warmup","records":1000,"durationMs":0},)"
        R"("detectors":[{"kind":"psi","bins":10}]}})");
}

TEST_CASE("every registered detector loads by its name and is in the fingerprint as its "
          "definition says",
          "[config][fingerprint][detectors]") {
  // What a pipeline file, the fingerprint and the monitor know of a detector comes from its
  // one definition: a detector registered later is covered here without a line of its own.
  for (const DetectorDefaults& detector : DetectorDefaultsTable()) {
    INFO(detector.name);
    std::string yaml(kBase);
    const std::string psi = "detectors: [{type: psi, warn: 5, alert: 5.5, bins: 10}]";
    std::string listed = fmt::format("detectors: [{{type: {}}}]", detector.name);
    // The error series needs prediction and label columns.
    if (detector.error_series) {
      listed += "\n  predictionColumn: prediction\n  labelColumn: label";
      const std::string prediction = "  - {name: prediction, type: double}\n";
      yaml.insert(yaml.find(prediction) + prediction.size(), "  - {name: label, type: double}\n");
    }
    yaml.replace(yaml.find(psi), psi.size(), listed);
    auto result = testing::ParseText(yaml);
    INFO(testing::ProblemText(result));
    REQUIRE(result);
    REQUIRE(result->drift.detectors.size() == 1);
    CHECK(result->drift.detectors[0].kind == detector.kind);
    for (const DetectorParamDef& param : detector.params) {
      CHECK(DetectorParam(result->drift.detectors[0], param.name) == param.default_value);
    }
    const std::string fingerprint = PipelineFingerprintJson(*result);
    const std::string entry = fmt::format("{{\"kind\":\"{}\"", detector.name);
    CHECK((fingerprint.find(entry) != std::string::npos) == detector.in_fingerprint);
  }
}

TEST_CASE("the fingerprint ignores what state does not depend on", "[config][fingerprint]") {
  const std::string base = Fingerprint(kBase);
  for (const auto& [find, replace] : std::vector<std::pair<std::string, std::string>>{
           {"processingTime: 10 seconds", "once: true"},
           {"warn: 5, alert: 5.5", "warn: 6, alert: 7"},
           {"bins: 10}", "bins: 10, minEffect: 0.2}"},
           {"  baseline:", "  resolveEvidence: 100\n  baseline:"},
           {"minSamples: 200", "minSamples: 50"},
           {"delay: 1 minute", "delay: 1 hour"},
           {"b1:9092", "b2:9092"},
           {"maxOffsetsPerTrigger: 1000", "maxOffsetsPerTrigger: 5"},
           {"  - {format: console}\n", "  - {format: file, options: {path: /out}}\n"},
           {"name: fp", "name: renamed"},
           {"  baseline:", "  cooldown: 1 hour\n  hysteresis: 5\n  baseline:"},
       }) {
    INFO(find << " -> " << replace);
    std::string yaml(kBase);
    if (size_t at = yaml.find(find); at != std::string::npos)
      yaml.replace(at, find.size(), replace);
    CHECK(Fingerprint(yaml) == base);
  }
}

TEST_CASE("the fingerprint changes with every state-relevant field", "[config][fingerprint]") {
  const std::string base = Fingerprint(kBase);
  for (const auto& [find, replace] : std::vector<std::pair<std::string, std::string>>{
           {"subscribe: logs", "subscribe: other-logs"},
           {"subscribe: logs", "subscribePattern: logs-.*"},
           {"{name: prediction, type: double}", "{name: prediction, type: long}"},
           {"{name: prediction, type: double}",
            "{name: prediction, type: double, nullable: false}"},
           {"  - {name: prediction, type: double}\n",
            "  - {name: prediction, type: double}\n  - {name: region, type: string}\n"},
           {"groupBy: [model_id]", "groupBy: [model_id, region]"},
           {"size: 5 minutes}", "size: 10 minutes}"},
           {"mean(prediction)", "max(prediction)"},
           {"mean(prediction)]", "mean(prediction), \"approx_percentile(prediction, 0.5)\"]"},
           {"[count, mean(prediction)]", "[count, mean(prediction), stddev(features)]"},
           {"series: [features]", "series: [features, prediction]"},
           {"records: 1000", "records: 5000"},
           {"{type: warmup, records: 1000}", "{type: trailing}"},
           {"bins: 10", "bins: 20"},
           {"{type: psi, warn: 5, alert: 5.5, bins: 10}", "{type: ks}"},
           {"{type: psi, warn: 5, alert: 5.5, bins: 10}", "{type: cusum}"},
           {"{type: warmup, records: 1000}", "{type: seasonal, period: 1 hour}"},
       }) {
    INFO(find << " -> " << replace);
    std::string yaml(kBase);
    size_t at = yaml.find(find);
    REQUIRE(at != std::string::npos);
    yaml.replace(at, find.size(), replace);
    if (replace.find("region") != std::string::npos && find.find("groupBy") != std::string::npos) {
      yaml.replace(yaml.find("  - {name: prediction, type: double}\n"), 0,
                   "  - {name: region, type: string}\n");
    }
    CHECK(Fingerprint(yaml) != base);
  }
}

TEST_CASE("the fingerprint changes with the window slide", "[config][fingerprint]") {
  // Drift needs tumbling windows, so this one compares queries without drift.
  std::string tumbling(kBase);
  tumbling.erase(tumbling.find("drift:"), tumbling.find("sinks:") - tumbling.find("drift:"));
  tumbling.erase(tumbling.find("  - {format: console, stream: alerts}\n"),
                 std::string_view("  - {format: console, stream: alerts}\n").size());
  std::string sliding = tumbling;
  sliding.replace(sliding.find("size: 5 minutes}"), 16, "size: 5 minutes, slide: 1 minute}");
  CHECK(Fingerprint(sliding) != Fingerprint(tumbling));
}

TEST_CASE("the fingerprint escapes names so that it stays valid JSON", "[config][fingerprint]") {
  PipelineSpec spec;
  spec.schema.fields.push_back({"we\"ird\\name\n", FieldType::kDouble, true});
  const std::string json = PipelineFingerprintJson(spec);
  CHECK_THAT(json, Catch::Matchers::Contains(R"("we\"ird\\name\n")"));
}

}  // namespace
}  // namespace driftd

namespace driftd {

TEST_CASE("a secret in a source path is kept in the fingerprint as a digest that follows it",
          "[config][fingerprint][secrets]") {
  std::string yaml(kBase);
  yaml.replace(yaml.find("subscribe: logs"), 15, "subscribe: \"logs-${TOPIC_TOKEN}\"");
  auto fingerprint = [&](const std::string& token) {
    auto result = testing::ParseText(yaml, {{"TOPIC_TOKEN", token}});
    INFO(testing::ProblemText(result));
    REQUIRE(result);
    CHECK(result->source.options.GetString("subscribe") == "logs-" + token);
    return PipelineFingerprintJson(*result);
  };
  const std::string first = fingerprint("tok-41f2c9a8e0");
  CHECK_THAT(first, !Catch::Contains("tok-41f2c9a8e0"));
  CHECK_THAT(first, Catch::Contains("\"subscribe\":\"logs-<redacted:"));
  // The same secret gives the same fingerprint; another secret another one, so a checkpoint
  // still refuses a pipeline that reads another topic.
  CHECK(fingerprint("tok-41f2c9a8e0") == first);
  CHECK(fingerprint("tok-77aa01d3b5") != first);
}

TEST_CASE("a secret in the pipeline's name is kept in its checkpoint as a digest",
          "[config][fingerprint][secrets]") {
  std::string yaml(kBase);
  const size_t name = yaml.find("name: ");
  REQUIRE(name != std::string::npos);
  yaml.replace(name, yaml.find('\n', name) - name, "name: \"hooks-${NAME_TOKEN}\"");
  auto kept = [&](const std::string& token) {
    auto result = testing::ParseText(yaml, {{"NAME_TOKEN", token}});
    INFO(testing::ProblemText(result));
    REQUIRE(result);
    CHECK(result->name == "hooks-" + token);
    return CheckpointPipelineName(*result);
  };
  const std::string first = kept("nametok-5c2e81");
  CHECK_THAT(first, Catch::StartsWith("hooks-<redacted:"));
  CHECK(kept("nametok-5c2e81") == first);
  CHECK(kept("nametok-90ab17") != first);
  // Without a secret the name is kept as it is.
  auto plain = testing::ParseText(std::string(kBase), {});
  REQUIRE(plain);
  CHECK(CheckpointPipelineName(*plain) == plain->name);
}

TEST_CASE("a percentile's accuracy is state, the fractions asked of it are not",
          "[config][fingerprint][quantiles]") {
  auto with = [](std::string_view aggregate) {
    std::string yaml(kBase);
    yaml.replace(yaml.find("mean(prediction)]"), 17,
                 fmt::format("mean(prediction), \"{}\"]", aggregate));
    return Fingerprint(yaml);
  };
  const std::string base = with("approx_percentile(prediction, 0.5, 100)");
  CHECK(with("approx_percentile(prediction, array(0.1, 0.9), 100)") == base);
  CHECK(with("approx_percentile(prediction, 0.5, 1000)") != base);
  CHECK(with("approx_percentile(prediction, 0.5)") != base);
}

}  // namespace driftd
