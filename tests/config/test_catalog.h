// A small connector catalog for config tests, shaped like the real connectors' declarations
// (Spark's option names), so that option validation is tested independently of connectors/.
#pragma once

#include "engine/options.h"

namespace driftd::testing {

inline const ConnectorCatalog& TestCatalog() {
  static const ConnectorCatalog catalog = [] {
    ConnectorCatalog c;
    ConnectorDecl kafka_source{"kafka", ConnectorRole::kSource, "Kafka topics", {}, "kafka."};
    kafka_source.options = {
        {"kafka.bootstrap.servers", OptionType::kString, "", "broker list", true},
        {"subscribe", OptionType::kString, "", "topics, comma-separated"},
        {"subscribePattern", OptionType::kString, "", "topic regex"},
        {"startingOffsets", OptionType::kJson, "latest", "earliest, latest or JSON"},
        {"failOnDataLoss", OptionType::kBool, "true", "stop when offsets vanish"},
        {"maxOffsetsPerTrigger", OptionType::kInt, "", "records per batch"},
        {"pollTimeout", OptionType::kDuration, "1 second", "poll timeout"},
    };
    c.push_back(kafka_source);
    ConnectorDecl file_source{"file", ConnectorRole::kSource, "JSON-lines files", {}, ""};
    file_source.options = {
        {"path", OptionType::kString, "", "input directory", true, {}, PathUse::kReadsDirectory},
        {"maxFilesPerTrigger", OptionType::kInt, "1000", "files per batch"},
        {"latestFirst", OptionType::kBool, "false", "newest files first"},
    };
    c.push_back(file_source);
    ConnectorDecl rate_source{"rate", ConnectorRole::kSource, "synthetic rows", {}, ""};
    rate_source.options = {
        {"rowsPerSecond", OptionType::kInt, "1", "rows per second"},
        {"mode", OptionType::kEnum, "rows", "rows or inference logs", false, {"rows", "inference"}},
        {"driftAfter", OptionType::kDuration, "", "inject drift after"},
        {"driftMagnitude", OptionType::kDouble, "0.5", "size of injected drift"},
    };
    c.push_back(rate_source);
    ConnectorDecl kafka_sink{"kafka", ConnectorRole::kSink, "Kafka topic", {}, "kafka."};
    kafka_sink.options = {
        {"kafka.bootstrap.servers", OptionType::kString, "", "broker list", true},
        {"topic", OptionType::kString, "", "output topic", true},
        {"keyColumn", OptionType::kString, "", "message key column"},
    };
    c.push_back(kafka_sink);
    ConnectorDecl file_sink{"file", ConnectorRole::kSink, "JSON-lines files", {}, ""};
    file_sink.options = {
        {"path", OptionType::kString, "", "output directory", true, {}, PathUse::kWritesDirectory}};
    c.push_back(file_sink);
    ConnectorDecl console_sink{"console", ConnectorRole::kSink, "stdout tables", {}, ""};
    console_sink.options = {
        {"numRows", OptionType::kInt, "20", "rows shown per batch"},
        {"truncate", OptionType::kBool, "true", "shorten long cells"},
    };
    c.push_back(console_sink);
    // Secret-named options of every type, for the redaction tests.
    ConnectorDecl webhook_sink{"webhook", ConnectorRole::kSink, "HTTP POST", {}, ""};
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
