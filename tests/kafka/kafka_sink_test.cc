// The kafka sink against the real broker: transactional delivery that read_committed consumers
// see exactly once, fencing, and recovery decisions after a crash in the middle of a delivery.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <regex>

#include <spdlog/sinks/ringbuffer_sink.h>

#include "engine/log.h"
#include "tests/kafka/kafka_test_util.h"

namespace driftd {
namespace {

using namespace kafka_test;

BatchOutput Batch(int64_t batch_id, int rows) {
  BatchOutput output;
  output.batch_id = batch_id;
  for (int i = 0; i < rows; ++i) {
    output.stats_update.Add(fmt::format("model-{}", i),
                            fmt::format(R"({{"model_id":"model-{}","batch":{}}})", i, batch_id));
  }
  output.alerts.Add("model-0", fmt::format(R"({{"alert":"psi","batch":{}}})", batch_id));
  return output;
}

std::vector<std::string> RowsOf(const BatchOutput& output) { return output.stats_update.rows; }

struct SinkFixture {
  Admin admin;
  std::string stats = UniqueName("stats");
  std::string alerts = UniqueName("alerts");
  std::string progress = UniqueName("progress");
  PipelineSpec pipeline;

  explicit SinkFixture(const std::string& name) {
    admin.CreateTopic(stats, 2);
    admin.CreateTopic(alerts, 1);
    pipeline.name = UniqueName(name);
    pipeline.source.format = "rate";
    pipeline.sinks.push_back(KafkaSinkSpec("stats", stats, StreamKind::kStats, OutputMode::kUpdate,
                                           {{"progressTopic", progress}}));
    pipeline.sinks.push_back(KafkaSinkSpec("alerts", alerts, StreamKind::kAlerts,
                                           OutputMode::kAppend, {{"progressTopic", progress}}));
  }

  // A sink as the executor opens it for the checkpoint `checkpoint_id` ("": none given).
  std::unique_ptr<Sink> OpenSink(const std::string& checkpoint_id = "") {
    auto sinks = CreateSinks(pipeline);
    INFO((sinks ? "" : sinks.error().message()));
    REQUIRE(sinks);
    REQUIRE(sinks->size() == 1);  // both kafka sinks share one transactional producer
    std::unique_ptr<Sink> sink = std::move(sinks->front());
    // As the executor would for a checkpoint at least as new as anything delivered.
    sink->SetCheckpointId(checkpoint_id, std::numeric_limits<int64_t>::max());
    RequireOk(sink->Open());
    return sink;
  }

