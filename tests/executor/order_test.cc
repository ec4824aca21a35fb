// Drift's default windows (record counts) on an unkeyed multi-partition topic: every model's
// records in all eight partitions. The alerts, ids included, are the same whatever the batch
// size, the read order, the threads and a restart, because drift takes each model's values in
// event-time order once the watermark passed them (engine/executor/order_buffer.h).
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/drift/codec.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/order_buffer.h"
#include "engine/executor/row_block.h"
#include "engine/executor/executor.h"
#include "state/checkpoint_store.h"
#include "tests/executor/partitioned_source.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::PartitionedSource;
using testing::Partitions;
using testing::TempDir;

// Four models over 8 partitions, 50 ms of event time apart per model, each record up to 2 s
// early or late (jitter within a partition too); model-2's feature shifts half way.
Partitions UnkeyedLogs() {
  Partitions data{"logs", std::vector<std::vector<std::string>>(8)};
  std::mt19937_64 random(7);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_int_distribution<int> partition(0, 7);
  std::uniform_real_distribution<double> jitter(-2000, 2000);
  const int kRows = 48'000;
  std::vector<std::vector<std::pair<double, std::string>>> rows(8);
  for (int i = 0; i < kRows; ++i) {
    const int model = i % 4;
    double x = normal(random);
    if (model == 2 && i > kRows / 2) x += 1.5;
    const double t = 1'795'946'400'000.0 + i * 12.5 + jitter(random);
    const int p = partition(random);
    rows[static_cast<size_t>(p)].emplace_back(
        t, fmt::format(R"({{"model_id":"model-{}","event_time":{},"x":{:.6f}}})", model,
                       static_cast<int64_t>(t), x));
  }
  // Each partition roughly in time order, as a producer writes it (its jitter stays).
  for (size_t p = 0; p < 8; ++p) {
    for (auto& [t, record] : rows[p]) data.records[p].push_back(std::move(record));
  }
  return data;
}

constexpr const char* kPipeline = R"(
name: unkeyed
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: x, type: double}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [x]
sinks:
  - {name: alerts, format: console, stream: alerts}
trigger: {availableNow: true}
)";

class AlertSink final : public Sink {
 public:
  explicit AlertSink(std::vector<std::string>& ids) : ids_(ids) {}
  const std::string& name() const override { return name_; }
  Status Open() override { return Ok(); }
  Result<bool> IsDelivered(int64_t) override { return false; }
  Status Deliver(const BatchOutput& output) override {
    simdjson::dom::parser parser;
    for (const std::string& row : output.alerts.rows) {
      simdjson::dom::element alert = parser.parse(row);
      ids_.push_back(fmt::format("{} {} {} {}", std::string_view(alert["alert_id"]),
                                 std::string_view(alert["model"]),
                                 std::string_view(alert["series"]),
                                 std::string_view(alert["level"])));
    }
    return Ok();
  }

 private:
  std::string name_ = "alerts";
  std::vector<std::string>& ids_;
};

std::set<std::string> Alerts(const Partitions& data, const std::string& checkpoint,
                             int64_t max_per_batch, bool interleave, int threads,
                             std::vector<double> shares = {1.0},
                             std::vector<int> threads_by_run = {}) {
  std::vector<std::string> ids;
  for (size_t run = 0; run < shares.size(); ++run) {
    const double share = shares[run];
    if (run < threads_by_run.size()) threads = threads_by_run[run];
    auto spec = ParsePipeline(kPipeline, "unkeyed.yaml",
                              LoadOptions{.catalog = &ConnectorDeclarations()});
    REQUIRE(spec);
    spec->checkpoint_location = checkpoint;
    spec->threads = threads;
    QueryIo io;
    io.create_source = [&](const PipelineSpec&) -> Result<std::unique_ptr<Source>> {
      return std::unique_ptr<Source>(
          std::make_unique<PartitionedSource>(data, max_per_batch, interleave, share));
    };
    io.create_sinks = [&](const PipelineSpec&,
                          Source&) -> Result<std::vector<std::unique_ptr<Sink>>> {
      std::vector<std::unique_ptr<Sink>> sinks;
      sinks.push_back(std::make_unique<AlertSink>(ids));
      return sinks;
    };
    io.open_checkpoint = [](const std::string& directory, const CheckpointOptions& options) {
      return OpenCheckpointStore(directory, options);
    };
    ExecutorOptions options;
    options.sync_commits = false;
    options.chunk_bytes = 16 << 10;
    auto executor = QueryExecutor::Create(*spec, std::move(options), std::move(io));
    REQUIRE(executor);
    REQUIRE((*executor)->Start());
    const Status ran = (*executor)->Run();
    INFO((ran ? std::string() : ran.error().message()));
    REQUIRE(ran);
  }
  return {ids.begin(), ids.end()};
}

}  // namespace

