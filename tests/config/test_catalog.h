// A small connector catalog for config tests, shaped like the real connectors' declarations
// (Spark's option names), so that option validation is tested independently of connectors/.
#pragma once

#include "engine/options.h"

namespace driftd::testing {

// A declaration with its format, role, doc and passthrough prefix; the rest is set after.
inline ConnectorDecl Decl(std::string format, ConnectorRole role, std::string doc,
                          std::string passthrough_prefix) {
  ConnectorDecl decl;
  decl.format = std::move(format);
  decl.role = role;
  decl.doc = std::move(doc);
  decl.passthrough_prefix = std::move(passthrough_prefix);
  return decl;
}

inline const ConnectorCatalog& TestCatalog() {
  static const ConnectorCatalog catalog = [] {
    ConnectorCatalog c;
    ConnectorDecl kafka_source = Decl("kafka", ConnectorRole::kSource, "Kafka topics", "kafka.");
    kafka_source.options = {
        {"kafka.bootstrap.servers", OptionType::kString, "", "broker list", true},
        OptionDecl{"subscribe", OptionType::kString, "", "topics, comma-separated"}.Identity(),
        OptionDecl{"subscribePattern", OptionType::kString, "", "topic regex"}.Identity(),
        {"startingOffsets", OptionType::kJson, "latest", "earliest, latest or JSON"},
        {"failOnDataLoss", OptionType::kBool, "true", "stop when offsets vanish"},
        OptionDecl{"maxOffsetsPerTrigger", OptionType::kInt, "", "records per batch"}.AtLeast(1),
        {"pollTimeout", OptionType::kDuration, "1 second", "poll timeout"},
    };
    kafka_source.traits = {.topic_partitions = true,
                           .unordered_partitions = true,
                           .whole_messages = true,
                           .group_shared = true};
    c.push_back(kafka_source);
    ConnectorDecl file_source = Decl("file", ConnectorRole::kSource, "JSON-lines files", "");
    file_source.options = {
        OptionDecl{"path", OptionType::kString, "", "input directory", true, {},
                   PathUse::kReadsDirectory}
            .Identity(),
        {"maxFilesPerTrigger", OptionType::kInt, "1000", "files per batch"},
        {"latestFirst", OptionType::kBool, "false", "newest files first"},
    };
    c.push_back(file_source);
    ConnectorDecl rate_source = Decl("rate", ConnectorRole::kSource, "synthetic rows", "");
    rate_source.options = {
        {"rowsPerSecond", OptionType::kInt, "1", "rows per second"},
        {"mode", OptionType::kEnum, "rows", "rows or inference logs", false, {"rows", "inference"}},
        {"driftAfter", OptionType::kDuration, "", "inject drift after"},
        {"driftMagnitude", OptionType::kDouble, "0.5", "size of injected drift"},
    };
    c.push_back(rate_source);
    ConnectorDecl kafka_sink = Decl("kafka", ConnectorRole::kSink, "Kafka topic", "kafka.");
    kafka_sink.shared_by_processes = true;
    kafka_sink.options = {
        {"kafka.bootstrap.servers", OptionType::kString, "", "broker list", true},
        {"topic", OptionType::kString, "", "output topic", true},
        {"keyColumn", OptionType::kString, "", "message key column"},
    };
    c.push_back(kafka_sink);
    ConnectorDecl file_sink = Decl("file", ConnectorRole::kSink, "JSON-lines files", "");
    file_sink.options = {
        {"path", OptionType::kString, "", "output directory", true, {}, PathUse::kWritesDirectory}};
    c.push_back(file_sink);
    ConnectorDecl console_sink = Decl("console", ConnectorRole::kSink, "stdout tables", "");
    console_sink.shared_by_processes = true;
    console_sink.options = {
        {"numRows", OptionType::kInt, "20", "rows shown per batch"},
        {"truncate", OptionType::kBool, "true", "shorten long cells"},
    };
    c.push_back(console_sink);
    // Secret-named options of every type, for the redaction tests.
    ConnectorDecl webhook_sink = Decl("webhook", ConnectorRole::kSink, "HTTP POST", "");
    webhook_sink.options = {
        {"url", OptionType::kString, "", "endpoint", true},
        {"token", OptionType::kString, "", "bearer token"},
        {"passwordMinLength", OptionType::kInt, "", "test-only int secret"},
        {"secretRotation", OptionType::kDuration, "", "test-only duration secret"},
        {"apiKeyScheme",
         OptionType::kEnum,
         "",
         "test-only enum secret",
         false,
         {"bearer", "basic"}},
        {"credentialsJson", OptionType::kJson, "", "test-only json secret"},
        {"tokenWeight", OptionType::kDouble, "", "test-only double secret"},
        {"secretEnabled", OptionType::kBool, "", "test-only bool secret"},
    };
    c.push_back(webhook_sink);
    return c;
  }();
  return catalog;
}

}  // namespace driftd::testing
