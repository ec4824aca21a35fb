// Declarations of the options a connector accepts. Each connector publishes a ConnectorDecl;
// config/ validates pipeline files against them (unknown or mistyped options are errors), and
// the reference documentation is generated from them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace driftd {

enum class OptionType {
  kString,
  kInt,       // a whole number, e.g. 100000
  kDouble,
  kBool,      // true / false
  kDuration,  // "30 seconds", "30s", "5 minutes", "1h", "250ms"
  kEnum,      // one of OptionDecl::choices
  kJson,      // a JSON document, e.g. per-partition startingOffsets
};

std::string_view OptionTypeName(OptionType type);

/// What a path option names, for the rules between connectors' paths (a sink must not write
/// where a source reads, nor where another sink writes).
enum class PathUse {
  kNone,
  kReadsDirectory,   // a source reads the files of this directory
  kWritesDirectory,  // a sink writes files into this directory
};

struct OptionDecl {
  std::string name;
  OptionType type = OptionType::kString;
  /// Textual default; empty with required == false means "unset".
  std::string default_value;
  std::string doc;
  bool required = false;
  /// Allowed values for kEnum.
  std::vector<std::string> choices = {};
  /// Default: kNone (not a path, or a path no rule is about).
  PathUse path_use = PathUse::kNone;
};

enum class ConnectorRole { kSource, kSink };

struct ConnectorDecl {
  std::string format;  // "kafka", "file", "rate", "socket", "console", ...
  ConnectorRole role = ConnectorRole::kSource;
  std::string doc;
  std::vector<OptionDecl> options;
  /// Options starting with this prefix pass through unchecked (e.g. "kafka." to librdkafka).
  std::string passthrough_prefix;
  /// A sink that writes each row as one message whose bytes a value format makes (kafka): it
  /// accepts `valueFormat` and `valueOptions` (engine/value_encoder.h). Default: false (rows
  /// are written as JSON).
  bool value_formats = false;

  const OptionDecl* Find(std::string_view name) const {
    for (const auto& option : options) {
      if (option.name == name) return &option;
    }
    return nullptr;
  }
};

/// The connectors a build knows of; filled by connectors/, consumed by config/.
using ConnectorCatalog = std::vector<ConnectorDecl>;

/// Parses "30 seconds", "30s", "5 minutes", "1h", "250ms", "2 days" into milliseconds.
Result<int64_t> ParseDurationMs(std::string_view text);

/// Validated connector options: every declared option with a value (explicit or default),
/// plus passthrough options. Typed getters assume validation already happened.
class Options {
 public:
  Options() = default;
  explicit Options(std::map<std::string, std::string> values) : values_(std::move(values)) {}

  bool Has(std::string_view name) const { return values_.find(std::string(name)) != values_.end(); }
  std::string GetString(std::string_view name, std::string_view fallback = "") const;
  int64_t GetInt(std::string_view name, int64_t fallback = 0) const;
  double GetDouble(std::string_view name, double fallback = 0) const;
  bool GetBool(std::string_view name, bool fallback = false) const;
  int64_t GetDurationMs(std::string_view name, int64_t fallback = 0) const;
  /// Options whose names start with `prefix`, with the prefix removed (e.g. "kafka.").
  std::map<std::string, std::string> WithPrefix(std::string_view prefix) const;

  const std::map<std::string, std::string>& values() const { return values_; }
  void Set(std::string name, std::string value) { values_[std::move(name)] = std::move(value); }

 private:
  std::map<std::string, std::string> values_;
};

/// True for option names whose values must never be printed (password, secret, key, token...).
bool IsSecretOptionName(std::string_view name);

}  // namespace driftd
