#include "connectors/console_sink.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>
#include <simdjson.h>

#include "connectors/connector_factories.h"

namespace driftd {

namespace {

constexpr size_t kTruncateChars = 20;
constexpr std::string_view kRule = "-------------------------------------------";

// Display width in characters: UTF-8 continuation bytes do not count.
size_t Width(std::string_view s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// The first `chars` characters of s.
std::string_view PrefixChars(std::string_view s, size_t chars) {
  size_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == chars) return s.substr(0, i);
      ++seen;
    }
  }
  return s;
}

void AppendCell(std::string& out, simdjson::dom::element value, int64_t digits) {
  using simdjson::dom::element_type;
  switch (value.type()) {
    case element_type::NULL_VALUE:
      out += "null";
      return;
    case element_type::BOOL:
      out += value.get_bool().value_unsafe() ? "true" : "false";
      return;
    case element_type::STRING:
      out += value.get_string().value_unsafe();
      return;
    case element_type::INT64:
      fmt::format_to(std::back_inserter(out), "{}", value.get_int64().value_unsafe());
      return;
    case element_type::UINT64:
      fmt::format_to(std::back_inserter(out), "{}", value.get_uint64().value_unsafe());
      return;
    case element_type::DOUBLE: {
      size_t begin = out.size();
      const double number = value.get_double().value_unsafe();
      if (digits > 0) {
        fmt::format_to(std::back_inserter(out), "{:.{}g}", number, static_cast<int>(digits));
      } else {
        fmt::format_to(std::back_inserter(out), "{}", number);
      }
      // Doubles keep a decimal point, as Spark prints them (1.0, not 1).
      if (out.find_first_of(".eEn", begin) == std::string::npos) out += ".0";
      return;
    }
    case element_type::ARRAY: {
      out.push_back('[');
      bool first = true;
      simdjson::dom::array array;
      if (value.get_array().get(array) != simdjson::SUCCESS) return;
      for (simdjson::dom::element item : array) {
        if (!first) out += ", ";
        first = false;
        AppendCell(out, item, digits);
      }
      out.push_back(']');
      return;
    }
    case element_type::OBJECT: {
      out.push_back('{');
      bool first = true;
      simdjson::dom::object object;
      if (value.get_object().get(object) != simdjson::SUCCESS) return;
      for (auto field : object) {
        if (!first) out += ", ";
        first = false;
        AppendCell(out, field.value, digits);
      }
      out.push_back('}');
      return;
    }
  }
}

void AppendPadded(std::string& out, std::string_view cell, size_t width, bool right_align) {
  size_t pad = width - std::min(width, Width(cell));
  if (right_align) out.append(pad, ' ');
  out += cell;
  if (!right_align) out.append(pad, ' ');
}

class ConsoleSink final : public Sink {
 public:
  ConsoleSink(const SinkSpec& spec, const ConsoleFormatOptions& options, std::FILE* out)
      : name_(spec.name),
        stream_(spec.stream),
        mode_(spec.output_mode),
        options_(options),
        out_(out) {}

  const std::string& name() const override { return name_; }
  Status Open() override { return Ok(); }

  // Console output is best effort: treating an unconfirmed batch as printed avoids
  // reprinting after a restart.
  Result<bool> IsDelivered(int64_t) override { return true; }

  Status Deliver(const BatchOutput& output) override {
    std::string text = FormatConsoleBatch(output.batch_id, output.For(stream_, mode_), options_);
    if (std::fwrite(text.data(), 1, text.size(), out_) != text.size() || std::fflush(out_) != 0) {
      return MakeError(ErrorCode::kIo, "console sink '{}': writing to stdout failed", name_);
    }
    return Ok();
  }

 private:
  std::string name_;
  StreamKind stream_;
  OutputMode mode_;
  ConsoleFormatOptions options_;
  std::FILE* out_;
};

}  // namespace

