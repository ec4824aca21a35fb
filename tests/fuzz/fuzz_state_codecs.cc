// libFuzzer harness: every decoder of persisted state, on bytes a damaged disk or an older
// build could leave. The first byte picks the codec; for keyed state the rest is "key NUL
// value". A decoder must return a result or an error, never crash, hang, or allocate without
// bound.
//   0 checkpoint commit log key       5 Moments (aggregate state)
//   1 checkpoint commit log value     6 alert state machine
//   2 checkpoint outbox value         7 a series' last evaluation (drift gauges)
//   3 batch output (outbox payload)   8 aggregation state entry (Aggregator::Restore)
//   4 source offsets (JSON)           9 drift state entry (DriftStage::Restore, monitor included)
//  10 webhook delivery log (a file)  11 quantile sketch (approx_percentile state)
//  12 status history entry (HistoryStage::Restore: alerts, incidents, series points)
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "config/loader.h"
#include "connectors/webhook_sink.h"
#include "engine/aggregation.h"
#include "engine/drift/alert_state.h"
#include "engine/drift/evaluation.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/outbox_codec.h"
#include "engine/executor/status_history.h"
#include "engine/json_decoder.h"
#include "engine/offsets.h"
#include "engine/quantile_sketch.h"
#include "engine/stats.h"
#include "state/checkpoint_codec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace driftd;

// A pipeline whose state has every kind of entry: grouped aggregates over a window and drift
// on an array, a scalar and a string (categorical) with every detector, missing-value and
// malformed series included.
const PipelineSpec& Spec() {
  static const PipelineSpec spec = [] {
    auto parsed = ParsePipeline(R"(name: fuzz-state
schema:
  - {name: model_id, type: string, nullable: false}
  - {name: event_time, type: timestamp}
  - {name: feature_vector, type: array<double>}
  - {name: prediction, type: double}
  - {name: label, type: double}
  - {name: device, type: string}
source: {format: file, options: {path: /nonexistent}}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction), stddev(feature_vector), min(prediction), max(prediction)]
drift:
  series: [feature_vector, prediction, device]
  baseline: {type: warmup, records: 200}
  predictionColumn: prediction
  labelColumn: label
sinks:
  - {format: console, stream: alerts}
)",
                                "fuzz.yaml", LoadOptions{});
    if (!parsed) std::abort();
    return *parsed;
  }();
  return spec;
}

