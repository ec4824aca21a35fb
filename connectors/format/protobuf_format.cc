// The `protobuf` value format: each record is one Protobuf message of messageType, described by
// a descriptor set (protoc --include_imports --descriptor_set_out=FILE) and decoded with
// libprotobuf's DynamicMessage, so no generated code is compiled in.
//
// With confluentFraming, records are framed as Confluent's Protobuf serializer writes them:
// magic byte 0, a 4-byte big-endian schema id, the message indexes (zig-zag varints: their
// count, then the index of the message in its .proto file and of each nested message down to
// it; the count 0 alone stands for [0], the file's first message), then the message. The
// indexes must name messageType in its file of the descriptor set (a record of another message
// type is unknown_schema); the schema id is not looked up, since the descriptor set describes
// the records.
//
// Fields are matched by name (or by their JSON name, lowerCamelCase). A field with presence
// (proto2, proto3 `optional`, a message) that is not set is null; a proto3 field without
// presence that is not set has its default value (0, "", false), as Protobuf defines.
//
// Value mapping (Protobuf -> column):
//   double <- any number type;  long <- any integer type (uint64 beyond int64: out of range);
//   int <- any integer type in int32 range;  boolean <- bool;  string <- string, enum (its name);
//   timestamp <- int32 / int64 epoch milliseconds, string RFC 3339, google.protobuf.Timestamp;
//   array<double> <- repeated number type.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/logging.h>
#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "connectors/format/formats.h"
#include "engine/log.h"
#include "engine/row_decoder.h"
#include "engine/time_iso8601.h"

namespace driftd {
namespace {

namespace pb = google::protobuf;

// libprotobuf logs to stderr by default (e.g. for every string that is not UTF-8 in a message
// being parsed); its messages go to the module's logger instead, at debug level, since each
// such record is counted and reported as malformed.
void ForwardLog(pb::LogLevel level, const char* file, int line, const std::string& message) {
  auto log = GetLogger("protobuf");
  if (level >= pb::LOGLEVEL_FATAL) {
    log->error("{}:{}: {}", file, line, message);
  } else {
    log->debug("{}:{}: {}", file, line, message);
  }
}

class CollectErrors : public pb::DescriptorPool::ErrorCollector {
 public:
  void AddError(const std::string& filename, const std::string& element_name,
                const pb::Message*, ErrorLocation, const std::string& message) override {
    if (!text.empty()) text += "; ";
    text += fmt::format("{}: {}: {}", filename, element_name, message);
  }
  std::string text;
};

bool IsNumber(pb::FieldDescriptor::CppType type) {
  using T = pb::FieldDescriptor;
  return type == T::CPPTYPE_DOUBLE || type == T::CPPTYPE_FLOAT || type == T::CPPTYPE_INT32 ||
         type == T::CPPTYPE_INT64 || type == T::CPPTYPE_UINT32 || type == T::CPPTYPE_UINT64;
}

bool IsInteger(pb::FieldDescriptor::CppType type) {
  using T = pb::FieldDescriptor;
  return type == T::CPPTYPE_INT32 || type == T::CPPTYPE_INT64 || type == T::CPPTYPE_UINT32 ||
         type == T::CPPTYPE_UINT64;
}

bool IsTimestampMessage(const pb::FieldDescriptor* field) {
  return field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE &&
         field->message_type()->full_name() == "google.protobuf.Timestamp";
}

bool Fits(FieldType type, const pb::FieldDescriptor* field) {
  const auto cpp = field->cpp_type();
  if (type == FieldType::kDoubleArray) return field->is_repeated() && IsNumber(cpp);
  if (field->is_repeated()) return false;
  switch (type) {
    case FieldType::kDouble: return IsNumber(cpp);
    case FieldType::kLong:
    case FieldType::kInt: return IsInteger(cpp);
    case FieldType::kBoolean: return cpp == pb::FieldDescriptor::CPPTYPE_BOOL;
    case FieldType::kString:
      return (cpp == pb::FieldDescriptor::CPPTYPE_STRING &&
              field->type() == pb::FieldDescriptor::TYPE_STRING) ||
             cpp == pb::FieldDescriptor::CPPTYPE_ENUM;
    case FieldType::kTimestamp:
      return IsInteger(cpp) || field->type() == pb::FieldDescriptor::TYPE_STRING ||
             IsTimestampMessage(field);
    case FieldType::kDoubleArray:
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap: return false;
  }
  return false;
}

std::string Describe(const pb::FieldDescriptor* field) {
  std::string type = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE
                         ? field->message_type()->full_name()
                         : std::string(field->type_name());
  return field->is_repeated() ? "repeated " + type : type;
}

// The message indexes Confluent's framing names `type` with: its index in its file, then that
// of each nested message down to it.
std::vector<int64_t> MessageIndexes(const pb::Descriptor* type) {
  std::vector<int64_t> indexes;
  for (const pb::Descriptor* d = type; d != nullptr; d = d->containing_type()) {
    indexes.insert(indexes.begin(), d->index());
  }
  return indexes;
}

std::string ShowIndexes(const std::vector<int64_t>& indexes) {
  return fmt::format("[{}]", fmt::join(indexes, ", "));
}

// A zig-zag varint (Confluent's ByteUtils.readVarint) from the front of `bytes`.
bool ReadZigZag(std::string_view& bytes, int64_t* out) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && !bytes.empty(); shift += 7) {
    const auto byte = static_cast<unsigned char>(bytes.front());
    bytes.remove_prefix(1);
    value |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80u) == 0) {
      *out = static_cast<int64_t>((value >> 1) ^ (~(value & 1) + 1));
      return true;
    }
  }
  return false;
}

