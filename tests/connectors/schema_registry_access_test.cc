// A secured Schema Registry (the test harness's, requiring basic auth, serving https with a CA
// made by openssl, and asking for a client certificate): the avro decoder and encoder reach it
// with credentials from the URL or from schemaRegistryCredentials, verify it against
// schemaRegistryCaFile, present schemaRegistryCertFile/KeyFile; everything wrong with those
// options is found when the decoder is made (what `driftd validate` runs), and no message
// carries the password.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "connectors/format/schema_registry.h"
#include "connectors/registry.h"
#include "engine/drift/monitor.h"
#include "tests/support/avro_records.h"
#include "tests/support/schema_registry_fake.h"
#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::AvroRecordWriter;
using testing::FakeSchemaRegistry;
using testing::FakeSchemaRegistryOptions;
using testing::TestTls;

constexpr std::string_view kPassword = "s3cr%t-Pa55";  // '%' must be written %25 in a URL
constexpr std::string_view kWriter = R"({"type": "record", "name": "Inference",
  "namespace": "acme", "fields": [{"name": "model_id", "type": "string"},
                                  {"name": "prediction", "type": "double"}]})";

Schema PipelineSchema() {
  Schema schema;
  schema.fields = {{"model_id", FieldType::kString, false}, {"prediction", FieldType::kDouble}};
  return schema;
}

Options AvroOptions(const std::map<std::string, std::string>& given) {
  Options options;
  const ValueFormatDecl* decl = FindValueFormat(ValueFormats(), "avro");
  for (const OptionDecl& option : decl->options) {
    if (!option.default_value.empty()) options.Set(option.name, option.default_value);
  }
  for (const auto& [name, value] : given) options.Set(name, value);
  return options;
}

// The problem of making a decoder with `given` ("option: message"), or "" when it is made.
std::string ProblemOf(const std::map<std::string, std::string>& given) {
  auto decoder = BindAndCreateDecoder(*FindValueFormat(ValueFormats(), "avro"), PipelineSchema(),
                                      MalformedSpec{}, AvroOptions(given));
  if (decoder) return "";
  return decoder.error().option + ": " + decoder.error().message;
}

// Decodes one framed record of schema `id` with a decoder of `given`: the batch's status.
Status DecodeOne(const std::map<std::string, std::string>& given, int id, double* prediction) {
  auto decoder = BindAndCreateDecoder(*FindValueFormat(ValueFormats(), "avro"), PipelineSchema(),
                                      MalformedSpec{}, AvroOptions(given));
  REQUIRE(decoder);
  AvroRecordWriter writer(kWriter);
  const std::string record = writer.Write(
      {{"model_id", std::string("m")}, {"prediction", 0.75}}, static_cast<uint32_t>(id));
  InputChunk chunk;
  chunk.Append(record, RecordPosition{0, 0});
  chunk.Seal();
  RecordBatch batch;
  batch.Reset((*decoder)->schema());
  std::vector<DeadLetter> dead;
  Status status = (*decoder)->Decode(chunk, batch, &dead);
  if (status && batch.num_rows == 1) *prediction = batch.columns[1].f64[0];
  return status;
}

std::string WithUser(const std::string& url, std::string_view password) {
  std::string encoded;
  for (char c : password) encoded += c == '%' ? std::string("%25") : std::string(1, c);
  return url.substr(0, url.find("://") + 3) + "driftd:" + encoded + "@" +
         url.substr(url.find("://") + 3);
}

TEST_CASE("a registry that requires basic auth is reached with the URL's user info or "
          "schemaRegistryCredentials, and its 401 says what to check without the password",
          "[format][avro][registry]") {
  FakeSchemaRegistryOptions options;
  options.basic_auth = std::make_pair("driftd", std::string(kPassword));
  FakeSchemaRegistry registry(options);
  REQUIRE(registry.running());
  const int id = registry.Add(std::string(kWriter));
  double prediction = 0;

  REQUIRE(DecodeOne({{"schemaRegistryUrl", WithUser(registry.url(), kPassword)}}, id, &prediction));
  CHECK(prediction == 0.75);
  prediction = 0;
  REQUIRE(DecodeOne({{"schemaRegistryUrl", registry.url()},
                     {"schemaRegistryCredentials", "driftd:" + std::string(kPassword)}},
                    id, &prediction));
  CHECK(prediction == 0.75);
  CHECK(registry.unauthorized() == 0);

  for (const std::string& url : {registry.url(), WithUser(registry.url(), "wrong-password")}) {
    Status refused = DecodeOne({{"schemaRegistryUrl", url}}, id, &prediction);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code() == ErrorCode::kExternal);
    CHECK_THAT(refused.error().message(), Catch::Contains("HTTP 401 (check "
                                                          "schemaRegistryCredentials"));
    CHECK_THAT(refused.error().message(), !Catch::Contains("wrong-password"));
    CHECK_THAT(refused.error().message(), !Catch::Contains("driftd:"));
  }
  CHECK(registry.unauthorized() == 2);

  // The encoder registers its writer schema with the same credentials.
  const ValueFormatDecl* avro = FindValueFormat(ValueFormats(), "avro");
  Options sink_options;
  for (const OptionDecl& option : avro->sink_options) {
    if (!option.default_value.empty()) sink_options.Set(option.name, option.default_value);
  }
  sink_options.Set("schemaRegistryUrl", registry.url());
  sink_options.Set("schemaRegistryCredentials", "driftd:" + std::string(kPassword));
  auto encoder = BindAndCreateEncoder(*avro, ValueEncoderContext{AlertRowShape(), "alerts-value"},
                                      sink_options);
  REQUIRE(encoder);
  REQUIRE((*encoder)->Open());
  CHECK(registry.registrations("alerts-value").size() == 1);
}

