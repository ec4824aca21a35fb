#include "state/checkpoint_store.h"

#include <rocksdb/db.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tests/state/temp_dir.h"

namespace driftd {
namespace {

using testing::TempDir;

CheckpointOptions FastOptions() {
  CheckpointOptions options;
  options.sync = false;  // durability is the crash test's subject; here it only slows tests
  return options;
}

std::unique_ptr<CheckpointStore> OpenOrFail(const std::string& dir,
                                            const CheckpointOptions& options = FastOptions()) {
  auto store = OpenCheckpointStore(dir, options);
  if (!store) FAIL("opening checkpoint failed: " << store.error().message());
  return std::move(*store);
}

void RequireOk(const Status& status) {
  if (!status) FAIL(status.error().message());
}

BatchWrite MakeBatch(int64_t batch_id) {
  BatchWrite write;
  write.commit.batch_id = batch_id;
  write.commit.start = {{"logs-0", batch_id * 10}, {"logs-1", batch_id * 20}};
  write.commit.end = {{"logs-0", (batch_id + 1) * 10}, {"logs-1", (batch_id + 1) * 20}};
  write.commit.watermark_us = 1'700'000'000'000'000 + batch_id;
  write.commit.committed_at_ms = 1'700'000'000'000 + batch_id;
  return write;
}

/// State as the store reads it back, for comparing with what a test wrote.
std::map<std::string, std::string> ReadState(CheckpointStore& store) {
  std::map<std::string, std::string> state;
  RequireOk(store.ScanState([&](std::string_view key, std::string_view value) {
    state.emplace(std::string(key), std::string(value));
  }));
  return state;
}

StateStats StatsOf(const std::map<std::string, std::string>& state) {
  StateStats stats;
  for (const auto& [key, value] : state) {
    stats.keys += 1;
    stats.bytes += static_cast<int64_t>(key.size() + value.size());
  }
  return stats;
}

TEST_CASE("metadata written to a checkpoint reads back unchanged", "[state]") {
  TempDir tmp;
  auto store = OpenOrFail(tmp.path());
  auto empty = store->ReadMetadata();
  REQUIRE(empty);
  CHECK_FALSE(empty->has_value());

  CheckpointMetadata metadata;
  metadata.pipeline_name = "fraud-model-drift";
  metadata.fingerprint_json = R"({"source":"kafka","keys":["model_id"]})";
  metadata.format_version = 3;
  metadata.created_at_ms = 1'764'408'262'123;
  RequireOk(store->WriteMetadata(metadata));

  auto read = store->ReadMetadata();
  REQUIRE(read);
  REQUIRE(read->has_value());
  CHECK((*read)->pipeline_name == metadata.pipeline_name);
  CHECK((*read)->fingerprint_json == metadata.fingerprint_json);
  CHECK((*read)->format_version == 3);
  CHECK((*read)->created_at_ms == metadata.created_at_ms);
}

TEST_CASE(
    "a checkpoint is its owner's only: directories 0700 and RocksDB's files 0600, whatever "
    "the umask, and an older checkpoint open to others is closed to them",
    "[state]") {
  TempDir tmp;
  namespace fs = std::filesystem;
  auto mode = [](const fs::path& path) {
    struct stat info {};
    ::stat(path.c_str(), &info);
    return info.st_mode & 07777;
  };
  const std::string dir = tmp / "new/checkpoint";
  const mode_t umask_before = ::umask(0);
  {
    auto store = OpenOrFail(dir);
    RequireOk(store->Commit(MakeBatch(0)));
  }
  ::umask(umask_before);
  CHECK(mode(tmp / "new") == 0700);
  CHECK(mode(dir) == 0700);
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    INFO(entry.path().string());
    CHECK(mode(entry.path()) == (entry.is_directory() ? 0700 : 0600));
    ++files;
  }
  CHECK(files >= 4);  // CURRENT, IDENTITY, LOCK, a MANIFEST, ...

