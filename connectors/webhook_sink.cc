// The `webhook` sink (see webhook_sink.h for the delivery guarantees).
#include "connectors/webhook_sink.h"

#include <httplib.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "connectors/alert_text.h"
#include "connectors/alertmanager_alerts.h"
#include "connectors/connector_factories.h"
#include "connectors/fs_util.h"
#include "engine/json_writer.h"
#include "engine/log.h"
#include "engine/redact.h"
#include "engine/wall_clock.h"

namespace driftd {

namespace {

std::shared_ptr<spdlog::logger> Log() { return GetLogger("webhook"); }

// The parts of an http(s) URL that httplib wants apart: "scheme://host:port", the path, and
// the credentials of "scheme://user:password@host" (percent-decoded), which httplib sends as
// basic auth; left in the origin, they made httplib fail every request ("Connection").
struct ParsedUrl {
  std::string origin;
  std::string path;
  std::optional<std::pair<std::string, std::string>> credentials;
};

std::string PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

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
  std::string authority = url.substr(host_begin, path_begin == std::string::npos
                                                     ? std::string::npos
                                                     : path_begin - host_begin);
  if (const size_t at = authority.rfind('@'); at != std::string::npos) {
    const std::string userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const size_t colon = userinfo.find(':');
    parsed.credentials.emplace(PercentDecode(userinfo.substr(0, colon)),
                               colon == std::string::npos
                                   ? std::string()
                                   : PercentDecode(userinfo.substr(colon + 1)));
    if (authority.empty()) {
      return MakeError(ErrorCode::kConfig, "webhook url '{}' has no host after its credentials",
                       url);
    }
  }
  parsed.origin = scheme + "://" + authority;
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

enum class FailurePolicy { kRetry, kDeadLetter, kDrop };
enum class Template { kDriftd, kSlack, kPagerDuty, kAlertmanager };

// The sink's options as BindWebhookSink made them (their defaults are declared in
// WebhookSinkDecl only).
struct WebhookOptions {
  std::string url;
  /// The url's parts as httplib wants them.
  ParsedUrl target;
  httplib::Headers headers;
  std::string method;
  int64_t timeout_ms = 0;
  int64_t max_attempts = 0;
  int64_t backoff_initial_ms = 0;
  int64_t backoff_max_ms = 0;
  /// Time one batch's delivery may spend retrying before the failure policy applies; with
  /// timeoutMs it bounds Deliver (20 s + 5 s by default, inside systemd's WatchdogSec=30s).
  int64_t retry_budget_ms = 0;
  FailurePolicy on_failure = FailurePolicy::kDeadLetter;
  std::string delivery_log;
  std::string dead_letter_path;
  Template body_template = Template::kDriftd;
  std::string routing_key;
  std::string dashboard_url;
  /// Template alertmanager: seconds between re-sends of the firing alerts, and from a send to
  /// the endsAt of the alerts it carries (options alertmanagerResendInterval and
  /// alertmanagerEndsAfter).
  int64_t alertmanager_resend_s = 0;
  int64_t alertmanager_ends_after_s = 0;
};

// ---- body templates ------------------------------------------------------------------------

std::string Str(simdjson::dom::element row, const char* key) {
  std::string_view v;
  return row[key].get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}

// The alert's line (connectors/alert_text.h) and the pipeline it comes from.
std::string Summary(const std::string& row_json, const std::string& pipeline) {
  return fmt::format("{} [pipeline {}]", AlertLine(row_json), pipeline);
}

bool Firing(const std::string& level) { return level == "ALERT" || level == "WARN"; }

// Slack incoming webhooks: `text` (shown in notifications) plus one mrkdwn section.
std::string SlackBody(simdjson::dom::element row, const std::string& row_json,
                      const std::string& pipeline, const WebhookOptions& options) {
  const std::string level = Str(row, "level");
  const char* icon = level == "ALERT" ? ":rotating_light:" : level == "WARN" ? ":warning:"
                                                                               : ":white_check_mark:";
  const std::string summary = Summary(row_json, pipeline);
  // The line says what is past its threshold, or for RESOLVED and OK the evidence that the
  // series is back (a cumulative statistic still high then would read as drift).
  std::string detail = fmt::format("{} *{}* `{}` / `{}`\n{}\nalert {} (incident {})", icon, level,
                                   Str(row, "model"), Str(row, "series"), AlertLine(row_json),
                                   Str(row, "alert_id"), Str(row, "incident_id"));
  if (!options.dashboard_url.empty()) {
    detail += fmt::format("\n<{}|driftd status>", options.dashboard_url);
  }
  std::string out;
  JsonObject body(out);
  body.String("text", fmt::format("{} {}", icon, summary));
  std::string blocks = "[";
  JsonObject section(blocks);
  section.String("type", "section");
  std::string text;
  JsonObject mrkdwn(text);
  mrkdwn.String("type", "mrkdwn");
  mrkdwn.String("text", detail);
  mrkdwn.Close();
  section.Raw("text", text);
  section.Close();
  blocks.push_back(']');
  body.Raw("blocks", blocks);
  body.Close();
  return out;
}

// PagerDuty Events API v2: trigger on WARN/ALERT, resolve on RESOLVED/OK, one incident per
// driftd incident (dedup_key = incident_id).
std::string PagerDutyBody(simdjson::dom::element row, const std::string& row_json,
                          const std::string& pipeline, const WebhookOptions& options) {
  const std::string level = Str(row, "level");
  std::string out;
  JsonObject body(out);
  body.String("routing_key", options.routing_key);
  body.String("event_action", Firing(level) ? "trigger" : "resolve");
  body.String("dedup_key", Str(row, "incident_id"));
  std::string payload;
  JsonObject p(payload);
  p.String("summary", Summary(row_json, pipeline).substr(0, 1024));
  p.String("source", fmt::format("driftd/{}", pipeline));
  p.String("severity", level == "ALERT" ? "critical" : level == "WARN" ? "warning" : "info");
  p.String("component", Str(row, "model"));
  p.String("group", pipeline);
  p.String("class", Str(row, "detector"));
  p.Raw("custom_details", row_json);
  p.Close();
  body.Raw("payload", payload);
  if (!options.dashboard_url.empty()) {
    std::string links = "[";
    JsonObject link(links);
    link.String("href", options.dashboard_url);
    link.String("text", "driftd status");
    link.Close();
    links.push_back(']');
    body.Raw("links", links);
  }
  body.String("client", "driftd");
  body.Close();
  return out;
}

class WebhookSink final : public Sink {
 public:
  WebhookSink(const PipelineSpec& pipeline, const SinkSpec& spec, WebhookOptions options)
      : name_(spec.name),
        pipeline_(pipeline.name),
        stream_(spec.stream),
        mode_(spec.output_mode),
        options_(std::move(options)),
        url_(options_.target),
        headers_(options_.headers) {
    if (options_.body_template == Template::kAlertmanager) {
      alertmanager_.emplace(AlertmanagerAlerts::Options{
          pipeline_, options_.alertmanager_ends_after_s, options_.dashboard_url});
    }
  }

