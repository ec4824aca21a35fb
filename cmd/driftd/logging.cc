#include "cmd/driftd/logging.h"

#include <memory>
#include <string>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "engine/json_writer.h"
#include "engine/redact.h"

namespace driftd {
namespace {

// %J: the message as a JSON string literal (quoted and escaped).
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (payload.starts_with(kProgressLogPrefix) && payload.size() > kProgressLogPrefix.size() &&
        payload[kProgressLogPrefix.size()] == '{' && payload.back() == '}') {
      // The progress record is already one JSON object (RenderProgress): embed it as is.
      constexpr std::string_view kHead = "\"progress\",\"progress\":";
      dest.append(kHead.data(), kHead.data() + kHead.size());
      const std::string_view object = payload.substr(kProgressLogPrefix.size());
      dest.append(object.data(), object.data() + object.size());
      return;
    }
    std::string quoted;
    AppendJsonString(quoted, payload);
    dest.append(quoted.data(), quoted.data() + quoted.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

void SetUpLogging(std::string_view format, std::string_view level) {
  // Every line passes the redaction of secret values (engine/redact.h) before it is formatted.
  auto logger = std::make_shared<spdlog::logger>(
      "driftd", MakeRedactingSink(std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  spdlog::set_default_logger(logger);
  // Module loggers created before this call (GetLogger copies the default's sinks) must write
  // through the same sink and format, or their lines would escape --log-format json.
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& other) {
    if (other != logger) other->sinks() = logger->sinks();
  });
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('J').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%n","msg":%J})");
    spdlog::set_formatter(std::move(formatter));
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [%n] %v");
  }
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace driftd