  fs::permissions(dir, fs::perms(0755));
  { auto store = OpenOrFail(dir); }
  CHECK(mode(dir) == 0700);
}

TEST_CASE("a committed batch's record, state and outbox read back", "[state]") {
  TempDir tmp;
  auto store = OpenOrFail(tmp.path());
  auto none = store->LastCommit();
  REQUIRE(none);
  CHECK_FALSE(none->has_value());

  BatchWrite write = MakeBatch(0);
  write.state_puts = {{"model-a/f1", std::string("\x00\x01\x02", 3)}, {"model-b/f1", "bb"}};
  write.outbox.payload = "rows of batch 0";
  write.outbox.pending_sinks = {"alerts", "stats"};
  RequireOk(store->Commit(write));

  auto last = store->LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->batch_id == 0);
  CHECK((*last)->start == write.commit.start);
  CHECK((*last)->end == write.commit.end);
  CHECK((*last)->watermark_us == write.commit.watermark_us);
  CHECK((*last)->committed_at_ms == write.commit.committed_at_ms);

  const auto state = ReadState(*store);
  CHECK(state ==
        std::map<std::string, std::string>(write.state_puts.begin(), write.state_puts.end()));

  auto outbox = store->PendingOutbox();
  REQUIRE(outbox);
  REQUIRE(outbox->size() == 1);
  CHECK((*outbox)[0].batch_id == 0);
  CHECK((*outbox)[0].payload == "rows of batch 0");
  CHECK((*outbox)[0].pending_sinks == std::vector<std::string>{"alerts", "stats"});
}

TEST_CASE("puts out of key order, one key twice, and a key put and deleted read back as applied in "
          "order",
          "[state]") {
  TempDir tmp;
  auto store = OpenOrFail(tmp.path());
  BatchWrite write = MakeBatch(0);
  write.state_puts = {{"m/c", "first"}, {"m/a", "a"}, {"m/b", "gone"}, {"m/c", "last"}};
  write.state_deletes = {"m/b"};
  RequireOk(store->Commit(write));
  const auto state = ReadState(*store);
  CHECK(state == std::map<std::string, std::string>{{"m/a", "a"}, {"m/c", "last"}});
  CHECK(store->Stats().keys == StatsOf(state).keys);
  CHECK(store->Stats().bytes == StatsOf(state).bytes);
}

TEST_CASE("a batch with no pending sinks leaves no outbox entry", "[state]") {
  TempDir tmp;
  auto store = OpenOrFail(tmp.path());
  BatchWrite write = MakeBatch(0);
  write.outbox.payload = "nothing to deliver";
  RequireOk(store->Commit(write));
  auto outbox = store->PendingOutbox();
  REQUIRE(outbox);
  CHECK(outbox->empty());
}

TEST_CASE("a commit without a time is stamped with the commit time", "[state]") {
  TempDir tmp;
  auto store = OpenOrFail(tmp.path());
  BatchWrite write = MakeBatch(0);
  write.commit.committed_at_ms = 0;
  const auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  RequireOk(store->Commit(write));
  auto last = store->LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->committed_at_ms >= before);
}

TEST_CASE("a store prepared for close still takes the last delivery marks, and a reopen sees them",
          "[state]") {
  TempDir tmp;
  // Larger than the state's write buffer (16 MiB): the commit sets off a flush.
  const std::string big(64 << 10, 'x');
  std::map<std::string, std::string> expected;
  {
    auto store = OpenOrFail(tmp.path());
    BatchWrite write = MakeBatch(0);
    for (int i = 0; i < 400; ++i) {
      const std::string key = fmt::format("k{:04}", i);
      write.state_puts.emplace_back(key, big + key);
      expected[key] = big + key;
    }
    write.outbox.payload = "rows";
    write.outbox.pending_sinks = {"a", "b"};
    RequireOk(store->Commit(std::move(write)));
    store->PrepareClose();
    RequireOk(store->MarkDelivered(0, "a"));
    RequireOk(store->MarkDelivered(0, "b"));
  }
  auto store = OpenOrFail(tmp.path());
  CHECK(ReadState(*store) == expected);
  auto outbox = store->PendingOutbox();
  REQUIRE(outbox);
  CHECK(outbox->empty());
  auto last = store->LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->batch_id == 0);
}