  ~WebhookSink() override { StopResending(); }

  const std::string& name() const override { return name_; }

  Status Open() override {
    std::filesystem::path log_path(options_.delivery_log);
    log_dir_ = log_path.parent_path().string();
    log_name_ = log_path.filename().string();
    if (log_dir_.empty()) log_dir_ = ".";
    // The sink's files hold rows and errors (dead letters): the owner's only, like the
    // checkpoint they live in.
    DRIFTD_TRY(CreateOwnerOnlyDirectories(log_dir_));
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
    if (url_.credentials) {
      client_->set_basic_auth(url_.credentials->first, url_.credentials->second);
    }
    if (alertmanager_) {
      DRIFTD_TRY(LoadAlertmanagerAlerts());
      resender_ = std::thread([this] { ResendLoop(); });
    }
    return Ok();
  }

  Result<bool> IsDelivered(int64_t batch_id) override {
    return last_delivered_.has_value() && *last_delivered_ >= batch_id;
  }

  Result<std::optional<int64_t>> LastDelivered() override { return last_delivered_; }

  Status Deliver(const BatchOutput& output) override {
    if (last_delivered_ && *last_delivered_ >= output.batch_id) return Ok();
    // The re-send thread waits while a batch goes out, so that Alertmanager never gets a
    // re-send of an alert after the request that ended it.
    std::lock_guard<std::mutex> lock(mutex_);
    const OutputRows& rows = output.For(stream_, mode_);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_budget_ms);
    int64_t given_up = 0;
    for (size_t i = 0; i < rows.rows.size(); ++i) {
      std::string key = WebhookIdempotencyKey(pipeline_, output.batch_id, i, rows.rows[i]);
      const std::string body = Body(rows.rows[i]);
      if (body.empty()) continue;  // nothing for this receiver
      Status sent = Send(body, key, output.batch_id, deadline);
      if (sent) continue;
      if (options_.on_failure == FailurePolicy::kRetry) return sent;
      // dead_letter / drop: this row is given up on, the rest of the batch (and the
      // statistics) go on.
      const bool dead_letter = options_.on_failure == FailurePolicy::kDeadLetter;
      if (dead_letter) {
        DRIFTD_TRY(DeadLetter(rows.rows[i], key, output.batch_id, sent.error().message()));
      }
      // One line per batch is enough when a receiver is down: the first row's, then a count.
      if (++given_up == 1) {
        Log()->warn("sink={} key={}: {}; {}", name_, key, sent.error().message(),
                    dead_letter ? "written to the dead-letter file " + options_.dead_letter_path
                                : std::string("dropped (onFailure: drop)"));
      }
    }
    if (given_up > 1) {
      Log()->warn("sink={}: {} rows of batch {} {}", name_, given_up, output.batch_id,
                  options_.on_failure == FailurePolicy::kDeadLetter
                      ? "were written to the dead-letter file"
                      : "were dropped");
    }
    // The firing set before the delivery log: a crash between the two delivers the batch
    // again, and its rows applied again change nothing.
    if (alertmanager_ && alertmanager_->TakeChanged()) {
      DRIFTD_TRY(WriteFileAtomically(log_dir_, AlertmanagerFileName(),
                                     alertmanager_->Encode(output.batch_id), /*durable=*/true,
                                     FileAccess::kOwnerOnly));
    }
    DRIFTD_TRY(WriteFileAtomically(log_dir_, log_name_, fmt::format("{}\n", output.batch_id),
                                   /*durable=*/true, FileAccess::kOwnerOnly));
    last_delivered_ = output.batch_id;
    return Ok();
  }

