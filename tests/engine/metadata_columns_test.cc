// The metadata columns filled beside the decoded ones: each row gets its own record's key,
// headers and Kafka timestamp even when malformed records in between left no row, and a query
// that filters still sees them aligned.
#include <catch2/catch.hpp>

#include "engine/expr/projection.h"
#include "engine/json_decoder.h"
#include "engine/metadata_columns.h"
#include "engine/source.h"

namespace driftd {
namespace {

// Names partition index i "logs" partition 10 + i.
class NamedPartitions final : public Source {
 public:
  Status Start(const SourceOffsets&) override { return Ok(); }
  Result<SourceOffsets> InitialOffsets() override { return SourceOffsets{}; }
  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override { return start; }
  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets&, const SourceOffsets&) override {
    return MakeError(ErrorCode::kInternal, "not read");
  }
  std::optional<TopicPartition> TopicPartitionOf(uint32_t index) const override {
    return TopicPartition{"logs", static_cast<int32_t>(10 + index)};
  }
  std::string DescribePosition(const RecordPosition& position) const override {
    return std::to_string(position.offset);
  }
  std::string Describe() const override { return "NamedPartitions"; }
};

TEST_CASE("metadata columns stay with their records when malformed ones leave no row",
          "[engine][metadata]") {
  Schema schema;
  schema.fields = {{"x", FieldType::kDouble, true}};
  MalformedSpec drop;
  drop.policy = MalformedPolicy::kDrop;
  JsonDecoder decoder(schema, drop);

  InputChunk chunk;
  chunk.Append(R"({"x":1})", {0, 100}, 1'000'000);
  chunk.SetTimestampType(0);
  chunk.SetKey("k1");
  chunk.AddHeader("h", "v", 1);
  chunk.Append("not json", {0, 101}, 2'000'000);
  chunk.SetKey("bad");
  chunk.Append(R"({"x":3})", {1, 7}, INT64_MIN);
  chunk.SetTimestampType(1);
  chunk.AddHeader("empty", nullptr, 0);
  chunk.Seal();

  RecordBatch batch;
  batch.Reset(schema);
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == 2);

  NamedPartitions source;
  MetadataFiller filler({MetadataColumn::kKey, MetadataColumn::kTopic, MetadataColumn::kPartition,
                         MetadataColumn::kOffset, MetadataColumn::kTimestamp,
                         MetadataColumn::kTimestampType, MetadataColumn::kHeaders});
  filler.Fill(chunk, source, batch);
  REQUIRE(batch.columns.size() == 8);
  const Column& key = batch.columns[1];
  CHECK(key.String(0) == "k1");
  CHECK(key.IsNull(1));  // the third record has no key; "bad" belonged to the malformed one
  CHECK(batch.columns[2].String(1) == "logs");
  CHECK(batch.columns[3].i64 == std::vector<int64_t>{10, 11});
  CHECK(batch.columns[4].i64 == std::vector<int64_t>{100, 7});
  CHECK(batch.columns[5].i64[0] == 1'000'000);
  CHECK(batch.columns[5].IsNull(1));
  CHECK(batch.columns[6].i64 == std::vector<int64_t>{0, 1});
  CHECK(batch.columns[7].String(0) == R"([{"key":"h","value":"v"}])");
  CHECK(batch.columns[7].String(1) == R"([{"key":"empty","value":null}])");

  SECTION("expressions read them like schema columns") {
    PipelineSpec spec;
    spec.schema = schema;
    spec.query.metadata = {MetadataColumn::kKey, MetadataColumn::kTopic,
                           MetadataColumn::kPartition, MetadataColumn::kOffset,
                           MetadataColumn::kTimestamp, MetadataColumn::kTimestampType,
                           MetadataColumn::kHeaders};
    spec.query.where = "partition = 11";
    spec.query.derived.push_back(
        {"tagged", "coalesce(key, 'none') AS tagged", FieldType::kString, {}});
    auto projection = Projection::Create(spec);
    INFO((projection ? "" : projection.error().message()));
    REQUIRE(projection);
    CHECK((*projection)->Apply(batch) == 1);
    REQUIRE(batch.num_rows == 1);
    CHECK(batch.columns[8].String(0) == "none");
    CHECK(batch.columns[0].f64[0] == 3);
  }
}

TEST_CASE("reference rows get null metadata columns", "[engine][metadata]") {
  RecordBatch batch;
  batch.num_rows = 3;
  MetadataFiller({MetadataColumn::kKey, MetadataColumn::kOffset}).FillNulls(batch);
  REQUIRE(batch.columns.size() == 2);
  CHECK(batch.columns[0].IsNull(2));
  CHECK(batch.columns[0].String(2).empty());
  CHECK(batch.columns[1].IsNull(0));
}

}  // namespace
}  // namespace driftd
