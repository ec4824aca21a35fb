// Detection quality of the drift detectors at their defaults, on generated inference logs of the
// project's own: per scenario the false events, which detector raised the ALERT, the detection
// delay in records of the model, the incidents and flaps while the change lasts, and how soon a
// reverted change resolves.
//
//   drift_quality [--runs N] [--quick] [--dump DIR] [--check]
//
// Every scenario runs the whole default detector set in one DriftMonitor per run, as a pipeline
// without a detectors list does (record windows of 1000, warmup 5000, hysteresis 2), except where
// the scenario says otherwise (event-time windows, a seasonal baseline). --dump writes the
// watched streams of run 0 (float64 little-endian, one file per scenario, with a JSON index) for
// tests/bench/drift_quality_river.py, which runs River's ADWIN and Page-Hinkley on the same
// values. --check exits 1 when a target of engine/drift/README.md is missed. --quick shortens the
// long scenarios (CI).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "engine/drift/monitor.h"

namespace driftd {
namespace {

constexpr int kFeatures = 8;
constexpr size_t kPrediction = kFeatures;  // series index of the prediction

/// A counter-based generator: the n-th draw of stream k is a pure function of (k, n), so runs
/// are reproducible and independent of the order values are drawn in.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL) {}
  uint64_t Next() {
    uint64_t x = (state += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  }
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Normal() {
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    const double u = Uniform();
    const double v = Uniform();
    const double r = std::sqrt(-2 * std::log(u));
    spare = r * std::sin(2 * std::numbers::pi * v);
    has_spare = true;
    return r * std::cos(2 * std::numbers::pi * v);
  }
  /// Student's t with 3 degrees of freedom, scaled to unit variance.
  double StudentT3() {
    const double z = Normal();
    const double a = Normal(), b = Normal(), c = Normal();
    return z / std::sqrt((a * a + b * b + c * c) / 3) / std::sqrt(3.0);
  }
  /// An even mixture of N(-0.9, 0.44^2) and N(+0.9, 0.44^2): unit variance, two modes.
  double Bimodal() { return (Uniform() < 0.5 ? -0.9 : 0.9) + 0.4359 * Normal(); }
  double spare = 0;
  bool has_spare = false;
};

enum class Shape { kNormal, kStudentT3, kBimodal };

struct Change {
  int model = 0;
  size_t series = 0;
  int64_t from = 0;         // first record of the model affected
  int64_t to = INT64_MAX;   // first record back to normal
  double shift = 0;         // sigma
  double slope = 0;         // sigma per 100k records, from `from` on
  double sd_scale = 1;
  double mixture = 0;       // share of records drawn shifted by `mixture_shift` sigma
  double mixture_shift = 0;
  double error_rise = 0;    // labels: the error rate rises by this much
};

struct Scenario {
  std::string name;
  int models = 2;
  int64_t records = 200'000;  // per model
  int runs = 5;
  std::vector<Change> changes;
  bool labels = false;
  double base_error = 0.1;
  Shape shape = Shape::kNormal;
  /// Microseconds between two records of one model.
  int64_t us_per_record = 1000;
  /// Event-time windows of this size (0: record windows).
  int64_t window_ms = 0;
  /// A periodic feature 0: amplitude (sigma) and period.
  double cycle_amplitude = 0;
  int64_t cycle_period_ms = 0;
  bool seasonal = false;
  /// Which detector families count as the right one for the change.
  std::set<std::string> right;
  /// Stated bound on the records from a revert to RESOLVED.
  int64_t resolve_bound = 0;
  /// Targets (checked with --check): detection within this many records of the model.
  int64_t delay_target = 0;
};

struct Tally {
  int64_t false_warn = 0;
  int64_t false_alert = 0;
  int64_t false_other = 0;
  int64_t values = 0;
  std::vector<int64_t> delays;  // per run: records from the change to the first ALERT; -1 missed
  std::map<std::string, int> lead;
  int64_t incidents = 0;        // incidents opened on the changed series while the change lasts
  int64_t resolved_during = 0;  // RESOLVED/OK on the changed series while the change lasts
  std::vector<int64_t> resolve_delays;
  int64_t missed_resolve = 0;
};

double Mean(size_t series, int model) {
  return series == kPrediction ? 0.3 + 0.05 * model : 0.5 * static_cast<double>(series) - 1;
}
double Sd(size_t series, int model) {
  return series == kPrediction ? 0.1 : 1.0 + 0.1 * static_cast<double>(series) + 0.01 * model;
}

DriftSpec SpecFor(const Scenario& sc) {
  DriftSpec spec;
  spec.enabled = true;
  spec.detectors = DefaultDetectorSpecs();
  if (!sc.labels) {
    spec.detectors.erase(std::remove_if(spec.detectors.begin(), spec.detectors.end(),
                                        [](const DetectorSpec& d) {
                                          return d.kind == DetectorKind::kErrorRate;
                                        }),
                         spec.detectors.end());
  }
  if (sc.seasonal) {
    spec.baseline.kind = BaselineKind::kSeasonal;
    spec.baseline.period_ms = sc.cycle_period_ms;
  }
  return spec;
}

std::vector<std::string> SeriesNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kFeatures; ++i) names.push_back("feature_vector[" + std::to_string(i) + "]");
  names.push_back("prediction");
  return names;
}

