// A record of the JSON decoder (json_decoder_impl.h): the object's keys found by their raw
// bytes, each field's value decoded into its column (scalars, arrays, maps, structs), and the
// exact fast path that reads numbers, and arrays of them, in place. This is the daemon's hottest
// loop: its small helpers stay in this file so that the compiler inlines them.
#include "engine/json_decoder_impl.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "engine/time_iso8601.h"

namespace driftd {
namespace {

inline bool IsDigit(char c) { return static_cast<unsigned char>(c) - unsigned{'0'} <= 9; }

// Powers of ten that doubles hold exactly, for the exact fast path below.
constexpr double kExactPowersOfTen[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                        1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                        1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
constexpr uint64_t kPowersOfTen[] = {1,       10,        100,        1'000,      10'000,
                                     100'000, 1'000'000, 10'000'000, 100'000'000};

// Reads the run of up to 8 ASCII digits at p (8 bytes must be readable) eight at a time:
// returns how many there are and adds their value to *value (shifted by their count). The
// bytes are valid UTF-8 up to the record's end (checked by simdjson's first stage), so no byte
// is 0xFA or above and adding 6 below never carries into a digit that matters.
[[gnu::always_inline]] inline int ReadDigits8(const char* p, uint64_t* value) {
  uint64_t chunk = 0;
  std::memcpy(&chunk, p, 8);
  // A byte is a digit when its high nibble is 3 and stays 3 after adding 6; the XOR leaves a
  // non-zero byte for every non-digit.
  const uint64_t non_digits = ((chunk & 0xF0F0F0F0F0F0F0F0ULL) |
                               (((chunk + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4)) ^
                              0x3333333333333333ULL;
  const int count = non_digits == 0 ? 8 : __builtin_ctzll(non_digits) / 8;
  if (count == 0) return 0;
  // Digit values, first digit in the lowest byte; shifting left drops the bytes after the run
  // and pads the front with zero digits, making an 8-digit number with the same value.
  uint64_t digits = (chunk - 0x3030303030303030ULL) << (8 * (8 - count));
  digits = digits * 10 + (digits >> 8);  // byte 2k: the two-digit number of digits 2k, 2k+1
  digits = ((digits & 0x00FF00FF00FF00FFULL) * 100 + ((digits >> 16) & 0x00FF00FF00FF00FFULL));
  digits = ((digits & 0x0000FFFF0000FFFFULL) * 10'000 + ((digits >> 32) & 0x0000FFFFULL));
  *value = *value * kPowersOfTen[count] + (digits & 0xFFFFFFFFULL);
  return count;
}

// Reads a run of digits at p into *value; returns its length. The run must end before the
// text's sentinel (']'). Past 19 digits *value wraps around, which callers detect from the
// length.
[[gnu::always_inline]] inline int64_t ReadDigits(const char* p, uint64_t* value) {
  int64_t total = 0;
  int count = 0;
  do {
    count = ReadDigits8(p + total, value);
    total += count;
  } while (count == 8);
  return total;
}

// Reads one JSON number at p when its value can be computed exactly in one step: a decimal
// mantissa below 2^53 (and at most 19 digits) and a power of ten within ±22, so that one
// correctly rounded multiplication or division gives the nearest double (Clinger's fast
// path, the same one simdjson takes, hence the same result). Returns the end of the number,
// or nullptr for a malformed number or one that needs the general algorithm. The text must
// end with a non-number byte followed by 8 readable bytes.
[[gnu::always_inline]] inline const char* ScanExactDouble(const char* p, double* out,
                                                          int64_t* fraction_hint) {
  // Signs and integer parts of real data are random, so this path avoids branching on them:
  // a mispredicted branch per number would cost more than the arithmetic.
  const bool negative = *p == '-';
  p += negative ? 1 : 0;
  uint64_t mantissa = 0;
  int64_t digit_count = 1;
  if (IsDigit(p[0]) && p[1] == '.') {
    // The usual one-digit integer part: its end is known without waiting for ReadDigits,
    // which shortens the chain of dependent loads from one number to the next.
    mantissa = static_cast<unsigned>(p[0] - '0');
    ++p;
  } else {
    digit_count = ReadDigits(p, &mantissa);
    // JSON wants at least one digit and no leading zero ("01").
    if (digit_count == 0 || (*p == '0' && digit_count > 1)) return nullptr;
    p += digit_count;
  }
  int64_t exponent = 0;
  if (*p == '.') {
    ++p;
    // Numbers from one producer mostly share their precision. Taking the end of the fraction
    // from the previous number lets the next one start before these digits are decoded; a
    // correctly predicted branch confirms it.
    const char* const predicted_end = p + *fraction_hint;
    const int64_t fraction_digits = ReadDigits(p, &mantissa);
    if (fraction_digits == 0) return nullptr;  // "1." is not JSON
    if (fraction_digits == *fraction_hint) [[likely]] {
      p = predicted_end;
    } else {
      *fraction_hint = fraction_digits;
      p += fraction_digits;
    }
    exponent = -fraction_digits;
    digit_count += fraction_digits;
  }
  if ((*p | 0x20) == 'e') {
    ++p;
    const bool exponent_negative = *p == '-';
    p += (*p == '-' || *p == '+') ? 1 : 0;
    uint64_t value = 0;
    const int64_t exponent_digits = ReadDigits(p, &value);
    if (exponent_digits == 0 || exponent_digits > 6) return nullptr;  // > 6: far off the path
    p += exponent_digits;
    exponent += exponent_negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  }
  if (digit_count > 19 || mantissa > 9'007'199'254'740'991ULL || exponent < -22 || exponent > 22) {
    return nullptr;
  }
  double value = static_cast<double>(mantissa);
  value = exponent < 0 ? value / kExactPowersOfTen[-exponent] : value * kExactPowersOfTen[exponent];
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  bits ^= static_cast<uint64_t>(negative) << 63;
  std::memcpy(out, &bits, sizeof bits);
  return p;
}

}  // namespace

namespace json_detail {

bool IsJsonNumber(std::string_view token, bool* integer) {
  size_t i = 0;
  const size_t n = token.size();
  if (i < n && token[i] == '-') ++i;
  if (i >= n) return false;
  if (token[i] == '0') {
    ++i;
  } else if (IsDigit(token[i])) {
    while (i < n && IsDigit(token[i])) ++i;
  } else {
    return false;
  }
  *integer = true;
  if (i < n && token[i] == '.') {
    ++i;
    if (i >= n || !IsDigit(token[i])) return false;
    while (i < n && IsDigit(token[i])) ++i;
    *integer = false;
  }
  if (i < n && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    if (i < n && (token[i] == '+' || token[i] == '-')) ++i;
    if (i >= n || !IsDigit(token[i])) return false;
    while (i < n && IsDigit(token[i])) ++i;
    *integer = false;
  }
  return i == n;
}

bool ScanNumberArray(const char* p, std::vector<double>* out) {
  if (*p != '[') return false;
  ++p;
  while (IsJsonSpace(*p)) ++p;
  if (*p == ']') return true;
  int64_t fraction_hint = 0;
  while (true) {
    double value = 0;
    p = ScanExactDouble(p, &value, &fraction_hint);
    if (p == nullptr) return false;
    if (out != nullptr) out->push_back(value);
    while (IsJsonSpace(*p)) ++p;
    if (*p == ']') return true;
    if (*p != ',') return false;
    ++p;
    while (IsJsonSpace(*p)) ++p;
  }
}

}  // namespace json_detail

// Whether the raw key bytes (after the opening quote) spell key `k`. Reading 16 bytes is safe:
// the key lies inside the record and the record is followed by SIMDJSON_PADDING bytes.
[[gnu::always_inline]] inline bool JsonDecoder::Impl::KeyIs(const char* raw, int k) const {
  const KeyInfo& info = keys_[k];
  if (info.short_name) [[likely]] {
    uint64_t low = 0;
    uint64_t high = 0;
    std::memcpy(&low, raw, 8);
    std::memcpy(&high, raw + 8, 8);
    return ((low & info.masks[0]) == info.words[0]) & ((high & info.masks[1]) == info.words[1]);
  }
  // Byte by byte: the key's closing quote ends the comparison before it can leave the record.
  const std::string& name = info.name;
  for (size_t i = 0; i < name.size(); ++i) {
    if (raw[i] != name[i]) return false;
  }
  return raw[name.size()] == '"';
}

[[gnu::always_inline]] inline int JsonDecoder::Impl::Lookup(const Level& level, const char* raw,
                                                          int hint) const {
  // Records usually list fields in schema order, so the key after the previous one is tried
  // first; then the keys whose names start with the key's first byte.
  if (hint < level.end && keys_[hint].plain_name && KeyIs(raw, hint)) return hint;
  for (int k = level.first_byte_head[static_cast<unsigned char>(raw[0])]; k >= 0;
       k = keys_[k].next_same_first_byte) {
    if (KeyIs(raw, k)) return k;
  }
  return -1;
}

int JsonDecoder::Impl::LookupUnescaped(const Level& level, std::string_view name) const {
  for (int k = level.begin; k < level.end; ++k) {
    if (keys_[k].name == name) return k;
  }
  return -1;
}

bool JsonDecoder::Impl::DecodeTimestamp(int field, ondemand::value& value, size_t row) {
  Column& column = columns_[field];
  // Fast path: parse the string token in place, without unescaping it into simdjson's buffer.
  // An ISO-8601 text has no backslash, so if it parses, the token needed no unescaping; the
  // unconsumed value is stepped over by the object's iteration.
  const std::string_view token = TrimRight(value.raw_json_token());
  if (token.size() >= 2 && token.front() == '"' && token.back() == '"') {
    if (const std::optional<int64_t> micros =
            ParseIso8601Micros(token.substr(1, token.size() - 2))) {
      column.i64[row] = *micros;
      column.valid[row] = 1;
      return true;
    }
  }
  std::string_view text;
  const error_code string_error = value.get_string().get(text);
  if (string_error == simdjson::SUCCESS) {
    const std::optional<int64_t> micros = ParseIso8601Micros(text);
    if (!micros) {
      return FieldProblem(field, MalformedReason::kWrongType, "not an ISO-8601 timestamp", "string",
                          nullptr, row);
    }
    column.i64[row] = *micros;
    column.valid[row] = 1;
    return true;
  }
  if (string_error != simdjson::INCORRECT_TYPE)
    return OnValueError(field, value, string_error, row);

  // Epoch milliseconds.
  ondemand::number number;
  if (const error_code error = value.get_number().get(number)) {
    return OnValueError(field, value, error, row);
  }
  constexpr int64_t kMaxMillis = std::numeric_limits<int64_t>::max() / 1000;
  int64_t micros = 0;
  switch (number.get_number_type()) {
    case ondemand::number_type::signed_integer: {
      const int64_t millis = number.get_int64();
      if (millis > kMaxMillis || millis < -kMaxMillis) {
        return FieldProblem(field, MalformedReason::kNumberOutOfRange, "number out of range for",
                            "number", nullptr, row);
      }
      micros = millis * 1000;
      break;
    }
    case ondemand::number_type::floating_point_number: {
      const double scaled = number.get_double() * 1000.0;
      if (!(std::fabs(scaled) < 9.2e18)) {
        return FieldProblem(field, MalformedReason::kNumberOutOfRange, "number out of range for",
                            "number", nullptr, row);
      }
      micros = std::llround(scaled);
      break;
    }
    default:
      return FieldProblem(field, MalformedReason::kNumberOutOfRange, "number out of range for",
                          "number", nullptr, row);
  }
  column.i64[row] = micros;
  column.valid[row] = 1;
  return true;
}

bool JsonDecoder::Impl::DecodeString(int field, ondemand::value& value, size_t row) {
  Column& column = columns_[field];
  std::string_view text;
  const error_code error = value.get_string().get(text);
  if (error == simdjson::SUCCESS) {
    column.str_data.append(text);
    column.valid[row] = 1;
    return true;
  }
  if (error == simdjson::INCORRECT_TYPE) {
    // Numbers and booleans are kept as their JSON text, as Spark's JSON reader does.
    ondemand::json_type type;
    if (const error_code type_error = value.type().get(type)) return RejectBroken(type_error);
    if (type == ondemand::json_type::number || type == ondemand::json_type::boolean) {
      if (!AppendScalarText(value, type, field, column.str_data)) return false;
      column.valid[row] = 1;
      return true;
    }
  }
  return OnValueError(field, value, error, row);
}

bool JsonDecoder::Impl::AppendScalarText(ondemand::value& value, ondemand::json_type type,
                                         int field, std::string& out) {
  if (type == ondemand::json_type::number) {
    bool integer = false;
    const std::string_view token = TrimRight(value.raw_json_token());
    if (!IsJsonNumber(token, &integer)) {
      return Reject(MalformedReason::kNotJson, field, "invalid number");
    }
    out.append(token);
    return true;
  }
  bool flag = false;
  if (value.get_bool().get(flag)) return Reject(MalformedReason::kNotJson, field, "invalid literal");
  out.append(flag ? "true" : "false");
  return true;
}

bool JsonDecoder::Impl::DecodeArray(int field, ondemand::value& value, size_t row) {
  Column& column = columns_[field];
  // Scanning the array's text in place costs about a third of iterating it element by element;
  // the object's iteration then steps over it. Anything the scanner does not take (not an
  // array, a non-number, a number that needs more than the exact fast path) is decoded by
  // simdjson, again from the array's text.
  if (max_depth_ >= depth_ + 1 && ScanNumberArray(value.raw_json_token().data(), &column.f64))
      [[likely]] {
    column.valid[row] = 1;
    return CheckArrayLength(field, row);
  }
  column.f64.resize(column.arr_offsets[row]);
  ondemand::array array;
  if (const error_code error = value.get_array().get(array)) {
    return OnValueError(field, value, error, row);
  }
  if (max_depth_ < depth_ + 1) return Reject(MalformedReason::kTooDeep);
  std::string_view text;
  if (const error_code error = array.raw_json().get(text)) return RejectBroken(error);
  ondemand::document document;
  // The text lies inside the record, which is followed by SIMDJSON_PADDING readable bytes.
  const simdjson::padded_string_view padded(text.data(), text.size(),
                                            text.size() + simdjson::SIMDJSON_PADDING);
  if (const error_code error = array_parser_.iterate(padded).get(document)) {
    return RejectBroken(error);
  }
  if (const error_code error = document.get_array().get(array)) return RejectBroken(error);
  return DecodeArrayElements(field, array, row) && CheckArrayLength(field, row);
}

// An array longer than maxArrayLength is a field problem (null under permissive): each element
// would become a drift series with state of its own.
bool JsonDecoder::Impl::CheckArrayLength(int field, size_t row) {
  Column& column = columns_[field];
  const size_t elements =
      (column.type == FieldType::kDoubleArray ? column.f64.size() : column.entry_valid.size()) -
      column.arr_offsets[row];
  if (static_cast<int64_t>(elements) <= spec_.max_array_length) [[likely]] return true;
  array_elements_ = elements;
  return FieldProblem(field, MalformedReason::kTooLarge, kArrayTooLong, nullptr, nullptr, row);
}

bool JsonDecoder::Impl::DecodeArrayElements(int field, ondemand::array& array, size_t row) {
  Column& column = columns_[field];
  bool bad = false;
  for (auto element_result : array) {
    if (const error_code error = element_result.error()) return RejectBroken(error);
    ondemand::value&& element = std::move(element_result).value_unsafe();  // see DecodeFields
    if (!bad) {
      double number = 0;
      const error_code error = element.get_double().get(number);
      if (error == simdjson::SUCCESS) {
        // Some simdjson kernels (AVX2 in 3.0.1) take "1." as a number: hold the token to the
        // JSON grammar, as the fast scanner does.
        bool integer = false;
        if (!IsJsonNumber(TrimRight(element.raw_json_token()), &integer)) {
          return Reject(MalformedReason::kNotJson, field, "invalid number");
        }
        column.f64.push_back(number);
        continue;
      }
      MalformedReason reason = MalformedReason::kWrongType;
      ondemand::json_type type{};
      if (!ClassifyValueError(FieldType::kDoubleArray, element, error, &reason, &type)) {
        problem_.field = field;
        return false;
      }
      if (reason == MalformedReason::kMissingField) reason = MalformedReason::kWrongType;
      const char* text = reason == MalformedReason::kNumberOutOfRange
                             ? "number out of range for"
                             : "array elements must be numbers, got";
      if (!FieldProblem(field, reason, text, JsonTypeName(type), nullptr, row)) return false;
      bad = true;  // permissive: the field is null; check the rest of the array
      // Classifying consumed a literal; anything else is still to be walked.
      if (type == ondemand::json_type::boolean || type == ondemand::json_type::null) continue;
    }
    if (!SkipValue(element, depth_ + 2)) return false;
  }
  if (!bad) column.valid[row] = 1;
  return true;
}

[[gnu::always_inline]] inline bool JsonDecoder::Impl::DecodeField(int field, ondemand::value& value,
                                                                  size_t row) {
  Column& column = columns_[field];
  switch (fields_[field].type) {
    case FieldType::kDouble: {
      double number = 0;
      // The exact fast path on the token in place, as for array elements; the value is left
      // for the object's iteration to step over. Anything else goes through simdjson.
      const std::string_view token = TrimRight(value.raw_json_token());
      int64_t fraction_hint = 0;
      if (ScanExactDouble(token.data(), &number, &fraction_hint) == token.data() + token.size())
          [[likely]] {
        column.f64[row] = number;
        column.valid[row] = 1;
        return true;
      }
      const error_code error = value.get_double().get(number);
      if (error == simdjson::SUCCESS) [[likely]] {
        column.f64[row] = number;
        column.valid[row] = 1;
        return true;
      }
      return OnValueError(field, value, error, row);
    }
    case FieldType::kLong:
    case FieldType::kInt: {
      int64_t number = 0;
      error_code error = value.get_int64().get(number);
      if (error == simdjson::INCORRECT_TYPE) {
        // A number written with a fraction or an exponent whose value is a whole number (1.0,
        // 2e3), as Python's json and pandas write an integer label held as a float, is that
        // integer: nothing is lost. A fractional one (1.5) stays a wrong type.
        // Read from the token, which a failed read leaves unconsumed (the value's error is
        // classified from it below); a whole number is then consumed as a double.
        // (An integer without a fraction or exponent failed for its range alone.)
        const std::string_view token = TrimRight(value.raw_json_token());
        double real = 0;
        const auto [end, parsed] = std::from_chars(token.data(), token.data() + token.size(), real);
        if (token.find_first_of(".eE") != std::string_view::npos && parsed == std::errc() &&
            end == token.data() + token.size() && std::isfinite(real) && real == std::trunc(real)) {
          if (!(real >= -9.223372036854775808e18 && real < 9.223372036854775808e18)) {
            return FieldProblem(field, MalformedReason::kNumberOutOfRange,
                                "number out of range for", "number", &value, row);
          }
          double consumed = 0;
          if (value.get_double().get(consumed) == simdjson::SUCCESS) {
            number = static_cast<int64_t>(consumed);
            error = simdjson::SUCCESS;
          }
        }
      }
      if (error == simdjson::SUCCESS) [[likely]] {
        if (fields_[field].type == FieldType::kInt &&
            (number < std::numeric_limits<int32_t>::min() ||
             number > std::numeric_limits<int32_t>::max())) {
          return FieldProblem(field, MalformedReason::kNumberOutOfRange, "number out of range for",
                              "number", nullptr, row);
        }
        column.i64[row] = number;
        column.valid[row] = 1;
        return true;
      }
      return OnValueError(field, value, error, row);
    }
    case FieldType::kBoolean: {
      bool flag = false;
      const error_code error = value.get_bool().get(flag);
      if (error == simdjson::SUCCESS) [[likely]] {
        column.i64[row] = flag ? 1 : 0;
        column.valid[row] = 1;
        return true;
      }
      return OnValueError(field, value, error, row);
    }
    case FieldType::kString:
      return DecodeString(field, value, row);
    case FieldType::kTimestamp:
      return DecodeTimestamp(field, value, row);
    case FieldType::kDoubleArray:
      return DecodeArray(field, value, row);
    case FieldType::kStringArray:
      return DecodeStringArray(field, value, row);
    case FieldType::kDoubleMap:
    case FieldType::kStringMap:
      return DecodeMap(field, value, row);
  }
  return Reject(MalformedReason::kWrongType, field);
}

template <bool kNested>
bool JsonDecoder::Impl::DecodeFields(ondemand::object& object, size_t row, const Level& level) {
  int hint = level.begin;
  for (auto field_result : object) {
    if (const error_code error = field_result.error()) return RejectBroken(error);
    // Used in place: copying the field out of its result makes the compiler reload it whole
    // from the narrower stores that built it, a store-forwarding stall on every field.
    ondemand::field&& field = std::move(field_result).value_unsafe();
    int index = Lookup(level, field.key().raw(), hint);
    if (index < 0) {
      // Not a plain schema name: an escaped spelling of one, or a field to ignore.
      const char* raw = field.key().raw();
      while (*raw != '"' && *raw != '\\') ++raw;
      if (*raw == '\\') {
        std::string_view name;
        if (const error_code error = field.unescaped_key().get(name)) {
          return Reject(MalformedReason::kNotJson, -1, "invalid key", error);
        }
        index = LookupUnescaped(level, name);
      }
      if (index < 0) {
        if (!SkipValue(field.value(), level.depth + 1)) return false;
        continue;
      }
    }
    if constexpr (!kNested) {
      if (seen_stamp_[index] == stamp_) {
        return Reject(MalformedReason::kDuplicateField, index, "appears more than once");
      }
      seen_stamp_[index] = stamp_;
      if (!fields_[index].nullable) ++required_seen_;
      hint = index + 1;
      if (!fields_[index].decode) [[unlikely]] {
        // Projected out: null, as a field outside the schema but for its name.
        if (!SkipUnused(field.value(), level.depth + 1)) return false;
        continue;
      }
      if (!DecodeField(index, field.value(), row)) return false;
      continue;
    }
    const KeyInfo& key = keys_[index];
    if (seen_stamp_[index] == stamp_) {
      Reject(MalformedReason::kDuplicateField, key.column, "appears more than once");
      problem_.key = index;
      return false;
    }
    seen_stamp_[index] = stamp_;
    if (!key.nullable) ++required_seen_;
    hint = index + 1;
    if (key.column >= 0) [[likely]] {
      if (!fields_[key.column].decode) [[unlikely]] {
        // Projected out: null, as a field outside the schema but for its name.
        if (!SkipUnused(field.value(), level.depth + 1)) return false;
        continue;
      }
      if (!DecodeField(key.column, field.value(), row)) return false;
    } else if (!DecodeStruct(index, field.value(), row)) {
      return false;
    }
  }
  return true;
}

// A struct's object: its keys are decoded into their leaf columns. A struct that is null
// leaves them null (or makes the record malformed when the struct is not nullable); one that
// is not an object is a wrong type, by the malformed policy.
bool JsonDecoder::Impl::DecodeStruct(int key, ondemand::value& value, size_t row) {
  const KeyInfo& info = keys_[key];
  const Level& level = levels_[info.level];
  ondemand::object object;
  const error_code error = value.get_object().get(object);
  if (error == simdjson::SUCCESS) {
    if (level.depth > max_depth_) return Reject(MalformedReason::kTooDeep);
    const int outer = depth_;
    depth_ = level.depth;
    const bool ok = DecodeFields<true>(object, row, level);
    depth_ = outer;
    return ok;
  }
  if (!IsValueError(error)) return RejectBroken(error);
  ondemand::json_type type{};
  if (const error_code type_error = value.type().get(type)) return RejectBroken(type_error);
  if (type == ondemand::json_type::null) {
    if (!CheckLiteral(value, type)) return false;
    if (info.nullable) return true;  // its leaves stay null
    Reject(MalformedReason::kMissingField, -1, "is null but not nullable");
    problem_.key = key;
    return false;
  }
  if (!permissive_ || !info.nullable) {
    Reject(MalformedReason::kWrongType, -1, nullptr);
    problem_.key = key;
    problem_.got = JsonTypeName(type);
    return false;
  }
  // Permissive: the struct is null (its leaves were not set), the row is kept and counted.
  if (!row_nulled_) {
    row_nulled_ = true;
    problem_ = Problem{MalformedReason::kWrongType, -1, key, nullptr, JsonTypeName(type),
                       simdjson::SUCCESS, 0};
  }
  return SkipValue(value, depth_ + 1);
}

// A problem with one value of a map or one element of an array<string>: under permissive the
// entry becomes null (the rest of the value is kept) and the row is counted; otherwise the
// record is malformed.
bool JsonDecoder::Impl::EntryProblem(int field, MalformedReason reason, const char* text,
                                     const char* got, ondemand::value* unconsumed, size_t row) {
  if (!permissive_) {
    Reject(reason, field, text);
    problem_.got = got;
    return false;
  }
  Column& column = columns_[field];
  column.entry_valid.push_back(0);
  if (column.type == FieldType::kDoubleMap) {
    column.f64.push_back(0);
  } else {
    column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
  }
  if (!row_nulled_) {
    row_nulled_ = true;
    problem_ = Problem{reason, field, -1, text, got, simdjson::SUCCESS, 0};
  }
  static_cast<void>(row);
  return unconsumed == nullptr || SkipValue(*unconsumed, depth_ + 2);
}

// An element of an array<string> or a value of a map<string,string> that did not read as a
// string (`error`): a null entry, a number or boolean kept as its JSON text (as for string
// columns), or else an EntryProblem whose text is `wrong_type` and the type found.
bool JsonDecoder::Impl::DecodeEntryNotString(int field, ondemand::value& entry, error_code error,
                                             const char* wrong_type, size_t row) {
  Column& column = columns_[field];
  if (!IsValueError(error)) return RejectBroken(error);
  ondemand::json_type type{};
  if (const error_code type_error = entry.type().get(type)) return RejectBroken(type_error);
  bool present = true;
  switch (type) {
    case ondemand::json_type::null:
      if (!CheckLiteral(entry, type)) return false;
      present = false;
      break;
    case ondemand::json_type::number:
    case ondemand::json_type::boolean:
      // As for string columns: kept as its JSON text.
      if (!AppendScalarText(entry, type, field, column.str_data)) return false;
      break;
    case ondemand::json_type::string:
      return Reject(MalformedReason::kNotJson, -1, "invalid string", error);
    default:
      return EntryProblem(field, MalformedReason::kWrongType, wrong_type, JsonTypeName(type),
                          &entry, row);
  }
  column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
  column.entry_valid.push_back(present ? 1 : 0);
  return true;
}

bool JsonDecoder::Impl::DecodeStringArray(int field, ondemand::value& value, size_t row) {
  Column& column = columns_[field];
  ondemand::array array;
  if (const error_code error = value.get_array().get(array)) {
    return OnValueError(field, value, error, row);
  }
  if (max_depth_ < depth_ + 1) return Reject(MalformedReason::kTooDeep);
  for (auto element_result : array) {
    if (const error_code error = element_result.error()) return RejectBroken(error);
    ondemand::value&& element = std::move(element_result).value_unsafe();  // see DecodeFields
    std::string_view text;
    const error_code error = element.get_string().get(text);
    if (error == simdjson::SUCCESS) [[likely]] {
      column.str_data.append(text);
      column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
      column.entry_valid.push_back(1);
      continue;
    }
    if (!DecodeEntryNotString(field, element, error, "array elements must be strings, got",
                              row)) {
      return false;
    }
  }
  column.valid[row] = 1;
  return CheckArrayLength(field, row);
}

// Whether `key` is among the keys the map's row has so far. A 256-bit Bloom filter of the
// keys read before (hashed from the raw bytes in the padded record when the key needs no
// unescaping) answers most keys without comparing strings.
inline bool JsonDecoder::Impl::IsDuplicateKey(const Column& column, size_t row_begin,
                                              std::string_view key, const char* raw) {
  uint64_t head = 0;
  uint64_t tail = 0;
  if (raw != nullptr) {
    std::memcpy(&head, raw, 8);  // the record is followed by SIMDJSON_PADDING bytes
    if (key.size() < 8) head &= (uint64_t{1} << (8 * key.size())) - 1;
    if (key.size() > 8) std::memcpy(&tail, raw + key.size() - 8, 8);
  } else {
    std::memcpy(&head, key.data(), std::min<size_t>(8, key.size()));
    if (key.size() > 8) std::memcpy(&tail, key.data() + key.size() - 8, 8);
  }
  const uint64_t hash =
      (head * 0x9E3779B97F4A7C15ULL) ^ (tail * 0xC2B2AE3D27D4EB4FULL) ^ (key.size() * 0x165667B19E3779F9ULL);
  const unsigned bit = static_cast<unsigned>(hash >> 56);
  uint64_t& word = key_bloom_[bit >> 6];
  const uint64_t mask = uint64_t{1} << (bit & 63);
  if ((word & mask) == 0) [[likely]] {
    word |= mask;
    return false;
  }
  // The key's own bytes are the last of key_data, after those of the row's earlier keys.
  for (size_t e = row_begin; e < column.entry_valid.size(); ++e) {
    if (column.Key(e) == key) return true;
  }
  return false;
}

bool JsonDecoder::Impl::DecodeMap(int field, ondemand::value& value, size_t row) {
  Column& column = columns_[field];
  ondemand::object object;
  if (const error_code error = value.get_object().get(object)) {
    return OnValueError(field, value, error, row);
  }
  if (max_depth_ < depth_ + 1) return Reject(MalformedReason::kTooDeep);
  const bool doubles = column.type == FieldType::kDoubleMap;
  const size_t row_begin = column.arr_offsets[row];
  key_bloom_ = {};
  for (auto field_result : object) {
    if (const error_code error = field_result.error()) return RejectBroken(error);
    ondemand::field&& entry = std::move(field_result).value_unsafe();  // see DecodeFields
    // The key's bytes in place when it has no escapes, else unescaped by simdjson.
    const char* raw = entry.key().raw();
    const char* end = raw;
    while (*end != '"' && *end != '\\') ++end;
    std::string_view key(raw, static_cast<size_t>(end - raw));
    if (*end == '\\') {
      raw = nullptr;
      if (const error_code error = entry.unescaped_key().get(key)) {
        return Reject(MalformedReason::kNotJson, -1, "invalid key", error);
      }
    }
    if (IsDuplicateKey(column, row_begin, key, raw)) {
      duplicate_key_.assign(key);
      return Reject(MalformedReason::kDuplicateField, field, kDuplicateKey);
    }
    column.key_data.append(key);
    column.key_offsets.push_back(static_cast<uint32_t>(column.key_data.size()));
    ondemand::value& item = entry.value();
    if (doubles) {
      double number = 0;
      const std::string_view token = TrimRight(item.raw_json_token());
      int64_t fraction_hint = 0;
      if (ScanExactDouble(token.data(), &number, &fraction_hint) == token.data() + token.size())
          [[likely]] {
        column.f64.push_back(number);
        column.entry_valid.push_back(1);
        continue;
      }
      const error_code error = item.get_double().get(number);
      if (error == simdjson::SUCCESS) {
        bool integer = false;
        if (!IsJsonNumber(token, &integer)) {
          return Reject(MalformedReason::kNotJson, field, "invalid number");
        }
        column.f64.push_back(number);
        column.entry_valid.push_back(1);
        continue;
      }
      MalformedReason reason = MalformedReason::kWrongType;
      ondemand::json_type type{};
      if (!ClassifyValueError(FieldType::kDouble, item, error, &reason, &type)) {
        problem_.field = field;
        return false;
      }
      if (reason == MalformedReason::kMissingField) {  // null: a value not given
        column.f64.push_back(0);
        column.entry_valid.push_back(0);
        continue;
      }
      const bool consumed = type == ondemand::json_type::boolean;
      if (!EntryProblem(field, reason,
                        reason == MalformedReason::kNumberOutOfRange
                            ? "number out of range for"
                            : "map values must be numbers, got",
                        JsonTypeName(type), consumed ? nullptr : &item, row)) {
        return false;
      }
      continue;
    }
    std::string_view text;
    const error_code error = item.get_string().get(text);
    if (error == simdjson::SUCCESS) [[likely]] {
      column.str_data.append(text);
      column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
      column.entry_valid.push_back(1);
      continue;
    }
    if (!DecodeEntryNotString(field, item, error,
                              "map values must be strings, numbers or booleans, got", row)) {
      return false;
    }
  }
  column.valid[row] = 1;
  return CheckArrayLength(field, row);
}

JsonDecoder::Impl::Verdict JsonDecoder::Impl::DecodeRecord(const char* data, size_t size,
                                                           size_t readable, size_t row) {
  record_ = std::string_view(data, size);
  row_nulled_ = false;
  required_seen_ = 0;
  problem_.record_size = size;
  if (static_cast<int64_t>(size) > spec_.max_record_bytes) {
    Reject(MalformedReason::kTooLarge);
    return Verdict::kRejected;
  }
  size_t begin = 0;
  size_t end = size;
  while (begin < end && IsJsonSpace(data[begin])) ++begin;
  while (end > begin && IsJsonSpace(data[end - 1])) --end;
  if (begin == end) {
    Reject(MalformedReason::kEmpty);
    return Verdict::kRejected;
  }
  if (data[begin] != '{') {
    const std::string_view body(data + begin, end - begin);
    const char first = body.front();
    const bool json_like = first == '[' || first == '"' || first == '-' || IsDigit(first) ||
                           body == "true" || body == "false" || body == "null";
    Reject(json_like ? MalformedReason::kNotObject : MalformedReason::kNotJson, -1,
           json_like ? "top level is not an object" : nullptr);
    return Verdict::kRejected;
  }
  // A record whose last byte is not '}' cannot be a complete object. Rejecting it here also
  // guarantees that simdjson never scans a number or literal past the record's end.
  if (data[end - 1] != '}') {
    RejectBroken(simdjson::TAPE_ERROR);
    return Verdict::kRejected;
  }

  if (readable < size + simdjson::SIMDJSON_PADDING) {
    scratch_.assign(data, size);
    scratch_.reserve(size + simdjson::SIMDJSON_PADDING);
    data = scratch_.data();
    readable = scratch_.capacity();
  }
  if (size > parser_.capacity()) {
    const size_t limit = static_cast<size_t>(spec_.max_record_bytes);
    const size_t grown = std::max(size, std::min(limit, parser_.capacity() * 2));
    if (parser_.allocate(grown) != simdjson::SUCCESS) {
      Reject(MalformedReason::kTooLarge, -1, "cannot allocate parser memory", simdjson::MEMALLOC);
      return Verdict::kRejected;
    }
  }

  ondemand::document document;
  if (const error_code error =
          parser_.iterate(simdjson::padded_string_view(data, size, readable)).get(document)) {
    RejectBroken(error);
    return Verdict::kRejected;
  }
  ondemand::object object;
  if (const error_code error = document.get_object().get(object)) {
    RejectBroken(error);
    return Verdict::kRejected;
  }
  depth_ = 1;
  if (!(nested_ ? DecodeFields<true>(object, row, levels_[0])
                : DecodeFields<false>(object, row, levels_[0]))) {
    return Verdict::kRejected;
  }
  // On-demand parsing stops at the object's closing brace: anything after it is an error.
  const char* trailing = nullptr;
  if (document.current_location().get(trailing) != simdjson::OUT_OF_BOUNDS) {
    Reject(MalformedReason::kNotJson, -1, "trailing content after the object");
    return Verdict::kRejected;
  }
  if (required_seen_ != num_required_) {
    for (int k = levels_[0].begin; k < levels_[0].end; ++k) {
      if (!keys_[k].nullable && seen_stamp_[k] != stamp_) {
        Reject(MalformedReason::kMissingField, keys_[k].column, "is missing");
        problem_.key = k;
        return Verdict::kRejected;
      }
    }
  }
  return row_nulled_ ? Verdict::kKeptNulled : Verdict::kOk;
}

}  // namespace driftd
