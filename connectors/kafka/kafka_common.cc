#include "connectors/kafka/kafka_common.h"

#include <charconv>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "engine/log.h"

namespace driftd::kafka {

namespace {

// librdkafka calls this from its own threads; spdlog loggers are thread-safe.
void LogCallback(const rd_kafka_t* rk, int level, const char* facility, const char* message) {
  spdlog::level::level_enum spd_level = spdlog::level::debug;
  if (level <= 3) {
    spd_level = spdlog::level::err;
  } else if (level == 4) {
    spd_level = spdlog::level::warn;
  } else if (level <= 6) {
    spd_level = spdlog::level::info;
  }
  Log()->log(spd_level, "{} {}: {}", rd_kafka_name(rk), facility, message);
}

}  // namespace

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> logger = GetLogger("kafka");
  return logger;
}

std::string GroupId(const PipelineSpec& pipeline) {
  std::string configured = pipeline.source.options.GetString("kafka.group.id");
  return configured.empty() ? "driftd-" + pipeline.name : configured;
}

bool PatternSubscribes(const std::string& topic, const std::regex& pattern) {
  if (topic.starts_with("__") || !std::regex_match(topic, pattern)) return false;
  return !(topic.starts_with("driftd-") && topic.ends_with("-changelog"));
}

Result<Conf> MakeConf(const std::map<std::string, std::string>& settings) {
  Conf conf{rd_kafka_conf_new()};
  char error[512];
  for (const auto& [name, value] : settings) {
    if (rd_kafka_conf_set(conf.get(), name.c_str(), value.c_str(), error, sizeof error) !=
        RD_KAFKA_CONF_OK) {
      return MakeError(ErrorCode::kConfig, "kafka.{}: {}", name, error);
    }
  }
  rd_kafka_conf_set_log_cb(conf.get(), LogCallback);
  return conf;
}

std::optional<OptionProblem> CheckSettings(const std::map<std::string, std::string>& settings) {
  Conf conf{rd_kafka_conf_new()};
  char error[512];
  for (const auto& [name, value] : settings) {
    Conf alone{rd_kafka_conf_new()};
    if (rd_kafka_conf_set(alone.get(), name.c_str(), value.c_str(), error, sizeof error) !=
        RD_KAFKA_CONF_OK) {
      return OptionProblem{fmt::format("kafka.{}", name), error};
    }
    if (rd_kafka_conf_set(conf.get(), name.c_str(), value.c_str(), error, sizeof error) !=
        RD_KAFKA_CONF_OK) {
      return OptionProblem{"", fmt::format("kafka.{}: {}", name, error)};
    }
  }
  return std::nullopt;
}

Result<Handle> MakeClient(rd_kafka_type_t type, Conf conf) {
  char error[512];
  Handle rk{rd_kafka_new(type, conf.get(), error, sizeof error)};
  if (!rk) return MakeError(ErrorCode::kConfig, "creating the Kafka client: {}", error);
  (void)conf.release();  // rd_kafka_new took ownership
  return rk;
}

std::string PartitionKey(std::string_view topic, int32_t partition) {
  return fmt::format("{}-{}", topic, partition);
}

std::optional<std::pair<std::string, int32_t>> ParsePartitionKey(std::string_view key) {
  size_t dash = key.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == key.size()) return std::nullopt;
  int32_t partition = 0;
  const char* begin = key.data() + dash + 1;
  const char* end = key.data() + key.size();
  auto [ptr, ec] = std::from_chars(begin, end, partition);
  if (ec != std::errc() || ptr != end || partition < 0) return std::nullopt;
  return std::make_pair(std::string(key.substr(0, dash)), partition);
}

Result<MetadataPtr> FetchMetadata(rd_kafka_t* rk, const char* topic, int timeout_ms) {
  // A topic handle asks for that topic alone; librdkafka shares handles by name.
  rd_kafka_topic_t* rkt = topic ? rd_kafka_topic_new(rk, topic, nullptr) : nullptr;
  const rd_kafka_metadata_t* metadata = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, topic ? 0 : 1, rkt, &metadata, timeout_ms);
  if (rkt) rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "Kafka metadata request failed: {}",
                     rd_kafka_err2str(err));
  }
  return MetadataPtr{metadata};
}

