// Evaluations: one per closed window of every (model, series), with every detector's reading,
// whether or not the level changed; their persisted form; exported and reset baselines.
#include "engine/drift/evaluation.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include <fmt/format.h>
#include <simdjson.h>
#include <catch2/catch.hpp>

#include "engine/drift/monitor.h"

namespace driftd {
namespace {

DriftSpec Spec() {
  DriftSpec spec;
  spec.enabled = true;
  spec.baseline.records = 1000;
  spec.window_records = 1000;
  DetectorSpec psi;
  psi.kind = DetectorKind::kPsi;
  psi.name = "psi";
  psi.params["bins"] = 10;
  DetectorSpec mean;
  mean.kind = DetectorKind::kMeanShift;
  mean.name = "mean_shift";
  mean.params["minEffect"] = 0.2;
  spec.detectors = {psi, mean};
  return spec;
}

// `records` values of model "m" series 0, N(0,1) then shifted by `shift` from `shift_from` on;
// Evaluate every 100 values.
std::vector<Evaluation> Run(DriftMonitor& monitor, int records, int shift_from, double shift,
                            std::vector<AlertEvent>* events = nullptr, uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<Evaluation> evaluations;
  std::vector<AlertEvent> alerts;
  const std::string name = "m";
  for (int i = 0; i < records; ++i) {
    monitor.Observe(0, name, 0, normal(rng) + (i >= shift_from ? shift : 0), int64_t(i) * 1000);
    if ((i + 1) % 100 == 0) monitor.Evaluate(i / 100, 0, alerts, &evaluations);
  }
  if (events) *events = alerts;
  return evaluations;
}

TEST_CASE("every closed window is an evaluation with each detector's reading, drifting or not",
          "[drift][evaluation]") {
  auto monitor = DriftMonitor::Create(Spec(), {"x"}).value();
  monitor->CollectEvaluations(true);
  std::vector<AlertEvent> events;
  std::vector<Evaluation> evaluations = Run(*monitor, 10000, 6000, 3.0, &events);
  // 1000 warm-up values, then 9 windows of 1000.
  REQUIRE(evaluations.size() == 9);
  for (size_t i = 0; i < evaluations.size(); ++i) {
    const Evaluation& e = evaluations[i];
    INFO(i);
    CHECK(e.model == "m");
    CHECK(e.series == "x");
    CHECK(e.evaluated);
    CHECK(e.window_n == 1000);
    CHECK(e.window_start_record == 1000 + 1000 * int64_t(i));
    CHECK(e.window_end_record == e.window_start_record + 1000);
    CHECK(e.baseline_n == 1000);
    REQUIRE(e.detectors.size() == 2);
    CHECK(e.detectors[0].detector == "psi");
    CHECK(e.detectors[0].alert == 5.5);  // a calibrated level, the default
    CHECK(e.detectors[0].alert_threshold > 0);
    CHECK(e.detectors[1].detector == "mean_shift");
  }
  // Windows before the shift read OK; the shift reads ALERT; the level follows hysteresis.
  CHECK(evaluations[3].detectors[0].level == AlertLevel::kOk);
  CHECK(evaluations[5].detectors[0].level == AlertLevel::kAlert);
  CHECK(evaluations[4].level == AlertLevel::kOk);
  CHECK(evaluations[6].level == AlertLevel::kAlert);
  CHECK(evaluations[6].previous_level == AlertLevel::kOk);
  REQUIRE(events.size() == 1);
  CHECK(events[0].level == AlertLevel::kAlert);

  // Collecting evaluations changes no alert.
  auto plain = DriftMonitor::Create(Spec(), {"x"}).value();
  std::vector<AlertEvent> plain_events;
  CHECK(Run(*plain, 10000, 6000, 3.0, &plain_events).empty());
  REQUIRE(plain_events.size() == events.size());
  CHECK(plain_events[0].ToJson() == events[0].ToJson());
}

TEST_CASE("an evaluation round-trips through its persisted form and its JSON row",
          "[drift][evaluation]") {
  auto monitor = DriftMonitor::Create(Spec(), {"x"}).value();
  monitor->CollectEvaluations(true);
  std::vector<Evaluation> evaluations = Run(*monitor, 3000, 10'000, 0);
  REQUIRE(!evaluations.empty());
  const Evaluation& e = evaluations.back();
  auto decoded = DecodeEvaluation(EncodeEvaluation(e));
  REQUIRE(decoded);
  CHECK(EvaluationToJson(*decoded) == EvaluationToJson(e));
  CHECK(decoded->detectors[1].extras.size() == 3);  // z, welch_t, lookback_windows

  std::string bytes = EncodeEvaluation(e);
  bytes.pop_back();
  CHECK(DecodeEvaluation(bytes).error().code() == ErrorCode::kCorruption);
  CHECK(DecodeEvaluation("").error().code() == ErrorCode::kCorruption);

  simdjson::dom::parser parser;
  simdjson::dom::element row = parser.parse(EvaluationToJson(e));
  CHECK(std::string_view(row["evaluation_id"]).size() == 16);
  CHECK(std::string_view(row["level"]) == ToString(e.level));
  CHECK(int64_t(row["window"]["n"]) == 1000);
  CHECK(std::string_view(row["detectors"].at(0)["detector"]) == "psi");
  CHECK(EvaluationId(e) == EvaluationId(*decoded));
}

TEST_CASE("a monitor that packs its evaluations as their windows close hands out what one "
          "keeping the objects does, batch ids included",
          "[drift][evaluation]") {
  // A histogram detector, the mean, and a categorical series: distributions of both kinds,
  // extras, levels that move (the shift), windows closing inside and at the end of batches.
  DriftSpec spec = Spec();
  DetectorSpec chi;
  chi.kind = DetectorKind::kChiSquare;
  chi.name = "chi_square";
  spec.detectors.push_back(chi);
  const std::vector<SeriesDef> series = {{"x", SeriesKind::kNumeric},
                                         {"device", SeriesKind::kCategorical}};
  auto objects = DriftMonitor::Create(spec, series).value();
  objects->CollectEvaluations(true);
  auto packing = DriftMonitor::Create(spec, series).value();
  packing->CollectEvaluations(true);
  int packed_count = 0;
  packing->PackEvaluations([&](Evaluation&& e) {
    ++packed_count;
    e.segment = "renamed";  // what the drift stage's namer does to a segment's model
    return PackedEvaluation(e);
  });
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0, 1);
  const char* devices[] = {"ios", "android", "web"};
  size_t compared = 0;
  bool moved = false;
  bool histograms = false;
  bool categories = false;
  for (int i = 0; i < 9000; ++i) {
    const double x = normal(rng) * 1.7 + (i >= 5000 ? 2.5 : 0) + 1.0 / 3;
    const char* device = i >= 6000 ? "web" : devices[rng() % 3];
    for (DriftMonitor* m : {objects.get(), packing.get()}) {
      m->Observe(0, i % 2 ? "m1" : "m2", 0, x, int64_t(i) * 1000);
      m->ObserveCategory(0, i % 2 ? "m1" : "m2", 1, device, int64_t(i) * 1000);
    }
    if ((i + 1) % 700 != 0 && i != 8999) continue;
    const int64_t batch = 100 + i / 700;
    std::vector<AlertEvent> events_a, events_b;
    std::vector<Evaluation> kept;
    std::vector<DriftMonitor::PackedRecord> packed;
    objects->Evaluate(batch, 0, events_a, &kept);
    packing->Evaluate(batch, 0, events_b, packed);
    REQUIRE(packed.size() == kept.size());
    CHECK(packing->last_evaluation_records() == objects->last_evaluation_records());
    for (size_t k = 0; k < kept.size(); ++k) {
      Evaluation expected = kept[k];
      CHECK(packed[k].model == expected.model);
      expected.segment = "renamed";
      const PackedEvaluation& p = packed[k].evaluation;
      CHECK(p.model() == expected.model);
      CHECK(p.segment() == "renamed");
      CHECK(p.series() == expected.series);
      CHECK(p.level() == expected.level);
      CHECK(p.evaluated() == expected.evaluated);
      CHECK(EncodeEvaluation(*p.Unpack()) == EncodeEvaluation(expected));
      CHECK(p.Unpack()->batch_id == batch);
      CHECK(p.bytes() == EncodeEvaluation(expected));
      ++compared;
      moved = moved || expected.level != AlertLevel::kOk;
      histograms = histograms || (!expected.distribution.empty() && expected.categories.empty());
      categories = categories || !expected.categories.empty();
    }
  }
  CHECK(packed_count == static_cast<int>(compared));
  CHECK(compared == 16);  // 2 models x 2 series x 4 windows after the warmup
  CHECK(moved);
  CHECK(histograms);
  CHECK(categories);
}

TEST_CASE("an evaluation carries the distributions its histogram detectors compared, and "
          "keeps them through its persisted form",
          "[drift][evaluation]") {
  auto monitor = DriftMonitor::Create(Spec(), {"x"}).value();
  monitor->CollectEvaluations(true);
  // Shifted by 3 sd from value 6000 on: the last window's values sit in the upper bins.
  std::vector<Evaluation> evaluations = Run(*monitor, 10000, 6000, 3.0);
  REQUIRE(evaluations.size() == 9);
  const Evaluation& e = evaluations.back();
  REQUIRE(e.distribution.size() == 10);  // psi's 10 bins
  int64_t baseline = 0, window = 0;
  for (size_t b = 0; b < e.distribution.size(); ++b) {
    const DistributionCell& cell = e.distribution[b];
    CHECK(e.lower(b) < cell.upper);
    if (b > 0) CHECK(e.lower(b) == e.distribution[b - 1].upper);
    baseline += cell.baseline;
    window += cell.window;
  }
  CHECK(e.categories.empty());
  CHECK(std::isinf(e.lower(0)));
  CHECK(std::isinf(e.distribution.back().upper));
  CHECK(baseline == e.baseline_n);
  CHECK(window == e.window_n);
  // Baseline deciles: each bin about a tenth; the shifted window mostly in the top bin.
  CHECK(e.distribution.back().baseline < 200);
  CHECK(e.distribution.back().window > 800);

  auto decoded = DecodeEvaluation(EncodeEvaluation(e));
  REQUIRE(decoded);
  REQUIRE(decoded->distribution.size() == e.distribution.size());
  for (size_t b = 0; b < e.distribution.size(); ++b) {
    CHECK(decoded->lower(b) == e.lower(b));
    CHECK(decoded->distribution[b].upper == e.distribution[b].upper);
    CHECK(decoded->distribution[b].baseline == e.distribution[b].baseline);
    CHECK(decoded->distribution[b].window == e.distribution[b].window);
  }
}

TEST_CASE("a categorical evaluation names the categories it compared", "[drift][evaluation]") {
  DriftSpec spec;
  spec.enabled = true;
  spec.baseline.records = 1000;
  spec.window_records = 1000;
  DetectorSpec chi;
  chi.kind = DetectorKind::kChiSquare;
  chi.name = "chi_square";
  spec.detectors = {chi};
  const std::vector<SeriesDef> series = {{"device", SeriesKind::kCategorical}};
  auto monitor = DriftMonitor::Create(spec, series).value();
  monitor->CollectEvaluations(true);
  std::vector<AlertEvent> events;
  std::vector<Evaluation> evaluations;
  const char* devices[] = {"ios", "android", "web"};
  for (int i = 0; i < 3000; ++i) {
    // The window after the baseline is all "web".
    monitor->ObserveCategory(0, "m", 0, i < 2000 ? devices[i % 3] : "web", int64_t(i) * 1000);
  }
  monitor->Evaluate(0, 0, events, &evaluations);
  REQUIRE(evaluations.size() == 2);
  const Evaluation& e = evaluations.back();
  std::map<std::string, std::pair<int64_t, int64_t>> cells;
  REQUIRE(e.categories.size() == e.distribution.size());
  for (size_t i = 0; i < e.distribution.size(); ++i) {
    cells[e.categories[i]] = {e.distribution[i].baseline, e.distribution[i].window};
  }
  CHECK(cells.at("web").second == 1000);
  CHECK(cells.at("ios").second == 0);
  CHECK(cells.at("ios").first > 300);
  CHECK(cells.count(std::string(DriftMonitor::kOtherCategory)) == 1);
  auto decoded = DecodeEvaluation(EncodeEvaluation(e));
  REQUIRE(decoded);
  REQUIRE(decoded->distribution.size() == e.distribution.size());
  for (size_t i = 0; i < e.distribution.size(); ++i) {
    CHECK(decoded->categories.at(i) == e.categories[i]);
    CHECK(decoded->distribution[i].window == e.distribution[i].window);
  }
}

TEST_CASE("a model's baselines exported, then reset: it warms up again and recovers",
          "[drift][evaluation]") {
  auto monitor = DriftMonitor::Create(Spec(), {"x"}).value();
  monitor->CollectEvaluations(true);
  Run(*monitor, 4000, 2000, 3.0);  // in ALERT by now
  auto baselines = monitor->ExportBaselines();
  REQUIRE(baselines.size() == 1);
  CHECK(baselines[0].model == "m");
  CHECK(baselines[0].series == "x");
  CHECK(baselines[0].moments.count() == 1000);
  CHECK(baselines[0].counts.size() == baselines[0].inner_edges.size() + 1);

  CHECK_FALSE(monitor->ResetBaselines("unknown"));
  REQUIRE(monitor->ResetBaselines("m"));
  CHECK(monitor->ExportBaselines().empty());  // warming up again
  // The model now lives at the shifted level: after a new warm-up its windows read OK and
  // the ALERT resolves.
  std::vector<AlertEvent> events;
  std::mt19937_64 rng(9);
  std::normal_distribution<double> normal(3.0, 1);
  std::vector<Evaluation> evaluations;
  for (int i = 0; i < 5000; ++i) {
    monitor->Observe(0, "m", 0, normal(rng), int64_t(5000 + i) * 1000);
    if ((i + 1) % 100 == 0) monitor->Evaluate(100 + i, 0, events, &evaluations);
  }
  REQUIRE(!evaluations.empty());
  CHECK(evaluations.front().window_start_record == 4000 + 1000);  // indexes continue
  REQUIRE(!events.empty());
  CHECK(events.back().level == AlertLevel::kResolved);
}

}  // namespace
}  // namespace driftd

