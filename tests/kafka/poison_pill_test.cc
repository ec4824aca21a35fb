// One record never stops a pipeline: against the real broker with default topic settings, a
// malformed record of almost a megabyte (its dead-letter row is larger than a topic takes), a
// valid record whose model id is 600 KB (its stats row would be), and a 10 MB record sit among
// good records. Under every policy but fail the good rows are all delivered, the pills are
// counted, and under dead_letter each pill is one dead-letter row that fits the topic, cut and
// marked truncated. A second run on the same checkpoint finds nothing stuck.
#include <simdjson.h>

#include <atomic>
#include <string>
#include <vector>

#include "tests/kafka/kafka_test_util.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using namespace kafka_test;
using testing::DriftdBinary;
using testing::RunDriftd;
using testing::RunResult;
using testing::TempDir;
using testing::WriteFile;

// What the broker takes of one record by default (message.max.bytes of the broker, and so the
// topics' max.message.bytes), and librdkafka's own limit of a produced message.
constexpr size_t kProducerLimit = 1'000'000;

std::string Good(int i) {
  return fmt::format("{{\"model_id\":\"m-{}\",\"prediction\":{}}}", i % 2, i);
}

// A producer for records beyond librdkafka's default message.max.bytes; every record must be
// acknowledged by the broker.
void ProduceLarge(const std::string& topic, const std::vector<std::string>& values) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  const std::map<std::string, std::string> settings = {{"bootstrap.servers", Bootstrap()},
                                                       {"linger.ms", "1"},
                                                       {"message.max.bytes", "20000000"},
                                                       {"compression.type", "none"}};
  for (const auto& [name, value] : settings) {
    REQUIRE(rd_kafka_conf_set(conf, name.c_str(), value.c_str(), error, sizeof error) ==
            RD_KAFKA_CONF_OK);
  }
  static std::atomic<int> failed{0};
  failed = 0;
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* message, void*) {
    if (message->err) {
      std::fprintf(stderr, "delivery of %zu bytes failed: %s\n", message->len, rd_kafka_err2str(message->err));
      ++failed;
    }
  });
  Client producer{rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error)};
  REQUIRE(producer);
  for (const std::string& value : values) {
    REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                              RD_KAFKA_V_PARTITION(0),
                              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  REQUIRE(rd_kafka_flush(producer.get(), 60'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE(failed == 0);
}

std::string Pipeline(const std::string& name, const std::string& input, const std::string& stats,
                     const std::string& dead, const std::string& policy,
                     const std::string& checkpoint) {
  std::string yaml = fmt::format(R"(name: {name}
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: prediction, type: double}}
source:
  format: kafka
  options:
    subscribe: {input}
    startingOffsets: earliest
    kafka.bootstrap.servers: "{bootstrap}"
  malformed: {{policy: {policy}}}
query: {{groupBy: [model_id], aggregates: [count, sum(prediction)]}}
sinks:
  - name: stats
    format: kafka
    stream: stats
    outputMode: update
    options: {{topic: {stats}, kafka.bootstrap.servers: "{bootstrap}"}}
)",
                                 fmt::arg("name", name), fmt::arg("input", input),
                                 fmt::arg("bootstrap", Bootstrap()), fmt::arg("policy", policy),
                                 fmt::arg("stats", stats));
  if (!dead.empty()) {
    yaml += fmt::format(R"(  - name: rejects
    format: kafka
    stream: dead_letter
    options: {{topic: {dead}, kafka.bootstrap.servers: "{bootstrap}"}}
)",
                        fmt::arg("dead", dead), fmt::arg("bootstrap", Bootstrap()));
  }
  yaml += fmt::format("trigger: {{availableNow: true}}\ncheckpointLocation: {}\n", checkpoint);
  return yaml;
}

// The last count and sum each model's stats rows give.
std::map<std::string, std::pair<int64_t, double>> LastStats(const std::string& topic) {
  std::map<std::string, std::pair<int64_t, double>> last;
  simdjson::dom::parser parser;
  for (const Consumed& record : ReadSettled(topic)) {
    simdjson::dom::element row = parser.parse(record.value);
    std::string_view model = row["model_id"].get_string().value();
    last[std::string(model)] = {row["count"].get_int64().value(),
                                row["sum(prediction)"].get_double().value()};
  }
  return last;
}

}  // namespace

