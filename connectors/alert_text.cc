#include "connectors/alert_text.h"

#include <simdjson.h>

#include <cmath>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "engine/drift/detectors.h"

namespace driftd {

namespace {

using simdjson::dom::element;

std::string Str(element e, const char* key) {
  std::string_view v;
  return e[key].get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}

bool Num(element e, const char* key, double& out) {
  return e[key].get(out) == simdjson::SUCCESS && std::isfinite(out);
}

double NumOr(element e, const char* key, double fallback = 0) {
  double v = 0;
  return Num(e, key, v) ? v : fallback;
}

// A detector that integrates evidence over windows (the cusum) remembers a change after it is
// gone: its reading at the end of an incident is no evidence that the series is back.
bool Cumulative(std::string_view detector) {
  for (const DetectorDefaults& entry : DetectorDefaultsTable()) {
    if (entry.name == detector) return entry.immediate;
  }
  return false;
}

// ", window mean 2.05 over 999 values vs baseline mean 0.5795 (stddev 1.019)", or "" for a
// series without means (categories). `distance` adds how many baseline standard deviations
// apart the two means are.
std::string Means(element row, bool distance) {
  element window, baseline;
  double window_mean = 0, baseline_mean = 0;
  if (row["window"].get(window) != simdjson::SUCCESS ||
      row["baseline"].get(baseline) != simdjson::SUCCESS || !Num(window, "mean", window_mean) ||
      !Num(baseline, "mean", baseline_mean)) {
    return "";
  }
  const double baseline_sd = NumOr(baseline, "stddev");
  std::string out = fmt::format(", window mean {:.4g} over {} values vs baseline mean {:.4g} "
                                "(stddev {:.4g})",
                                window_mean, static_cast<int64_t>(NumOr(window, "n")),
                                baseline_mean, baseline_sd);
  if (distance && baseline_sd > 0) {
    fmt::format_to(std::back_inserter(out), ", {:.2g} sd apart",
                   std::abs(window_mean - baseline_mean) / baseline_sd);
  }
  return out;
}

// The categories of a categorical alert: the first new one, or the most changed one.
std::string Categories(element row) {
  simdjson::dom::array list;
  if (row["new_categories"].get(list) == simdjson::SUCCESS && list.size() > 0) {
    element first = list.at(0).value_unsafe();
    return fmt::format(", new category '{}' is {:.3g}% of the window", Str(first, "category"),
                       100 * NumOr(first, "window_share"));
  }
  if (row["top_categories"].get(list) == simdjson::SUCCESS && list.size() > 0) {
    element first = list.at(0).value_unsafe();
    return fmt::format(", '{}' is {:.3g}% of the window vs {:.3g}% of the baseline",
                       Str(first, "category"), 100 * NumOr(first, "window_share"),
                       100 * NumOr(first, "baseline_share"));
  }
  return "";
}

// "; ks 0.021 below its warn threshold 0.043": the reading of the closing window nearest its
// warn level among those below it, leaving out cumulative detectors.
std::string Evidence(element row) {
  simdjson::dom::array readings;
  if (row["detectors"].get(readings) != simdjson::SUCCESS) return "";
  element chosen;
  bool found = false;
  double chosen_closeness = 0;
  for (element reading : readings) {
    double statistic = 0, warn_threshold = 0;
    if (Str(reading, "level") != "OK" || Cumulative(Str(reading, "detector")) ||
        !Num(reading, "statistic", statistic) || !Num(reading, "warn_threshold", warn_threshold)) {
      continue;
    }
    // Calibrated scores put every detector on one scale: score / warn level.
    const double warn = NumOr(reading, "warn", 1);
    const double closeness = NumOr(reading, "score") / (warn > 0 ? warn : 1);
    if (!found || closeness > chosen_closeness) {
      found = true;
      chosen_closeness = closeness;
      chosen = reading;
    }
  }
  if (!found) return "";
  return fmt::format("; {} {:.4g} below its warn threshold {:.4g}", Str(chosen, "detector"),
                     NumOr(chosen, "statistic"), NumOr(chosen, "warn_threshold"));
}

std::string Names(element row, const char* key) {
  simdjson::dom::array list;
  std::vector<std::string> names;
  if (row[key].get(list) == simdjson::SUCCESS) {
    for (element name : list) {
      std::string_view text;
      if (name.get(text) == simdjson::SUCCESS) names.emplace_back(text);
    }
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

std::string AlertLine(std::string_view row_json) {
  simdjson::dom::parser parser;
  element row;
  if (parser.parse(row_json.data(), row_json.size()).get(row) != simdjson::SUCCESS ||
      !row.is_object()) {
    return "(an alert row that is not a JSON object)";
  }
  const std::string level = Str(row, "level");
  const bool back = level == "RESOLVED" || level == "OK";
  std::string model = Str(row, "model");
  if (const std::string segment = Str(row, "segment"); !segment.empty()) {
    model += fmt::format(" [{}]", segment);
  }
  const std::string series = Str(row, "series");
  const std::string detector = Str(row, "detector");
  const double statistic = NumOr(row, "statistic");
  const double threshold = NumOr(row, "threshold");

  if (series == "*") {  // a model's roll-up: statistic = series in ALERT, threshold = the count
    const std::string alerting = Names(row, "alerting_series");
    if (back) {
      return fmt::format("{} {} is back below its roll-up threshold: {} series in ALERT{}, fewer "
                         "than {}",
                         level, model, static_cast<int64_t>(statistic),
                         alerting.empty() ? "" : " (" + alerting + ")",
                         static_cast<int64_t>(threshold));
    }
    return fmt::format("{} {}: {} series in ALERT ({}), the roll-up's threshold is {}", level,
                       model, static_cast<int64_t>(statistic), alerting,
                       static_cast<int64_t>(threshold));
  }
  if (back) {
    std::string evidence = Means(row, /*distance=*/true);
    std::string reading = Evidence(row);
    if (evidence.empty() && !reading.empty()) {
      // No means (categories): the reading leads, with the window's size.
      element window;
      const int64_t n =
          row["window"].get(window) == simdjson::SUCCESS ? int64_t(NumOr(window, "n")) : 0;
      evidence = fmt::format(": {} over {} values", reading.substr(2), n);
    } else {
      if (!evidence.empty()) evidence[0] = ':';
      evidence += reading;
    }
    return fmt::format("{} {} {} is back{} (the incident was raised by {})", level, model, series,
                       evidence, detector.empty() ? "?" : detector);
  }
  std::string line = fmt::format("{} {} {}: {} {:.4g} (threshold {:.4g})", level, model, series,
                                 detector, statistic, threshold);
  const std::string means = Means(row, /*distance=*/false);
  return line + (means.empty() ? Categories(row) : means);
}

}  // namespace driftd
