#include "state/checkpoint_inspect.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <rocksdb/db.h>

#include <climits>
#include <memory>
#include <optional>
#include <vector>

#include "engine/json_writer.h"
#include "state/checkpoint_store.h"

namespace driftd {
namespace {

constexpr int kRecentCommits = 10;

/// Everything the report shows, gathered once so the text and JSON forms state the same facts.
struct Facts {
  std::string directory;
  std::optional<CheckpointMetadata> metadata;
  std::vector<CommitRecord> recent;  // newest first; recent.front() is the last batch
  StateStats stats;
  std::vector<OutboxEntry> outbox;
  /// Why the write-ahead log does not end cleanly, or empty.
  std::string wal_tail;
};

// Reads every block of every table file of the checkpoint and checks its checksum, read-only.
// Opening and the queries below read only what they need, so a damaged file (a truncated or
// overwritten table) would otherwise pass until the daemon reads it.
Status VerifyChecksums(const std::string& directory) {
  std::vector<std::string> families;
  rocksdb::Status status =
      rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), directory, &families);
  if (!status.ok()) return Ok();  // not a checkpoint: OpenCheckpointStore says so
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& family : families) {
    descriptors.emplace_back(family, rocksdb::ColumnFamilyOptions());
  }
  rocksdb::DBOptions options;
  options.paranoid_checks = true;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  status = rocksdb::DB::OpenForReadOnly(options, directory, descriptors, &handles, &raw);
  std::unique_ptr<rocksdb::DB> db{raw};
  if (status.ok()) {
    rocksdb::ReadOptions read_options;
    read_options.verify_checksums = true;
    read_options.fill_cache = false;
    status = db->VerifyChecksum(read_options);
  }
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    (void)db->DestroyColumnFamilyHandle(handle);  // best effort: the db closes next
  }
  if (!status.ok()) {
    return MakeError(ErrorCode::kCorruption,
                     "checkpoint '{}' is damaged: {} (restore it from a backup, or start the "
                     "pipeline on a new checkpointLocation)",
                     directory, status.ToString());
  }
  return Ok();
}

// Whether the write-ahead log ends in whole records. A writer replays it up to its first
// damaged record (RocksDB's point-in-time recovery) and goes on from there, which is right
// after a crash in the middle of a commit (that batch was never acknowledged), but the same
// open would also silently drop committed batches of a log cut short. Only this read-only
// replay, which refuses any damage, can tell that something was dropped; not which of the two
// it was. Empty when the log is whole (or the checkpoint cannot be opened this way: the main
// open reports that).
std::string WalTailDamage(const std::string& directory) {
  std::vector<std::string> families;
  if (!rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), directory, &families).ok()) {
    return "";
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& family : families) {
    descriptors.emplace_back(family, rocksdb::ColumnFamilyOptions());
  }
  rocksdb::DBOptions options;
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kAbsoluteConsistency;
  options.info_log = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status =
      rocksdb::DB::OpenForReadOnly(options, directory, descriptors, &handles, &raw);
  std::unique_ptr<rocksdb::DB> db{raw};
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    (void)db->DestroyColumnFamilyHandle(handle);  // best effort: the db closes next
  }
  return status.IsCorruption() ? status.ToString() : "";
}

Result<Facts> Gather(const std::string& directory) {
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(directory, options);
  if (!store) return tl::unexpected(store.error());
  DRIFTD_TRY(VerifyChecksums(directory));
  Facts facts;
  facts.directory = directory;
  facts.wal_tail = WalTailDamage(directory);
  auto metadata = (*store)->ReadMetadata();
  if (!metadata) return tl::unexpected(metadata.error());
  facts.metadata = std::move(*metadata);
  auto recent = (*store)->RecentCommits(kRecentCommits);
  if (!recent) return tl::unexpected(recent.error());
  facts.recent = std::move(*recent);
  auto outbox = (*store)->PendingOutbox();
  if (!outbox) return tl::unexpected(outbox.error());
  facts.outbox = std::move(*outbox);
  facts.stats = (*store)->Stats();
  return facts;
}

std::string IsoTime(int64_t epoch_ms) { return FormatTimestampUs(epoch_ms * 1000); }

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (int64_t{1} << 20)) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  return fmt::format("{:.1f} GiB", bytes / 1073741824.0);
}

std::string WatermarkText(int64_t watermark_us) {
  if (watermark_us == INT64_MIN) return "none";
  return fmt::format("{} ({} us)", FormatTimestampUs(watermark_us), watermark_us);
}