TEST_CASE("a reopened checkpoint sees everything committed before close", "[state]") {
  TempDir tmp;
  CheckpointMetadata metadata;
  metadata.pipeline_name = "reopen";
  metadata.fingerprint_json = "{}";
  {
    auto store = OpenOrFail(tmp.path());
    RequireOk(store->WriteMetadata(metadata));
    for (int64_t id = 0; id < 3; ++id) {
      BatchWrite write = MakeBatch(id);
      write.state_puts = {{"k" + std::to_string(id), "v" + std::to_string(id)}};
      if (id == 2) write.state_deletes = {"k0"};
      write.outbox.payload = "p" + std::to_string(id);
      write.outbox.pending_sinks = {"sink"};
      RequireOk(store->Commit(write));
    }
    RequireOk(store->MarkDelivered(0, "sink"));
  }
  auto store = OpenOrFail(tmp.path());
  auto read = store->ReadMetadata();
  REQUIRE(read);
  REQUIRE(read->has_value());
  CHECK((*read)->pipeline_name == "reopen");

  auto last = store->LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->batch_id == 2);
  CHECK((*last)->end == MakeBatch(2).commit.end);

  CHECK(ReadState(*store) == std::map<std::string, std::string>{{"k1", "v1"}, {"k2", "v2"}});

  auto outbox = store->PendingOutbox();
  REQUIRE(outbox);
  REQUIRE(outbox->size() == 2);
  CHECK((*outbox)[0].batch_id == 1);
  CHECK((*outbox)[0].payload == "p1");
  CHECK((*outbox)[1].batch_id == 2);

  // The reopened store continues the log where it stopped.
  RequireOk(store->Commit(MakeBatch(3)));
  auto recent = store->RecentCommits(10);
  REQUIRE(recent);
  REQUIRE(recent->size() == 4);
  CHECK(recent->front().batch_id == 3);
}

