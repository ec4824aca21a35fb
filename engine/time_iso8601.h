// Conversions between ISO-8601 / RFC 3339 timestamps and driftd's time representation
// (int64 microseconds since the Unix epoch, UTC). The decoder parses event times with these;
// sinks and the console format them back. Thread-safe (parsing remembers the last date per
// thread), no allocation except FormatIso8601Micros's returned string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace driftd {

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1-12, day 1-31, not checked).
int64_t DaysFromCivil(int64_t year, int month, int day);

/// Parses an ISO-8601 / RFC 3339 date-time into microseconds since the epoch, UTC:
///   YYYY-MM-DD[(T|t| )hh:mm[:ss[(.|,)f{1,9}]][Z|z|(+|-)hh[:]mm|(+|-)hh]]
/// e.g. "2026-11-29T10:15:02.123Z", "2026-11-29T11:15:02.123456789+01:00", "2026-11-29".
/// A time without an offset is taken as UTC. Digits past microseconds are truncated; a leap
/// second (ss = 60) rolls over into the next minute. Returns nullopt for anything else,
/// including out-of-range fields (month 13, February 30, hour 24, offset beyond ±23:59).
std::optional<int64_t> ParseIso8601Micros(std::string_view text);

/// Enough room for any value FormatIso8601Micros writes.
inline constexpr size_t kIso8601MaxLength = 40;

/// Writes `micros` as RFC 3339 in UTC with the shortest of no fraction, milliseconds or
/// microseconds that is exact ("2026-11-29T10:15:02.123Z"); returns the length written.
/// `out` must hold kIso8601MaxLength bytes.
size_t FormatIso8601Micros(int64_t micros, char* out);
std::string FormatIso8601Micros(int64_t micros);

}  // namespace driftd
