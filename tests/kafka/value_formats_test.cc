// Avro and Protobuf inference logs through the real broker and the daemon: `driftd run` reads
// a topic of binary records, filters, aggregates per model, and routes the records it cannot
// decode to the dead-letter stream. And the other way: statistics, alerts and evaluations
// written as Avro by the Kafka sink, read back and compared with what its JSON sinks write.
// Avro records are Confluent-framed with their writer schemas in a Schema Registry: no
// registry server runs here (Debian has none, and Apicurio's application needs Quarkus' build
// step), so the test runs a small Confluent-compatible one in this process
// (tests/support/schema_registry_fake.h), which answers POST /subjects/<subject>/versions and
// GET /schemas/ids/<id> as Confluent's and Apicurio's ccompat API do.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <simdjson.h>

#include "config/loader.h"
#include "engine/drift/evaluation.h"
#include "engine/drift/monitor.h"
#include "engine/time_iso8601.h"
#include "tests/kafka/kafka_test_util.h"
#include "tests/support/avro_records.h"
#include "tests/support/avro_rows.h"
#include "tests/support/schema_registry_fake.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using testing::ReadFile;
using testing::RunDriftd;
using testing::SplitLines;
using testing::TempDir;
using testing::WriteFile;

constexpr std::string_view kWriterV1 = R"({"type": "record", "name": "Inference",
  "namespace": "acme", "fields": [
    {"name": "model_id", "type": "string"},
    {"name": "model_version", "type": "string"},
    {"name": "prediction", "type": "double"},
    {"name": "ground_truth", "type": ["null", "double"], "default": null}]})";

// v1 and a new optional field, as a producer evolves its schema while driftd runs.
constexpr std::string_view kWriterV2 = R"({"type": "record", "name": "Inference",
  "namespace": "acme", "fields": [
    {"name": "model_id", "type": "string"},
    {"name": "model_version", "type": "string"},
    {"name": "prediction", "type": "double"},
    {"name": "ground_truth", "type": ["null", "double"], "default": null},
    {"name": "region", "type": ["null", "string"], "default": null}]})";

std::string Pipeline(const std::string& name, const std::string& topic, const TempDir& dir,
                     const std::string& value_format) {
  return "name: " + name +
         "\n"
         "schema:\n"
         "  - {name: model_id, type: string, nullable: false}\n"
         "  - {name: model_version, type: string}\n"
         "  - {name: prediction, type: double}\n"
         "  - {name: ground_truth, type: double}\n"
         "source:\n"
         "  format: kafka\n"
         "  options: {kafka.bootstrap.servers: \"" +
         Bootstrap() + "\", subscribe: " + topic +
         ", startingOffsets: earliest}\n" + value_format +
         "  malformed: {policy: dead_letter}\n"
         "query:\n"
         "  where: model_version != 'shadow'\n"
         "  select: [abs(prediction - ground_truth) AS abs_error]\n"
         "  groupBy: [model_id]\n"
         "  aggregates: [count, mean(prediction), mean(abs_error)]\n"
         "sinks:\n"
         "  - {name: stats, format: file, stream: stats, outputMode: update, options: {path: " +
         dir / "stats" +
         "}}\n"
         "  - {name: rejects, format: file, stream: dead_letter, options: {path: " +
         dir / "rejects" +
         "}}\n"
         "trigger: {availableNow: true}\n"
         "checkpointLocation: " +
         dir / "checkpoint" + "\n";
}

std::vector<std::string> Rows(const std::string& directory) {
  std::vector<std::string> rows;
  if (!std::filesystem::exists(directory)) return rows;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().filename().string().rfind("part-", 0) == 0) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    for (const std::string& line : SplitLines(ReadFile(file))) rows.push_back(line);
  }
  return rows;
}

// The last stats row of each model (update mode: the last holds the totals).
std::map<std::string, std::string> LastStats(const TempDir& dir) {
  std::map<std::string, std::string> last;
  simdjson::dom::parser parser;
  for (const std::string& row : Rows(dir / "stats")) {
    simdjson::dom::element element = parser.parse(row);
    last[std::string(element["model_id"].get_string().value())] = row;
  }
  return last;
}