TEST_CASE("a commit that does not advance the batch id is rejected and changes nothing",
          "[state]") {
  TempDir tmp;
  auto store = OpenOrFail(tmp.path());
  RequireOk(store->Commit(MakeBatch(5)));
  BatchWrite stale = MakeBatch(5);
  stale.state_puts = {{"k", "v"}};
  auto status = store->Commit(stale);
  REQUIRE_FALSE(status);
  CHECK(status.error().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(status.error().message(), Catch::Contains("batch 5"));
  CHECK(ReadState(*store).empty());
  CHECK(store->Stats().keys == 0);

  BatchWrite negative = MakeBatch(-1);
  CHECK_FALSE(store->Commit(negative));
}

TEST_CASE("the commit log keeps only the configured number of recent commits", "[state]") {
  TempDir tmp;
  CheckpointOptions options = FastOptions();
  options.commit_history = 5;
  {
    auto store = OpenOrFail(tmp.path(), options);
    for (int64_t id = 0; id < 12; ++id) RequireOk(store->Commit(MakeBatch(id)));
    auto recent = store->RecentCommits(100);
    REQUIRE(recent);
    REQUIRE(recent->size() == 5);
    for (size_t i = 0; i < recent->size(); ++i) {
      CHECK((*recent)[i].batch_id == 11 - static_cast<int64_t>(i));
    }
    auto two = store->RecentCommits(2);
    REQUIRE(two);
    REQUIRE(two->size() == 2);
    CHECK((*two)[1].batch_id == 10);
  }
  // A lower limit after restart trims the older records with the next commit.
  options.commit_history = 3;
  auto store = OpenOrFail(tmp.path(), options);
  auto before = store->RecentCommits(100);
  REQUIRE(before);
  CHECK(before->size() == 5);
  RequireOk(store->Commit(MakeBatch(12)));
  auto after = store->RecentCommits(100);
  REQUIRE(after);
  REQUIRE(after->size() == 3);
  CHECK(after->front().batch_id == 12);
  CHECK(after->back().batch_id == 10);
}

TEST_CASE("an outbox entry with two sinks disappears only after both confirm delivery", "[state]") {
  TempDir tmp;
  auto store = OpenOrFail(tmp.path());
  BatchWrite write = MakeBatch(7);
  write.outbox.payload = "alerts and stats";
  write.outbox.pending_sinks = {"kafka-alerts", "file-stats"};
  RequireOk(store->Commit(write));

  RequireOk(store->MarkDelivered(7, "kafka-alerts"));
  auto outbox = store->PendingOutbox();
  REQUIRE(outbox);
  REQUIRE(outbox->size() == 1);
  CHECK((*outbox)[0].pending_sinks == std::vector<std::string>{"file-stats"});
  CHECK((*outbox)[0].payload == "alerts and stats");

  // Confirming again (e.g. during recovery) changes nothing.
  RequireOk(store->MarkDelivered(7, "kafka-alerts"));
  outbox = store->PendingOutbox();
  REQUIRE(outbox);
  REQUIRE(outbox->size() == 1);

  RequireOk(store->MarkDelivered(7, "file-stats"));
  outbox = store->PendingOutbox();
  REQUIRE(outbox);
  CHECK(outbox->empty());
  // A batch with no entry is already delivered.
  RequireOk(store->MarkDelivered(7, "file-stats"));
  RequireOk(store->MarkDelivered(99, "kafka-alerts"));
}

TEST_CASE("the last sink's delivery deletes the entry, written by this store or found at open",
          "[state]") {
  TempDir tmp;
  {
    auto store = OpenOrFail(tmp.path());
    for (int64_t id : {3, 4, 5}) {
      BatchWrite write = MakeBatch(id);
      write.outbox.payload = "rows of batch " + std::to_string(id);
      write.outbox.pending_sinks = {"file-stats"};
      RequireOk(store->Commit(write));
    }
    // Written by this store: deleted without its payload being read back.
    RequireOk(store->MarkDelivered(3, "file-stats"));
    RequireOk(store->MarkDelivered(3, "file-stats"));
    // A sink the entry does not wait for changes nothing.
    RequireOk(store->MarkDelivered(4, "kafka-alerts"));
  }
  auto store = OpenOrFail(tmp.path());
  // Found at open, before anything asked for the outbox.
  RequireOk(store->MarkDelivered(4, "file-stats"));
  auto outbox = store->PendingOutbox();
  REQUIRE(outbox);
  REQUIRE(outbox->size() == 1);
  CHECK((*outbox)[0].batch_id == 5);
  CHECK((*outbox)[0].payload == "rows of batch 5");
  // Found by PendingOutbox.
  RequireOk(store->MarkDelivered(5, "file-stats"));
  outbox = store->PendingOutbox();
  REQUIRE(outbox);
  CHECK(outbox->empty());
}

TEST_CASE("state stats stay exact through puts, overwrites, deletes and a reopen", "[state]") {
  TempDir tmp;
  StateStats expected;
  {
    auto store = OpenOrFail(tmp.path());
    CHECK(store->Stats().keys == 0);
    CHECK(store->Stats().bytes == 0);

    BatchWrite first = MakeBatch(0);
    first.state_puts = {{"aa", "1234"}, {"bb", "12"}, {"cc", ""}};
    RequireOk(store->Commit(first));
    CHECK(store->Stats().keys == 3);
    CHECK(store->Stats().bytes == 2 + 4 + 2 + 2 + 2 + 0);

    BatchWrite second = MakeBatch(1);
    // Overwrite with a longer and a shorter value, put one key twice, delete a missing key.
    second.state_puts = {{"aa", "123456789"}, {"bb", "1"}, {"dd", "x"}, {"dd", "xyz"}};
    second.state_deletes = {"cc", "never-written"};
    RequireOk(store->Commit(second));
    auto state = ReadState(*store);
    CHECK(state ==
          std::map<std::string, std::string>{{"aa", "123456789"}, {"bb", "1"}, {"dd", "xyz"}});
    CHECK(store->Stats().keys == StatsOf(state).keys);
    CHECK(store->Stats().bytes == StatsOf(state).bytes);

    BatchWrite third = MakeBatch(2);
    // Put and delete of one key in a batch: the delete wins.
    third.state_puts = {{"ee", "new"}};
    third.state_deletes = {"ee", "aa"};
    RequireOk(store->Commit(third));
    state = ReadState(*store);
    CHECK(state == std::map<std::string, std::string>{{"bb", "1"}, {"dd", "xyz"}});
    expected = StatsOf(state);
    CHECK(store->Stats().keys == expected.keys);
    CHECK(store->Stats().bytes == expected.bytes);
  }
  auto store = OpenOrFail(tmp.path());
  CHECK(store->Stats().keys == expected.keys);
  CHECK(store->Stats().bytes == expected.bytes);
  BatchWrite fourth = MakeBatch(3);
  fourth.state_puts = {{"bb", "22"}};
  RequireOk(store->Commit(fourth));
  CHECK(store->Stats().bytes == expected.bytes + 1);
  CHECK(store->Stats().keys == expected.keys);
}

TEST_CASE("a read-only open of a missing directory fails and names the directory", "[state]") {
  TempDir tmp;
  const std::string missing = tmp.Sub("no-such-checkpoint");
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(missing, options);
  REQUIRE_FALSE(store);
  CHECK_THAT(store.error().message(),
             Catch::Contains(missing) && Catch::Contains("does not exist"));
  CHECK_FALSE(std::filesystem::exists(missing));
}

TEST_CASE("a read-only open of an empty directory fails without creating a checkpoint", "[state]") {
  TempDir tmp;
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(tmp.path(), options);
  REQUIRE_FALSE(store);
  CHECK_THAT(store.error().message(), Catch::Contains(tmp.path()));
  CHECK(std::filesystem::is_empty(tmp.path()));
}

TEST_CASE("a missing checkpoint directory is created, parents included", "[state]") {
  TempDir tmp;
  const std::string nested = tmp.Sub("a/b/checkpoint");
  auto store = OpenOrFail(nested);
  RequireOk(store->Commit(MakeBatch(0)));
  CHECK(std::filesystem::is_directory(nested));
}

TEST_CASE("a non-empty directory that is not a checkpoint is refused and left alone", "[state]") {
  TempDir tmp;
  const std::string notes = tmp.Sub("notes.txt");
  std::ofstream(notes) << "important\n";
  auto store = OpenCheckpointStore(tmp.path(), FastOptions());
  REQUIRE_FALSE(store);
  CHECK(store.error().code() == ErrorCode::kIncompatible);
  CHECK_THAT(store.error().message(),
             Catch::Contains(tmp.path()) && Catch::Contains("not a driftd checkpoint"));
  // Nothing was written next to the user's file.
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    ++entries;
  }
  CHECK(entries == 1);
}