TEST_CASE("an https registry is verified against schemaRegistryCaFile and gets the client "
          "certificate it asks for",
          "[format][avro][registry][tls]") {
  testing::TempDir dir;
  const TestTls tls = TestTls::Make(dir.path());
  INFO(testing::ReadFile(dir / "make-tls.log"));
  REQUIRE_FALSE(tls.ca_cert.empty());
  FakeSchemaRegistry registry({.basic_auth = std::make_pair("driftd", std::string(kPassword)),
                               .tls_cert = tls.server_cert,
                               .tls_key = tls.server_key,
                               .client_ca = tls.ca_cert});
  REQUIRE(registry.running());
  CHECK(registry.url().starts_with("https://127.0.0.1:"));
  const int id = registry.Add(std::string(kWriter));
  const std::map<std::string, std::string> base = {
      {"schemaRegistryUrl", registry.url()},
      {"schemaRegistryCredentials", "driftd:" + std::string(kPassword)},
      {"schemaRegistryTimeout", "5 seconds"}};
  auto with = [&](const std::map<std::string, std::string>& more) {
    auto options = base;
    for (const auto& [name, value] : more) options[name] = value;
    return options;
  };

  double prediction = 0;
  REQUIRE(DecodeOne(with({{"schemaRegistryCaFile", tls.ca_cert},
                          {"schemaRegistryCertFile", tls.client_cert},
                          {"schemaRegistryKeyFile", tls.client_key}}),
                    id, &prediction));
  CHECK(prediction == 0.75);

  // A CA that did not sign the registry's certificate: refused before any credentials go out.
  Status untrusted = DecodeOne(with({{"schemaRegistryCaFile", tls.other_ca_cert},
                                     {"schemaRegistryCertFile", tls.client_cert},
                                     {"schemaRegistryKeyFile", tls.client_key}}),
                               id, &prediction);
  REQUIRE_FALSE(untrusted);
  CHECK_THAT(untrusted.error().message(), Catch::Contains("schemaRegistryCaFile"));
  // Without the client certificate the registry ends the handshake.
  Status no_client_cert = DecodeOne(with({{"schemaRegistryCaFile", tls.ca_cert}}), id, &prediction);
  REQUIRE_FALSE(no_client_cert);
  CHECK(no_client_cert.error().code() == ErrorCode::kExternal);
  CHECK(registry.unauthorized() == 0);
}

TEST_CASE("wrong registry credentials and TLS options are found when the decoder is made, "
          "naming the option and never the secret",
          "[format][avro][registry][tls]") {
  testing::TempDir dir;
  const TestTls tls = TestTls::Make(dir.path());
  REQUIRE_FALSE(tls.ca_cert.empty());
  const std::string https = "https://registry.example:8081";
  const std::string secret = "driftd:" + std::string(kPassword);

  CHECK(ProblemOf({{"schemaRegistryUrl", https},
                   {"schemaRegistryCredentials", secret},
                   {"schemaRegistryCaFile", tls.ca_cert},
                   {"schemaRegistryCertFile", tls.client_cert},
                   {"schemaRegistryKeyFile", tls.client_key}}) == "");
  CHECK(ProblemOf({{"schemaRegistryUrl", WithUser(https, kPassword)}}) == "");

  const std::string both = ProblemOf(
      {{"schemaRegistryUrl", WithUser(https, kPassword)}, {"schemaRegistryCredentials", secret}});
  CHECK_THAT(both, Catch::StartsWith("schemaRegistryCredentials: ") && Catch::Contains("one of"));
  const std::string no_colon =
      ProblemOf({{"schemaRegistryUrl", https}, {"schemaRegistryCredentials", "tokenonly-abcdef"}});
  CHECK_THAT(no_colon, Catch::StartsWith("schemaRegistryCredentials: must be user:password"));
  CHECK_THAT(ProblemOf({{"schemaRegistryUrl", "http://registry:8081"},
                        {"schemaRegistryCaFile", tls.ca_cert}}),
             Catch::StartsWith("schemaRegistryCaFile: applies to an https://"));
  CHECK_THAT(ProblemOf({{"schemaRegistryUrl", https}, {"schemaRegistryCaFile", dir / "none.pem"}}),
             Catch::StartsWith("schemaRegistryCaFile: cannot be read"));
  CHECK_THAT(ProblemOf({{"schemaRegistryUrl", https},
                        {"schemaRegistryCaFile", tls.client_key}}),
             Catch::StartsWith("schemaRegistryCaFile: holds no PEM certificate"));
  CHECK_THAT(ProblemOf({{"schemaRegistryUrl", https}, {"schemaRegistryCertFile", tls.client_cert}}),
             Catch::StartsWith("schemaRegistryKeyFile: a client certificate needs both"));
  CHECK_THAT(ProblemOf({{"schemaRegistryUrl", https},
                        {"schemaRegistryCertFile", tls.client_cert},
                        {"schemaRegistryKeyFile", tls.server_key}}),
             Catch::StartsWith("schemaRegistryKeyFile: is not the private key"));
  CHECK_THAT(ProblemOf({{"schemaRegistryUrl", "ftp://driftd:" + std::string(kPassword) + "@r"}}),
             Catch::StartsWith("schemaRegistryUrl: is not an http://"));
  for (const std::string& problem : {both, no_colon}) {
    CHECK_THAT(problem, !Catch::Contains("Pa55") && !Catch::Contains("tokenonly"));
  }
}

}  // namespace
}  // namespace driftd
