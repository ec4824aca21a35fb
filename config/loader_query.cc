// The query section of a pipeline file and its expressions: select, where, groupBy, windows,
// aggregates (PipelineParser, config/loader_parser.h).
#include "config/loader_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/suggest.h"
#include "engine/aggregates.h"
#include "engine/expr/expr.h"
#include "engine/quantile_sketch.h"

namespace driftd::loader_detail {

namespace {

// The aggregates' names and aliases (engine/aggregates.h), in the table's order.
const std::vector<std::pair<std::string_view, AggregateFn>> kAggregates = [] {
  std::vector<std::pair<std::string_view, AggregateFn>> names;
  for (const AggregateDecl& kind : AggregateKinds()) {
    names.emplace_back(kind.name, kind.fn);
    for (std::string_view alias : kind.aliases) names.emplace_back(alias, kind.fn);
  }
  return names;
}();

}  // namespace

// ---- query --------------------------------------------------------------------------------

void PipelineParser::ParseQuery(const MapReader& top) {
  const MapReader::Entry* entry = top.Find("query");
  if (entry == nullptr) return;
  MapReader query(
      reader_, entry->value, "query", entry->key_mark,
      std::vector<std::string_view>{"where", "select", "groupBy", "aggregates", "window",
                                    "watermark", "maxModels", "modelOverflow"},
      " with where, select, groupBy, aggregates, window, watermark, maxModels or "
      "modelOverflow");
  if (!query.valid()) {
    query_ok_ = false;
    group_by_ok_ = false;
    return;
  }
  QuerySpec& spec = spec_.query;
  const size_t errors_before = problems_.error_count();

  // Derived columns first: groupBy, aggregates, drift and where may use them.
  std::vector<Scalar> plain_select;
  if (query.Has("select")) {
    auto items = query.StringList(
        "select", ", e.g. [model_id, prediction, abs(prediction - ground_truth) AS abs_error]");
    for (const Scalar& item : items.value_or(std::vector<Scalar>{})) {
      if (ParseSelectItem(item)) plain_select.push_back(item);
    }
  }
  if (auto where = query.String("where")) ParseWhere(*where);

  if (query.Has("groupBy")) {
    auto columns = query.StringList("groupBy", ", e.g. [model_id]");
    group_by_ok_ = columns.has_value();
    std::set<std::string> seen;
    for (const Scalar& column : columns.value_or(std::vector<Scalar>{})) {
      if (!seen.insert(column.value).second) {
        problems_.Error(column.path, column.mark,
                        fmt::format("column {} is listed twice in groupBy", Show(column)));
        group_by_ok_ = false;
        continue;
      }
      if (!CheckColumn(column, ColumnUse::kGroupKey, "groupBy column")) group_by_ok_ = false;
      spec.group_by.push_back(column.value);
    }
  }

  if (query.Has("aggregates")) {
    auto items =
        query.StringList("aggregates", ", e.g. [count, mean(prediction), stddev(prediction)]");
    if (items) {
      std::map<std::string, int> seen;
      for (const Scalar& item : *items) ParseAggregate(item, seen);
    }
  }

  if (const MapReader::Entry* window_entry = query.Find("window")) {
    MapReader window(reader_, window_entry->value, "query.window", window_entry->key_mark,
                     std::vector<std::string_view>{"column", "size", "slide"},
                     ", e.g. {column: event_time, size: 5 minutes, slide: 1 minute}");
    if (window.valid() && !window_entry->value.IsNull()) {
      WindowSpec w;
      w.mark = window_entry->key_mark;
      bool ok = true;
      if (auto column = window.String("column", true)) {
        ok = CheckColumn(*column, ColumnUse::kTimestamp, "window column") && ok;
        w.column = column->value;
      } else {
        ok = false;
      }
      auto size = window.DurationMs("size", 1, true);
      auto slide = window.DurationMs("slide", 1);
      ok = ok && size.has_value() && (slide.has_value() || !window.Has("slide"));
      if (size) {
        w.size_ms = *size;
        w.slide_ms = slide.value_or(*size);
        if (slide && *slide > *size) {
          problems_.Error(window.PathOf("slide"), window.MarkOf("slide"),
                          fmt::format("window slide ({} ms) must not exceed the window size "
                                      "({} ms): rows between windows would be skipped",
                                      *slide, *size));
          ok = false;
        }
      }
      if (ok || w.size_ms > 0) spec.window = w;
    } else if (window_entry->value.IsNull()) {
      problems_.Error("query.window", window_entry->key_mark,
                      "'window' has no value; expected e.g. {column: event_time, size: 5 "
                      "minutes}");
    }
  }

  if (const MapReader::Entry* wm_entry = query.Find("watermark")) {
    MapReader watermark(reader_, wm_entry->value, "query.watermark", wm_entry->key_mark,
                        std::vector<std::string_view>{"column", "delay", "idleTimeout"},
                        ", e.g. {column: event_time, delay: 10 minutes}");
    if (watermark.valid() && !wm_entry->value.IsNull()) {
      WatermarkSpec w;
      w.mark = wm_entry->key_mark;
      if (auto column = watermark.String("column", true)) {
        CheckColumn(*column, ColumnUse::kTimestamp, "watermark column");
        w.column = column->value;
      }
      if (auto delay = watermark.DurationMs("delay", 0, true)) w.delay_ms = *delay;
      if (watermark.Has("idleTimeout")) {
        if (auto idle = watermark.DurationMs("idleTimeout", 0, false)) w.idle_timeout_ms = *idle;
      }
      spec.watermark = w;
    } else if (wm_entry->value.IsNull()) {
      problems_.Error("query.watermark", wm_entry->key_mark,
                      "'watermark' has no value; expected e.g. {column: event_time, delay: 10 "
                      "minutes}");
    }
  }

  if (auto models = query.Int("maxModels", 1, 100'000'000)) {
    spec.max_models = *models;
    spec.max_models_mark = query.MarkOf("maxModels");
  }
  if (auto overflow = query.Choice("modelOverflow", {"drop", "other"})) {
    spec.model_overflow = *overflow == "other" ? ModelOverflow::kOther : ModelOverflow::kDrop;
  }

  if (spec.IsAggregation()) {
    for (const Scalar& column : plain_select) {
      problems_.Error(column.path, column.mark,
                      fmt::format("selecting column {} has no effect in a query with groupBy, "
                                  "aggregates or window (it outputs its keys and aggregates); "
                                  "select there only defines derived columns (expr AS name)",
                                  Show(column)));
    }
  }
  query_ok_ = problems_.error_count() == errors_before;
}

// ---- expressions --------------------------------------------------------------------------

// Where `offset` of a scalar's value is in the file. Exact for a plain or quoted scalar on
// one line and for a block scalar (| or >); the scalar's start when the text was rewritten
// (escapes, ${VAR}, folded lines) so that offsets no longer match.
SourceMark PipelineParser::MarkWithin(const Scalar& scalar, size_t offset) const {
  const SourceMark start = scalar.mark;
  if (start.line <= 0 || static_cast<size_t>(start.line) > lines_.size()) return start;
  const std::string_view line = lines_[static_cast<size_t>(start.line) - 1];
  const size_t column = static_cast<size_t>(start.column) - 1;
  if (column >= line.size()) return start;
  const std::string_view value = scalar.value;
  const std::string_view prefix = value.substr(0, std::min(offset, value.size()));
  const char first = line[column];
  if (first == '"' || first == '\'') {
    if (line.substr(column + 1, prefix.size()) == prefix) {
      return {start.line, start.column + 1 + static_cast<int>(offset)};
    }
    return start;
  }
  if (first == '|' || first == '>') {
    // The value's lines follow, indented as the first of them; they are joined by one
    // character.
    size_t at = 0;  // offset in the value of the current line's first character
    size_t indent = std::string_view::npos;
    for (size_t l = static_cast<size_t>(start.line); l < lines_.size(); ++l) {
      const std::string_view content = lines_[l];
      const size_t own = content.find_first_not_of(' ');
      if (own == std::string_view::npos) {
        at += 1;
        continue;
      }
      if (indent == std::string_view::npos) indent = own;
      if (own < indent) return start;  // past the block
      const std::string_view text = content.substr(indent);
      if (value.substr(at, text.size()) != text) return start;
      if (offset <= at + text.size()) {
        return {static_cast<int>(l) + 1, static_cast<int>(indent + offset - at) + 1};
      }
      at += text.size() + 1;
    }
    return start;
  }
  if (line.substr(column, prefix.size()) == prefix) {
    return {start.line, start.column + static_cast<int>(offset)};
  }
  return start;
}

void PipelineParser::ExpressionError(const Scalar& scalar, const expr::ExprError& error,
                                     std::string_view what) {
  // An unknown column that is a schema field with a bad type was reported already.
  if (!error.unknown_name.empty() && columns_.count(error.unknown_name) > 0) return;
  if (!error.unknown_name.empty() && error.message.rfind("unknown column", 0) == 0 &&
      NotAMetadataSource(error.unknown_name, scalar.path, MarkWithin(scalar, error.offset),
                         fmt::format("{} {}", what, Show(scalar)))) {
    return;
  }
  if ((!schema_names_complete_ || failed_derived_.count(error.unknown_name) > 0) &&
      error.message.rfind("unknown column", 0) == 0) {
    return;
  }
  std::string message = error.message;
  if (!error.unknown_name.empty()) {
    std::vector<std::string_view> candidates(error.candidates.begin(), error.candidates.end());
    const std::string suggestion = DidYouMean(error.unknown_name, candidates);
    message += suggestion.empty() ? fmt::format(" (expected one of {})", Join(candidates))
                                  : suggestion;
  }
  if (scalar.secret) message = "cannot use it (the text is secret and not shown)";
  problems_.Error(scalar.path, MarkWithin(scalar, error.offset),
                  fmt::format("{} {}: {}", what, Show(scalar), message));
}

// One select item; true when it is a plain column (checked, and added to select).
bool PipelineParser::ParseSelectItem(const Scalar& item) {
  QuerySpec& spec = spec_.query;
  auto taken = [&](const std::string& name) {
    return std::find(spec.select.begin(), spec.select.end(), name) != spec.select.end();
  };
  // A schema column as written (its name may hold '-' or '.', which read as operators).
  if (columns_.count(item.value) > 0) {
    if (!ReadsColumn(item.value, item.path, item.mark, "select column")) return false;
    if (taken(item.value)) {
      problems_.Error(item.path, item.mark,
                      fmt::format("column {} is selected twice", Show(item)));
      return false;
    }
    spec.select.push_back(item.value);
    return true;
  }
  auto compiled = expr::CompileSelectItem(item.value, ExpressionColumns());
  if (!compiled) {
    ExpressionError(item, compiled.error(), "select item");
    // Its name, if it has one, is not reported again as unknown where it is used.
    const std::string text = item.value;
    size_t as = std::string::npos;
    for (size_t i = 0; i + 4 <= text.size(); ++i) {
      if (std::isspace(static_cast<unsigned char>(text[i])) &&
          (text[i + 1] == 'A' || text[i + 1] == 'a') && (text[i + 2] == 'S' || text[i + 2] == 's') &&
          std::isspace(static_cast<unsigned char>(text[i + 3]))) {
        as = i + 4;
      }
    }
    if (as != std::string::npos) {
      std::string name = text.substr(as);
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      if (!name.empty()) failed_derived_.insert(name);
    }
    return false;
  }
  if (compiled->alias.empty()) {
    const int index = compiled->expression.column_index();
    if (index >= 0) {  // `quoted name`
      Scalar plain = item;
      plain.value = ExpressionColumns().fields[static_cast<size_t>(index)].name;
      return ParseSelectItem(plain);
    }
    problems_.Error(item.path, item.mark,
                    fmt::format("select item {} computes a value but names no column; write "
                                "'{} AS name'",
                                Show(item), item.secret ? "..." : item.value));
    return false;
  }
  if (!ReadsColumns(compiled->expression, item, "select item")) return false;
  const std::string& name = compiled->alias;
  const SourceMark alias_mark = MarkWithin(item, compiled->alias_offset);
  if (columns_.count(name) > 0) {
    const bool metadata = MessageSource() && ParseMetadataColumn(name) &&
                          schema_lines_.count(name) == 0 && !taken(name);
    problems_.Error(item.path, alias_mark,
                    fmt::format("derived column '{}' is already a column{}", name,
                                taken(name)  ? " (selected twice)"
                                : metadata ? " (a Kafka record's metadata column)"
                                           : " of the schema"));
    return false;
  }
  DerivedColumnSpec derived;
  derived.name = name;
  derived.text = item.value;
  derived.type = compiled->expression.type();
  derived.mark = item.mark;
  spec.derived.push_back(std::move(derived));
  spec.select.push_back(name);
  columns_.emplace(name, compiled->expression.type());
  column_names_.push_back(name);
  return false;
}

void PipelineParser::ParseWhere(const Scalar& where) {
  auto compiled = expr::Expression::Compile(where.value, ExpressionColumns());
  if (!compiled) {
    ExpressionError(where, compiled.error(), "condition");
    return;
  }
  if (compiled->type() != FieldType::kBoolean) {
    problems_.Error(where.path, where.mark,
                    fmt::format("type mismatch: where needs a boolean condition, found {} "
                                "(e.g. model_version != 'shadow')",
                                FieldTypeName(compiled->type())));
    return;
  }
  if (!ReadsColumns(*compiled, where, "condition")) return;
  spec_.query.where = where.value;
  spec_.query.where_mark = where.mark;
}

// approx_percentile(col, p [, accuracy]) with p a fraction or array(p1, p2, ...), as Spark
// writes it; `args` is what is between the parentheses, without white space.
// A sketch aggregate (approx_percentile) with Spark's arguments.
void PipelineParser::ParsePercentile(const Scalar& item, const AggregateDecl& kind,
                                     const std::string& fn_name, std::string_view args,
                                     std::map<std::string, int>& seen) {
  auto fail = [&](const std::string& why) {
    problems_.Error(item.path, item.mark,
                    fmt::format("cannot read aggregate {}: {}; expected {}(column, percentage "
                                "[, accuracy]) with percentage a number in [0, 1] or "
                                "array(p1, p2, ...) and accuracy an integer in [1, {}]",
                                Show(item), why, fn_name, QuantileSketch::kMaxAccuracy));
  };
  // Split at the commas outside array(...).
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= args.size(); ++i) {
    if (i == args.size() || (args[i] == ',' && depth == 0)) {
      parts.push_back(args.substr(start, i - start));
      start = i + 1;
    } else if (args[i] == '(') {
      ++depth;
    } else if (args[i] == ')') {
      if (--depth < 0) return fail("unbalanced parentheses");
    }
  }
  if (depth != 0) return fail("unbalanced parentheses");
  if (parts.size() < 2 || parts.size() > 3) {
    return fail(fmt::format("it takes 2 or 3 arguments, not {}", parts.size()));
  }
  AggregateSpec aggregate;
  aggregate.fn = kind.fn;
  aggregate.mark = item.mark;
  aggregate.column = std::string(parts[0]);
  if (aggregate.column.empty() || aggregate.column == "*") {
    return fail("the first argument must be a numeric column");
  }
  auto number = [](std::string_view text, double& value) {
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    return error == std::errc() && end == text.data() + text.size() && !text.empty();
  };
  std::string_view percentage = parts[1];
  std::vector<std::string_view> fractions;
  std::string lower_percentage(percentage);
  for (char& c : lower_percentage) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (lower_percentage.rfind("array(", 0) == 0 && lower_percentage.back() == ')') {
    aggregate.percentage_array = true;
    std::string_view list = percentage.substr(6, percentage.size() - 7);
    size_t from = 0;
    for (size_t i = 0; i <= list.size(); ++i) {
      if (i == list.size() || list[i] == ',') {
        fractions.push_back(list.substr(from, i - from));
        from = i + 1;
      }
    }
  } else {
    fractions.push_back(percentage);
  }
  for (std::string_view fraction : fractions) {
    double value = 0;
    if (!number(fraction, value) || !(value >= 0 && value <= 1)) {
      return fail(fmt::format("percentage '{}' is not a number in [0, 1]", fraction));
    }
    aggregate.percentages.push_back(value);
  }
  if (parts.size() == 3) {
    int64_t accuracy = 0;
    auto [end, error] =
        std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), accuracy);
    if (error != std::errc() || end != parts[2].data() + parts[2].size() || accuracy < 1 ||
        accuracy > QuantileSketch::kMaxAccuracy) {
      return fail(fmt::format("accuracy '{}' is not an integer in [1, {}]", parts[2],
                              QuantileSketch::kMaxAccuracy));
    }
    aggregate.accuracy = accuracy;
  }
  Scalar column_ref{aggregate.column, item.secret, item.path, item.mark};
  if (!CheckColumn(column_ref, ColumnUse::kNumericLike, fmt::format("{} column", fn_name))) {
    return;
  }
  // Spark's column name: approx_percentile(x, 0.5, 10000), approx_percentile(x, array(0.25,
  // 0.75), 100).
  std::vector<std::string> shown;
  for (double p : aggregate.percentages) shown.push_back(fmt::format("{}", p));
  std::string p_text = aggregate.percentage_array
                           ? fmt::format("array({})", fmt::join(shown, ", "))
                           : shown.front();
  aggregate.output_name =
      fmt::format("{}({}, {}, {})", fn_name, aggregate.column, p_text, aggregate.accuracy);
  if (auto it = seen.find(aggregate.output_name); it != seen.end()) {
    problems_.Error(
        item.path, item.mark,
        fmt::format("aggregate {} is listed twice (first at line {})", Show(item), it->second));
    return;
  }
  seen.emplace(aggregate.output_name, item.mark.line);
  spec_.query.aggregates.push_back(std::move(aggregate));
}

