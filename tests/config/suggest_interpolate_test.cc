// The building blocks of config messages: did-you-mean and ${VAR} interpolation.
#include <catch2/catch.hpp>

#include "config/interpolate.h"
#include "config/suggest.h"
#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

TEST_CASE("edit distance counts typos, with case and adjacent swaps as cheap",
          "[config][suggest]") {
  CHECK(EditDistance("topic", "topic") == 0);
  CHECK(EditDistance("topc", "topic") == 1);
  CHECK(EditDistance("outputmode", "outputMode") == 0);
  CHECK(EditDistance("sinkss", "sinks") == 1);
  CHECK(EditDistance("scehma", "schema") == 1);  // transposition
  CHECK(EditDistance("", "abc") == 3);
  CHECK(EditDistance("kitten", "sitting") == 3);
}

TEST_CASE("a suggestion is offered only when it is a plausible typo", "[config][suggest]") {
  const std::vector<std::string_view> keys = {"name", "schema", "source", "sinks", "trigger"};
  CHECK(SuggestClosest("sinkss", keys) == std::optional<std::string>("sinks"));
  CHECK(SuggestClosest("trigger", keys) == std::nullopt);  // exact: not a typo
  CHECK(SuggestClosest("Trigger", keys) == std::optional<std::string>("trigger"));
  CHECK(SuggestClosest("checkpoint", keys) == std::nullopt);
  CHECK(SuggestClosest("nm", keys) == std::nullopt);  // too short to guess twice
  CHECK(DidYouMean("sorce", keys) == "; did you mean 'source'?");
  CHECK(DidYouMean("zzzzzz", keys).empty());
}

TEST_CASE("interpolation substitutes, defaults and escapes", "[config][env]") {
  const EnvLookup env =
      testing::FakeEnv({{"HOST", "kafka-1"}, {"EMPTY", ""}, {"DB_PASSWORD", "pw"}});
  auto run = [&](std::string_view text) { return InterpolateEnv(text, env); };
  CHECK(run("plain")->value == "plain");
  CHECK_FALSE(run("plain")->substituted);
  CHECK(run("${HOST}:9092")->value == "kafka-1:9092");
  CHECK(run("${HOST}:9092")->substituted);
  CHECK(run("${PORT:-9092}")->value == "9092");
  CHECK(run("${EMPTY:-fallback}")->value == "fallback");
  CHECK(run("${EMPTY}")->value.empty());
  CHECK(run("${PORT:-}")->value.empty());
  CHECK(run("$${HOST}")->value == "${HOST}");
  CHECK(run("cost: $5 and $HOST")->value == "cost: $5 and $HOST");
  CHECK(run("${HOST}-${PORT:-1}")->value == "kafka-1-1");
  CHECK_FALSE(run("${HOST}")->secret);
  CHECK(run("x${DB_PASSWORD}")->secret);
  CHECK(run("${API_KEY:-default}")->secret);
}

TEST_CASE("interpolation errors name the variable but never a value", "[config][env]") {
  const EnvLookup env = testing::FakeEnv({});
  auto undefined = InterpolateEnv("${MISSING}/x", env);
  REQUIRE_FALSE(undefined);
  CHECK_THAT(undefined.error().message(), Catch::Matchers::Contains("'MISSING' is not set"));
  auto unterminated = InterpolateEnv("${MISSING", env);
  REQUIRE_FALSE(unterminated);
  CHECK_THAT(unterminated.error().message(), Catch::Matchers::Contains("unterminated"));
  auto invalid = InterpolateEnv("abc${s3cret value}", env);
  REQUIRE_FALSE(invalid);
  CHECK_THAT(invalid.error().message(), Catch::Matchers::Contains("invalid variable reference"));
  CHECK_THAT(invalid.error().message(), !Catch::Matchers::Contains("s3cret"));
}

}  // namespace
}  // namespace driftd
