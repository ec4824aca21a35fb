// The sections of a pipeline file that say how it runs: trigger, checkpointLocation, scaleOut
// and threads (PipelineParser, config/loader_parser.h).
#include "config/loader_parser.h"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace driftd::loader_detail {

void PipelineParser::ParseTrigger(const MapReader& top) {
  const MapReader::Entry* entry = top.Find("trigger");
  if (entry == nullptr) return;
  TriggerSpec& trigger = spec_.trigger;
  trigger.mark = entry->key_mark;
  constexpr std::string_view kHint =
      ": one of {processingTime: 10 seconds}, {once: true}, {availableNow: true}, "
      "{continuous: 1 second}";
  if (entry->value.IsScalar()) {
    // `trigger: once` is a natural slip; say how to write it.
    problems_.Error(
        "trigger", config_detail::MarkOf(entry->value),
        fmt::format("expected a map{}, found {}", kHint, Describe(entry->value, false)));
    return;
  }
  MapReader map(
      reader_, entry->value, "trigger", entry->key_mark,
      std::vector<std::string_view>{"processingTime", "once", "availableNow", "continuous"},
      std::string(kHint));
  if (!map.valid()) return;
  if (map.entries().empty()) {
    problems_.Error("trigger", entry->key_mark,
                    fmt::format("the trigger is empty; expected exactly one kind{}", kHint));
    return;
  }
  if (map.entries().size() > 1) {
    const MapReader::Entry& second = map.entries()[1];
    problems_.Error(map.PathOf(second.key), second.key_mark,
                    fmt::format("a trigger has exactly one kind, found '{}' and '{}'",
                                map.entries()[0].key, second.key));
    return;
  }
  const std::string& kind = map.entries()[0].key;
  if (kind == "processingTime") {
    trigger.kind = TriggerKind::kProcessingTime;
    if (auto interval = map.DurationMs(kind, 0)) trigger.interval_ms = *interval;
  } else if (kind == "continuous") {
    trigger.kind = TriggerKind::kContinuous;
    if (auto interval = map.DurationMs(kind, 1)) trigger.interval_ms = *interval;
  } else {
    trigger.kind = kind == "once" ? TriggerKind::kOnce : TriggerKind::kAvailableNow;
    if (auto flag = map.Bool(kind); flag && !*flag) {
      problems_.Error(map.PathOf(kind), map.MarkOf(kind),
                      fmt::format("'{}: false' is not a trigger; write '{}: true', or remove "
                                  "the trigger for the default (processingTime 0)",
                                  kind, kind));
    }
  }
}

void PipelineParser::ParseCheckpoint(const MapReader& top) {
  if (auto location = top.String("checkpointLocation")) {
    if (location->value.empty()) {
      problems_.Error(location->path, location->mark, "checkpointLocation is empty");
    }
    spec_.checkpoint_location = location->value;
    CheckPathComponents(location->path, location->mark, location->value);
  } else if (!top.Has("checkpointLocation") && !spec_.name.empty()) {
    spec_.checkpoint_location = DefaultCheckpointLocation(spec_.name, options_.env);
    CheckPathComponents("name", top.MarkOf("name"), spec_.checkpoint_location);
  }
}

// A path whose parts a file system cannot hold (255 bytes a name on Linux) fails at start,
// not at validate, unless validate says so.
void PipelineParser::CheckPathComponents(const std::string& path, SourceMark mark,
                                         const std::string& value) {
  constexpr size_t kMaxName = 255;
  for (const auto& part : std::filesystem::path(value)) {
    if (part.string().size() <= kMaxName) continue;
    problems_.Error(path, mark,
                    fmt::format("the checkpoint directory {} has a part of {} bytes, more than "
                                "a file name may have ({}){}",
                                value.size() > 80 ? value.substr(0, 80) + "..." : value,
                                part.string().size(), kMaxName,
                                path == "name" ? "; shorten the name or set checkpointLocation"
                                               : ""));
    return;
  }
}