  // Runs a sink in a child process that delivers `output` and dies by SIGKILL at `fault`.
  void CrashDuringDelivery(const BatchOutput& output, const char* fault) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      setenv("DRIFTD_KAFKA_SINK_FAULT", fault, 1);
      auto sinks = CreateSinks(pipeline);
      if (!sinks || !sinks->front()->Open()) _exit(3);
      (void)sinks->front()->Deliver(output);
      _exit(4);  // the fault should have killed us
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
  }
};

std::vector<std::string> Sorted(std::vector<std::string> values) {
  std::sort(values.begin(), values.end());
  return values;
}

TEST_CASE("delivered rows are visible to read_committed consumers exactly once", "[kafka][sink]") {
  SinkFixture fixture("deliver");
  auto sink = fixture.OpenSink();
  CHECK_FALSE(Require(sink->IsDelivered(0)));

  BatchOutput batch0 = Batch(0, 5);
  RequireOk(sink->Deliver(batch0));
  CHECK(Require(sink->IsDelivered(0)));
  CHECK_FALSE(Require(sink->IsDelivered(1)));

  std::vector<Consumed> stats = ReadCommitted(fixture.stats, 5);
  CHECK(Sorted(ValuesOf(stats)) == Sorted(RowsOf(batch0)));
  for (const Consumed& record : stats) {
    CHECK_THAT(record.value, Catch::Contains("\"model_id\":\"" + record.key + "\""));
  }
  CHECK(ValuesOf(ReadCommitted(fixture.alerts, 1)) == batch0.alerts.rows);
  std::vector<Consumed> progress = ReadCommitted(fixture.progress, 1);
  REQUIRE(progress.size() == 1);
  CHECK(progress[0].key == fixture.pipeline.name);
  // The writer: this sink object's random id, which tells its records from another instance's.
  CHECK(std::regex_match(progress[0].value,
                         std::regex(fmt::format(R"(\{{"pipeline":"{}","checkpoint":"",)"
                                                R"("batchId":0,"writer":"[0-9a-f]{{32}}"\}})",
                                                fixture.pipeline.name))));

  BatchOutput batch1 = Batch(1, 3);
  RequireOk(sink->Deliver(batch1));
  RequireOk(sink->Close());
  sink.reset();
  CHECK(ReadCommitted(fixture.stats, 8).size() == 8);

  // A new sink (a restart) learns from the progress topic what was delivered.
  auto reopened = fixture.OpenSink();
  CHECK(Require(reopened->IsDelivered(1)));
  CHECK_FALSE(Require(reopened->IsDelivered(2)));

  // A pipeline restarted from an empty checkpoint numbers batches from 0 again: its output is
  // delivered, and the newest progress record is what counts after the next restart.
  RequireOk(reopened->Deliver(Batch(0, 2)));
  CHECK(ReadCommitted(fixture.stats, 10).size() == 10);
  reopened.reset();
  auto after_reset = fixture.OpenSink();
  CHECK(Require(after_reset->IsDelivered(0)));
  CHECK_FALSE(Require(after_reset->IsDelivered(1)));
}

TEST_CASE("batches of a new checkpoint are not mistaken for the old checkpoint's delivered ones",
          "[kafka][sink][checkpoint]") {
  SinkFixture fixture("reset");
  {
    auto old_checkpoint = fixture.OpenSink("c0ffee01");
    for (int64_t batch = 0; batch <= 4; ++batch)
      RequireOk(old_checkpoint->Deliver(Batch(batch, 1)));
  }
  {
    // The checkpoint directory was deleted: the new one numbers its batches from 0 again.
    auto new_checkpoint = fixture.OpenSink("c0ffee02");
    CHECK_FALSE(Require(new_checkpoint->IsDelivered(0)));
    RequireOk(new_checkpoint->Deliver(Batch(0, 2)));
    CHECK(Require(new_checkpoint->IsDelivered(0)));
    CHECK_FALSE(Require(new_checkpoint->IsDelivered(1)));
  }
  // After a restart each checkpoint reads only its own progress.
  CHECK(Require(fixture.OpenSink("c0ffee02")->IsDelivered(0)));
  CHECK_FALSE(Require(fixture.OpenSink("c0ffee02")->IsDelivered(1)));
  CHECK_FALSE(Require(fixture.OpenSink("c0ffee03")->IsDelivered(0)));
  CHECK(ReadCommitted(fixture.stats, 7).size() == 7);

  // A progress record from before records carried a checkpoint id belongs to no checkpoint.
  Client producer = MakeClient(RD_KAFKA_PRODUCER, {});
  const std::string legacy =
      fmt::format(R"({{"pipeline":"{}","batchId":9}})", fixture.pipeline.name);
  REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(fixture.progress.c_str()),
                            RD_KAFKA_V_KEY(const_cast<char*>(fixture.pipeline.name.data()),
                                           fixture.pipeline.name.size()),
                            RD_KAFKA_V_VALUE(const_cast<char*>(legacy.data()), legacy.size()),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                            RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  CHECK_FALSE(Require(fixture.OpenSink("c0ffee02")->IsDelivered(0)));
}

TEST_CASE("an aborted or unfinished transaction is invisible to read_committed consumers",
          "[kafka][sink]") {
  SinkFixture fixture("invisible");
  Client producer = MakeClient(RD_KAFKA_PRODUCER, {{"transactional.id", UniqueName("raw")}});
  REQUIRE_FALSE(rd_kafka_init_transactions(producer.get(), 30'000));
  auto produce_in_transaction = [&](const std::string& value) {
    REQUIRE_FALSE(rd_kafka_begin_transaction(producer.get()));
    REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(fixture.alerts.c_str()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  };
  produce_in_transaction("aborted");
  REQUIRE_FALSE(rd_kafka_abort_transaction(producer.get(), 30'000));
  CHECK(ReadAll(fixture.alerts).empty());
  CHECK(ValuesOf(ReadAll(fixture.alerts, "read_uncommitted")) ==
        std::vector<std::string>{"aborted"});

  // The sink's committed rows stay visible next to an open transaction of another producer.
  auto sink = fixture.OpenSink();
  RequireOk(sink->Deliver(Batch(0, 1)));
  produce_in_transaction("open");
  CHECK(ValuesOf(ReadCommitted(fixture.alerts, 1)) == Batch(0, 1).alerts.rows);
  CHECK(ReadAll(fixture.alerts, "read_uncommitted").size() == 3);
  REQUIRE_FALSE(rd_kafka_abort_transaction(producer.get(), 30'000));
}

TEST_CASE("a second sink with the same transactional id fences the first", "[kafka][sink]") {
  SinkFixture fixture("fencing");
  auto zombie = fixture.OpenSink();
  RequireOk(zombie->Deliver(Batch(0, 2)));

  auto successor = fixture.OpenSink();
  CHECK(Require(successor->IsDelivered(0)));
  Status fenced = zombie->Deliver(Batch(1, 2));
  REQUIRE_FALSE(fenced);
  CHECK(fenced.error().code() == ErrorCode::kUnrecoverable);  // never retried
  CHECK_THAT(fenced.error().message(), Catch::Contains("fenced", Catch::CaseSensitive::No));

  RequireOk(successor->Deliver(Batch(1, 2)));
  CHECK(ReadCommitted(fixture.stats, 4).size() == 4);
  CHECK(ReadCommitted(fixture.alerts, 2).size() == 2);
}

TEST_CASE("a crash between produce and commit leaves the batch undelivered until redelivery",
          "[kafka][sink][crash]") {
  SinkFixture fixture("crash");
  {
    auto sink = fixture.OpenSink();
    RequireOk(sink->Deliver(Batch(0, 2)));
  }
  const BatchOutput batch1 = Batch(1, 3);
  fixture.CrashDuringDelivery(batch1, "before_commit");
  // The dead producer's records reached the broker, uncommitted.
  CHECK(ReadAll(fixture.stats, "read_uncommitted").size() == 5);

  auto recovered = fixture.OpenSink();  // fences the dead producer and aborts its transaction
  CHECK(Require(recovered->IsDelivered(0)));
  CHECK_FALSE(Require(recovered->IsDelivered(1)));
  CHECK(ReadAll(fixture.stats).size() == 2);

  RequireOk(recovered->Deliver(batch1));
  CHECK(Require(recovered->IsDelivered(1)));
  std::vector<std::string> expected = RowsOf(Batch(0, 2));
  for (const std::string& row : RowsOf(batch1)) expected.push_back(row);
  CHECK(Sorted(ValuesOf(ReadCommitted(fixture.stats, 5))) == Sorted(expected));
}

TEST_CASE("a crash right after commit leaves the batch delivered", "[kafka][sink][crash]") {
  SinkFixture fixture("crash-after");
  fixture.CrashDuringDelivery(Batch(0, 2), "after_commit");
  auto recovered = fixture.OpenSink();
  CHECK(Require(recovered->IsDelivered(0)));
  CHECK(ReadCommitted(fixture.stats, 2).size() == 2);
}

TEST_CASE("with a kafka source the transaction commits the batch's source offsets",
          "[kafka][sink]") {
  SinkFixture fixture("offsets");
  const std::string input = UniqueName("input");
  fixture.admin.CreateTopic(input, 2);
  fixture.pipeline.source.format = "kafka";
  fixture.pipeline.source.options = KafkaOptions(ConnectorRole::kSource, {{"subscribe", input}});
  auto sink = fixture.OpenSink();
  BatchOutput batch = Batch(0, 1);
  batch.source_end = {{input + "-0", 7}, {input + "-1", 3}};
  RequireOk(sink->Deliver(batch));
  const std::string group = "driftd-" + fixture.pipeline.name;
  CHECK(fixture.admin.CommittedOffset(group, input, 0) == 7);
  CHECK(fixture.admin.CommittedOffset(group, input, 1) == 3);
}

// Copies what the "kafka" logger logs while it lives.
struct CapturedKafkaLog {
  std::shared_ptr<spdlog::logger> logger = GetLogger("kafka");
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> capture =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);

  CapturedKafkaLog() { logger->sinks().push_back(capture); }
  ~CapturedKafkaLog() {
    auto& sinks = logger->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), capture), sinks.end());
  }

  // Logged lines containing `text`.
  int Count(std::string_view text) const {
    int count = 0;
    for (const std::string& line : capture->last_formatted()) {
      if (line.find(text) != std::string::npos) ++count;
    }
    return count;
  }
};

TEST_CASE("producer errors are logged while the sink delivers, each distinct one once",
          "[kafka][sink][errors]") {
  SinkFixture fixture("errors");
  // A second bootstrap address where nothing listens: the producer keeps failing to reach it.
  const std::string servers = Bootstrap() + ",127.0.0.1:1";
  for (SinkSpec& spec : fixture.pipeline.sinks) {
    spec.options.Set("kafka.bootstrap.servers", servers);
    spec.options.Set("kafka.reconnect.backoff.ms", "10");
    spec.options.Set("kafka.reconnect.backoff.max.ms", "50");
    spec.options.Set("kafka.enable.sparse.connections", "false");  // connect to every broker
  }
  CapturedKafkaLog log;
  auto sink = fixture.OpenSink();
  int64_t batch = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (log.Count("producer error") == 0 && std::chrono::steady_clock::now() < deadline) {
    RequireOk(sink->Deliver(Batch(batch++, 1)));
  }
  // Logged during delivery, not held back until the sink closes.
  CHECK(log.Count("producer error") >= 1);
  // More deliveries over a while: the same error repeats underneath but is not logged again.
  const auto later = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < later) RequireOk(sink->Deliver(Batch(batch++, 1)));
  CHECK(log.Count("producer error _TRANSPORT") == 1);
  RequireOk(sink->Close());
  CHECK(log.Count("producer error _TRANSPORT") == 1);
}

TEST_CASE("kafka sinks of one pipeline must agree on their shared producer", "[kafka][sink]") {
  PipelineSpec pipeline;
  pipeline.name = "mismatch";
  pipeline.sinks.push_back(KafkaSinkSpec("a", "t1"));
  pipeline.sinks.push_back(KafkaSinkSpec("b", "t2", StreamKind::kAlerts, OutputMode::kAppend,
                                         {{"kafka.bootstrap.servers", "elsewhere:9092"}}));
  auto sinks = CreateSinks(pipeline);
  REQUIRE_FALSE(sinks);
  CHECK(sinks.error().code() == ErrorCode::kConfig);

  PipelineSpec missing_topic;
  missing_topic.name = UniqueName("missing");
  missing_topic.sinks.push_back(KafkaSinkSpec("a", UniqueName("no-such-topic")));
  auto created = CreateSinks(missing_topic);
  REQUIRE(created);
  Status opened = created->front()->Open();
  REQUIRE_FALSE(opened);
  CHECK_THAT(opened.error().message(), Catch::Contains("does not exist"));
  // A topic may be created later: the failure is one a service directory tries again.
  CHECK(opened.error().code() == ErrorCode::kExternal);
}

}  // namespace
}  // namespace driftd
