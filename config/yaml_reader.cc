#include "config/yaml_reader.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "config/suggest.h"
#include "engine/options.h"

namespace driftd::config_detail {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string JoinQuoted(const std::vector<std::string_view>& words) {
  std::string out;
  for (std::string_view word : words) {
    if (!out.empty()) out += ", ";
    out += word;
  }
  return out;
}

bool ParseWholeInt(std::string_view text, int64_t& value) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && ptr == text.data() + text.size();
}

bool ParseWholeDouble(std::string_view text, double& value) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && ptr == text.data() + text.size() && std::isfinite(value);
}

}  // namespace

std::optional<std::string_view> UrlPassword(std::string_view value) {
  // scheme://user:password@host...; the userinfo ends at the first '@' before the path.
  const size_t scheme = value.find("://");
  if (scheme == std::string_view::npos) return std::nullopt;
  const size_t start = scheme + 3;
  const size_t authority_end = value.find_first_of("/?#", start);
  const std::string_view authority = value.substr(start, authority_end - start);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::nullopt;
  const size_t colon = authority.find(':');
  if (colon == std::string_view::npos || colon > at || colon + 1 == at) return std::nullopt;
  return authority.substr(colon + 1, at - colon - 1);
}

SourceMark ToSourceMark(const YAML::Mark& mark) {
  if (mark.line < 0 || mark.column < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

SourceMark MarkOf(const YAML::Node& node) {
  if (!node.IsDefined()) return {};
  return ToSourceMark(node.Mark());
}

void Problems::Error(std::string path, SourceMark mark, std::string message) {
  errors_.push_back({std::move(path), mark, std::move(message), ProblemSeverity::kError});
}

void Problems::Warn(std::string path, SourceMark mark, std::string message) {
  warnings_.push_back({std::move(path), mark, std::move(message), ProblemSeverity::kWarning});
}

std::string Show(const Scalar& scalar) {
  if (scalar.secret) return "<redacted>";
  constexpr size_t kMaxShown = 60;
  if (scalar.value.size() > kMaxShown) {
    return fmt::format("'{}...'", scalar.value.substr(0, kMaxShown));
  }
  return fmt::format("'{}'", scalar.value);
}

std::string Describe(const YAML::Node& node, bool secret) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (secret) return "<redacted>";
  return Show(Scalar{node.Scalar(), false, {}, {}});
}

bool IsSecretKey(std::string_view key) { return IsSecretOptionName(key); }

std::optional<Scalar> Reader::ReadScalar(const YAML::Node& node, const std::string& path,
                                         bool secret) {
  SourceMark mark = MarkOf(node);
  if (!node.IsDefined() || node.IsNull()) {
    problems.Error(path, mark, "expected a value, found nothing");
    return std::nullopt;
  }
  if (!node.IsScalar()) {
    problems.Error(path, mark,
                   fmt::format("expected a single value, found {}", Describe(node, secret)));
    return std::nullopt;
  }
  auto interpolated = InterpolateEnv(node.Scalar(), env);
  if (!interpolated) {
    problems.Error(path, mark, interpolated.error().message());
    return std::nullopt;
  }
  // A secret option's whole value; otherwise only what secret variables put in, so that a URL or
  // path prints as the rest of itself around <redacted>.
  if (secret) secrets.push_back(interpolated->value);
  for (std::string& part : interpolated->secret_parts) secrets.push_back(std::move(part));
  if (auto password = UrlPassword(interpolated->value)) secrets.emplace_back(*password);
  return Scalar{std::move(interpolated->value), secret || interpolated->secret, path, mark};
}

std::optional<int64_t> Reader::ToInt(const Scalar& s, int64_t min, int64_t max) {
  int64_t value = 0;
  if (!ParseWholeInt(Trim(s.value), value)) {
    problems.Error(s.path, s.mark, fmt::format("expected a whole number, found {}", Show(s)));
    return std::nullopt;
  }
  if (value < min) {
    problems.Error(s.path, s.mark, fmt::format("must be at least {}, found {}", min, Show(s)));
    return std::nullopt;
  }
  if (value > max) {
    problems.Error(s.path, s.mark, fmt::format("must be at most {}, found {}", max, Show(s)));
    return std::nullopt;
  }
  return value;
}

std::optional<double> Reader::ToDouble(const Scalar& s) {
  double value = 0;
  if (!ParseWholeDouble(Trim(s.value), value)) {
    problems.Error(s.path, s.mark, fmt::format("expected a number, found {}", Show(s)));
    return std::nullopt;
  }
  return value;
}

std::optional<bool> Reader::ToBool(const Scalar& s) {
  std::string lower = Lowercase(Trim(s.value));
  if (lower == "true") return true;
  if (lower == "false") return false;
  problems.Error(s.path, s.mark, fmt::format("expected true or false, found {}", Show(s)));
  return std::nullopt;
}

std::optional<int64_t> Reader::ToDurationMs(const Scalar& s, int64_t min_ms) {
  std::string_view text = Trim(s.value);
  int64_t ms = 0;
  if (text != "0") {
    auto parsed = ParseDurationMs(text);
    if (!parsed) {
      // ParseDurationMs quotes the text; a secret value gets a message of our own.
      problems.Error(s.path, s.mark,
                     s.secret ? "expected a duration such as \"30 seconds\", \"5m\" or \"1h\", "
                                "found <redacted>"
                              : parsed.error().message());
      return std::nullopt;
    }
    ms = *parsed;
  }
  if (ms < min_ms) {
    problems.Error(s.path, s.mark,
                   min_ms == 1 ? fmt::format("must be a positive duration, found {}", Show(s))
                               : fmt::format("must be at least {} ms, found {}", min_ms, Show(s)));
    return std::nullopt;
  }
  return ms;
}

std::optional<int64_t> Reader::ToBytes(const Scalar& s, int64_t min) {
  std::string_view text = Trim(s.value);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  double amount = 0;
  std::string unit = Lowercase(Trim(text.substr(i)));
  double scale = 0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "kib") {
    scale = 1024;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  }
  if (i == 0 || !ParseWholeDouble(text.substr(0, i), amount) || scale == 0) {
    problems.Error(s.path, s.mark,
                   fmt::format("expected a size in bytes, e.g. 1048576 or \"512 KiB\" (units B, "
                               "KB, KiB, MB, MiB, GB, GiB), found {}",
                               Show(s)));
    return std::nullopt;
  }
  double bytes = std::round(amount * scale);
  if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) {
    problems.Error(s.path, s.mark, fmt::format("size {} is too large", Show(s)));
    return std::nullopt;
  }
  if (bytes < static_cast<double>(min)) {
    problems.Error(s.path, s.mark,
                   fmt::format("must be at least {} bytes, found {}", min, Show(s)));
    return std::nullopt;
  }
  return static_cast<int64_t>(bytes);
}

