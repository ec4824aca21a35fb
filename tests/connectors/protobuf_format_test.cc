// The protobuf value format: messages of a type from a descriptor set (tests/connectors/data/
// inference.proto, compiled by protoc at build time), malformed bytes routed by policy.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>

#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "connectors/registry.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

namespace pb = google::protobuf;

// Builds test messages from the same descriptor set the decoder reads.
class Messages {
 public:
  Messages() {
    std::ifstream in(DRIFTD_TEST_DESCRIPTOR, std::ios::binary);
    pb::FileDescriptorSet set;
    REQUIRE(set.ParseFromIstream(&in));
    for (const auto& file : set.file()) REQUIRE(pool_.BuildFile(file) != nullptr);
    type_ = pool_.FindMessageTypeByName("driftd.test.Inference");
    REQUIRE(type_ != nullptr);
    message_.reset(factory_.GetPrototype(type_)->New());
  }

  pb::Message& New() {
    message_->Clear();
    return *message_;
  }
  const pb::FieldDescriptor* Field(const char* name) const { return type_->FindFieldByName(name); }
  const pb::Reflection& r() const { return *message_->GetReflection(); }

  std::string Inference(const std::string& model, int64_t seconds, std::vector<double> features,
                        std::optional<double> prediction, const std::string& version = "v1") {
    pb::Message& m = New();
    const pb::Reflection& ref = r();
    ref.SetString(&m, Field("model_id"), model);
    pb::Message* stamp = ref.MutableMessage(&m, Field("event_time"));
    stamp->GetReflection()->SetInt64(stamp, stamp->GetDescriptor()->FindFieldByName("seconds"),
                                     seconds);
    stamp->GetReflection()->SetInt32(stamp, stamp->GetDescriptor()->FindFieldByName("nanos"),
                                     250'000'000);
    for (double f : features) ref.AddDouble(&m, Field("feature_vector"), f);
    if (prediction) ref.SetDouble(&m, Field("prediction"), *prediction);
    ref.SetString(&m, Field("model_version"), version);
    return m.SerializeAsString();
  }

 private:
  pb::DescriptorPool pool_;
  pb::DynamicMessageFactory factory_{&pool_};
  const pb::Descriptor* type_ = nullptr;
  std::unique_ptr<pb::Message> message_;
};

Schema PipelineSchema() {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false},
                   {"event_time", FieldType::kTimestamp, true},
                   {"feature_vector", FieldType::kDoubleArray, true},
                   {"prediction", FieldType::kDouble, true},
                   {"model_version", FieldType::kString, true}};
  return schema;
}

ValueDecoderResult Create(const std::map<std::string, std::string>& given,
                          MalformedPolicy policy = MalformedPolicy::kDrop,
                          const Schema& schema = PipelineSchema()) {
  const ValueFormatDecl* decl = FindValueFormat(ValueFormats(), "protobuf");
  REQUIRE(decl != nullptr);
  Options options;
  for (const auto& [name, value] : given) options.Set(name, value);
  MalformedSpec spec;
  spec.policy = policy;
  return BindAndCreateDecoder(*decl, schema, spec, options);
}

std::unique_ptr<ValueDecoder> MakeDecoder(MalformedPolicy policy) {
  auto decoder = Create({{"descriptorFile", DRIFTD_TEST_DESCRIPTOR},
                         {"messageType", "driftd.test.Inference"}},
                        policy);
  if (!decoder) FAIL(decoder.error().option << ": " << decoder.error().message);
  return std::move(*decoder);
}

struct Decoded {
  RecordBatch batch;
  std::vector<DeadLetter> dead;
  Status status = Ok();
};

Decoded DecodeAll(ValueDecoder& decoder, const std::vector<std::string>& records) {
  InputChunk chunk;
  for (size_t i = 0; i < records.size(); ++i) {
    chunk.Append(records[i], RecordPosition{2, static_cast<int64_t>(100 + i)});
  }
  chunk.Seal();
  Decoded out;
  out.batch.Reset(decoder.schema());
  out.status = decoder.Decode(chunk, out.batch, &out.dead);
  return out;
}