// scaleOut: {enabled: true, instance: NAME}. Several processes running the pipeline share
// its Kafka source through a consumer group (engine/group.h); each keeps its local
// checkpoint in <checkpointLocation>/<instance>.
void PipelineParser::ParseScaleOut(const MapReader& top) {
  const MapReader::Entry* entry = top.Find("scaleOut");
  if (entry == nullptr) return;
  MapReader map(reader_, entry->value, "scaleOut", entry->key_mark,
                std::vector<std::string_view>{"enabled", "instance"},
                ", e.g. {enabled: true, instance: \"${HOSTNAME}\"}");
  if (!map.valid()) return;
  ScaleOutSpec& scale = spec_.scale_out;
  scale.mark = entry->key_mark;
  if (auto enabled = map.Bool("enabled")) scale.enabled = *enabled;
  if (!scale.enabled) return;
  if (auto instance = map.String("instance")) {
    if (!IsValidName(instance->value)) {
      problems_.Error(instance->path, instance->mark,
                      fmt::format("scaleOut.instance {} may contain only letters, digits, "
                                  "'.', '_' and '-' (it names the process's transactional.id "
                                  "and its checkpoint directory)",
                                  Show(*instance)));
      return;
    }
    scale.instance = instance->value;
  } else {
    scale.instance = DefaultInstanceName(options_.env);
  }
  if (!spec_.source.traits.group_shared) {
    problems_.Error("scaleOut.enabled", map.MarkOf("enabled"),
                    fmt::format("scaleOut shares a source among processes through a consumer "
                                "group ({}); this pipeline's source is '{}'",
                                SourcesWith(&SourceTraits::group_shared), spec_.source.format));
  }
  // Every input, the labels too, joins the source's group (one group on one cluster divides
  // them all).
  auto check_input = [&](const SourceSpec& source, const std::string& path,
                         const SourceMark& mark, const std::string& what) {
    if (source.traits.group_shared || source.format.empty()) return;
    problems_.Error(path, mark,
                    fmt::format("scaleOut shares every input among processes through one "
                                "consumer group ({}); {} '{}'",
                                SourcesWith(&SourceTraits::group_shared), what, source.format));
  };
  for (size_t i = 0; i < spec_.inputs.size(); ++i) {
    check_input(spec_.inputs[i].source, fmt::format("inputs[{}].format", i),
                spec_.inputs[i].source.mark, fmt::format("input '{}' is", spec_.inputs[i].name));
  }
  if (spec_.labels.enabled) {
    check_input(spec_.labels.source, "labels.format", spec_.labels.mark, "the labels are");
  }
  // Which options of the source a group can share is the connector's to say (its bind).
  for (size_t i = 0; i < spec_.sinks.size(); ++i) {
    const SinkSpec& sink = spec_.sinks[i];
    const ConnectorDecl* decl =
        options_.catalog ? FindConnector(*options_.catalog, sink.format, ConnectorRole::kSink)
                         : nullptr;
    if (decl == nullptr || decl->shared_by_processes) continue;
    problems_.Error(fmt::format("sinks[{}].format", i), sink.mark,
                    fmt::format("sink '{}' ({}) cannot be shared by the processes of a "
                                "scaled-out pipeline: each would write its own part of the "
                                "output with batch ids of its own. Write to Kafka (exactly "
                                "once), or console",
                                sink.name, sink.format));
  }
  if (spec_.trigger.kind == TriggerKind::kOnce ||
      spec_.trigger.kind == TriggerKind::kAvailableNow) {
    problems_.Warn("trigger", spec_.trigger.mark,
                   "a scaled-out process with trigger once or availableNow stops after what "
                   "it owns at the start; the group moves the rest to the others as it "
                   "leaves");
  }
  if (!spec_.checkpoint_location.empty()) {
    spec_.checkpoint_location += "/" + scale.instance;
  }
}

// threads: N. Results do not depend on it, so it is not part of the fingerprint.
void PipelineParser::ParseThreads(const MapReader& top) {
  if (auto threads = top.Int("threads", 1, kMaxThreads)) spec_.threads = static_cast<int>(*threads);
}

// Results must not depend on batching: say where a Kafka pipeline's would.
// Drift's record-count windows over Kafka partitions take their values in event-time order
// (DriftOrdersByEventTime), in one process or scaled out; that needs an event time.
void PipelineParser::CheckOrderDependence() {
  if (!spec_.source.traits.unordered_partitions || !spec_.drift.enabled || spec_.query.window ||
      spec_.drift.window_ms > 0 || DriftOrdersByEventTime(spec_)) {
    return;
  }
  problems_.Warn(
      "drift.windowRecords", spec_.drift.mark,
      "the schema has no timestamp column, so drift takes its windows of "
      "drift.windowRecords values in the order records arrive: with a Kafka source that "
      "order is fixed only within a partition, so the alerts are the same whatever the "
      "batching (or the number of processes) only if producers key records by model. Add an "
      "event time (a timestamp field), and drift takes each model's values in event-time "
      "order");
}

}  // namespace driftd::loader_detail
