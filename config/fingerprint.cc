// PipelineFingerprintJson: the part of a pipeline that a checkpoint's state depends on.
#include <openssl/evp.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "config/loader.h"
#include "engine/aggregates.h"
#include "engine/drift/detectors.h"
#include "engine/json_writer.h"
#include "engine/redact.h"

namespace driftd {
namespace {

// An aggregate's spelling is its definition's stable name (engine/aggregates.h), fixed once
// released, so that a renamed aggregate cannot silently invalidate every checkpoint. Other
// spellings are fixed here rather than taken from ToString() for the same reason.
std::string_view FnName(AggregateFn fn) { return KindOf(fn).stable_name; }

std::string_view BaselineName(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::kWarmup:
      return "warmup";
    case BaselineKind::kFile:
      return "file";
    case BaselineKind::kTrailing:
      return "trailing";
    case BaselineKind::kSeasonal:
      return "seasonal";
  }
  return "?";
}

// The first 16 hex digits of SHA-256("driftd-fingerprint" NUL pipeline NUL value).
std::string Digest(std::string_view pipeline, std::string_view value) {
  std::string input = "driftd-fingerprint";
  input.push_back('\0');
  input.append(pipeline);
  input.push_back('\0');
  input.append(value);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(input.data(), input.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    return "unavailable";  // the value still never appears in clear
  }
  std::string hex;
  for (unsigned int i = 0; i < size && hex.size() < 16; ++i) {
    hex += fmt::format("{:02x}", digest[i]);
  }
  return hex;
}

// JSON strings of the fingerprint. A secret inside a value (a path or topic from ${API_TOKEN})
// is kept as a digest: a change of it still makes the checkpoint refuse the pipeline, and the
// checkpoint, and so `driftd inspect`, never holds it in clear.
class Quoter {
 public:
  explicit Quoter(const PipelineSpec& spec) : spec_(spec) {
    for (const std::string& secret : spec.secrets) {
      if (secret.size() >= kMinRedactedSize) secrets_.push_back(&secret);
    }
    std::sort(secrets_.begin(), secrets_.end(), [](const std::string* a, const std::string* b) {
      return a->size() != b->size() ? a->size() > b->size() : *a < *b;
    });
  }

  std::string operator()(std::string_view text) const {
    std::string out;
    AppendJsonString(out, Hidden(text));
    return out;
  }

  // `text` with each secret replaced by its digest.
  std::string Hidden(std::string_view text) const {
    std::string value(text);
    for (const std::string* secret : secrets_) {
      for (size_t at = value.find(*secret); at != std::string::npos;
           at = value.find(*secret, at)) {
        const std::string hidden = fmt::format("<redacted:{}>", Digest(spec_.name, *secret));
        value.replace(at, secret->size(), hidden);
        at += hidden.size();
      }
    }
    return value;
  }

  std::string Array(const std::vector<std::string>& items) const {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ',';
      out += (*this)(items[i]);
    }
    return out + "]";
  }

 private:
  const PipelineSpec& spec_;
  std::vector<const std::string*> secrets_;
};

}  // namespace

std::string CheckpointPipelineName(const PipelineSpec& spec) {
  return Quoter(spec).Hidden(spec.name);
}