std::string Plural(size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string TextReport(const Facts& facts) {
  std::string out;
  auto line = [&out](std::string_view label, std::string_view value) {
    out += fmt::format("{:<16}{}\n", label, value);
  };
  line("checkpoint", facts.directory);
  if (facts.metadata) {
    line("pipeline", facts.metadata->pipeline_name);
    line("fingerprint", facts.metadata->fingerprint_json);
    line("format version", std::to_string(facts.metadata->format_version));
    line("created", IsoTime(facts.metadata->created_at_ms));
  } else {
    line("pipeline", "(no metadata recorded)");
  }
  if (facts.recent.empty()) {
    line("last batch", "none committed");
  } else {
    const CommitRecord& last = facts.recent.front();
    line("last batch",
         fmt::format("{}, committed {}", last.batch_id, IsoTime(last.committed_at_ms)));
    line("  start offsets", OffsetsToJson(last.start));
    line("  end offsets", OffsetsToJson(last.end));
    line("  watermark", WatermarkText(last.watermark_us));
  }
  line("checksums", "verified (every block of every table file)");
  if (!facts.wal_tail.empty()) {
    line("write-ahead log",
         fmt::format("ends in a damaged or incomplete record ({}): the batches above end at "
                     "the last whole one. A crash during a commit leaves this, and that batch "
                     "was never acknowledged; if the daemon had logged later batches as "
                     "committed, the log was cut short and they are lost: restore the "
                     "checkpoint from a backup",
                     facts.wal_tail));
  }
  line("state", fmt::format("{}, {} bytes ({})", Plural(facts.stats.keys, "key", "keys"),
                            facts.stats.bytes, HumanBytes(facts.stats.bytes)));
  line("outbox", facts.outbox.empty()
                     ? "empty (every batch delivered)"
                     : Plural(facts.outbox.size(), "undelivered batch", "undelivered batches"));
  for (const OutboxEntry& entry : facts.outbox) {
    line(fmt::format("  batch {}", entry.batch_id),
         fmt::format("pending sinks: {} ({} payload bytes)", fmt::join(entry.pending_sinks, ", "),
                     entry.payload.size()));
  }
  if (!facts.recent.empty()) {
    out += fmt::format("recent commits (newest first, up to {}):\n", kRecentCommits);
    out += fmt::format("  {:>10}  {:<24}  {:<24}  {}\n", "batch", "committed", "watermark",
                       "end offsets");
    for (const CommitRecord& commit : facts.recent) {
      out += fmt::format(
          "  {:>10}  {:<24}  {:<24}  {}\n", commit.batch_id, IsoTime(commit.committed_at_ms),
          commit.watermark_us == INT64_MIN ? "none" : FormatTimestampUs(commit.watermark_us),
          OffsetsToJson(commit.end));
    }
  }
  return out;
}

/// The fingerprint is stored as JSON; embed it as an object when it parses, else as a string so
/// the report stays valid JSON whatever the checkpoint holds.
void AppendFingerprint(std::string& out, const std::string& fingerprint) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (!fingerprint.empty() && parser.parse(fingerprint).get(root) == simdjson::SUCCESS) {
    out += simdjson::minify(root);
  } else {
    AppendJsonString(out, fingerprint);
  }
}

void AppendCommitJson(std::string& out, const CommitRecord& commit) {
  JsonObject object(out);
  object.Int("batchId", commit.batch_id)
      .Int("committedAtMs", commit.committed_at_ms)
      .String("committedAt", IsoTime(commit.committed_at_ms))
      .Raw("startOffsets", OffsetsToJson(commit.start))
      .Raw("endOffsets", OffsetsToJson(commit.end));
  if (commit.watermark_us == INT64_MIN) {
    object.Null("watermarkUs").Null("watermark");
  } else {
    object.Int("watermarkUs", commit.watermark_us).Timestamp("watermark", commit.watermark_us);
  }
  object.Close();
}

std::string JsonReport(const Facts& facts) {
  std::string out;
  JsonObject report(out);
  report.String("checkpoint", facts.directory).Bool("checksumsVerified", true);
  if (facts.wal_tail.empty()) {
    report.Null("walTailDamage");
  } else {
    report.String("walTailDamage", facts.wal_tail);
  }
  if (facts.metadata) {
    report.String("pipeline", facts.metadata->pipeline_name).Key("fingerprint");
    AppendFingerprint(out, facts.metadata->fingerprint_json);
    report.Int("formatVersion", facts.metadata->format_version)
        .Int("createdAtMs", facts.metadata->created_at_ms)
        .String("createdAt", IsoTime(facts.metadata->created_at_ms));
  } else {
    report.Null("pipeline")
        .Null("fingerprint")
        .Null("formatVersion")
        .Null("createdAtMs")
        .Null("createdAt");
  }
  report.Key("lastBatch");
  if (facts.recent.empty()) {
    out += "null";
  } else {
    AppendCommitJson(out, facts.recent.front());
  }
  report.Key("state");
  JsonObject(out).Int("keys", facts.stats.keys).Int("bytes", facts.stats.bytes).Close();
  report.Key("outbox");
  out += '[';
  for (size_t i = 0; i < facts.outbox.size(); ++i) {
    const OutboxEntry& entry = facts.outbox[i];
    if (i > 0) out += ',';
    JsonObject object(out);
    object.Int("batchId", entry.batch_id)
        .Int("payloadBytes", static_cast<int64_t>(entry.payload.size()))
        .Key("pendingSinks");
    out += '[';
    for (size_t j = 0; j < entry.pending_sinks.size(); ++j) {
      if (j > 0) out += ',';
      AppendJsonString(out, entry.pending_sinks[j]);
    }
    out += ']';
    object.Close();
  }
  out += ']';
  report.Key("recentCommits");
  out += '[';
  for (size_t i = 0; i < facts.recent.size(); ++i) {
    if (i > 0) out += ',';
    AppendCommitJson(out, facts.recent[i]);
  }
  out += ']';
  report.Close();
  out += '\n';  // a terminal-friendly end, like the text report's
  return out;
}

}  // namespace

Result<std::string> InspectCheckpoint(const std::string& directory, bool json) {
  auto facts = Gather(directory);
  if (!facts) return tl::unexpected(facts.error());
  return json ? JsonReport(*facts) : TextReport(*facts);
}

}  // namespace driftd