std::optional<std::string> Reader::ToChoice(const Scalar& s,
                                            const std::vector<std::string_view>& choices) {
  for (std::string_view choice : choices) {
    if (s.value == choice) return s.value;
  }
  std::string suggestion = s.secret ? "" : DidYouMean(s.value, choices);
  problems.Error(
      s.path, s.mark,
      fmt::format("expected one of {}, found {}{}", JoinQuoted(choices), Show(s), suggestion));
  return std::nullopt;
}

std::optional<std::vector<YAML::Node>> Reader::ReadList(const YAML::Node& node,
                                                        const std::string& path,
                                                        std::string_view hint) {
  std::vector<YAML::Node> items;
  if (!node.IsDefined() || node.IsNull()) return items;
  if (!node.IsSequence()) {
    problems.Error(path, MarkOf(node),
                   fmt::format("expected a list{}, found {}", hint, Describe(node, false)));
    return std::nullopt;
  }
  for (const auto& item : node) items.push_back(item);
  return items;
}

MapReader::MapReader(Reader& reader, const YAML::Node& node, std::string path, SourceMark anchor,
                     std::optional<std::vector<std::string_view>> known, std::string_view hint)
    : reader_(reader), path_(std::move(path)), anchor_(anchor) {
  if (anchor_.line == 0) anchor_ = config_detail::MarkOf(node);
  if (!node.IsDefined() || node.IsNull()) return;
  if (!node.IsMap()) {
    valid_ = false;
    reader_.problems.Error(path_, config_detail::MarkOf(node),
                           fmt::format("expected a map{}, found {}", hint, Describe(node, false)));
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    SourceMark key_mark = config_detail::MarkOf(key);
    if (!key.IsScalar()) {
      reader_.problems.Error(path_, key_mark,
                             fmt::format("expected a key name, found {}", Describe(key, false)));
      continue;
    }
    std::string name = key.Scalar();
    if (const Entry* first = Find(name)) {
      reader_.problems.Error(
          PathOf(name), key_mark,
          fmt::format("duplicate key '{}' (first given at line {})", name, first->key_mark.line));
      continue;
    }
    if (name == "<<") {
      // yaml-cpp reads a merge key as an ordinary key; say so rather than "unknown key '<<'".
      reader_.problems.Error(PathOf(name), key_mark,
                             "YAML merge keys ('<<') are not supported; write the keys out, or "
                             "use an alias (*name) for the whole value");
      continue;
    }
    if (known) {
      bool is_known = false;
      for (std::string_view candidate : *known) is_known = is_known || candidate == name;
      if (!is_known) {
        std::string suggestion = DidYouMean(name, *known);
        if (auto closest = SuggestClosest(name, *known)) suggested_.push_back(*closest);
        reader_.problems.Error(
            PathOf(name), key_mark,
            suggestion.empty()
                ? fmt::format("unknown key '{}' (valid here: {})", name, JoinQuoted(*known))
                : fmt::format("unknown key '{}'{}", name, suggestion));
        continue;
      }
    }
    entries_.push_back({std::move(name), key_mark, it->second});
  }
}

