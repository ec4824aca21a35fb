#include "cmd/driftd/demo.h"

#include <chrono>
#include <cstdlib>
#include <iterator>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "cmd/driftd/demo_pipeline.inc"
#include "config/loader.h"
#include "connectors/alert_text.h"
#include "connectors/inference_generator.h"
#include "connectors/kafka/embedded_cluster.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/registry.h"
#include "engine/log.h"
#include "engine/wall_clock.h"

namespace driftd {

namespace {

constexpr std::string_view kDemoFileName = "<built-in demo>";

std::vector<std::string> SplitTopics(std::string_view text) {
  std::vector<std::string> topics;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view topic = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    while (!topic.empty() && (topic.front() == ' ' || topic.front() == '\t'))
      topic.remove_prefix(1);
    while (!topic.empty() && (topic.back() == ' ' || topic.back() == '\t')) topic.remove_suffix(1);
    if (!topic.empty()) topics.emplace_back(topic);
  }
  return topics;
}

// What the demo must provide for its pipeline: topics to create, where to feed, what to tail.
struct DemoTopics {
  std::vector<std::string> inputs;
  std::set<std::string> outputs;  // the sinks' topics and progress topic
  std::string alerts;             // empty: no Kafka sink carries the alerts stream
};

Result<DemoTopics> TopicsOf(std::string_view pipeline_yaml) {
  LoadOptions load;
  load.catalog = &ConnectorDeclarations();
  load.value_formats = &ValueFormats();
  PipelineResult spec = ParsePipeline(pipeline_yaml, kDemoFileName, load);
  if (!spec) {
    return MakeError(ErrorCode::kConfig, "the demo pipeline does not load:\n{}",
                     FormatProblems(kDemoFileName, spec.error()));
  }
  DemoTopics topics;
  if (spec->source.format != "kafka") {
    return MakeError(ErrorCode::kConfig, "the demo pipeline's source is {}, not kafka",
                     spec->source.format);
  }
  topics.inputs = SplitTopics(spec->source.options.GetString("subscribe"));
  if (topics.inputs.empty()) {
    return MakeError(ErrorCode::kConfig, "the demo pipeline's source subscribes to no topic");
  }
  for (const SinkSpec& sink : spec->sinks) {
    if (sink.format != "kafka") continue;
    std::string topic = sink.options.GetString("topic");
    topics.outputs.insert(topic);
    std::string progress = sink.options.GetString("progressTopic");
    topics.outputs.insert(progress.empty() ? DefaultKafkaProgressTopic(spec->name) : progress);
    if (sink.stream == StreamKind::kAlerts && topics.alerts.empty()) topics.alerts = topic;
  }
  return topics;
}

// One line per alert: where it was read back from and what it says (connectors/alert_text.h);
// the record itself stays on the topic, for whoever consumes it.
std::string FormatAlert(const TailRecord& record) {
  return fmt::format("Alert read back from Kafka topic {} (partition {}, offset {}): {}\n",
                     record.topic, record.partition, record.offset, AlertLine(record.value));
}

}  // namespace

std::string_view DemoPipelineYaml() { return kDemoPipelineYaml; }

struct DemoKafka::Parts {
  std::unique_ptr<EmbeddedKafkaCluster> cluster;
  std::unique_ptr<InferenceGenerator> generator;
  std::unique_ptr<TopicFeeder> feeder;
  std::unique_ptr<TopicTail> tail;
  std::string bootstrap_servers;
  std::string input_topic;
  std::string alerts_topic;
  std::FILE* out = stdout;
};