std::string FormatConsoleBatch(int64_t batch_id, const OutputRows& rows,
                               const ConsoleFormatOptions& options) {
  simdjson::dom::parser parser;
  std::vector<std::string> columns = rows.columns;
  size_t shown =
      std::min(rows.rows.size(), static_cast<size_t>(std::max<int64_t>(options.num_rows, 0)));

  // cells[r][c], with the header as row 0.
  std::vector<std::vector<std::string>> cells;
  cells.reserve(shown + 1);
  bool header_from_first_row = columns.empty();
  for (size_t r = 0; r < shown; ++r) {
    simdjson::dom::object object;
    bool parsed = parser.parse(rows.rows[r]).get_object().get(object) == simdjson::SUCCESS;
    if (header_from_first_row && r == 0 && parsed) {
      for (auto field : object) columns.emplace_back(field.key);
    }
    if (cells.empty()) cells.emplace_back(columns);
    std::vector<std::string> line(columns.size(), "null");
    if (!parsed) {
      // Never expected (rows come from the engine), but show the text rather than nothing.
      if (!line.empty()) line[0] = rows.rows[r];
    } else {
      for (size_t c = 0; c < columns.size(); ++c) {
        simdjson::dom::element value;
        if (object.at_key(columns[c]).get(value) == simdjson::SUCCESS) {
          line[c].clear();
          AppendCell(line[c], value, options.significant_digits);
        }
      }
    }
    cells.push_back(std::move(line));
  }
  if (cells.empty()) cells.emplace_back(columns);

  std::vector<size_t> widths(columns.size(), 3);
  for (auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) {
      if (options.truncate && Width(line[c]) > kTruncateChars) {
        line[c] = std::string(PrefixChars(line[c], kTruncateChars - 3)) + "...";
      }
      widths[c] = std::max(widths[c], Width(line[c]));
    }
  }

  std::string out;
  fmt::format_to(std::back_inserter(out), "{}\nBatch: {}\n{}\n", kRule, batch_id, kRule);
  std::string separator = "+";
  for (size_t width : widths) separator.append(width, '-').push_back('+');
  separator.push_back('\n');
  out += separator;
  for (size_t r = 0; r < cells.size(); ++r) {
    out.push_back('|');
    for (size_t c = 0; c < cells[r].size(); ++c) {
      AppendPadded(out, cells[r][c], widths[c], options.truncate);
      out.push_back('|');
    }
    out.push_back('\n');
    if (r == 0) out += separator;
  }
  out += separator;
  if (rows.rows.size() > shown) {
    fmt::format_to(std::back_inserter(out), "only showing top {} {}\n", shown,
                   shown == 1 ? "row" : "rows");
  }
  out.push_back('\n');
  return out;
}

std::unique_ptr<Sink> NewConsoleSink(const SinkSpec& spec, const ConsoleFormatOptions& options,
                                     std::FILE* out) {
  return std::make_unique<ConsoleSink>(spec, options, out);
}

ConnectorDecl ConsoleSinkDecl() {
  ConnectorDecl decl;
  decl.format = "console";
  decl.role = ConnectorRole::kSink;
  // Each process prints its own batches.
  decl.shared_by_processes = true;
  decl.doc =
      "Prints each batch's rows to stdout as a table, like Spark's console sink (`Batch: N` "
      "header, `+---+` borders). For development and demos: it is not exactly-once, and output "
      "may miss a batch around a crash (never a concern for data or other sinks).";
  // The defaults are ConsoleFormatOptions' (Spark's show()).
  const ConsoleFormatOptions defaults;
  decl.options = {
      OptionDecl{"numRows", OptionType::kInt, std::to_string(defaults.num_rows),
                 "Rows printed per batch."}
          .AtLeast(0),
      {"truncate", OptionType::kBool, defaults.truncate ? "true" : "false",
       "Cut cells longer than 20 characters (and right-align, as Spark does)."},
      OptionDecl{"significantDigits", OptionType::kInt, std::to_string(defaults.significant_digits),
                 "Significant digits of the doubles shown (`4`: 0.5533 for 0.5533022522522524); "
                 "`0`: every digit, as Spark prints them."}
          .Between(0, 17),
  };
  BindSink<ConsoleFormatOptions>(
      decl,
      [](const PipelineSpec&, const SinkSpec&, const Options& o) -> Bound<ConsoleFormatOptions> {
        return ConsoleFormatOptions{.num_rows = o.GetInt("numRows"),
                                    .truncate = o.GetBool("truncate"),
                                    .significant_digits = o.GetInt("significantDigits")};
      },
      [](const PipelineSpec&, const SinkSpec& spec, ConsoleFormatOptions options)
          -> Result<std::unique_ptr<Sink>> { return NewConsoleSink(spec, options, stdout); });
  return decl;
}

Result<std::unique_ptr<Sink>> CreateConsoleSink(const PipelineSpec& pipeline,
                                                const SinkSpec& spec) {
  static const ConnectorDecl decl = ConsoleSinkDecl();
  return decl.create_sink(pipeline, spec);
}

}  // namespace driftd