class ProtobufDecoder final : public RowDecoder {
 public:
  ProtobufDecoder(const Schema& schema, const MalformedSpec& spec,
                  std::unique_ptr<pb::DescriptorPool> pool, const pb::Descriptor* type,
                  std::vector<const pb::FieldDescriptor*> fields, bool confluent_framing)
      : RowDecoder(schema, spec),
        pool_(std::move(pool)),
        factory_(std::make_unique<pb::DynamicMessageFactory>(pool_.get())),
        message_(factory_->GetPrototype(type)->New()),
        fields_(std::move(fields)),
        framed_(confluent_framing),
        indexes_(MessageIndexes(type)) {
    reflection_ = message_->GetReflection();
  }

  bool DecodeRecord(std::string_view bytes, RowWriter& row, Status&) override {
    if (framed_ && !Unframe(bytes, row)) return false;
    if (static_cast<int64_t>(bytes.size()) > std::numeric_limits<int>::max() ||
        !message_->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return row.Reject(MalformedReason::kUndecodable,
                        fmt::format("not a Protobuf message of type {} (bad wire format, or a "
                                    "string that is not UTF-8)",
                                    message_->GetDescriptor()->full_name()));
    }
    const Schema& pipeline = schema();
    for (size_t f = 0; f < fields_.size(); ++f) {
      const pb::FieldDescriptor* field = fields_[f];
      if (field == nullptr) continue;  // null
      if (!Convert(static_cast<int>(f), pipeline.fields[f], field, row)) return false;
    }
    return true;
  }

 private:
  // Takes Confluent's framing off `bytes`; false (the record rejected) when it is not there or
  // names another message type.
  bool Unframe(std::string_view& bytes, RowWriter& row) {
    if (bytes.size() < 6 || bytes[0] != 0) {
      return row.Reject(
          MalformedReason::kUndecodable,
          bytes[0] != 0
              ? fmt::format("not Confluent-framed: the first byte is 0x{:02x}, not the magic "
                            "byte 0",
                            static_cast<unsigned char>(bytes[0]))
              : fmt::format("not Confluent-framed: {} bytes, fewer than the magic byte, the "
                            "schema id and the message indexes",
                            bytes.size()));
    }
    const uint32_t id = (uint32_t{static_cast<unsigned char>(bytes[1])} << 24) |
                        (uint32_t{static_cast<unsigned char>(bytes[2])} << 16) |
                        (uint32_t{static_cast<unsigned char>(bytes[3])} << 8) |
                        uint32_t{static_cast<unsigned char>(bytes[4])};
    bytes.remove_prefix(5);
    int64_t count = 0;
    if (!ReadZigZag(bytes, &count) || count < 0 || count > static_cast<int64_t>(bytes.size())) {
      return row.Reject(MalformedReason::kUndecodable,
                        "Confluent framing without readable message indexes");
    }
    seen_.clear();
    if (count == 0) seen_.push_back(0);  // [0], the file's first message, as one byte
    for (int64_t i = 0; i < count; ++i) {
      int64_t index = 0;
      if (!ReadZigZag(bytes, &index)) {
        return row.Reject(MalformedReason::kUndecodable,
                          "Confluent framing without readable message indexes");
      }
      seen_.push_back(index);
    }
    if (seen_ != indexes_) {
      return row.Reject(MalformedReason::kUnknownSchema,
                        fmt::format("schema id {}: the message indexes {} name another message "
                                    "than {} ({} in its file)",
                                    id, ShowIndexes(seen_), message_->GetDescriptor()->full_name(),
                                    ShowIndexes(indexes_)));
    }
    return true;
  }

