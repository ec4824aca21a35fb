#include "engine/json_writer.h"

#include <chrono>
#include <iterator>

namespace driftd {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t length = 0;
  uint32_t min_code = 0;
  uint32_t code = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    length = 2, min_code = 0x80, code = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    length = 3, min_code = 0x800, code = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    length = 4, min_code = 0x10000, code = c & 0x07;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t length = Utf8SequenceLength(bytes, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

void AppendBase64(std::string& out, std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out.reserve(out.size() + (bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k])); };
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t word = at(i) << 16 | at(i + 1) << 8 | at(i + 2);
    for (int shift = 18; shift >= 0; shift -= 6) out.push_back(kAlphabet[(word >> shift) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest == 0) return;
  const uint32_t word = at(i) << 16 | (rest == 2 ? at(i + 1) << 8 : 0);
  out.push_back(kAlphabet[(word >> 18) & 63]);
  out.push_back(kAlphabet[(word >> 12) & 63]);
  out.push_back(rest == 2 ? kAlphabet[(word >> 6) & 63] : '=');
  out.push_back('=');
}

void AppendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      default: break;
    }
    if (c < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
      ++i;
      continue;
    }
    size_t length = Utf8SequenceLength(s, i);
    if (length == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    out.append(s.data() + i, length);
    i += length;
  }
  out.push_back('"');
}

void AppendTimestampUs(std::string& out, int64_t micros) {
  using namespace std::chrono;
  sys_time<microseconds> tp{microseconds{micros}};
  auto day = floor<days>(tp);
  year_month_day ymd{day};
  hh_mm_ss<microseconds> time{tp - day};
  fmt::format_to(std::back_inserter(out), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                 static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                 static_cast<unsigned>(ymd.day()), time.hours().count(), time.minutes().count(),
                 time.seconds().count(), time.subseconds().count() / 1000);
}

std::string FormatTimestampUs(int64_t micros) {
  std::string out;
  AppendTimestampUs(out, micros);
  return out;
}

}  // namespace driftd
