#include "connectors/format/schema_registry.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include <httplib.h>
#include <simdjson.h>

#include <fmt/format.h>

#include "engine/json_writer.h"

namespace driftd {

namespace {

constexpr const char* kUrlOption = "schemaRegistryUrl";
constexpr const char* kTimeoutOption = "schemaRegistryTimeout";
constexpr const char* kCredentialsOption = "schemaRegistryCredentials";
constexpr const char* kCaOption = "schemaRegistryCaFile";
constexpr const char* kCertOption = "schemaRegistryCertFile";
constexpr const char* kKeyOption = "schemaRegistryKeyFile";

std::string PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 &&
        hex(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* certificate) const { X509_free(certificate); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

// An encrypted private key would make OpenSSL ask for its passphrase on the terminal: refuse.
int NoPassphrase(char*, int, int, void*) { return 0; }

// The file's bytes, or why it cannot be read (the option names it: the key file's path is
// secret by its option's name and shown as <redacted> anyway).
std::optional<std::string> ReadPem(const std::string& path, std::string& problem) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problem = fmt::format("cannot be read: {}", std::strerror(errno));
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& bytes) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

std::optional<SchemaRegistryProblem> CheckCaFile(const std::string& path) {
  std::string problem;
  auto bytes = ReadPem(path, problem);
  if (!bytes) return SchemaRegistryProblem{kCaOption, problem};
  auto bio = MemoryBio(*bytes);
  int certificates = 0;
  while (std::unique_ptr<X509, X509Free> certificate{
             PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)}) {
    ++certificates;
  }
  ERR_clear_error();
  if (certificates == 0) {
    return SchemaRegistryProblem{kCaOption, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"};
  }
  return std::nullopt;
}

std::optional<SchemaRegistryProblem> CheckClientCertificate(const std::string& cert_path,
                                                            const std::string& key_path) {
  std::string problem;
  auto cert_bytes = ReadPem(cert_path, problem);
  if (!cert_bytes) return SchemaRegistryProblem{kCertOption, problem};
  auto key_bytes = ReadPem(key_path, problem);
  if (!key_bytes) return SchemaRegistryProblem{kKeyOption, problem};
  auto cert_bio = MemoryBio(*cert_bytes);
  std::unique_ptr<X509, X509Free> certificate{
      PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr)};
  auto key_bio = MemoryBio(*key_bytes);
  std::unique_ptr<EVP_PKEY, KeyFree> key{
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr)};
  ERR_clear_error();
  if (!certificate) {
    return SchemaRegistryProblem{kCertOption, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"};
  }
  if (!key) {
    return SchemaRegistryProblem{
        kKeyOption, "holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)"};
  }
  if (X509_check_private_key(certificate.get(), key.get()) != 1) {
    ERR_clear_error();
    return SchemaRegistryProblem{kKeyOption, "is not the private key of schemaRegistryCertFile's certificate"};
  }
  return std::nullopt;
}

// What a failed request needs said beside httplib's error: a TLS failure is the registry's
// certificate (or ours), a 401 or 403 the credentials.
std::string ConnectionHint(httplib::Error error) {
  if (error == httplib::Error::SSLServerVerification) {
    return " (the registry's certificate is not signed by a CA of schemaRegistryCaFile, or the "
           "system's, or does not name the URL's host)";
  }
  if (error == httplib::Error::SSLConnection || error == httplib::Error::SSLLoadingCerts) {
    return " (TLS: check schemaRegistryCaFile, schemaRegistryCertFile and schemaRegistryKeyFile)";
  }
  return "";
}

std::string StatusHint(int status) {
  if (status == 401) return " (check schemaRegistryCredentials or the URL's user info)";
  if (status == 403) return " (the credentials are not allowed this request)";
  return "";
}

}  // namespace

struct SchemaRegistryClient::Target {
  std::string scheme_host_port;  // "http://host:8081"
  std::string path_prefix;       // "" or "/apis/ccompat/v7"
  std::unique_ptr<httplib::Client> client;
};

SchemaRegistryClient::SchemaRegistryClient(SchemaRegistryOptions options,
                                           std::unique_ptr<Target> target)
    : options_(std::move(options)), target_(std::move(target)) {
  shown_url_ = target_->scheme_host_port + target_->path_prefix;
}

SchemaRegistryClient::~SchemaRegistryClient() = default;

