// The kafka source against the real broker: exact and replayable ranges, rate limits, new
// partitions, starting offsets, data loss, group offsets and readiness.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <optional>
#include <thread>

#include "engine/metadata_columns.h"

#include "tests/kafka/kafka_test_util.h"

namespace driftd {
namespace {

using namespace kafka_test;

std::vector<std::string> TextsOfPartition(const ReadResult& result, const Source& source,
                                          const std::string& topic, int partition) {
  std::vector<std::string> texts;
  std::string prefix = fmt::format("topic {} partition {} ", topic, partition);
  for (const auto& record : result.records) {
    if (source.DescribePosition(record.position).rfind(prefix, 0) == 0) {
      texts.push_back(record.text);
    }
  }
  return texts;
}

TEST_CASE("the kafka source reads exactly the planned range of every partition",
          "[kafka][source]") {
  Admin admin;
  const std::string topic = UniqueName("exact");
  admin.CreateTopic(topic, 3);
  for (int p = 0; p < 3; ++p) Produce(topic, p, Values(fmt::format("p{}", p), 10));

  auto source = StartSource(SourcePipeline("exact", {{"subscribe", topic}}));
  SourceOffsets start = Require(source->InitialOffsets());
  CHECK(start == SourceOffsets{{topic + "-0", 0}, {topic + "-1", 0}, {topic + "-2", 0}});

  SourceOffsets end = Require(source->PlanBatch(start));
  CHECK(end == SourceOffsets{{topic + "-0", 10}, {topic + "-1", 10}, {topic + "-2", 10}});
  ReadResult first = ReadRange(*source, start, end);
  REQUIRE(first.records.size() == 30);
  for (int p = 0; p < 3; ++p) {
    CHECK(TextsOfPartition(first, *source, topic, p) == Values(fmt::format("p{}", p), 10));
  }
  CHECK(source->DescribePosition(first.records.front().position)
            .rfind(fmt::format("topic {} partition ", topic), 0) == 0);
  // Kafka's message timestamp comes along as the record's source time.
  CHECK(first.records.front().timestamp_us > 1'700'000'000'000'000);

  // Nothing new: the plan is the start.
  CHECK(Require(source->PlanBatch(end)) == end);

  Produce(topic, 0, Values("p0", 5, 10));
  SourceOffsets next = Require(source->PlanBatch(end));
  CHECK(next == SourceOffsets{{topic + "-0", 15}, {topic + "-1", 10}, {topic + "-2", 10}});
  CHECK(Texts(ReadRange(*source, end, next)) == Values("p0", 5, 10));

  // An inner range gives exactly its offsets.
  ReadResult inner = ReadRange(*source, {{topic + "-1", 3}}, {{topic + "-1", 7}});
  CHECK(Texts(inner) == Values("p1", 4, 3));
  std::vector<int64_t> offsets;
  for (const auto& record : inner.records) offsets.push_back(record.position.offset);
  CHECK(offsets == std::vector<int64_t>{3, 4, 5, 6});
  CHECK(source->DescribePosition(inner.records.front().position) ==
        fmt::format("topic {} partition 1 offset 3", topic));

  std::vector<PartitionLag> lags = source->Lag({{topic + "-0", 12}, {topic + "-1", 10}});
  REQUIRE(lags.size() == 2);
  CHECK(lags[0].lag() == 3);
  CHECK(lags[1].lag() == 0);
}

// The threads of this process now (the entries of /proc/self/task).
size_t ThreadCount() {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

TEST_CASE("planning batches over 8 partitions asks for their offsets without starting threads",
          "[kafka][source]") {
  Admin admin;
  const std::string topic = UniqueName("plan-threads");
  admin.CreateTopic(topic, 8);
  for (int p = 0; p < 8; ++p) Produce(topic, p, Values(fmt::format("p{}", p), p + 1));

  auto source = StartSource(SourcePipeline("plan-threads", {{"subscribe", topic}}));
  SourceOffsets start = Require(source->InitialOffsets());
  SourceOffsets end = Require(source->PlanBatch(start));
  for (int p = 0; p < 8; ++p) CHECK(end.at(fmt::format("{}-{}", topic, p)) == p + 1);

  // An idle query plans a batch every trigger: a thread per partition and plan showed up as
  // dozens of threads started a second. Watch the thread count while planning.
  std::atomic<bool> planning{true};
  std::atomic<size_t> most{0};
  const size_t before = ThreadCount() + 1;  // the watcher below
  std::thread watcher([&] {
    while (planning) most = std::max(most.load(), ThreadCount());
  });
  for (int i = 0; i < 20; ++i) CHECK(Require(source->PlanBatch(end)) == end);
  planning = false;
  watcher.join();
  CHECK(most.load() <= before);
}

// Produces one record with a key (or none) and headers (name, value; a null value as nullopt).
void ProduceWithHeaders(
    const std::string& topic, const std::optional<std::string>& key, const std::string& value,
    const std::vector<std::pair<std::string, std::optional<std::string>>>& headers) {
  Client producer = MakeClient(RD_KAFKA_PRODUCER, {{"linger.ms", "1"}});
  rd_kafka_headers_t* list = rd_kafka_headers_new(headers.size());
  for (const auto& [name, header_value] : headers) {
    REQUIRE(rd_kafka_header_add(list, name.data(), static_cast<ssize_t>(name.size()),
                                (header_value ? header_value->data() : nullptr),
                                (header_value ? static_cast<ssize_t>(header_value->size()) : 0)) ==
            RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  // The producer owns the headers once the call succeeds.
  rd_kafka_resp_err_t err = rd_kafka_producev(
      producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
      RD_KAFKA_V_KEY((key ? key->data() : nullptr), (key ? key->size() : 0)),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
      RD_KAFKA_V_HEADERS(list), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) rd_kafka_headers_destroy(list);
  REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
}

struct MetadataRead {
  std::vector<std::optional<std::string>> keys;
  std::vector<std::string> headers;  // the `headers` column's text
  std::vector<int64_t> timestamp_types;
  std::vector<std::string> topics;
  std::vector<int64_t> partitions;
};

// Reads [start, end) and fills the metadata columns `columns` beside a one-field schema.
MetadataRead ReadMetadata(Source& source, const SourceOffsets& start, const SourceOffsets& end,
                          const std::vector<MetadataColumn>& columns) {
  auto reader = Require(source.Read(start, end));
  MetadataFiller filler(columns);
  MetadataRead read;
  InputChunk chunk;
  bool more = true;
  while (more) {
    chunk.Clear();
    more = Require(reader->Next(chunk, 1 << 20));
    RecordBatch batch;
    batch.num_rows = chunk.size();
    for (const auto& record : chunk.records()) batch.positions.push_back(record.position);
    filler.Fill(chunk, source, batch);
    REQUIRE(batch.columns.size() == columns.size());
    for (size_t c = 0; c < columns.size(); ++c) {
      const Column& column = batch.columns[c];
      for (size_t row = 0; row < batch.num_rows; ++row) {
        switch (columns[c]) {
          case MetadataColumn::kKey:
            read.keys.push_back(column.IsNull(row)
                                    ? std::nullopt
                                    : std::optional(std::string(column.String(row))));
            break;
          case MetadataColumn::kHeaders: read.headers.emplace_back(column.String(row)); break;
          case MetadataColumn::kTimestampType:
            read.timestamp_types.push_back(column.i64[row]);
            break;
          case MetadataColumn::kTopic: read.topics.emplace_back(column.String(row)); break;
          case MetadataColumn::kPartition: read.partitions.push_back(column.i64[row]); break;
          default: break;
        }
      }
    }
  }
  return read;
}

TEST_CASE("the kafka source carries each record's key, headers and timestamp type",
          "[kafka][source][metadata]") {
  Admin admin;
  const std::string topic = UniqueName("metadata");
  admin.CreateTopic(topic, 2);
  ProduceWithHeaders(topic, "model-a", "{}", {{"trace", "t-1"}, {"trace", "t-2"}, {"empty", ""}});
  ProduceWithHeaders(topic, std::nullopt, "{}", {{"null-valued", std::nullopt}});
  ProduceWithHeaders(topic, std::string("k\"q"), "{}", {});

  PipelineSpec pipeline = SourcePipeline("metadata", {{"subscribe", topic}});
  const std::vector<MetadataColumn> all = {MetadataColumn::kKey, MetadataColumn::kTopic,
                                           MetadataColumn::kPartition,
                                           MetadataColumn::kTimestampType,
                                           MetadataColumn::kHeaders};
  pipeline.query.metadata = all;
  auto source = StartSource(pipeline);
  SourceOffsets start = Require(source->InitialOffsets());
  SourceOffsets end = Require(source->PlanBatch(start));
  MetadataRead read = ReadMetadata(*source, start, end, all);
  CHECK(read.keys == std::vector<std::optional<std::string>>{"model-a", std::nullopt, "k\"q"});
  CHECK(read.headers == std::vector<std::string>{
                            R"([{"key":"trace","value":"t-1"},{"key":"trace","value":"t-2"},)"
                            R"({"key":"empty","value":""}])",
                            R"([{"key":"null-valued","value":null}])", "[]"});
  CHECK(read.timestamp_types == std::vector<int64_t>{0, 0, 0});  // CreateTime
  CHECK(read.topics == std::vector<std::string>(3, topic));
  CHECK(read.partitions == std::vector<int64_t>(3, 0));

  SECTION("a topic stamped by the broker says LogAppendTime") {
    const std::string stamped = UniqueName("metadata-append");
    admin.CreateTopic(stamped, 1, {{"message.timestamp.type", "LogAppendTime"}});
    ProduceWithHeaders(stamped, "k", "{}", {});
    PipelineSpec other = SourcePipeline("metadata", {{"subscribe", stamped}});
    other.query.metadata = {MetadataColumn::kTimestampType};
    auto broker_stamped = StartSource(other);
    SourceOffsets from = Require(broker_stamped->InitialOffsets());
    SourceOffsets to = Require(broker_stamped->PlanBatch(from));
    CHECK(ReadMetadata(*broker_stamped, from, to, {MetadataColumn::kTimestampType})
              .timestamp_types == std::vector<int64_t>{1});
  }
  SECTION("keys and headers are not copied when the query does not read them") {
    PipelineSpec plain = SourcePipeline("metadata", {{"subscribe", topic}});
    auto without = StartSource(plain);
    auto reader = Require(without->Read(start, end));
    InputChunk chunk;
    while (Require(reader->Next(chunk, 1 << 20))) {
    }
    REQUIRE(chunk.size() == 3);
    for (const auto& record : chunk.records()) {
      CHECK_FALSE(record.has_key);
      CHECK(record.headers_size == 0);
    }
  }
}

TEST_CASE("replaying a range after a restart yields the same records", "[kafka][source]") {
  Admin admin;
  const std::string topic = UniqueName("replay");
  admin.CreateTopic(topic, 2);
  Produce(topic, 0, Values("a", 40));
  Produce(topic, 1, Values("b", 25));

  PipelineSpec pipeline = SourcePipeline("replay", {{"subscribe", topic}});
  auto source = StartSource(pipeline);
  SourceOffsets start = Require(source->InitialOffsets());
  SourceOffsets end = Require(source->PlanBatch(start));
  ReadResult first = ReadRange(*source, start, end);
  // Small chunks: the reader stops and resumes many times.
  ReadResult again = ReadRange(*source, start, end, 16);
  source.reset();

  auto restarted = StartSource(pipeline, end);
  ReadResult replayed = ReadRange(*restarted, start, end, 100);
  REQUIRE(first.records.size() == 65);
  for (const ReadResult* other : {&again, &replayed}) {
    REQUIRE(other->records.size() == first.records.size());
    for (size_t i = 0; i < first.records.size(); ++i) {
      CHECK(other->records[i].text == first.records[i].text);
      CHECK(other->records[i].position.offset == first.records[i].position.offset);
      CHECK(other->records[i].position.partition == first.records[i].position.partition);
    }
  }
}

TEST_CASE("maxOffsetsPerTrigger splits the limit across partitions in proportion to their lag",
          "[kafka][source]") {
  Admin admin;
  const std::string topic = UniqueName("limit");
  admin.CreateTopic(topic, 3);
  Produce(topic, 0, Values("a", 60));
  Produce(topic, 1, Values("b", 30));
  Produce(topic, 2, Values("c", 10));

  SECTION("a limit that divides evenly") {
    auto source = StartSource(
        SourcePipeline("limit", {{"subscribe", topic}, {"maxOffsetsPerTrigger", "10"}}));
    SourceOffsets start = Require(source->InitialOffsets());
    SourceOffsets end = Require(source->PlanBatch(start));
    CHECK(end == SourceOffsets{{topic + "-0", 6}, {topic + "-1", 3}, {topic + "-2", 1}});
    CHECK(ReadRange(*source, start, end).records.size() == 10);

    // Batches of exactly 10 until the topic is drained, then nothing.
    int64_t total = 10;
    int batches = 1;
    for (;;) {
      SourceOffsets next = Require(source->PlanBatch(end));
      if (next == end) break;
      int64_t size = 0;
      for (const auto& [key, offset] : next) size += offset - end.at(key);
      CHECK(size == 10);
      total += size;
      end = next;
      ++batches;
    }
    CHECK(total == 100);
    CHECK(batches == 10);
  }
  SECTION("rounding leftovers go to the largest remainders") {
    auto source =
        StartSource(SourcePipeline("limit", {{"subscribe", topic}, {"maxOffsetsPerTrigger", "7"}}));
    SourceOffsets start = Require(source->InitialOffsets());
    // Shares 4.2, 2.1 and 0.7: floors 4, 2, 0 and the one left over to partition 2.
    CHECK(Require(source->PlanBatch(start)) ==
          SourceOffsets{{topic + "-0", 4}, {topic + "-1", 2}, {topic + "-2", 1}});
  }
}

TEST_CASE("partitions and topics that appear while running are read from their earliest offset",
          "[kafka][source]") {
  Admin admin;
  const std::string prefix = UniqueName("grow");
  const std::string topic = prefix + "-first";
  admin.CreateTopic(topic, 1);
  Produce(topic, 0, Values("x", 3));

  SECTION("subscribe picks up new partitions") {
    auto source = StartSource(SourcePipeline("grow", {{"subscribe", topic}}));
    SourceOffsets start = Require(source->InitialOffsets());
    SourceOffsets end = Require(source->PlanBatch(start));
    CHECK(end == SourceOffsets{{topic + "-0", 3}});

    admin.CreatePartitions(topic, 2);
    Produce(topic, 1, Values("y", 4));
    SourceOffsets next = Require(source->PlanBatch(end));
    CHECK(next == SourceOffsets{{topic + "-0", 3}, {topic + "-1", 4}});
    CHECK(Texts(ReadRange(*source, end, next)) == Values("y", 4));
  }
  SECTION("subscribePattern picks up new topics") {
    auto source = StartSource(SourcePipeline("grow", {{"subscribePattern", prefix + "-.*"}}));
    SourceOffsets start = Require(source->InitialOffsets());
    SourceOffsets end = Require(source->PlanBatch(start));
    CHECK(end == SourceOffsets{{topic + "-0", 3}});

    const std::string second = prefix + "-second";
    admin.CreateTopic(second, 1);
    Produce(second, 0, Values("z", 2));
    SourceOffsets next = Require(source->PlanBatch(end));
    CHECK(next == SourceOffsets{{topic + "-0", 3}, {second + "-0", 2}});
    CHECK(Texts(ReadRange(*source, end, next)) == Values("z", 2));
    CHECK(source->Describe() == fmt::format("KafkaV2[SubscribePattern[{}-.*]]", prefix));
  }
}

TEST_CASE("startingOffsets chooses where a new query starts", "[kafka][source]") {
  Admin admin;
  const std::string topic = UniqueName("starting");
  admin.CreateTopic(topic, 2);
  Produce(topic, 0, Values("a", 5));
  Produce(topic, 1, Values("b", 5));
  auto initial = [&](const std::string& starting) {
    auto source = StartSource(
        SourcePipeline("starting", {{"subscribe", topic}, {"startingOffsets", starting}}));
    return source->InitialOffsets();
  };

  CHECK(Require(initial("earliest")) == SourceOffsets{{topic + "-0", 0}, {topic + "-1", 0}});
  CHECK(Require(initial("latest")) == SourceOffsets{{topic + "-0", 5}, {topic + "-1", 5}});
  CHECK(Require(initial(fmt::format(R"({{"{}":{{"0":2,"1":-1}}}})", topic))) ==
        SourceOffsets{{topic + "-0", 2}, {topic + "-1", 5}});
  CHECK(Require(initial(fmt::format(R"({{"{}":{{"0":-2,"1":3}}}})", topic))) ==
        SourceOffsets{{topic + "-0", 0}, {topic + "-1", 3}});

  auto missing = initial(fmt::format(R"({{"{}":{{"0":2}}}})", topic));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == ErrorCode::kConfig);
  CHECK_THAT(missing.error().message(), Catch::Contains("partition 1"));

  // assign reads only the named partitions.
  auto assigned =
      StartSource(SourcePipeline("starting", {{"assign", fmt::format(R"({{"{}":[1]}})", topic)}}));
  SourceOffsets start = Require(assigned->InitialOffsets());
  CHECK(start == SourceOffsets{{topic + "-1", 0}});
  CHECK(Texts(ReadRange(*assigned, start, Require(assigned->PlanBatch(start)))) == Values("b", 5));
}

TEST_CASE("records of aborted transactions are skipped and do not stall a batch",
          "[kafka][source]") {
  Admin admin;
  const std::string topic = UniqueName("aborted");
  admin.CreateTopic(topic, 1);
  Produce(topic, 0, Values("before", 2));
  {
    Client producer = MakeClient(RD_KAFKA_PRODUCER, {{"transactional.id", UniqueName("aborting")}});
    REQUIRE_FALSE(rd_kafka_init_transactions(producer.get(), 30'000));
    REQUIRE_FALSE(rd_kafka_begin_transaction(producer.get()));
    for (const std::string& value : Values("aborted", 3)) {
      REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                                RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    REQUIRE_FALSE(rd_kafka_abort_transaction(producer.get(), 30'000));
  }

  auto source = StartSource(
      SourcePipeline("aborted", {{"subscribe", topic}, {"kafkaConsumer.pollTimeoutMs", "10000"}}));
  SourceOffsets start = Require(source->InitialOffsets());
  // Two records, three aborted ones and the abort marker, which lands a moment after
  // abort_transaction returns.
  SourceOffsets end;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  do {
    end = Require(source->PlanBatch(start));
  } while (end.at(topic + "-0") < 6 && std::chrono::steady_clock::now() < deadline);
  CHECK(end.at(topic + "-0") == 6);
  CHECK(Texts(ReadRange(*source, start, end)) == Values("before", 2));
}

TEST_CASE("small batches over transactions read every committed record once, in offset order",
          "[kafka][source]") {
  // Offsets without a record (aborted records, transaction markers) make a batch ask librdkafka
  // for more messages than its range holds: the surplus belongs to the next batch, which reads
  // it from the partition that stayed assigned, and a replay seeks back.
  Admin admin;
  const std::string topic = UniqueName("gaps");
  admin.CreateTopic(topic, 2);
  auto transaction = [&](const std::vector<std::string>& values, int32_t partition, bool commit) {
    Client producer = MakeClient(RD_KAFKA_PRODUCER, {{"transactional.id", UniqueName("gaps")}});
    REQUIRE_FALSE(rd_kafka_init_transactions(producer.get(), 30'000));
    REQUIRE_FALSE(rd_kafka_begin_transaction(producer.get()));
    for (const std::string& value : values) {
      REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                                RD_KAFKA_V_PARTITION(partition),
                                RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    if (commit) {
      REQUIRE_FALSE(rd_kafka_commit_transaction(producer.get(), 30'000));
    } else {
      REQUIRE_FALSE(rd_kafka_abort_transaction(producer.get(), 30'000));
    }
  };
  std::vector<std::string> expected[2];
  for (int32_t p = 0; p < 2; ++p) {
    const std::string prefix = fmt::format("p{}-", p);
    Produce(topic, p, Values(prefix + "plain", 5));
    transaction(Values(prefix + "aborted", 4), p, false);
    transaction(Values(prefix + "committed", 6), p, true);
    transaction(Values(prefix + "aborted-again", 3), p, false);
    Produce(topic, p, Values(prefix + "tail", 4));
    for (auto [part, n] : {std::pair{"plain", 5}, {"committed", 6}, {"tail", 4}}) {
      for (const std::string& value : Values(prefix + part, n)) expected[p].push_back(value);
    }
  }
  // 5 + 4 + 1 + 6 + 1 + 3 + 1 + 4 offsets per partition (a marker after each transaction).
  constexpr int64_t kEnd = 25;

  auto source = StartSource(SourcePipeline(
      "gaps", {{"subscribe", topic}, {"maxOffsetsPerTrigger", "6"},
               {"kafkaConsumer.pollTimeoutMs", "10000"}}));
  const SourceOffsets first = Require(source->InitialOffsets());
  // The last marker lands a moment after abort_transaction returns: wait until the ends (as a
  // plan sees them) are there.
  auto ends_reached = [&] {
    (void)Require(source->PlanBatch(first));
    int64_t total = 0;
    for (const PartitionLag& lag : source->Lag(first)) total += lag.latest;
    return total == 2 * kEnd;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!ends_reached() && std::chrono::steady_clock::now() < deadline) {
  }
  REQUIRE(ends_reached());

  SourceOffsets position = first;
  std::vector<std::string> read[2];
  int batches = 0;
  for (;;) {
    SourceOffsets end = Require(source->PlanBatch(position));
    if (end == position) break;
    ReadResult batch = ReadRange(*source, position, end, 32);
    for (const auto& record : batch.records) {
      const int p = source->DescribePosition(record.position)
                            .rfind(fmt::format("topic {} partition 0 ", topic), 0) == 0
                        ? 0
                        : 1;
      read[p].push_back(record.text);
    }
    position = end;
    ++batches;
  }
  CHECK(position == SourceOffsets{{topic + "-0", kEnd}, {topic + "-1", kEnd}});
  CHECK(batches == 9);  // 50 offsets in batches of at most 6
  CHECK(read[0] == expected[0]);
  CHECK(read[1] == expected[1]);

  // A replay of the whole range moves both partitions back and gives the same records.
  ReadResult replay = ReadRange(*source, first, position);
  CHECK(TextsOfPartition(replay, *source, topic, 0) == expected[0]);
  CHECK(TextsOfPartition(replay, *source, topic, 1) == expected[1]);
}

TEST_CASE("records deleted below the start are data loss unless failOnDataLoss is false",
          "[kafka][source][dataloss]") {
  Admin admin;
  const std::string topic = UniqueName("truncated");
  admin.CreateTopic(topic, 1);
  Produce(topic, 0, Values("r", 10));
  const std::string key = topic + "-0";
  admin.DeleteRecords(topic, 0, 6);

  SECTION("failOnDataLoss=true stops planning and reading with the offsets named") {
    auto source = StartSource(SourcePipeline("truncated", {{"subscribe", topic}}));
    auto planned = source->PlanBatch({{key, 2}});
    REQUIRE_FALSE(planned);
    CHECK(planned.error().code() == ErrorCode::kDataLoss);
    CHECK_THAT(planned.error().message(),
               Catch::Contains(fmt::format("topic {} partition 0", topic)) &&
                   Catch::Contains("offsets 2 to 5"));

    Error error = ReadError(*source, {{key, 2}}, {{key, 10}});
    CHECK(error.code() == ErrorCode::kDataLoss);
    CHECK_THAT(error.message(), Catch::Contains(fmt::format("topic {} partition 0", topic)));
  }
  SECTION("failOnDataLoss=false skips ahead and counts the lost records") {
    auto source = StartSource(
        SourcePipeline("truncated", {{"subscribe", topic}, {"failOnDataLoss", "false"}}));
    SourceOffsets end = Require(source->PlanBatch({{key, 2}}));
    CHECK(end == SourceOffsets{{key, 10}});
    ReadResult result = ReadRange(*source, {{key, 2}}, end);
    CHECK(Texts(result) == Values("r", 4, 6));
    CHECK(result.lost == 4);
  }
}

TEST_CASE("a deleted topic is data loss unless failOnDataLoss is false",
          "[kafka][source][dataloss]") {
  Admin admin;
  const std::string topic = UniqueName("deleted");
  admin.CreateTopic(topic, 1);
  Produce(topic, 0, Values("r", 5));
  const std::string key = topic + "-0";
  admin.DeleteTopic(topic);

  SECTION("failOnDataLoss=true") {
    auto source = StartSource(SourcePipeline("deleted", {{"subscribe", topic}}));
    auto planned = source->PlanBatch({{key, 3}});
    REQUIRE_FALSE(planned);
    CHECK(planned.error().code() == ErrorCode::kDataLoss);
    CHECK_THAT(
        planned.error().message(),
        Catch::Contains(fmt::format("topic {} partition 0", topic)) && Catch::Contains("offset 3"));
    auto read = source->Read({{key, 0}}, {{key, 5}});
    REQUIRE_FALSE(read);
    CHECK(read.error().code() == ErrorCode::kDataLoss);
  }
  SECTION("failOnDataLoss=false") {
    auto source =
        StartSource(SourcePipeline("deleted", {{"subscribe", topic}, {"failOnDataLoss", "false"}}));
    CHECK(Require(source->PlanBatch({{key, 3}})).empty());
    ReadResult result = ReadRange(*source, {{key, 0}}, {{key, 5}});
    CHECK(result.records.empty());
    CHECK(result.lost == 5);
  }
}

TEST_CASE("committed batches show up as consumer-group offsets unless a kafka sink commits them",
          "[kafka][source]") {
  Admin admin;
  const std::string topic = UniqueName("lagtools");
  admin.CreateTopic(topic, 2);
  Produce(topic, 0, Values("a", 4));
  Produce(topic, 1, Values("b", 2));

  PipelineSpec pipeline = SourcePipeline(UniqueName("group"), {{"subscribe", topic}});
  auto source = StartSource(pipeline);
  SourceOffsets start = Require(source->InitialOffsets());
  SourceOffsets end = Require(source->PlanBatch(start));
  RequireOk(source->OnCommitted(end));
  const std::string group = "driftd-" + pipeline.name;
  CHECK(admin.CommittedOffset(group, topic, 0) == 4);
  CHECK(admin.CommittedOffset(group, topic, 1) == 2);

  PipelineSpec with_sink = SourcePipeline(UniqueName("group"), {{"subscribe", topic}});
  with_sink.sinks.push_back(KafkaSinkSpec("out", UniqueName("unused")));
  auto quiet = StartSource(with_sink);
  RequireOk(quiet->OnCommitted(end));
  CHECK(admin.CommittedOffset("driftd-" + with_sink.name, topic, 0) == RD_KAFKA_OFFSET_INVALID);
}

TEST_CASE("the kafka source is not ready while no broker answers", "[kafka][source]") {
  PipelineSpec pipeline = SourcePipeline(
      "unreachable", {{"subscribe", "anything"}, {"kafkaConsumer.pollTimeoutMs", "2000"}});
  pipeline.source.options.Set("kafka.bootstrap.servers", "127.0.0.1:1");
  auto source = StartSource(pipeline);
  CHECK_FALSE(source->IsReady());
  auto planned = source->PlanBatch({});
  REQUIRE_FALSE(planned);
  CHECK(planned.error().code() == ErrorCode::kExternal);
  CHECK_FALSE(source->IsReady());
}

TEST_CASE("kafka source options are checked when the source is created", "[kafka][source]") {
  auto create = [](std::map<std::string, std::string> options) {
    return CreateSource(SourcePipeline("options", std::move(options)));
  };
  CHECK_FALSE(create({}));  // no subscribe, subscribePattern or assign
  CHECK_FALSE(create({{"subscribe", "a"}, {"subscribePattern", "b.*"}}));
  CHECK_FALSE(create({{"subscribePattern", "(unclosed"}}));
  CHECK_FALSE(create({{"assign", "[1,2]"}}));
  CHECK_FALSE(create({{"subscribe", "a"}, {"startingOffsets", "{\"a\":{\"x\":1}}"}}));
  auto managed = create({{"subscribe", "a"}, {"kafka.enable.auto.commit", "true"}});
  REQUIRE_FALSE(managed);
  CHECK_THAT(managed.error().message(), Catch::Contains("enable.auto.commit"));
  CHECK(create({{"subscribe", "a, b"}}));
}

}  // namespace
}  // namespace driftd
