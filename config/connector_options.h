// Internal to config/: reads a source's or sink's `options` map and checks it against the
// connector's declaration (unknown options, types, enum choices, required options, passthrough
// prefixes), filling in declared defaults.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/yaml_reader.h"
#include "engine/options.h"

namespace driftd::config_detail {

/// The formats declared for `role`, sorted.
std::vector<std::string_view> ConnectorFormats(const ConnectorCatalog& catalog, ConnectorRole role);

/// Reads parent.options (or parent.<key>). With `decl`, each option is validated against it and defaults are
/// filled in; `what` names the connector in messages ("kafka sink"). Without `decl` (no
/// catalog), scalar values are taken as they are. Problems go to the reader.
/// `marks`, when given, receives where each option of the file is.
Options ReadConnectorOptions(Reader& reader, const MapReader& parent, const ConnectorDecl* decl,
                             std::string_view what,
                             std::map<std::string, SourceMark>* marks = nullptr,
                             std::string_view key = "options");

}  // namespace driftd::config_detail