namespace {

// The parts of the options that Create uses, once their shape is checked.
struct RegistryAddress {
  bool https = false;
  std::string scheme_host_port;  // "http://host:8081"
  std::string path_prefix;       // "" or "/apis/ccompat/v7", without a trailing '/'
  std::optional<std::pair<std::string, std::string>> user;
};

// The checks of the options that need no file and no connection (BindSchemaRegistryOptions,
// and Create for options that were not bound), each problem at its option.
tl::expected<RegistryAddress, SchemaRegistryProblem> CheckShape(
    const SchemaRegistryOptions& options) {
  auto problem = [](const char* option, std::string message) {
    return tl::unexpected(SchemaRegistryProblem{option, std::move(message)});
  };
  const std::string& url = options.url;
  const size_t scheme_end = url.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    // The URL is not echoed: it may hold a password.
    return problem(kUrlOption, "is not an http:// or https:// URL (e.g. http://registry:8081)");
  }
  const size_t host_begin = scheme_end + 3;
  size_t path_begin = url.find('/', host_begin);
  if (path_begin == std::string::npos) path_begin = url.size();
  std::string authority = url.substr(host_begin, path_begin - host_begin);
  RegistryAddress address;
  if (const size_t at = authority.rfind('@'); at != std::string::npos) {
    const std::string userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const size_t colon = userinfo.find(':');
    address.user.emplace(
        PercentDecode(userinfo.substr(0, colon)),
        colon == std::string::npos ? "" : PercentDecode(userinfo.substr(colon + 1)));
  }
  if (authority.empty()) return problem(kUrlOption, "has no host");
  if (!options.credentials.empty()) {
    if (address.user) {
      return problem(kCredentialsOption,
                     "is given, and so is user info in schemaRegistryUrl: give one of them");
    }
    const size_t colon = options.credentials.find(':');
    if (colon == std::string::npos || colon == 0) {
      // The value is not echoed: it is secret.
      return problem(kCredentialsOption,
                     "must be user:password (as Confluent's basic.auth.user.info)");
    }
    address.user.emplace(options.credentials.substr(0, colon),
                         options.credentials.substr(colon + 1));
  }
  address.https = scheme == "https";
  for (const auto& [option, value] : {std::pair{kCaOption, &options.ca_file},
                                      std::pair{kCertOption, &options.cert_file},
                                      std::pair{kKeyOption, &options.key_file}}) {
    if (!value->empty() && !address.https) {
      return problem(option, "applies to an https:// schemaRegistryUrl only");
    }
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return problem(options.cert_file.empty() ? kCertOption : kKeyOption,
                   "a client certificate needs both schemaRegistryCertFile and "
                   "schemaRegistryKeyFile");
  }
  address.scheme_host_port = scheme + "://" + authority;
  address.path_prefix = url.substr(path_begin);
  while (!address.path_prefix.empty() && address.path_prefix.back() == '/') {
    address.path_prefix.pop_back();
  }
  return address;
}

}  // namespace

