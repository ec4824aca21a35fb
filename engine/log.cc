#include "engine/log.h"

#include <mutex>
#include <string>

namespace driftd {

std::shared_ptr<spdlog::logger> GetLogger(std::string_view module) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::string name(module);
  if (auto existing = spdlog::get(name)) return existing;
  auto default_logger = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(name, default_logger->sinks().begin(),
                                                 default_logger->sinks().end());
  logger->set_level(default_logger->level());
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace driftd
