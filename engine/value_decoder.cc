#include "engine/value_decoder.h"

#include <fmt/format.h>

#include "engine/json_writer.h"

namespace driftd {
namespace {

constexpr std::array<std::string_view, kMalformedReasonCount> kReasonNames = {
    "not_json",     "truncated", "wrong_type",      "missing_field",
    "invalid_utf8", "too_deep",  "too_large",       "number_out_of_range",
    "not_object",   "empty",     "duplicate_field", "undecodable",
    "unknown_schema",
};

}  // namespace

std::string_view ToString(MalformedReason reason) {
  const auto index = static_cast<size_t>(reason);
  return index < kReasonNames.size() ? kReasonNames[index] : "unknown";
}

std::optional<MalformedReason> ParseMalformedReason(std::string_view name) {
  for (size_t i = 0; i < kReasonNames.size(); ++i) {
    if (kReasonNames[i] == name) return static_cast<MalformedReason>(i);
  }
  return std::nullopt;
}

int64_t MalformedCounts::total() const {
  int64_t sum = 0;
  for (int64_t count : by_reason) sum += count;
  return sum;
}

void MalformedCounts::Add(const MalformedCounts& other) {
  for (size_t i = 0; i < by_reason.size(); ++i) by_reason[i] += other.by_reason[i];
}

std::string DeadLetterToJson(const DeadLetter& dead, std::string_view position) {
  std::string row;
  JsonObject object(row);
  object.String("position", position);
  object.String("reason", ToString(dead.reason));
  object.String("detail", dead.detail);
  if (IsValidUtf8(dead.raw)) {
    object.String("raw", dead.raw);
  } else {
    object.Null("raw");
    object.Key("rawBase64");
    row.push_back('"');
    AppendBase64(row, dead.raw);
    row.push_back('"');
  }
  object.Int("rawBytes", static_cast<int64_t>(dead.raw.size()));
  object.Bool("truncated", dead.truncated);
  object.Close();
  return row;
}

// In step with DeadLetterToJson.
RowShape DeadLetterRowShape() {
  using Kind = ShapeType::Kind;
  auto member = [](std::string name, Kind kind, bool nullable = false) {
    return ShapeField{std::move(name), ShapeType::Scalar(kind, nullable), {}};
  };
  return ShapeType::Record(
      "DeadLetter", {member("position", Kind::kString), member("reason", Kind::kString),
                     member("detail", Kind::kString), member("raw", Kind::kString, true),
                     member("rawBase64", Kind::kString, true), member("rawBytes", Kind::kLong),
                     member("truncated", Kind::kBoolean)});
}

std::optional<ValueFormatProblem> RefuseNestedFields(const Schema& schema,
                                                     std::string_view format) {
  for (const Field& field : schema.fields) {
    const bool member = !field.path.empty();
    if (!member && !(field.type == FieldType::kStringArray || IsMap(field.type))) continue;
    return ValueFormatProblem{
        "", fmt::format("schema field '{}' ({}) cannot be read from {} records: the {} value "
                        "format fills top-level fields of the types timestamp, string, double, "
                        "long, int, boolean and array<double>; struct, map and array<string> "
                        "fields need valueFormat json",
                        member ? field.path.front() : field.name,
                        member ? "a struct" : FieldTypeName(field.type), format, format)};
  }
  return std::nullopt;
}

const ValueFormatDecl* FindValueFormat(const ValueFormatCatalog& catalog, std::string_view name) {
  for (const ValueFormatDecl& decl : catalog) {
    if (decl.name == name) return &decl;
  }
  return nullptr;
}

ValueDecoderResult BindAndCreateDecoder(const ValueFormatDecl& decl, const Schema& schema,
                                        const MalformedSpec& malformed, const Options& options) {
  BindResult bound = decl.bind(options);
  if (!bound) return tl::unexpected(std::move(bound.error()));
  return decl.create(schema, malformed, *bound);
}

ValueEncoderResult BindAndCreateEncoder(const ValueFormatDecl& decl,
                                        const ValueEncoderContext& context,
                                        const Options& options) {
  BindResult bound = decl.bind_sink(options);
  if (!bound) return tl::unexpected(std::move(bound.error()));
  return decl.create_encoder(context, *bound);
}

Result<std::unique_ptr<ValueDecoder>> CreateValueDecoder(const ValueFormatCatalog& catalog,
                                                         const PipelineSpec& spec) {
  const SourceSpec& source = spec.source;
  const ValueFormatDecl* decl = FindValueFormat(catalog, source.value_format);
  if (decl == nullptr) {
    std::string known;
    for (const ValueFormatDecl& entry : catalog) {
      known += known.empty() ? entry.name : ", " + entry.name;
    }
    return MakeError(ErrorCode::kConfig, "source.valueFormat: unknown value format '{}' (known: {})",
                     source.value_format, known);
  }
  auto decoder =
      source.value_bound.has_value()
          ? decl->create(spec.schema, source.malformed, source.value_bound)
          : BindAndCreateDecoder(*decl, spec.schema, source.malformed, source.value_options);
  if (!decoder) {
    const ValueFormatProblem& problem = decoder.error();
    const std::string key = problem.option.empty()
                                ? std::string("source.valueFormat")
                                : fmt::format("source.valueOptions.{}", problem.option);
    return MakeError(ErrorCode::kConfig, "{}: {}", key, problem.message);
  }
  return std::move(*decoder);
}

Result<std::unique_ptr<ValueEncoder>> CreateValueEncoder(const ValueFormatCatalog& catalog,
                                                         const PipelineSpec& spec,
                                                         const SinkSpec& sink,
                                                         std::string default_subject) {
  const ValueFormatDecl* decl = FindValueFormat(catalog, sink.value_format);
  if (decl == nullptr || !decl->create_encoder) {
    std::string known;
    for (const ValueFormatDecl& entry : catalog) {
      if (entry.create_encoder) known += known.empty() ? entry.name : ", " + entry.name;
    }
    return MakeError(ErrorCode::kConfig,
                     "sink '{}': valueFormat: value format '{}' cannot be written by a sink "
                     "(sink value formats: {})",
                     sink.name, sink.value_format, known);
  }
  auto rows = StreamRowShape(spec, sink.stream);
  if (!rows) return tl::unexpected(rows.error());
  ValueEncoderContext context;
  context.rows = std::move(*rows);
  context.default_subject = std::move(default_subject);
  auto encoder = sink.value_bound.has_value()
                     ? decl->create_encoder(context, sink.value_bound)
                     : BindAndCreateEncoder(*decl, context, sink.value_options);
  if (!encoder) {
    const ValueFormatProblem& problem = encoder.error();
    const std::string key = problem.option.empty() ? std::string("valueFormat")
                                                   : "valueOptions." + problem.option;
    return MakeError(ErrorCode::kConfig, "sink '{}': {}: {}", sink.name, key, problem.message);
  }
  return std::move(*encoder);
}

}  // namespace driftd
