// The declarations of the value formats implemented in connectors/format/, registered in
// registry.cc (ValueFormats(), connectors/registry.h).
#pragma once

#include <string>
#include <string_view>

#include "engine/value_decoder.h"

namespace driftd {

/// `avro`: Avro binary records, of one writer schema (.avsc) or Confluent-framed with writer
/// schemas from a Schema Registry, resolved against a reader schema.
ValueFormatDecl AvroFormatDeclaration();

/// Writes the `avro` format: adds its sink options and encoder (avro_encoder.cc) to `decl`.
void AddAvroEncoder(ValueFormatDecl& decl);

/// The Avro name of a column: each run of characters outside [A-Za-z0-9_] becomes one '_'
/// (none at the ends), and a leading digit gets a '_' before it: `mean(prediction)` ->
/// `mean_prediction`, `approx_percentile(x, 0.5, 100)` -> `approx_percentile_x_0_5_100`.
std::string AvroFieldName(std::string_view column);

/// `protobuf`: Protobuf messages of one type from a descriptor set, decoded with
/// DynamicMessage.
ValueFormatDecl ProtobufFormatDeclaration();

}  // namespace driftd
