// The kafka source's options (kafka_source_impl.h describes the source): parsing and the checks
// across options, made once at load by Bind, and the declaration that lists every option with
// its default, and creates the source from what Bind made.
#include <algorithm>
#include <charconv>
#include <regex>

#include <fmt/format.h>
#include <simdjson.h>

#include "connectors/connector_factories.h"
#include "connectors/kafka/kafka_source_impl.h"

namespace driftd {

namespace kafka_source_detail {

namespace {

// Options the consumer's correctness depends on; the source sets them itself.
constexpr const char* kManagedSettings[] = {"enable.auto.commit", "enable.auto.offset.store",
                                            "auto.offset.reset", "enable.partition.eof"};

std::vector<std::string> SplitTopics(const std::string& text) {
  std::vector<std::string> topics;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos) comma = text.size();
    std::string topic = text.substr(begin, comma - begin);
    topic.erase(0, topic.find_first_not_of(" \t"));
    topic.erase(topic.find_last_not_of(" \t") + 1);
    if (!topic.empty()) topics.push_back(topic);
    begin = comma + 1;
  }
  return topics;
}

Result<std::map<std::string, std::vector<int32_t>>> ParseAssign(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(json).get(object)) {
    return MakeError(ErrorCode::kConfig, "assign: expected JSON like {{\"topic\":[0,1]}}, got {}",
                     json);
  }
  std::map<std::string, std::vector<int32_t>> assign;
  for (auto [topic, value] : object) {
    simdjson::dom::array partitions;
    if (value.get(partitions)) {
      return MakeError(ErrorCode::kConfig, "assign: topic '{}' needs an array of partitions",
                       std::string(topic));
    }
    for (simdjson::dom::element element : partitions) {
      int64_t partition = 0;
      if (element.get(partition) || partition < 0 || partition > INT32_MAX) {
        return MakeError(ErrorCode::kConfig, "assign: topic '{}' has an invalid partition",
                         std::string(topic));
      }
      assign[std::string(topic)].push_back(static_cast<int32_t>(partition));
    }
  }
  if (assign.empty()) return MakeError(ErrorCode::kConfig, "assign names no partitions");
  return assign;
}

// {"topic":{"0":23,"1":-2}} -> {"topic-0": 23, "topic-1": -2}
Result<std::map<std::string, int64_t>> ParseStartingOffsetsJson(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(json).get(object)) {
    return MakeError(ErrorCode::kConfig,
                     "startingOffsets: expected earliest, latest or JSON like "
                     "{{\"topic\":{{\"0\":23,\"1\":-2}}}}, got {}",
                     json);
  }
  std::map<std::string, int64_t> offsets;
  for (auto [topic, value] : object) {
    simdjson::dom::object partitions;
    if (value.get(partitions)) {
      return MakeError(ErrorCode::kConfig,
                       "startingOffsets: topic '{}' needs an object of partition to offset",
                       std::string(topic));
    }
    for (auto [partition_text, offset_value] : partitions) {
      int32_t partition = -1;
      auto [ptr, ec] = std::from_chars(partition_text.data(),
                                       partition_text.data() + partition_text.size(), partition);
      int64_t offset = 0;
      if (ec != std::errc() || ptr != partition_text.data() + partition_text.size() ||
          partition < 0 || offset_value.get(offset) || offset < kEarliest) {
        return MakeError(ErrorCode::kConfig,
                         "startingOffsets: topic '{}' partition '{}' needs an offset, -2 "
                         "(earliest) or -1 (latest)",
                         std::string(topic), std::string(partition_text));
      }
      offsets[kafka::PartitionKey(topic, partition)] = offset;
    }
  }
  return offsets;
}

// What a message of ParseAssign or ParseStartingOffsetsJson says after "<option>: ".
std::string AfterOption(const Error& error, std::string_view option) {
  std::string text = error.message();
  if (const std::string lead = std::string(option) + ": "; text.rfind(lead, 0) == 0) {
    text.erase(0, lead.size());
  }
  return text;
}

