// The `webhook` sink (see webhook_sink.h for the delivery guarantees).
#include "connectors/webhook_sink.h"

#include <httplib.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "connectors/connector_factories.h"
#include "connectors/fs_util.h"
#include "engine/log.h"

namespace driftd {

namespace {

std::shared_ptr<spdlog::logger> Log() { return GetLogger("webhook"); }

// The parts of an http(s) URL that httplib wants apart: "scheme://host:port" and the path.
struct ParsedUrl {
  std::string origin;
  std::string path;
};

Result<ParsedUrl> ParseUrl(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    return MakeError(ErrorCode::kConfig, "webhook url '{}' has no scheme (http:// or https://)",
                     url);
  }
  std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return MakeError(ErrorCode::kConfig, "webhook url '{}': scheme must be http or https", url);
  }
  size_t host_begin = scheme_end + 3;
  size_t path_begin = url.find('/', host_begin);
  if (path_begin == host_begin || host_begin >= url.size()) {
    return MakeError(ErrorCode::kConfig, "webhook url '{}' has no host", url);
  }
  ParsedUrl parsed;
  parsed.origin = url.substr(0, path_begin);
  parsed.path = path_begin == std::string::npos ? "/" : url.substr(path_begin);
  return parsed;
}

// headers: {"Authorization": "Bearer ...", "X-Team": "ml"}; values must be strings.
Result<httplib::Headers> ParseHeaders(const std::string& json) {
  httplib::Headers headers;
  if (json.empty()) return headers;
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(json).get_object().get(object) != simdjson::SUCCESS) {
    return MakeError(ErrorCode::kConfig, "webhook option headers must be a JSON object of strings");
  }
  for (auto [key, value] : object) {
    std::string_view text;
    if (value.get_string().get(text) != simdjson::SUCCESS) {
      return MakeError(ErrorCode::kConfig, "webhook header '{}' must be a string", key);
    }
    headers.emplace(std::string(key), std::string(text));
  }
  return headers;
}

bool Retriable(int status) { return status == 429 || status >= 500; }

// Retry-After in whole seconds (the HTTP-date form is not worth parsing for a webhook).
std::optional<int64_t> RetryAfterMs(const httplib::Response& response) {
  std::string value = response.get_header_value("Retry-After");
  int64_t seconds = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || seconds < 0) {
    return std::nullopt;
  }
  return seconds * 1000;
}

struct WebhookOptions {
  std::string url;
  std::string method = "POST";
  int64_t timeout_ms = 10'000;
  int64_t max_attempts = 5;
  int64_t backoff_initial_ms = 200;
  int64_t backoff_max_ms = 5'000;
  std::string delivery_log;
};

class WebhookSink final : public Sink {
 public:
  WebhookSink(const PipelineSpec& pipeline, const SinkSpec& spec, WebhookOptions options,
              ParsedUrl url, httplib::Headers headers)
      : name_(spec.name),
        pipeline_(pipeline.name),
        stream_(spec.stream),
        mode_(spec.output_mode),
        options_(std::move(options)),
        url_(std::move(url)),
        headers_(std::move(headers)) {}

  const std::string& name() const override { return name_; }

  Status Open() override {
    std::filesystem::path log_path(options_.delivery_log);
    log_dir_ = log_path.parent_path().string();
    log_name_ = log_path.filename().string();
    if (log_dir_.empty()) log_dir_ = ".";
    DRIFTD_TRY(CreateDirectories(log_dir_));
    auto last = ReadWebhookDeliveryLog(options_.delivery_log);
    if (!last) return tl::unexpected(last.error());
    last_delivered_ = *last;

    client_ = std::make_unique<httplib::Client>(url_.origin);
    if (!client_->is_valid()) {
      return MakeError(ErrorCode::kConfig, "webhook url '{}' is not usable (https without TLS?)",
                       options_.url);
    }
    auto seconds = [](int64_t ms) { return std::make_pair(ms / 1000, (ms % 1000) * 1000); };
    auto [sec, usec] = seconds(options_.timeout_ms);
    client_->set_connection_timeout(sec, usec);
    client_->set_read_timeout(sec, usec);
    client_->set_write_timeout(sec, usec);
    client_->set_keep_alive(true);
    return Ok();
  }