struct Expected {
  int64_t count = 0;
  double prediction_sum = 0;
  double error_sum = 0;
};

void CheckStats(const TempDir& dir, const std::map<std::string, Expected>& expected) {
  auto last = LastStats(dir);
  REQUIRE(last.size() == expected.size());
  simdjson::dom::parser parser;
  for (const auto& [model, want] : expected) {
    INFO(model << ": " << last[model]);
    simdjson::dom::element row = parser.parse(last[model]);
    CHECK(int64_t(row["count"]) == want.count);
    CHECK(double(row["mean(prediction)"]) == Approx(want.prediction_sum / want.count));
    CHECK(double(row["mean(abs_error)"]) == Approx(want.error_sum / want.count));
  }
}

std::vector<std::string> RejectReasons(const TempDir& dir) {
  std::vector<std::string> reasons;
  simdjson::dom::parser parser;
  for (const std::string& row : Rows(dir / "rejects")) {
    simdjson::dom::element element = parser.parse(row);
    reasons.emplace_back(element["reason"].get_string().value());
  }
  std::sort(reasons.begin(), reasons.end());
  return reasons;
}

TEST_CASE("Confluent-framed Avro records from the broker, two writer schema versions and a "
          "registry, are filtered, aggregated and dead-lettered by the daemon",
          "[kafka][daemon][format][avro]") {
  Admin admin;
  testing::FakeSchemaRegistry registry;
  REQUIRE(registry.running());
  const auto v1 = static_cast<uint32_t>(registry.Add(std::string(kWriterV1)));
  const auto v2 = static_cast<uint32_t>(registry.Add(std::string(kWriterV2)));
  const std::string topic = UniqueName("avro-logs");
  admin.CreateTopic(topic, 2);

  testing::AvroRecordWriter w1(kWriterV1);
  testing::AvroRecordWriter w2(kWriterV2);
  std::map<std::string, Expected> expected;
  std::vector<std::string> p0;
  std::vector<std::string> p1;
  for (int i = 0; i < 200; ++i) {
    const std::string model = fmt::format("model-{}", i % 3);
    const double prediction = 0.01 * (i % 100);
    const double truth = (i % 7 == 0) ? 1.0 : 0.0;
    const std::string version = i % 10 == 9 ? "shadow" : "v1";
    std::string record =
        i < 100 ? w1.Write({{"model_id", model},
                            {"model_version", version},
                            {"prediction", prediction},
                            {"ground_truth", truth}},
                           v1)
                : w2.Write({{"model_id", model},
                            {"model_version", version},
                            {"prediction", prediction},
                            {"ground_truth", truth},
                            {"region", std::string("eu-west")}},
                           v2);
    (i % 2 == 0 ? p0 : p1).push_back(std::move(record));
    if (version == "shadow") continue;
    Expected& e = expected[model];
    ++e.count;
    e.prediction_sum += prediction;
    e.error_sum += std::abs(prediction - truth);
  }
  p0.push_back(w1.Write({{"model_id", std::string("lost")}}, 4242));  // an unknown schema id
  p1.push_back("{\"model_id\": \"model-0\"}");                        // JSON, not framed
  p1.push_back(std::string("\0\0\0\0", 4) + std::string(1, char(v1)) + "\xff\xff\xff");
  Produce(topic, 0, p0);
  Produce(topic, 1, p1);

  TempDir dir("driftd-avro-e2e");
  const std::string value_format =
      "  valueFormat: avro\n  valueOptions: {schemaRegistryUrl: \"" + registry.url() + "\"}\n";
  WriteFile(dir / "p.yaml", Pipeline("avro-e2e", topic, dir, value_format));
  auto run = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  CheckStats(dir, expected);
  CHECK(RejectReasons(dir) ==
        std::vector<std::string>{"undecodable", "undecodable", "unknown_schema"});
  // Each schema id was fetched once for the whole run, the unknown one too.
  CHECK(registry.fetches(static_cast<int>(v1)) == 1);
  CHECK(registry.fetches(static_cast<int>(v2)) == 1);
  CHECK(registry.fetches(4242) == 1);
}

