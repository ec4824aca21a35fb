// A client of a Confluent-compatible Schema Registry (Confluent's, Apicurio's ccompat API,
// Redpanda's): it fetches writer schemas by id (GET <url>/schemas/ids/<id>, for the avro
// decoder) and registers a writer schema under a subject (POST <url>/subjects/<subject>/versions,
// for the avro encoder), and nothing else.
//
// A registry that wants credentials gets HTTP basic auth, from the URL's user info
// (https://user:password@registry:8081) or from `user:password` given apart (Confluent's
// basic.auth.user.info, typically from an environment variable); over https it verifies the
// registry's certificate against a CA file (or the system's CAs) and can present a client
// certificate. Create checks all of it without connecting, so that `driftd validate` finds what
// `run` would; no message of the client shows the password (its URL is shown without the user
// info).
//
// Thread-safety: one thread at a time (each decoder owns its client).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/options.h"
#include "engine/result.h"

namespace driftd {

/// A value format's registry options as BindSchemaRegistryOptions made them (their defaults are
/// declared in SchemaRegistryOptionDecls only).
struct SchemaRegistryOptions {
  /// Base URL, e.g. "http://registry:8081" or "http://apicurio:8080/apis/ccompat/v7"; it may
  /// carry user info for basic auth ("https://user:password@registry:8081", percent-encoded).
  std::string url;
  /// Connect and read timeout per request, in ms (option schemaRegistryTimeout).
  int64_t timeout_ms = 0;
  /// Basic auth as "user:password" (not together with user info in the URL). Default: none.
  std::string credentials;
  /// https: PEM file of the CAs that sign the registry's certificate. Default: the system's.
  std::string ca_file;
  /// https: PEM client certificate and its private key, presented to a registry that asks
  /// for one (mutual TLS); both or neither. Default: none.
  std::string cert_file;
  std::string key_file;
};

/// What is wrong with the registry options, and the option (its valueOptions name) it is about.
using SchemaRegistryProblem = OptionProblem;

class SchemaRegistryClient {
 public:
  /// Checks the options' shape as BindSchemaRegistryOptions does, and that the TLS files are
  /// readable PEM (a CA certificate; a certificate and the private key that matches it); it
  /// does not connect.
  static tl::expected<std::unique_ptr<SchemaRegistryClient>, SchemaRegistryProblem> Create(
      SchemaRegistryOptions options);
  ~SchemaRegistryClient();

  /// The Avro schema text of `id`; nullopt when the registry answers that it has no such
  /// schema (404) or that it is not an Avro schema; an error when the registry cannot be reached or answers otherwise.
  Result<std::optional<std::string>> FetchSchema(uint32_t id);

  /// Registers the Avro schema `schema` under `subject` and returns its id; a schema the
  /// subject has already gets its existing id (the registry's rule), so registering again at
  /// every start is harmless. kExternal when the registry cannot be reached or refuses (an
  /// incompatible schema: HTTP 409, with the registry's message).
  Result<uint32_t> Register(const std::string& subject, const std::string& schema);

  /// The URL without its user info, as messages show it.
  const std::string& url() const { return shown_url_; }

 private:
  struct Target;
  SchemaRegistryClient(SchemaRegistryOptions options, std::unique_ptr<Target> target);
  SchemaRegistryOptions options_;
  std::string shown_url_;
  std::unique_ptr<Target> target_;
};

/// The registry's options of a value format's valueOptions (schemaRegistryUrl with the timeout,
/// credentials and TLS files; declared defaults filled in), checked for their shape without
/// reading a file or connecting: the URL is http or https with a host, the credentials are
/// user:password and not given twice, the TLS files go with https and the client certificate
/// with its key. nullopt when schemaRegistryUrl is not set.
Bound<std::optional<SchemaRegistryOptions>> BindSchemaRegistryOptions(const Options& options);

/// The declarations of a value format's registry options beside schemaRegistryUrl (whose doc
/// is the format's own): schemaRegistryTimeout, schemaRegistryCredentials,
/// schemaRegistryCaFile, schemaRegistryCertFile and schemaRegistryKeyFile.
std::vector<OptionDecl> SchemaRegistryOptionDecls();

}  // namespace driftd