Status CreateTopic(rd_kafka_t* rk, const std::string& topic, int partitions,
                   const std::map<std::string, std::string>& configs, int timeout_ms) {
  char error[512];
  rd_kafka_NewTopic_t* new_topic =
      rd_kafka_NewTopic_new(topic.c_str(), partitions, -1, error, sizeof error);
  if (!new_topic) return MakeError(ErrorCode::kConfig, "topic {}: {}", topic, error);
  for (const auto& [name, value] : configs) {
    rd_kafka_NewTopic_set_config(new_topic, name.c_str(), value.c_str());
  }
  QueuePtr queue{rd_kafka_queue_new(rk)};
  rd_kafka_AdminOptions_t* options = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
  rd_kafka_AdminOptions_set_operation_timeout(options, timeout_ms, error, sizeof error);
  rd_kafka_CreateTopics(rk, &new_topic, 1, options, queue.get());
  rd_kafka_AdminOptions_destroy(options);
  rd_kafka_NewTopic_destroy(new_topic);

  EventPtr event{rd_kafka_queue_poll(queue.get(), timeout_ms + 5000)};
  if (!event) return MakeError(ErrorCode::kExternal, "creating topic {} timed out", topic);
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return MakeError(ErrorCode::kExternal, "creating topic {}: {}", topic,
                     rd_kafka_event_error_string(event.get()));
  }
  const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event.get());
  size_t count = 0;
  const rd_kafka_topic_result_t** results = rd_kafka_CreateTopics_result_topics(result, &count);
  for (size_t i = 0; i < count; ++i) {
    rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
      return MakeError(ErrorCode::kExternal, "creating topic {}: {}", topic,
                       rd_kafka_topic_result_error_string(results[i]));
    }
  }
  // The controller answers before the new partitions have leaders.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto metadata = FetchMetadata(rk, topic.c_str(), timeout_ms);
    if (metadata && (*metadata)->topic_cnt == 1) {
      const rd_kafka_metadata_topic_t& listed = (*metadata)->topics[0];
      bool led = listed.err == RD_KAFKA_RESP_ERR_NO_ERROR && listed.partition_cnt > 0;
      for (int p = 0; led && p < listed.partition_cnt; ++p) led = listed.partitions[p].leader >= 0;
      if (led) return Ok();
    }
    if (std::chrono::steady_clock::now() >= deadline) return Ok();  // producers find it later
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

QueuePtr AskTopicConfigs(rd_kafka_t* rk, const std::vector<std::string>& topics,
                         int timeout_ms) {
  char error[512];
  QueuePtr queue{rd_kafka_queue_new(rk)};
  std::vector<rd_kafka_ConfigResource_t*> resources;
  for (const std::string& topic : topics) {
    resources.push_back(rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str()));
  }
  rd_kafka_AdminOptions_t* options = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
  rd_kafka_AdminOptions_set_request_timeout(options, timeout_ms, error, sizeof error);
  rd_kafka_DescribeConfigs(rk, resources.data(), resources.size(), options, queue.get());
  rd_kafka_AdminOptions_destroy(options);
  for (rd_kafka_ConfigResource_t* resource : resources) rd_kafka_ConfigResource_destroy(resource);
  return queue;
}

std::optional<std::map<std::string, std::string>> TopicConfigsAnswer(rd_kafka_queue_t* queue,
                                                                     const std::string& name,
                                                                     int wait_ms) {
  EventPtr event{rd_kafka_queue_poll(queue, wait_ms)};
  if (!event) return std::nullopt;
  std::map<std::string, std::string> values;
  const rd_kafka_DescribeConfigs_result_t* result =
      rd_kafka_event_DescribeConfigs_result(event.get());
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR || result == nullptr) {
    return values;
  }
  size_t count = 0;
  const rd_kafka_ConfigResource_t** described =
      rd_kafka_DescribeConfigs_result_resources(result, &count);
  for (size_t i = 0; i < count; ++i) {
    if (rd_kafka_ConfigResource_error(described[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    size_t entries = 0;
    const rd_kafka_ConfigEntry_t** configs =
        rd_kafka_ConfigResource_configs(described[i], &entries);
    for (size_t e = 0; e < entries; ++e) {
      const char* value = rd_kafka_ConfigEntry_value(configs[e]);
      if (name == rd_kafka_ConfigEntry_name(configs[e]) && value != nullptr) {
        values[rd_kafka_ConfigResource_name(described[i])] = value;
      }
    }
  }
  return values;
}

std::string Describe(const rd_kafka_error_t* error) {
  return fmt::format("{} ({})", rd_kafka_error_string(error), rd_kafka_error_name(error));
}

}  // namespace driftd::kafka