TEST_CASE("the daemon reads Avro records through a registry that wants basic auth from the "
          "environment, https and a client certificate, and logs no password",
          "[kafka][daemon][format][avro][registry]") {
  Admin admin;
  TempDir dir("driftd-avro-secured");
  const testing::TestTls tls = testing::TestTls::Make(dir.path());
  INFO(ReadFile(dir / "make-tls.log"));
  REQUIRE_FALSE(tls.ca_cert.empty());
  const std::string password = "reg-pw-61d0c2e9";
  testing::FakeSchemaRegistry registry({.basic_auth = std::make_pair("driftd", password),
                                        .tls_cert = tls.server_cert,
                                        .tls_key = tls.server_key,
                                        .client_ca = tls.ca_cert});
  REQUIRE(registry.running());
  const auto v1 = static_cast<uint32_t>(registry.Add(std::string(kWriterV1)));
  const std::string topic = UniqueName("avro-secured");
  admin.CreateTopic(topic, 1);
  testing::AvroRecordWriter writer(kWriterV1);
  std::vector<std::string> records;
  std::map<std::string, Expected> expected;
  for (int i = 0; i < 40; ++i) {
    const std::string model = fmt::format("model-{}", i % 2);
    const double prediction = 0.025 * i;
    records.push_back(writer.Write({{"model_id", model},
                                    {"model_version", std::string("v1")},
                                    {"prediction", prediction},
                                    {"ground_truth", 1.0}},
                                   v1));
    Expected& e = expected[model];
    ++e.count;
    e.prediction_sum += prediction;
    e.error_sum += std::abs(prediction - 1.0);
  }
  Produce(topic, 0, records);

  const std::string value_format = fmt::format(
      "  valueFormat: avro\n"
      "  valueOptions:\n"
      "    schemaRegistryUrl: \"{}\"\n"
      "    schemaRegistryCredentials: \"${{REGISTRY_CREDENTIALS}}\"\n"
      "    schemaRegistryCaFile: {}\n"
      "    schemaRegistryCertFile: {}\n"
      "    schemaRegistryKeyFile: {}\n",
      registry.url(), tls.ca_cert, tls.client_cert, tls.client_key);
  WriteFile(dir / "p.yaml", Pipeline("avro-secured", topic, dir, value_format));
  auto run = RunDriftd({"run", dir / "p.yaml", "--http", "off", "--log-level", "debug"},
                       std::chrono::seconds(120), {{"REGISTRY_CREDENTIALS", "driftd:" + password}});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CheckStats(dir, expected);
  CHECK(RejectReasons(dir).empty());
  CHECK(registry.fetches(static_cast<int>(v1)) == 1);
  CHECK(registry.unauthorized() == 0);
  CHECK(run.output.find(password) == std::string::npos);
}