const MapReader::Entry* MapReader::Find(std::string_view key) const {
  for (const Entry& entry : entries_) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

std::string MapReader::PathOf(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

SourceMark MapReader::MarkOf(std::string_view key) const {
  const Entry* entry = Find(key);
  if (entry == nullptr) return anchor_;
  if (entry->value.IsDefined() && !entry->value.IsNull()) {
    SourceMark mark = config_detail::MarkOf(entry->value);
    if (mark.line > 0) return mark;
  }
  return entry->key_mark;
}

void MapReader::ReportMissing(std::string_view key, std::string_view hint) const {
  for (const std::string& suggested : suggested_) {
    if (suggested == key) return;
  }
  reader_.problems.Error(PathOf(key), anchor_, fmt::format("'{}' is required{}", key, hint));
}

std::optional<Scalar> MapReader::String(std::string_view key, bool required) const {
  const Entry* entry = Find(key);
  if (entry == nullptr) {
    if (required && valid_) ReportMissing(key);
    return std::nullopt;
  }
  if (entry->value.IsNull()) {
    reader_.problems.Error(PathOf(key), entry->key_mark, fmt::format("'{}' has no value", key));
    return std::nullopt;
  }
  return reader_.ReadScalar(entry->value, PathOf(key), IsSecretKey(key));
}

std::optional<int64_t> MapReader::Int(std::string_view key, int64_t min, int64_t max) const {
  auto s = String(key);
  return s ? reader_.ToInt(*s, min, max) : std::nullopt;
}

std::optional<double> MapReader::Double(std::string_view key) const {
  auto s = String(key);
  return s ? reader_.ToDouble(*s) : std::nullopt;
}

std::optional<bool> MapReader::Bool(std::string_view key) const {
  auto s = String(key);
  return s ? reader_.ToBool(*s) : std::nullopt;
}

std::optional<int64_t> MapReader::DurationMs(std::string_view key, int64_t min_ms,
                                             bool required) const {
  auto s = String(key, required);
  return s ? reader_.ToDurationMs(*s, min_ms) : std::nullopt;
}

std::optional<int64_t> MapReader::Bytes(std::string_view key, int64_t min) const {
  auto s = String(key);
  return s ? reader_.ToBytes(*s, min) : std::nullopt;
}

std::optional<std::string> MapReader::Choice(std::string_view key,
                                             const std::vector<std::string_view>& choices,
                                             bool required) const {
  auto s = String(key, required);
  return s ? reader_.ToChoice(*s, choices) : std::nullopt;
}

std::optional<std::vector<Scalar>> MapReader::StringList(std::string_view key,
                                                         std::string_view hint) const {
  const Entry* entry = Find(key);
  if (entry == nullptr) return std::nullopt;
  auto items = reader_.ReadList(entry->value, PathOf(key), hint);
  if (!items) return std::nullopt;
  std::vector<Scalar> out;
  bool ok = true;
  for (size_t i = 0; i < items->size(); ++i) {
    auto s =
        reader_.ReadScalar((*items)[i], fmt::format("{}[{}]", PathOf(key), i), IsSecretKey(key));
    if (s) {
      out.push_back(std::move(*s));
    } else {
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace driftd::config_detail
