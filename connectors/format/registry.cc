// The value formats of the daemon, one entry each: adding a format is its file in this
// directory plus one line here.
#include "connectors/format/formats.h"
#include "connectors/registry.h"
#include "engine/json_decoder.h"

namespace driftd {

const ValueFormatCatalog& ValueFormats() {
  static const ValueFormatCatalog catalog = [] {
    ValueFormatCatalog formats;
    formats.push_back(JsonDecoder::Declaration());
    formats.push_back(AvroFormatDeclaration());
    formats.push_back(ProtobufFormatDeclaration());
    return formats;
  }();
  return catalog;
}

}  // namespace driftd
