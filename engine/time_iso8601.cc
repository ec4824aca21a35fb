#include "engine/time_iso8601.h"

#include <cstring>

#include <fmt/format.h>

namespace driftd {
namespace {

constexpr int64_t kMicrosPerSecond = 1'000'000;
constexpr int64_t kSecondsPerDay = 86'400;

[[gnu::always_inline]] inline unsigned DigitValue(char c) {
  return static_cast<unsigned char>(c) - unsigned{'0'};
}

// The two / four ASCII digits at p, or -1. Callers check the length first. Written without
// loops: event times are parsed once per record on the decoder's hot path.
[[gnu::always_inline]] inline int TwoDigits(const char* p) {
  const unsigned a = DigitValue(p[0]);
  const unsigned b = DigitValue(p[1]);
  return (a > 9) | (b > 9) ? -1 : static_cast<int>(a * 10 + b);
}

[[gnu::always_inline]] inline int FourDigits(const char* p) {
  const int high = TwoDigits(p);
  const int low = TwoDigits(p + 2);
  return (high < 0) | (low < 0) ? -1 : high * 100 + low;
}

inline bool IsLeapYear(int64_t year) {
  return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

inline int DaysInMonth(int64_t year, int month) {
  static constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeapYear(year) ? 29 : kDays[month - 1];
}

// Days since 1970-01-01. Counts in 400-year eras starting on March 1st, so that the leap day
// is the last day of an era-year and month lengths follow a fixed 5-month pattern.
[[gnu::always_inline]] inline int64_t CivilToDays(int64_t year, int month, int day) {
  year -= month <= 2 ? 1 : 0;
  const int64_t era = (year >= 0 ? year : year - 399) / 400;
  const int64_t year_of_era = year - era * 400;  // [0, 399]
  const int64_t day_of_year = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
  const int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146'097 + day_of_era - 719'468;
}

struct CivilDate {
  int64_t year;
  int month;
  int day;
};

// Inverse of CivilToDays, with the same March-based eras.
CivilDate CivilFromDays(int64_t days) {
  days += 719'468;  // shift the epoch to 0000-03-01
  const int64_t era = (days >= 0 ? days : days - 146'096) / 146'097;
  const int64_t day_of_era = days - era * 146'097;  // [0, 146096]
  const int64_t year_of_era =
      (day_of_era - day_of_era / 1'460 + day_of_era / 36'524 - day_of_era / 146'096) / 365;
  const int64_t day_of_year =
      day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  const int64_t month_index = (5 * day_of_year + 2) / 153;  // 0 = March
  const int day = static_cast<int>(day_of_year - (153 * month_index + 2) / 5 + 1);
  const int month = static_cast<int>(month_index < 10 ? month_index + 3 : month_index - 9);
  const int64_t year = year_of_era + era * 400 + (month <= 2 ? 1 : 0);
  return {year, month, day};
}

inline int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

}  // namespace

int64_t DaysFromCivil(int64_t year, int month, int day) { return CivilToDays(year, month, day); }

std::optional<int64_t> ParseIso8601Micros(std::string_view text) {
  const char* p = text.data();
  const size_t n = text.size();
  // Date: YYYY-MM-DD (fixed positions, as RFC 3339 requires). Consecutive event times share
  // their date, so the last date's day number is remembered per thread.
  if (n < 10) return std::nullopt;
  struct DateCache {
    char text[10] = {'1', '9', '7', '0', '-', '0', '1', '-', '0', '1'};
    int64_t days = 0;
  };
  thread_local DateCache cache;
  int64_t days = 0;
  if (std::memcmp(cache.text, p, 10) == 0) {
    days = cache.days;
  } else {
    if (p[4] != '-' || p[7] != '-') return std::nullopt;
    const int year = FourDigits(p);
    const int month = TwoDigits(p + 5);
    const int day = TwoDigits(p + 8);
    if (year < 0 || month < 1 || month > 12 || day < 1 || day > DaysInMonth(year, month)) {
      return std::nullopt;
    }
    days = CivilToDays(year, month, day);
    std::memcpy(cache.text, p, 10);
    cache.days = days;
  }

  int hour = 0;
  int minute = 0;
  int second = 0;
  int64_t fraction_us = 0;
  size_t pos = 10;
  if (pos < n && (p[pos] == 'T' || p[pos] == 't' || p[pos] == ' ')) {
    if (n < 16 || p[13] != ':') return std::nullopt;
    hour = TwoDigits(p + 11);
    minute = TwoDigits(p + 14);
    if (hour < 0 || hour > 23 || minute < 0 || minute > 59) return std::nullopt;
    pos = 16;
    if (pos < n && p[pos] == ':') {
      if (n < 19) return std::nullopt;
      second = TwoDigits(p + 17);
      if (second < 0 || second > 60) return std::nullopt;
      pos = 19;
      if (pos < n && (p[pos] == '.' || p[pos] == ',')) {
        ++pos;
        const size_t start = pos;
        int64_t scale = 100'000;
        for (; pos < n; ++pos) {
          const unsigned digit = DigitValue(p[pos]);
          if (digit > 9) break;
          fraction_us += digit * scale;
          scale /= 10;
        }
        // One to nine digits (nanoseconds); digits past microseconds only truncate.
        if (pos == start || pos - start > 9) return std::nullopt;
      }
    }
    // Offset: Z, +hh:mm, +hhmm, +hh; none means UTC.
    if (pos < n) {
      const char sign = p[pos];
      if (sign == 'Z' || sign == 'z') {
        ++pos;
      } else if (sign == '+' || sign == '-') {
        if (n < pos + 3) return std::nullopt;
        const int offset_hours = TwoDigits(p + pos + 1);
        if (offset_hours < 0 || offset_hours > 23) return std::nullopt;
        pos += 3;
        int offset_minutes = 0;
        if (pos < n) {
          if (p[pos] == ':') ++pos;
          if (n < pos + 2) return std::nullopt;
          offset_minutes = TwoDigits(p + pos);
          if (offset_minutes < 0 || offset_minutes > 59) return std::nullopt;
          pos += 2;
        }
        const int offset = (offset_hours * 60 + offset_minutes) * (sign == '+' ? 1 : -1);
        // Local time minus the offset is UTC.
        minute -= offset;
      } else {
        return std::nullopt;
      }
    }
  }
  if (pos != n) return std::nullopt;

  const int64_t seconds =
      days * kSecondsPerDay + int64_t{hour} * 3600 + int64_t{minute} * 60 + second;
  return seconds * kMicrosPerSecond + fraction_us;
}

size_t FormatIso8601Micros(int64_t micros, char* out) {
  const int64_t seconds = FloorDiv(micros, kMicrosPerSecond);
  const int64_t fraction = micros - seconds * kMicrosPerSecond;
  const int64_t days = FloorDiv(seconds, kSecondsPerDay);
  const int64_t second_of_day = seconds - days * kSecondsPerDay;
  const CivilDate date = CivilFromDays(days);
  const int hour = static_cast<int>(second_of_day / 3600);
  const int minute = static_cast<int>(second_of_day / 60 % 60);
  const int second = static_cast<int>(second_of_day % 60);

  fmt::format_to_n_result<char*> result;
  if (fraction == 0) {
    result = fmt::format_to_n(out, kIso8601MaxLength, "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                              date.year, date.month, date.day, hour, minute, second);
  } else if (fraction % 1000 == 0) {
    result =
        fmt::format_to_n(out, kIso8601MaxLength, "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                         date.year, date.month, date.day, hour, minute, second, fraction / 1000);
  } else {
    result = fmt::format_to_n(out, kIso8601MaxLength, "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                              date.year, date.month, date.day, hour, minute, second, fraction);
  }
  return result.size < kIso8601MaxLength ? result.size : kIso8601MaxLength;
}

std::string FormatIso8601Micros(int64_t micros) {
  char buffer[kIso8601MaxLength];
  return std::string(buffer, FormatIso8601Micros(micros, buffer));
}

}  // namespace driftd