  Result<bool> IsDelivered(int64_t batch_id) override {
    return last_delivered_.has_value() && *last_delivered_ >= batch_id;
  }

  Status Deliver(const BatchOutput& output) override {
    if (last_delivered_ && *last_delivered_ >= output.batch_id) return Ok();
    const OutputRows& rows = output.For(stream_, mode_);
    for (size_t i = 0; i < rows.rows.size(); ++i) {
      std::string key = WebhookIdempotencyKey(pipeline_, output.batch_id, i, rows.rows[i]);
      DRIFTD_TRY(Send(rows.rows[i], key, output.batch_id));
    }
    DRIFTD_TRY(WriteFileAtomically(log_dir_, log_name_, fmt::format("{}\n", output.batch_id)));
    last_delivered_ = output.batch_id;
    return Ok();
  }

  Status Close() override {
    if (client_) client_->stop();
    return Ok();
  }

 private:
  // One row, retried with exponential backoff on connection errors, 5xx and 429.
  Status Send(const std::string& body, const std::string& key, int64_t batch_id) {
    httplib::Headers headers = headers_;
    headers.emplace("Idempotency-Key", key);
    int64_t backoff_ms = options_.backoff_initial_ms;
    std::string last_failure;
    for (int64_t attempt = 1; attempt <= options_.max_attempts; ++attempt) {
      httplib::Result result = options_.method == "PUT"
                                   ? client_->Put(url_.path, headers, body, "application/json")
                                   : client_->Post(url_.path, headers, body, "application/json");
      int64_t wait_ms = backoff_ms;
      if (!result) {
        last_failure = fmt::format("{}", httplib::to_string(result.error()));
      } else if (result->status >= 200 && result->status < 300) {
        return Ok();
      } else if (!Retriable(result->status)) {
        return MakeError(ErrorCode::kConfig,
                         "webhook {} {} rejected batch {} (Idempotency-Key {}) with HTTP {}: {}; "
                         "4xx responses other than 429 are not retried (check url, headers and "
                         "the receiver)",
                         options_.method, options_.url, batch_id, key, result->status,
                         result->body.substr(0, 200));
      } else {
        last_failure = fmt::format("HTTP {}", result->status);
        if (auto retry_after = RetryAfterMs(*result)) {
          wait_ms = std::min(*retry_after, options_.backoff_max_ms);
        }
      }
      if (attempt == options_.max_attempts) break;
      Log()->warn("sink={} key={} attempt {}/{} failed: {}; retrying in {} ms", name_, key, attempt,
                  options_.max_attempts, last_failure, wait_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      backoff_ms = std::min(backoff_ms * 2, options_.backoff_max_ms);
    }
    // kExternal: the executor retries the batch; rows already accepted are re-sent with the
    // same keys, which the receiver de-duplicates.
    return MakeError(ErrorCode::kExternal, "webhook {} {} failed after {} attempts: {}",
                     options_.method, options_.url, options_.max_attempts, last_failure);
  }

  std::string name_;
  std::string pipeline_;
  StreamKind stream_;
  OutputMode mode_;
  WebhookOptions options_;
  ParsedUrl url_;
  httplib::Headers headers_;
  std::unique_ptr<httplib::Client> client_;
  std::string log_dir_;
  std::string log_name_;
  std::optional<int64_t> last_delivered_;
};

}  // namespace

std::string WebhookIdempotencyKey(std::string_view pipeline, int64_t batch_id, size_t row,
                                  std::string_view row_json) {
  simdjson::dom::parser parser;
  std::string_view alert_id;
  if (parser.parse(row_json.data(), row_json.size())
              .at_key("alert_id")
              .get_string()
              .get(alert_id) == simdjson::SUCCESS &&
      !alert_id.empty()) {
    return std::string(alert_id);
  }
  return fmt::format("{}-{}-{}", pipeline, batch_id, row);
}

Result<std::optional<int64_t>> ReadWebhookDeliveryLog(const std::string& path) {
  auto size = FileSizeOrMissing(path);
  if (!size) return tl::unexpected(size.error());
  if (*size < 0) return std::optional<int64_t>();
  auto text = ReadWholeFile(path);
  if (!text) return tl::unexpected(text.error());
  std::string_view view(*text);
  while (!view.empty() && (view.back() == '\n' || view.back() == ' ')) view.remove_suffix(1);
  int64_t batch = -1;
  auto [ptr, ec] = std::from_chars(view.data(), view.data() + view.size(), batch);
  if (view.empty() || ec != std::errc() || ptr != view.data() + view.size() || batch < 0) {
    return MakeError(ErrorCode::kCorruption,
                     "webhook delivery log {} should hold one batch id, found '{}'", path,
                     view.substr(0, 40));
  }
  return std::optional<int64_t>(batch);
}