DemoKafka::DemoKafka(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

DemoKafka::~DemoKafka() { Stop(); }

Result<std::unique_ptr<DemoKafka>> DemoKafka::Start(std::string_view pipeline_yaml,
                                                    const DemoOptions& options) {
  auto scenarios = ParseDriftScenarios(options.drift);
  if (!scenarios) return tl::unexpected(scenarios.error());
  InferenceGeneratorOptions generator_options;
  generator_options.models = options.models;
  generator_options.features = options.features;
  generator_options.seed = options.seed;
  generator_options.rows_per_second = options.records_per_second;
  // Event time follows the wall clock while the feeder keeps its pace.
  generator_options.start_time_ms = NowMs();
  generator_options.drift = std::move(*scenarios);
  auto generator = InferenceGenerator::Create(std::move(generator_options));
  if (!generator) return tl::unexpected(generator.error());

  auto parts = std::make_unique<Parts>();
  parts->out = options.out;
  parts->generator = std::make_unique<InferenceGenerator>(std::move(*generator));
  auto cluster = EmbeddedKafkaCluster::Start();
  if (!cluster) return tl::unexpected(cluster.error());
  parts->cluster = std::move(*cluster);
  parts->bootstrap_servers = parts->cluster->bootstrap_servers();
  const std::string brokers = parts->bootstrap_servers;
  setenv(kDemoBrokersVariable, brokers.c_str(), 1);

  auto topics = TopicsOf(pipeline_yaml);
  if (!topics) return tl::unexpected(topics.error());
  for (const std::string& topic : topics->inputs) {
    DRIFTD_TRY(parts->cluster->CreateTopic(topic, options.input_partitions));
  }
  for (const std::string& topic : topics->outputs) {
    DRIFTD_TRY(parts->cluster->CreateTopic(topic, 1));
  }
  parts->input_topic = topics->inputs.front();
  parts->alerts_topic = topics->alerts;

  auto demo = std::unique_ptr<DemoKafka>(new DemoKafka(std::move(parts)));
  Parts* p = demo->parts_.get();
  if (!p->alerts_topic.empty()) {
    TopicTailOptions tail;
    tail.bootstrap_servers = brokers;
    tail.topic = p->alerts_topic;
    tail.on_record = [p](const TailRecord& record) {
      std::string text = FormatAlert(record);
      // One write per alert, so that it never interleaves with a console table.
      std::fwrite(text.data(), 1, text.size(), p->out);
      std::fflush(p->out);
    };
    auto started = TopicTail::Start(std::move(tail));
    if (!started) return tl::unexpected(started.error());
    p->tail = std::move(*started);
  }
  TopicFeederOptions feeder;
  feeder.bootstrap_servers = brokers;
  feeder.topic = p->input_topic;
  feeder.records_per_second = options.records_per_second;
  feeder.make_record = [generator = p->generator.get()](uint64_t n, std::string& key,
                                                        std::string& value) {
    fmt::format_to(std::back_inserter(key), "model-{}", generator->ModelOf(n));
    generator->AppendRecord(n, value);
  };
  auto started = TopicFeeder::Start(std::move(feeder));
  if (!started) return tl::unexpected(started.error());
  p->feeder = std::move(*started);

  GetLogger("driftd")->info(
      "demo: embedded Kafka cluster at {}; feeding {} records/s of {} models into topic {} "
      "(drift: {}); alerts are read back from topic {}",
      brokers, options.records_per_second, options.models, p->input_topic,
      options.drift.empty() ? "none" : options.drift,
      p->alerts_topic.empty() ? "(none)" : p->alerts_topic);
  return demo;
}

void DemoKafka::Stop() {
  if (!parts_ || !parts_->cluster) return;
  if (parts_->feeder) parts_->feeder->Stop();
  if (parts_->tail) parts_->tail->Stop();
  GetLogger("driftd")->info("demo: fed {} records into {}; read {} alerts back from {}",
                            parts_->feeder ? parts_->feeder->delivered() : 0, parts_->input_topic,
                            parts_->tail ? parts_->tail->records() : 0, parts_->alerts_topic);
  parts_->feeder.reset();
  parts_->tail.reset();
  parts_->cluster.reset();
}

const std::string& DemoKafka::bootstrap_servers() const { return parts_->bootstrap_servers; }

}  // namespace driftd
