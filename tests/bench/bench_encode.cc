// What writing output rows as Avro costs the Kafka sink, measured in one run.
//
//   bench_encode [rows=200000] [repetitions=5]
//
// Two kinds of rows, as the sink gets them (JSON objects): stats rows of a windowed query
// (model, window, count, mean and stddev of the prediction, mean of 8 features: ~450 bytes)
// and alert rows with every detector's reading and three bins (~2 KB). For each, interleaved
// and best-of: `parse`, simdjson's DOM parse of the row alone (the floor of any encoding that
// starts from the row); `json`, the json format's encoder (the row copied as it is); `avro`,
// the avro encoder with the derived writer schema. Prints rows/s, MB/s of JSON in, the Avro
// bytes per row, and avro/parse and avro/json, all measured in this run.
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "connectors/registry.h"
#include "engine/drift/monitor.h"
#include "engine/json_writer.h"
#include "engine/time_iso8601.h"

namespace driftd {
namespace {

using Clock = std::chrono::steady_clock;

RowShape StatsShape(std::vector<std::string>& rows, int count) {
  using Kind = ShapeType::Kind;
  auto column = [](std::string name, Kind kind, bool nullable = false) {
    return ShapeField{std::move(name), ShapeType::Scalar(kind, nullable), {}};
  };
  for (int i = 0; i < count; ++i) {
    std::string row;
    JsonObject object(row);
    object.String("model_id", fmt::format("model-{}", i % 16));
    std::string window;
    JsonObject bounds(window);
    const int64_t start = 1'795'000'000'000'000 + int64_t{i / 16} * 60'000'000;
    bounds.Timestamp("start", start);
    bounds.Timestamp("end", start + 60'000'000);
    bounds.Close();
    object.Raw("window", window);
    object.Int("count", 1000 + i % 7);
    object.Number("mean(prediction)", 0.5 + 1e-4 * i);
    object.Number("stddev(prediction)", 0.1 + 1e-5 * i);
    for (int f = 0; f < 8; ++f) {
      object.Number(fmt::format("mean(feature_vector[{}])", f), f + 1e-3 * (i % 1000));
    }
    object.Close();
    rows.push_back(std::move(row));
  }
  return ShapeType::Record(
      "Stats",
      {column("model_id", Kind::kString),
       {"window",
        ShapeType::Record("Window", {column("start", Kind::kTimestamp),
                                     column("end", Kind::kTimestamp)}),
        {}},
       column("count", Kind::kLong), column("mean(prediction)", Kind::kDouble, true),
       column("stddev(prediction)", Kind::kDouble, true),
       {"mean(feature_vector)", ShapeType::Array(ShapeType::Scalar(Kind::kDouble, true)),
        ElementMembers{"mean(feature_vector[", "])"}}});
}

void AlertRows(std::vector<std::string>& rows, int count) {
  for (int i = 0; i < count; ++i) {
    AlertEvent event;
    event.alert_id = fmt::format("{:016x}", 0x3fc400f78ac91fd3ull + i);
    event.incident_id = event.alert_id;
    event.level = AlertLevel::kAlert;
    event.previous_level = AlertLevel::kWarn;
    event.model = fmt::format("model-{}", i % 16);
    event.series = fmt::format("feature_vector[{}]", i % 8);
    event.detector = "psi";
    event.statistic = 0.3 + 1e-5 * i;
    event.threshold = 0.12;
    event.score = 9.5;
    event.window_start_record = 1000 * i;
    event.window_end_record = 1000 * i + 1000;
    event.window_start_us = 1'795'000'000'000'000 + int64_t{i} * 1'000'000;
    event.window_end_us = event.window_start_us + 1'000'000;
    event.window_n = 1000;
    event.window_mean = 0.6;
    event.window_stddev = 0.11;
    event.baseline_n = 5000;
    event.baseline_mean = 0.5;
    event.baseline_stddev = 0.1;
    for (const DetectorDefaults& detector : DetectorDefaultsTable()) {
      DetectorReading reading;
      reading.detector = detector.name;
      reading.statistic = 1.5 + 1e-6 * i;
      reading.score = 6;
      reading.warn = detector.warn;
      reading.alert = detector.alert;
      reading.warn_threshold = 1.1;
      reading.alert_threshold = 1.3;
      reading.effect = 0.2;
      reading.min_effect = 0.1;
      reading.level = AlertLevel::kAlert;
      for (std::string_view extra : detector.extras) reading.extras.emplace_back(extra, 0.25);
      event.detectors.push_back(reading);
    }
    for (int b = 0; b < 3; ++b) event.top_bins.push_back({b, b * 0.1, b * 0.1 + 0.1, 0.1, 0.2, 0.07});
    event.batch_id = i / 100;
    rows.push_back(event.ToJson());
  }
}

std::unique_ptr<ValueEncoder> Encoder(const char* format, const RowShape& shape) {
  const ValueFormatDecl* decl = FindValueFormat(ValueFormats(), format);
  Options options;
  for (const OptionDecl& option : decl->sink_options) {
    if (!option.default_value.empty()) options.Set(option.name, option.default_value);
  }
  auto encoder = BindAndCreateEncoder(*decl, ValueEncoderContext{shape, "bench-value"}, options);
  if (!encoder || !(*encoder)->Open()) {
    std::fprintf(stderr, "cannot make the %s encoder\n", format);
    std::exit(1);
  }
  return std::move(*encoder);
}

struct Rates {
  double parse = 1e300, json = 1e300, avro = 1e300;  // best seconds
  size_t avro_bytes = 0;
};

Rates Measure(const std::vector<std::string>& rows, const RowShape& shape, int repetitions) {
  auto json = Encoder("json", shape);
  auto avro = Encoder("avro", shape);
  simdjson::dom::parser parser;
  std::string out;
  Rates best;
  for (int r = 0; r < repetitions; ++r) {
    auto t0 = Clock::now();
    size_t members = 0;
    for (const std::string& row : rows) {
      simdjson::dom::object object;
      if (parser.parse(row).get(object) != simdjson::SUCCESS) std::abort();
      members += object.size();
    }
    auto t1 = Clock::now();
    for (const std::string& row : rows) {
      if (!json->Encode(row, out)) std::abort();
    }
    auto t2 = Clock::now();
    size_t bytes = 0;
    for (const std::string& row : rows) {
      Status status = avro->Encode(row, out);
      if (!status) {
        std::fprintf(stderr, "%s\n", status.error().message().c_str());
        std::exit(1);
      }
      bytes += out.size();
    }
    auto t3 = Clock::now();
    if (members == 0) std::abort();
    best.parse = std::min(best.parse, std::chrono::duration<double>(t1 - t0).count());
    best.json = std::min(best.json, std::chrono::duration<double>(t2 - t1).count());
    best.avro = std::min(best.avro, std::chrono::duration<double>(t3 - t2).count());
    best.avro_bytes = bytes / rows.size();
  }
  return best;
}

void Print(const char* what, const std::vector<std::string>& rows, const Rates& rates) {
  size_t json_bytes = 0;
  for (const std::string& row : rows) json_bytes += row.size();
  const double n = static_cast<double>(rows.size());
  auto line = [&](const char* name, double seconds) {
    std::printf("  %-6s %10.0f rows/s  %8.1f MB/s of JSON\n", name, n / seconds,
                static_cast<double>(json_bytes) / seconds / 1e6);
  };
  std::printf("%s rows: %zu, %zu bytes of JSON per row, %zu bytes of Avro\n", what, rows.size(),
              json_bytes / rows.size(), rates.avro_bytes);
  line("parse", rates.parse);
  line("json", rates.json);
  line("avro", rates.avro);
  std::printf("  avro/parse %.2f  avro/json %.3f (throughput ratios)\n",
              rates.parse / rates.avro, rates.json / rates.avro);
}

}  // namespace
}  // namespace driftd

int main(int argc, char** argv) {
  using namespace driftd;
  const int rows = argc > 1 ? std::atoi(argv[1]) : 200'000;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<std::string> stats;
  const RowShape stats_shape = StatsShape(stats, rows);
  Print("stats", stats, Measure(stats, stats_shape, repetitions));
  std::vector<std::string> alerts;
  AlertRows(alerts, rows / 4);
  Print("alert", alerts, Measure(alerts, AlertRowShape(), repetitions));
  return 0;
}