TEST_CASE("Protobuf records from the broker are decoded from a descriptor set, malformed bytes "
          "dead-lettered",
          "[kafka][daemon][format][protobuf]") {
  namespace pb = google::protobuf;
  Admin admin;
  const std::string topic = UniqueName("protobuf-logs");
  admin.CreateTopic(topic, 1);

  std::ifstream in(DRIFTD_TEST_DESCRIPTOR, std::ios::binary);
  pb::FileDescriptorSet set;
  REQUIRE(set.ParseFromIstream(&in));
  pb::DescriptorPool pool;
  for (const auto& file : set.file()) REQUIRE(pool.BuildFile(file) != nullptr);
  const pb::Descriptor* type = pool.FindMessageTypeByName("driftd.test.Inference");
  REQUIRE(type != nullptr);
  pb::DynamicMessageFactory factory(&pool);
  std::unique_ptr<pb::Message> message(factory.GetPrototype(type)->New());
  const pb::Reflection& r = *message->GetReflection();

  std::map<std::string, Expected> expected;
  std::vector<std::string> records;
  for (int i = 0; i < 150; ++i) {
    const std::string model = fmt::format("model-{}", i % 2);
    const double prediction = 0.02 * (i % 50);
    const double truth = i % 5 == 0 ? 1.0 : 0.0;
    const std::string version = i % 10 == 3 ? "shadow" : "v2";
    message->Clear();
    r.SetString(message.get(), type->FindFieldByName("model_id"), model);
    r.SetString(message.get(), type->FindFieldByName("model_version"), version);
    r.SetDouble(message.get(), type->FindFieldByName("prediction"), prediction);
    r.SetDouble(message.get(), type->FindFieldByName("ground_truth"), truth);
    records.push_back(message->SerializeAsString());
    if (version == "shadow") continue;
    Expected& e = expected[model];
    ++e.count;
    e.prediction_sum += prediction;
    e.error_sum += std::abs(prediction - truth);
  }
  records.push_back(records[0].substr(0, records[0].size() - 2));  // cut short
  records.push_back("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01");
  Produce(topic, 0, records);

  TempDir dir("driftd-protobuf-e2e");
  const std::string value_format = std::string("  valueFormat: protobuf\n") +
                                   "  valueOptions: {descriptorFile: " + DRIFTD_TEST_DESCRIPTOR +
                                   ", messageType: driftd.test.Inference}\n";
  WriteFile(dir / "p.yaml", Pipeline("protobuf-e2e", topic, dir, value_format));
  auto run = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  CheckStats(dir, expected);
  CHECK(RejectReasons(dir) == std::vector<std::string>{"undecodable", "undecodable"});
}

// ---- Avro out ------------------------------------------------------------------------------

// Stats, alerts and evaluations, each to a JSON sink and to an Avro sink of the same pipeline:
// stats and evaluations Confluent-framed with the registry, alerts plain with the shipped .avsc.
std::string AvroOutPipeline(const std::string& name, const std::string& input,
                            const std::map<std::string, std::string>& topics,
                            const std::string& registry, const TempDir& dir) {
  const std::string brokers = Bootstrap();
  auto sink = [&](const std::string& sink_name, const std::string& stream,
                  const std::string& value_format) {
    return fmt::format(
        "  - {{name: {}, format: kafka, stream: {}, options: {{topic: {}, "
        "kafka.bootstrap.servers: \"{}\"}}{}}}\n",
        sink_name, stream, topics.at(sink_name), brokers, value_format);
  };
  const std::string registry_format =
      fmt::format(", valueFormat: avro, valueOptions: {{schemaRegistryUrl: \"{}\"}}", registry);
  const std::string file_format = fmt::format(
      ", valueFormat: avro, valueOptions: {{schemaFile: {}/deploy/avro/driftd-alert.avsc}}",
      DRIFTD_SOURCE_DIR);
  return fmt::format(R"(name: {}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: feature_vector, type: array<double>}}
  - {{name: prediction, type: double}}
  - {{name: ground_truth, type: double}}
source:
  format: kafka
  options: {{kafka.bootstrap.servers: "{}", subscribe: {}, startingOffsets: earliest,
            maxOffsetsPerTrigger: 600}}
query:
  select: [abs(prediction - ground_truth) AS abs_error]
  groupBy: [model_id]
  aggregates: [count, mean(prediction), stddev(prediction), mean(feature_vector),
               mean(abs_error)]
drift:
  series: [prediction, abs_error]
  baseline: {{type: warmup, records: 200}}
  minSamples: 100
  windowRecords: 100
sinks:
)",
                     name, brokers, input) +
         sink("stats-json", "stats", "") + sink("stats-avro", "stats", registry_format) +
         sink("alerts-json", "alerts", "") + sink("alerts-avro", "alerts", file_format) +
         sink("evaluations-json", "evaluations", "") +
         sink("evaluations-avro", "evaluations", registry_format) +
         "trigger: {availableNow: true}\ncheckpointLocation: " + dir / "checkpoint" + "\n";
}