TEST_CASE("Protobuf messages from a descriptor set decode into the pipeline's columns",
          "[format][protobuf]") {
  Messages messages;
  auto decoder = MakeDecoder(MalformedPolicy::kFail);
  auto decoded = DecodeAll(*decoder, {messages.Inference("m-1", 1'764'590'400, {0.5, 2}, 0.75),
                                      messages.Inference("m-2", 1'764'590'401, {}, std::nullopt,
                                                         "")});
  REQUIRE(decoded.status);
  const RecordBatch& b = decoded.batch;
  REQUIRE(b.num_rows == 2);
  CHECK(b.columns[0].String(0) == "m-1");
  CHECK(b.columns[1].i64[0] == 1'764'590'400'250'000);  // google.protobuf.Timestamp
  REQUIRE(b.columns[2].ArraySize(0) == 2);
  CHECK(b.columns[2].ArrayData(0)[1] == 2.0);
  CHECK(b.columns[3].f64[0] == 0.75);
  CHECK(b.columns[4].String(0) == "v1");
  CHECK(b.columns[3].IsNull(1));        // optional and not set: null
  CHECK_FALSE(b.columns[4].IsNull(1));  // proto3 without presence: its default, ""
  CHECK(b.columns[4].String(1).empty());
}

TEST_CASE("malformed Protobuf bytes are counted and routed by the same policies as JSON",
          "[format][protobuf]") {
  Messages messages;
  const std::string good = messages.Inference("m-1", 1000, {1, 2, 3}, 0.5);
  const std::string cut = good.substr(0, good.size() - 3);
  const std::string garbage = "\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";
  const std::vector<std::string> records = {good, cut, garbage, good};

  SECTION("drop") {
    auto decoder = MakeDecoder(MalformedPolicy::kDrop);
    auto decoded = DecodeAll(*decoder, records);
    REQUIRE(decoded.status);
    CHECK(decoded.batch.num_rows == 2);
    CHECK(decoded.batch.positions[1].offset == 103);
    CHECK(decoder->counts()[MalformedReason::kUndecodable] == 2);
  }
  SECTION("dead_letter") {
    auto decoder = MakeDecoder(MalformedPolicy::kDeadLetter);
    auto decoded = DecodeAll(*decoder, records);
    REQUIRE(decoded.status);
    REQUIRE(decoded.dead.size() == 2);
    CHECK(decoded.dead[0].raw == cut);
    CHECK(decoded.dead[0].position.partition == 2);
    CHECK(decoded.dead[0].position.offset == 101);
    CHECK(decoded.dead[1].raw == garbage);
    CHECK_THAT(decoded.dead[1].detail, Catch::Contains("driftd.test.Inference"));
  }
  SECTION("fail") {
    auto decoder = MakeDecoder(MalformedPolicy::kFail);
    auto decoded = DecodeAll(*decoder, records);
    REQUIRE_FALSE(decoded.status);
    CHECK_THAT(decoded.status.error().message(),
               Catch::StartsWith("malformed record at partition 2 offset 101: undecodable"));
  }
  SECTION("an empty message is empty, like an empty JSON record") {
    auto decoder = MakeDecoder(MalformedPolicy::kDeadLetter);
    // model_id has no presence in proto3: unset it is "", which is a value; an empty message
    // is "empty" like an empty JSON record.
    auto decoded = DecodeAll(*decoder, {""});
    REQUIRE(decoded.dead.size() == 1);
    CHECK(decoded.dead[0].reason == MalformedReason::kEmpty);
  }
}

TEST_CASE("bad protobuf options name the option and say what is wrong", "[format][protobuf]") {
  testing::TempDir dir;
  auto problem = [](const ValueDecoderResult& r) {
    return r ? std::string() : r.error().option + ": " + r.error().message;
  };
  CHECK_THAT(problem(Create({{"descriptorFile", dir / "none.desc"},
                             {"messageType", "driftd.test.Inference"}})),
             Catch::StartsWith("descriptorFile: cannot read"));
  testing::WriteFile(dir / "bad.desc", "this is not a descriptor set");
  CHECK_THAT(problem(Create({{"descriptorFile", dir / "bad.desc"},
                             {"messageType", "driftd.test.Inference"}})),
             Catch::StartsWith("descriptorFile: ") && Catch::Contains("not a Protobuf descriptor"));
  CHECK_THAT(problem(Create({{"descriptorFile", DRIFTD_TEST_DESCRIPTOR},
                             {"messageType", "Inference"}})),
             Catch::StartsWith("messageType: ") &&
                 Catch::Contains("no message type 'Inference'") &&
                 Catch::Contains("driftd.test.Inference"));
  Schema wrong;
  wrong.fields = {{"model_id", FieldType::kDouble}};
  CHECK_THAT(problem(Create({{"descriptorFile", DRIFTD_TEST_DESCRIPTOR},
                             {"messageType", "driftd.test.Inference"}},
                            MalformedPolicy::kDrop, wrong)),
             Catch::Contains("field 'model_id' is string in driftd.test.Inference; the "
                             "pipeline's schema says double"));
}

// ---- Confluent's framing --------------------------------------------------------------------

// Magic byte 0, schema id 7, the message indexes as written (zig-zag varints), then `message`.
std::string Framed(std::string_view indexes, const std::string& message) {
  return std::string("\0\0\0\0\x07", 5) + std::string(indexes) + message;
}

// A message of `type` (full name) with model_id and ground_truth set.
std::string LabelMessage(const std::string& type, const std::string& model, double truth) {
  std::ifstream in(DRIFTD_TEST_DESCRIPTOR, std::ios::binary);
  pb::FileDescriptorSet set;
  REQUIRE(set.ParseFromIstream(&in));
  pb::DescriptorPool pool;
  for (const auto& file : set.file()) REQUIRE(pool.BuildFile(file) != nullptr);
  const pb::Descriptor* descriptor = pool.FindMessageTypeByName(type);
  REQUIRE(descriptor != nullptr);
  pb::DynamicMessageFactory factory(&pool);
  std::unique_ptr<pb::Message> message(factory.GetPrototype(descriptor)->New());
  const pb::Reflection& r = *message->GetReflection();
  r.SetString(message.get(), descriptor->FindFieldByName("model_id"), model);
  r.SetDouble(message.get(), descriptor->FindFieldByName("ground_truth"), truth);
  return message->SerializeAsString();
}

std::unique_ptr<ValueDecoder> FramedDecoder(const std::string& type) {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false},
                   {"ground_truth", FieldType::kDouble, true}};
  auto decoder = Create({{"descriptorFile", DRIFTD_TEST_DESCRIPTOR},
                         {"messageType", type},
                         {"confluentFraming", "true"}},
                        MalformedPolicy::kDeadLetter, schema);
  if (!decoder) FAIL(decoder.error().option << ": " << decoder.error().message);
  return std::move(*decoder);
}

