#include "config/connector_options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include <fmt/format.h>
#include <simdjson.h>

#include "engine/json_writer.h"

#include "config/suggest.h"

namespace driftd::config_detail {
namespace {

bool LooksLikeJsonNumber(std::string_view text) {
  if (text.empty()) return false;
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && ptr == text.data() + text.size() &&
         (std::isdigit(static_cast<unsigned char>(text.front())) || text.front() == '-');
}

// A YAML map or list given for a json option, written as JSON. Plain scalars that read as
// numbers, booleans or null keep that type; everything else becomes a string.
bool YamlToJson(Reader& reader, const YAML::Node& node, const std::string& path, bool secret,
                std::string& out) {
  if (node.IsMap()) {
    out.push_back('{');
    bool first = true;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) {
        reader.problems.Error(path, MarkOf(it->first), "JSON object keys must be plain values");
        return false;
      }
      if (!first) out.push_back(',');
      first = false;
      AppendJsonString(out, it->first.Scalar());
      out.push_back(':');
      if (!YamlToJson(reader, it->second, fmt::format("{}.{}", path, it->first.Scalar()), secret,
                      out)) {
        return false;
      }
    }
    out.push_back('}');
    return true;
  }
  if (node.IsSequence()) {
    out.push_back('[');
    for (size_t i = 0; i < node.size(); ++i) {
      if (i > 0) out.push_back(',');
      if (!YamlToJson(reader, node[i], fmt::format("{}[{}]", path, i), secret, out)) return false;
    }
    out.push_back(']');
    return true;
  }
  if (node.IsNull()) {
    out += "null";
    return true;
  }
  auto scalar = reader.ReadScalar(node, path, secret);
  if (!scalar) return false;
  const bool plain = node.Tag() == "?";
  if (plain &&
      (LooksLikeJsonNumber(scalar->value) || scalar->value == "true" || scalar->value == "false")) {
    out += scalar->value;
  } else {
    AppendJsonString(out, scalar->value);
  }
  return true;
}

