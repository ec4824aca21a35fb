#include "engine/executor/checkpoint_claim.h"

#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include "engine/executor/placement.h"
#include "engine/log.h"
#include "engine/random_id.h"
#include "engine/wall_clock.h"

namespace driftd {

namespace {

// Top-level keys whose values differ between two fingerprint objects.
std::vector<std::string> FingerprintDifferences(std::string_view stored, std::string_view current) {
  simdjson::dom::parser parser_a;
  simdjson::dom::parser parser_b;
  simdjson::dom::object a;
  simdjson::dom::object b;
  std::vector<std::string> changed;
  if (parser_a.parse(stored.data(), stored.size()).get(a) != simdjson::SUCCESS ||
      parser_b.parse(current.data(), current.size()).get(b) != simdjson::SUCCESS) {
    changed.push_back("(fingerprint unreadable)");
    return changed;
  }
  for (auto field : a) {
    simdjson::dom::element other;
    if (b.at_key(field.key).get(other) != simdjson::SUCCESS) {
      changed.emplace_back(field.key);
      continue;
    }
    if (simdjson::minify(field.value) != simdjson::minify(other)) changed.emplace_back(field.key);
  }
  for (auto field : b) {
    simdjson::dom::element other;
    if (a.at_key(field.key).get(other) != simdjson::SUCCESS) changed.emplace_back(field.key);
  }
  return changed;
}

// Checkpoint format 1 kept each stage's keys unscoped, told apart by their first bytes.
std::string_view LegacyNamespaceOf(std::string_view key) {
  if (key.starts_with("drift")) return "drift";
  if (!key.empty() && key[0] == 'a') return "agg";
  return "";
}

// Format 1 checkpoints kept state keys unscoped: give each the scope of a query run by one
// process and its namespace, in one atomic write with the new format version.
Status MigrateFormat1(CheckpointStore& store, const PipelineSpec& spec,
                      CheckpointMetadata metadata) {
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
  DRIFTD_TRY(store.ScanState([&](std::string_view key, std::string_view value) {
    deletes.emplace_back(key);
    const std::string_view ns = LegacyNamespaceOf(key);
    if (!ns.empty()) puts.emplace_back(EncodeStateKey(LocalPlacement::kScope, ns, key), value);
  }));
  metadata.format_version = 2;
  DRIFTD_TRY(store.RewriteState(puts, deletes, metadata));
  GetLogger("engine")->info("pipeline {}: checkpoint {} upgraded to format 2 ({} state entries)",
                            spec.name, spec.checkpoint_location, puts.size());
  return Ok();
}

}  // namespace

std::string NewCheckpointId() { return RandomHexId(); }

Result<std::string> ClaimCheckpoint(CheckpointStore& store, const PipelineSpec& spec,
                                    const std::string& fingerprint_json,
                                    const std::string& checkpoint_name) {
  auto metadata = store.ReadMetadata();
  if (!metadata) return tl::unexpected(metadata.error());
  const std::string& kept_name = checkpoint_name.empty() ? spec.name : checkpoint_name;
  if (!*metadata) {
    CheckpointMetadata fresh;
    fresh.pipeline_name = kept_name;
    fresh.fingerprint_json = fingerprint_json;
    fresh.created_at_ms = NowMs();
    fresh.checkpoint_id = NewCheckpointId();
    DRIFTD_TRY(store.WriteMetadata(fresh));
    return fresh.checkpoint_id;
  }
  const CheckpointMetadata& stored = **metadata;
  if (stored.pipeline_name != kept_name && stored.pipeline_name != spec.name) {
    return MakeError(ErrorCode::kIncompatible,
                     "checkpoint {} belongs to pipeline '{}', not '{}': point "
                     "checkpointLocation at a directory of this pipeline's own",
                     spec.checkpoint_location, stored.pipeline_name, spec.name);
  }
  if (!fingerprint_json.empty() && stored.fingerprint_json != fingerprint_json) {
    std::vector<std::string> changed =
        FingerprintDifferences(stored.fingerprint_json, fingerprint_json);
    return MakeError(
        ErrorCode::kIncompatible,
        "pipeline '{}' changed in ways its checkpoint {} cannot serve: {} changed. The "
        "saved state and offsets were computed for the old definition. Revert the change, or "
        "start over with a new checkpointLocation (or delete the old one) to recompute from "
        "the source's startingOffsets",
        spec.name, spec.checkpoint_location, fmt::join(changed, ", "));
  }
  if (stored.format_version < 2) {
    CheckpointMetadata upgraded = stored;
    if (upgraded.checkpoint_id.empty()) upgraded.checkpoint_id = NewCheckpointId();
    DRIFTD_TRY(MigrateFormat1(store, spec, upgraded));
    return upgraded.checkpoint_id;
  }
  if (stored.format_version > 2) {
    return MakeError(ErrorCode::kIncompatible,
                     "checkpoint {} has format {}, newer than this driftd reads (2): run the "
                     "driftd that wrote it, or start over with a new checkpointLocation",
                     spec.checkpoint_location, stored.format_version);
  }
  if (stored.checkpoint_id.empty()) {
    // A checkpoint from before ids existed gets one now, kept from then on.
    CheckpointMetadata upgraded = stored;
    upgraded.checkpoint_id = NewCheckpointId();
    DRIFTD_TRY(store.WriteMetadata(upgraded));
    return upgraded.checkpoint_id;
  }
  return stored.checkpoint_id;
}

// A checkpoint behind what its sinks delivered is a copy, or an old backup, of one that went on
// running: starting from it would compute and deliver those batches a second time.
Status RefuseStaleCheckpoint(const std::vector<std::unique_ptr<Sink>>& sinks,
                             const PipelineSpec& spec, int64_t last_batch) {
  for (const auto& sink : sinks) {
    auto delivered = sink->LastDelivered();
    if (!delivered) return tl::unexpected(delivered.error());
    if (!*delivered || **delivered <= last_batch) continue;
    return MakeError(
        ErrorCode::kIncompatible,
        "checkpoint {} is behind its output: sink '{}' has delivered batch {} of this "
        "checkpoint, whose last committed batch is {}. It is a copy or an older backup of a "
        "checkpoint that kept running; starting from it would deliver batches {} to {} "
        "again. Run from the current checkpoint, or start over with a new checkpointLocation",
        spec.checkpoint_location, sink->name(), **delivered, last_batch, last_batch + 1,
        **delivered);
  }
  return Ok();
}

}  // namespace driftd
