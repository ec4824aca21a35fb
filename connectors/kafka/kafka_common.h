// Pieces shared by the Kafka source and sink: owners for librdkafka's C handles, client
// configuration from `kafka.*` options, the names driftd derives from the pipeline (consumer
// group, transactional id), the "topic-partition" offset keys and the module's logger. Private
// to connectors/kafka/.
#pragma once

#include <cstdint>
#include <map>
#include <vector>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>

#include <librdkafka/rdkafka.h>

#include "engine/log.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"

namespace driftd::kafka {

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }
};
struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const {
    rd_kafka_topic_partition_list_destroy(list);
  }
};
struct ErrorDeleter {
  void operator()(rd_kafka_error_t* error) const { rd_kafka_error_destroy(error); }
};
struct MessageDeleter {
  void operator()(rd_kafka_message_t* message) const { rd_kafka_message_destroy(message); }
};
struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* metadata) const {
    rd_kafka_metadata_destroy(metadata);
  }
};
struct QueueDeleter {
  void operator()(rd_kafka_queue_t* queue) const { rd_kafka_queue_destroy(queue); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* event) const { rd_kafka_event_destroy(event); }
};
struct GroupMetadataDeleter {
  void operator()(rd_kafka_consumer_group_metadata_t* metadata) const {
    rd_kafka_consumer_group_metadata_destroy(metadata);
  }
};

using Handle = std::unique_ptr<rd_kafka_t, HandleDeleter>;
using Conf = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter>;
using ErrorPtr = std::unique_ptr<rd_kafka_error_t, ErrorDeleter>;
using MessagePtr = std::unique_ptr<rd_kafka_message_t, MessageDeleter>;
using MetadataPtr = std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter>;
using QueuePtr = std::unique_ptr<rd_kafka_queue_t, QueueDeleter>;
using EventPtr = std::unique_ptr<rd_kafka_event_t, EventDeleter>;
using GroupMetadataPtr = std::unique_ptr<rd_kafka_consumer_group_metadata_t, GroupMetadataDeleter>;

/// The module's logger ("kafka"), shared by every file of connectors/kafka/.
std::shared_ptr<spdlog::logger> Log();

/// The consumer group of a pipeline's Kafka source: `kafka.group.id`, or "driftd-<name>".
std::string GroupId(const PipelineSpec& pipeline);

/// Whether a subscribePattern source reads `topic`: the pattern matches the whole name, and it
/// is neither a broker-internal topic ("__...") nor a pipeline's changelog.
bool PatternSubscribes(const std::string& topic, const std::regex& pattern);

/// Builds a client configuration: `settings` (librdkafka property names) applied in order, with
/// logs routed to driftd's "kafka" logger. The error names the rejected property.
Result<Conf> MakeConf(const std::map<std::string, std::string>& settings);

/// librdkafka's own check of a connector's kafka.* settings (`settings`: without the prefix),
/// each alone, then together: the first problem, at its option ("kafka.<name>"; empty when
/// only the settings together are refused), or nullopt. A bind calls it, so that validate
/// refuses what the first connection would.
std::optional<OptionProblem> CheckSettings(const std::map<std::string, std::string>& settings);

/// Creates a consumer or producer from `conf` (consumed on success).
Result<Handle> MakeClient(rd_kafka_type_t type, Conf conf);

/// "topic-3" for topic "topic", partition 3 (the key of SourceOffsets).
std::string PartitionKey(std::string_view topic, int32_t partition);

/// Splits "my-topic-3" into {"my-topic", 3}; nullopt when the key has no partition suffix.
std::optional<std::pair<std::string, int32_t>> ParsePartitionKey(std::string_view key);

/// The metadata of `topic` (nullptr: all topics), or an error after `timeout_ms`.
Result<MetadataPtr> FetchMetadata(rd_kafka_t* rk, const char* topic, int timeout_ms);

/// Creates `topic` unless it exists. `configs` are topic configs such as cleanup.policy.
/// Returns once every partition has a leader (or `timeout_ms` passed), so that the first
/// records produced to a new topic do not wait for the client's next look at the metadata.
Status CreateTopic(rd_kafka_t* rk, const std::string& topic, int partitions,
                   const std::map<std::string, std::string>& configs, int timeout_ms);

/// Error text of an rd_kafka_error_t, with its code name.
std::string Describe(const rd_kafka_error_t* error);

/// Asks the brokers for config `name` of each of `topics` (DescribeConfigs) and returns at
/// once: the answer comes on the returned queue (TopicConfigsAnswer reads it).
QueuePtr AskTopicConfigs(rd_kafka_t* rk, const std::vector<std::string>& topics,
                         int timeout_ms);
/// The answer to AskTopicConfigs on `queue` if it came within `wait_ms`: config `name` by
/// topic, for the topics whose brokers said (an older broker, one without DescribeConfigs,
/// or a topic without the permission says nothing). nullopt while no answer has come.
std::optional<std::map<std::string, std::string>> TopicConfigsAnswer(rd_kafka_queue_t* queue,
                                                                     const std::string& name,
                                                                     int wait_ms);

}  // namespace driftd::kafka
