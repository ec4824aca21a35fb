// The `file` sink: JSON-lines part files per batch, made exactly-once by a manifest entry per
// batch (see file_sink.h for the layout).
#include "connectors/file_sink.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>
#include <simdjson.h>

#include "connectors/connector_factories.h"
#include "connectors/fs_util.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

std::string ManifestDir(const std::string& path) { return JoinPath(path, kFileSinkManifestDir); }

// Leftover temp files of interrupted writes are hidden "*.tmp" files; they are never read.
void RemoveStaleTempFiles(const std::string& directory) {
  auto listing = ListRegularFiles(directory);
  if (!listing) return;
  for (const DirEntry& entry : *listing) {
    if (entry.name.size() > 5 && entry.name[0] == '.' &&
        std::string_view(entry.name).substr(entry.name.size() - 4) == ".tmp") {
      std::error_code ignored;
      std::filesystem::remove(JoinPath(directory, entry.name), ignored);
    }
  }
}

class FileSink final : public Sink {
 public:
  FileSink(const SinkSpec& spec, std::string path)
      : name_(spec.name), path_(std::move(path)), stream_(spec.stream), mode_(spec.output_mode) {}

  const std::string& name() const override { return name_; }

  void SetCheckpointId(const std::string& checkpoint_id, int64_t) override {
    checkpoint_id_ = checkpoint_id;
  }

  Status Open() override { return AsDeliveryError(OpenDirectory()); }

  Result<bool> IsDelivered(int64_t batch_id) override {
    return AsDeliveryError(ManifestHas(batch_id));
  }

  Result<std::optional<int64_t>> LastDelivered() override { return last_delivered_; }

  Status Deliver(const BatchOutput& output) override { return AsDeliveryError(Write(output)); }

  void DeferDurability(bool on) override { deferred_ = on; }

  // The files written since the last call, then their two directories (the renames). Runs
  // beside Deliver (Sink::Sync): only the list is shared.
  Status Sync() override {
    std::vector<std::string> files;
    {
      std::lock_guard<std::mutex> lock(unsynced_mutex_);
      files.swap(unsynced_);
    }
    if (files.empty()) return Ok();
    Status status = Ok();
    for (const std::string& file : files) {
      status = AsDeliveryError(SyncFile(file));
      if (!status) break;
    }
    if (status) status = AsDeliveryError(SyncDirectory(path_));
    if (status) status = AsDeliveryError(SyncDirectory(ManifestDir(path_)));
    if (!status) {
      // Kept for the next attempt (the query stops on the error; a restart re-checks them).
      std::lock_guard<std::mutex> lock(unsynced_mutex_);
      unsynced_.insert(unsynced_.begin(), files.begin(), files.end());
    }
    return status;
  }

  void Remember(std::string path) {
    std::lock_guard<std::mutex> lock(unsynced_mutex_);
    unsynced_.push_back(std::move(path));
  }

 private:
  // The sink's directory failing (a full or broken disk) is a failure to deliver (kExternal:
  // retried, exit code 1), not one of the checkpoint, which kIo would say (exit code 74).
  template <typename T>
  static Result<T> AsDeliveryError(Result<T> result) {
    if (result || result.error().code() != ErrorCode::kIo) return result;
    return MakeError(ErrorCode::kExternal, "{}", result.error().message());
  }

  Status OpenDirectory() {
    DRIFTD_TRY(CreateDirectories(path_));
    DRIFTD_TRY(CreateDirectories(ManifestDir(path_)));
    RemoveStaleTempFiles(path_);
    RemoveStaleTempFiles(ManifestDir(path_));
    return CheckOwnCheckpoint();
  }

  // Whether batch_id's manifest entry exists and is whole, and so is the part it lists: an
  // entry is written after its part, but without a sync in between (DeferDurability) a machine
  // crash may keep the entry and lose the part, or tear the entry itself. Such a batch is not
  // delivered; its re-delivery replaces both.
  Result<bool> ManifestHas(int64_t batch_id) {
    const std::string entry_path = JoinPath(ManifestDir(path_), std::to_string(batch_id));
    auto size = FileSizeOrMissing(entry_path);
    if (!size) return tl::unexpected(size.error());
    if (*size < 0) return false;
    auto text = ReadWholeFile(entry_path);
    if (!text) return tl::unexpected(text.error());
    simdjson::dom::element entry;
    if (parser_.parse(*text).get(entry) != simdjson::SUCCESS) return false;
    simdjson::dom::array files;
    if (entry["files"].get_array().get(files) != simdjson::SUCCESS) return false;
    int64_t bytes = -1;
    if (entry["bytes"].get_int64().get(bytes) != simdjson::SUCCESS) return true;  // older entry
    int64_t found = 0;
    for (auto file : files) {
      std::string_view name;
      if (file.get_string().get(name) != simdjson::SUCCESS) return false;
      auto part = FileSizeOrMissing(JoinPath(path_, name));
      if (!part) return tl::unexpected(part.error());
      if (*part < 0) return false;
      found += *part;
    }
    return found == bytes;
  }

