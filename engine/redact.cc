#include "engine/redact.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>

#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>

#include "engine/json_writer.h"

namespace driftd {
namespace {

struct Registry {
  std::shared_mutex mutex;
  std::vector<std::string> secrets;  // longest first, unique
  std::atomic<bool> any{false};
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed: logging may run at exit
  return *registry;
}

bool LongerFirst(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() > b.size() : a < b;
}

// `text` with each of `needles` (in that order: longest first) replaced.
std::string ReplaceAll(std::string_view text, const std::vector<std::string>& needles,
                       std::string_view replacement) {
  std::string out(text);
  for (const std::string& needle : needles) {
    for (size_t at = out.find(needle); at != std::string::npos; at = out.find(needle, at)) {
      out.replace(at, needle.size(), replacement);
      at += replacement.size();
    }
  }
  return out;
}

class RedactingSink final : public spdlog::sinks::sink {
 public:
  explicit RedactingSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    if (!TheRegistry().any.load(std::memory_order_acquire)) {
      inner_->log(msg);
      return;
    }
    const std::string redacted = Redact(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(redacted.data(), redacted.size());
    inner_->log(copy);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

std::string JsonEscaped(std::string_view text) {
  std::string quoted;
  AppendJsonString(quoted, text);
  return quoted.substr(1, quoted.size() - 2);
}

// RFC 3986 unreserved characters stay, every other byte becomes %XX.
std::string PercentEncoded(std::string_view text, bool lower_case, bool plus_for_space) {
  static constexpr char kUpper[] = "0123456789ABCDEF";
  static constexpr char kLower[] = "0123456789abcdef";
  const char* digits = lower_case ? kLower : kUpper;
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else if (c == ' ' && plus_for_space) {
      out.push_back('+');
    } else {
      out.push_back('%');
      out.push_back(digits[byte >> 4]);
      out.push_back(digits[byte & 0xF]);
    }
  }
  return out;
}

std::string PercentDecoded(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> SecretForms(std::string_view secret) {
  std::vector<std::string> forms;
  auto add = [&](std::string form) {
    if (form.size() < kMinRedactedSize) return;
    if (std::find(forms.begin(), forms.end(), form) == forms.end()) {
      forms.push_back(std::move(form));
    }
  };
  if (secret.size() < kMinRedactedSize) return forms;
  add(std::string(secret));
  const std::string escaped = JsonEscaped(secret);
  add(escaped);
  add(JsonEscaped(escaped));
  for (bool lower : {false, true}) {
    for (bool plus : {false, true}) add(PercentEncoded(secret, lower, plus));
  }
  if (secret.find('%') != std::string_view::npos) {
    const std::string decoded = PercentDecoded(secret);
    add(decoded);
    add(JsonEscaped(decoded));
  }
  return forms;
}

void RegisterSecrets(const std::vector<std::string>& values) {
  Registry& registry = TheRegistry();
  std::unique_lock<std::shared_mutex> lock(registry.mutex);
  bool added = false;
  for (const std::string& value : values) {
    for (std::string& form : SecretForms(value)) {
      if (std::find(registry.secrets.begin(), registry.secrets.end(), form) !=
          registry.secrets.end()) {
        continue;
      }
      registry.secrets.push_back(std::move(form));
      added = true;
    }
  }
  if (!added) return;
  std::sort(registry.secrets.begin(), registry.secrets.end(), LongerFirst);
  registry.any.store(true, std::memory_order_release);
}

std::string RedactWith(std::string_view text, const std::vector<std::string>& secrets,
                       std::string_view replacement) {
  std::vector<std::string> forms;
  for (const std::string& secret : secrets) {
    for (std::string& form : SecretForms(secret)) forms.push_back(std::move(form));
  }
  std::sort(forms.begin(), forms.end(), LongerFirst);
  forms.erase(std::unique(forms.begin(), forms.end()), forms.end());
  return ReplaceAll(text, forms, replacement);
}

std::string Redact(std::string_view text) {
  Registry& registry = TheRegistry();
  if (!registry.any.load(std::memory_order_acquire)) return std::string(text);
  std::shared_lock<std::shared_mutex> lock(registry.mutex);
  // The registry holds every form already, longest first.
  return ReplaceAll(text, registry.secrets, kRedacted);
}

std::shared_ptr<spdlog::sinks::sink> MakeRedactingSink(
    std::shared_ptr<spdlog::sinks::sink> inner) {
  return std::make_shared<RedactingSink>(std::move(inner));
}

}  // namespace driftd
