#include "cmd/driftd/preflight.h"

#include <cctype>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "connectors/registry.h"
#include "engine/executor/drift_stage.h"

namespace driftd {
namespace {

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

// The option of `marks` that `message` names first (as a whole word), or nullptr.
const std::pair<const std::string, SourceMark>* NamedOption(
    std::string_view message, const std::map<std::string, SourceMark>& marks) {
  const std::pair<const std::string, SourceMark>* best = nullptr;
  size_t best_at = std::string_view::npos;
  for (const auto& entry : marks) {
    const std::string& name = entry.first;
    for (size_t at = message.find(name); at != std::string_view::npos;
         at = message.find(name, at + 1)) {
      const bool starts = at == 0 || !IsNameChar(message[at - 1]);
      const size_t end = at + name.size();
      const bool ends = end == message.size() || !IsNameChar(message[end]);
      if (!starts || !ends) continue;
      // The earliest mention wins; at one place, the longer name (kafka.x over x).
      if (at < best_at || (at == best_at && best && name.size() > best->first.size())) {
        best = &entry;
        best_at = at;
      }
      break;
    }
  }
  return best;
}

// A sink's error at the option it names. Sources' options are bound at load (ConnectorDecl::
// bind) and their problems carry the option; sinks' are still checked when created.
ConfigProblem SinkOptionProblem(const std::string& prefix, SourceMark anchor,
                            const std::map<std::string, SourceMark>& marks,
                            const std::string& message) {
  if (const auto* option = NamedOption(message, marks)) {
    // "startingOffsets: expected ..." under the path ...options.startingOffsets says it once.
    std::string text = message;
    if (const std::string lead = option->first + ": "; text.rfind(lead, 0) == 0) {
      text.erase(0, lead.size());
    }
    return {fmt::format("{}.options.{}", prefix, option->first), option->second, text};
  }
  return {prefix, anchor, message};
}

// Which sink an error of CreateSinks is about: the one it names ("sink 'x': ..." or a
// 'name' in the message), else the first of the format it concerns.
size_t SinkOfError(const PipelineSpec& spec, const std::string& message) {
  size_t named = spec.sinks.size();
  size_t named_at = std::string::npos;
  for (size_t i = 0; i < spec.sinks.size(); ++i) {
    const size_t at = message.rfind(fmt::format("'{}'", spec.sinks[i].name));
    // The last sink named: a rule between two sinks is reported at the second.
    if (at != std::string::npos && (named_at == std::string::npos || at > named_at)) {
      named = i;
      named_at = at;
    }
  }
  if (named < spec.sinks.size()) return named;
  for (size_t i = 0; i < spec.sinks.size(); ++i) {
    if (message.rfind("kafka sink", 0) == 0 && spec.sinks[i].format == "kafka") return i;
  }
  return 0;
}

}  // namespace

std::vector<ConfigProblem> PreflightProblems(const PipelineSpec& spec) {
  std::vector<ConfigProblem> problems;
  // The sources' options were bound at load, each problem reported at its option's line; what
  // is left to fail here concerns the source as a whole.
  auto source = CreateSource(spec);
  if (!source) {
    problems.push_back({"source", spec.source.mark, source.error().message()});
  }
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    PipelineSpec input = spec;
    input.source = spec.inputs[i].source;
    if (auto created = CreateSource(input); !created) {
      problems.push_back(
          {fmt::format("inputs[{}]", i), spec.inputs[i].source.mark, created.error().message()});
    }
  }
  // The sinks see the source, as at start (a scaled-out Kafka sink shares its group).
  if (auto sinks = CreateSinks(spec, source ? source->get() : nullptr);
      !sinks && !spec.sinks.empty()) {
    const std::string& message = sinks.error().message();
    const size_t i = SinkOfError(spec, message);
    problems.push_back(SinkOptionProblem(fmt::format("sinks[{}]", i), spec.sinks[i].mark,
                                     spec.sinks[i].option_marks, message));
  }
  if (spec.drift.enabled) {
    if (auto stage = DriftStage::Create(spec); !stage) {
      const std::string& message = stage.error().message();
      if (message.rfind("drift.baseline.path", 0) == 0) {
        problems.push_back({"drift.baseline.path", spec.drift.baseline.mark, message});
      } else {
        problems.push_back({"drift", spec.drift.mark, message});
      }
    }
  }
  return problems;
}

}  // namespace driftd
