// The JSON decoder's own parts (not its public surface, engine/json_decoder.h): JsonDecoder::Impl
// and the helpers for JSON text that its files share. Included only by engine/json_decoder*.cc:
//   json_decoder.cc            construction (the schema's keys and levels), the chunk loop with
//                              the malformed policies, a problem's message, JsonDecoder itself
//                              and the `json` value format's declaration
//   json_decoder_record.cc     a record: its keys, its fields' values (scalars, arrays, maps,
//                              structs) and the exact number fast path, the hot loop; in one
//                              file so that its small helpers are inlined
//   json_decoder_malformed.cc  a value that does not fit (the record rejected, or the field
//                              null under permissive) and values walked without being decoded
// Not thread-safe, as the decoder.
#pragma once

#include <simdjson.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_decoder.h"

namespace driftd {

namespace json_detail {

namespace ondemand = simdjson::ondemand;
using simdjson::error_code;

static_assert(kInputPadding >= simdjson::SIMDJSON_PADDING,
              "InputChunk padding must cover simdjson's over-read");

// IsJsonNumber and ScanNumberArray are defined in json_decoder_record.cc, beside the exact number
// fast path (ScanExactDouble) they share.

inline bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

[[gnu::always_inline]] inline std::string_view TrimRight(std::string_view text) {
  while (!text.empty() && IsJsonSpace(text.back())) text.remove_suffix(1);
  return text;
}

// True if `token` is exactly one JSON number (RFC 8259 grammar); *integer tells whether it has
// neither fraction nor exponent. simdjson reports a well-formed but unrepresentable number and
// a malformed one alike, so the grammar decides between number_out_of_range and not_json.
bool IsJsonNumber(std::string_view token, bool* integer);

inline const char* JsonTypeName(ondemand::json_type type) {
  switch (type) {
    case ondemand::json_type::array:
      return "array";
    case ondemand::json_type::object:
      return "object";
    case ondemand::json_type::number:
      return "number";
    case ondemand::json_type::string:
      return "string";
    case ondemand::json_type::boolean:
      return "boolean";
    case ondemand::json_type::null:
      return "null";
  }
  return "unknown";
}

// Errors simdjson reports about one value whose surroundings are still well-formed; anything
// else means the document itself is broken.
inline bool IsValueError(error_code error) {
  return error == simdjson::INCORRECT_TYPE || error == simdjson::NUMBER_ERROR ||
         error == simdjson::NUMBER_OUT_OF_RANGE;
}

// Scans the JSON array at p ("[1, 2.5]") in place up to its closing bracket, appending its
// numbers to *out when out is not null; such an array is valid JSON. Returns false if the
// array holds anything else, or a number ScanExactDouble declines (valid or not); *out may
// then hold some of the numbers. The array must lie in a record that ends with a non-number
// byte followed by 8 readable bytes (its closing brace and the padding): that byte stops a
// scan that finds no closing bracket.
bool ScanNumberArray(const char* p, std::vector<double>* out);

}  // namespace json_detail

// The decoder's files read these helpers unqualified.
using namespace json_detail;  // NOLINT(google-build-using-namespace)

class JsonDecoder::Impl {
 public:
  Impl(const Schema& schema, const MalformedSpec& spec);

  Status Decode(const InputChunk& chunk, RecordBatch& out, std::vector<DeadLetter>* dead_letters,
                const std::function<std::string(const RecordPosition&)>& describe);

  const Schema& schema() const { return schema_; }
  void Project(const std::vector<bool>& used) {
    for (size_t f = 0; f < fields_.size(); ++f) {
      fields_[f].decode = !fields_[f].nullable || f >= used.size() || used[f];
    }
  }
  MalformedCounts counts;

 private:
  enum class Verdict {
    kOk,          // the row is complete
    kKeptNulled,  // permissive: some nullable fields were bad and are null; the row is kept
    kRejected,    // no row; problem_ says why
  };

  // What went wrong with a record, kept cheap: the message is only formatted when a dead
  // letter or an error needs it.
  struct Problem {
    MalformedReason reason = MalformedReason::kNotJson;
    int field = -1;              // schema field index, or -1 for the whole record
    int key = -1;                // a struct's key (keys_), when the problem is the struct's
    const char* text = nullptr;  // static description
    const char* got = nullptr;   // JSON type found, for wrong_type
    error_code error = simdjson::SUCCESS;
    size_t record_size = 0;
  };

  struct FieldInfo {
    FieldType type = FieldType::kString;
    bool nullable = true;
    bool decode = true;  // false: projected out (Project), the value is walked, not converted
  };

  // One key an object of the record may have: a column's, or a struct's that opens a level of
  // its own. The keys of one object (a Level) are contiguous in keys_; for a schema without
  // structs keys_[i] is column i's.
  struct KeyInfo {
    bool plain_name = true;  // comparable with raw key bytes
    bool nullable = true;
    int16_t next_same_first_byte = -1;
    int column = -1;  // a column's key: its index
    int level = -1;   // a struct's key: the level of its object
    // A plain name of up to 15 bytes is compared as name + '"' in two masked 8-byte words,
    // which is several times cheaper than memcmp for keys this short.
    bool short_name = false;
    std::array<uint64_t, 2> words{};
    std::array<uint64_t, 2> masks{};
    std::string name;  // the key as JSON spells it (unescaped)
    std::string path;  // the column's or struct's dotted name, for messages
  };

