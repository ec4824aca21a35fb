#include "engine/schema.h"

#include <array>
#include <cctype>
#include <set>
#include <utility>

#include <fmt/format.h>

namespace driftd {
namespace {

constexpr std::array<std::pair<FieldType, std::string_view>, 10> kNames = {{
    {FieldType::kTimestamp, "timestamp"},
    {FieldType::kString, "string"},
    {FieldType::kDouble, "double"},
    {FieldType::kLong, "long"},
    {FieldType::kInt, "int"},
    {FieldType::kBoolean, "boolean"},
    {FieldType::kDoubleArray, "array<double>"},
    {FieldType::kStringArray, "array<string>"},
    {FieldType::kDoubleMap, "map<string,double>"},
    {FieldType::kStringMap, "map<string,string>"},
}};

// The text without the spaces around its punctuation: "map< string , double >" reads as
// "map<string,double>".
std::string Compact(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) continue;
    out.push_back(text[i]);
  }
  return out;
}

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '$' ||
         c == '@' || c == '#' || (static_cast<unsigned char>(c) >= 0x80);
}

class TypeParser {
 public:
  explicit TypeParser(std::string_view text) : text_(text) {}

  tl::expected<TypeSpec, TypeError> Parse() {
    auto type = Type(0);
    if (!type) return type;
    SkipSpace();
    if (at_ != text_.size()) {
      return Fail(at_, fmt::format("unexpected '{}' after the type", text_.substr(at_)));
    }
    return type;
  }

 private:
  static tl::unexpected<TypeError> Fail(size_t offset, std::string message,
                                        std::string unknown = {}) {
    return tl::unexpected(TypeError{offset, std::move(message), std::move(unknown)});
  }

