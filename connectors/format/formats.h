// The declarations of the value formats implemented in connectors/format/, registered in
// registry.cc (ValueFormats(), connectors/registry.h).
#pragma once

#include "engine/value_decoder.h"

namespace driftd {

/// `avro`: Avro binary records, of one writer schema (.avsc) or Confluent-framed with writer
/// schemas from a Schema Registry, resolved against a reader schema.
ValueFormatDecl AvroFormatDeclaration();

/// `protobuf`: Protobuf messages of one type from a descriptor set, decoded with
/// DynamicMessage.
ValueFormatDecl ProtobufFormatDeclaration();

}  // namespace driftd