void PipelineParser::ParseAggregate(const Scalar& item, std::map<std::string, int>& seen) {
  std::string text = item.value;
  text.erase(std::remove_if(text.begin(), text.end(),
                            [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
             text.end());
  std::string fn_name = text;
  std::string column;
  bool has_parens = false;
  if (size_t open = text.find('('); open != std::string::npos && text.back() == ')') {
    std::string lower = text.substr(0, open);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (const AggregateDecl* kind = FindAggregate(lower);
        kind != nullptr && kind->state == AggregateState::kSketch) {
      ParsePercentile(item, *kind, lower,
                      std::string_view(text).substr(open + 1, text.size() - open - 2), seen);
      return;
    }
  }
  if (size_t open = text.find('('); open != std::string::npos) {
    has_parens = true;
    std::string name = text.substr(0, open);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (const AggregateDecl* kind = FindAggregate(name);
        kind != nullptr && kind->state == AggregateState::kSketch) {
      problems_.Error(item.path, item.mark,
                      fmt::format("cannot read aggregate {}: its parentheses do not close; in "
                                  "a flow list [...] quote it, or its commas split it",
                                  Show(item)));
      return;
    }
    if (text.back() != ')' || text.find('(', open + 1) != std::string::npos) {
      problems_.Error(item.path, item.mark,
                      fmt::format("cannot read aggregate {}; expected \"count\", \"count(*)\" "
                                  "or \"fn(column)\" with fn one of {}",
                                  Show(item), Join(Names(kAggregates))));
      return;
    }
    fn_name = text.substr(0, open);
    column = text.substr(open + 1, text.size() - open - 2);
  }
  std::string lower = fn_name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto fn = Lookup(kAggregates, lower);
  if (!fn) {
    problems_.Error(
        item.path, item.mark,
        fmt::format("unknown aggregate function {}; expected one of {}{}",
                    item.secret ? std::string("<redacted>") : fmt::format("'{}'", fn_name),
                    Join(Names(kAggregates)),
                    item.secret ? "" : DidYouMean(lower, Names(kAggregates))));
    return;
  }
  AggregateSpec aggregate;
  aggregate.fn = *fn;
  aggregate.mark = item.mark;
  const bool counts_rows = KindOf(*fn).counts_rows;
  if (column == "*" || (!has_parens && counts_rows)) {
    if (!counts_rows) {
      problems_.Error(item.path, item.mark,
                      fmt::format("{}(*) is not defined; only count takes *",
                                  item.secret ? "<redacted>" : lower));
      return;
    }
    aggregate.output_name = "count";
  } else if (column.empty()) {
    problems_.Error(item.path, item.mark,
                    fmt::format("aggregate {} names no column; write {}(column)", Show(item),
                                item.secret ? "fn" : lower));
    return;
  } else {
    Scalar column_ref{column, item.secret, item.path, item.mark};
    if (!CheckColumn(column_ref,
                     counts_rows ? ColumnUse::kAny : ColumnUse::kNumericLike,
                     fmt::format("{} column", lower))) {
      return;
    }
    aggregate.column = column;
    aggregate.output_name = fmt::format("{}({})", lower, column);
  }
  if (auto it = seen.find(aggregate.output_name); it != seen.end()) {
    problems_.Error(
        item.path, item.mark,
        fmt::format("aggregate {} is listed twice (first at line {})", Show(item), it->second));
    return;
  }
  seen.emplace(aggregate.output_name, item.mark.line);
  spec_.query.aggregates.push_back(std::move(aggregate));
}

}  // namespace driftd::loader_detail