std::string ListNames(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace

std::vector<std::string_view> ConnectorFormats(const ConnectorCatalog& catalog,
                                               ConnectorRole role) {
  std::vector<std::string_view> formats;
  for (const ConnectorDecl& decl : catalog) {
    if (decl.role == role) formats.push_back(decl.format);
  }
  std::sort(formats.begin(), formats.end());
  formats.erase(std::unique(formats.begin(), formats.end()), formats.end());
  return formats;
}

Options ReadConnectorOptions(Reader& reader, const MapReader& parent, const ConnectorDecl* decl,
                             std::string_view what, std::map<std::string, SourceMark>* marks,
                             std::string_view key) {
  Options options;
  const MapReader::Entry* entry = parent.Find(key);
  SourceMark anchor = entry ? entry->key_mark : parent.anchor();
  MapReader map(reader, entry ? entry->value : YAML::Node(), parent.PathOf(key), anchor,
                std::nullopt, " of option names to values");
  if (!map.valid()) return options;

  std::vector<std::string_view> declared;
  // Declared options offered as did-you-mean: "missing" would only repeat the typo's report.
  std::vector<std::string> suggested;
  if (decl) {
    for (const OptionDecl& option : decl->options) declared.push_back(option.name);
  }

  for (const MapReader::Entry& option : map.entries()) {
    if (marks) (*marks)[option.key] = map.MarkOf(option.key);
    const std::string path = map.PathOf(option.key);
    const bool secret = IsSecretKey(option.key);
    const OptionDecl* declared_option = decl ? decl->Find(option.key) : nullptr;
    const bool passthrough =
        decl && !decl->passthrough_prefix.empty() &&
        option.key.size() > decl->passthrough_prefix.size() &&
        option.key.compare(0, decl->passthrough_prefix.size(), decl->passthrough_prefix) == 0;
    if (decl && !declared_option && !passthrough) {
      std::string message = fmt::format("unknown option '{}' for the {}", option.key, what);
      std::string suggestion = DidYouMean(option.key, declared);
      if (auto closest = SuggestClosest(option.key, declared)) suggested.push_back(*closest);
      if (!suggestion.empty()) {
        message += suggestion;
      } else if (!decl->passthrough_prefix.empty() && option.key.find('.') != std::string::npos) {
        message += fmt::format(
            "; options for the client library take the prefix '{}' (did you mean '{}{}'?)",
            decl->passthrough_prefix, decl->passthrough_prefix, option.key);
      } else if (!declared.empty()) {
        message += fmt::format(
            " (options: {}{})", ListNames(declared),
            decl->passthrough_prefix.empty() ? "" : fmt::format(", {}*", decl->passthrough_prefix));
      } else {
        message += " (it takes no options)";
      }
      reader.problems.Error(path, option.key_mark, std::move(message));
      continue;
    }

    if (declared_option && declared_option->type == OptionType::kJson &&
        (option.value.IsMap() || option.value.IsSequence())) {
      std::string json;
      if (YamlToJson(reader, option.value, path, secret, json)) {
        options.Set(option.key, std::move(json));
      }
      continue;
    }
    if (option.value.IsNull()) {
      reader.problems.Error(path, option.key_mark,
                            fmt::format("option '{}' has no value", option.key));
      continue;
    }
    auto scalar = reader.ReadScalar(option.value, path, secret);
    if (!scalar) continue;
    std::string value = scalar->value;
    if (declared_option) {
      bool ok = true;
      switch (declared_option->type) {
        case OptionType::kString:
          break;
        case OptionType::kInt:
          ok = reader
                   .ToInt(*scalar, std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max())
                   .has_value();
          break;
        case OptionType::kDouble:
          ok = reader.ToDouble(*scalar).has_value();
          break;
        case OptionType::kBool: {
          auto parsed = reader.ToBool(*scalar);
          ok = parsed.has_value();
          if (ok) value = *parsed ? "true" : "false";
          break;
        }
        case OptionType::kDuration: {
          auto parsed = reader.ToDurationMs(*scalar, 0);
          ok = parsed.has_value();
          // "0" alone is accepted here but is not a ParseDurationMs spelling.
          if (ok && *parsed == 0) value = "0ms";
          break;
        }
        case OptionType::kEnum: {
          std::vector<std::string_view> choices(declared_option->choices.begin(),
                                                declared_option->choices.end());
          ok = reader.ToChoice(*scalar, choices).has_value();
          break;
        }
        case OptionType::kJson: {
          // Words such as "earliest" share the option with JSON documents (startingOffsets),
          // so only text that opens like a document is parsed.
          std::string_view text = value;
          while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
            text.remove_prefix(1);
          }
          if (!text.empty() && (text.front() == '{' || text.front() == '[')) {
            simdjson::dom::parser parser;
            simdjson::padded_string padded(text);
            auto parsed = parser.parse(padded);
            if (parsed.error()) {
              reader.problems.Error(
                  path, scalar->mark,
                  fmt::format("expected a JSON document, found {} ({})", Show(*scalar),
                              simdjson::error_message(parsed.error())));
              ok = false;
            }
          }
          break;
        }
      }
      if (!ok) continue;
      if (auto problem = OutOfRange(*declared_option, value)) {
        reader.problems.Error(path, scalar->mark, std::move(*problem));
        continue;
      }
    }
    options.Set(option.key, std::move(value));
  }

  if (decl) {
    for (const OptionDecl& option : decl->options) {
      if (options.Has(option.name) || map.Has(option.name)) continue;
      const bool misspelt =
          std::find(suggested.begin(), suggested.end(), option.name) != suggested.end();
      if (option.required && !misspelt) {
        reader.problems.Error(
            map.PathOf(option.name), anchor,
            fmt::format("missing required option '{}' for the {}{}", option.name, what,
                        option.doc.empty() ? "" : fmt::format(" ({})", option.doc)));
      } else if (!option.default_value.empty()) {
        options.Set(option.name, option.default_value);
      }
    }
  }
  return options;
}

}  // namespace driftd::config_detail
