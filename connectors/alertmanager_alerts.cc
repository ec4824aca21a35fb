#include "connectors/alertmanager_alerts.h"

#include <simdjson.h>

#include <vector>

#include <fmt/format.h>

#include "connectors/alert_text.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

std::string StringField(simdjson::dom::element e, const char* key) {
  std::string_view v;
  return e[key].get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}

// A number of the row as Alertmanager's annotations take it (strings only).
std::string NumberText(simdjson::dom::element e, const char* key) {
  double v = 0;
  return e[key].get(v) == simdjson::SUCCESS ? fmt::format("{}", v) : std::string();
}

bool IsFiring(std::string_view level) { return level == "WARN" || level == "ALERT"; }

// The severities a level fires: WARN or worse fires `warning`, ALERT also `critical`.
std::vector<const char*> Severities(std::string_view level) {
  if (level == "ALERT") return {"critical", "warning"};
  if (level == "WARN") return {"warning"};
  return {};
}

}  // namespace

std::string AlertmanagerAlerts::AlertJson(const Firing& alert, int64_t ends_at_us,
                                          bool with_start) const {
  std::string out;
  JsonObject a(out);
  a.Raw("labels", alert.labels);
  a.Raw("annotations", alert.annotations);
  if (with_start) a.Timestamp("startsAt", alert.starts_at_us);
  a.Timestamp("endsAt", ends_at_us);
  if (!options_.generator_url.empty()) a.String("generatorURL", options_.generator_url);
  a.Close();
  return out;
}

std::string AlertmanagerAlerts::Apply(std::string_view row_json, int64_t now_us) {
  simdjson::dom::parser parser;
  simdjson::dom::element row;
  if (parser.parse(row_json.data(), row_json.size()).get(row) != simdjson::SUCCESS ||
      !row.is_object()) {
    return "";
  }
  const std::string level = StringField(row, "level");
  // The labels that name a series' alerts, in a fixed order (so equal labels are equal text).
  auto labels = [&](const char* severity) {
    std::string out;
    JsonObject l(out);
    l.String("alertname", "DriftDetected");
    l.String("pipeline", options_.pipeline);
    l.String("model", StringField(row, "model"));
    if (const std::string segment = StringField(row, "segment"); !segment.empty()) {
      l.String("segment", segment);
    }
    l.String("series", StringField(row, "series"));
    if (const std::string kind = StringField(row, "kind"); !kind.empty()) l.String("kind", kind);
    if (severity != nullptr) l.String("severity", severity);
    l.Close();
    return out;
  };
  const std::string series_key = labels(nullptr);
  std::string annotations;
  {
    JsonObject n(annotations);
    n.String("summary", AlertLine(row_json));
    n.String("level", level);
    n.String("detector", StringField(row, "detector"));
    n.String("statistic", NumberText(row, "statistic"));
    n.String("threshold", NumberText(row, "threshold"));
    n.String("alert_id", StringField(row, "alert_id"));
    n.String("incident_id", StringField(row, "incident_id"));
    n.Close();
  }

  std::vector<std::string> alerts;
  if (IsFiring(level)) {
    // New alerts start now; one firing already (an escalation's warning, or a batch delivered
    // again) keeps its start and the row that raised it, and its endsAt moves on.
    for (const char* severity : Severities(level)) {
      std::string key = labels(severity);
      auto it = firing_.find(key);
      if (it == firing_.end()) {
        it = firing_.emplace(key, Firing{series_key, key, annotations, now_us}).first;
        changed_ = true;
      }
      alerts.push_back(AlertJson(it->second, now_us + options_.ends_after_s * 1'000'000, true));
    }
  } else {
    // The series is back: each of its alerts ends now, with the row that says so.
    std::vector<Firing> ended;
    for (auto it = firing_.begin(); it != firing_.end();) {
      if (it->second.series_key == series_key) {
        ended.push_back(std::move(it->second));
        it = firing_.erase(it);
        changed_ = true;
      } else {
        ++it;
      }
    }
    const bool known = !ended.empty();
    if (!known) {
      // Nothing recorded as firing (a batch delivered again, or a set lost with its file):
      // end what the previous level fired, which Alertmanager ignores when it has nothing.
      for (const char* severity : Severities(StringField(row, "previous_level"))) {
        ended.push_back(Firing{series_key, labels(severity), "", 0});
      }
    }
    for (Firing& alert : ended) {
      alert.annotations = annotations;
      alerts.push_back(AlertJson(alert, now_us, known));
    }
  }
  if (alerts.empty()) return "";
  return fmt::format("[{}]", fmt::join(alerts, ","));
}

std::string AlertmanagerAlerts::Resend(int64_t now_us) const {
  if (firing_.empty()) return "";
  std::string out = "[";
  for (const auto& [key, alert] : firing_) {
    if (out.size() > 1) out.push_back(',');
    out += AlertJson(alert, now_us + options_.ends_after_s * 1'000'000, true);
  }
  out.push_back(']');
  return out;
}

std::string AlertmanagerAlerts::Encode(int64_t batch_id) const {
  std::string out;
  JsonObject root(out);
  root.Int("batch_id", batch_id);
  std::string list = "[";
  for (const auto& [key, alert] : firing_) {
    if (list.size() > 1) list.push_back(',');
    JsonObject a(list);
    a.String("series_key", alert.series_key);
    a.Raw("labels", alert.labels);
    a.Raw("annotations", alert.annotations);
    a.Int("starts_at_us", alert.starts_at_us);
    a.Close();
  }
  list.push_back(']');
  root.Raw("alerts", list);
  root.Close();
  out.push_back('\n');
  return out;
}

Result<int64_t> AlertmanagerAlerts::Decode(std::string_view text) {
  auto corrupt = [&](std::string_view what) {
    return MakeError(ErrorCode::kCorruption, "the Alertmanager alerts file {}", what);
  };
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS) {
    return corrupt("is not JSON");
  }
  int64_t batch_id = -1;
  simdjson::dom::array list;
  if (root["batch_id"].get(batch_id) != simdjson::SUCCESS ||
      root["alerts"].get(list) != simdjson::SUCCESS) {
    return corrupt("has no batch_id and alerts");
  }
  std::map<std::string, Firing> firing;
  for (simdjson::dom::element entry : list) {
    simdjson::dom::object labels, annotations;
    std::string_view series_key;
    int64_t starts_at_us = 0;
    if (entry["series_key"].get(series_key) != simdjson::SUCCESS ||
        entry["labels"].get(labels) != simdjson::SUCCESS ||
        entry["annotations"].get(annotations) != simdjson::SUCCESS ||
        entry["starts_at_us"].get(starts_at_us) != simdjson::SUCCESS) {
      return corrupt("has an alert without series_key, labels, annotations and starts_at_us");
    }
    std::string key = simdjson::minify(labels);
    firing.emplace(key, Firing{std::string(series_key), key, simdjson::minify(annotations),
                               starts_at_us});
  }
  firing_ = std::move(firing);
  changed_ = false;
  return batch_id;
}

}  // namespace driftd