// The source's options (declared types, ranges and defaults applied) parsed once, with the
// checks across options, each problem tied to its option.
Bound<KafkaSourceOptions> Bind(const PipelineSpec& pipeline, const SourceSpec&,
                               const Options& options) {
  auto problem = [](std::string option, std::string message) -> Bound<KafkaSourceOptions> {
    return tl::unexpected(OptionProblem{std::move(option), std::move(message)});
  };
  KafkaSourceOptions parsed;
  parsed.pipeline_name = pipeline.name;
  for (MetadataColumn column : pipeline.query.metadata) {
    parsed.read_key |= column == MetadataColumn::kKey;
    parsed.read_headers |= column == MetadataColumn::kHeaders;
  }
  std::vector<std::string_view> modes;
  if (std::string subscribe = options.GetString("subscribe"); !subscribe.empty()) {
    modes.push_back("subscribe");
    parsed.mode = Mode::kSubscribe;
    parsed.topics = SplitTopics(subscribe);
    if (parsed.topics.empty()) return problem("subscribe", "names no topic");
  }
  if (std::string pattern = options.GetString("subscribePattern"); !pattern.empty()) {
    modes.push_back("subscribePattern");
    parsed.mode = Mode::kSubscribePattern;
    parsed.pattern = pattern;
    try {
      std::regex check(pattern);
    } catch (const std::regex_error& error) {
      return problem("subscribePattern", fmt::format("'{}' is not a regular expression: {}",
                                                     pattern, error.what()));
    }
  }
  if (std::string assign = options.GetString("assign"); !assign.empty()) {
    modes.push_back("assign");
    parsed.mode = Mode::kAssign;
    auto assigned = ParseAssign(assign);
    if (!assigned) return problem("assign", AfterOption(assigned.error(), "assign"));
    parsed.assign = std::move(*assigned);
  }
  if (modes.size() != 1) {
    return problem(modes.empty() ? "" : std::string(modes.back()),
                   "the kafka source needs exactly one of subscribe, subscribePattern, assign");
  }
  parsed.starting_offsets = options.GetString("startingOffsets");
  if (parsed.starting_offsets != "earliest" && parsed.starting_offsets != "latest") {
    auto offsets = ParseStartingOffsetsJson(parsed.starting_offsets);
    if (!offsets) {
      return problem("startingOffsets", AfterOption(offsets.error(), "startingOffsets"));
    }
    parsed.starting_partitions = std::move(*offsets);
  }
  // Unset: no limit (the declaration's ranges refuse 0 and negative numbers).
  if (options.Has("maxOffsetsPerTrigger")) {
    parsed.max_offsets_per_trigger = options.GetInt("maxOffsetsPerTrigger");
  }
  parsed.fail_on_data_loss = options.GetBool("failOnDataLoss");
  parsed.poll_timeout_ms = options.GetInt("kafkaConsumer.pollTimeoutMs");
  parsed.client = options.WithPrefix("kafka.");
  if (parsed.client["bootstrap.servers"].empty()) {
    return problem("kafka.bootstrap.servers", "the kafka source needs kafka.bootstrap.servers");
  }
  for (const char* managed : kManagedSettings) {
    if (parsed.client.count(managed)) {
      return problem(fmt::format("kafka.{}", managed),
                     fmt::format("kafka.{} is not supported: the kafka source manages offsets "
                                 "itself",
                                 managed));
    }
  }
  // An aborted transaction's records must never count (exactly-once, and scaled out the
  // repartition topic's aborted row blocks): only committed records are read.
  if (auto level = parsed.client.find("isolation.level");
      level != parsed.client.end() && level->second != "read_committed") {
    return problem("kafka.isolation.level",
                   fmt::format("'{}' is not supported: the kafka source reads committed records "
                               "only (read_committed), so that records of an aborted "
                               "transaction never count",
                               level->second));
  }
  if (auto refused = kafka::CheckSettings(parsed.client)) return tl::unexpected(*refused);
  parsed.group_id = kafka::GroupId(pipeline);
  // A kafka sink commits the offsets inside its transaction (the sink kind's own knowledge).
  parsed.commit_offsets = std::none_of(pipeline.sinks.begin(), pipeline.sinks.end(),
                                       [](const SinkSpec& sink) { return sink.format == "kafka"; });
  parsed.scale_out = pipeline.scale_out.enabled;
  parsed.instance = pipeline.scale_out.instance;
  if (parsed.scale_out) {
    if (parsed.mode == Mode::kAssign) {
      return problem("assign",
                     "scaleOut needs subscribe or subscribePattern: with assign the partitions "
                     "are fixed, and the group cannot share them");
    }
    // Offsets go into each batch's transaction; nothing else may commit for the group.
    parsed.commit_offsets = false;
  }
  return parsed;
}

}  // namespace

}  // namespace kafka_source_detail

