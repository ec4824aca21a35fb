// Decoder throughput against simdjson's own limit, measured in one run.
//
//   bench_decode [records=1000000] [repetitions=5]
//
// Generates inference records (model id, ISO event time, 8 features, prediction, label) into
// one InputChunk, then times, interleaved and best-of:
//   raw:        simdjson on-demand iterating every field and reading every value (the limit);
//   find_field: on-demand looking each schema field up by name (the usual alternative design);
//   decoder:    JsonDecoder::Decode of the whole chunk into one RecordBatch;
//   decoder/8k: the same records in chunks of 8192, each into a reused batch.
// Times are the thread's CPU time (on a busy machine wall time counts other processes' turns).
// Prints records/s and MB/s of each, decoder/raw, and the heap allocations per record that
// Decode makes in steady state (counted by replacing operator new in this program).
//
// Then the named-feature records of inference logs as they really come (a segment object, 15
// numeric features in a map<string,double>, 5 categorical ones in a map<string,string>, keys in
// a varying order), decoded against that schema beside raw on-demand parsing of the same bytes.
//
// Then the same logical records (the JSON decoder's output, re-encoded) as Avro binary of an
// .avsc schema (event_time a timestamp-millis long) and as Protobuf messages of
// tests/connectors/data/inference.proto (event_time a google.protobuf.Timestamp), each decoded
// by its value format in chunks of 8192 like decoder/8k; prints their rates and their ratio to
// the JSON decoder's, all measured in this run, and checks that all three decode the same values.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <simdjson.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "connectors/registry.h"
#include "engine/json_decoder.h"
#include "tests/support/avro_records.h"

namespace {

std::atomic<int64_t> g_allocations{0};

}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // malloc/free pair, as replaced here
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

using driftd::FieldType;
namespace ondemand = simdjson::ondemand;
using Clock = std::chrono::steady_clock;

driftd::Schema InferenceSchema() {
  driftd::Schema schema;
  schema.fields = {
      {"model_id", FieldType::kString, false},
      {"event_time", FieldType::kTimestamp, true},
      {"feature_vector", FieldType::kDoubleArray, true},
      {"prediction", FieldType::kDouble, true},
      {"ground_truth", FieldType::kDouble, true},
  };
  return schema;
}

