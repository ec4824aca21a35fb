// Internal to config/: checked access to a yaml-cpp document. Every read names its YAML path,
// reports problems (unknown keys with did-you-mean, duplicates, wrong shape, wrong type) into a
// shared list instead of stopping, interpolates ${VAR} in scalar values, and remembers which
// values are secret so that no message prints them. No function here throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/loader.h"

namespace driftd::config_detail {

/// yaml-cpp's 0-based mark as a 1-based SourceMark ({0, 0} for the null mark).
SourceMark ToSourceMark(const YAML::Mark& mark);
SourceMark MarkOf(const YAML::Node& node);

/// Problems found so far; errors and warnings kept apart.
class Problems {
 public:
  void Error(std::string path, SourceMark mark, std::string message);
  void Warn(std::string path, SourceMark mark, std::string message);
  size_t error_count() const { return errors_.size(); }
  std::vector<ConfigProblem>& errors() { return errors_; }
  std::vector<ConfigProblem>& warnings() { return warnings_; }

 private:
  std::vector<ConfigProblem> errors_;
  std::vector<ConfigProblem> warnings_;
};

/// A scalar value after ${VAR} interpolation.
struct Scalar {
  std::string value;
  /// Never printed: the key looks secret or a secret environment variable went into it.
  bool secret = false;
  std::string path;
  SourceMark mark;
};

/// The value for messages: 'value' (shortened when long), or <redacted> for a secret.
std::string Show(const Scalar& scalar);

/// "a map", "a list", "nothing", or the scalar itself ('x', <redacted> when `secret`).
std::string Describe(const YAML::Node& node, bool secret);

/// The password of a URL with credentials ("https://user:password@host/..."), if any: it is
/// secret whatever the key or variable it came from.
std::optional<std::string_view> UrlPassword(std::string_view value);

/// Whether a value stored under `key` must never be printed.
bool IsSecretKey(std::string_view key);

/// Shared state of one load: where problems go and how ${VAR} resolves.
struct Reader {
  Problems& problems;
  const EnvLookup& env;
  /// Every secret value read so far. Messages are scrubbed of these at the end, as a backstop
  /// for a secret that reaches a message indirectly (e.g. a column name taken from a secret).
  std::vector<std::string> secrets = {};

  /// Reads a scalar and interpolates it; reports a problem for a map, a list or nothing.
  std::optional<Scalar> ReadScalar(const YAML::Node& node, const std::string& path, bool secret);

  /// Typed conversions of a scalar; each reports its own problem and returns nullopt on failure.
  std::optional<int64_t> ToInt(const Scalar& s, int64_t min, int64_t max);
  std::optional<double> ToDouble(const Scalar& s);
  std::optional<bool> ToBool(const Scalar& s);
  /// "30 seconds", "5m", "1h", or 0. Reports values below `min_ms`.
  std::optional<int64_t> ToDurationMs(const Scalar& s, int64_t min_ms);
  /// A byte count, or a number with a unit: B, KB, KiB, MB, MiB, GB, GiB.
  std::optional<int64_t> ToBytes(const Scalar& s, int64_t min);
  /// One of `choices` (exact spelling), with did-you-mean when it is not.
  std::optional<std::string> ToChoice(const Scalar& s,
                                      const std::vector<std::string_view>& choices);

  /// The elements of a list node; reports a problem (with `hint`) when it is not a list.
  /// A null node is an empty list.
  std::optional<std::vector<YAML::Node>> ReadList(const YAML::Node& node, const std::string& path,
                                                  std::string_view hint = "");
};

/// The entries of a map node, checked against the keys valid at that place.
class MapReader {
 public:
  struct Entry {
    std::string key;
    SourceMark key_mark;
    YAML::Node value;
  };

  /// Reports a problem when `node` is neither a map nor null (null reads as an empty map).
  /// `known`: the valid keys; any other key is reported with did-you-mean. nullopt accepts any
  /// key (option maps, checked elsewhere). `anchor` is where "missing key" problems point.
  MapReader(Reader& reader, const YAML::Node& node, std::string path, SourceMark anchor,
            std::optional<std::vector<std::string_view>> known, std::string_view hint = "");

  /// False when the node was not a map (a problem has been reported).
  bool valid() const { return valid_; }
  const std::string& path() const { return path_; }
  SourceMark anchor() const { return anchor_; }
  const std::vector<Entry>& entries() const { return entries_; }

  /// The entry for `key`, or nullptr when absent. A key with a null value counts as present.
  const Entry* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  std::string PathOf(std::string_view key) const;
  /// Where the value of `key` is (its key's mark when the value has none), or the anchor.
  SourceMark MarkOf(std::string_view key) const;

  /// Reports "'key' is required" (with `hint`) at the anchor, unless an unknown key here was
  /// already reported as a misspelling of it.
  void ReportMissing(std::string_view key, std::string_view hint = "") const;

  /// Typed reads of optional keys: nullopt when absent or invalid (a problem has been reported
  /// for invalid ones). Use `required` to report absence too.
  std::optional<Scalar> String(std::string_view key, bool required = false) const;
  std::optional<int64_t> Int(std::string_view key, int64_t min, int64_t max) const;
  std::optional<double> Double(std::string_view key) const;
  std::optional<bool> Bool(std::string_view key) const;
  std::optional<int64_t> DurationMs(std::string_view key, int64_t min_ms,
                                    bool required = false) const;
  std::optional<int64_t> Bytes(std::string_view key, int64_t min) const;
  std::optional<std::string> Choice(std::string_view key,
                                    const std::vector<std::string_view>& choices,
                                    bool required = false) const;
  /// A list of scalars (e.g. groupBy: [model_id]).
  std::optional<std::vector<Scalar>> StringList(std::string_view key,
                                                std::string_view hint = "") const;

 private:
  Reader& reader_;
  std::string path_;
  SourceMark anchor_;
  bool valid_ = true;
  std::vector<Entry> entries_;
  // Keys offered as did-you-mean for unknown keys: their absence is already explained.
  std::vector<std::string> suggested_;
};

}  // namespace driftd::config_detail
