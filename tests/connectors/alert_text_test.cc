// The one-line caption of an alert (chat messages, pages, Alertmanager's summary, the demo's
// console), and the set of alerts the alertmanager template keeps firing: a RESOLVED line says
// the series is back with the window's evidence, never the cumulative statistic that still
// remembers the change; an escalation keeps the warning beside the critical alert, and a
// resolution ends both; a batch applied again changes nothing.
#include <simdjson.h>

#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "connectors/alert_text.h"
#include "connectors/alertmanager_alerts.h"
#include "engine/time_iso8601.h"

namespace driftd {
namespace {

// A RESOLVED row as the drift monitor writes it: the cusum that raised the incident still reads
// far past its threshold (it remembers the change), mean_shift's look-back too; the window is
// back at the baseline and the detectors of the window alone read OK.
constexpr std::string_view kResolved =
    R"({"alert_id":"r1","incident_id":"i1","level":"RESOLVED","previous_level":"ALERT",)"
    R"("model":"m1","series":"x","kind":"drift","detector":"cusum","statistic":143.73,)"
    R"("threshold":69.7,"score":9.1,"window":{"start_record":10000,"end_record":11000,)"
    R"("start_time":null,"end_time":null,"n":1000,"mean":-0.0048,"stddev":1.01},)"
    R"("baseline":{"type":"warmup","n":5000,"mean":0.0102,"stddev":0.998},"detectors":[)"
    R"({"detector":"mean_shift","statistic":52.72,"score":40,"warn":5,"alert":5.5,)"
    R"("warn_threshold":5.33,"alert_threshold":5.8,"level":"ALERT"},)"
    R"({"detector":"psi","statistic":0.011,"score":0.4,"warn":5,"alert":5.5,)"
    R"("warn_threshold":0.06,"alert_threshold":0.07,"level":"OK"},)"
    R"({"detector":"ks","statistic":0.031,"score":1.9,"warn":5,"alert":5.5,)"
    R"("warn_threshold":0.1,"alert_threshold":0.11,"level":"OK"},)"
    R"({"detector":"cusum","statistic":143.73,"score":9.1,"warn":5,"alert":5.5,)"
    R"("warn_threshold":69.7,"alert_threshold":80.9,"level":"ALERT"}],"batch_id":7})";

std::string Row(const std::string& level, const std::string& previous,
                const std::string& series = "x", const std::string& segment = "") {
  return fmt::format(
      R"({{"alert_id":"{}-{}","incident_id":"i1","level":"{}","previous_level":"{}",)"
      R"("model":"m1",{}"series":"{}","kind":"drift","detector":"cusum","statistic":81.75,)"
      R"("threshold":80.89,"score":5.6,"window":{{"start_record":5000,"end_record":6000,)"
      R"("n":1000,"mean":1.609,"stddev":1.0}},"baseline":{{"type":"warmup","n":5000,)"
      R"("mean":0.0102,"stddev":0.998}},"batch_id":3}})",
      level, series, level, previous,
      segment.empty() ? "" : fmt::format(R"("segment":"{}",)", segment), series);
}

TEST_CASE("an alert's line names the detector past its threshold and the window against the "
          "baseline",
          "[connectors][alert_text]") {
  CHECK(AlertLine(Row("ALERT", "WARN")) ==
        "ALERT m1 x: cusum 81.75 (threshold 80.89), window mean 1.609 over 1000 values vs "
        "baseline mean 0.0102 (stddev 0.998)");
  CHECK(AlertLine(Row("WARN", "OK", "x", "region=eu")).starts_with("WARN m1 [region=eu] x: "));
}

TEST_CASE("a RESOLVED line says the series is back with the window's evidence, not the "
          "cumulative statistic",
          "[connectors][alert_text]") {
  const std::string line = AlertLine(kResolved);
  INFO(line);
  CHECK(line ==
        "RESOLVED m1 x is back: window mean -0.0048 over 1000 values vs baseline mean 0.0102 "
        "(stddev 0.998), 0.015 sd apart; ks 0.031 below its warn threshold 0.1 (the incident "
        "was raised by cusum)");
  CHECK(line.find("143") == std::string::npos);
  CHECK(line.find("52.72") == std::string::npos);
}

TEST_CASE("lines of categorical series and of a model's roll-up", "[connectors][alert_text]") {
  const std::string categorical =
      R"({"level":"ALERT","previous_level":"OK","model":"m1","series":"country","kind":"drift",)"
      R"("detector":"psi","statistic":0.41,"threshold":0.2,"window":{"n":800},)"
      R"("baseline":{"type":"warmup","n":5000},)"
      R"("new_categories":[{"category":"XX","window_share":0.125}]})";
  CHECK(AlertLine(categorical) ==
        "ALERT m1 country: psi 0.41 (threshold 0.2), new category 'XX' is 12.5% of the window");
  const std::string back =
      R"({"level":"OK","previous_level":"WARN","model":"m1","series":"country","kind":"drift",)"
      R"("detector":"psi","statistic":0.01,"threshold":0.2,"window":{"n":800},)"
      R"("baseline":{"type":"warmup","n":5000},"detectors":[{"detector":"psi",)"
      R"("statistic":0.01,"score":0.2,"warn":5,"warn_threshold":0.2,"level":"OK"}]})";
  CHECK(AlertLine(back) ==
        "OK m1 country is back: psi 0.01 below its warn threshold 0.2 over 800 values (the "
        "incident was raised by psi)");
  const std::string rollup =
      R"({"level":"ALERT","previous_level":"OK","model":"m1","series":"*","detector":"rollup",)"
      R"("statistic":3,"threshold":3,"alerting_series":["a","b","c"]})";
  CHECK(AlertLine(rollup) == "ALERT m1: 3 series in ALERT (a, b, c), the roll-up's threshold is 3");
  CHECK(AlertLine("not json").find("not a JSON object") != std::string::npos);
}

// The alerts of a body, as "severity:firing|ended", in the body's order.
std::vector<std::string> Alerts(const std::string& body, int64_t now_us) {
  std::vector<std::string> out;
  if (body.empty()) return out;
  simdjson::dom::parser parser;
  simdjson::dom::array list = parser.parse(body).get_array().value();
  for (simdjson::dom::element alert : list) {
    std::string_view severity = alert["labels"]["severity"].get_string().value();
    std::string_view ends = alert["endsAt"].get_string().value();
    const int64_t ends_us = ParseIso8601Micros(ends).value();
    out.push_back(fmt::format("{}:{}", severity, ends_us > now_us ? "firing" : "ended"));
  }
  return out;
}

TEST_CASE("the alertmanager set keeps the warning beside an escalation, ends both on RESOLVED, "
          "and a batch applied again changes nothing",
          "[connectors][alertmanager]") {
  AlertmanagerAlerts alerts({"fraud", 240, ""});
  const int64_t t0 = 1'800'000'000'000'000;
  using V = std::vector<std::string>;
  CHECK(Alerts(alerts.Apply(Row("WARN", "OK"), t0), t0) == V{"warning:firing"});
  CHECK(Alerts(alerts.Apply(Row("ALERT", "WARN"), t0 + 1), t0 + 1) ==
        V{"critical:firing", "warning:firing"});
  CHECK(alerts.size() == 2);
  // Another series fires on its own.
  CHECK(Alerts(alerts.Apply(Row("WARN", "OK", "y"), t0 + 2), t0 + 2) == V{"warning:firing"});
  CHECK(alerts.size() == 3);

  // The re-send: every firing alert, starts unchanged, ends 240 s on.
  const std::string resend = alerts.Resend(t0 + 60'000'000);
  simdjson::dom::parser parser;
  simdjson::dom::array list = parser.parse(resend).get_array().value();
  CHECK(list.size() == 3);
  for (simdjson::dom::element alert : list) {
    const int64_t starts = ParseIso8601Micros(alert["startsAt"].get_string().value()).value();
    const int64_t ends = ParseIso8601Micros(alert["endsAt"].get_string().value()).value();
    CHECK(starts / 1000 >= t0 / 1000);
    CHECK(starts / 1000 <= (t0 + 2) / 1000);
    CHECK(ends == (t0 + 60'000'000 + 240'000'000) / 1000 * 1000);
  }

  // Saved and loaded (a restart), then the RESOLVED row: both of x's alerts end, y's fires on.
  const std::string saved = alerts.Encode(4);
  AlertmanagerAlerts restarted({"fraud", 240, ""});
  REQUIRE(restarted.Decode(saved).value() == 4);
  CHECK(restarted.Resend(t0 + 1) == alerts.Resend(t0 + 1));
  CHECK_FALSE(restarted.TakeChanged());
  const std::string ended = restarted.Apply(kResolved, t0 + 5);
  CHECK(restarted.TakeChanged());
  CHECK(Alerts(ended, t0 + 5) == V{"critical:ended", "warning:ended"});
  CHECK_THAT(ended, Catch::Contains("RESOLVED m1 x is back"));
  CHECK(restarted.size() == 1);

  // The same batch delivered again (a crash before the delivery log): nothing changes.
  const std::string before = restarted.Encode(5);
  CHECK(Alerts(restarted.Apply(kResolved, t0 + 6), t0 + 6) == V{"critical:ended", "warning:ended"});
  CHECK(restarted.Encode(5) == before);
  CHECK(Alerts(restarted.Apply(Row("WARN", "OK", "y"), t0 + 7), t0 + 7) == V{"warning:firing"});
  CHECK(restarted.Encode(5) == before);
  CHECK_FALSE(restarted.TakeChanged());  // nothing to save again

  // The labels Alertmanager routes and groups on.
  CHECK_THAT(ended,
             Catch::Contains(R"("labels":{"alertname":"DriftDetected","pipeline":"fraud",)"
                             R"("model":"m1","series":"x","kind":"drift","severity":"critical"})"));
  CHECK_FALSE(restarted.Decode("{\"alerts\":3}"));
}

}  // namespace
}  // namespace driftd