uint32_t SchemaId(const std::string& framed) {
  REQUIRE(framed.size() > 5);
  REQUIRE(framed[0] == '\0');
  return (uint32_t{static_cast<unsigned char>(framed[1])} << 24) |
         (uint32_t{static_cast<unsigned char>(framed[2])} << 16) |
         (uint32_t{static_cast<unsigned char>(framed[3])} << 8) |
         uint32_t{static_cast<unsigned char>(framed[4])};
}

// The Avro records of `avro_topic` hold, record for record, the rows of `json_topic`: decoded
// with libavro against `schema` (or, framed, the registry's schema of each record's id).
size_t CheckSameRows(const std::string& json_topic, const std::string& avro_topic,
                     const RowShape& shape, testing::FakeSchemaRegistry* registry,
                     const std::string& schema = "") {
  const std::vector<Consumed> json = ReadSettled(json_topic);
  const std::vector<Consumed> avro = ReadSettled(avro_topic);
  REQUIRE(json.size() == avro.size());
  std::unique_ptr<testing::AvroRowReader> reader;
  if (!schema.empty()) reader = std::make_unique<testing::AvroRowReader>(schema);
  for (size_t i = 0; i < json.size(); ++i) {
    INFO(avro_topic << " record " << i << ": " << json[i].value);
    CHECK(avro[i].key == json[i].key);
    std::string_view value = avro[i].value;
    if (registry != nullptr) {
      const uint32_t id = SchemaId(avro[i].value);
      if (!reader) reader = std::make_unique<testing::AvroRowReader>(registry->schema(int(id)));
      value.remove_prefix(5);
    }
    CHECK(reader->Compare(shape, value, json[i].value) == "");
  }
  return json.size();
}

TEST_CASE("stats, alerts and evaluations written as Avro by the Kafka sink hold what its JSON "
          "sinks write, and a batch delivered again after a crash carries identical bytes",
          "[kafka][daemon][format][avro][sink]") {
  Admin admin;
  testing::FakeSchemaRegistry registry;
  REQUIRE(registry.running());
  const std::string input = UniqueName("avro-out-logs");
  admin.CreateTopic(input, 1);
  std::map<std::string, std::string> topics;
  for (const char* sink : {"stats-json", "stats-avro", "alerts-json", "alerts-avro",
                           "evaluations-json", "evaluations-avro"}) {
    topics[sink] = UniqueName(sink);
    admin.CreateTopic(topics[sink], 1);
  }

  // Two models; model-1's prediction moves by 4 sigma after its first 500 records.
  std::vector<std::string> records;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int i = 0; i < 2400; ++i) {
    const int model = i % 2;
    const int index = i / 2;
    const double shift = model == 1 && index >= 500 ? 0.4 : 0.0;
    const double prediction = 0.5 + shift + 0.1 * normal(rng);
    records.push_back(fmt::format(
        R"({{"model_id":"model-{}","event_time":"{}","feature_vector":[{},{}],)"
        R"("prediction":{},"ground_truth":{}}})",
        model, FormatIso8601Micros(int64_t{1'795'000'000'000'000} + i * 1000), normal(rng),
        2 + normal(rng), prediction, i % 5 == 0 ? 1.0 : 0.0));
  }
  Produce(input, 0, records);

  TempDir dir("driftd-avro-out");
  const std::string name = UniqueName("avro-out");
  WriteFile(dir / "p.yaml", AvroOutPipeline(name, input, topics, registry.url(), dir));
  LoadOptions load;
  load.catalog = &ConnectorDeclarations();
  load.value_formats = &ValueFormats();
  auto spec = LoadPipelineFile(dir / "p.yaml", load);
  INFO(FormatProblems("p.yaml", spec ? std::vector<ConfigProblem>{} : spec.error()));
  REQUIRE(spec);

  // The first run dies inside batch 1's transaction, after its records were produced; the
  // second finishes that batch from the checkpoint's outbox, then the rest.
  auto crashed = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120),
                           {{"DRIFTD_KAFKA_SINK_FAULT", "before_commit@1"}});
  INFO(crashed.output);
  REQUIRE(crashed.exit_code == -1);
  auto run = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  auto stats_shape = StreamRowShape(*spec, StreamKind::kStats);
  REQUIRE(stats_shape);
  CHECK(CheckSameRows(topics["stats-json"], topics["stats-avro"], *stats_shape, &registry) >= 8);
  const size_t alerts =
      CheckSameRows(topics["alerts-json"], topics["alerts-avro"], AlertRowShape(), nullptr,
                    ReadFile(std::string(DRIFTD_SOURCE_DIR) + "/deploy/avro/driftd-alert.avsc"));
  CHECK(alerts >= 1);
  CHECK(CheckSameRows(topics["evaluations-json"], topics["evaluations-avro"],
                      EvaluationRowShape(), &registry) >= 20);

  // Each run registered each derived schema once, under <topic>-value, and got the same id.
  for (const char* sink : {"stats-avro", "evaluations-avro"}) {
    const std::vector<int> ids = registry.registrations(topics[sink] + "-value");
    REQUIRE(ids.size() == 2);
    CHECK(ids[0] == ids[1]);
  }
  // Batch 1's first attempt is there for read_uncommitted readers, aborted, byte for byte the
  // same as its committed delivery.
  const std::vector<Consumed> committed = ReadSettled(topics["stats-avro"]);
  const std::vector<Consumed> all = ReadAll(topics["stats-avro"], "read_uncommitted");
  CHECK(all.size() > committed.size());
  std::set<std::string> values;
  for (const Consumed& record : committed) values.insert(record.value);
  for (const Consumed& record : all) CHECK(values.count(record.value) == 1);
}