struct Dump {
  std::filesystem::path dir;
  std::vector<std::string> index;  // JSON objects
};

bool Active(const Change& c, int64_t rec) { return rec >= c.from && rec < c.to; }

void RunScenario(const Scenario& sc, Tally& tally, Dump* dump) {
  const std::vector<std::string> names = SeriesNames();
  const size_t series_count = names.size();
  std::vector<std::string> models;
  for (int m = 0; m < sc.models; ++m) models.push_back("model-" + std::to_string(m));
  for (int run = 0; run < sc.runs; ++run) {
    DriftMonitor monitor(SpecFor(sc), names);
    if (sc.window_ms > 0) monitor.UseEventTimeWindows(sc.window_ms, 0);
    Rng rng(1000 + static_cast<uint64_t>(run) * 7919 + std::hash<std::string>()(sc.name) % 1000);
    std::vector<AlertEvent> events;
    // Dumped streams (run 0): the changed series, or for a stationary scenario every series of
    // two models. Key: (model, series), the error series being kErrorKey.
    constexpr size_t kErrorKey = 99;
    std::map<std::pair<int, size_t>, std::vector<double>> streams;
    if (dump != nullptr && run == 0) {
      for (const Change& c : sc.changes) streams[{c.model, c.error_rise > 0 ? kErrorKey : c.series}];
      if (sc.changes.empty()) {
        for (int m = 0; m < std::min(2, sc.models); ++m) {
          for (size_t s = 0; s < series_count; ++s) streams[{m, s}];
          if (sc.labels) streams[{m, kErrorKey}];
        }
      }
    }
    auto dumped = [&](int model, size_t series) -> std::vector<double>* {
      if (streams.empty()) return nullptr;
      auto it = streams.find({model, series});
      return it == streams.end() ? nullptr : &it->second;
    };
    int64_t first_alert = -1;
    bool resolved_after = false;
    int64_t resolve_delay = -1;
    const Change* change = sc.changes.empty() ? nullptr : &sc.changes[0];
    const std::string change_series =
        change ? (change->error_rise > 0 ? "error" : names[change->series]) : "";
    const std::string change_model = change ? models[static_cast<size_t>(change->model)] : "";
    std::set<std::string> incidents;
    const int64_t batch = 2'000;
    // A batch ends with the query clock's watermark at the newest event time read (a delay of
    // 0, one input partition), as the executor sets it before the drift stage evaluates.
    auto drain = [&](int64_t batch_id, int64_t now_ms, int64_t watermark_us) {
      events.clear();
      if (sc.window_ms > 0) monitor.AdvanceWatermark(watermark_us);
      monitor.Evaluate(batch_id, now_ms, events);
      for (const AlertEvent& e : events) {
        if (e.series == "*") continue;
        const bool on_change = change && e.model == change_model && e.series == change_series;
        // window_end_record is the series' value index, warmup included: every record carries
        // every series (and a label), so it is the model's record index.
        const int64_t at = e.window_end_record;
        const bool during = on_change && at > change->from && at <= change->to;
        const bool after_revert = on_change && at > change->to;
        if (on_change && during) {
          if (e.level == AlertLevel::kAlert && first_alert < 0) {
            first_alert = at - change->from;
            std::string lead = e.detector;
            tally.lead[lead]++;
          }
          if (e.level == AlertLevel::kWarn || e.level == AlertLevel::kAlert) {
            if (e.previous_level == AlertLevel::kOk || e.previous_level == AlertLevel::kResolved) {
              incidents.insert(e.incident_id);
            }
          }
          if (e.level == AlertLevel::kResolved || e.level == AlertLevel::kOk) {
            ++tally.resolved_during;
          }
          continue;
        }
        if (after_revert) {
          if ((e.level == AlertLevel::kResolved || e.level == AlertLevel::kOk) && !resolved_after) {
            resolved_after = true;
            resolve_delay = at - change->to;
          }
          if (e.level == AlertLevel::kWarn || e.level == AlertLevel::kAlert) ++tally.false_other;
          continue;
        }
        if (e.level == AlertLevel::kWarn) ++tally.false_warn;
        else if (e.level == AlertLevel::kAlert) ++tally.false_alert;
        else ++tally.false_other;
      }
    };
    int64_t batch_id = 0;
    for (int64_t rec = 0; rec < sc.records; ++rec) {
      for (int m = 0; m < sc.models; ++m) {
        const int64_t t = 1'700'000'000'000'000 + rec * sc.us_per_record + m * 37;
        for (size_t s = 0; s < series_count; ++s) {
          double base;
          if (s == kPrediction) {
            base = rng.Normal();
          } else {
            switch (sc.shape) {
              case Shape::kStudentT3:
                base = s % 2 == 0 ? rng.StudentT3() : rng.Bimodal();
                break;
              case Shape::kBimodal:
                base = rng.Bimodal();
                break;
              default:
                base = rng.Normal();
            }
          }
          double shift = 0;
          double scale = 1;
          for (const Change& c : sc.changes) {
            if (c.model != m || c.series != s || c.error_rise > 0 || !Active(c, rec)) continue;
            shift += c.shift + c.slope * static_cast<double>(rec - c.from) / 100'000.0;
            scale *= c.sd_scale;
            if (c.mixture > 0 && rng.Uniform() < c.mixture) shift += c.mixture_shift;
          }
          if (s == 0 && sc.cycle_amplitude > 0) {
            const double phase = static_cast<double>(t / 1000 % sc.cycle_period_ms) /
                                 static_cast<double>(sc.cycle_period_ms);
            shift += sc.cycle_amplitude * std::sin(2 * std::numbers::pi * phase);
          }
          double value = base * scale + shift;
          if (s == kPrediction) {
            // A score: the logistic of a latent normal (the prediction shift moves the latent).
            value = 1 / (1 + std::exp(-(Mean(s, m) * 4 - 1.2 + value)));
          } else {
            value = Mean(s, m) + Sd(s, m) * value;
          }
          monitor.Observe(static_cast<uint32_t>(m), models[static_cast<size_t>(m)], s, value, t);
          if (auto* v = dumped(m, s)) v->push_back(value);
        }
        if (sc.labels) {
          double p = sc.base_error;
          for (const Change& c : sc.changes) {
            if (c.model == m && c.error_rise > 0 && Active(c, rec)) p += c.error_rise;
          }
          const double label = rng.Uniform() < 0.5 ? 1.0 : 0.0;
          const double prediction = rng.Uniform() < p ? 1.0 - label : label;
          monitor.ObserveLabel(static_cast<uint32_t>(m), prediction, label, t);
          if (auto* v = dumped(m, kErrorKey)) v->push_back(prediction != label ? 1.0 : 0.0);
        }
      }
      if ((rec + 1) % batch == 0 || rec + 1 == sc.records) {
        const int64_t newest_us =
            1'700'000'000'000'000 + rec * sc.us_per_record + (sc.models - 1) * 37;
        drain(batch_id++, newest_us / 1000, newest_us);
      }
    }
    tally.values += sc.records * sc.models * static_cast<int64_t>(series_count);
    if (change) {
      tally.delays.push_back(first_alert);
      tally.incidents += static_cast<int64_t>(incidents.size());
      if (change->to < sc.records) {
        if (resolved_after) {
          tally.resolve_delays.push_back(resolve_delay);
        } else {
          ++tally.missed_resolve;
        }
      }
    }
    if (dump != nullptr && run == 0) {
      for (auto& [key, values] : streams) {
        const std::string series = key.second == kErrorKey ? "error" : names[key.second];
        std::string file = sc.name + "." + models[static_cast<size_t>(key.first)] + "." + series;
        for (char& c : file) {
          if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
        }
        file += ".f64";
        std::ofstream out(dump->dir / file, std::ios::binary);
        out.write(reinterpret_cast<const char*>(values.data()),
                  static_cast<std::streamsize>(values.size() * sizeof(double)));
        std::string entry = "{\"scenario\":\"" + sc.name + "\",\"model\":\"" +
                            models[static_cast<size_t>(key.first)] + "\",\"series\":\"" +
                            series + "\",\"file\":\"" + file +
                            "\",\"values\":" + std::to_string(values.size());
        if (change) {
          entry += ",\"change_from\":" + std::to_string(change->from);
          if (change->to < sc.records) entry += ",\"change_to\":" + std::to_string(change->to);
        }
        entry += "}";
        dump->index.push_back(entry);
      }
    }
  }
}

