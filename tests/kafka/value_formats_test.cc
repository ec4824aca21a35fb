// Avro and Protobuf inference logs through the real broker and the daemon: `driftd run` reads
// a topic of binary records, filters, aggregates per model, and routes the records it cannot
// decode to the dead-letter stream. The Avro records are Confluent-framed, their writer
// schemas in a Schema Registry: no registry server runs here (Debian has none, and Apicurio's
// application needs Quarkus' build step), so the test runs a small Confluent-compatible one in
// this process (tests/support/schema_registry_fake.h), which answers GET /schemas/ids/<id> as
// Confluent's and Apicurio's ccompat API do.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <simdjson.h>

#include "tests/kafka/kafka_test_util.h"
#include "tests/support/avro_records.h"
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

}  // namespace
}  // namespace driftd