TEST_CASE("Confluent-framed Protobuf records decode when their message indexes name the "
          "message type",
          "[format][protobuf][confluent]") {
  SECTION("the file's first message: [0] as one 0 byte, or spelt out") {
    Messages messages;
    auto decoder = MakeDecoder(MalformedPolicy::kFail);
    auto plain = DecodeAll(*decoder, {messages.Inference("m-0", 1, {}, 0.5)});
    REQUIRE(plain.status);
    auto framed = FramedDecoder("driftd.test.Inference");  // (its other fields are absent)
    const std::string message = messages.Inference("m-1", 1, {}, 0.5);
    auto decoded = DecodeAll(*framed, {Framed(std::string("\0", 1), message),
                                       Framed(std::string("\x02\x00", 2), message)});
    REQUIRE(decoded.status);
    CHECK(decoded.dead.empty());
    REQUIRE(decoded.batch.num_rows == 2);
    CHECK(decoded.batch.columns[0].String(1) == "m-1");
  }
  SECTION("a later message [1] and a nested one [1, 0]") {
    auto label = FramedDecoder("driftd.test.Label");
    auto nested = FramedDecoder("driftd.test.Label.Correction");
    auto a = DecodeAll(*label, {Framed("\x02\x02", LabelMessage("driftd.test.Label", "m", 1))});
    auto b = DecodeAll(*nested, {Framed(std::string("\x04\x02\x00", 3), LabelMessage(
                                             "driftd.test.Label.Correction", "n", 0.25))});
    REQUIRE(a.batch.num_rows == 1);
    REQUIRE(b.batch.num_rows == 1);
    CHECK(a.batch.columns[1].f64[0] == 1);
    CHECK(b.batch.columns[0].String(0) == "n");
    CHECK(b.batch.columns[1].f64[0] == 0.25);
  }
}

TEST_CASE("Confluent-framed Protobuf records of another message type, or without the framing, "
          "are malformed",
          "[format][protobuf][confluent]") {
  auto decoder = FramedDecoder("driftd.test.Label");
  const std::string message = LabelMessage("driftd.test.Label", "m", 1);
  auto decoded = DecodeAll(*decoder, {
                                         Framed(std::string("\0", 1), message),  // [0]: Inference
                                         message,                                // no framing
                                         Framed("\x02", ""),  // indexes cut short
                                     });
  REQUIRE(decoded.status);
  CHECK(decoded.batch.num_rows == 0);
  REQUIRE(decoded.dead.size() == 3);
  CHECK(decoded.dead[0].reason == MalformedReason::kUnknownSchema);
  CHECK(decoded.dead[0].detail ==
        "schema id 7: the message indexes [0] name another message than driftd.test.Label ([1] "
        "in its file)");
  CHECK(decoded.dead[1].reason == MalformedReason::kUndecodable);
  CHECK(decoded.dead[1].detail.find("not Confluent-framed") == 0);
  CHECK(decoded.dead[2].reason == MalformedReason::kUndecodable);
  CHECK(decoder->counts().total() == 3);
}

}  // namespace
}  // namespace driftd
