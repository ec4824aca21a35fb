// A small Confluent-compatible Schema Registry for tests: the two calls producers and driftd
// use (register a schema under a subject; fetch a schema by id) on a free port of 127.0.0.1.
// It stands in for a real registry (Confluent's, or Apicurio's ccompat API) where none runs;
// it answers as they do, and counts the fetches so tests can check the decoder's cache.
#pragma once

#include <httplib.h>
#include <simdjson.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace driftd::testing {

class FakeSchemaRegistry {
 public:
  FakeSchemaRegistry() {
    // POST /subjects/<subject>/versions {"schema": "..."} -> {"id": N}
    server_.Post(R"(/subjects/([^/]+)/versions)",
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
    server_.Get(R"(/schemas/ids/(\d+))",
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
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // cpp-httplib 0.11 has no wait_until_ready(): poll until the accept loop runs.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~FakeSchemaRegistry() {
    server_.stop();
    thread_.join();
  }
  FakeSchemaRegistry(const FakeSchemaRegistry&) = delete;
  FakeSchemaRegistry& operator=(const FakeSchemaRegistry&) = delete;

  bool running() const { return port_ > 0 && server_.is_running(); }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }

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

  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  std::map<int, std::string> schemas_;
  std::map<int, int> fetches_;
  std::map<std::string, std::vector<int>> subjects_;
  int next_id_ = 1;
};

}  // namespace driftd::testing