  bool Convert(int f, const Field& declared, const pb::FieldDescriptor* field, RowWriter& row) {
    const pb::Message& m = *message_;
    const pb::Reflection& r = *reflection_;
    if (field->is_repeated()) {
      const int size = r.FieldSize(m, field);
      if (size > row.max_array_length()) {
        return row.FieldProblem(f, MalformedReason::kTooLarge,
                                fmt::format("array of {} elements exceeds maxArrayLength {}",
                                            size, row.max_array_length()));
      }
      row.BeginArray(f);
      for (int i = 0; i < size; ++i) {
        const double number = RepeatedNumber(m, r, field, i);
        if (!std::isfinite(number)) {
          return row.FieldProblem(f, MalformedReason::kNumberOutOfRange,
                                  "an element is not a finite number");
        }
        row.AppendElement(f, number);
      }
      return true;
    }
    if (field->has_presence() && !r.HasField(m, field)) {
      row.SetNull(f);
      return true;
    }
    using T = pb::FieldDescriptor;
    switch (declared.type) {
      case FieldType::kDouble: {
        const double number = Number(m, r, field);
        if (!std::isfinite(number)) {
          return row.FieldProblem(f, MalformedReason::kNumberOutOfRange, "not a finite number");
        }
        row.SetDouble(f, number);
        return true;
      }
      case FieldType::kLong:
      case FieldType::kInt:
      case FieldType::kTimestamp: {
        if (declared.type == FieldType::kTimestamp) {
          if (field->cpp_type() == T::CPPTYPE_STRING) {
            auto parsed = ParseIso8601Micros(r.GetStringReference(m, field, &scratch_));
            if (!parsed) {
              return row.FieldProblem(f, MalformedReason::kWrongType,
                                      "expected an RFC 3339 timestamp string");
            }
            row.SetInt(f, *parsed);
            return true;
          }
          if (field->cpp_type() == T::CPPTYPE_MESSAGE) {
            const pb::Message& stamp = r.GetMessage(m, field);
            const pb::Reflection& sr = *stamp.GetReflection();
            const pb::Descriptor* type = field->message_type();
            const int64_t seconds = sr.GetInt64(stamp, type->field(0));  // Timestamp.seconds
            const int32_t nanos = sr.GetInt32(stamp, type->field(1));    // Timestamp.nanos
            constexpr int64_t kLimit = std::numeric_limits<int64_t>::max() / 1'000'000 - 1;
            if (seconds > kLimit || seconds < -kLimit) {
              return row.FieldProblem(f, MalformedReason::kNumberOutOfRange,
                                      "number out of range for timestamp");
            }
            row.SetInt(f, seconds * 1'000'000 + nanos / 1000);
            return true;
          }
        }
        int64_t number = 0;
        if (!Integer(m, r, field, &number)) {
          return row.FieldProblem(f, MalformedReason::kNumberOutOfRange,
                                  fmt::format("number out of range for {}",
                                              FieldTypeName(declared.type)));
        }
        if (declared.type == FieldType::kInt &&
            (number < std::numeric_limits<int32_t>::min() ||
             number > std::numeric_limits<int32_t>::max())) {
          return row.FieldProblem(f, MalformedReason::kNumberOutOfRange,
                                  "number out of range for int");
        }
        if (declared.type == FieldType::kTimestamp) {
          constexpr int64_t kLimit = std::numeric_limits<int64_t>::max() / 1000;
          if (number > kLimit || number < -kLimit) {
            return row.FieldProblem(f, MalformedReason::kNumberOutOfRange,
                                    "number out of range for timestamp");
          }
          number *= 1000;  // epoch milliseconds, as a JSON number
        }
        row.SetInt(f, number);
        return true;
      }
      case FieldType::kBoolean:
        row.SetInt(f, r.GetBool(m, field) ? 1 : 0);
        return true;
      case FieldType::kString: {
        if (field->cpp_type() == T::CPPTYPE_ENUM) {
          row.SetString(f, r.GetEnum(m, field)->name());
          return true;
        }
        const std::string& text = r.GetStringReference(m, field, &scratch_);
        if (!simdjson::validate_utf8(text.data(), text.size())) {
          return row.FieldProblem(f, MalformedReason::kInvalidUtf8, "invalid UTF-8");
        }
        row.SetString(f, text);
        return true;
      }
      case FieldType::kDoubleArray:
      case FieldType::kStringArray:
      case FieldType::kDoubleMap:
      case FieldType::kStringMap:
        break;
    }
    return row.FieldProblem(f, MalformedReason::kWrongType, "unexpected type");
  }

