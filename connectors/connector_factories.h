// Declarations and factories of the individual connectors (registry.cc lists them), and how a
// connector declares that its options bind once (BindSource, BindSink, BindSharedSink).
#pragma once

#include <any>
#include <memory>
#include <utility>
#include <vector>

#include "engine/sink.h"
#include "engine/source.h"
#include "engine/options.h"
#include "engine/pipeline_spec.h"
#include "engine/value_decoder.h"

namespace driftd {

/// Declares how a source of type-T options is bound and created, after decl.options is set:
/// `bind` sees the options with the declared ranges checked and the declared defaults filled in
/// (so it writes no default of its own) and makes T once; `create` makes the source from T.
/// config/ binds at load and keeps T in SourceSpec::bound; a spec built without config/ (a test,
/// a tool) is bound when created, by the same code.
template <typename T>
void BindSource(ConnectorDecl& decl,
                Bound<T> (*bind)(const PipelineSpec& pipeline, const SourceSpec& source,
                                 const Options& options),
                Result<std::unique_ptr<Source>> (*create)(const PipelineSpec& pipeline,
                                                          T options)) {
  decl.bind = [declared = decl.options, bind](const PipelineSpec& pipeline,
                                              const SourceSpec& source) -> BindResult {
    return BindDeclared<T>(declared, source.options,
                           [&](const Options& options) { return bind(pipeline, source, options); });
  };
  decl.create_source = [bind_source = decl.bind, what = decl.format + " source",
                        create](const PipelineSpec& pipeline) -> Result<std::unique_ptr<Source>> {
    Result<T> options = BoundOrBind<T>(
        pipeline.source.bound, [&] { return bind_source(pipeline, pipeline.source); }, what);
    if (!options) return tl::unexpected(std::move(options.error()));
    return create(pipeline, std::move(*options));
  };
}

/// BindSource for a sink made one per spec: `bind` also sees the sink's spec (its name, its
/// place among pipeline.sinks) and `create` makes the sink of one spec from T. config/ binds
/// each sink at load and keeps T in SinkSpec::bound.
template <typename T>
void BindSink(ConnectorDecl& decl,
              Bound<T> (*bind)(const PipelineSpec& pipeline, const SinkSpec& sink,
                               const Options& options),
              Result<std::unique_ptr<Sink>> (*create)(const PipelineSpec& pipeline,
                                                      const SinkSpec& sink, T options)) {
  decl.bind_sink = [declared = decl.options, bind](const PipelineSpec& pipeline,
                                                   const SinkSpec& sink) -> BindResult {
    return BindDeclared<T>(declared, sink.options,
                           [&](const Options& options) { return bind(pipeline, sink, options); });
  };
  decl.create_sink = [bind_sink = decl.bind_sink, what = decl.format + " sink", create](
                         const PipelineSpec& pipeline,
                         const SinkSpec& sink) -> Result<std::unique_ptr<Sink>> {
    Result<T> options = BoundOrBind<T>(
        sink.bound, [&] { return bind_sink(pipeline, sink); }, what);
    if (!options) return tl::unexpected(std::move(options.error()));
    return create(pipeline, sink, std::move(*options));
  };
}

/// The sinks of `pipeline` before `sink` (every other one when `sink` is not an element of
/// pipeline.sinks): those a rule between two sinks compares it with, in a sink's bind, so that
/// the later of two sinks is the one at fault.
inline std::vector<const SinkSpec*> SinksBefore(const PipelineSpec& pipeline,
                                                const SinkSpec& sink) {
  std::vector<const SinkSpec*> before;
  for (const SinkSpec& other : pipeline.sinks) {
    if (&other == &sink) return before;
    before.push_back(&other);
  }
  std::erase_if(before, [&](const SinkSpec* other) { return other->name == sink.name; });
  return before;
}

/// One sink's spec with its bound options, as BindSharedSink hands them to `create`.
template <typename T>
struct BoundSink {
  const SinkSpec* spec = nullptr;
  T options;
};

/// BindSink for a kind whose sinks share one Sink (ConnectorDecl::create_shared_sink): `create`
/// gets every sink of the kind with its bound options (none when a scaled-out pipeline needs
/// the Sink without such sinks: ConnectorDecl::carries_scale_out).
template <typename T>
void BindSharedSink(ConnectorDecl& decl,
                    Bound<T> (*bind)(const PipelineSpec& pipeline, const SinkSpec& sink,
                                     const Options& options),
                    tl::expected<std::unique_ptr<Sink>, SinkFailure> (*create)(
                        const PipelineSpec& pipeline, std::vector<BoundSink<T>> sinks,
                        Source* source, const ValueFormatCatalog& formats)) {
  decl.bind_sink = [declared = decl.options, bind](const PipelineSpec& pipeline,
                                                   const SinkSpec& sink) -> BindResult {
    return BindDeclared<T>(declared, sink.options,
                           [&](const Options& options) { return bind(pipeline, sink, options); });
  };
  decl.create_shared_sink =
      [bind_sink = decl.bind_sink, what = decl.format + " sink", create](
          const PipelineSpec& pipeline, const std::vector<const SinkSpec*>& specs, Source* source,
          const ValueFormatCatalog& formats) -> tl::expected<std::unique_ptr<Sink>, SinkFailure> {
    std::vector<BoundSink<T>> sinks;
    for (const SinkSpec* spec : specs) {
      Result<T> options = BoundOrBind<T>(
          spec->bound, [&] { return bind_sink(pipeline, *spec); }, what);
      if (!options) return tl::unexpected(SinkFailure{std::move(options.error()), spec});
      sinks.push_back({spec, std::move(*options)});
    }
    return create(pipeline, std::move(sinks), source, formats);
  };
}

ConnectorDecl FileSourceDecl();
ConnectorDecl RateSourceDecl();
ConnectorDecl SocketSourceDecl();
ConnectorDecl KafkaSourceDecl();
ConnectorDecl FileSinkDecl();
ConnectorDecl ConsoleSinkDecl();
ConnectorDecl KafkaSinkDecl();
ConnectorDecl WebhookSinkDecl();

Result<std::unique_ptr<Source>> CreateFileSource(const PipelineSpec& pipeline);
Result<std::unique_ptr<Source>> CreateRateSource(const PipelineSpec& pipeline);
Result<std::unique_ptr<Source>> CreateSocketSource(const PipelineSpec& pipeline);
Result<std::unique_ptr<Source>> CreateKafkaSource(const PipelineSpec& pipeline);

/// Each creates the Sink of one spec (an element of pipeline.sinks), from the options bound at
/// load or, for a spec built without config/, bound now.
Result<std::unique_ptr<Sink>> CreateFileSink(const PipelineSpec& pipeline, const SinkSpec& spec);
Result<std::unique_ptr<Sink>> CreateConsoleSink(const PipelineSpec& pipeline,
                                                const SinkSpec& spec);
Result<std::unique_ptr<Sink>> CreateWebhookSink(const PipelineSpec& pipeline, const SinkSpec& spec);

}  // namespace driftd