  Status Write(const BatchOutput& output) {
    auto delivered = ManifestHas(output.batch_id);
    if (!delivered) return tl::unexpected(delivered.error());
    if (*delivered) return Ok();  // finished before a crash; the manifest is the truth

    const OutputRows& rows = output.For(stream_, mode_);
    std::string part;
    int64_t part_bytes = 0;
    if (!rows.empty()) {
      part = FileSinkPartName(output.batch_id, name_);
      // Same name on re-delivery: the rename replaces a part left by an interrupted attempt.
      auto written = WriteLinesAtomically(path_, part, rows.rows, !deferred_);
      if (!written) return tl::unexpected(written.error());
      part_bytes = *written;
      if (deferred_) Remember(JoinPath(path_, part));
    }
    std::string manifest;
    JsonObject entry(manifest);
    entry.Int("batchId", output.batch_id).String("sink", name_).Key("files");
    manifest += "[";
    if (!part.empty()) AppendJsonString(manifest, part);
    manifest += "]";
    entry.Int("rows", static_cast<int64_t>(rows.rows.size()));
    entry.Int("bytes", part_bytes);
    if (!checkpoint_id_.empty()) entry.String("checkpoint", checkpoint_id_);
    entry.Close();
    manifest.push_back('\n');
    const std::string entry_name = std::to_string(output.batch_id);
    DRIFTD_TRY(WriteFileAtomically(ManifestDir(path_), entry_name, manifest, !deferred_));
    if (deferred_) Remember(JoinPath(ManifestDir(path_), entry_name));
    return Ok();
  }

  // The newest manifest entry must be of this checkpoint: a checkpoint started over (deleted)
  // numbers its batches from 0 again, and the old entries would pass for its deliveries.
  // Entries a machine crash left incomplete (DeferDurability) are passed over: they are not
  // deliveries, and recovery writes them again.
  Status CheckOwnCheckpoint() {
    if (checkpoint_id_.empty()) return Ok();
    auto batches = ReadFileSinkManifest(path_);
    if (!batches) return tl::unexpected(batches.error());
    for (auto batch = batches->rbegin(); batch != batches->rend(); ++batch) {
      auto complete = ManifestHas(*batch);
      if (!complete) return tl::unexpected(complete.error());
      if (!*complete) continue;
      const std::string entry_path = JoinPath(ManifestDir(path_), std::to_string(*batch));
      auto text = ReadWholeFile(entry_path);
      if (!text) return tl::unexpected(text.error());
      simdjson::dom::element entry;
      std::string_view owner;
      if (parser_.parse(*text).get(entry) != simdjson::SUCCESS) {
        return MakeError(ErrorCode::kCorruption, "manifest entry {} is not JSON", entry_path);
      }
      last_delivered_ = *batch;
      if (entry["checkpoint"].get(owner) != simdjson::SUCCESS) return Ok();  // older version
      if (owner == checkpoint_id_) return Ok();
      last_delivered_.reset();
      return MakeError(
          ErrorCode::kIncompatible,
          "file sink '{}': {} holds output up to batch {} of another checkpoint ({}), not of "
          "this pipeline's checkpoint ({}); batch numbers would collide. Point the "
          "sink at a new directory, or move the old output away",
          name_, path_, *batch, owner, checkpoint_id_);
    }
    return Ok();
  }

  std::string checkpoint_id_;
  /// The newest manifest entry at Open, when it is this checkpoint's.
  std::optional<int64_t> last_delivered_;
  std::string name_;
  std::string path_;
  StreamKind stream_;
  OutputMode mode_;
  simdjson::dom::parser parser_;
  // DeferDurability: parts and manifest entries written since the last Sync, which another
  // thread calls.
  bool deferred_ = false;
  std::mutex unsynced_mutex_;
  std::vector<std::string> unsynced_;
};

}  // namespace

std::string FileSinkPartName(int64_t batch_id, std::string_view sink_name) {
  std::string safe(sink_name);
  for (char& c : safe) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return fmt::format("part-{:010}-{}.jsonl", batch_id, safe);
}

