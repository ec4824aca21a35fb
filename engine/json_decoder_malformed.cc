// What the JSON decoder does with a value that does not fit its field (json_decoder_impl.h):
// the record rejected, a failed read classified (wrong_type, number_out_of_range, a null), the
// field kept null under permissive; and values walked without being decoded (a key outside the
// schema, a projected-out field, a bad value kept as null), checked for validity and depth.
#include "engine/json_decoder_impl.h"

#include <cstdint>
#include <string_view>
#include <utility>

namespace driftd {
namespace {

// Whether a broken record was cut short (ends inside a string or an open container) rather
// than garbled. Only runs on records already known to be malformed.
bool EndsUnclosed(std::string_view record) {
  int64_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : record) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return in_string || depth > 0;
}

}  // namespace

bool JsonDecoder::Impl::Reject(MalformedReason reason, int field, const char* text,
                               error_code error) {
  problem_.reason = reason;
  problem_.field = field;
  problem_.key = -1;
  problem_.text = text;
  problem_.got = nullptr;
  problem_.error = error;
  return false;
}

bool JsonDecoder::Impl::RejectBroken(error_code error) {
  if (error == simdjson::UTF8_ERROR) return Reject(MalformedReason::kInvalidUtf8, -1, nullptr);
  if (error == simdjson::DEPTH_ERROR) return Reject(MalformedReason::kTooDeep);
  if (error == simdjson::MEMALLOC || error == simdjson::CAPACITY) {
    return Reject(MalformedReason::kTooLarge, -1, nullptr, error);
  }
  const MalformedReason reason =
      EndsUnclosed(record_) ? MalformedReason::kTruncated : MalformedReason::kNotJson;
  return Reject(reason, -1, nullptr, error);
}

bool JsonDecoder::Impl::NullValue(int field, size_t row) {
  if (fields_[field].nullable) {
    SetNull(field, row);
    return true;
  }
  return Reject(MalformedReason::kMissingField, field, "is null but not nullable");
}

// A value that does not fit its field. Permissive keeps the row with the field null when the
// field may be null, but still walks the value so that the record's validity and depth are
// checked; everything else rejects the record.
bool JsonDecoder::Impl::FieldProblem(int field, MalformedReason reason, const char* text,
                                     const char* got, ondemand::value* unconsumed, size_t row) {
  if (!permissive_ || !fields_[field].nullable) {
    Reject(reason, field, text);
    problem_.got = got;
    return false;
  }
  SetNull(field, row);
  if (!row_nulled_) {
    row_nulled_ = true;
    problem_ = Problem{reason, field, -1, text, got, simdjson::SUCCESS, 0};
  }
  return unconsumed == nullptr || SkipValue(*unconsumed, depth_ + 1);
}

// Decides what a failed typed read means. Returns false (with problem_ set) if the record is
// broken; otherwise sets *reason to the value-level reason (wrong_type, number_out_of_range)
// or to kMissingField for a null.
bool JsonDecoder::Impl::ClassifyValueError(FieldType want, ondemand::value& value, error_code error,
                                           MalformedReason* reason, ondemand::json_type* type) {
  if (!IsValueError(error)) return RejectBroken(error);
  if (const error_code type_error = value.type().get(*type)) return RejectBroken(type_error);
  switch (*type) {
    case ondemand::json_type::null:
      if (!CheckLiteral(value, *type)) return false;
      *reason = MalformedReason::kMissingField;
      return true;
    case ondemand::json_type::number: {
      bool integer = false;
      const std::string_view token = TrimRight(value.raw_json_token());
      if (!IsJsonNumber(token, &integer)) {
        return Reject(MalformedReason::kNotJson, -1, "invalid number");
      }
      if (want == FieldType::kLong || want == FieldType::kInt) {
        *reason = integer ? MalformedReason::kNumberOutOfRange : MalformedReason::kWrongType;
      } else if (want == FieldType::kDouble || want == FieldType::kDoubleArray ||
                 want == FieldType::kTimestamp) {
        *reason = MalformedReason::kNumberOutOfRange;
      } else {
        *reason = MalformedReason::kWrongType;
      }
      return true;
    }
    case ondemand::json_type::string:
      if (want == FieldType::kString || want == FieldType::kTimestamp) {
        // The read of a string failed: a bad escape.
        return Reject(MalformedReason::kNotJson, -1, "invalid string", error);
      }
      *reason = MalformedReason::kWrongType;
      return true;
    case ondemand::json_type::boolean:
      if (!CheckLiteral(value, *type)) return false;
      *reason = MalformedReason::kWrongType;
      return true;
    case ondemand::json_type::array:
    case ondemand::json_type::object:
      *reason = MalformedReason::kWrongType;
      return true;
  }
  return RejectBroken(error);
}