  Status Close() override {
    StopResending();
    if (client_) client_->stop();
    return Ok();
  }

 private:
  // The request body of a row: the row itself, or the template's shape built from it; empty
  // when the row tells this receiver nothing (alertmanager: a row that is not an alert's).
  std::string Body(const std::string& row) {
    if (options_.body_template == Template::kDriftd) return row;
    if (options_.body_template == Template::kAlertmanager) {
      return alertmanager_->Apply(row, NowUs());
    }
    simdjson::dom::element element;
    if (parser_.parse(row).get(element) != simdjson::SUCCESS) return row;
    switch (options_.body_template) {
      case Template::kSlack: return SlackBody(element, row, pipeline_, options_);
      case Template::kPagerDuty: return PagerDutyBody(element, row, pipeline_, options_);
      case Template::kAlertmanager:
      case Template::kDriftd: break;
    }
    return row;
  }

  // "webhook-<sink>.alertmanager.json" beside the delivery log "webhook-<sink>.delivered".
  std::string AlertmanagerFileName() const {
    std::string name = log_name_;
    const std::string suffix = ".delivered";
    if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
    return name + ".alertmanager.json";
  }

  // The firing alerts as of the last delivered batch, saved by Deliver; none before the first.
  Status LoadAlertmanagerAlerts() {
    const std::string path = JoinPath(log_dir_, AlertmanagerFileName());
    auto size = FileSizeOrMissing(path);
    if (!size) return tl::unexpected(size.error());
    if (*size < 0) return Ok();
    auto text = ReadWholeFile(path);
    if (!text) return tl::unexpected(text.error());
    auto batch = alertmanager_->Decode(*text);
    if (!batch) {
      return MakeError(ErrorCode::kCorruption, "webhook sink '{}': {}: {}", name_, path,
                       batch.error().message());
    }
    if (alertmanager_->size() > 0) {
      Log()->info("sink={}: {} Alertmanager alert{} firing as of batch {}, re-sent every {} s",
                  name_, alertmanager_->size(), alertmanager_->size() == 1 ? "" : "s", *batch,
                  options_.alertmanager_resend_s);
    }
    return Ok();
  }