  void SkipSpace() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }

  bool Accept(char c) {
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  std::string Found() const {
    return at_ < text_.size() ? fmt::format("'{}'", text_[at_]) : std::string("the end");
  }

  // A word of letters (a type's name).
  std::string_view Word() {
    SkipSpace();
    const size_t begin = at_;
    while (at_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[at_]))) ++at_;
    return text_.substr(begin, at_ - begin);
  }

  tl::expected<TypeSpec, TypeError> Type(int depth) {
    SkipSpace();
    const size_t begin = at_;
    const std::string_view word = Word();
    if (word.empty()) return Fail(begin, fmt::format("expected a type, found {}", Found()));
    if (word == "struct") return Struct(begin, depth);
    if (word == "array" || word == "map") return Collection(word, begin);
    // A scalar: the word, and anything that looks like more of a type name, for the message.
    auto scalar = ParseFieldType(word);
    if (!scalar || IsCollection(*scalar)) {
      size_t end = at_;
      while (end < text_.size() && text_[end] != ',' && text_[end] != '>' &&
             !std::isspace(static_cast<unsigned char>(text_[end]))) {
        ++end;
      }
      const std::string spelled(text_.substr(begin, end - begin));
      return Fail(begin, fmt::format("unknown type '{}'", spelled), spelled);
    }
    TypeSpec spec;
    spec.type = *scalar;
    return spec;
  }

  tl::expected<TypeSpec, TypeError> Collection(std::string_view word, size_t begin) {
    if (!Accept('<')) return Fail(at_, fmt::format("expected '<' after {}, found {}", word, Found()));
    if (word == "map") {
      const size_t key_at = at_;
      const std::string_view key = Word();
      if (key != "string") {
        return Fail(key_at, fmt::format("map keys must be strings (map<string,double> or "
                                        "map<string,string>), found '{}'",
                                        key.empty() ? Found() : std::string(key)));
      }
      if (!Accept(',')) return Fail(at_, fmt::format("expected ',' after map<string, found {}", Found()));
    }
    SkipSpace();
    const size_t value_at = at_;
    const std::string_view value = Word();
    if (value != "double" && value != "string") {
      return Fail(value_at,
                  fmt::format("{} of '{}' is not supported; {}s hold double or string values "
                              "(array<double>, array<string>, map<string,double>, "
                              "map<string,string>)",
                              word, value.empty() ? Found() : std::string(value), word));
    }
    if (!Accept('>')) return Fail(at_, fmt::format("expected '>' to close {}<, found {}", word, Found()));
    TypeSpec spec;
    spec.type = *ParseFieldType(fmt::format("{}<{}{}>", word, word == "map" ? "string," : "", value));
    static_cast<void>(begin);
    return spec;
  }

  tl::expected<TypeSpec, TypeError> Struct(size_t begin, int depth) {
    if (depth >= kMaxStructDepth) {
      return Fail(begin, fmt::format("structs nest at most {} deep", kMaxStructDepth));
    }
    if (!Accept('<')) return Fail(at_, fmt::format("expected '<' after struct, found {}", Found()));
    TypeSpec spec;
    spec.is_struct = true;
    std::set<std::string> names;
    do {
      SkipSpace();
      const size_t name_at = at_;
      auto name = Name();
      if (!name) return tl::unexpected(name.error());
      if (!names.insert(*name).second) {
        return Fail(name_at, fmt::format("struct member '{}' is declared twice", *name));
      }
      if (!Accept(':')) {
        return Fail(at_, fmt::format("expected ':' and a type after struct member '{}', found {}",
                                     *name, Found()));
      }
      auto type = Type(depth + 1);
      if (!type) return type;
      spec.members.push_back({std::move(*name), std::move(*type)});
    } while (Accept(','));
    if (!Accept('>')) {
      return Fail(at_, fmt::format("expected ',' or '>' in struct<...>, found {}", Found()));
    }
    return spec;
  }

  tl::expected<std::string, TypeError> Name() {
    const size_t begin = at_;
    std::string name;
    if (at_ < text_.size() && text_[at_] == '`') {
      ++at_;
      while (at_ < text_.size() && text_[at_] != '`') name.push_back(text_[at_++]);
      if (at_ == text_.size()) return Fail(begin, "unterminated `quoted name`");
      ++at_;
    } else {
      while (at_ < text_.size() && IsNameChar(text_[at_])) name.push_back(text_[at_++]);
      // A dotted name, read whole for the message below.
      while (at_ < text_.size() && (text_[at_] == '.' || IsNameChar(text_[at_]))) {
        name.push_back(text_[at_++]);
      }
    }
    if (name.empty()) {
      return Fail(begin, fmt::format("expected a struct member name, found {}", Found()));
    }
    if (name.find('.') != std::string::npos) {
      // Columns are named by dotted path: a dot in a member's name would make it ambiguous.
      return Fail(begin, fmt::format("struct member name '{}' cannot contain '.'", name));
    }
    return name;
  }

  std::string_view text_;
  size_t at_ = 0;
};

void Flatten(Schema& schema, const std::string& name, std::vector<std::string>& path,
             const TypeSpec& type) {
  if (!type.is_struct) {
    schema.fields.push_back({name, type.type, true, path});
    return;
  }
  schema.structs.push_back({path, true});
  for (const TypeSpec::Member& member : type.members) {
    path.push_back(member.name);
    Flatten(schema, name + "." + member.name, path, member.type);
    path.pop_back();
  }
}

}  // namespace

std::string_view FieldTypeName(FieldType type) {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "unknown";
}

std::optional<FieldType> ParseFieldType(std::string_view name) {
  const std::string compact = name.find(' ') == std::string_view::npos &&
                                      name.find('\t') == std::string_view::npos
                                  ? std::string(name)
                                  : Compact(name);
  for (const auto& [t, spelled] : kNames) {
    if (spelled == compact) return t;
  }
  return std::nullopt;
}

const std::vector<std::string_view>& FieldTypeNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& entry : kNames) out.push_back(entry.second);
    return out;
  }();
  return names;
}

tl::expected<TypeSpec, TypeError> ParseTypeSpec(std::string_view text) {
  return TypeParser(text).Parse();
}

void AddDeclaredField(Schema& schema, const std::string& name, const TypeSpec& type,
                      bool nullable) {
  if (!type.is_struct) {
    schema.fields.push_back({name, type.type, nullable, {}});
    return;
  }
  std::vector<std::string> path{name};
  const size_t first_struct = schema.structs.size();
  Flatten(schema, name, path, type);
  schema.structs[first_struct].nullable = nullable;
}

}  // namespace driftd
