// Helpers for the service tests: a NOTIFY_SOCKET listener (what systemd would see), a minimal
// HTTP GET, a Prometheus text-format parser, free ports, and pipeline files for the rate and
// socket sources.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"

namespace driftd::testing {

/// WriteFile that first creates the parent directories.
inline void WriteFileAt(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::create_directories(path.parent_path());
  WriteFile(path, content);
}

/// A unix datagram socket standing in for systemd's notification socket.
class NotifyListener {
 public:
  explicit NotifyListener(std::string path);
  ~NotifyListener();
  NotifyListener(const NotifyListener&) = delete;
  NotifyListener& operator=(const NotifyListener&) = delete;

  const std::string& path() const { return path_; }

  struct Message {
    std::string text;  // e.g. "READY=1", "STATUS=...", "WATCHDOG=1"
    std::chrono::steady_clock::time_point at;
  };
  /// Receives one message, or nullopt after `timeout`.
  std::optional<Message> Receive(std::chrono::milliseconds timeout);
  /// Receives until a message for which `prefix` is a prefix arrives (returned), keeping every
  /// message seen on the way in `seen`; nullopt after `timeout`.
  std::optional<Message> WaitFor(std::string_view prefix, std::chrono::milliseconds timeout,
                                 std::vector<Message>* seen = nullptr);

 private:
  std::string path_;
  int fd_ = -1;
};

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
  std::map<std::string, std::string> headers;  // names in lower case
};
/// GET http://127.0.0.1:port/path with HTTP/1.0 (the server closes after the reply).
HttpReply HttpGet(int port, const std::string& path);
/// Sends `request` (the whole request, as bytes) to 127.0.0.1:port and reads the answer until
/// the server closes the connection (send `Connection: close` with HTTP/1.1).
HttpReply HttpSend(int port, const std::string& request);
/// Parses "HTTP/1.1 200 OK\r\nName: value\r\n\r\nbody" (status 0 when it is not that).
HttpReply ParseHttpReply(const std::string& response);

/// A TCP port that was free a moment ago on 127.0.0.1.
int FreePort();

/// The port driftd logged ("http: listening on 127.0.0.1:PORT"), once it is in `log_path`.
std::optional<int> WaitForHttpPort(const std::string& log_path,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// One sample of a Prometheus text exposition.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family -> counter, gauge, histogram, ...
  std::map<std::string, std::string> help;
  /// Lines that are not valid exposition format, with why.
  std::vector<std::string> errors;

  /// The value of `name` with exactly these labels, if present.
  std::optional<double> Value(const std::string& name,
                              const std::map<std::string, std::string>& labels) const;
};
/// Parses the text format (version 0.0.4) strictly: every line a comment (# HELP / # TYPE /
/// other), blank, or `name{label="value",...} value [timestamp]`.
Exposition ParsePrometheus(const std::string& text);

/// A rate-source pipeline (inference generator, drift on prediction) writing stats to a file
/// sink in `dir`. `extra` is appended to the YAML (e.g. more options).
std::string RatePipelineYaml(const std::string& name, const std::string& dir,
                             const std::string& trigger = "{processingTime: 200 milliseconds}",
                             const std::string& aggregates = "[count, mean(prediction)]");

// ---- implementations (header-only: the test folder builds only *_test.cc files) ----

inline NotifyListener::NotifyListener(std::string path) : path_(std::move(path)) {
  unlink(path_.c_str());
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("socket: " + std::string(strerror(errno)));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(address.sun_path)) throw std::runtime_error("socket path too long");
  std::memcpy(address.sun_path, path_.data(), path_.size());
  if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    throw std::runtime_error("bind " + path_ + ": " + strerror(errno));
  }
}

inline NotifyListener::~NotifyListener() {
  if (fd_ >= 0) close(fd_);
  unlink(path_.c_str());
}

inline std::optional<NotifyListener::Message> NotifyListener::Receive(
    std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  char buffer[4096];
  ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
  if (n < 0) return std::nullopt;
  return Message{std::string(buffer, static_cast<size_t>(n)), std::chrono::steady_clock::now()};
}

inline std::optional<NotifyListener::Message> NotifyListener::WaitFor(
    std::string_view prefix, std::chrono::milliseconds timeout, std::vector<Message>* seen) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto message = Receive(left);
    if (!message) return std::nullopt;
    if (seen) seen->push_back(*message);
    if (message->text.rfind(prefix, 0) == 0) return message;
  }
}

inline HttpReply HttpGet(int port, const std::string& path) {
  return HttpSend(port, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
}

inline HttpReply HttpSend(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return {};
  }
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return {};
  }
  std::string response;
  char buffer[8192];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof buffer, 0)) > 0) response.append(buffer, n);
  close(fd);
  return ParseHttpReply(response);
}

inline HttpReply ParseHttpReply(const std::string& response) {
  HttpReply reply;
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return reply;
  reply.status = std::atoi(response.c_str() + 9);
  size_t body = response.find("\r\n\r\n");
  size_t line = response.find("\r\n");
  while (line != std::string::npos && line < body) {
    size_t next = response.find("\r\n", line + 2);
    std::string header = response.substr(line + 2, next - line - 2);
    size_t colon = header.find(':');
    if (colon != std::string::npos) {
      std::string name = header.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t value = header.find_first_not_of(' ', colon + 1);
      reply.headers[name] = value == std::string::npos ? "" : header.substr(value);
    }
    line = next;
  }
  if (body != std::string::npos) reply.body = response.substr(body + 4);
  return reply;
}

inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  int port = ntohs(address.sin_port);
  close(fd);
  return port;
}

