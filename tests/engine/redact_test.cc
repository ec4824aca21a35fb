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

TEST_CASE("a secret is redacted in the forms other text gives it: JSON-escaped, percent-encoded",
          "[engine][redact]") {
  RegisterSecrets({"pw\"quote\\slash 9"});
  // In a JSON string (a log line, /progress), and in one nested inside another.
  CHECK(Redact(R"({"url":"http://h/pw\"quote\\slash 9/x"})") ==
        R"({"url":"http://h/<redacted>/x"})");
  CHECK(Redact(R"({"line":"{\"url\":\"pw\\\"quote\\\\slash 9\"}"})") ==
        R"({"line":"{\"url\":\"<redacted>\"}"})");
  // Percent-encoded in a URL, with either case of hex digits and '+' for the space.
  CHECK(Redact("http://h/?t=pw%22quote%5Cslash%209") == "http://h/?t=<redacted>");
  CHECK(Redact("http://h/?t=pw%22quote%5cslash+9") == "http://h/?t=<redacted>");
  // A URL password written percent-encoded also goes where it shows decoded.
  RegisterSecrets({"p%40ssw0rd"});
  CHECK(Redact("user p@ssw0rd and p%40ssw0rd") == "user <redacted> and <redacted>");
  CHECK(RedactWith(R"("a\"b\\cd")", {"a\"b\\cd"}) == R"("<redacted>")");
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