// Writes a valid encoding of every codec into `dir`, as the harness's input format: the seed
// corpus (tests/fuzz/corpus/state_codecs) is made this way, with
//   DRIFTD_FUZZ_WRITE_SEEDS=tests/fuzz/corpus/state_codecs build-fuzz/tests/fuzz/fuzz_state_codecs
void WriteSeeds(const std::string& dir) {
  int count = 0;
  auto seed = [&](uint8_t codec, std::string_view bytes) {
    std::string input(1, static_cast<char>(codec));
    input.append(bytes);
    std::ofstream(dir + "/seed-" + std::to_string(codec) + "-" + std::to_string(count++),
                  std::ios::binary)
        << input;
  };
  auto keyed = [&](uint8_t codec, const std::string& key, std::string_view value) {
    seed(codec, key + std::string(1, '\0') + std::string(value));
  };
  CommitRecord commit;
  commit.batch_id = 41;
  commit.start = {{"logs-0", 10}, {"logs-1", 7}};
  commit.end = {{"logs-0", 20}, {"logs-1", 9}};
  commit.watermark_us = 1'764'408'000'000'000;
  commit.committed_at_ms = 1'764'408'262'123;
  seed(0, checkpoint_codec::EncodeBatchIdKey(41));
  seed(1, checkpoint_codec::EncodeCommitValue(commit));
  BatchOutput output;
  output.batch_id = 41;
  output.stats_update.columns = {"model_id", "count"};
  output.stats_update.Add("m1", R"({"model_id":"m1","count":3})");
  output.alerts.Add("a1", R"({"alert_id":"a1","level":"ALERT"})");
  output.source_end = commit.end;
  const std::string payload = EncodeBatchOutput(output);
  seed(2, checkpoint_codec::EncodeOutboxValue({"stats", "alerts"}, payload));
  seed(3, payload);
  seed(4, OffsetsToJson(commit.end));
  std::string bytes;
  Moments::FromParts(8, 5, 32, 2, 9, 40).Encode(bytes);
  seed(5, bytes);
  bytes.clear();
  AlertStateMachine().Encode(bytes);
  seed(6, bytes);
  bytes.clear();
  Evaluation evaluation;
  evaluation.model = "m1";
  evaluation.series = "prediction";
  seed(7, EncodeEvaluation(evaluation));
  // Aggregation and drift state as a batch of records leaves them.
  InputChunk chunk;
  for (int i = 0; i < 600; ++i) {  // 300 per model: the baselines freeze at 200
    const std::string record = fmt::format(
        R"({{"model_id":"m{}","event_time":{},"feature_vector":[{},{},1,2],"prediction":{},)"
        R"("label":{},"device":{}}})",
        i % 2, 1'764'408'000'000 + i * 1000, i % 5, i % 3, (i % 10) * 0.1, i % 2,
        i % 11 == 0 ? std::string("null") : fmt::format("\"d{}\"", i % 7));
    chunk.Append(record, RecordPosition{0, i});
  }
  chunk.Seal();
  JsonDecoder decoder(Spec().schema, Spec().source.malformed);
  RecordBatch batch;
  batch.Reset(Spec().schema);
  if (!decoder.Decode(chunk, batch, nullptr)) std::abort();
  RowTimes times;  // no watermark: nothing late
  times.event_us.assign(batch.num_rows, INT64_MIN);
  times.late_before.assign(batch.num_rows, INT64_MIN);
  StatePuts puts;
  std::vector<std::string> deletes;
  auto aggregator = Aggregator::Create(Spec().query, Spec().schema);
  if (!aggregator) std::abort();
  (*aggregator)->Add(batch, times);
  (*aggregator)->EndBatch(INT64_MIN, true, puts, deletes);
  for (const auto& [key, value] : puts) keyed(8, key, value);
  auto stage = DriftStage::Create(Spec());
  if (!stage) std::abort();
  BatchOutput drift_output;
  (*stage)->Process(batch, times, drift_output);
  BatchContext context;
  context.now_ms = 1'764'408'262'123;
  StateChanges changes;
  StageProgress progress;
  (*stage)->Finish(context, drift_output, changes, progress);
  for (const auto& [key, value] : changes.puts) keyed(9, key, value);
  // The status history of that batch, and a point of a series' history.
  HistoryStage history(stage->get(), nullptr);
  StateChanges history_changes;
  history.Finish(context, drift_output, history_changes, progress);
  for (const auto& [key, value] : history_changes.puts) keyed(12, key, value);
  DetectorReading reading;
  reading.detector = "psi";
  reading.statistic = 0.2;
  evaluation.detectors.push_back(reading);
  keyed(12, "p/m1/prediction/0000000000000007", EncodeEvaluation(evaluation, false));
  seed(10, "41\n");
  QuantileSketch sketch(QuantileSketch::KForAccuracy(10));
  for (int i = 0; i < 500; ++i) sketch.Add((i * 37) % 101);
  bytes.clear();
  sketch.Encode(bytes);
  seed(11, bytes);
}

template <typename T>
void Consume(const T& result) {
  if (!result && result.error().message().empty()) std::abort();  // errors say what is wrong
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("DRIFTD_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t codec = data[0] % 13;
  const std::string_view bytes = fuzz::AsText(data + 1, size - 1);
  const size_t split = bytes.find('\0');
  const std::string_view key = bytes.substr(0, split);
  const std::string_view value = split == std::string_view::npos ? "" : bytes.substr(split + 1);
  switch (codec) {
    case 0:
      Consume(checkpoint_codec::DecodeBatchIdKey(bytes));
      break;
    case 1:
      Consume(checkpoint_codec::DecodeCommitValue(bytes));
      break;
    case 2:
      Consume(checkpoint_codec::DecodeOutboxValue(7, bytes));
      break;
    case 3:
      Consume(DecodeBatchOutput(bytes));
      break;
    case 4:
      Consume(OffsetsFromJson(bytes));
      break;
    case 5:
      Consume(Moments::Decode(bytes));
      break;
    case 6:
      Consume(AlertStateMachine::Decode(bytes));
      break;
    case 7:
      Consume(DecodeEvaluation(bytes));
      break;
    case 8: {
      auto aggregator = Aggregator::Create(Spec().query, Spec().schema);
      if (!aggregator) std::abort();
      Consume((*aggregator)->Restore(key, value));
      break;
    }
    case 9: {
      auto stage = DriftStage::Create(Spec());
      if (!stage) std::abort();
      // A layout first, as a checkpoint scan yields it, then the entry.
      Consume((*stage)->Restore("drift-layout", "4,1,1"));
      Consume((*stage)->Restore(key, value));
      Consume((*stage)->FinishRestore());
      break;
    }
    case 10: {
      fuzz::MemoryFile file(bytes);
      Consume(ReadWebhookDeliveryLog(file.path()));
      break;
    }
    case 11: {
      std::string_view in = bytes;
      auto sketch = QuantileSketch::Decode(in);
      Consume(sketch);
      if (sketch) {
        // A sketch that decodes answers and takes more values like any other.
        (void)sketch->Quantile(0.5);
        sketch->Add(1);
      }
      break;
    }
    case 12: {
      HistoryStage history(nullptr, nullptr);
      Consume(history.Restore(key, value));
      Consume(history.FinishRestore());
      break;
    }
  }
  return 0;
}
