// Environment-variable interpolation in pipeline-file values: ${VAR}, ${VAR:-default}, and $${
// for a literal "${". Used by the loader on every scalar value (never on keys).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace driftd {

/// Looks up an environment variable; nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

/// The process environment (getenv).
EnvLookup ProcessEnv();

struct Interpolated {
  std::string value;
  /// True when a variable whose name looks secret (IsSecretOptionName: *_PASSWORD, *_TOKEN, ...)
  /// contributed to the value, so the value must never be printed.
  bool secret = false;
  /// True when the text contained at least one ${...} reference.
  bool substituted = false;
  /// The substituted texts of secret variables, so that callers can scrub them from messages.
  std::vector<std::string> secret_parts;
};

/// Replaces ${VAR} by the variable's value and ${VAR:-default} by its value, or by `default` when
/// the variable is unset or empty (as the shell does). "$${" yields a literal "${"; any other '$'
/// is kept as is. Variable names are [A-Za-z_][A-Za-z0-9_]*; defaults are literal text up to the
/// first '}' (no nesting). Errors (kConfig) name the variable: an undefined variable without a
/// default, an unterminated reference, an invalid name. Error messages never contain values.
Result<Interpolated> InterpolateEnv(std::string_view text, const EnvLookup& env);

}  // namespace driftd
