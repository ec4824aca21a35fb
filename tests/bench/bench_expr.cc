// The cost of query.where and derived columns next to decoding, measured in one run.
//
//   bench_expr [records=1000000] [repetitions=5]
//
// Generates inference records (model id, version, ISO event time, 8 features, prediction,
// label), decodes them in chunks of 8192 into a reused batch, and times, interleaved and
// best-of:
//   decode:          JsonDecoder::Decode alone;
//   decode+project:  the same, then a Projection with
//                      where:  model_version != 'shadow' AND prediction IS NOT NULL
//                      select: abs(prediction - ground_truth) AS abs_error,
//                              CASE WHEN prediction >= 0.5 THEN 1 ELSE 0 END AS predicted
//   project:         the projection alone on already decoded chunks.
// Prints records/s of each and the projection's share of decode+project.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/expr/projection.h"
#include "engine/json_decoder.h"

namespace {

using driftd::FieldType;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkRecords = 8192;

driftd::PipelineSpec Spec() {
  driftd::PipelineSpec spec;
  spec.schema.fields = {
      {"model_id", FieldType::kString, false},       {"model_version", FieldType::kString, true},
      {"event_time", FieldType::kTimestamp, true},   {"feature_vector", FieldType::kDoubleArray, true},
      {"prediction", FieldType::kDouble, true},      {"ground_truth", FieldType::kDouble, true},
  };
  spec.query.where = "model_version != 'shadow' AND prediction IS NOT NULL";
  spec.query.derived = {
      {"abs_error", "abs(prediction - ground_truth) AS abs_error", FieldType::kDouble, {}},
      {"predicted", "CASE WHEN prediction >= 0.5 THEN 1 ELSE 0 END AS predicted",
       FieldType::kLong, {}},
  };
  return spec;
}

std::vector<driftd::InputChunk> Generate(size_t count) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<driftd::InputChunk> chunks;
  std::string record;
  for (size_t i = 0; i < count; ++i) {
    if (i % kChunkRecords == 0) chunks.emplace_back();
    record = fmt::format(R"({{"model_id":"model-{}","model_version":"{}",)"
                         R"("event_time":"2026-11-29T10:{:02}:{:02}.{:03}Z","feature_vector":[)",
                         i % 8, i % 4 == 0 ? "shadow" : "v7", i / 60'000 % 60, i / 1000 % 60,
                         i % 1000);
    for (int f = 0; f < 8; ++f) record += fmt::format("{}{:.6f}", f ? "," : "", uniform(rng));
    const double prediction = uniform(rng);
    record += fmt::format(R"(],"prediction":{:.6f},"ground_truth":{}}})", prediction,
                          uniform(rng) < prediction ? "1.0" : "0.0");
    chunks.back().Append(record, {0, static_cast<int64_t>(i)});
  }
  for (auto& chunk : chunks) chunk.Seal();
  return chunks;
}

template <typename F>
double Time(F&& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 5;
  if (count == 0 || repetitions <= 0) {
    std::fprintf(stderr, "usage: bench_expr [records] [repetitions]\n");
    return 2;
  }
  const driftd::PipelineSpec spec = Spec();
  const std::vector<driftd::InputChunk> chunks = Generate(count);
  driftd::MalformedSpec malformed;
  malformed.policy = driftd::MalformedPolicy::kFail;
  driftd::JsonDecoder decoder(spec.schema, malformed);
  auto projection = driftd::Projection::Create(spec);
  if (!projection) {
    std::fprintf(stderr, "%s\n", projection.error().message().c_str());
    return 1;
  }
  driftd::RecordBatch batch;
  std::vector<driftd::RecordBatch> decoded(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    decoded[i].Reset(spec.schema);
    if (!decoder.Decode(chunks[i], decoded[i], nullptr)) std::abort();
  }

  double decode = 1e300, both = 1e300, project = 1e300;
  int64_t kept = 0;
  for (int r = 0; r < repetitions; ++r) {
    decode = std::min(decode, Time([&] {
      for (const auto& chunk : chunks) {
        batch.Reset(spec.schema);
        if (!decoder.Decode(chunk, batch, nullptr)) std::abort();
      }
    }));
    both = std::min(both, Time([&] {
      kept = 0;
      for (const auto& chunk : chunks) {
        batch.Reset(spec.schema);
        if (!decoder.Decode(chunk, batch, nullptr)) std::abort();
        (*projection)->Apply(batch);
        kept += static_cast<int64_t>(batch.num_rows);
      }
    }));
    std::vector<driftd::RecordBatch> copies = decoded;  // Apply filters in place
    project = std::min(project, Time([&] {
      for (auto& copy : copies) (*projection)->Apply(copy);
    }));
  }
  const double n = static_cast<double>(count);
  fmt::print("{} records in chunks of {}; {} kept by the filter\n", count, kChunkRecords, kept);
  fmt::print("decode          {:>12.0f} records/s\n", n / decode);
  fmt::print("decode+project  {:>12.0f} records/s\n", n / both);
  fmt::print("project         {:>12.0f} records/s ({:.1f} ns/record)\n", n / project,
             project / n * 1e9);
  fmt::print("projection share of decode+project: {:.1f}%  (decode+project / decode = {:.3f})\n",
             100.0 * project / both, both / decode);
  return 0;
}