tl::expected<std::unique_ptr<SchemaRegistryClient>, SchemaRegistryProblem>
SchemaRegistryClient::Create(SchemaRegistryOptions options) {
  auto address = CheckShape(options);
  if (!address) return tl::unexpected(std::move(address.error()));
  if (!options.ca_file.empty()) {
    if (auto bad = CheckCaFile(options.ca_file)) return tl::unexpected(*bad);
  }
  if (!options.cert_file.empty()) {
    if (auto bad = CheckClientCertificate(options.cert_file, options.key_file)) {
      return tl::unexpected(*bad);
    }
  }

  const bool https = address->https;
  auto target = std::make_unique<Target>();
  target->scheme_host_port = address->scheme_host_port;
  target->path_prefix = address->path_prefix;
  target->client = options.cert_file.empty()
                       ? std::make_unique<httplib::Client>(target->scheme_host_port)
                       : std::make_unique<httplib::Client>(target->scheme_host_port,
                                                           options.cert_file, options.key_file);
  if (!target->client->is_valid()) {
    return tl::unexpected(
        SchemaRegistryProblem{https && !options.cert_file.empty() ? kCertOption : kUrlOption,
                              "cannot be used for a TLS connection"});
  }
  if (!options.ca_file.empty()) target->client->set_ca_cert_path(options.ca_file);
  if (https) target->client->enable_server_certificate_verification(true);
  if (address->user) target->client->set_basic_auth(address->user->first, address->user->second);
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
    return MakeError(ErrorCode::kExternal, "schema registry {}: GET {}: {}{}", shown_url_, path,
                     httplib::to_string(response.error()), ConnectionHint(response.error()));
  }
  if (response->status == 404) return std::optional<std::string>();
  if (response->status != 200) {
    return MakeError(ErrorCode::kExternal, "schema registry {}: GET {}: HTTP {}{}: {}",
                     shown_url_, path, response->status, StatusHint(response->status),
                     response->body.substr(0, 200));
  }
  // {"schema": "<the schema as a JSON string>", "schemaType": "AVRO"?, ...}
  simdjson::dom::parser parser;
  simdjson::dom::element document;
  if (parser.parse(response->body).get(document) != simdjson::SUCCESS) {
    return MakeError(ErrorCode::kExternal, "schema registry {}: GET {}: the answer is not JSON",
                     shown_url_, path);
  }
  std::string_view type;
  if (document["schemaType"].get(type) == simdjson::SUCCESS && type != "AVRO") {
    return std::optional<std::string>();  // a Protobuf or JSON schema is no Avro writer schema
  }
  std::string_view schema;
  if (document["schema"].get(schema) != simdjson::SUCCESS) {
    return MakeError(ErrorCode::kExternal,
                     "schema registry {}: GET {}: the answer has no \"schema\" string",
                     shown_url_, path);
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
    return MakeError(ErrorCode::kExternal, "schema registry {}: POST {}: {}{}", shown_url_, path,
                     httplib::to_string(response.error()), ConnectionHint(response.error()));
  }
  if (response->status != 200) {
    return MakeError(ErrorCode::kExternal,
                     "schema registry {}: registering the writer schema under subject '{}' "
                     "(POST {}): HTTP {}{}: {}",
                     shown_url_, subject, path, response->status, StatusHint(response->status),
                     response->body.substr(0, 300));
  }
  simdjson::dom::parser parser;
  simdjson::dom::element document;
  int64_t id = -1;
  if (parser.parse(response->body).get(document) != simdjson::SUCCESS ||
      document["id"].get(id) != simdjson::SUCCESS || id < 0 || id > UINT32_MAX) {
    return MakeError(ErrorCode::kExternal,
                     "schema registry {}: POST {}: the answer has no schema id: {}", shown_url_,
                     path, response->body.substr(0, 200));
  }
  return static_cast<uint32_t>(id);
}

}  // namespace driftd

namespace driftd {

Bound<std::optional<SchemaRegistryOptions>> BindSchemaRegistryOptions(const Options& options) {
  SchemaRegistryOptions registry;
  registry.url = options.GetString(kUrlOption);
  if (registry.url.empty()) return std::optional<SchemaRegistryOptions>();
  registry.timeout_ms = options.GetDurationMs(kTimeoutOption);
  registry.credentials = options.GetString(kCredentialsOption);
  registry.ca_file = options.GetString(kCaOption);
  registry.cert_file = options.GetString(kCertOption);
  registry.key_file = options.GetString(kKeyOption);
  if (auto shape = CheckShape(registry); !shape) return tl::unexpected(std::move(shape.error()));
  return std::optional<SchemaRegistryOptions>(std::move(registry));
}

std::vector<OptionDecl> SchemaRegistryOptionDecls() {
  return {
      {kTimeoutOption, OptionType::kDuration, "10 seconds",
       "Connect and read timeout of a Schema Registry request."},
      {kCredentialsOption, OptionType::kString, "",
       "Basic auth for the Schema Registry as `user:password` (Confluent's "
       "`basic.auth.user.info`), best from the environment: "
       "`\"${SCHEMA_REGISTRY_CREDENTIALS}\"`. Secret: never logged or shown. Or give the user "
       "info in the URL: `https://user:password@registry:8081` (percent-encoded)."},
      {kCaOption, OptionType::kString, "",
       "PEM file of the CAs that sign the registry's certificate (`https://` URLs; Confluent's "
       "`ssl.ca.location`). Unset: the system's CAs."},
      {kCertOption, OptionType::kString, "",
       "PEM client certificate presented to the registry (mutual TLS), with "
       "`schemaRegistryKeyFile`."},
      {kKeyOption, OptionType::kString, "",
       "PEM file of the client certificate's private key (unencrypted)."},
  };
}

}  // namespace driftd