using kafka_source_detail::Bind;
using kafka_source_detail::KafkaSource;
using kafka_source_detail::KafkaSourceOptions;

ConnectorDecl KafkaSourceDecl() {
  ConnectorDecl decl;
  decl.format = "kafka";
  decl.role = ConnectorRole::kSource;
  decl.doc =
      "Reads JSON records from Kafka topics, like Spark's Kafka source. Batches are offset "
      "ranges read by explicit partition assignment, so replays are exact. Consumer-group "
      "offsets are committed after each batch (inside the sink's transaction when the pipeline "
      "also writes to Kafka), so standard lag tools see the progress.";
  decl.passthrough_prefix = "kafka.";
  decl.options = {
      OptionDecl{"subscribe", OptionType::kString, "", "Comma-separated topics to read."}
          .Identity(),
      OptionDecl{"subscribePattern", OptionType::kString, "",
                 "Regular expression; every topic whose whole name matches is read (topics "
                 "created later too)."}
          .Identity(),
      OptionDecl{"assign", OptionType::kJson, "",
                 "Explicit partitions, as JSON: {\"topic\":[0,1]}. Exactly one of subscribe, "
                 "subscribePattern and assign is required."}
          .Identity(),
      {"startingOffsets", OptionType::kJson, "latest",
       "Where a new query starts: earliest, latest, or JSON per partition "
       "{\"topic\":{\"0\":23,\"1\":-2}} (-2 earliest, -1 latest). Ignored when resuming from a "
       "checkpoint; partitions discovered later start at earliest."},
      OptionDecl{"maxOffsetsPerTrigger", OptionType::kInt, "",
                 "Upper bound on records per batch, split across partitions in proportion to "
                 "their lag (unset: no limit)."}
          .AtLeast(1),
      {"failOnDataLoss", OptionType::kBool, "true",
       "Stop when offsets to read are gone (retention, deleted records or topics). false: skip "
       "them and count them as lost."},
      OptionDecl{"kafkaConsumer.pollTimeoutMs", OptionType::kInt, "120000",
                 "How long reading a planned range waits for its records before failing, "
                 "milliseconds (it also bounds each metadata and offset request, to at most "
                 "10 s)."}
          .AtLeast(1),
      {"kafka.bootstrap.servers", OptionType::kString, "", "Brokers to connect to, host:port,...",
       true},
  };
  decl.traits = {.topic_partitions = true,
                 .unordered_partitions = true,
                 .whole_messages = true,
                 .group_shared = true};
  BindSource<KafkaSourceOptions>(
      decl, &Bind, [](const PipelineSpec&, KafkaSourceOptions options) {
        return Result<std::unique_ptr<Source>>(std::make_unique<KafkaSource>(std::move(options)));
      });
  return decl;
}

Result<std::unique_ptr<Source>> CreateKafkaSource(const PipelineSpec& pipeline) {
  static const ConnectorDecl decl = KafkaSourceDecl();
  return decl.create_source(pipeline);
}

}  // namespace driftd
