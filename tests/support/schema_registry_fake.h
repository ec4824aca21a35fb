// A small Confluent-compatible Schema Registry for tests: the two calls producers and driftd
// use (register a schema under a subject; fetch a schema by id) on a free port of 127.0.0.1.
// It stands in for a real registry (Confluent's, or Apicurio's ccompat API) where none runs;
// it answers as they do, and counts the fetches so tests can check the decoder's cache. Like a
// secured registry it can require basic auth (401 otherwise, as Confluent's answers) and serve
// https, optionally requiring a client certificate; TestTls makes a CA and certificates for it
// with the openssl command.
#pragma once

#include <httplib.h>
#include <simdjson.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace driftd::testing {

/// PEM files of a test CA, a server certificate for 127.0.0.1 and localhost signed by it, a
/// client certificate signed by it, and a second CA that signed neither.
struct TestTls {
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
  std::string other_ca_cert;

  /// Makes the files in `dir` with the openssl command (EC P-256 keys, valid one day); an
  /// empty ca_cert when openssl failed.
  static TestTls Make(const std::filesystem::path& dir) {
    TestTls tls;
    const std::string d = dir.string();
    const std::string script = fmt::format(
        R"(set -e; cd '{0}'
key() {{ openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }}
key ca.key; openssl req -x509 -new -key ca.key -subj /CN=driftd-test-ca -days 1 -out ca.pem
key other-ca.key; openssl req -x509 -new -key other-ca.key -subj /CN=other-ca -days 1 -out other-ca.pem
key server.key; openssl req -new -key server.key -subj /CN=127.0.0.1 -out server.csr
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost
' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile server.ext -out server.pem
key client.key; openssl req -new -key client.key -subj /CN=driftd-client -out client.csr
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -out client.pem
)",
        d);
    const std::string script_path = (dir / "make-tls.sh").string();
    {
      std::FILE* file = std::fopen(script_path.c_str(), "w");
      if (file == nullptr) return tls;
      std::fputs(script.c_str(), file);
      std::fclose(file);
    }
    const std::string command =
        fmt::format("bash '{}' > '{}/make-tls.log' 2>&1", script_path, d);
    if (std::system(command.c_str()) != 0) return tls;
    tls.ca_cert = d + "/ca.pem";
    tls.server_cert = d + "/server.pem";
    tls.server_key = d + "/server.key";
    tls.client_cert = d + "/client.pem";
    tls.client_key = d + "/client.key";
    tls.other_ca_cert = d + "/other-ca.pem";
    return tls;
  }
};

struct FakeSchemaRegistryOptions {
  /// Basic auth every request must carry ("user", "password"); none: no auth.
  std::optional<std::pair<std::string, std::string>> basic_auth;
  /// Serve https with this certificate and key.
  std::string tls_cert;
  std::string tls_key;
  /// With https: require a client certificate signed by this CA.
  std::string client_ca;
};