  // Alertmanager's protocol: every firing alert again, at once (a restart keeps them alive)
  // and then every alertmanagerResendInterval, each time with a fresh endsAt, so that they
  // expire within alertmanagerEndsAfter once driftd stops sending. One attempt per round: the
  // next round is the retry.
  void ResendLoop() {
    std::unique_lock<std::mutex> lock(mutex_);
    bool failing = false;
    while (!stopping_) {
      const std::string body = alertmanager_->Resend(NowUs());
      if (!body.empty()) {
        httplib::Result result = client_->Post(url_.path, headers_, body, "application/json");
        const bool ok = result && result->status >= 200 && result->status < 300;
        if (!ok && !failing) {
          Log()->warn("sink={}: re-sending {} firing alert{} to {} failed ({}); trying again "
                      "every {} s",
                      name_, alertmanager_->size(), alertmanager_->size() == 1 ? "" : "s",
                      options_.url,
                      result ? fmt::format("HTTP {}", result->status)
                             : httplib::to_string(result.error()),
                      options_.alertmanager_resend_s);
        } else if (ok && failing) {
          Log()->info("sink={}: re-sending firing alerts to {} works again", name_, options_.url);
        }
        failing = !ok;
      }
      wake_.wait_for(lock, std::chrono::seconds(options_.alertmanager_resend_s),
                     [this] { return stopping_; });
    }
  }

  void StopResending() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (resender_.joinable()) resender_.join();
  }

  // Appends a refused row with why to the dead-letter file (JSON lines), synced, 0600. The line
  // is redacted as a log line is (engine/redact.h): the error names the URL, whose token or
  // password must not rest on disk in plain text any more than in the log.
  Status DeadLetter(const std::string& row, const std::string& key, int64_t batch_id,
                    const std::string& error) {
    std::string line;
    JsonObject entry(line);
    entry.String("sink", name_);
    entry.Int("batch_id", batch_id);
    entry.String("idempotency_key", key);
    entry.String("error", error);
    entry.Raw("row", row);
    entry.Close();
    line.push_back('\n');
    return AppendToFile(options_.dead_letter_path, Redact(line), FileAccess::kOwnerOnly);
  }

