#include "engine/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace driftd {

std::string_view OptionTypeName(OptionType type) {
  switch (type) {
    case OptionType::kString: return "string";
    case OptionType::kInt: return "integer";
    case OptionType::kDouble: return "number";
    case OptionType::kBool: return "boolean";
    case OptionType::kDuration: return "duration";
    case OptionType::kEnum: return "enum";
    case OptionType::kJson: return "json";
  }
  return "unknown";
}

Result<int64_t> ParseDurationMs(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  std::string_view s = trim(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) {
    return MakeError(ErrorCode::kConfig,
                     "'{}' is not a duration (expected e.g. \"30 seconds\", \"30s\", \"5 minutes\", "
                     "\"1h\", \"250ms\")",
                     text);
  }
  double amount = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + i, amount);
  if (ec != std::errc() || ptr != s.data() + i) {
    return MakeError(ErrorCode::kConfig, "'{}' is not a duration", text);
  }
  std::string unit(trim(s.substr(i)));
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  double scale = 0;
  if (unit == "ms" || unit == "millisecond" || unit == "milliseconds" || unit == "millis") {
    scale = 1;
  } else if (unit == "s" || unit == "sec" || unit == "secs" || unit == "second" ||
             unit == "seconds") {
    scale = 1000;
  } else if (unit == "m" || unit == "min" || unit == "mins" || unit == "minute" ||
             unit == "minutes") {
    scale = 60'000;
  } else if (unit == "h" || unit == "hr" || unit == "hour" || unit == "hours") {
    scale = 3'600'000;
  } else if (unit == "d" || unit == "day" || unit == "days") {
    scale = 86'400'000;
  } else {
    return MakeError(ErrorCode::kConfig,
                     "'{}' has no known time unit (expected ms, s, seconds, m, minutes, h, hours, "
                     "d, days)",
                     text);
  }
  double ms = amount * scale;
  if (!std::isfinite(ms) || ms > 1e15) {
    return MakeError(ErrorCode::kConfig, "duration '{}' is too large", text);
  }
  return static_cast<int64_t>(std::llround(ms));
}

std::string Options::GetString(std::string_view name, std::string_view fallback) const {
  auto it = values_.find(std::string(name));
  return it == values_.end() ? std::string(fallback) : it->second;
}

int64_t Options::GetInt(std::string_view name, int64_t fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end() || it->second.empty()) return fallback;
  int64_t value = fallback;
  std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
  return value;
}

double Options::GetDouble(std::string_view name, double fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end() || it->second.empty()) return fallback;
  double value = fallback;
  std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
  return value;
}

bool Options::GetBool(std::string_view name, bool fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end() || it->second.empty()) return fallback;
  return it->second == "true" || it->second == "True" || it->second == "TRUE";
}

int64_t Options::GetDurationMs(std::string_view name, int64_t fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end() || it->second.empty()) return fallback;
  auto parsed = ParseDurationMs(it->second);
  return parsed ? *parsed : fallback;
}

std::map<std::string, std::string> Options::WithPrefix(std::string_view prefix) const {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : values_) {
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
      out.emplace(name.substr(prefix.size()), value);
    }
  }
  return out;
}

std::optional<std::string> OutOfRange(const OptionDecl& option, std::string_view value) {
  if (!option.min && !option.max) return std::nullopt;
  if (option.type != OptionType::kInt && option.type != OptionType::kDouble) return std::nullopt;
  double number = 0;
  const char* end = value.data() + value.size();
  if (option.type == OptionType::kInt) {
    int64_t whole = 0;
    auto [ptr, ec] = std::from_chars(value.data(), end, whole);
    if (ec != std::errc() || ptr != end) return std::nullopt;  // a type error, reported as such
    number = static_cast<double>(whole);
  } else {
    auto [ptr, ec] = std::from_chars(value.data(), end, number);
    if (ec != std::errc() || ptr != end) return std::nullopt;
  }
  const bool below = option.min && number < *option.min;
  const bool above = option.max && number > *option.max;
  if (!below && !above) return std::nullopt;
  auto show = [](double bound) { return fmt::format("{}", bound); };
  if (option.min && option.max) {
    return fmt::format("must be between {} and {}, found {}", show(*option.min), show(*option.max),
                       value);
  }
  if (option.min && *option.min == 0) return fmt::format("must not be negative, found {}", value);
  if (option.min && *option.min == 1 && option.type == OptionType::kInt) {
    return fmt::format("must be positive, found {}", value);
  }
  if (option.min) return fmt::format("must be at least {}, found {}", show(*option.min), value);
  return fmt::format("must be at most {}, found {}", show(*option.max), value);
}

const ConnectorDecl* FindConnector(const ConnectorCatalog& catalog, std::string_view format,
                                   ConnectorRole role) {
  for (const ConnectorDecl& decl : catalog) {
    if (decl.format == format && decl.role == role) return &decl;
  }
  return nullptr;
}

Bound<Options> AdmitDeclared(const std::vector<OptionDecl>& declared, Options options) {
  for (const OptionDecl& option : declared) {
    if (!options.Has(option.name)) {
      if (option.required) return tl::unexpected(OptionProblem{option.name, "is required"});
      if (!option.default_value.empty()) options.Set(option.name, option.default_value);
      continue;
    }
    if (auto problem = OutOfRange(option, options.GetString(option.name))) {
      return tl::unexpected(OptionProblem{option.name, std::move(*problem)});
    }
  }
  return options;
}

std::string ProblemText(const OptionProblem& problem) {
  return problem.option.empty() ? problem.message
                                : fmt::format("{}: {}", problem.option, problem.message);
}

bool IsSecretOptionName(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (std::string_view marker : {"password", "secret", "key", "token", "credential", "jaas"}) {
    if (lower.find(marker) != std::string::npos) {
      // Kafka's "key column" style options name a column, not a secret.
      if (marker == "key" && (lower == "keycolumn" || lower == "key.column")) continue;
      return true;
    }
  }
  return false;
}

}  // namespace driftd