class FakeSchemaRegistry {
 public:
  explicit FakeSchemaRegistry(FakeSchemaRegistryOptions options = {})
      : options_(std::move(options)) {
    if (options_.tls_cert.empty()) {
      server_ = std::make_unique<httplib::Server>();
    } else {
      server_ = std::make_unique<httplib::SSLServer>(
          options_.tls_cert.c_str(), options_.tls_key.c_str(),
          options_.client_ca.empty() ? nullptr : options_.client_ca.c_str());
    }
    httplib::Server& server_ref = *server_;
    if (options_.basic_auth) {
      // What httplib's set_basic_auth sends: "Basic " + base64("user:password").
      const std::string expected =
          httplib::make_basic_authentication_header(options_.basic_auth->first,
                                                    options_.basic_auth->second)
              .second;
      server_ref.set_pre_routing_handler(
          [this, expected](const httplib::Request& request, httplib::Response& response) {
            if (request.get_header_value("Authorization") == expected) {
              return httplib::Server::HandlerResponse::Unhandled;
            }
            std::lock_guard<std::mutex> lock(mutex_);
            ++unauthorized_;
            response.status = 401;
            response.set_content(R"({"error_code":401,"message":"Unauthorized"})",
                                 "application/vnd.schemaregistry.v1+json");
            return httplib::Server::HandlerResponse::Handled;
          });
    }
    // POST /subjects/<subject>/versions {"schema": "..."} -> {"id": N}
    server_ref.Post(R"(/subjects/([^/]+)/versions)",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   simdjson::dom::parser parser;
                   std::string_view schema;
                   if (parser.parse(request.body)["schema"].get(schema) != simdjson::SUCCESS) {
                     response.status = 422;
                     response.set_content(R"({"error_code":42201,"message":"Invalid schema"})",
                                          "application/json");
                     return;
                   }
                   std::lock_guard<std::mutex> lock(mutex_);
                   const int id = Register(std::string(schema));
                   subjects_[request.matches[1]].push_back(id);
                   response.set_content(fmt::format(R"({{"id":{}}})", id),
                                        "application/vnd.schemaregistry.v1+json");
                 });
    // GET /schemas/ids/<id> -> {"schema": "..."} or 404 {"error_code":40403}
    server_ref.Get(R"(/schemas/ids/(\d+))",
                [this](const httplib::Request& request, httplib::Response& response) {
                  const int id = std::stoi(request.matches[1]);
                  std::lock_guard<std::mutex> lock(mutex_);
                  ++fetches_[id];
                  auto it = schemas_.find(id);
                  if (it == schemas_.end()) {
                    response.status = 404;
                    response.set_content(R"({"error_code":40403,"message":"Schema not found"})",
                                         "application/vnd.schemaregistry.v1+json");
                    return;
                  }
                  std::string escaped;
                  for (char c : it->second) {
                    if (c == '"' || c == '\\') escaped += '\\';
                    if (c == '\n') {
                      escaped += "\\n";
                      continue;
                    }
                    escaped += c;
                  }
                  response.set_content(fmt::format(R"({{"schema":"{}"}})", escaped),
                                       "application/vnd.schemaregistry.v1+json");
                });
    if (!server_->is_valid()) return;  // unusable TLS files: running() says false
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // cpp-httplib 0.11 has no wait_until_ready(): poll until the accept loop runs.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_->is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~FakeSchemaRegistry() {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  FakeSchemaRegistry(const FakeSchemaRegistry&) = delete;
  FakeSchemaRegistry& operator=(const FakeSchemaRegistry&) = delete;

  bool running() const { return port_ > 0 && server_->is_running(); }
  std::string url() const {
    return fmt::format("{}://127.0.0.1:{}", options_.tls_cert.empty() ? "http" : "https", port_);
  }
  /// Requests refused for want of the right credentials.
  int unauthorized() {
    std::lock_guard<std::mutex> lock(mutex_);
    return unauthorized_;
  }

  /// Registers `schema` directly (as a producer's POST would); the same text gets the same id.
  int Add(const std::string& schema) {
    std::lock_guard<std::mutex> lock(mutex_);
    return Register(schema);
  }
  /// The ids registered under `subject` by POST /subjects/<subject>/versions, in order.
  std::vector<int> registrations(const std::string& subject) {
    std::lock_guard<std::mutex> lock(mutex_);
    return subjects_[subject];
  }
  /// The schema text of `id`, or empty.
  std::string schema(int id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = schemas_.find(id);
    return it == schemas_.end() ? std::string() : it->second;
  }
  /// GET /schemas/ids/<id> requests so far.
  int fetches(int id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return fetches_[id];
  }

 private:
  int Register(const std::string& schema) {
    for (const auto& [id, text] : schemas_) {
      if (text == schema) return id;
    }
    const int id = next_id_++;
    schemas_[id] = schema;
    return id;
  }

  FakeSchemaRegistryOptions options_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  std::map<int, std::string> schemas_;
  std::map<int, int> fetches_;
  std::map<std::string, std::vector<int>> subjects_;
  int next_id_ = 1;
  int unauthorized_ = 0;
};

}  // namespace driftd::testing