TEST_CASE("a record no topic can take, a 600 KB model id and a 10 MB record are set aside, "
          "counted and dead-lettered cut to fit, and every good row is delivered",
          "[kafka][malformed][e2e]") {
  Admin admin;
  const std::string input = UniqueName("pills-in");
  // Large enough for the 10 MB pill; the sinks' topics keep the broker's defaults.
  admin.CreateTopic(input, 1, {{"max.message.bytes", "16000000"}, {"segment.bytes", "33554432"}});

  std::vector<std::string> records;
  for (int i = 0; i < 10; ++i) records.push_back(Good(i));
  // Not JSON (a '}' too many), 999,980 bytes of escaped quotes: its dead-letter row, escaped
  // once more, is two megabytes.
  const std::string prefix = "{\"model_id\":\"m-0\",\"prediction\":1,\"pad\":\"";
  std::string not_json = prefix;
  while (not_json.size() < 999'980 - 3) not_json += "\\\"";
  not_json += "\"}}";
  records.push_back(not_json);
  for (int i = 10; i < 20; ++i) records.push_back(Good(i));
  // Valid, with a 600 KB model id: a stats row of it would be over the limit too.
  records.push_back("{\"model_id\":\"" + std::string(600'000, 'k') + "\",\"prediction\":1}");
  for (int i = 20; i < 30; ++i) records.push_back(Good(i));
  // 10 MB: over maxRecordBytes (1 MiB).
  records.push_back("{\"model_id\":\"m-1\",\"pad\":\"" + std::string(10'000'000, 'p') + "\"}");
  for (int i = 30; i < 40; ++i) records.push_back(Good(i));
  ProduceLarge(input, records);
  REQUIRE(ReadAll(input, "read_uncommitted").size() == records.size());
  // What the good records say, without driftd: model m-0 holds the even predictions.
  const std::pair<int64_t, double> m0{20, 0 + 2 + 4 + 6 + 8 + 10 + 12 + 14 + 16 + 18 + 20 + 22 +
                                              24 + 26 + 28 + 30 + 32 + 34 + 36 + 38};
  const std::pair<int64_t, double> m1{20, 1 + 3 + 5 + 7 + 9 + 11 + 13 + 15 + 17 + 19 + 21 + 23 +
                                              25 + 27 + 29 + 31 + 33 + 35 + 37 + 39};

  for (const std::string policy : {"dead_letter", "permissive", "drop"}) {
    DYNAMIC_SECTION("policy " << policy) {
      TempDir dir("driftd-pills");
      const std::string stats = UniqueName("pills-stats");
      const std::string dead = policy == "dead_letter" ? UniqueName("pills-dead") : "";
      admin.CreateTopic(stats, 1);
      if (!dead.empty()) admin.CreateTopic(dead, 1);
      const std::string pipeline = dir / "p.yaml";
      WriteFile(pipeline, Pipeline(UniqueName("pills"), input, stats, dead, policy,
                                   dir / "checkpoint"));

      RunResult run = RunDriftd({"run", pipeline, "--http", "off"}, std::chrono::seconds(120));
      INFO(run.output.substr(0, 4000));
      REQUIRE(run.exit_code == 0);
      auto last = LastStats(stats);
      CHECK(last.size() == 2);
      CHECK(last["m-0"] == m0);
      CHECK(last["m-1"] == m1);
      // The three pills are counted as malformed, by reason.
      CHECK_THAT(run.output, Catch::Contains("\"malformed\""));

      if (!dead.empty()) {
        std::vector<Consumed> letters = ReadSettled(dead);
        REQUIRE(letters.size() == 3);
        simdjson::dom::parser parser;
        std::vector<std::string> reasons;
        for (const Consumed& letter : letters) {
          CHECK(letter.value.size() < kProducerLimit);
          simdjson::dom::element row = parser.parse(letter.value);
          reasons.emplace_back(row["reason"].get_string().value());
        }
        CHECK(reasons == std::vector<std::string>{"not_json", "too_large", "too_large"});
        simdjson::dom::element first = parser.parse(letters[0].value);
        CHECK(first["truncated"].get_bool().value());
        simdjson::dom::element key = parser.parse(letters[1].value);
        CHECK_THAT(std::string(key["detail"].get_string().value()),
                   Catch::Contains("maxKeyBytes"));
      }

      // Nothing is left stuck in the outbox: a second run ends at once, delivering nothing
      // twice.
      RunResult again = RunDriftd({"run", pipeline, "--http", "off"}, std::chrono::seconds(60));
      INFO(again.output.substr(0, 4000));
      CHECK(again.exit_code == 0);
      CHECK(LastStats(stats) == last);
      if (!dead.empty()) CHECK(ReadSettled(dead).size() == 3);
    }
  }
}

}  // namespace driftd