TEST_CASE("default drift windows on an unkeyed multi-partition input give the same alerts, ids "
          "included, whatever the batch size, read order, threads and a restart",
          "[executor][drift][order]") {
  const Partitions data = UnkeyedLogs();
  TempDir dir("driftd-order");
  const std::set<std::string> reference = Alerts(data, dir / "a", 200'000, false, 1);
  // The shifted model alerts; the others do not.
  bool shifted = false;
  for (const std::string& alert : reference) {
    shifted = shifted || alert.find(" model-2 x ALERT") != std::string::npos;
    CHECK(alert.find(" model-2 ") != std::string::npos);
  }
  CHECK(shifted);
  CHECK(Alerts(data, dir / "b", 1'000 / 8, true, 1) == reference);
  CHECK(Alerts(data, dir / "c", 7'777 / 8, false, 2) == reference);
  CHECK(Alerts(data, dir / "d", 777, true, 2, {0.3, 0.7, 1.0}) == reference);
  // Drift's models are split over one shard per thread, by name: a restart on another number
  // of threads finds each model's state and waiting values wherever they now belong.
  CHECK(Alerts(data, dir / "e", 5'000, true, 1, {0.2, 0.5, 0.8, 1.0}, {3, 1, 2, 3}) ==
        reference);
}

namespace {

Schema OrderSchema() {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, true},
                   {"event_time", FieldType::kTimestamp, true},
                   {"x", FieldType::kDouble, true}};
  return schema;
}

// `rows` rows of 300-byte model names, one partition each of "p-0".."p-3", times descending.
void AddRows(OrderBuffer& buffer, size_t rows) {
  RecordBatch batch;
  batch.Reset(OrderSchema());
  RowTimes times;
  for (size_t i = 0; i < rows; ++i) {
    Column& model = batch.columns[0];
    model.valid.push_back(1);
    model.str_data += fmt::format("model-{:0>294}", i % 7);
    model.str_offsets.push_back(static_cast<uint32_t>(model.str_data.size()));
    const int64_t t = 1'000'000 - static_cast<int64_t>(i) * 10;
    batch.columns[1].valid.push_back(1);
    batch.columns[1].i64.push_back(t);
    batch.columns[2].valid.push_back(1);
    batch.columns[2].f64.push_back(static_cast<double>(i));
    batch.positions.push_back({static_cast<uint32_t>(i % 4), static_cast<int64_t>(i), i % 5 == 0});
    ++batch.num_rows;
    times.event_us.push_back(t);
    times.late_before.push_back(INT64_MIN);
  }
  buffer.Add(batch, times);
}

OrderBuffer NewBuffer() {
  return OrderBuffer(OrderSchema(), [](uint32_t index) { return fmt::format("p-{}", index); });
}

// The x values Release hands out, in their order, and their malformed marks.
std::vector<std::pair<double, bool>> Released(OrderBuffer& buffer) {
  std::vector<std::pair<double, bool>> values;
  buffer.Release(INT64_MAX, [&](const RecordBatch& rows, const RowTimes&,
                                std::span<const uint32_t> order, std::span<const uint32_t>) {
    for (uint32_t row : order) {
      values.emplace_back(rows.columns[2].f64[row], rows.positions[row].malformed);
    }
  });
  return values;
}

}  // namespace

TEST_CASE("drift's waiting values are kept in pages of bounded size, restored in their order, "
          "and the one value written before pages is still read",
          "[executor][drift][order]") {
  OrderBuffer buffer = NewBuffer();
  AddRows(buffer, 3000);  // about 1 MB of rows
  StateChanges changes;
  buffer.Persist(changes);
  REQUIRE(changes.puts.size() >= 3);
  for (size_t page = 0; page < changes.puts.size(); ++page) {
    CHECK(changes.puts[page].first == fmt::format("page/{:08}", page));
    // No value grows with the buffer (a changelog record carries one).
    CHECK(changes.puts[page].second.size() < (300u << 10));
  }
  OrderBuffer restored = NewBuffer();
  for (const auto& [key, value] : changes.puts) REQUIRE(restored.Restore(key, value));
  REQUIRE(restored.size() == 3000);
  const auto expected = Released(buffer);
  CHECK(Released(restored) == expected);
  // With the model column's interner, each restored row comes out with its own model's id.
  auto models = std::make_shared<KeyInterner>(0);
  OrderBuffer with_ids(
      OrderSchema(), [](uint32_t index) { return fmt::format("p-{}", index); }, models);
  for (const auto& [key, value] : changes.puts) REQUIRE(with_ids.Restore(key, value));
  size_t named = 0;
  with_ids.Release(INT64_MAX, [&](const RecordBatch& rows, const RowTimes&,
                                  std::span<const uint32_t> order,
                                  std::span<const uint32_t> ids) {
    for (uint32_t row : order) named += models->Name(ids[row]) == rows.columns[0].String(row);
  });
  CHECK(named == 3000);
  CHECK(models->size() >= 2);
  // Released rows leave their pages: an empty buffer deletes every page it had.
  StateChanges emptied;
  restored.Persist(emptied);
  CHECK(emptied.puts.empty());
  CHECK(emptied.deletes.size() == changes.puts.size());

  // Version 1: every row in one value under "rows", row blocks of version 1 (no offsets).
  std::string legacy;
  drift::ByteWriter w(legacy);
  w.U8(1);
  w.Varint(2);
  for (int i = 0; i < 2; ++i) {
    w.Zigzag(500 - i * 100);  // event time
    w.Bytes("p-1");
    w.Zigzag(i);  // offset
    w.Varint(static_cast<uint64_t>(i));  // arrival
  }
  std::string block;
  drift::ByteWriter b(block);
  b.U8(1);
  b.Str("");
  b.I64(INT64_MIN);
  b.U8(0);
  b.U32(2);
  for (int i = 0; i < 2; ++i) {
    b.I64(INT64_MIN);
    b.I64(500 - i * 100);
    b.U8(1);
    b.Str("m");
    b.U8(1);
    b.I64(500 - i * 100);
    b.U8(1);
    b.F64(i + 0.5);
  }
  w.Varint(1);
  w.Bytes(block);
  OrderBuffer old = NewBuffer();
  REQUIRE(old.Restore("rows", legacy));
  REQUIRE(old.size() == 2);
  // The next write replaces the old value with a page, though nothing changed.
  StateChanges rewritten;
  old.Persist(rewritten);
  REQUIRE(rewritten.puts.size() == 1);
  CHECK(rewritten.puts[0].first == "page/00000000");
  CHECK(rewritten.deletes == std::vector<std::string>{"rows"});
  // In event-time order: the row of time 400 first.
  CHECK(Released(old) == std::vector<std::pair<double, bool>>{{1.5, false}, {0.5, false}});
}

// A row block seals itself at 512 KiB and starts counting afresh: a page ended at 256 KiB of
// the block's pending bytes, so rows of 600 KB (a long embedding) all went into one page that
// grew with the buffer, past what a changelog record may hold.
TEST_CASE("a page of drift's waiting values ends at its bound however large its rows are",
          "[executor][drift][order]") {
  OrderBuffer buffer = NewBuffer();
  RecordBatch batch;
  batch.Reset(OrderSchema());
  RowTimes times;
  constexpr size_t kRows = 10;
  for (size_t i = 0; i < kRows; ++i) {
    Column& model = batch.columns[0];
    model.valid.push_back(1);
    model.str_data += std::string(600'000, static_cast<char>('a' + i));
    model.str_offsets.push_back(static_cast<uint32_t>(model.str_data.size()));
    batch.columns[1].valid.push_back(1);
    batch.columns[1].i64.push_back(static_cast<int64_t>(i));
    batch.columns[2].valid.push_back(1);
    batch.columns[2].f64.push_back(static_cast<double>(i));
    batch.positions.push_back({0, static_cast<int64_t>(i), false});
    ++batch.num_rows;
    times.event_us.push_back(static_cast<int64_t>(i));
    times.late_before.push_back(INT64_MIN);
  }
  buffer.Add(batch, times);
  StateChanges changes;
  buffer.Persist(changes);
  // A row over the page's bound is a page of its own.
  CHECK(changes.puts.size() == kRows);
  for (const auto& [key, value] : changes.puts) CHECK(value.size() < 700'000);
  OrderBuffer restored = NewBuffer();
  for (const auto& [key, value] : changes.puts) REQUIRE(restored.Restore(key, value));
  CHECK(Released(restored) == Released(buffer));
}

// The outbox records a batch as pending for each sink by name: two sinks of one name were
// taken for each other, and the first delivery marked the batch delivered for both.
TEST_CASE("a query whose sinks share a name does not start", "[executor][sinks]") {
  const Partitions data = UnkeyedLogs();
  TempDir dir("driftd-sink-names");
  auto spec = ParsePipeline(kPipeline, "unkeyed.yaml",
                            LoadOptions{.catalog = &ConnectorDeclarations()});
  REQUIRE(spec);
  spec->checkpoint_location = dir / "c";
  std::vector<std::string> ids;
  QueryIo io;
  io.create_source = [&](const PipelineSpec&) -> Result<std::unique_ptr<Source>> {
    return std::unique_ptr<Source>(std::make_unique<PartitionedSource>(data, 1000, false, 1.0));
  };
  io.create_sinks = [&](const PipelineSpec&,
                        Source&) -> Result<std::vector<std::unique_ptr<Sink>>> {
    std::vector<std::unique_ptr<Sink>> sinks;
    sinks.push_back(std::make_unique<AlertSink>(ids));
    sinks.push_back(std::make_unique<AlertSink>(ids));
    return sinks;
  };
  io.open_checkpoint = [](const std::string& directory, const CheckpointOptions& options) {
    return OpenCheckpointStore(directory, options);
  };
  auto executor = QueryExecutor::Create(*spec, ExecutorOptions{}, std::move(io));
  Status started = executor ? (*executor)->Start() : Status(tl::unexpected(executor.error()));
  REQUIRE_FALSE(started);
  CHECK_THAT(started.error().message(),
             Catch::Contains("two sinks deliver under the name 'alerts'"));
}

// Drift takes an array column's width from the first value it sees. It looked at the order
// buffer's rows in arrival order (rows not due yet included), so a partition read first with
// longer arrays gave another set of series than the same data read the other way round.
TEST_CASE("drift's array series follow the first value in the canonical order, whichever "
          "partition is read first",
          "[executor][drift][order]") {
  auto spec = ParsePipeline(R"(
name: widths
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: emb, type: array<double>}
source:
  format: kafka
  options: {kafka.bootstrap.servers: "127.0.0.1:1", subscribe: logs}
query:
  groupBy: [model_id]
  aggregates: [count]
drift:
  series: [emb]
sinks:
  - {name: alerts, format: console, stream: alerts}
)",
                            "widths.yaml", LoadOptions{.catalog = &ConnectorDeclarations()});
  INFO((spec ? std::string() : FormatProblems("widths.yaml", spec.error())));
  REQUIRE(spec);
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, true},
                   {"event_time", FieldType::kTimestamp, true},
                   {"emb", FieldType::kDoubleArray, true}};
  // Partition 0: arrays of 2 from time 100; partition 1: arrays of 3 from time 200.
  auto rows_of = [&](uint32_t partition, RecordBatch& batch, RowTimes& times) {
    for (int i = 0; i < 4; ++i) {
      Column& model = batch.columns[0];
      model.valid.push_back(1);
      model.str_data += "m";
      model.str_offsets.push_back(static_cast<uint32_t>(model.str_data.size()));
      const int64_t t = (partition == 0 ? 100 : 200) + i;
      batch.columns[1].valid.push_back(1);
      batch.columns[1].i64.push_back(t);
      Column& emb = batch.columns[2];
      emb.valid.push_back(1);
      for (uint32_t e = 0; e < 2 + partition; ++e) emb.f64.push_back(1.0);
      emb.arr_offsets.push_back(static_cast<uint32_t>(emb.f64.size()));
      batch.positions.push_back({partition, i, false});
      ++batch.num_rows;
      times.event_us.push_back(t);
      times.late_before.push_back(INT64_MIN);
    }
  };
  auto series_after = [&](std::vector<uint32_t> read_order) {
    auto stage = DriftStage::Create(*spec);
    REQUIRE(stage);
    OrderBuffer buffer(schema, [](uint32_t index) { return fmt::format("logs-{}", index); });
    for (uint32_t partition : read_order) {
      RecordBatch batch;
      batch.Reset(schema);
      RowTimes times;
      rows_of(partition, batch, times);
      buffer.Add(batch, times);
    }
    // Only partition 0's rows are due: the monitor is made from what drift takes.
    buffer.Release(150, [&](const RecordBatch& rows, const RowTimes& times,
                            std::span<const uint32_t> order, std::span<const uint32_t> ids) {
      (*stage)->ProcessInOrder(rows, times, order, ids);
    });
    const auto stats = (*stage)->ModelStats();
    REQUIRE(stats.size() == 1);
    return stats[0].series;
  };
  const int64_t read_first = series_after({0, 1});
  CHECK(series_after({1, 0}) == read_first);
}

TEST_CASE("the order buffer hands rows out in (place, partition name, offset) order, rows "
          "without a time first in (partition name, offset) order, however they were added and "
          "released",
          "[executor][drift][order]") {
  // Five partitions (or twelve: an odd number of runs at some merge's round) whose indexes do not follow
  // their names, times with ties across partitions and, through a watermark delay, places that
  // step back within a partition; some rows without a time. Added in random slices, released in
  // waves of rising watermarks (some by ReleaseMost, which waits until half the rows are due);
  // what comes out must be, wave by wave, a plain sort of the rows due, each with the id of its
  // own model.
  const std::vector<std::string> all_names = {"p-3", "p-10", "p-1", "p-22", "p-2",  "p-7",
                                              "p-0", "p-11", "p-5", "p-30", "p-12", "p-4"};
  std::mt19937_64 random(11);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<std::string> names(all_names.begin(),
                                         all_names.begin() + (trial % 3 == 2 ? 12 : 5));
    auto models = trial % 2 == 0 ? std::make_shared<KeyInterner>(0) : nullptr;
    OrderBuffer buffer(OrderSchema(), [&](uint32_t index) { return names[index]; }, models);
    struct Row {
      int64_t place;
      std::string partition;
      int64_t offset;
      size_t arrival;
      double x;
    };
    std::vector<Row> rows;
    std::vector<int64_t> max_of(names.size(), INT64_MIN);
    std::vector<int64_t> next_offset(names.size(), 0);
    const int64_t delay = trial % 2 == 0 ? 0 : 30;
    std::set<size_t> released;
    std::vector<double> expected;
    std::vector<double> got;
    int64_t watermark = INT64_MIN;
    for (int slice = 0; slice < 12; ++slice) {
      RecordBatch batch;
      batch.Reset(OrderSchema());
      RowTimes times;
      const size_t count = std::uniform_int_distribution<size_t>(0, 60)(random);
      for (size_t i = 0; i < count; ++i) {
        const uint32_t partition =
            std::uniform_int_distribution<uint32_t>(0, names.size() - 1)(random);
        const bool timed = std::uniform_int_distribution<int>(0, 19)(random) != 0;
        const int64_t t = slice * 40 + std::uniform_int_distribution<int64_t>(0, 9)(random) * 10;
        batch.columns[0].valid.push_back(1);
        batch.columns[0].str_data += fmt::format("m-{}", rows.size() % 3);
        batch.columns[0].str_offsets.push_back(
            static_cast<uint32_t>(batch.columns[0].str_data.size()));
        batch.columns[1].valid.push_back(timed ? 1 : 0);
        batch.columns[1].i64.push_back(timed ? t : 0);
        const double x = static_cast<double>(rows.size());
        batch.columns[2].valid.push_back(1);
        batch.columns[2].f64.push_back(x);
        const int64_t offset = next_offset[partition]++;
        batch.positions.push_back({partition, offset, false});
        ++batch.num_rows;
        const int64_t own = max_of[partition] == INT64_MIN ? INT64_MIN : max_of[partition] - delay;
        const int64_t late_before = timed ? std::max(own, watermark) : INT64_MIN;
        times.event_us.push_back(timed ? t : INT64_MIN);
        times.late_before.push_back(late_before);
        if (timed) max_of[partition] = std::max(max_of[partition], t);
        rows.push_back({timed ? std::max(t, late_before) : INT64_MIN, names[partition], offset,
                        rows.size(), x});
      }
      buffer.Add(batch, times);
      // A watermark that moves on, sometimes not at all.
      if (std::uniform_int_distribution<int>(0, 3)(random) != 0) watermark = slice * 40 - 25;
      std::vector<const Row*> due;
      for (const Row& row : rows) {
        if (released.count(row.arrival)) continue;
        if (row.place == INT64_MIN || (watermark != INT64_MIN && row.place < watermark)) {
          due.push_back(&row);
        }
      }
      // ReleaseMost hands rows out only when at least half of those buffered are due.
      const bool most = std::uniform_int_distribution<int>(0, 2)(random) == 0;
      const size_t buffered = rows.size() - released.size();
      if (most && (watermark == INT64_MIN || due.size() < (buffered + 1) / 2)) due.clear();
      std::stable_sort(due.begin(), due.end(), [](const Row* a, const Row* b) {
        const bool a_timed = a->place != INT64_MIN;
        const bool b_timed = b->place != INT64_MIN;
        if (a_timed != b_timed) return !a_timed;
        if (!a_timed) return std::tie(a->partition, a->offset) < std::tie(b->partition, b->offset);
        return std::tie(a->place, a->partition, a->offset) <
               std::tie(b->place, b->partition, b->offset);
      });
      for (const Row* row : due) {
        expected.push_back(row->x);
        released.insert(row->arrival);
      }
      size_t misnamed = 0;
      auto take = [&](const RecordBatch& kept, const RowTimes&, std::span<const uint32_t> order,
                      std::span<const uint32_t> model_ids) {
        REQUIRE(model_ids.size() == (models ? kept.num_rows : 0));
        for (uint32_t row : order) {
          got.push_back(kept.columns[2].f64[row]);
          if (models && models->Name(model_ids[row]) != kept.columns[0].String(row)) ++misnamed;
        }
      };
      if (most) {
        buffer.ReleaseMost(watermark, take);
      } else {
        buffer.Release(watermark, take);
      }
      CHECK(misnamed == 0);
      REQUIRE(got == expected);
      REQUIRE(buffer.size() == rows.size() - released.size());
    }
  }
}

}  // namespace driftd