std::string DefaultWebhookDeliveryLog(std::string_view checkpoint_location,
                                      std::string_view sink_name) {
  std::string safe(sink_name);
  for (char& c : safe) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return JoinPath(JoinPath(checkpoint_location, "sinks"),
                  fmt::format("webhook-{}.delivered", safe));
}

ConnectorDecl WebhookSinkDecl() {
  ConnectorDecl decl;
  decl.format = "webhook";
  decl.role = ConnectorRole::kSink;
  decl.doc =
      "HTTP(S) delivery, one request per row (the row's JSON object as the body, "
      "`Content-Type: application/json`), with an `Idempotency-Key` header: the row's "
      "`alert_id`, or `<pipeline>-<batch>-<row>` for rows without one. Connection errors, 5xx "
      "and 429 (honouring a `Retry-After` in seconds) are retried with exponential backoff; any "
      "other 4xx fails the batch and stops the pipeline. A local delivery log records the last "
      "fully delivered batch; after a crash in the middle of a batch its rows are sent again "
      "with the same keys, so a receiver that de-duplicates by the key sees each row once.";
  decl.options = {
      {"url", OptionType::kString, "", "`http://` or `https://` URL of the receiver.", true},
      {"method", OptionType::kEnum, "POST", "HTTP method.", false, {"POST", "PUT"}},
      {"timeoutMs", OptionType::kInt, "10000",
       "Connect, read and write timeout of one request, in milliseconds."},
      {"maxAttempts", OptionType::kInt, "5",
       "Attempts per row before the batch fails (the executor then retries the batch)."},
      {"backoffInitialMs", OptionType::kInt, "200",
       "Wait before the second attempt; doubles per attempt."},
      {"backoffMaxMs", OptionType::kInt, "5000", "Upper bound of the wait between attempts."},
      {"headers", OptionType::kJson, "",
       "Extra request headers as a JSON object of strings, e.g. "
       "`{\"Authorization\": \"Bearer ${TOKEN}\"}`."},
      {"deliveryLog", OptionType::kString, "",
       "File recording the last delivered batch. Default: "
       "`<checkpointLocation>/sinks/webhook-<sink>.delivered`."},
  };
  return decl;
}

Result<std::unique_ptr<Sink>> CreateWebhookSink(const PipelineSpec& pipeline,
                                                const SinkSpec& spec) {
  WebhookOptions options;
  options.url = spec.options.GetString("url");
  options.method = spec.options.GetString("method", "POST");
  options.timeout_ms = spec.options.GetInt("timeoutMs", options.timeout_ms);
  options.max_attempts = spec.options.GetInt("maxAttempts", options.max_attempts);
  options.backoff_initial_ms = spec.options.GetInt("backoffInitialMs", options.backoff_initial_ms);
  options.backoff_max_ms = spec.options.GetInt("backoffMaxMs", options.backoff_max_ms);
  options.delivery_log = spec.options.GetString("deliveryLog");
  if (options.delivery_log.empty()) {
    options.delivery_log = DefaultWebhookDeliveryLog(pipeline.checkpoint_location, spec.name);
  }
  if (options.timeout_ms <= 0 || options.max_attempts <= 0 || options.backoff_initial_ms < 0 ||
      options.backoff_max_ms < options.backoff_initial_ms) {
    return MakeError(ErrorCode::kConfig,
                     "webhook sink '{}': timeoutMs and maxAttempts must be positive and "
                     "backoffMaxMs at least backoffInitialMs",
                     spec.name);
  }
  auto url = ParseUrl(options.url);
  if (!url) return tl::unexpected(url.error());
  auto headers = ParseHeaders(spec.options.GetString("headers"));
  if (!headers) return tl::unexpected(headers.error());
  return std::make_unique<WebhookSink>(pipeline, spec, std::move(options), std::move(*url),
                                       std::move(*headers));
}

}  // namespace driftd