  static double Number(const pb::Message& m, const pb::Reflection& r,
                       const pb::FieldDescriptor* field) {
    using T = pb::FieldDescriptor;
    switch (field->cpp_type()) {
      case T::CPPTYPE_DOUBLE: return r.GetDouble(m, field);
      case T::CPPTYPE_FLOAT: return r.GetFloat(m, field);
      case T::CPPTYPE_INT32: return r.GetInt32(m, field);
      case T::CPPTYPE_INT64: return static_cast<double>(r.GetInt64(m, field));
      case T::CPPTYPE_UINT32: return r.GetUInt32(m, field);
      case T::CPPTYPE_UINT64: return static_cast<double>(r.GetUInt64(m, field));
      default: return std::numeric_limits<double>::quiet_NaN();
    }
  }

  static double RepeatedNumber(const pb::Message& m, const pb::Reflection& r,
                               const pb::FieldDescriptor* field, int i) {
    using T = pb::FieldDescriptor;
    switch (field->cpp_type()) {
      case T::CPPTYPE_DOUBLE: return r.GetRepeatedDouble(m, field, i);
      case T::CPPTYPE_FLOAT: return r.GetRepeatedFloat(m, field, i);
      case T::CPPTYPE_INT32: return r.GetRepeatedInt32(m, field, i);
      case T::CPPTYPE_INT64: return static_cast<double>(r.GetRepeatedInt64(m, field, i));
      case T::CPPTYPE_UINT32: return r.GetRepeatedUInt32(m, field, i);
      case T::CPPTYPE_UINT64: return static_cast<double>(r.GetRepeatedUInt64(m, field, i));
      default: return std::numeric_limits<double>::quiet_NaN();
    }
  }

  static bool Integer(const pb::Message& m, const pb::Reflection& r,
                      const pb::FieldDescriptor* field, int64_t* out) {
    using T = pb::FieldDescriptor;
    switch (field->cpp_type()) {
      case T::CPPTYPE_INT32: *out = r.GetInt32(m, field); return true;
      case T::CPPTYPE_INT64: *out = r.GetInt64(m, field); return true;
      case T::CPPTYPE_UINT32: *out = r.GetUInt32(m, field); return true;
      case T::CPPTYPE_UINT64: {
        const uint64_t number = r.GetUInt64(m, field);
        if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
        *out = static_cast<int64_t>(number);
        return true;
      }
      default: return false;
    }
  }

  std::unique_ptr<pb::DescriptorPool> pool_;
  std::unique_ptr<pb::DynamicMessageFactory> factory_;
  std::unique_ptr<pb::Message> message_;
  const pb::Reflection* reflection_ = nullptr;
  std::vector<const pb::FieldDescriptor*> fields_;  // per pipeline field, or nullptr (absent)
  std::string scratch_;
  /// confluentFraming: the message indexes records of messageType carry, and a record's.
  bool framed_ = false;
  std::vector<int64_t> indexes_;
  std::vector<int64_t> seen_;
};

// The decoder's options as bound (their defaults are declared in ProtobufFormatDeclaration
// only).
struct ProtobufOptions {
  std::string descriptor_file;
  std::string message_type;
  bool confluent_framing = false;
};

Bound<ProtobufOptions> BindProtobuf(const Options& options) {
  return ProtobufOptions{.descriptor_file = options.GetString("descriptorFile"),
                         .message_type = options.GetString("messageType"),
                         .confluent_framing = options.GetBool("confluentFraming")};
}

