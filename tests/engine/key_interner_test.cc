// KeyInterner: one lookup of a row's model for every stage keyed by it, and an aggregation
// grouped through it that gives exactly the rows and state of one grouped by the key itself.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/aggregation.h"
#include "engine/json_decoder.h"
#include "engine/key_interner.h"
#include "tests/engine/aggregation_test_util.h"

namespace driftd {
namespace {

using testing::Row;
using testing::TestQuery;
using testing::TestSchema;

RecordBatch Decode(const std::vector<std::string>& lines) {
  InputChunk chunk;
  for (size_t i = 0; i < lines.size(); ++i) {
    chunk.Append(lines[i], RecordPosition{0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
  JsonDecoder decoder(TestSchema(), MalformedSpec{});
  RecordBatch batch;
  batch.Reset(TestSchema());
  REQUIRE(decoder.Decode(chunk, batch, nullptr));
  REQUIRE(batch.num_rows == lines.size());
  return batch;
}

TEST_CASE("a batch's model ids are looked up once, whoever asks first", "[keys]") {
  KeyInterner keys(0);
  const RecordBatch first = Decode({Row("b", 1, 1), Row("a", 2, 2), Row("b", 3, 3)});
  const std::vector<uint32_t>& ids = keys.Ids(first);
  REQUIRE(ids == std::vector<uint32_t>{0, 1, 0});
  CHECK(keys.Name(0) == "b");
  CHECK(keys.Name(1) == "a");
  // The second stage asking for the same batch gets the same ids without a lookup.
  CHECK(&keys.Ids(first) == &ids);
  CHECK(keys.size() == 2);
  // A new batch (RecordBatch::Reset) gets its own; known models keep their ids.
  const RecordBatch second = Decode({Row("c", 1, 1), Row("a", 2, 2)});
  CHECK(keys.Ids(second) == std::vector<uint32_t>{2, 1});
  CHECK(keys.Intern("a") == 1);
}

TEST_CASE("ids stay those of first appearance as the table grows past many names", "[keys]") {
  KeyInterner keys(0);
  // Names that share prefixes and lengths, and the empty name, past several doublings.
  auto name = [](int i) { return i == 0 ? std::string() : "model-" + std::to_string(i % 5000); };
  for (int i = 0; i < 5000; ++i) REQUIRE(keys.Intern(name(i)) == static_cast<uint32_t>(i));
  CHECK(keys.size() == 5000);
  // Seen again in another order, and alternating so the previous row's name does not match.
  for (int i = 4999; i >= 0; i -= 3) {
    CHECK(keys.Intern(name(i)) == static_cast<uint32_t>(i));
    CHECK(keys.Intern(name((i + 1) % 5000)) == static_cast<uint32_t>((i + 1) % 5000));
  }
  for (int i = 0; i < 5000; i += 7) CHECK(keys.Name(static_cast<uint32_t>(i)) == name(i));
  CHECK(keys.Intern("model-5000") == 5000);
  CHECK(keys.size() == 5001);
}

TEST_CASE("grouping by the shared model ids gives the rows and state of grouping by the key",
          "[aggregation][keys]") {
  const QuerySpec query = TestQuery(0, 0, -1);
  auto make = [&](std::shared_ptr<KeyInterner> keys) {
    auto created = Aggregator::Create(query, TestSchema());
    REQUIRE(created);
    (*created)->ShareKeys(std::move(keys));
    return std::move(*created);
  };
  auto plain = make(nullptr);
  auto shared = make(std::make_shared<KeyInterner>(0));
  std::map<std::string, std::string> plain_state, shared_state;
  auto run = [&](Aggregator& aggregator, const std::vector<std::string>& lines,
                 std::map<std::string, std::string>& state) {
    const RecordBatch batch = Decode(lines);
    RowTimes times;
    times.event_us.assign(batch.num_rows, INT64_MIN);
    times.late_before.assign(batch.num_rows, INT64_MIN);
    aggregator.Add(batch, times);
    EmittedRows rows;
    aggregator.EmitUpdated(rows);
    StatePuts puts;
    std::vector<std::string> deletes;
    aggregator.EndBatch(INT64_MIN, true, puts, deletes);
    for (auto& [key, value] : puts) state[key] = value;
    return rows.rows;
  };
  const std::vector<std::vector<std::string>> batches = {
      {Row("m1", 1, 1), Row("m2", 2, 2), Row("m1", 3, 3), Row("m3", 4, 4)},
      {Row("m3", 5, 5), Row("m3", 6, 6), Row("m4", 7, 7), Row("m1", 8, 8)},
  };
  for (const auto& lines : batches) {
    CHECK(run(*shared, lines, shared_state) == run(*plain, lines, plain_state));
    CHECK(shared_state == plain_state);
  }
  // Restarted from the checkpoint, with ids given in another order.
  auto restarted = make(std::make_shared<KeyInterner>(0));
  for (const auto& [key, value] : shared_state) REQUIRE(restarted->Restore(key, value));
  const std::vector<std::string> more = {Row("m4", 9, 9), Row("m5", 10, 10), Row("m1", 11, 11)};
  CHECK(run(*restarted, more, shared_state) == run(*plain, more, plain_state));
  CHECK(shared_state == plain_state);
}

}  // namespace
}  // namespace driftd