TEST_CASE("a file given as checkpoint directory is refused", "[state]") {
  TempDir tmp;
  const std::string file = tmp.Sub("file");
  std::ofstream(file) << "x";
  auto store = OpenCheckpointStore(file, FastOptions());
  REQUIRE_FALSE(store);
  CHECK_THAT(store.error().message(), Catch::Contains("not a directory"));
}

TEST_CASE("a RocksDB database of another program is refused", "[state]") {
  TempDir tmp;
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(options, tmp.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    REQUIRE(db->Put(rocksdb::WriteOptions(), "user-key", "user-value").ok());
    REQUIRE(db->Close().ok());
  }
  auto store = OpenCheckpointStore(tmp.path(), FastOptions());
  REQUIRE_FALSE(store);
  CHECK(store.error().code() == ErrorCode::kIncompatible);
  CHECK_THAT(store.error().message(),
             Catch::Contains(tmp.path()) && Catch::Contains("not a driftd checkpoint"));
  // The other program's database was not changed (no column families added).
  std::vector<std::string> cfs;
  REQUIRE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), tmp.path(), &cfs).ok());
  CHECK(cfs == std::vector<std::string>{"default"});
}

TEST_CASE("a checkpoint whose creation was killed before it finished is completed", "[state]") {
  TempDir tmp;
  SECTION("killed before RocksDB wrote CURRENT") {
    for (const char* name : {"LOCK", "LOG", "MANIFEST-000001", "000001.dbtmp"}) {
      std::ofstream(tmp.Sub(name)).flush();
    }
    std::ofstream(tmp.Sub("IDENTITY")) << "9a8b7c6d-0000-4000-8000-123456789abc";
  }
  SECTION("killed while the column families were being added") {
    rocksdb::DBOptions options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {{"default", rocksdb::ColumnFamilyOptions()},
                                                        {"meta", rocksdb::ColumnFamilyOptions()}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(options, tmp.path(), cfs, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    for (auto* handle : handles) REQUIRE(db->DestroyColumnFamilyHandle(handle).ok());
    REQUIRE(db->Close().ok());
  }
  {
    auto store = OpenOrFail(tmp.path());
    RequireOk(store->Commit(MakeBatch(0)));
  }
  auto store = OpenOrFail(tmp.path());
  auto last = store->LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->batch_id == 0);
}

TEST_CASE("a database with driftd's column families but data and no marker is refused", "[state]") {
  TempDir tmp;
  auto make_db = [&](bool with_state) {
    rocksdb::DBOptions options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (const char* name : {"default", "meta", "commits", "state", "outbox"}) {
      cfs.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(options, tmp.path(), cfs, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    if (with_state) REQUIRE(db->Put(rocksdb::WriteOptions(), handles[3], "k", "v").ok());
    for (auto* handle : handles) REQUIRE(db->DestroyColumnFamilyHandle(handle).ok());
    REQUIRE(db->Close().ok());
  };

  SECTION("with state it is refused") {
    make_db(true);
    auto store = OpenCheckpointStore(tmp.path(), FastOptions());
    REQUIRE_FALSE(store);
    CHECK_THAT(store.error().message(), Catch::Contains("no driftd layout marker"));
  }
  SECTION("empty (a first open that crashed before the marker) it is adopted") {
    make_db(false);
    auto store = OpenOrFail(tmp.path());
    RequireOk(store->Commit(MakeBatch(0)));
  }
}

TEST_CASE("a second writer on the same checkpoint is refused with a hint", "[state]") {
  TempDir tmp;
  auto first = OpenOrFail(tmp.path());
  auto second = OpenCheckpointStore(tmp.path(), FastOptions());
  REQUIRE_FALSE(second);
  CHECK(second.error().code() == ErrorCode::kIo);
  CHECK_THAT(second.error().message(),
             Catch::Contains(tmp.path()) && Catch::Contains("another driftd"));
}

TEST_CASE("a read-only open sees the commits of a writer that is still running", "[state]") {
  TempDir tmp;
  auto writer = OpenOrFail(tmp.path());
  CheckpointMetadata metadata;
  metadata.pipeline_name = "live";
  RequireOk(writer->WriteMetadata(metadata));
  BatchWrite write = MakeBatch(4);
  write.state_puts = {{"k", "v"}};
  write.outbox.pending_sinks = {"console"};
  RequireOk(writer->Commit(write));

  CheckpointOptions options;
  options.read_only = true;
  auto reader = OpenCheckpointStore(tmp.path(), options);
  if (!reader) FAIL(reader.error().message());
  auto last = (*reader)->LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->batch_id == 4);
  CHECK((*reader)->Stats().keys == 1);
  auto outbox = (*reader)->PendingOutbox();
  REQUIRE(outbox);
  CHECK(outbox->size() == 1);

  SECTION("and refuses to change it") {
    auto status = (*reader)->Commit(MakeBatch(5));
    REQUIRE_FALSE(status);
    CHECK_THAT(status.error().message(), Catch::Contains("read-only"));
    CHECK_FALSE((*reader)->MarkDelivered(4, "console"));
    CHECK_FALSE((*reader)->WriteMetadata(metadata));
  }
  SECTION("and the writer keeps working afterwards") {
    reader->reset();
    RequireOk(writer->Commit(MakeBatch(5)));
    RequireOk(writer->MarkDelivered(4, "console"));
  }
}

TEST_CASE("a checkpoint without CURRENT or with a truncated MANIFEST is reported damaged, not "
          "someone else's directory",
          "[state][damage]") {
  namespace fs = std::filesystem;
  testing::TempDir dir;
  const std::string checkpoint = dir / "checkpoint";
  {
    auto store = OpenCheckpointStore(checkpoint, CheckpointOptions{});
    REQUIRE(store);
    BatchWrite write;
    write.commit.batch_id = 0;
    write.state_puts = {{"k", "v"}};
    REQUIRE((*store)->Commit(std::move(write)));
  }
  auto copy = [&](const std::string& name) {
    const std::string to = dir / name;
    fs::copy(checkpoint, to, fs::copy_options::recursive);
    return to;
  };
  SECTION("CURRENT deleted") {
    const std::string damaged = copy("no-current");
    fs::remove(fs::path(damaged) / "CURRENT");
    std::string files;
    for (const auto& entry : fs::directory_iterator(damaged)) {
      files += entry.path().filename().string() + " ";
    }
    INFO(files);
    auto store = OpenCheckpointStore(damaged, CheckpointOptions{});
    REQUIRE_FALSE(store);
    CHECK(store.error().code() == ErrorCode::kCorruption);
    CHECK_THAT(store.error().message(), Catch::Contains("damaged"));
  }
  SECTION("MANIFEST truncated") {
    const std::string damaged = copy("short-manifest");
    for (const auto& entry : fs::directory_iterator(damaged)) {
      if (entry.path().filename().string().starts_with("MANIFEST-")) {
        fs::resize_file(entry.path(), 64);  // its first record only
      }
    }
    auto store = OpenCheckpointStore(damaged, CheckpointOptions{});
    REQUIRE_FALSE(store);
    CHECK(store.error().code() == ErrorCode::kCorruption);
  }
  SECTION("a directory of other files is still not a checkpoint") {
    const std::string other = dir / "other";
    fs::create_directories(other);
    testing::WriteFile(fs::path(other) / "notes.txt", "hello");
    auto store = OpenCheckpointStore(other, CheckpointOptions{});
    REQUIRE_FALSE(store);
    CHECK(store.error().code() == ErrorCode::kIncompatible);
  }
}

}  // namespace
}  // namespace driftd