  // One row, retried with exponential backoff on connection errors, 5xx and 429, while
  // attempts and the batch's retry budget last.
  Status Send(const std::string& body, const std::string& key, int64_t batch_id,
              std::chrono::steady_clock::time_point deadline) {
    httplib::Headers headers = headers_;
    headers.emplace("Idempotency-Key", key);
    int64_t backoff_ms = options_.backoff_initial_ms;
    std::string last_failure;
    if (std::chrono::steady_clock::now() >= deadline) {
      // The batch's budget went on earlier rows (the receiver is down): do not wait again.
      return MakeError(ErrorCode::kExternal,
                       "webhook {} {}: not sent, the batch's retryBudgetMs ({} ms) is spent",
                       options_.method, options_.url, options_.retry_budget_ms);
    }
    int64_t attempt = 1;
    for (; attempt <= options_.max_attempts; ++attempt) {
      httplib::Result result = options_.method == "PUT"
                                   ? client_->Put(url_.path, headers, body, "application/json")
                                   : client_->Post(url_.path, headers, body, "application/json");
      int64_t wait_ms = backoff_ms;
      if (!result) {
        last_failure = fmt::format("{}", httplib::to_string(result.error()));
      } else if (result->status >= 200 && result->status < 300) {
        return Ok();
      } else if (!Retriable(result->status)) {
        // The receiver refused the row: a failure to deliver (exit code 1), not an invalid
        // pipeline (78, which systemd would not restart). Sending it again cannot help.
        return MakeError(ErrorCode::kUnrecoverable,
                         "webhook {} {} rejected batch {} (Idempotency-Key {}) with HTTP {}: {}; "
                         "4xx responses other than 429 are not retried (check url, headers and "
                         "the receiver, or set onFailure: dead_letter or drop)",
                         options_.method, options_.url, batch_id, key, result->status,
                         result->body.substr(0, 200));
      } else {
        last_failure = fmt::format("HTTP {}", result->status);
        if (auto retry_after = RetryAfterMs(*result)) {
          wait_ms = std::min(*retry_after, options_.backoff_max_ms);
        }
      }
      if (attempt == options_.max_attempts ||
          std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms) >= deadline) {
        break;
      }
      Log()->warn("sink={} key={} attempt {}/{} failed: {}; retrying in {} ms", name_, key, attempt,
                  options_.max_attempts, last_failure, wait_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      backoff_ms = std::min(backoff_ms * 2, options_.backoff_max_ms);
    }
    // kExternal: the executor retries the batch; rows already accepted are re-sent with the
    // same keys, which the receiver de-duplicates.
    return MakeError(ErrorCode::kExternal, "webhook {} {} failed after {} attempt{}: {}",
                     options_.method, options_.url, std::min(attempt, options_.max_attempts),
                     std::min(attempt, options_.max_attempts) == 1 ? "" : "s", last_failure);
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
  simdjson::dom::parser parser_;
  /// Template alertmanager: the firing alerts and the thread that re-sends them. mutex_
  /// serializes Deliver and a re-send (both use client_ and alertmanager_).
  std::optional<AlertmanagerAlerts> alertmanager_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread resender_;
};

// The options (declared types, ranges and defaults applied) parsed once, with the checks
// across options, each problem tied to its option.
Bound<WebhookOptions> BindWebhookSink(const PipelineSpec& pipeline, const SinkSpec& spec,
                                      const Options& o) {
  auto problem = [](std::string option, std::string message) -> Bound<WebhookOptions> {
    return tl::unexpected(OptionProblem{std::move(option), std::move(message)});
  };
  WebhookOptions options;
  options.url = o.GetString("url");
  auto target = ParseUrl(options.url);
  if (!target) return problem("url", target.error().message());
  options.target = std::move(*target);
  auto headers = ParseHeaders(o.GetString("headers"));
  if (!headers) return problem("headers", headers.error().message());
  options.headers = std::move(*headers);
  options.method = o.GetString("method");
  options.timeout_ms = o.GetInt("timeoutMs");
  options.max_attempts = o.GetInt("maxAttempts");
  options.backoff_initial_ms = o.GetInt("backoffInitialMs");
  options.backoff_max_ms = o.GetInt("backoffMaxMs");
  options.retry_budget_ms = o.GetInt("retryBudgetMs");
  if (options.backoff_max_ms < options.backoff_initial_ms) {
    return problem("backoffMaxMs",
                   fmt::format("must be at least backoffInitialMs ({} ms), found {} ms",
                               options.backoff_initial_ms, options.backoff_max_ms));
  }
  options.delivery_log = o.GetString("deliveryLog");
  if (options.delivery_log.empty()) {
    options.delivery_log = DefaultWebhookDeliveryLog(pipeline.checkpoint_location, spec.name);
  }
  const std::string policy = o.GetString("onFailure");
  options.on_failure = policy == "retry"  ? FailurePolicy::kRetry
                       : policy == "drop" ? FailurePolicy::kDrop
                                          : FailurePolicy::kDeadLetter;
  options.dead_letter_path = o.GetString("deadLetterPath");
  if (options.dead_letter_path.empty()) {
    options.dead_letter_path = options.delivery_log;
    const std::string suffix = ".delivered";
    if (options.dead_letter_path.ends_with(suffix)) {
      options.dead_letter_path.resize(options.dead_letter_path.size() - suffix.size());
    }
    options.dead_letter_path += ".dead-letter.jsonl";
  }
  const std::string body_template = o.GetString("template");
  options.body_template = body_template == "slack"          ? Template::kSlack
                          : body_template == "pagerduty"    ? Template::kPagerDuty
                          : body_template == "alertmanager" ? Template::kAlertmanager
                                                            : Template::kDriftd;
  options.routing_key = o.GetString("routingKey");
  options.dashboard_url = o.GetString("dashboardUrl");
  options.alertmanager_resend_s = o.GetInt("alertmanagerResendInterval");
  options.alertmanager_ends_after_s = o.GetInt("alertmanagerEndsAfter");
  if (options.alertmanager_ends_after_s <= options.alertmanager_resend_s) {
    return problem("alertmanagerEndsAfter",
                   fmt::format("alertmanagerEndsAfter ({} s) must be more than "
                               "alertmanagerResendInterval ({} s), else a firing alert expires "
                               "between two re-sends",
                               options.alertmanager_ends_after_s, options.alertmanager_resend_s));
  }
  if (options.body_template == Template::kPagerDuty && options.routing_key.empty()) {
    return problem("template",
                   "template pagerduty needs routingKey (the service's Events API v2 "
                   "integration key)");
  }
  return options;
}

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
      "HTTP(S) delivery, one request per row (`Content-Type: application/json`), with an "
      "`Idempotency-Key` header: the row's `alert_id`, or `<pipeline>-<batch>-<row>` for rows "
      "without one. The body is the row's JSON object, or with `template` the shape a receiver "
      "wants, built from an alert row: `slack` (incoming webhook: `text` and a mrkdwn "
      "section), `pagerduty` (Events API v2: trigger on WARN/ALERT, resolve on RESOLVED/OK, "
      "`dedup_key` the incident id; needs `routingKey`), `alertmanager` (its `/api/v2/alerts` "
      "array, as Prometheus serves it: labels alertname `DriftDetected`, pipeline, model, "
      "segment (with segments), series, kind and severity; `warning` fires while a series is "
      "at WARN or worse and `critical` while it is at ALERT, so Alertmanager's usual inhibit "
      "rule (critical over warning, equal labels) shows one; RESOLVED or OK ends both at once, "
      "with the summary saying the series is back. Firing alerts are re-sent every "
      "`alertmanagerResendInterval` with endsAt `alertmanagerEndsAfter` ahead, so an alert of "
      "a daemon that stopped resolves by itself within `alertmanagerEndsAfter`; the re-sends "
      "are the receiver's protocol, not rows of the alerts stream, and the firing set is kept "
      "beside the delivery log, so a restart goes on re-sending it). Each message's summary "
      "is one line: for WARN and ALERT the detector past its threshold and the window against "
      "the baseline, for RESOLVED and OK that the series is back, with the window against the "
      "baseline and a detector of the window below its warn threshold. Connection errors, 5xx "
      "and 429 (honouring a `Retry-After` in seconds) are retried with exponential backoff within `maxAttempts` and the batch's "
      "`retryBudgetMs`. What then happens to a row that is refused (another 4xx) or not "
      "accepted in time is `onFailure`: `dead_letter` (default: the row and the error are "
      "appended to `deadLetterPath` and the batch goes on, so one receiver never stops the "
      "statistics), `drop` (logged, the batch goes on) or `retry` (the batch fails: the executor "
      "retries it, then the query stops; a 4xx stops it at once). With the defaults a batch's "
      "delivery takes at most about 25 s (`retryBudgetMs` + `timeoutMs`), inside systemd's "
      "WatchdogSec=30s. A local delivery log records the last fully delivered batch; after a "
      "crash in the middle of a batch its rows are sent again with the same keys, so a receiver "
      "that de-duplicates by the key sees each row once.";
  decl.options = {
      {"url", OptionType::kString, "",
       "`http://` or `https://` URL of the receiver; `https://user:password@host/...` sends "
       "the (percent-decoded) credentials as basic auth.",
       true},
      {"method", OptionType::kEnum, "POST", "HTTP method.", false, {"POST", "PUT"}},
      OptionDecl{"timeoutMs", OptionType::kInt, "5000",
                 "Connect, read and write timeout of one request, in milliseconds."}
          .AtLeast(1),
      OptionDecl{"maxAttempts", OptionType::kInt, "4",
                 "Attempts per row before `onFailure` applies."}
          .AtLeast(1),
      OptionDecl{"retryBudgetMs", OptionType::kInt, "20000",
                 "Milliseconds one batch's delivery may spend on retries before `onFailure` "
                 "applies to the rows left; keep `retryBudgetMs` + `timeoutMs` below the "
                 "watchdog."}
          .AtLeast(0),
      {"onFailure",
       OptionType::kEnum,
       "dead_letter",
       "A row refused or not accepted in time: `dead_letter`, `drop` or `retry`.",
       false,
       {"dead_letter", "drop", "retry"}},
      {"deadLetterPath", OptionType::kString, "",
       "JSON-lines file of rows given up on. Default: "
       "`<checkpointLocation>/sinks/webhook-<sink>.dead-letter.jsonl`."},
      {"template",
       OptionType::kEnum,
       "driftd",
       "Body shape.",
       false,
       {"driftd", "slack", "pagerduty", "alertmanager"}},
      {"routingKey", OptionType::kString, "",
       "PagerDuty integration (routing) key; required with `template: pagerduty`."},
      {"dashboardUrl", OptionType::kString, "",
       "Link to put in messages (Slack, PagerDuty links, Alertmanager generatorURL), e.g. "
       "the status page."},
      OptionDecl{"alertmanagerResendInterval", OptionType::kInt, "60",
                 "Seconds between re-sends of the firing alerts (template alertmanager), as "
                 "Prometheus re-sends every minute."}
          .AtLeast(1),
      OptionDecl{"alertmanagerEndsAfter", OptionType::kInt, "240",
                 "Seconds from a send to the endsAt of the firing alerts it carries (template "
                 "alertmanager): an alert resolves by itself this long after driftd stopped "
                 "re-sending it. More than `alertmanagerResendInterval`; 4 intervals ride out 3 "
                 "lost re-sends."}
          .AtLeast(1),
      OptionDecl{"backoffInitialMs", OptionType::kInt, "200",
                 "Wait before the second attempt; doubles per attempt."}
          .AtLeast(0),
      OptionDecl{"backoffMaxMs", OptionType::kInt, "5000",
                 "Upper bound of the wait between attempts; at least `backoffInitialMs`."}
          .AtLeast(0),
      {"headers", OptionType::kJson, "",
       "Extra request headers as a JSON object of strings, e.g. "
       "`{\"Authorization\": \"Bearer ${TOKEN}\"}`."},
      {"deliveryLog", OptionType::kString, "",
       "File recording the last delivered batch. Default: "
       "`<checkpointLocation>/sinks/webhook-<sink>.delivered`."},
  };
  BindSink<WebhookOptions>(decl, &BindWebhookSink,
                           [](const PipelineSpec& pipeline, const SinkSpec& spec,
                              WebhookOptions options) -> Result<std::unique_ptr<Sink>> {
                             return std::make_unique<WebhookSink>(pipeline, spec,
                                                                  std::move(options));
                           });
  return decl;
}

Result<std::unique_ptr<Sink>> CreateWebhookSink(const PipelineSpec& pipeline,
                                                const SinkSpec& spec) {
  static const ConnectorDecl decl = WebhookSinkDecl();
  return decl.create_sink(pipeline, spec);
}

}  // namespace driftd
