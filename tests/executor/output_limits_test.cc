#include <catch2/catch.hpp>

#include <simdjson.h>

#include <string>

#include "engine/executor/output_limits.h"

namespace driftd {
namespace {

RowLimit Limit(std::string sink, StreamKind stream, size_t bytes) {
  return RowLimit{std::move(sink), stream, OutputMode::kUpdate, bytes, "topic t takes " +
                                                                           std::to_string(bytes)};
}

std::string JsonField(const std::string& row, const char* name) {
  simdjson::dom::parser parser;
  simdjson::dom::element element = parser.parse(row);
  simdjson::dom::element value = element[name];
  if (value.is_string()) return std::string(value.get_string().value());
  return simdjson::minify(value);
}

}  // namespace

TEST_CASE("an output row over a sink's limit is copied to the dead letters, cut to fit, and "
          "the other rows are left alone",
          "[executor][limits]") {
  BatchOutput output;
  output.batch_id = 7;
  output.stats_update.Add("m-0", "{\"model_id\":\"m-0\",\"count\":1}");
  const std::string huge = "{\"model_id\":\"m-1\",\"x\":\"" + std::string(5000, '"') + "\"}";
  output.stats_update.Add("m-1", huge);
  output.stats_update.Add("m-2", "{\"model_id\":\"m-2\",\"count\":3}");
  const OutputLimits limits({Limit("stats", StreamKind::kStats, 1000),
                             Limit("rejects", StreamKind::kDeadLetter, 800)},
                            /*dead_letter_sink=*/true);

  CHECK(limits.SetAsideOversized(output) == 1);
  // The rows stay for the sinks they fit; the one sink over its limit skips the big one.
  REQUIRE(output.stats_update.rows.size() == 3);
  CHECK_FALSE(OverRowLimit(output.stats_update, 0, 1000));
  CHECK(OverRowLimit(output.stats_update, 1, 1000));
  REQUIRE(output.dead_letters.rows.size() == 1);
  const std::string& letter = output.dead_letters.rows[0];
  INFO(letter);
  CHECK(letter.size() <= 800);
  CHECK(JsonField(letter, "reason") == "too_large");
  CHECK(JsonField(letter, "truncated") == "true");
  CHECK(JsonField(letter, "position") == "batch 7 stats stream (update) row 1");
  CHECK_THAT(JsonField(letter, "detail"), Catch::Contains("sink 'stats'"));
  CHECK_THAT(JsonField(letter, "detail"), Catch::Contains("topic t takes 1000"));
  // What is kept of the row is its beginning.
  CHECK(huge.rfind(JsonField(letter, "raw"), 0) == 0);
}

TEST_CASE("without a dead-letter sink an output row over a limit is only counted",
          "[executor][limits]") {
  BatchOutput output;
  output.alerts.Add("m", std::string(3000, 'a'));
  const OutputLimits limits({Limit("alerts", StreamKind::kAlerts, 1000)}, false);
  CHECK(limits.SetAsideOversized(output) == 1);
  CHECK(output.dead_letters.rows.empty());
  CHECK(output.alerts.rows.size() == 1);
}

TEST_CASE("a dead letter is cut to fit the dead-letter sinks, at a character boundary",
          "[executor][limits]") {
  DeadLetter dead;
  // Three-byte characters: a cut anywhere else would leave invalid UTF-8 and turn the row into
  // base64.
  for (int i = 0; i < 2000; ++i) dead.raw += "\xe2\x82\xac";
  dead.reason = MalformedReason::kNotJson;
  dead.detail = "invalid literal";
  const std::string row = BoundedDeadLetterJson(dead, "topic t partition 0 offset 5", 1000);
  INFO(row);
  CHECK(row.size() <= 1000);
  CHECK(JsonField(row, "truncated") == "true");
  CHECK(row.find("rawBase64") == std::string::npos);
  const std::string raw = JsonField(row, "raw");
  CHECK(raw.size() % 3 == 0);
  CHECK(raw.size() > 600);
  CHECK(JsonField(row, "rawBytes") == std::to_string(raw.size()));
  // A row that fits is not touched.
  dead.raw = "short";
  CHECK(BoundedDeadLetterJson(dead, "p", 1000) == DeadLetterToJson(dead, "p"));
}

}  // namespace driftd