Result<std::vector<int64_t>> ReadFileSinkManifest(const std::string& path) {
  std::vector<int64_t> batches;
  std::string directory = ManifestDir(path);
  auto exists = FileSizeOrMissing(directory);
  if (!exists) return tl::unexpected(exists.error());
  if (*exists < 0) return batches;
  auto listing = ListRegularFiles(directory);
  if (!listing) return tl::unexpected(listing.error());
  for (const DirEntry& entry : *listing) {
    int64_t batch = -1;
    const char* end = entry.name.data() + entry.name.size();
    auto [ptr, ec] = std::from_chars(entry.name.data(), end, batch);
    if (ec != std::errc() || ptr != end || batch < 0) continue;  // temp files and the like
    batches.push_back(batch);
  }
  std::sort(batches.begin(), batches.end());
  return batches;
}

Result<std::vector<std::string>> ReadCommittedFileSinkRows(const std::string& path) {
  auto batches = ReadFileSinkManifest(path);
  if (!batches) return tl::unexpected(batches.error());
  std::vector<std::string> rows;
  simdjson::dom::parser parser;
  for (int64_t batch : *batches) {
    std::string entry_path = JoinPath(ManifestDir(path), std::to_string(batch));
    auto entry = ReadWholeFile(entry_path);
    if (!entry) return tl::unexpected(entry.error());
    simdjson::dom::array files;
    if (parser.parse(*entry).at_key("files").get_array().get(files) != simdjson::SUCCESS) {
      return MakeError(ErrorCode::kCorruption, "manifest entry {} has no \"files\" list",
                       entry_path);
    }
    for (auto file : files) {
      std::string_view name;
      if (file.get_string().get(name) != simdjson::SUCCESS) {
        return MakeError(ErrorCode::kCorruption, "manifest entry {} lists a non-string file",
                         entry_path);
      }
      std::string part_path = JoinPath(path, name);
      auto data = ReadWholeFile(part_path);
      if (!data) {
        return MakeError(ErrorCode::kCorruption, "part {} of committed batch {} is unreadable: {}",
                         part_path, batch, data.error().message());
      }
      size_t begin = 0;
      while (begin < data->size()) {
        size_t end = data->find('\n', begin);
        if (end == std::string::npos) end = data->size();
        if (end > begin) rows.emplace_back(*data, begin, end - begin);
        begin = end + 1;
      }
    }
  }
  return rows;
}

namespace {

// The sink's options as BindFileSink made them.
struct FileSinkOptions {
  std::string path;
};

// "out/" is "out".
std::filesystem::path NormalDirectory(const std::string& text) {
  auto path = std::filesystem::path(text).lexically_normal();
  return path.has_filename() ? path : path.parent_path();
}

Bound<FileSinkOptions> BindFileSink(const PipelineSpec& pipeline, const SinkSpec& sink,
                                    const Options& options) {
  FileSinkOptions bound{.path = options.GetString("path")};
  if (bound.path.empty()) return tl::unexpected(OptionProblem{"path", "must not be empty"});
  // config/ compares the directories of every sink and source with links resolved (CheckPaths);
  // this is the rule for a spec built without it.
  for (const SinkSpec* other : SinksBefore(pipeline, sink)) {
    if (other->format != sink.format) continue;
    if (NormalDirectory(other->options.GetString("path")) == NormalDirectory(bound.path)) {
      return tl::unexpected(OptionProblem{
          "path", fmt::format("file sinks '{}' and '{}' both write to {}; each file sink needs "
                              "its own directory (their manifests would collide)",
                              other->name, sink.name, bound.path)});
    }
  }
  return bound;
}

}  // namespace

ConnectorDecl FileSinkDecl() {
  ConnectorDecl decl;
  decl.format = "file";
  decl.role = ConnectorRole::kSink;
  decl.doc =
      "JSON lines, exactly-once: batch N's rows go to `part-<N>-<sink>.jsonl` (temp file, "
      "fsync, rename), then the entry `_driftd_manifest/<N>` records that N is complete (under "
      "the continuous trigger both are synced once per trigger interval instead of per epoch; "
      "an entry names its part's size, so one a machine crash cut is told apart). A "
      "crash in between leaves a part without an entry, which the restart rewrites, so readers "
      "must only trust parts listed in the manifest (`driftd` and the test helpers do). Batches "
      "without rows get an entry and no part. Each file sink needs a directory of its own.";
  decl.options = {
      {"path", OptionType::kString, "", "The output directory (created if missing).", true, {},
       PathUse::kWritesDirectory},
  };
  BindSink<FileSinkOptions>(decl, &BindFileSink,
                            [](const PipelineSpec&, const SinkSpec& spec,
                               FileSinkOptions options) -> Result<std::unique_ptr<Sink>> {
                              return std::make_unique<FileSink>(spec, std::move(options.path));
                            });
  return decl;
}

Result<std::unique_ptr<Sink>> CreateFileSink(const PipelineSpec& pipeline, const SinkSpec& spec) {
  static const ConnectorDecl decl = FileSinkDecl();
  return decl.create_sink(pipeline, spec);
}

}  // namespace driftd
