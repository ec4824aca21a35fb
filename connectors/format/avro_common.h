// What the avro value format's decoder (avro_format.cc) and encoder (avro_encoder.cc) share
// of libavro: owners for its reference-counted handles, and its errors and type names as text.
#pragma once

#include <avro.h>

#include <memory>
#include <string>
#include <type_traits>

namespace driftd::avro {

struct SchemaUnref {
  void operator()(avro_obj_t* schema) const { avro_schema_decref(schema); }
};
using SchemaPtr = std::unique_ptr<avro_obj_t, SchemaUnref>;

struct IfaceUnref {
  void operator()(avro_value_iface_t* iface) const { avro_value_iface_decref(iface); }
};
using IfacePtr = std::unique_ptr<avro_value_iface_t, IfaceUnref>;

struct ReaderFree {
  void operator()(avro_reader_t reader) const { avro_reader_free(reader); }
};
using ReaderPtr = std::unique_ptr<std::remove_pointer_t<avro_reader_t>, ReaderFree>;

struct WriterFree {
  void operator()(avro_writer_t writer) const { avro_writer_free(writer); }
};
using WriterPtr = std::unique_ptr<std::remove_pointer_t<avro_writer_t>, WriterFree>;

/// libavro's last error message, trimmed ("unknown error" when it has none).
std::string LastError();

/// A type's name in Avro's schema language: "long", "record", "union".
const char* TypeName(avro_type_t type);

/// A schema's type as a reader would write it: "long", "record Alert", "array<double>",
/// "[null, string]".
std::string TypeName(avro_schema_t schema);

}  // namespace driftd::avro
