#include "config/yaml_precheck.h"

#include <yaml.h>

#include <map>
#include <memory>
#include <vector>

#include <fmt/format.h>

namespace driftd::config_detail {
namespace {

struct ParserDeleter {
  void operator()(yaml_parser_t* parser) const {
    yaml_parser_delete(parser);
    delete parser;
  }
};

struct EventDeleter {
  void operator()(yaml_event_t* event) const { yaml_event_delete(event); }
};

SourceMark ToMark(const yaml_mark_t& mark) {
  return {static_cast<int>(mark.line) + 1, static_cast<int>(mark.column) + 1};
}

// libyaml reports reader errors (bad encoding, control characters) as a byte offset.
SourceMark MarkOfOffset(std::string_view text, size_t offset) {
  SourceMark mark{1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++mark.line;
      mark.column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++mark.column;  // a character starts here (not a UTF-8 continuation byte)
    }
  }
  return mark;
}

std::string AnchorOf(const yaml_event_t& event) {
  const yaml_char_t* anchor = nullptr;
  switch (event.type) {
    case YAML_SCALAR_EVENT:
      anchor = event.data.scalar.anchor;
      break;
    case YAML_SEQUENCE_START_EVENT:
      anchor = event.data.sequence_start.anchor;
      break;
    case YAML_MAPPING_START_EVENT:
      anchor = event.data.mapping_start.anchor;
      break;
    case YAML_ALIAS_EVENT:
      anchor = event.data.alias.anchor;
      break;
    default:
      break;
  }
  return anchor == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(anchor));
}

// An open map or list: its anchor and the nodes below it so far (itself included), aliases
// counted as the nodes they stand for.
struct Frame {
  std::string anchor;
  size_t nodes = 1;
};

}  // namespace

tl::expected<YamlPrecheck, YamlPrecheckProblem> PrecheckYaml(std::string_view text,
                                                            const YamlLimits& limits) {
  auto fail = [](SourceMark mark, std::string message) {
    return tl::unexpected(YamlPrecheckProblem{mark, std::move(message)});
  };
  if (text.size() > limits.max_bytes) {
    return fail({}, fmt::format("the file is {} bytes; a pipeline file may hold at most {} bytes",
                                text.size(), limits.max_bytes));
  }

  std::unique_ptr<yaml_parser_t, ParserDeleter> parser{new yaml_parser_t{}};
  if (yaml_parser_initialize(parser.get()) == 0) {
    return fail({}, "out of memory while reading the YAML text");
  }
  yaml_parser_set_input_string(parser.get(), reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());

  YamlPrecheck result;
  std::vector<Frame> open;
  std::map<std::string, size_t, std::less<>> anchors;  // anchor -> nodes it stands for
  size_t total_nodes = 0;
  bool want_second_mark = false;

  while (true) {
    yaml_event_t raw{};
    if (yaml_parser_parse(parser.get(), &raw) == 0) {
      const yaml_parser_t& p = *parser;
      const std::string problem = p.problem != nullptr ? p.problem : "unreadable YAML";
      switch (p.error) {
        case YAML_READER_ERROR:
          return fail(MarkOfOffset(text, p.problem_offset),
                      fmt::format("the file is not valid UTF-8 YAML text: {} (byte offset {})",
                                  problem, p.problem_offset));
        case YAML_MEMORY_ERROR:
          return fail({}, "out of memory while reading the YAML text");
        default: {
          std::string context;
          if (p.context != nullptr) {
            context = fmt::format(" ({} that starts at line {}, column {})", p.context,
                                  p.context_mark.line + 1, p.context_mark.column + 1);
          }
          return fail(ToMark(p.problem_mark),
                      fmt::format("YAML syntax error: {}{}", problem, context));
        }
      }
    }
    std::unique_ptr<yaml_event_t, EventDeleter> event{&raw};
    const SourceMark mark = ToMark(raw.start_mark);

    size_t nodes = 0;  // nodes this event adds to the tree
    switch (raw.type) {
      case YAML_STREAM_END_EVENT:
        return result;
      case YAML_DOCUMENT_START_EVENT:
        if (++result.documents == 2) want_second_mark = true;
        continue;
      case YAML_SCALAR_EVENT:
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT:
        nodes = 1;
        break;
      case YAML_ALIAS_EVENT: {
        const std::string name = AnchorOf(raw);
        for (const Frame& frame : open) {
          if (frame.anchor == name) {
            return fail(mark, fmt::format("alias '*{}' is used inside the node of its own anchor "
                                          "'&{}' (a recursive document)",
                                          name, name));
          }
        }
        auto it = anchors.find(name);
        if (it == anchors.end()) {
          return fail(mark, fmt::format("alias '*{}' refers to no anchor '&{}' before it", name,
                                        name));
        }
        nodes = it->second;
        break;
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        Frame done = std::move(open.back());
        open.pop_back();
        if (!done.anchor.empty()) anchors[done.anchor] = done.nodes;
        if (!open.empty()) open.back().nodes += done.nodes;
        continue;
      }
      default:
        continue;
    }

    // A node defining an anchor again replaces the earlier definition, an open one included.
    if (std::string anchor = AnchorOf(raw); !anchor.empty() && raw.type != YAML_ALIAS_EVENT) {
      for (Frame& frame : open) {
        if (frame.anchor == anchor) frame.anchor.clear();
      }
    }
    if (want_second_mark) {
      result.second_document = mark;
      want_second_mark = false;
    }
    total_nodes += nodes;
    if (total_nodes > limits.max_nodes) {
      return fail(mark, fmt::format("the document has more than {} nodes{}; a pipeline file "
                                    "holds far fewer",
                                    limits.max_nodes,
                                    raw.type == YAML_ALIAS_EVENT ? " with its aliases expanded"
                                                                 : ""));
    }
    if (raw.type == YAML_SEQUENCE_START_EVENT || raw.type == YAML_MAPPING_START_EVENT) {
      if (static_cast<int>(open.size()) >= limits.max_depth) {
        return fail(mark, fmt::format("maps and lists are nested more than {} deep",
                                      limits.max_depth));
      }
      open.push_back(Frame{AnchorOf(raw), 1});
      continue;
    }
    if (raw.type == YAML_SCALAR_EVENT) {
      if (std::string anchor = AnchorOf(raw); !anchor.empty()) anchors[anchor] = 1;
    }
    if (!open.empty()) open.back().nodes += nodes;
  }
}

}  // namespace driftd::config_detail