bool JsonDecoder::Impl::OnValueError(int field, ondemand::value& value, error_code error,
                                     size_t row) {
  MalformedReason reason = MalformedReason::kWrongType;
  ondemand::json_type type{};
  if (!ClassifyValueError(fields_[field].type, value, error, &reason, &type)) {
    problem_.field = field;
    return false;
  }
  if (reason == MalformedReason::kMissingField) return NullValue(field, row);
  // A boolean was validated (and consumed) while classifying; other values are walked by
  // FieldProblem.
  const bool consumed = type == ondemand::json_type::boolean;
  const char* text =
      reason == MalformedReason::kNumberOutOfRange ? "number out of range for" : nullptr;
  return FieldProblem(field, reason, text, JsonTypeName(type), consumed ? nullptr : &value, row);
}

// Walks a value that is not decoded (a field not in the schema, or a bad value kept as null),
// checking that it is valid JSON no deeper than max_depth. `depth` is the nesting level the
// value opens if it is a container (the record's object is level 1). Recursion is bounded by
// max_depth, which is capped at kMaxSupportedDepth.
bool JsonDecoder::Impl::SkipValue(ondemand::value& value, int depth) {
  ondemand::json_type type;
  if (const error_code error = value.type().get(type)) return RejectBroken(error);
  switch (type) {
    case ondemand::json_type::object: {
      if (depth > max_depth_) return Reject(MalformedReason::kTooDeep);
      ondemand::object object;
      if (const error_code error = value.get_object().get(object)) return RejectBroken(error);
      for (auto field_result : object) {
        if (const error_code error = field_result.error()) return RejectBroken(error);
        ondemand::field&& field = std::move(field_result).value_unsafe();  // see DecodeFields
        std::string_view key;
        if (const error_code error = field.unescaped_key().get(key)) {
          return Reject(MalformedReason::kNotJson, -1, "invalid key", error);
        }
        if (!SkipValue(field.value(), depth + 1)) return false;
      }
      return true;
    }
    case ondemand::json_type::array: {
      if (depth > max_depth_) return Reject(MalformedReason::kTooDeep);
      ondemand::array array;
      if (const error_code error = value.get_array().get(array)) return RejectBroken(error);
      for (auto element_result : array) {
        if (const error_code error = element_result.error()) return RejectBroken(error);
        ondemand::value&& element = std::move(element_result).value_unsafe();  // see DecodeFields
        if (!SkipValue(element, depth + 1)) return false;
      }
      return true;
    }
    case ondemand::json_type::number: {
      bool integer = false;
      if (!IsJsonNumber(TrimRight(value.raw_json_token()), &integer)) {
        return Reject(MalformedReason::kNotJson, -1, "invalid number");
      }
      return true;  // left for the parent's iteration to step over
    }
    case ondemand::json_type::string: {
      std::string_view ignored;
      if (const error_code error = value.get_string().get(ignored)) {
        return Reject(MalformedReason::kNotJson, -1, "invalid string", error);
      }
      return true;
    }
    case ondemand::json_type::boolean:
    case ondemand::json_type::null:
      return CheckLiteral(value, type);
  }
  return Reject(MalformedReason::kNotJson);
}

// Walks the value of a projected-out field as SkipValue does. A flat array of numbers (a feature
// vector left unread) is checked by scanning its text in place, several times cheaper than
// walking it element by element; the object's iteration then steps over it.
bool JsonDecoder::Impl::SkipUnused(ondemand::value& value, int depth) {
  if (depth <= max_depth_ && ScanNumberArray(value.raw_json_token().data(), nullptr)) return true;
  return SkipValue(value, depth);
}

}  // namespace driftd
