#include "engine/time_iso8601.h"

#include <fmt/format.h>

namespace driftd {
namespace {

constexpr int64_t kMicrosPerSecond = 1'000'000;
constexpr int64_t kSecondsPerDay = 86'400;

// Parses exactly `count` ASCII digits at text[pos]; -1 if any is not a digit.
inline int Digits(std::string_view text, size_t pos, size_t count) {
  if (pos + count > text.size()) return -1;
  int value = 0;
  for (size_t i = 0; i < count; ++i) {
    const unsigned digit = static_cast<unsigned char>(text[pos + i]) - unsigned{'0'};
    if (digit > 9) return -1;
    value = value * 10 + static_cast<int>(digit);
  }
  return value;
}

inline bool IsLeapYear(int64_t year) {
  return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

inline int DaysInMonth(int64_t year, int month) {
  static constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeapYear(year) ? 29 : kDays[month - 1];
}

struct CivilDate {
  int64_t year;
  int month;
  int day;
};

// Inverse of DaysFromCivil. Counts in 400-year eras starting on March 1st, so that the leap
// day is the last day of an era-year and month lengths follow a fixed 5-month pattern.
CivilDate CivilFromDays(int64_t days) {
  days += 719'468;  // shift the epoch to 0000-03-01
  const int64_t era = (days >= 0 ? days : days - 146'096) / 146'097;
  const int64_t day_of_era = days - era * 146'097;  // [0, 146096]
  const int64_t year_of_era =
      (day_of_era - day_of_era / 1'460 + day_of_era / 36'524 - day_of_era / 146'096) / 365;
  const int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
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

int64_t DaysFromCivil(int64_t year, int month, int day) {
  year -= month <= 2 ? 1 : 0;
  const int64_t era = (year >= 0 ? year : year - 399) / 400;
  const int64_t year_of_era = year - era * 400;                                  // [0, 399]
  const int64_t day_of_year = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
  const int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146'097 + day_of_era - 719'468;
}

std::optional<int64_t> ParseIso8601Micros(std::string_view text) {
  // Date: YYYY-MM-DD (fixed positions, as RFC 3339 requires).
  const int year = Digits(text, 0, 4);
  const int month = Digits(text, 5, 2);
  const int day = Digits(text, 8, 2);
  if (year < 0 || month < 1 || month > 12 || day < 1 || text[4] != '-' || text[7] != '-') {
    return std::nullopt;
  }
  if (day > DaysInMonth(year, month)) return std::nullopt;

  int hour = 0;
  int minute = 0;
  int second = 0;
  int64_t fraction_us = 0;
  size_t pos = 10;
  if (pos < text.size() && (text[pos] == 'T' || text[pos] == 't' || text[pos] == ' ')) {
    hour = Digits(text, pos + 1, 2);
    minute = Digits(text, pos + 4, 2);
    if (hour < 0 || hour > 23 || minute < 0 || minute > 59 || text[pos + 3] != ':') {
      return std::nullopt;
    }
    pos += 6;
    if (pos < text.size() && text[pos] == ':') {
      second = Digits(text, pos + 1, 2);
      if (second < 0 || second > 60) return std::nullopt;
      pos += 3;
      if (pos < text.size() && (text[pos] == '.' || text[pos] == ',')) {
        ++pos;
        size_t count = 0;
        int64_t scale = 100'000;
        while (pos < text.size()) {
          const unsigned digit = static_cast<unsigned char>(text[pos]) - unsigned{'0'};
          if (digit > 9) break;
          if (++count > 9) return std::nullopt;  // finer than nanoseconds
          fraction_us += digit * scale;
          scale /= 10;
          ++pos;
        }
        if (count == 0) return std::nullopt;
      }
    }
    // Offset: Z, +hh:mm, +hhmm, +hh; none means UTC.
    if (pos < text.size()) {
      const char sign = text[pos];
      if (sign == 'Z' || sign == 'z') {
        ++pos;
      } else if (sign == '+' || sign == '-') {
        const int offset_hours = Digits(text, pos + 1, 2);
        if (offset_hours < 0 || offset_hours > 23) return std::nullopt;
        pos += 3;
        int offset_minutes = 0;
        if (pos < text.size()) {
          if (text[pos] == ':') ++pos;
          offset_minutes = Digits(text, pos, 2);
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
  if (pos != text.size()) return std::nullopt;

  const int64_t days = DaysFromCivil(year, month, day);
  const int64_t seconds = days * kSecondsPerDay + int64_t{hour} * 3600 + int64_t{minute} * 60 + second;
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
    result = fmt::format_to_n(out, kIso8601MaxLength, "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                              date.year, date.month, date.day, hour, minute, second,
                              fraction / 1000);
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
