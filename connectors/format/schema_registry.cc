#include "connectors/format/schema_registry.h"

#include <httplib.h>
#include <simdjson.h>

#include <fmt/format.h>

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

}  // namespace driftd
