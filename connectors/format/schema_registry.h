// A client of a Confluent-compatible Schema Registry (Confluent's, Apicurio's ccompat API,
// Redpanda's): it fetches writer schemas by id (GET <url>/schemas/ids/<id>, for the avro
// decoder) and registers a writer schema under a subject (POST <url>/subjects/<subject>/versions,
// for the avro encoder), and nothing else.
//
// Thread-safety: one thread at a time (each decoder owns its client).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/result.h"

namespace driftd {

struct SchemaRegistryOptions {
  /// Base URL, e.g. "http://registry:8081" or "http://apicurio:8080/apis/ccompat/v7".
  std::string url;
  /// Connect and read timeout per request, in ms. Default: 10 s.
  int64_t timeout_ms = 10'000;
};

class SchemaRegistryClient {
 public:
  /// Checks the URL's shape (http or https, a host); it does not connect.
  static Result<std::unique_ptr<SchemaRegistryClient>> Create(SchemaRegistryOptions options);
  ~SchemaRegistryClient();

  /// The Avro schema text of `id`; nullopt when the registry answers that it has no such
  /// schema (404) or that it is not an Avro schema; an error when the registry cannot be reached or answers otherwise.
  Result<std::optional<std::string>> FetchSchema(uint32_t id);

  /// Registers the Avro schema `schema` under `subject` and returns its id; a schema the
  /// subject has already gets its existing id (the registry's rule), so registering again at
  /// every start is harmless. kExternal when the registry cannot be reached or refuses (an
  /// incompatible schema: HTTP 409, with the registry's message).
  Result<uint32_t> Register(const std::string& subject, const std::string& schema);

  const std::string& url() const { return options_.url; }

 private:
  struct Target;
  SchemaRegistryClient(SchemaRegistryOptions options, std::unique_ptr<Target> target);
  SchemaRegistryOptions options_;
  std::unique_ptr<Target> target_;
};

}  // namespace driftd
