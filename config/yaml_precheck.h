// Internal to config/: a first, strict reading of a pipeline file with libyaml before yaml-cpp
// sees the text, so that every pipeline file is read in time and memory bounded by its size.
//
// Why: yaml-cpp 0.7 accepts some malformed documents, and on some of them its document loop
// makes no progress, returning empty documents forever (YAML::LoadAll on the 22 bytes
// "a:\n  b [c:\n--- , 2]\n" grows by gigabytes a second). libyaml is a strict, event-based parser
// whose state grows with nesting only. The text reaches yaml-cpp only when libyaml reads it as a
// well-formed YAML stream within the limits below; the loader then asks yaml-cpp for one document
// (YAML::Load), never for a loop over documents.
//
// Thread-safety: reentrant; no state outside the call.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "engine/pipeline_spec.h"

namespace driftd::config_detail {

struct YamlLimits {
  /// Largest pipeline file read. Default: 1 MiB (pipeline files are a few KiB).
  size_t max_bytes = 1024 * 1024;
  /// Deepest nesting of maps and lists. Default: 64 (a pipeline needs 5).
  int max_depth = 64;
  /// Most nodes (scalars, maps, lists), counting each alias as the nodes it stands for, so that
  /// a walk of the tree (e.g. a JSON option written as YAML) is bounded too. Default: 100'000.
  size_t max_nodes = 100'000;
};

struct YamlPrecheck {
  /// Number of documents in the stream (0 for an empty or comment-only file).
  int documents = 0;
  /// Where the second document's content starts, when there are several.
  SourceMark second_document;
};

struct YamlPrecheckProblem {
  SourceMark mark;  // {0, 0} when the problem has no single place (the whole file)
  std::string message;
};

/// Reads `text` with libyaml, without building a tree. Fails on the first syntax error (with
/// libyaml's description and place), on invalid UTF-8 or control characters, on text larger than
/// `limits.max_bytes`, nesting deeper than `limits.max_depth`, more than `limits.max_nodes`
/// nodes with aliases expanded, and on an alias used inside the node of its own anchor (a
/// recursive document). Messages never quote the text: a value there may be a secret.
tl::expected<YamlPrecheck, YamlPrecheckProblem> PrecheckYaml(std::string_view text,
                                                            const YamlLimits& limits = {});

}  // namespace driftd::config_detail