  // The keys of one object: the record's (level 0) or a struct's.
  struct Level {
    int begin = 0;
    int end = 0;
    int depth = 1;  // the object's nesting level (the record's object is 1)
    std::array<int16_t, 256> first_byte_head{};
  };

  Verdict DecodeRecord(const char* data, size_t size, size_t readable, size_t row);
  // kNested: the level may hold structs (without any, key k is column k, as it always was).
  template <bool kNested>
  bool DecodeFields(ondemand::object& object, size_t row, const Level& level);
  bool DecodeStruct(int key, ondemand::value& value, size_t row);
  bool DecodeField(int field, ondemand::value& value, size_t row);
  bool DecodeStringArray(int field, ondemand::value& value, size_t row);
  bool DecodeMap(int field, ondemand::value& value, size_t row);
  bool DecodeEntryNotString(int field, ondemand::value& entry, error_code error,
                            const char* wrong_type, size_t row);
  bool EntryProblem(int field, MalformedReason reason, const char* text, const char* got,
                    ondemand::value* unconsumed, size_t row);
  bool IsDuplicateKey(const Column& column, size_t row_begin, std::string_view key,
                      const char* raw);
  void BuildLevel(const std::vector<std::string>& path, int depth);
  bool DecodeTimestamp(int field, ondemand::value& value, size_t row);
  // A number or boolean where text belongs, appended as its JSON text (as Spark's JSON reader
  // keeps them). False: the value was rejected (not valid JSON).
  bool AppendScalarText(ondemand::value& value, ondemand::json_type type, int field,
                        std::string& out);
  bool DecodeString(int field, ondemand::value& value, size_t row);
  bool DecodeArray(int field, ondemand::value& value, size_t row);
  bool DecodeArrayElements(int field, ondemand::array& array, size_t row);
  bool OnValueError(int field, ondemand::value& value, error_code error, size_t row);
  bool ClassifyValueError(FieldType want, ondemand::value& value, error_code error,
                          MalformedReason* reason, ondemand::json_type* type);
  bool FieldProblem(int field, MalformedReason reason, const char* text, const char* got,
                    ondemand::value* unconsumed, size_t row);
  bool NullValue(int field, size_t row);
  bool SkipValue(ondemand::value& value, int depth);
  bool CheckLiteral(ondemand::value& value, ondemand::json_type type);
  bool SkipUnused(ondemand::value& value, int depth);
  bool KeyIs(const char* raw, int key) const;
  int Lookup(const Level& level, const char* raw, int hint) const;
  int LookupUnescaped(const Level& level, std::string_view name) const;

  bool Reject(MalformedReason reason, int field = -1, const char* text = nullptr,
              error_code error = simdjson::SUCCESS);
  bool CheckArrayLength(int field, size_t row);
  static constexpr const char* kArrayTooLong = "array longer than maxArrayLength";
  static constexpr const char* kDuplicateKey = "key appears more than once";
  std::string duplicate_key_;  // of the last map refused for a repeated key
  size_t array_elements_ = 0;  // of the last array refused by CheckArrayLength
  bool record_cut_ = false;     // the record being decoded was cut by its source
  bool RejectBroken(error_code error);

  void FinishRow(size_t row);
  void ClearRow(size_t row);
  void SetNull(int field, size_t row);
  void TrimColumns(RecordBatch& out, size_t rows);
  std::string Detail() const;

  Schema schema_;
  MalformedSpec spec_;
  int max_depth_;
  bool permissive_;
  std::vector<FieldInfo> fields_;  // by column
  std::vector<KeyInfo> keys_;
  std::vector<Level> levels_;      // levels_[0]: the record's object
  std::vector<int> string_columns_;
  std::vector<int> array_columns_;       // array<double>: offsets into f64
  std::vector<int> entry_columns_;       // array<string> and maps: offsets into the entries
  int num_required_ = 0;
  int depth_ = 1;  // nesting level of the object being decoded
  bool nested_ = false;  // the schema has struct fields
  std::array<uint64_t, 4> key_bloom_{};  // hashes of a map's keys so far, for duplicates

  ondemand::parser parser_;
  ondemand::parser array_parser_;  // re-reads arrays the fast scanner declined
  std::string scratch_;            // padded copy of a record too close to an unpadded buffer's end

  // Per record state.
  std::vector<uint64_t> seen_stamp_;  // by key: == stamp_ when the key was read in this record
  uint64_t stamp_ = 0;
  int required_seen_ = 0;
  std::string_view record_;
  Column* columns_ = nullptr;
  bool row_nulled_ = false;  // permissive kept a bad field as null
  Problem problem_;
};

// simdjson types a value by its first byte only: whether the null or boolean literal that starts
// there is whole ("nul" and "tru" are not). If it is not, the record is rejected as not JSON.
inline bool JsonDecoder::Impl::CheckLiteral(ondemand::value& value, ondemand::json_type type) {
  bool flag = false;
  if (type == ondemand::json_type::null) {
    if (value.is_null().get(flag) || !flag) {
      return Reject(MalformedReason::kNotJson, -1, "invalid literal");
    }
    return true;
  }
  if (value.get_bool().get(flag)) return Reject(MalformedReason::kNotJson, -1, "invalid literal");
  return true;
}

}  // namespace driftd
