// Detection-quality report for the drift detectors with their default thresholds: for generated
// scenarios (stationary, mean shifts, a variance change, a slow drift, prediction drift, an
// error-rate rise), how many records after the change each detector raises its ALERT, how often
// it misses, and how many false alarms it raises per million stationary records.
//
//   drift_quality [--runs N] [--records N]
//
// Each detector runs alone in its own DriftMonitor (default spec: warmup 1000 records, windows
// of 1000, hysteresis 2), fed the same values; "all" runs every default detector together, as
// a pipeline without a detectors list does.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/drift/monitor.h"

namespace driftd {
namespace {

constexpr int64_t kChangeAt = 20'000;

struct Scenario {
  std::string name;
  /// Value of the watched series at record `rec` (records >= kChangeAt are after the change).
  std::function<double(std::mt19937_64&, int64_t rec)> value;
  /// Error probability of the labeled outcome at `rec`; empty: no labels.
  std::function<double(int64_t rec)> error_rate;
  bool has_change = true;
};

struct Contender {
  std::string name;
  DriftSpec spec;
};

struct Tally {
  std::vector<int64_t> delays;  // records from the change to the window that raised ALERT
  int64_t missed = 0;
  int64_t false_alarms = 0;
  int64_t false_warnings = 0;  // WARN events before the change (not alerts, but noise)
  int64_t stationary_records = 0;
};

double Normal(std::mt19937_64& rng) {
  static thread_local std::normal_distribution<double> normal(0.0, 1.0);
  return normal(rng);
}

std::vector<Scenario> Scenarios() {
  auto after = [](int64_t rec) { return rec >= kChangeAt; };
  std::vector<Scenario> s;
  s.push_back({"stationary", [](std::mt19937_64& r, int64_t) { return Normal(r); }, {}, false});
  for (double shift : {0.1, 0.25, 0.5, 1.0}) {
    char name[64];
    std::snprintf(name, sizeof name, "mean +%.2f sigma", shift);
    s.push_back(
        {name,
         [=](std::mt19937_64& r, int64_t rec) { return Normal(r) + (after(rec) ? shift : 0.0); },
         {},
         true});
  }
  s.push_back({"variance x1.5",
               [=](std::mt19937_64& r, int64_t rec) {
                 return Normal(r) * (after(rec) ? std::sqrt(1.5) : 1.0);
               },
               {},
               true});
  s.push_back(
      {"stddev x1.6",
       [=](std::mt19937_64& r, int64_t rec) { return Normal(r) * (after(rec) ? 1.6 : 1.0); },
       {},
       true});
  for (double slope : {1.0, 0.2}) {
    char name[64];
    std::snprintf(name, sizeof name, "slow drift %.1f sigma/100k", slope);
    s.push_back({name,
                 [=](std::mt19937_64& r, int64_t rec) {
                   return Normal(r) +
                          (after(rec) ? slope * double(rec - kChangeAt) / 100'000.0 : 0.0);
                 },
                 {},
                 true});
  }
  // A classifier score: logistic of a latent normal; the latent mean moves by 0.5.
  s.push_back({"prediction score drift",
               [=](std::mt19937_64& r, int64_t rec) {
                 const double latent = Normal(r) + (after(rec) ? 0.5 : 0.0);
                 return 1.0 / (1.0 + std::exp(-latent));
               },
               {},
               true});
  for (double to : {0.15, 0.20}) {
    char name[64];
    std::snprintf(name, sizeof name, "error rate 0.10 -> %.2f", to);
    s.push_back({name, [](std::mt19937_64& r, int64_t) { return Normal(r); },
                 [=](int64_t rec) { return after(rec) ? to : 0.10; }, true});
  }
  return s;
}

std::vector<Contender> Columns() {
  std::vector<Contender> columns;
  for (const DetectorDefaults& d : DetectorDefaultsTable()) {
    Contender c{std::string(d.name), DriftSpec()};
    c.spec.detectors = {DefaultDetectorSpec(d.kind)};
    c.spec.model_alert_series = 0;
    columns.push_back(std::move(c));
  }
  Contender all{"all", DriftSpec()};
  all.spec.detectors = DefaultDetectorSpecs();
  columns.push_back(std::move(all));
  return columns;
}

int Run(int runs, int64_t records) {
  const auto scenarios = Scenarios();
  const auto columns = Columns();
  const std::string model = "model";
  std::printf(
      "drift detection quality: %d runs per scenario, %lld records per run, change at "
      "record %lld\n",
      runs, static_cast<long long>(records), static_cast<long long>(kChangeAt));
  std::printf(
      "cells: median delay in records after the change (detected/runs); "
      "'-' = never detected\n\n");
  std::printf("%-26s", "scenario");
  for (const Contender& c : columns) std::printf(" %16s", c.name.c_str());
  std::printf("\n");

  std::vector<Tally> false_alarm_tally(columns.size());
  for (const Scenario& sc : scenarios) {
    std::vector<Tally> tally(columns.size());
    for (int run = 0; run < runs; ++run) {
      std::mt19937_64 rng(1000 + static_cast<uint64_t>(run));
      std::uniform_real_distribution<double> unit(0.0, 1.0);
      std::vector<std::unique_ptr<DriftMonitor>> monitors;
      for (const Contender& c : columns) {
        monitors.push_back(std::make_unique<DriftMonitor>(c.spec, std::vector<std::string>{"x"}));
      }
      std::vector<int64_t> first_alert(columns.size(), -1);
      std::vector<AlertEvent> events;
      for (int64_t rec = 0; rec < records; ++rec) {
        const double v = sc.value(rng, rec);
        const int64_t t = rec * 1000;
        double prediction = 0, label = 0;
        if (sc.error_rate) {
          label = unit(rng) < 0.5 ? 1.0 : 0.0;
          prediction = unit(rng) < sc.error_rate(rec) ? 1.0 - label : label;
        }
        for (size_t c = 0; c < monitors.size(); ++c) {
          monitors[c]->Observe(0, model, 0, v, t);
          if (sc.error_rate) monitors[c]->ObserveLabel(0, prediction, label, t);
        }
        if ((rec + 1) % 10'000 == 0 || rec + 1 == records) {
          for (size_t c = 0; c < monitors.size(); ++c) {
            events.clear();
            monitors[c]->Evaluate(rec / 10'000, rec / 1000, events);
            for (const AlertEvent& e : events) {
              const bool before_change = !sc.has_change || e.window_end_record <= kChangeAt;
              if (e.level == AlertLevel::kWarn && before_change) ++tally[c].false_warnings;
              if (e.level != AlertLevel::kAlert) continue;
              if (before_change) {
                ++tally[c].false_alarms;
              } else if (first_alert[c] < 0) {
                first_alert[c] = e.window_end_record - kChangeAt;
              }
            }
          }
        }
      }
      for (size_t c = 0; c < columns.size(); ++c) {
        tally[c].stationary_records += sc.has_change ? kChangeAt : records;
        if (!sc.has_change) continue;
        if (first_alert[c] >= 0) {
          tally[c].delays.push_back(first_alert[c]);
        } else {
          ++tally[c].missed;
        }
      }
    }
    std::printf("%-26s", sc.name.c_str());
    for (size_t c = 0; c < columns.size(); ++c) {
      Tally& t = tally[c];
      false_alarm_tally[c].false_alarms += t.false_alarms;
      false_alarm_tally[c].false_warnings += t.false_warnings;
      false_alarm_tally[c].stationary_records += t.stationary_records;
      char cell[64];
      if (!sc.has_change) {
        std::snprintf(cell, sizeof cell, "%lld FA", static_cast<long long>(t.false_alarms));
      } else if (t.delays.empty()) {
        std::snprintf(cell, sizeof cell, "- (0/%d)", runs);
      } else {
        std::sort(t.delays.begin(), t.delays.end());
        std::snprintf(cell, sizeof cell, "%lld (%zu/%d)",
                      static_cast<long long>(t.delays[t.delays.size() / 2]), t.delays.size(), runs);
      }
      std::printf(" %16s", cell);
    }
    std::printf("\n");
  }
  std::printf("\n%-26s", "false alarms / 1M records");
  for (size_t c = 0; c < columns.size(); ++c) {
    const Tally& t = false_alarm_tally[c];
    std::printf(" %16.3f", t.stationary_records > 0
                               ? 1e6 * double(t.false_alarms) / double(t.stationary_records)
                               : 0.0);
  }
  std::printf("\n%-26s", "false warnings / 1M");
  for (size_t c = 0; c < columns.size(); ++c) {
    const Tally& t = false_alarm_tally[c];
    std::printf(" %16.3f", t.stationary_records > 0
                               ? 1e6 * double(t.false_warnings) / double(t.stationary_records)
                               : 0.0);
  }
  std::printf("\n%-26s", "stationary records seen");
  for (size_t c = 0; c < columns.size(); ++c) {
    std::printf(" %16lld", static_cast<long long>(false_alarm_tally[c].stationary_records));
  }
  std::printf("\n");
  return 0;
}

/// Cost of the hot path, as a ratio to a bare Moments::Add over the same values (one run, so the
/// ratio is meaningful on a noisy machine even if the absolute times are not).
void Throughput() {
  constexpr size_t kModels = 8;
  constexpr size_t kSeries = 8;
  constexpr int64_t kRecords = 250'000;
  std::mt19937_64 rng(3);
  std::vector<double> values(1 << 16);
  for (double& v : values) v = Normal(rng);
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
  int runs = 10;
  int64_t records = 150'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--records") == 0) records = std::atoll(argv[i + 1]);
  }
  const int rc =
      driftd::Run(std::max(1, runs), std::max<int64_t>(driftd::kChangeAt + 1000, records));
  driftd::Throughput();
  return rc;
}