ValueDecoderResult CreateProtobufDecoder(const Schema& schema, const MalformedSpec& malformed,
                                         const ProtobufOptions& options) {
  static std::once_flag log_once;
  std::call_once(log_once, [] { pb::SetLogHandler(&ForwardLog); });
  if (auto refused = RefuseNestedFields(schema, "protobuf")) return tl::unexpected(*refused);

  const std::string& path = options.descriptor_file;
  const std::string& type_name = options.message_type;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return tl::unexpected(ValueFormatProblem{
        "descriptorFile", fmt::format("cannot read '{}': {}", path, std::strerror(errno))});
  }
  pb::FileDescriptorSet set;
  if (!set.ParseFromIstream(&in) || set.file_size() == 0) {
    return tl::unexpected(ValueFormatProblem{
        "descriptorFile",
        fmt::format("'{}' is not a Protobuf descriptor set (make one with protoc "
                    "--include_imports --descriptor_set_out={} your.proto)",
                    path, path)});
  }
  auto pool = std::make_unique<pb::DescriptorPool>();
  for (const pb::FileDescriptorProto& file : set.file()) {
    CollectErrors errors;
    if (pool->BuildFileCollectingErrors(file, &errors) == nullptr) {
      return tl::unexpected(ValueFormatProblem{
          "descriptorFile",
          fmt::format("'{}': {} does not build: {} (was it made with --include_imports?)", path,
                      file.name(), errors.text)});
    }
  }
  const pb::Descriptor* type = pool->FindMessageTypeByName(type_name);
  if (type == nullptr) {
    std::string known;
    for (const pb::FileDescriptorProto& file : set.file()) {
      for (const pb::DescriptorProto& message : file.message_type()) {
        if (!known.empty()) known += ", ";
        known += file.package().empty() ? message.name() : file.package() + "." + message.name();
      }
    }
    return tl::unexpected(ValueFormatProblem{
        "messageType", fmt::format("'{}' has no message type '{}' (its messages: {}; give the "
                                   "full name, package included)",
                                   path, type_name, known)});
  }
  std::vector<const pb::FieldDescriptor*> fields;
  for (const Field& declared : schema.fields) {
    const pb::FieldDescriptor* field = type->FindFieldByName(declared.name);
    if (field == nullptr) {
      for (int i = 0; i < type->field_count(); ++i) {
        if (type->field(i)->json_name() == declared.name) field = type->field(i);
      }
    }
    if (field == nullptr && !declared.nullable) {
      return tl::unexpected(ValueFormatProblem{
          "messageType", fmt::format("{} has no field '{}', which the pipeline's schema "
                                     "requires (nullable: false)",
                                     type_name, declared.name)});
    }
    if (field != nullptr && !Fits(declared.type, field)) {
      return tl::unexpected(ValueFormatProblem{
          "messageType", fmt::format("field '{}' is {} in {}; the pipeline's schema says {}",
                                     declared.name, Describe(field), type_name,
                                     FieldTypeName(declared.type))});
    }
    fields.push_back(field);
  }
  return std::make_unique<ProtobufDecoder>(schema, malformed, std::move(pool), type,
                                           std::move(fields), options.confluent_framing);
}

}  // namespace

ValueFormatDecl ProtobufFormatDeclaration() {
  ValueFormatDecl decl;
  decl.name = "protobuf";
  decl.doc =
      "Protobuf messages of messageType, described by a descriptor set (descriptorFile), "
      "decoded with libprotobuf's DynamicMessage.";
  decl.binary = true;
  decl.options = {
      {"descriptorFile", OptionType::kString, "",
       "Path of a FileDescriptorSet: protoc --include_imports --descriptor_set_out=FILE "
       "x.proto.",
       true},
      {"messageType", OptionType::kString, "",
       "Full name of the records' message type, package included (e.g. acme.Inference).", true},
      {"confluentFraming", OptionType::kBool, "false",
       "Records are framed as Confluent's Protobuf serializer writes them: magic byte 0, a "
       "4-byte schema id, the message indexes, the message. The indexes must name messageType "
       "in its file; the schema id is not looked up (the descriptor set describes the "
       "records)."},
  };
  DeclareDecoder<ProtobufOptions>(decl, &BindProtobuf, &CreateProtobufDecoder);
  return decl;
}

}  // namespace driftd
