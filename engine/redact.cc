#include "engine/redact.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>

#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>

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

}  // namespace

void RegisterSecrets(const std::vector<std::string>& values) {
  Registry& registry = TheRegistry();
  std::unique_lock<std::shared_mutex> lock(registry.mutex);
  bool added = false;
  for (const std::string& value : values) {
    if (value.size() < kMinRedactedSize) continue;
    if (std::find(registry.secrets.begin(), registry.secrets.end(), value) !=
        registry.secrets.end()) {
      continue;
    }
    registry.secrets.push_back(value);
    added = true;
  }
  if (!added) return;
  std::sort(registry.secrets.begin(), registry.secrets.end(), LongerFirst);
  registry.any.store(true, std::memory_order_release);
}

std::string RedactWith(std::string_view text, const std::vector<std::string>& secrets,
                       std::string_view replacement) {
  std::vector<const std::string*> order;
  for (const std::string& secret : secrets) {
    if (secret.size() >= kMinRedactedSize) order.push_back(&secret);
  }
  std::sort(order.begin(), order.end(),
            [](const std::string* a, const std::string* b) { return LongerFirst(*a, *b); });
  std::string out(text);
  for (const std::string* secret : order) {
    for (size_t at = out.find(*secret); at != std::string::npos; at = out.find(*secret, at)) {
      out.replace(at, secret->size(), replacement);
      at += replacement.size();
    }
  }
  return out;
}

std::string Redact(std::string_view text) {
  Registry& registry = TheRegistry();
  if (!registry.any.load(std::memory_order_acquire)) return std::string(text);
  std::shared_lock<std::shared_mutex> lock(registry.mutex);
  return RedactWith(text, registry.secrets);
}

std::shared_ptr<spdlog::sinks::sink> MakeRedactingSink(
    std::shared_ptr<spdlog::sinks::sink> inner) {
  return std::make_shared<RedactingSink>(std::move(inner));
}

}  // namespace driftd
