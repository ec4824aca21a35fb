#include "connectors/format/schema_registry.h"

#include <cctype>
#include <cstdint>

#include <httplib.h>
#include <simdjson.h>

#include <fmt/format.h>

#include "engine/json_writer.h"

namespace driftd {

struct SchemaRegistryClient::Target {
  std::string scheme_host_port;  // "http://host:8081"
  std::string path_prefix;       // "" or "/apis/ccompat/v7"
  std::unique_ptr<httplib::Client> client;
};

SchemaRegistryClient::SchemaRegistryClient(SchemaRegistryOptions options,
                                           std::unique_ptr<Target> target)
    : options_(std::move(options)), target_(std::move(target)) {}

SchemaRegistryClient::~SchemaRegistryClient() = default;

Result<std::unique_ptr<SchemaRegistryClient>> SchemaRegistryClient::Create(
    SchemaRegistryOptions options) {
  const std::string& url = options.url;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos ||
      (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0)) {
    return MakeError(ErrorCode::kConfig,
                     "'{}' is not an http:// or https:// URL (e.g. http://registry:8081)", url);
  }
  const size_t host_begin = scheme_end + 3;
  size_t path_begin = url.find('/', host_begin);
  if (path_begin == std::string::npos) path_begin = url.size();
  if (path_begin == host_begin) return MakeError(ErrorCode::kConfig, "'{}' has no host", url);
  auto target = std::make_unique<Target>();
  target->scheme_host_port = url.substr(0, path_begin);
  target->path_prefix = url.substr(path_begin);
  while (!target->path_prefix.empty() && target->path_prefix.back() == '/') {
    target->path_prefix.pop_back();
  }
  target->client = std::make_unique<httplib::Client>(target->scheme_host_port);
  const auto seconds = static_cast<time_t>(options.timeout_ms / 1000);
  const auto micros = static_cast<time_t>((options.timeout_ms % 1000) * 1000);
  target->client->set_connection_timeout(seconds, micros);
  target->client->set_read_timeout(seconds, micros);
  target->client->set_keep_alive(true);
  return std::unique_ptr<SchemaRegistryClient>(
      new SchemaRegistryClient(std::move(options), std::move(target)));
}

Result<std::optional<std::string>> SchemaRegistryClient::FetchSchema(uint32_t id) {
  const std::string path = fmt::format("{}/schemas/ids/{}", target_->path_prefix, id);
  httplib::Result response = target_->client->Get(path);
  if (!response) {
    return MakeError(ErrorCode::kExternal, "schema registry {}: GET {}: {}", options_.url, path,
                     httplib::to_string(response.error()));
  }
  if (response->status == 404) return std::optional<std::string>();
  if (response->status != 200) {
    return MakeError(ErrorCode::kExternal, "schema registry {}: GET {}: HTTP {}: {}",
                     options_.url, path, response->status, response->body.substr(0, 200));
  }
  // {"schema": "<the schema as a JSON string>", "schemaType": "AVRO"?, ...}
  simdjson::dom::parser parser;
  simdjson::dom::element document;
  if (parser.parse(response->body).get(document) != simdjson::SUCCESS) {
    return MakeError(ErrorCode::kExternal, "schema registry {}: GET {}: the answer is not JSON",
                     options_.url, path);
  }
  std::string_view type;
  if (document["schemaType"].get(type) == simdjson::SUCCESS && type != "AVRO") {
    return std::optional<std::string>();  // a Protobuf or JSON schema is no Avro writer schema
  }
  std::string_view schema;
  if (document["schema"].get(schema) != simdjson::SUCCESS) {
    return MakeError(ErrorCode::kExternal,
                     "schema registry {}: GET {}: the answer has no \"schema\" string",
                     options_.url, path);
  }
  return std::optional<std::string>(std::string(schema));
}

Result<uint32_t> SchemaRegistryClient::Register(const std::string& subject,
                                                const std::string& schema) {
  // The subject is a path segment: escape what is not unreserved (RFC 3986).
  std::string escaped;
  for (const char c : subject) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '-' || c == '_' || c == '.' || c == '~') {
      escaped.push_back(c);
    } else {
      escaped += fmt::format("%{:02X}", byte);
    }
  }
  const std::string path = fmt::format("{}/subjects/{}/versions", target_->path_prefix, escaped);
  std::string body = "{\"schema\":";
  AppendJsonString(body, schema);
  body += "}";
  httplib::Result response =
      target_->client->Post(path, body, "application/vnd.schemaregistry.v1+json");
  if (!response) {
    return MakeError(ErrorCode::kExternal, "schema registry {}: POST {}: {}", options_.url, path,
                     httplib::to_string(response.error()));
  }
  if (response->status != 200) {
    return MakeError(ErrorCode::kExternal,
                     "schema registry {}: registering the writer schema under subject '{}' "
                     "(POST {}): HTTP {}: {}",
                     options_.url, subject, path, response->status,
                     response->body.substr(0, 300));
  }
  simdjson::dom::parser parser;
  simdjson::dom::element document;
  int64_t id = -1;
  if (parser.parse(response->body).get(document) != simdjson::SUCCESS ||
      document["id"].get(id) != simdjson::SUCCESS || id < 0 || id > UINT32_MAX) {
    return MakeError(ErrorCode::kExternal,
                     "schema registry {}: POST {}: the answer has no schema id: {}", options_.url,
                     path, response->body.substr(0, 200));
  }
  return static_cast<uint32_t>(id);
}

}  // namespace driftd
