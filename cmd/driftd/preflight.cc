#include "cmd/driftd/preflight.h"

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "connectors/registry.h"
#include "engine/executor/drift_stage.h"
#include "engine/executor/performance_stage.h"

namespace driftd {

std::vector<ConfigProblem> PreflightProblems(const PipelineSpec& spec) {
  std::vector<ConfigProblem> problems;
  // The sources' and sinks' options were bound at load, each problem reported at its option's
  // line; what is left to fail here concerns a source or a sink as a whole.
  auto source = CreateSource(spec);
  if (!source) {
    problems.push_back({"source", spec.source.mark, source.error().message()});
  }
  // Another input's source, as at start: scaled out, it joins the source's consumer group.
  auto check_input = [&](const PipelineSpec& input, const std::string& path,
                         const SourceMark& mark) {
    auto created = CreateSource(input);
    Status status = created ? Status(Ok()) : Status(tl::unexpected(created.error()));
    if (status && spec.scale_out.enabled && source) status = (*created)->ShareGroupOf(**source);
    if (!status) problems.push_back({path, mark, status.error().message()});
  };
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    PipelineSpec input = spec;
    input.source = spec.inputs[i].source;
    check_input(input, fmt::format("inputs[{}]", i), spec.inputs[i].source.mark);
  }
  if (spec.labels.enabled) check_input(LabelsPipeline(spec), "labels", spec.labels.mark);
  // The sinks see the source, as at start (a scaled-out Kafka sink shares its group).
  if (auto sinks = MakeSinks(spec, source ? source->get() : nullptr); !sinks) {
    const SinkFailure& failure = sinks.error();
    ConfigProblem problem{"sinks", {}, failure.error.message()};
    for (size_t i = 0; i < spec.sinks.size(); ++i) {
      if (&spec.sinks[i] != failure.sink) continue;
      problem.path = fmt::format("sinks[{}]", i);
      problem.mark = spec.sinks[i].mark;
    }
    problems.push_back(std::move(problem));
  }
  if (spec.drift.enabled) {
    DriftStage::SetupPart failed = DriftStage::SetupPart::kSection;
    if (auto stage = DriftStage::Create(spec, nullptr, &failed); !stage) {
      const std::string& message = stage.error().message();
      if (failed == DriftStage::SetupPart::kBaseline) {
        problems.push_back({"drift.baseline.path", spec.drift.baseline.mark, message});
      } else {
        problems.push_back({"drift", spec.drift.mark, message});
      }
    }
  }
  return problems;
}

}  // namespace driftd