namespace driftd {
namespace {

// An evaluation with every field set: readings of two detectors (one with its declared
// extras, one with an extra it does not declare), a histogram, a segment.
Evaluation EveryField() {
  Evaluation e;
  e.model = "fraud-v2";
  e.segment = "country=DE";
  e.series = "amount";
  e.series_kind = SeriesKind::kNumeric;
  e.evaluated = true;
  e.previous_level = AlertLevel::kWarn;
  e.level = AlertLevel::kAlert;
  e.window_start_record = 4000;
  e.window_end_record = 5000;
  e.window_start_us = 1'700'000'000'000'000;
  e.window_end_us = 1'700'000'060'000'000;
  e.window_n = 1000;
  e.window_mean = 12.345678901234;
  e.window_stddev = 0.1 + 0.2;
  e.baseline_kind = BaselineKind::kTrailing;
  e.baseline_n = 5000;
  e.baseline_mean = 11.75;
  e.baseline_stddev = 1.0 / 3;
  e.batch_id = 77;
  DetectorReading mean;
  mean.detector = "mean_shift";
  mean.statistic = 6.123456789;
  mean.score = 5.9876;
  mean.warn = 5;
  mean.alert = 5.5;
  mean.warn_threshold = 4.41234;
  mean.alert_threshold = 4.9;
  mean.effect = 0.593;
  mean.min_effect = 0.2;
  mean.level = AlertLevel::kAlert;
  mean.held_from = AlertLevel::kOk;
  mean.window_level = AlertLevel::kWarn;
  mean.extras = {{"z", 6.123456789}, {"welch_t", 5.75}, {"lookback_windows", 3}};
  DetectorReading psi;
  psi.detector = "psi";
  psi.statistic = 0.0123;
  psi.score = std::nan("");
  psi.warn = 5;
  psi.alert = 5.5;
  psi.warn_threshold = 0.21;
  psi.alert_threshold = 0.25;
  psi.effect = 0.0123;
  psi.min_effect = 0.1;
  psi.level = AlertLevel::kOk;
  psi.held_from = AlertLevel::kWarn;
  psi.window_level = AlertLevel::kResolved;
  psi.extras = {{"df", 9}, {"z", -0.5}};  // "z" is not psi's
  e.detectors = {mean, psi};
  e.distribution_lower = -std::numeric_limits<double>::infinity();
  e.distribution = {{-1.5, 100, 90}, {0.1 + 0.2, 200, 210}, {7.25, 300, 0},
                    {std::numeric_limits<double>::infinity(), 400, 700}};
  return e;
}

// EveryField() as version 4 wrote it (EncodeEvaluation before the compact version 5).
constexpr std::string_view kVersion4Hex =
    "040800000066726175642d763206000000616d6f756e74010102a00f00000000000088130000000000000040"
    "1e18240a060000c7b11b240a0600e8030000000000003b6f2fd3fcb02840343333333333d33f028813000000"
    "0000000000000000802740555555555555d53f4d00000000000000020000000a0000006d65616e5f73686966"
    "748de5dc746b7e184000000000000014400000000000001640024f1e166a4df31740a054fb743ca611409a99"
    "99999999134060e5d022dbf9e23f9a9999999999c93f000103000000010000007a8de5dc746b7e1840070000"
    "0077656c63685f740000000000001740100000006c6f6f6b6261636b5f77696e646f77730000000000000840"
    "030000007073698d28ed0dbe30893f0000000000001440000000000000164000000000000000f87fe17a14ae"
    "47e1ca3f000000000000d03f8d28ed0dbe30893f9a9999999999b93f01030200000002000000646600000000"
    "00002240010000007a000000000000e0bf000a000000636f756e7472793d444504000f000000000000f0ffd1"
    "03645a0f343333333333d33fc801d201a2b501ac02000f000000000000f07f9003bc05";

std::string FromHex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

TEST_CASE("an evaluation's compact bytes (version 5) keep every field, and version 4's are "
          "still read",
          "[drift][evaluation]") {
  const Evaluation e = EveryField();
  const std::string v5 = EncodeEvaluation(e);
  auto decoded = DecodeEvaluation(v5);
  REQUIRE(decoded);
  // Every field, NaN score and infinite edges included, as the bytes they encode to.
  CHECK(EncodeEvaluation(*decoded) == v5);
  CHECK(EvaluationToJson(*decoded) == EvaluationToJson(e));
  CHECK(decoded->segment == "country=DE");
  CHECK(decoded->detectors[0].window_level == AlertLevel::kWarn);
  CHECK(decoded->detectors[1].held_from == AlertLevel::kWarn);
  CHECK(decoded->detectors[1].window_level == AlertLevel::kResolved);
  CHECK(std::isnan(decoded->detectors[1].score));
  // Declared extras come back under the detector's names; one it does not declare under its own.
  CHECK(decoded->detectors[0].extras[1].first == "welch_t");
  CHECK(decoded->detectors[0].extras[1].second == 5.75);
  CHECK(decoded->detectors[1].extras[1].first == "z");
  CHECK(decoded->distribution[1].upper == 0.1 + 0.2);
  CHECK(std::isinf(decoded->lower(0)));

  const std::string v4 = FromHex(kVersion4Hex);
  REQUIRE(v4[0] == 4);
  auto old = DecodeEvaluation(v4);
  REQUIRE(old);
  CHECK(EncodeEvaluation(*old) == v5);
  CHECK(v5.size() * 10 < v4.size() * 8);  // at least a fifth smaller

  // Cut short anywhere, or with a byte more, the bytes are refused, never misread.
  for (size_t n = 0; n < v5.size(); ++n) {
    CHECK(DecodeEvaluation(std::string_view(v5).substr(0, n)).error().code() ==
          ErrorCode::kCorruption);
  }
  CHECK(!DecodeEvaluation(v5 + '\0'));
}

}  // namespace
}  // namespace driftd
