// Redaction of registered secrets from text that leaves the process, and the log sink that
// applies it to every line.
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "engine/redact.h"

namespace driftd {

TEST_CASE("registered secrets are replaced wherever they occur, the longest first",
          "[engine][redact]") {
  RegisterSecrets({"tok-redact-1234", "tok-redact-1234-longer", "abc"});
  CHECK(Redact("url http://h/services/tok-redact-1234?x=tok-redact-1234") ==
        "url http://h/services/<redacted>?x=<redacted>");
  // The longer secret goes whole, not as a shorter one plus a tail.
  CHECK(Redact("/data/tok-redact-1234-longer/in") == "/data/<redacted>/in");
  // Values too short to be worth guessing are left alone, or every message would be garbled.
  CHECK(Redact("abc def") == "abc def");
  CHECK(RedactWith("a secret-xyz b", {"secret-xyz"}, "#") == "a # b");
}

TEST_CASE("the redacting log sink removes secrets from every line before it is written",
          "[engine][redact]") {
  RegisterSecrets({"tok-logged-5678"});
  std::ostringstream out;
  auto inner = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = std::make_shared<spdlog::logger>("redact-test", MakeRedactingSink(inner));
  logger->set_pattern("%v");
  logger->warn("webhook POST http://hooks/services/{} failed", "tok-logged-5678");
  logger->flush();
  CHECK(out.str() == "webhook POST http://hooks/services/<redacted> failed\n");
}

}  // namespace driftd