TEST_CASE("a row its Avro schema cannot hold stops the query with the column named, delivers "
          "nothing, and a corrected schema delivers the batch",
          "[kafka][daemon][format][avro][sink]") {
  Admin admin;
  const std::string input = UniqueName("avro-misfit-logs");
  const std::string output = UniqueName("avro-misfit-stats");
  admin.CreateTopic(input, 1);
  admin.CreateTopic(output, 1);
  Produce(input, 0, {R"({"model_id":"model-0","prediction":0.25})",
                     R"({"model_id":"model-1","prediction":0.75})"});
  TempDir dir("driftd-avro-misfit");
  // model_id as an enum that lacks model-1: validate cannot know the values.
  auto schema = [&](const std::string& symbols) {
    WriteFile(dir / "stats.avsc",
              R"({"type": "record", "name": "Stats", "fields": [
                {"name": "model_id", "type": {"type": "enum", "name": "Model", "symbols": [)" +
                  symbols + R"(]}},
                {"name": "count", "type": "long"}]})");
  };
  schema(R"("model-0")");
  WriteFile(dir / "p.yaml", fmt::format(R"(name: {}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: prediction, type: double}}
source:
  format: kafka
  options: {{kafka.bootstrap.servers: "{}", subscribe: {}, startingOffsets: earliest}}
query:
  groupBy: [model_id]
  aggregates: [count]
sinks:
  - {{name: stats, format: kafka, outputMode: update, valueFormat: avro,
     valueOptions: {{schemaFile: {}}},
     options: {{topic: {}, kafka.bootstrap.servers: "{}"}}}}
trigger: {{once: true}}
checkpointLocation: {}
)",
                                        UniqueName("avro-misfit"), Bootstrap(), input,
                                        dir / "stats.avsc", output, Bootstrap(),
                                        dir / "checkpoint"));
  auto refused = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120));
  INFO(refused.output);
  CHECK(refused.exit_code == 78);
  CHECK_THAT(refused.output,
             Catch::Contains("the row does not fit the Avro writer schema: column 'model_id': "
                             "'model-1' is not a symbol of enum Model"));
  CHECK(ReadSettled(output).empty());

  schema(R"("model-0", "model-1")");
  auto delivered = RunDriftd({"run", dir / "p.yaml", "--http", "off"}, std::chrono::seconds(120));
  INFO(delivered.output);
  REQUIRE(delivered.exit_code == 0);
  CHECK(ReadSettled(output).size() == 2);  // the first batch's rows, from the outbox
}

}  // namespace
}  // namespace driftd
