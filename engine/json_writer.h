// A small append-only JSON writer for output rows, progress records and alerts. It writes into
// a caller-owned std::string so a batch's rows reuse one buffer.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace driftd {

/// Appends `s` as a JSON string literal (quoted, escaped). Bytes that are not valid UTF-8 are
/// replaced by U+FFFD so the output is always valid JSON.
void AppendJsonString(std::string& out, std::string_view s);

/// Appends `bytes` in base64 (RFC 4648, with padding), unquoted.
void AppendBase64(std::string& out, std::string_view bytes);

/// Whether `bytes` are valid UTF-8 (so AppendJsonString keeps them exactly).
bool IsValidUtf8(std::string_view bytes);

/// Appends a double in shortest round-trip form; NaN and infinities become null.
inline void AppendJsonNumber(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), "{}", value);
}

inline void AppendJsonNumber(std::string& out, int64_t value) {
  fmt::format_to(std::back_inserter(out), "{}", value);
}

/// Formats microseconds since the epoch as RFC 3339 UTC with milliseconds:
/// 2026-11-29T10:15:02.123Z.
std::string FormatTimestampUs(int64_t micros);
void AppendTimestampUs(std::string& out, int64_t micros);

/// `key` as a JSON string, quotes included (what JsonObject::WrittenKey takes).
inline std::string JsonKey(std::string_view key) {
  std::string out;
  AppendJsonString(out, key);
  return out;
}

/// Builds one JSON object: JsonObject obj(out); obj.Key("a").Number(1); ... obj.Close();
class JsonObject {
 public:
  explicit JsonObject(std::string& out) : out_(out) { out_.push_back('{'); }

  JsonObject& Key(std::string_view key) {
    Separate();
    AppendJsonString(out_, key);
    out_.push_back(':');
    return *this;
  }
  /// A key already written as a JSON string, quotes included (JsonKey), for keys written
  /// again and again; the value follows with Append* on the output.
  JsonObject& WrittenKey(std::string_view json_key) {
    Separate();
    out_ += json_key;
    out_.push_back(':');
    return *this;
  }
  JsonObject& String(std::string_view key, std::string_view value) {
    Key(key);
    AppendJsonString(out_, value);
    return *this;
  }
  JsonObject& Number(std::string_view key, double value) {
    Key(key);
    AppendJsonNumber(out_, value);
    return *this;
  }
  JsonObject& Int(std::string_view key, int64_t value) {
    Key(key);
    AppendJsonNumber(out_, value);
    return *this;
  }
  JsonObject& Bool(std::string_view key, bool value) {
    Key(key);
    out_ += value ? "true" : "false";
    return *this;
  }
  JsonObject& Null(std::string_view key) {
    Key(key);
    out_ += "null";
    return *this;
  }
  JsonObject& Timestamp(std::string_view key, int64_t micros) {
    Key(key);
    out_.push_back('"');
    AppendTimestampUs(out_, micros);
    out_.push_back('"');
    return *this;
  }
  /// A timestamp, or null where there is none (INT64_MIN).
  JsonObject& TimestampOrNull(std::string_view key, int64_t micros) {
    return micros == INT64_MIN ? Null(key) : Timestamp(key, micros);
  }
  /// Inserts pre-rendered JSON (an object, array or literal) as the value of `key`.
  JsonObject& Raw(std::string_view key, std::string_view json) {
    Key(key);
    out_ += json;
    return *this;
  }
  void Close() { out_.push_back('}'); }

 private:
  void Separate() {
    if (!first_) out_.push_back(',');
    first_ = false;
  }

  std::string& out_;
  bool first_ = true;
};

}  // namespace driftd
