// ISO-8601 / RFC 3339 parsing and formatting used for timestamp columns. Reference instants
// were computed independently (Python's datetime).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>

#include "engine/time_iso8601.h"

namespace driftd {
namespace {

constexpr int64_t k20261129T101502Z = 1'795'947'302'000'000;

}  // namespace

TEST_CASE("days are counted from 1970-01-01 in the proleptic Gregorian calendar", "[timestamp]") {
  CHECK(DaysFromCivil(1970, 1, 1) == 0);
  CHECK(DaysFromCivil(1969, 12, 31) == -1);
  CHECK(DaysFromCivil(2026, 11, 29) == 20786);
  CHECK(DaysFromCivil(2000, 3, 1) == 11017);
  CHECK(DaysFromCivil(1600, 2, 29) == -135081);
}

TEST_CASE("RFC 3339 timestamps with Z parse to UTC microseconds", "[timestamp]") {
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02Z") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2026-11-29t10:15:02z") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2024-02-29T00:00:00Z") == 1'709'164'800'000'000);
  CHECK(ParseIso8601Micros("1970-01-01T00:00:00Z") == 0);
  CHECK(ParseIso8601Micros("0001-01-01T00:00:00Z") == -62'135'596'800'000'000);
  CHECK(ParseIso8601Micros("9999-12-31T23:59:59.999999Z") == 253'402'300'799'999'999);
}

TEST_CASE("fractions of a second keep microseconds and truncate finer digits", "[timestamp]") {
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02.1Z") == k20261129T101502Z + 100'000);
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02.123Z") == k20261129T101502Z + 123'000);
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02.123456Z") == k20261129T101502Z + 123'456);
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02.123456789Z") == k20261129T101502Z + 123'456);
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02,5Z") == k20261129T101502Z + 500'000);
  CHECK(ParseIso8601Micros("1969-12-31T23:59:59.999999Z") == -1);
  CHECK_FALSE(ParseIso8601Micros("2026-11-29T10:15:02.1234567891Z"));  // finer than ns
  CHECK_FALSE(ParseIso8601Micros("2026-11-29T10:15:02.Z"));
}

TEST_CASE("offsets from UTC are subtracted to give the UTC instant", "[timestamp]") {
  CHECK(ParseIso8601Micros("2026-11-29T11:15:02+01:00") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2026-11-29T04:45:02-05:30") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2026-11-29T11:45:02+0130") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2026-11-29T12:15:02+02") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02+00:00") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2026-11-29T10:15:02-00:00") == k20261129T101502Z);
  // Crossing midnight and a year boundary.
  CHECK(ParseIso8601Micros("2016-12-31T23:30:00-01:00") == 1'483'228'800'000'000 + 1'800'000'000);
  CHECK(ParseIso8601Micros("2026-11-29T11:15:02.123456789+01:00") == k20261129T101502Z + 123'456);
}

TEST_CASE("timestamps without an offset or a time are read as UTC", "[timestamp]") {
  CHECK(ParseIso8601Micros("2026-11-29 10:15:02") == k20261129T101502Z);
  CHECK(ParseIso8601Micros("2026-11-29T10:15") == k20261129T101502Z - 2'000'000);
  CHECK(ParseIso8601Micros("2026-11-29") ==
        k20261129T101502Z - (10 * 3600 + 15 * 60 + 2) * int64_t{1'000'000});
}

TEST_CASE("a leap second rolls over into the next minute", "[timestamp]") {
  CHECK(ParseIso8601Micros("2016-12-31T23:59:60Z") == ParseIso8601Micros("2017-01-01T00:00:00Z"));
}

TEST_CASE("impossible dates, times and offsets are rejected", "[timestamp]") {
  for (const char* text : {"",
                           "NaN",
                           "2026",
                           "2026-11",
                           "2026-1-29",
                           "2026-11-29T",
                           "2026-13-01T00:00:00Z",
                           "2026-00-10T00:00:00Z",
                           "2026-11-31T00:00:00Z",
                           "2023-02-29T00:00:00Z",
                           "2026-11-29T24:00:00Z",
                           "2026-11-29T10:60:00Z",
                           "2026-11-29T10:15:61Z",
                           "2026-11-29T10:15:02+24:00",
                           "2026-11-29T10:15:02+01:60",
                           "2026-11-29T10:15:02+01:",
                           "2026-11-29T10:15:02Zjunk",
                           "2026-11-29T10:15:02 Z",
                           "2026/11/29T10:15:02Z",
                           "+2026-11-29T10:15:02Z",
                           "2026-11-29T10:15:02.12a3Z",
                           "1795947302123"}) {
    INFO(text);
    CHECK_FALSE(ParseIso8601Micros(text));
  }
}

TEST_CASE("formatting writes RFC 3339 UTC with the shortest exact fraction", "[timestamp]") {
  CHECK(FormatIso8601Micros(0) == "1970-01-01T00:00:00Z");
  CHECK(FormatIso8601Micros(k20261129T101502Z) == "2026-11-29T10:15:02Z");
  CHECK(FormatIso8601Micros(k20261129T101502Z + 123'000) == "2026-11-29T10:15:02.123Z");
  CHECK(FormatIso8601Micros(k20261129T101502Z + 123'456) == "2026-11-29T10:15:02.123456Z");
  CHECK(FormatIso8601Micros(1) == "1970-01-01T00:00:00.000001Z");
  CHECK(FormatIso8601Micros(-1) == "1969-12-31T23:59:59.999999Z");
  CHECK(FormatIso8601Micros(1'709'164'800'000'000) == "2024-02-29T00:00:00Z");
}

TEST_CASE("formatting and parsing round-trip across the four-digit years", "[timestamp]") {
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<int64_t> dist(-62'135'596'800'000'000, 253'402'300'799'999'999);
  for (int i = 0; i < 20'000; ++i) {
    const int64_t micros = dist(rng);
    const std::string text = FormatIso8601Micros(micros);
    INFO(text);
    REQUIRE(ParseIso8601Micros(text) == micros);
  }
}

}  // namespace driftd