inline std::optional<int> WaitForHttpPort(const std::string& log_path,
                                          std::chrono::milliseconds timeout) {
  static const std::regex pattern(R"(http: listening on 127\.0\.0\.1:(\d+))");
  std::optional<int> port;
  WaitFor(
      [&] {
        std::smatch match;
        std::string log = ReadFile(log_path);
        if (!std::regex_search(log, match, pattern)) return false;
        port = std::stoi(match[1].str());
        return true;
      },
      timeout);
  return port;
}

inline std::optional<double> Exposition::Value(
    const std::string& name, const std::map<std::string, std::string>& labels) const {
  for (const Sample& sample : samples) {
    if (sample.name == name && sample.labels == labels) return sample.value;
  }
  return std::nullopt;
}

inline Exposition ParsePrometheus(const std::string& text) {
  static const std::regex metric_name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex label_name("[a-zA-Z_][a-zA-Z0-9_]*");
  Exposition out;
  std::vector<std::string> lines = SplitLines(text);
  if (!text.empty() && text.back() != '\n') out.errors.push_back("no newline at the end");
  for (const std::string& line : lines) {
    auto fail = [&](const std::string& why) { out.errors.push_back(why + ": " + line); };
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        std::string rest = line.substr(7);
        size_t space = rest.find(' ');
        std::string name = rest.substr(0, space);
        if (!std::regex_match(name, metric_name)) {
          fail("bad metric name in comment");
          continue;
        }
        std::string value = space == std::string::npos ? "" : rest.substr(space + 1);
        if (line[2] == 'H') {
          if (out.help.count(name)) fail("second HELP");
          out.help[name] = value;
        } else {
          static const std::regex types("counter|gauge|histogram|summary|untyped");
          if (!std::regex_match(value, types)) fail("unknown type");
          if (out.types.count(name)) fail("second TYPE");
          for (const Sample& sample : out.samples) {
            if (sample.name == name) fail("TYPE after a sample of its family");
          }
          out.types[name] = value;
        }
      }
      continue;
    }
    Sample sample;
    size_t at = 0;
    while (at < line.size() && line[at] != '{' && line[at] != ' ') ++at;
    sample.name = line.substr(0, at);
    if (!std::regex_match(sample.name, metric_name)) {
      fail("bad metric name");
      continue;
    }
    bool ok = true;
    if (at < line.size() && line[at] == '{') {
      ++at;
      while (ok && at < line.size() && line[at] != '}') {
        size_t equals = line.find('=', at);
        if (equals == std::string::npos) {
          ok = false;
          break;
        }
        std::string key = line.substr(at, equals - at);
        if (!std::regex_match(key, label_name) || equals + 1 >= line.size() ||
            line[equals + 1] != '"') {
          ok = false;
          break;
        }
        std::string value;
        size_t i = equals + 2;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            if (i + 1 >= line.size()) {
              ok = false;
              break;
            }
            char escaped = line[++i];
            if (escaped == 'n') {
              value.push_back('\n');
            } else if (escaped == '\\' || escaped == '"') {
              value.push_back(escaped);
            } else {
              ok = false;
              break;
            }
          } else {
            value.push_back(line[i]);
          }
        }
        if (!ok || i >= line.size()) {
          ok = false;
          break;
        }
        if (sample.labels.count(key)) ok = false;
        sample.labels[key] = value;
        at = i + 1;
        if (at < line.size() && line[at] == ',') ++at;
      }
      if (!ok || at >= line.size() || line[at] != '}') {
        fail("bad labels");
        continue;
      }
      ++at;
    }
    if (at >= line.size() || line[at] != ' ') {
      fail("no value");
      continue;
    }
    std::string rest = line.substr(at + 1);
    size_t space = rest.find(' ');
    std::string value = rest.substr(0, space);
    if (space != std::string::npos) {
      static const std::regex timestamp("-?[0-9]+");
      if (!std::regex_match(rest.substr(space + 1), timestamp)) {
        fail("bad timestamp");
        continue;
      }
    }
    if (value == "NaN") {
      sample.value = std::nan("");
    } else if (value == "+Inf") {
      sample.value = INFINITY;
    } else if (value == "-Inf") {
      sample.value = -INFINITY;
    } else {
      static const std::regex number(R"([-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?)");
      if (!std::regex_match(value, number)) {
        fail("bad value");
        continue;
      }
      sample.value = std::strtod(value.c_str(), nullptr);
    }
    // Every sample belongs to a family declared by a TYPE line before it.
    std::string family = sample.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s(suffix);
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          out.types.count(family.substr(0, family.size() - s.size())) &&
          out.types[family.substr(0, family.size() - s.size())] == "histogram") {
        family = family.substr(0, family.size() - s.size());
      }
    }
    if (!out.types.count(family)) fail("sample without a TYPE for its family");
    out.samples.push_back(std::move(sample));
  }
  return out;
}

inline std::string RatePipelineYaml(const std::string& name, const std::string& dir,
                                    const std::string& trigger, const std::string& aggregates) {
  return "name: " + name + R"(
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
  - {name: ground_truth, type: double}
source:
  format: rate
  options: {mode: inference, rowsPerSecond: 2000, models: 2, features: 2, seed: 3}
query:
  groupBy: [model_id]
  aggregates: )" +
         aggregates + R"(
drift:
  series: [prediction]
  baseline: {type: warmup, records: 500}
  detectors:
    - {type: psi, warn: 5, alert: 5.5, bins: 10}
sinks:
  - {name: stats, format: file, stream: stats, outputMode: update, options: {path: )" +
         dir + "/out-" + name + R"(}}
  - {name: alerts, format: file, stream: alerts, options: {path: )" +
         dir + "/alerts-" + name +
         R"(}}
trigger: )" +
         trigger + R"(
checkpointLocation: )" +
         dir + "/checkpoint-" + name + "\n";
}

}  // namespace driftd::testing