std::vector<Scenario> Scenarios(bool quick, int runs) {
  std::vector<Scenario> out;
  const std::set<std::string> location = {"mean_shift", "cusum"};
  const std::set<std::string> spread = {"stddev_ratio", "psi", "js", "ks"};
  const std::set<std::string> any_value = {"mean_shift", "cusum", "stddev_ratio", "psi", "js", "ks"};
  {
    Scenario s;
    s.name = "stationary";
    s.models = 8;
    s.records = quick ? 200'000 : 1'000'000;
    s.runs = 1;
    s.labels = true;
    out.push_back(s);
  }
  auto step = [&](std::string name, double shift, int64_t to, int64_t delay_target) {
    Scenario s;
    s.name = std::move(name);
    s.records = quick ? 100'000 : 200'000;
    s.runs = runs;
    s.changes = {{.model = 1, .series = 3, .from = 20'000, .to = to, .shift = shift}};
    s.right = location;
    s.delay_target = delay_target;
    return s;
  };
  out.push_back(step("step +0.2 sigma", 0.2, INT64_MAX, 5'000));
  out.push_back(step("step +0.5 sigma", 0.5, INT64_MAX, 500));
  {
    Scenario s = step("step 0.5 sigma reverting", 0.5, 60'000, 500);
    s.resolve_bound = 2'000;
    out.push_back(s);
  }
  {
    Scenario s = step("ramp 1 sigma/100k", 0, INT64_MAX, 0);
    s.changes[0].slope = 1.0;
    out.push_back(s);
  }
  {
    Scenario s = step("mixture 5% at +3 sigma", 0, INT64_MAX, 0);
    s.changes[0].mixture = 0.05;
    s.changes[0].mixture_shift = 3;
    s.right = any_value;
    out.push_back(s);
  }
  {
    Scenario s = step("variance only sd x1.25", 0, INT64_MAX, 0);
    s.changes[0].sd_scale = 1.25;
    s.right = spread;
    out.push_back(s);
  }
  {
    Scenario s = step("prediction shift 0.5", 0.5, INT64_MAX, 500);
    s.changes[0].series = kPrediction;
    s.right = any_value;
    out.push_back(s);
  }
  // The same steps under 5-minute event-time windows at 1,000 records of the model per window:
  // a persistent shift must hold its incident here too. Event-time windows are judged when the
  // watermark closes them, so a change is seen at the end of the first window it fills: within
  // two windows (2,000 records) of its start.
  auto windowed = [](Scenario s) {
    s.name += ", 5-min windows";
    s.us_per_record = 300'000;
    s.window_ms = 5 * 60 * 1000;
    return s;
  };
  out.push_back(windowed(step("step +0.2 sigma", 0.2, INT64_MAX, 5'000)));
  out.push_back(windowed(step("step +0.5 sigma", 0.5, INT64_MAX, 2'000)));
  {
    Scenario s = windowed(step("step 0.5 sigma reverting", 0.5, 60'000, 2'000));
    s.resolve_bound = 2'000;
    out.push_back(s);
  }
  for (double base : {0.1, 0.4}) {
    Scenario s;
    char name[64];
    std::snprintf(name, sizeof name, "label flips %.2f -> %.2f", base, base + 0.05);
    s.name = name;
    s.records = quick ? 100'000 : 200'000;
    s.runs = runs;
    s.labels = true;
    s.base_error = base;
    s.changes = {{.model = 1, .series = 99, .from = 20'000, .error_rise = 0.05}};
    s.right = {"error_rate"};
    out.push_back(s);
  }
  {
    Scenario s;
    s.name = "low traffic: 100 models, t3 and bimodal, 5-min windows";
    s.models = 100;
    s.records = quick ? 14'400 : 86'400;  // one record per second and model: 4 h or 24 h
    s.runs = 1;
    s.labels = true;
    s.shape = Shape::kStudentT3;
    s.us_per_record = 1'000'000;
    s.window_ms = 5 * 60 * 1000;
    out.push_back(s);
  }
  {
    // Feature 0 of every model follows an hourly cycle of 1 sigma; model-1's shifts by 1 sigma
    // on top of it after 4 h. The seasonal baseline compares each 5-minute window with the same
    // phase of the first two cycles.
    Scenario s;
    s.name = "hourly cycle, seasonal baseline, +1 sigma at 4 h";
    s.models = 8;
    s.records = quick ? 43'200 : 86'400;  // one record per 0.5 s: 6 h or 12 h
    s.runs = runs;
    s.us_per_record = 500'000;
    s.window_ms = 5 * 60 * 1000;
    s.cycle_amplitude = 1;
    s.cycle_period_ms = 60 * 60 * 1000;
    s.seasonal = true;
    s.changes = {{.model = 1, .series = 0, .from = 28'800, .shift = 1}};
    s.right = location;
    out.push_back(s);
  }
  {
    Scenario s = out.back();
    s.name = "hourly cycle, warmup baseline (for contrast)";
    s.seasonal = false;
    s.runs = 1;
    s.changes.clear();
    out.push_back(s);
  }
  return out;
}

std::string Cell(const std::vector<int64_t>& v) {
  if (v.empty()) return "-";
  std::vector<int64_t> hit;
  for (int64_t x : v) {
    if (x >= 0) hit.push_back(x);
  }
  if (hit.empty()) return "never";
  std::sort(hit.begin(), hit.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld/%lld%s", static_cast<long long>(hit[hit.size() / 2]),
                static_cast<long long>(hit.back()),
                hit.size() < v.size() ? (" (" + std::to_string(hit.size()) + "/" +
                                         std::to_string(v.size()) + ")").c_str()
                                      : "");
  return buf;
}

int Run(int runs, bool quick, bool check, const std::filesystem::path& dump_dir) {
  std::unique_ptr<Dump> dump;
  if (!dump_dir.empty()) {
    std::filesystem::create_directories(dump_dir);
    dump = std::make_unique<Dump>();
    dump->dir = dump_dir;
  }
  std::printf(
      "drift detection quality, default detectors (warmup 5000, record windows of 1000 unless "
      "stated; delays in records of the model after the change, median/max over runs)\n\n");
  std::printf("%-55s %9s %11s %-22s %-16s %9s %8s %-12s\n", "scenario", "values", "false W/A/o",
              "ALERTed by", "delay med/max", "incidents", "flaps", "resolve med");
  bool ok = true;
  for (const Scenario& sc : Scenarios(quick, runs)) {
    Tally t;
    RunScenario(sc, t, dump.get());
    std::string leads;
    for (const auto& [name, count] : t.lead) {
      if (!leads.empty()) leads += ",";
      leads += name + (t.lead.size() > 1 ? ":" + std::to_string(count) : "");
    }
    char falses[32];
    std::snprintf(falses, sizeof falses, "%lld/%lld/%lld", static_cast<long long>(t.false_warn),
                  static_cast<long long>(t.false_alert), static_cast<long long>(t.false_other));
    std::string resolve = t.resolve_delays.empty() && t.missed_resolve == 0
                              ? "-"
                              : Cell(t.resolve_delays) +
                                    (t.missed_resolve ? " missed " + std::to_string(t.missed_resolve) : "");
    std::printf("%-55s %9.2fM %11s %-22s %-16s %9lld %8lld %-12s\n", sc.name.c_str(),
                static_cast<double>(t.values) / 1e6, falses, leads.empty() ? "-" : leads.c_str(),
                Cell(t.delays).c_str(), static_cast<long long>(t.incidents),
                static_cast<long long>(t.resolved_during), resolve.c_str());
    // Targets (engine/drift/README.md): no false WARN or ALERT; each change ALERTed by a detector
    // of its family, once, without RESOLVED while it lasts; delays within their targets.
    bool scenario_ok = t.false_warn == 0 && t.false_alert == 0;
    const bool stationary_set = sc.changes.empty();
    if (!stationary_set) {
      const int detected = static_cast<int>(std::count_if(t.delays.begin(), t.delays.end(),
                                                          [](int64_t d) { return d >= 0; }));
      scenario_ok = scenario_ok && detected == sc.runs && t.incidents == sc.runs &&
                    t.resolved_during == 0;
      for (const auto& [name, count] : t.lead) scenario_ok = scenario_ok && sc.right.count(name);
      if (sc.delay_target > 0) {
        std::vector<int64_t> d = t.delays;
        std::sort(d.begin(), d.end());
        scenario_ok = scenario_ok && !d.empty() && d[d.size() / 2] <= sc.delay_target;
      }
      if (sc.resolve_bound > 0) {
        scenario_ok = scenario_ok && t.missed_resolve == 0 &&
                      std::all_of(t.resolve_delays.begin(), t.resolve_delays.end(),
                                  [&](int64_t d) { return d <= sc.resolve_bound; });
      }
    }
    const bool expected_to_page = sc.name.find("for contrast") != std::string::npos;
    if (expected_to_page) scenario_ok = true;  // shown for contrast: a cycle against a flat baseline
    if (!scenario_ok) {
      ok = false;
      std::printf("    ^ misses a target\n");
    }
    std::fflush(stdout);
  }
  if (dump) {
    std::ofstream index(dump->dir / "index.json");
    index << "[\n";
    for (size_t i = 0; i < dump->index.size(); ++i) {
      index << "  " << dump->index[i] << (i + 1 < dump->index.size() ? ",\n" : "\n");
    }
    index << "]\n";
  }
  std::printf(
      "\nfalse W/A/o: WARN, ALERT and other events where nothing changed (or after a revert's "
      "RESOLVED); flaps: RESOLVED or OK while the change lasts; resolve: records from the revert "
      "to RESOLVED.\n");
  return check && !ok ? 1 : 0;
}

/// Cost of the hot path, as a ratio to a bare Moments::Add over the same values (one run, so the
/// ratio is meaningful on a noisy machine even if the absolute times are not).
void Throughput() {
  constexpr size_t kModels = 8;
  constexpr size_t kSeries = 8;
  constexpr int64_t kRecords = 250'000;
  Rng rng(3);
  std::vector<double> values(1 << 16);
  for (double& v : values) v = rng.Normal();
  std::vector<std::string> names;
  for (size_t s = 0; s < kSeries; ++s) names.push_back("f" + std::to_string(s));
  std::vector<std::string> models;
  for (size_t m = 0; m < kModels; ++m) models.push_back("model-" + std::to_string(m));

  using Clock = std::chrono::steady_clock;
  std::vector<Moments> bare(kModels * kSeries);
  const auto t0 = Clock::now();
  size_t i = 0;
  for (int64_t r = 0; r < kRecords; ++r) {
    for (size_t m = 0; m < kModels; ++m) {
      for (size_t s = 0; s < kSeries; ++s) bare[m * kSeries + s].Add(values[i++ & 0xffff]);
    }
  }
  const auto t1 = Clock::now();
  DriftSpec spec;
  spec.detectors = DefaultDetectorSpecs();
  DriftMonitor monitor(spec, names);
  std::vector<AlertEvent> events;
  i = 0;
  for (int64_t r = 0; r < kRecords; ++r) {
    for (size_t m = 0; m < kModels; ++m) {
      for (size_t s = 0; s < kSeries; ++s) {
        monitor.Observe(static_cast<uint32_t>(m), models[m], s, values[i++ & 0xffff], r * 1000);
      }
    }
    if (r % 10'000 == 0) monitor.Evaluate(r / 10'000, r, events);
  }
  const auto t2 = Clock::now();
  double sink = 0;
  for (const Moments& b : bare) sink += b.mean();
  const double bare_s = std::chrono::duration<double>(t1 - t0).count();
  const double monitor_s = std::chrono::duration<double>(t2 - t1).count();
  const double n = double(kRecords * kModels * kSeries);
  std::printf(
      "\nhot path: DriftMonitor::Observe with all detectors costs %.1fx a bare Moments::Add "
      "(%.0f vs %.0f M values/s this run; checksum %.3f)\n",
      monitor_s / bare_s, n / monitor_s / 1e6, n / bare_s / 1e6, sink);
}

}  // namespace
}  // namespace driftd

int main(int argc, char** argv) {
  int runs = 5;
  bool quick = false;
  bool check = false;
  std::filesystem::path dump;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--check") == 0) check = true;
    else if (std::strcmp(argv[i], "--dump") == 0 && i + 1 < argc) dump = argv[++i];
    else {
      std::fprintf(stderr, "usage: drift_quality [--runs N] [--quick] [--dump DIR] [--check]\n");
      return 64;
    }
  }
  const int rc = driftd::Run(std::max(1, runs), quick, check, dump);
  if (!quick) driftd::Throughput();
  return rc;
}
