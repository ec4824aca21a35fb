#include "connectors/format/avro_common.h"

#include <fmt/format.h>

namespace driftd::avro {

std::string LastError() {
  std::string message = avro_strerror();
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message.empty() ? std::string("unknown error") : message;
}

const char* TypeName(avro_type_t type) {
  switch (type) {
    case AVRO_STRING: return "string";
    case AVRO_BYTES: return "bytes";
    case AVRO_INT32: return "int";
    case AVRO_INT64: return "long";
    case AVRO_FLOAT: return "float";
    case AVRO_DOUBLE: return "double";
    case AVRO_BOOLEAN: return "boolean";
    case AVRO_NULL: return "null";
    case AVRO_RECORD: return "record";
    case AVRO_ENUM: return "enum";
    case AVRO_FIXED: return "fixed";
    case AVRO_MAP: return "map";
    case AVRO_ARRAY: return "array";
    case AVRO_UNION: return "union";
    case AVRO_LINK: return "link";
  }
  return "?";
}

std::string TypeName(avro_schema_t schema) {
  switch (avro_typeof(schema)) {
    case AVRO_RECORD: return fmt::format("record {}", avro_schema_name(schema));
    case AVRO_ENUM: return fmt::format("enum {}", avro_schema_name(schema));
    case AVRO_ARRAY: return "array<" + TypeName(avro_schema_array_items(schema)) + ">";
    case AVRO_UNION: {
      std::string text = "[";
      for (size_t b = 0; b < avro_schema_union_size(schema); ++b) {
        if (b > 0) text += ", ";
        text += TypeName(avro_schema_union_branch(schema, static_cast<int>(b)));
      }
      return text + "]";
    }
    case AVRO_LINK: return TypeName(avro_schema_link_target(schema));
    default: return TypeName(avro_typeof(schema));
  }
}

}  // namespace driftd::avro