std::string PipelineFingerprintJson(const PipelineSpec& spec) {
  const Quoter quote(spec);
  // Options that say which data a source reads (its declaration marks them, OptionDecl::
  // identity): another path or topic is another stream, whose offsets and state mean nothing
  // to this checkpoint. In name order.
  auto identity = [&](const SourceSpec& source) {
    std::string out = "{";
    bool first = true;
    for (const auto& [name, value] : source.options.values()) {
      if (std::find(source.identity_options.begin(), source.identity_options.end(), name) ==
          source.identity_options.end()) {
        continue;
      }
      if (!first) out += ',';
      first = false;
      out += quote(name) + ":" + quote(value);
    }
    return out + "}";
  };
  std::string out = "{\"version\":1,\"source\":{\"format\":" + quote(spec.source.format) +
                    ",\"identity\":" + identity(spec.source) + "}";
  // More inputs (absent without: a one-input pipeline's fingerprint is unchanged).
  if (!spec.inputs.empty()) {
    out += ",\"inputs\":[";
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const SourceSpec& source = spec.inputs[i].source;
      if (i > 0) out += ',';
      out += "{\"name\":" + quote(spec.inputs[i].name) + ",\"format\":" + quote(source.format) +
             ",\"identity\":" + identity(source) + "}";
    }
    out += "]";
  }
  out += ",\"schema\":[";
  for (size_t i = 0; i < spec.schema.fields.size(); ++i) {
    const Field& field = spec.schema.fields[i];
    if (i > 0) out += ',';
    out += fmt::format("{{\"name\":{},\"type\":{},\"nullable\":{}", quote(field.name),
                       quote(FieldTypeName(field.type)), field.nullable ? "true" : "false");
    // A struct's leaf is read from a nested key, not from a key spelled like its dotted name
    // (absent for top-level fields, whose fingerprint is unchanged).
    if (!field.path.empty()) out += ",\"path\":" + quote.Array(field.path);
    out += '}';
  }
  out += ']';
  // Structs that must be present (absent when none is declared non-nullable).
  bool first_struct = true;
  for (const StructField& declared : spec.schema.structs) {
    if (declared.nullable) continue;
    out += first_struct ? ",\"requiredStructs\":[" : ",";
    first_struct = false;
    out += quote.Array(declared.path);
  }
  if (!first_struct) out += "]";
  const QuerySpec& query = spec.query;
  out += ",\"groupBy\":" + quote.Array(query.group_by) + ",\"window\":";
  if (query.window) {
    out += fmt::format("{{\"column\":{},\"sizeMs\":{},\"slideMs\":{}}}",
                       quote(query.window->column), query.window->size_ms, query.window->slide_ms);
  } else {
    out += "null";
  }
  out += ",\"aggregates\":[";
  for (size_t i = 0; i < query.aggregates.size(); ++i) {
    const AggregateSpec& aggregate = query.aggregates[i];
    if (i > 0) out += ',';
    out += fmt::format("{{\"fn\":{},\"column\":{}", quote(FnName(aggregate.fn)),
                       quote(aggregate.column));
    // A sketch's accuracy is its state's layout; the fractions asked of it are not state.
    if (KindOf(aggregate.fn).state == AggregateState::kSketch) {
      out += fmt::format(",\"accuracy\":{}", aggregate.accuracy);
    }
    out += '}';
  }
  out += ']';
  // Derived columns feed the state by name and type; their expressions and the filter can
  // change (as the malformed policy can). Absent when there are none, so that the fingerprint
  // of a pipeline without them is what it always was.
  if (!query.derived.empty()) {
    out += ",\"derived\":[";
    for (size_t i = 0; i < query.derived.size(); ++i) {
      if (i > 0) out += ',';
      out += fmt::format("{{\"name\":{},\"type\":{}}}", quote(query.derived[i].name),
                         quote(FieldTypeName(query.derived[i].type)));
    }
    out += ']';
  }
  // The metadata columns a query reads sit between the schema's and the derived columns in
  // every row, the rows of a scaled-out query's repartition topic included. Absent when there
  // are none.
  if (!query.metadata.empty()) {
    out += ",\"metadata\":[";
    for (size_t i = 0; i < query.metadata.size(); ++i) {
      if (i > 0) out += ',';
      out += quote(DefOf(query.metadata[i]).name);
    }
    out += ']';
  }
  const DriftSpec& drift = spec.drift;
  out += ",\"drift\":";
  if (!drift.enabled) {
    out += "null";
  } else {
    const BaselineSpec& baseline = drift.baseline;
    out += fmt::format("{{\"modelColumn\":{},\"series\":{},\"baseline\":{{\"type\":{}",
                       quote(drift.model_column), quote.Array(drift.series),
                       quote(BaselineName(baseline.kind)));
    switch (baseline.kind) {
      case BaselineKind::kWarmup:
        out += fmt::format(",\"records\":{},\"durationMs\":{}", baseline.records,
                           baseline.duration_ms);
        break;
      case BaselineKind::kFile:
        out += ",\"path\":" + quote(baseline.path);
        break;
      case BaselineKind::kTrailing:
        out += fmt::format(",\"windows\":{}", baseline.windows);
        break;
      case BaselineKind::kSeasonal:
        out += fmt::format(",\"records\":{},\"periodMs\":{},\"cycles\":{}", baseline.records,
                           baseline.period_ms, baseline.cycles);
        break;
    }
    out += "}";
    // Segments given in the file key the state by (model, segment); by default they are the
    // groupBy columns after the model column, which the fingerprint holds already (absent:
    // unchanged from fingerprints written before segments existed).
    if (drift.segment_by_given) out += ",\"segmentBy\":" + quote.Array(drift.segment_by);
    // Drift's own event-time windows lay its state out by window (absent: unchanged from
    // fingerprints written before they existed).
    if (drift.window_ms > 0) out += fmt::format(",\"windowMs\":{}", drift.window_ms);
    out += ",\"detectors\":[";
    bool first_detector = true;
    for (size_t i = 0; i < drift.detectors.size(); ++i) {
      const DetectorSpec& detector = drift.detectors[i];
      // Detectors that watch series of their own (the categorical and data-quality ones:
      // string columns, which older checkpoints cannot hold; missing-value and malformed-record
      // series, whose state starts afresh) say so in their definition: adding or removing them
      // leaves every other series' state as it is, so they are not part of the fingerprint, and
      // pipelines that get them by default keep the fingerprint their checkpoints were written
      // with.
      const DetectorDefaults& defaults = DefaultsFor(detector.kind);
      if (!defaults.in_fingerprint) continue;
      if (!first_detector) out += ',';
      first_detector = false;
      out += "{\"kind\":" + quote(defaults.name);
      // Histogram state is laid out by bin count; thresholds and gates are not state.
      if (auto bins = detector.params.find("bins"); bins != detector.params.end()) {
        out += fmt::format(",\"bins\":{}", static_cast<int64_t>(bins->second));
      }
      out += '}';
    }
    out += "]}";
  }
  // Scaled-out state is kept by task, and only changed fingerprints say so (a checkpoint
  // written before scaleOut existed keeps its fingerprint).
  if (spec.scale_out.enabled) out += ",\"scaleOut\":true";
  out += '}';
  return out;
}

}  // namespace driftd