void Generate(size_t count, driftd::InputChunk& chunk) {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> feature(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::string record;
  for (size_t i = 0; i < count; ++i) {
    const int64_t ms = static_cast<int64_t>(i) * 37;
    record = fmt::format(
        R"({{"model_id":"model-{}","event_time":"2026-11-29T{:02}:{:02}:{:02}.{:03}Z","feature_vector":[)",
        rng() % 10, 10 + ms / 3'600'000 % 12, ms / 60'000 % 60, ms / 1000 % 60, ms % 1000);
    for (int f = 0; f < 8; ++f) {
      if (f > 0) record += ',';
      record += fmt::format("{:.6f}", feature(rng));
    }
    const double prediction = unit(rng);
    record += fmt::format(R"(],"prediction":{:.4f},"ground_truth":{:.1f}}})", prediction,
                          unit(rng) < prediction ? 1.0 : 0.0);
    chunk.Append(record, {0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
}

// The parse limit: every field visited once, every number and string read. Not inlined, so that
// a profiler (valgrind --tool=callgrind --toggle-collect=...) can tell the variants apart.
[[gnu::noinline]] double RawParse(const driftd::InputChunk& chunk, ondemand::parser& parser) {
  double checksum = 0;
  const std::string& bytes = chunk.bytes();
  for (const auto& record : chunk.records()) {
    ondemand::document doc;
    if (parser.iterate(bytes.data() + record.begin, record.size, bytes.capacity() - record.begin)
            .get(doc)) {
      std::abort();
    }
    ondemand::object object;
    if (doc.get_object().get(object)) std::abort();
    for (auto field_result : object) {
      ondemand::field field;
      if (std::move(field_result).get(field)) std::abort();
      ondemand::value value = field.value();
      ondemand::json_type type;
      if (value.type().get(type)) std::abort();
      switch (type) {
        case ondemand::json_type::number: {
          double d = 0;
          if (value.get_double().get(d)) std::abort();
          checksum += d;
          break;
        }
        case ondemand::json_type::string: {
          std::string_view s;
          if (value.get_string().get(s)) std::abort();
          checksum += static_cast<double>(s.size());
          break;
        }
        case ondemand::json_type::array: {
          ondemand::array array;
          if (value.get_array().get(array)) std::abort();
          for (auto element : array) {
            double d = 0;
            if (element.get_double().get(d)) std::abort();
            checksum += d;
          }
          break;
        }
        default:
          std::abort();
      }
    }
  }
  return checksum;
}

// The same values fetched with find_field per schema field, in schema order.
[[gnu::noinline]] double FindFieldParse(const driftd::InputChunk& chunk, ondemand::parser& parser) {
  double checksum = 0;
  const std::string& bytes = chunk.bytes();
  for (const auto& record : chunk.records()) {
    ondemand::document doc;
    if (parser.iterate(bytes.data() + record.begin, record.size, bytes.capacity() - record.begin)
            .get(doc)) {
      std::abort();
    }
    ondemand::object object;
    if (doc.get_object().get(object)) std::abort();
    std::string_view s;
    if (object.find_field_unordered("model_id").get_string().get(s)) std::abort();
    checksum += static_cast<double>(s.size());
    if (object.find_field_unordered("event_time").get_string().get(s)) std::abort();
    checksum += static_cast<double>(s.size());
    ondemand::array array;
    if (object.find_field_unordered("feature_vector").get_array().get(array)) std::abort();
    for (auto element : array) {
      double d = 0;
      if (element.get_double().get(d)) std::abort();
      checksum += d;
    }
    double d = 0;
    if (object.find_field_unordered("prediction").get_double().get(d)) std::abort();
    checksum += d;
    if (object.find_field_unordered("ground_truth").get_double().get(d)) std::abort();
    checksum += d;
  }
  return checksum;
}

constexpr std::string_view kAvroSchema = R"({"type": "record", "name": "Inference",
  "fields": [
    {"name": "model_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "feature_vector", "type": {"type": "array", "items": "double"}},
    {"name": "prediction", "type": "double"},
    {"name": "ground_truth", "type": "double"}]})";

std::vector<double> ArrayOf(const driftd::Column& column, size_t row) {
  return std::vector<double>(column.ArrayData(row), column.ArrayData(row) + column.ArraySize(row));
}

void EncodeAvro(const driftd::RecordBatch& batch, driftd::InputChunk& out) {
  driftd::testing::AvroRecordWriter writer(kAvroSchema);
  for (size_t row = 0; row < batch.num_rows; ++row) {
    out.Append(writer.Write({{"model_id", std::string(batch.columns[0].String(row))},
                             {"event_time", batch.columns[1].i64[row] / 1000},
                             {"feature_vector", ArrayOf(batch.columns[2], row)},
                             {"prediction", batch.columns[3].f64[row]},
                             {"ground_truth", batch.columns[4].f64[row]}}),
               batch.positions[row]);
  }
  out.Seal();
}

void EncodeProtobuf(const driftd::RecordBatch& batch, driftd::InputChunk& out) {
  namespace pb = google::protobuf;
  std::ifstream in(DRIFTD_TEST_DESCRIPTOR, std::ios::binary);
  pb::FileDescriptorSet set;
  if (!set.ParseFromIstream(&in)) std::abort();
  pb::DescriptorPool pool;
  for (const auto& file : set.file()) {
    if (pool.BuildFile(file) == nullptr) std::abort();
  }
  const pb::Descriptor* type = pool.FindMessageTypeByName("driftd.test.Inference");
  pb::DynamicMessageFactory factory(&pool);
  std::unique_ptr<pb::Message> m(factory.GetPrototype(type)->New());
  const pb::Reflection& r = *m->GetReflection();
  std::string bytes;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    m->Clear();
    r.SetString(m.get(), type->FindFieldByName("model_id"),
                std::string(batch.columns[0].String(row)));
    pb::Message* stamp = r.MutableMessage(m.get(), type->FindFieldByName("event_time"));
    const int64_t us = batch.columns[1].i64[row];
    stamp->GetReflection()->SetInt64(stamp, stamp->GetDescriptor()->FindFieldByName("seconds"),
                                     us / 1'000'000);
    stamp->GetReflection()->SetInt32(stamp, stamp->GetDescriptor()->FindFieldByName("nanos"),
                                     static_cast<int32_t>(us % 1'000'000 * 1000));
    for (double f : ArrayOf(batch.columns[2], row)) {
      r.AddDouble(m.get(), type->FindFieldByName("feature_vector"), f);
    }
    r.SetDouble(m.get(), type->FindFieldByName("prediction"), batch.columns[3].f64[row]);
    r.SetDouble(m.get(), type->FindFieldByName("ground_truth"), batch.columns[4].f64[row]);
    bytes.clear();
    m->SerializeToString(&bytes);
    out.Append(bytes, batch.positions[row]);
  }
  out.Seal();
}

// Every value of a decoded batch folded into one number, to check that formats agree.
double Checksum(const driftd::RecordBatch& batch) {
  double sum = 0;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    sum += static_cast<double>(batch.columns[0].String(row).size()) +
           static_cast<double>(batch.columns[1].i64[row] % 1'000'000'000) * 1e-9 +
           batch.columns[3].f64[row] + batch.columns[4].f64[row];
    for (size_t k = 0; k < batch.columns[2].ArraySize(row); ++k) {
      sum += batch.columns[2].ArrayData(row)[k];
    }
  }
  return sum;
}

std::unique_ptr<driftd::ValueDecoder> FormatDecoder(const char* format,
                                                    std::map<std::string, std::string> given,
                                                    const driftd::Schema& schema,
                                                    const driftd::MalformedSpec& spec) {
  const driftd::ValueFormatDecl* decl = driftd::FindValueFormat(driftd::ValueFormats(), format);
  driftd::Options options;
  for (const auto& option : decl->options) {
    if (!option.default_value.empty()) options.Set(option.name, option.default_value);
  }
  for (auto& [name, value] : given) options.Set(name, value);
  auto decoder = BindAndCreateDecoder(*decl, schema, spec, options);
  if (!decoder) {
    fmt::print(stderr, "{}: {}: {}\n", format, decoder.error().option, decoder.error().message);
    std::exit(1);
  }
  return std::move(*decoder);
}

// Named-feature records: {"model_id", "event_time", "segment": {"country", "channel"},
// "features": {15 numbers, one null in 50}, "categories": {5 strings}, "prediction"}, the
// features listed in one of two orders.
void GenerateNamed(size_t count, driftd::InputChunk& chunk) {
  std::mt19937_64 rng(43);
  std::normal_distribution<double> feature(0.0, 1.0);
  const char* const countries[] = {"DE", "FR", "US", "GB"};
  const char* const channels[] = {"app", "web"};
  const char* const devices[] = {"ios", "android", "web"};
  std::string record;
  for (size_t i = 0; i < count; ++i) {
    const int64_t ms = static_cast<int64_t>(i) * 37;
    record = fmt::format(
        R"({{"model_id":"model-{}","event_time":"2026-11-29T{:02}:{:02}:{:02}.{:03}Z",)"
        R"("segment":{{"country":"{}","channel":"{}"}},"features":{{)",
        rng() % 8, 10 + ms / 3'600'000 % 12, ms / 60'000 % 60, ms / 1000 % 60, ms % 1000,
        countries[rng() % 4], channels[rng() % 2]);
    const bool reversed = rng() % 2 == 0;
    for (int k = 0; k < 15; ++k) {
      const int f = reversed ? 14 - k : k;
      if (k > 0) record += ',';
      if (rng() % 50 == 0) {
        record += fmt::format(R"("feature_{:02}":null)", f);
      } else {
        record += fmt::format(R"("feature_{:02}":{:.6f})", f, feature(rng));
      }
    }
    record += fmt::format(
        R"(}},"categories":{{"merchant_category":"{}","device":"{}","currency":"EUR",)"
        R"("card_type":"{}","os_version":"{}"}},"prediction":{:.4f}}})",
        5400 + rng() % 20, devices[rng() % 3], rng() % 2 ? "debit" : "credit", 14 + rng() % 4,
        feature(rng));
    chunk.Append(record, {0, static_cast<int64_t>(i)});
  }
  chunk.Seal();
}

driftd::Schema NamedSchema() {
  driftd::Schema schema;
  auto add = [&](const char* name, const char* type) {
    auto spec = driftd::ParseTypeSpec(type);
    if (!spec) std::abort();
    driftd::AddDeclaredField(schema, name, *spec, true);
  };
  add("model_id", "string");
  add("event_time", "timestamp");
  add("segment", "struct<country:string,channel:string>");
  add("features", "map<string,double>");
  add("categories", "map<string,string>");
  add("prediction", "double");
  return schema;
}

// The parse limit for the named records: every value of the record and of its objects read.
[[gnu::noinline]] double RawParseNested(const driftd::InputChunk& chunk, ondemand::parser& parser) {
  double checksum = 0;
  const std::string& bytes = chunk.bytes();
  auto read = [&](ondemand::value value, auto& self) -> void {
    ondemand::json_type type;
    if (value.type().get(type)) std::abort();
    switch (type) {
      case ondemand::json_type::number: {
        double d = 0;
        if (value.get_double().get(d)) std::abort();
        checksum += d;
        break;
      }
      case ondemand::json_type::string: {
        std::string_view s;
        if (value.get_string().get(s)) std::abort();
        checksum += static_cast<double>(s.size());
        break;
      }
      case ondemand::json_type::null: {
        bool is_null = false;
        if (value.is_null().get(is_null)) std::abort();
        break;
      }
      case ondemand::json_type::object: {
        ondemand::object object;
        if (value.get_object().get(object)) std::abort();
        for (auto field_result : object) {
          ondemand::field field;
          if (std::move(field_result).get(field)) std::abort();
          std::string_view key;
          if (field.unescaped_key().get(key)) std::abort();
          checksum += static_cast<double>(key.size());
          self(field.value(), self);
        }
        break;
      }
      default:
        std::abort();
    }
  };
  for (const auto& record : chunk.records()) {
    ondemand::document doc;
    if (parser.iterate(bytes.data() + record.begin, record.size, bytes.capacity() - record.begin)
            .get(doc)) {
      std::abort();
    }
    ondemand::object object;
    if (doc.get_object().get(object)) std::abort();
    for (auto field_result : object) {
      ondemand::field field;
      if (std::move(field_result).get(field)) std::abort();
      read(field.value(), read);
    }
  }
  return checksum;
}

struct Best {
  double seconds = 1e300;
  void Add(double s) { seconds = std::min(seconds, s); }
};

// The CPU time of this thread: on a shared machine, time slices given to other processes do
// not count, so the ratios hold under load (caches shared with them still do).
double ThreadSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

template <typename F>
double Time(F&& f) {
  const double start = ThreadSeconds();
  f();
  return ThreadSeconds() - start;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 5;
  if (count == 0 || repetitions <= 0) {
    std::fprintf(stderr, "usage: bench_decode [records] [repetitions]\n");
    return 2;
  }

  driftd::InputChunk chunk;
  Generate(count, chunk);
  const double megabytes = static_cast<double>(chunk.byte_size()) / 1e6;
  fmt::print("{} records, {:.1f} MB, {:.0f} bytes/record, simdjson kernel {}\n", count, megabytes,
             static_cast<double>(chunk.byte_size()) / static_cast<double>(count),
             simdjson::get_active_implementation()->name());

  const driftd::Schema schema = InferenceSchema();
  driftd::MalformedSpec spec;
  spec.policy = driftd::MalformedPolicy::kFail;
  driftd::JsonDecoder decoder(schema, spec);
  driftd::RecordBatch batch;
  ondemand::parser parser;

  // The same records split into executor-sized chunks, each decoded into a reused batch: the
  // batch then stays in cache, as it does when the executor consumes batch after batch.
  constexpr size_t kChunkRecords = 8192;
  std::vector<driftd::InputChunk> chunks((count + kChunkRecords - 1) / kChunkRecords);
  for (size_t i = 0; i < count; ++i) {
    chunks[i / kChunkRecords].Append(chunk.record(i), chunk.records()[i].position);
  }
  for (auto& part : chunks) part.Seal();
  driftd::RecordBatch small_batch;

  Best raw, find_field, decode, decode_chunked;
  double raw_sum = 0, find_sum = 0;
  int64_t steady_allocations = 0;  // most allocations of any repetition after the first
  auto decode_into = [&](const driftd::InputChunk& input, driftd::RecordBatch& out) {
    if (const driftd::Status status = decoder.Decode(input, out, nullptr); !status) {
      fmt::print(stderr, "decode failed: {}\n", status.error().message());
      std::exit(1);
    }
  };
  for (int rep = 0; rep < repetitions; ++rep) {
    raw.Add(Time([&] { raw_sum = RawParse(chunk, parser); }));
    find_field.Add(Time([&] { find_sum = FindFieldParse(chunk, parser); }));
    batch.Reset(schema);
    const int64_t before = g_allocations.load();
    decode.Add(Time([&] { decode_into(chunk, batch); }));
    if (rep > 0) steady_allocations = std::max(steady_allocations, g_allocations.load() - before);
    const int64_t before_chunked = g_allocations.load();
    decode_chunked.Add(Time([&] {
      for (const auto& part : chunks) {
        small_batch.Reset(schema);
        decode_into(part, small_batch);
      }
    }));
    if (rep > 0) {
      steady_allocations = std::max(steady_allocations, g_allocations.load() - before_chunked);
    }
  }
  if (batch.num_rows != count) {
    fmt::print(stderr, "decoded {} rows of {}\n", batch.num_rows, count);
    return 1;
  }
  auto report = [&](const char* name, const Best& best) {
    fmt::print("{:<11} {:>8.3f} s  {:>6.2f} M records/s  {:>7.1f} MB/s\n", name, best.seconds,
               static_cast<double>(count) / best.seconds / 1e6, megabytes / best.seconds);
  };
  fmt::print("best of {} interleaved repetitions (thread CPU time):\n", repetitions);
  report("raw", raw);
  report("find_field", find_field);
  report("decoder", decode);
  report("decoder/8k", decode_chunked);
  fmt::print("decoder/raw        {:.2f}  (target >= 0.80)\n", raw.seconds / decode.seconds);
  fmt::print("decoder/8k/raw     {:.2f}  (in chunks of {} records)\n",
             raw.seconds / decode_chunked.seconds, kChunkRecords);
  fmt::print("find_field/raw     {:.2f}\n", raw.seconds / find_field.seconds);
  if (repetitions > 1) {
    fmt::print("decoder heap allocations in steady state: {} ({:.4f} per record)\n",
               steady_allocations,
               static_cast<double>(steady_allocations) / static_cast<double>(count));
  }
  // The decoder's columns must hold what the raw pass read.
  double decoded_sum = 0;
  for (size_t row = 0; row < batch.num_rows; ++row) {
    decoded_sum += static_cast<double>(batch.columns[0].String(row).size()) + 24 +
                   batch.columns[3].f64[row] + batch.columns[4].f64[row];
    for (size_t k = 0; k < batch.columns[2].ArraySize(row); ++k) {
      decoded_sum += batch.columns[2].ArrayData(row)[k];
    }
  }
  const double tolerance = 1e-6 * static_cast<double>(count);
  if (std::abs(decoded_sum - raw_sum) > tolerance || std::abs(find_sum - raw_sum) > tolerance) {
    fmt::print(stderr, "checksums differ: raw {} find_field {} decoder {}\n", raw_sum, find_sum,
               decoded_sum);
    return 1;
  }

  // The same logical records as Avro and Protobuf, decoded by their value formats in the same
  // 8k chunks as decoder/8k; JSON timed again, interleaved with them.
  driftd::InputChunk avro_all;
  driftd::InputChunk protobuf_all;
  EncodeAvro(batch, avro_all);
  EncodeProtobuf(batch, protobuf_all);
  auto split = [&](const driftd::InputChunk& all) {
    std::vector<driftd::InputChunk> parts((count + kChunkRecords - 1) / kChunkRecords);
    for (size_t i = 0; i < count; ++i) {
      parts[i / kChunkRecords].Append(all.record(i), all.records()[i].position);
    }
    for (auto& part : parts) part.Seal();
    return parts;
  };
  const auto avro_chunks = split(avro_all);
  const auto protobuf_chunks = split(protobuf_all);
  char avsc[] = "/tmp/bench_decode-XXXXXX.avsc";
  const int fd = mkstemps(avsc, 5);
  if (fd < 0 || write(fd, kAvroSchema.data(), kAvroSchema.size()) !=
                    static_cast<ssize_t>(kAvroSchema.size())) {
    std::perror("writing the .avsc");
    return 1;
  }
  close(fd);
  auto avro = FormatDecoder("avro", {{"schemaFile", avsc}}, schema, spec);
  auto protobuf = FormatDecoder(
      "protobuf",
      {{"descriptorFile", DRIFTD_TEST_DESCRIPTOR}, {"messageType", "driftd.test.Inference"}},
      schema, spec);
  unlink(avsc);

  Best json_8k, avro_8k, protobuf_8k;
  double json_sum = 0, avro_sum = 0, protobuf_sum = 0;
  auto run_chunks = [&](driftd::ValueDecoder& d, const std::vector<driftd::InputChunk>& parts,
                        double* sum) {
    *sum = 0;
    for (const auto& part : parts) {
      small_batch.Reset(schema);
      if (const driftd::Status status = d.Decode(part, small_batch, nullptr); !status) {
        fmt::print(stderr, "decode failed: {}\n", status.error().message());
        std::exit(1);
      }
      *sum += Checksum(small_batch);
    }
  };
  for (int rep = 0; rep < repetitions; ++rep) {
    json_8k.Add(Time([&] { run_chunks(decoder, chunks, &json_sum); }));
    avro_8k.Add(Time([&] { run_chunks(*avro, avro_chunks, &avro_sum); }));
    protobuf_8k.Add(Time([&] { run_chunks(*protobuf, protobuf_chunks, &protobuf_sum); }));
  }
  auto report_format = [&](const char* name, const Best& best, const driftd::InputChunk& all) {
    const double mb = static_cast<double>(all.byte_size()) / 1e6;
    fmt::print("{:<11} {:>8.3f} s  {:>6.2f} M records/s  {:>7.1f} MB/s  {:>4.0f} bytes/record\n",
               name, best.seconds, static_cast<double>(count) / best.seconds / 1e6,
               mb / best.seconds, static_cast<double>(all.byte_size()) / static_cast<double>(count));
  };
  fmt::print("the same records by value format, in chunks of {} (best of {}, interleaved; checksum"
             " included):\n",
             kChunkRecords, repetitions);
  report_format("json", json_8k, chunk);
  report_format("avro", avro_8k, avro_all);
  report_format("protobuf", protobuf_8k, protobuf_all);
  fmt::print("avro/json          {:.2f}  (records/s)\n", json_8k.seconds / avro_8k.seconds);
  fmt::print("protobuf/json      {:.2f}  (records/s)\n", json_8k.seconds / protobuf_8k.seconds);
  if (std::abs(avro_sum - json_sum) > tolerance || std::abs(protobuf_sum - json_sum) > tolerance) {
    fmt::print(stderr, "formats decode different values: json {} avro {} protobuf {}\n", json_sum,
               avro_sum, protobuf_sum);
    return 1;
  }

  // Named features: a struct and two maps per record.
  driftd::InputChunk named_all;
  GenerateNamed(count, named_all);
  std::vector<driftd::InputChunk> named_chunks = split(named_all);
  const driftd::Schema named_schema = NamedSchema();
  driftd::JsonDecoder named_decoder(named_schema, spec);
  Best named_raw, named_8k;
  int64_t named_allocations = 0;
  size_t named_rows = 0;
  size_t named_entries = 0;
  for (int rep = 0; rep < repetitions; ++rep) {
    named_raw.Add(Time([&] { raw_sum = RawParseNested(named_all, parser); }));
    const int64_t before = g_allocations.load();
    named_8k.Add(Time([&] {
      named_rows = 0;
      named_entries = 0;
      for (const auto& part : named_chunks) {
        small_batch.Reset(named_schema);
        if (const driftd::Status status = named_decoder.Decode(part, small_batch, nullptr);
            !status) {
          fmt::print(stderr, "decode failed: {}\n", status.error().message());
          std::exit(1);
        }
        named_rows += small_batch.num_rows;
        named_entries += small_batch.columns[4].NumEntries() + small_batch.columns[5].NumEntries();
      }
    }));
    if (rep > 0) named_allocations = std::max(named_allocations, g_allocations.load() - before);
  }
  if (named_rows != count || named_entries != 20 * count) {
    fmt::print(stderr, "named features: {} rows, {} map entries of {} records\n", named_rows,
               named_entries, count);
    return 1;
  }
  fmt::print("named features (segment struct, 15 numeric and 5 categorical map entries), best of {}:\n",
             repetitions);
  report_format("raw", named_raw, named_all);
  report_format("decoder/8k", named_8k, named_all);
  fmt::print("named/raw          {:.2f}  (decoder in 8k chunks against raw parsing)\n",
             named_raw.seconds / named_8k.seconds);
  fmt::print("named/json         {:.2f}  (records/s against the 8-feature records above)\n",
             json_8k.seconds / named_8k.seconds);
  if (repetitions > 1) {
    fmt::print("named decoder heap allocations in steady state: {} ({:.4f} per record)\n",
               named_allocations, static_cast<double>(named_allocations) / static_cast<double>(count));
  }
  return 0;
}
