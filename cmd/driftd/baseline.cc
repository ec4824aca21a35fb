#include "cmd/driftd/baseline.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <httplib.h>
#include <simdjson.h>

#include "cmd/driftd/http_access.h"
#include "cmd/driftd/supervisor.h"
#include "config/loader.h"
#include "connectors/registry.h"
#include "engine/executor/drift_stage.h"
#include "engine/json_writer.h"

namespace driftd {

namespace {

// One CSV record: fields split by commas, "quoted" fields with "" for a quote (RFC 4180).
// Advances `at` past the record's line end. Sets `error` on an unclosed quote.
std::vector<std::string> CsvRecord(std::string_view text, size_t& at, std::string& error) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  while (at < text.size()) {
    const char c = text[at++];
    if (quoted) {
      if (c == '"') {
        if (at < text.size() && text[at] == '"') {
          fields.back().push_back('"');
          ++at;
        } else {
          quoted = false;
        }
      } else {
        fields.back().push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      fields.back().push_back(c);
    }
  }
  if (quoted) error = "a quoted field is not closed";
  return fields;
}

// A finite number in JSON's sense (from_chars also takes "nan" and "inf", which JSON has not).
bool IsNumber(std::string_view s) {
  if (s.empty()) return false;
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(value) &&
         s.find_first_of("nNiI") == std::string_view::npos;
}

// How Python and pandas write a missing number: NaN (a float column's missing value, inside a
// list too), None, <NA> (nullable dtypes).
bool IsMissing(std::string_view s) {
  return s == "nan" || s == "NaN" || s == "None" || s == "<NA>" || s == "null";
}

// pandas writes a column of Python booleans as True/False; JSON writes true/false.
bool IsPythonBool(std::string_view s) { return s == "True" || s == "False"; }

// A whole number written as a float ("3.0": pandas writes an int column with missing values
// as float64) as the integer it is; other text unchanged.
std::string WholeNumber(const std::string& number) {
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size() || value != std::trunc(value) ||
      std::abs(value) > 9.0e15) {
    return number;
  }
  return fmt::format("{}", static_cast<int64_t>(value));
}

std::string Trim(std::string s) {
  const size_t begin = s.find_first_not_of(" \t");
  const size_t end = s.find_last_not_of(" \t");
  return begin == std::string::npos ? std::string() : s.substr(begin, end - begin + 1);
}

Result<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeError(ErrorCode::kIo, "cannot read {}", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

namespace {

// A record being put together from CSV cells: a value, or an object of named members (a
// struct, a map). Names and nodes are kept apart: a vector of pair<string, JsonNode> needs
// JsonNode complete where it is declared, which clang refuses.
struct JsonNode {
  std::string value;
  std::vector<std::string> names;
  std::vector<JsonNode> members;

  JsonNode& Member(const std::string& key) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == key) return members[i];
    }
    names.push_back(key);
    return members.emplace_back();
  }
  void Write(std::string& out) const {
    if (members.empty()) {
      out += value;
      return;
    }
    JsonObject object(out);
    for (size_t i = 0; i < members.size(); ++i) {
      object.Key(names[i]);
      members[i].Write(out);
    }
    object.Close();
  }
};

// One item of a list as Python writes it, bare: numpy's scalars are written with their type
// (np.float64(0.25), np.str_('a')), strings with quotes ('a' or "a").
std::string ListItem(std::string item) {
  item = Trim(std::move(item));
  const size_t open = item.find('(');
  if (open != std::string::npos && open > 0 && item.back() == ')') {
    const std::string name = item.substr(0, open);
    const bool is_name = name.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") ==
                         std::string::npos;
    if (is_name) item = Trim(item.substr(open + 1, item.size() - open - 2));
  }
  if (item.size() >= 2 && (item.front() == '\'' || item.front() == '"') &&
      item.back() == item.front()) {
    item = item.substr(1, item.size() - 2);
  }
  return item;
}

// A cell's list: "a;b;c", or a list as Python writes it: "[0.1, 0.2]" (a list),
// "[np.float64(0.1), np.float64(0.2)]" (a list of numpy numbers), "[0.1 0.2]" (a numpy array,
// split by spaces and maybe lines), "['a', 'b, c']" (strings, quoted). Separators inside
// quotes or parentheses do not split.
std::vector<std::string> ListItems(std::string list) {
  list = Trim(std::move(list));
  const bool bracketed = list.size() >= 2 && list.front() == '[' && list.back() == ']';
  if (bracketed) list = list.substr(1, list.size() - 2);
  auto outside = [&](char separator) {
    char quote = 0;
    int depth = 0;
    for (char c : list) {
      if (quote != 0) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '(') {
        ++depth;
      } else if (c == ')') {
        --depth;
      } else if (depth == 0 && c == separator) {
        return true;
      }
    }
    return false;
  };
  const char separator = outside(';') ? ';' : outside(',') ? ',' : bracketed ? ' ' : ',';
  std::vector<std::string> items;
  std::string item;
  char quote = 0;
  int depth = 0;
  auto flush = [&] {
    std::string bare = ListItem(item);
    // A numpy array's items are padded to one width: several spaces are one separator.
    if (!(separator == ' ' && Trim(item).empty())) items.push_back(std::move(bare));
    item.clear();
  };
  for (char c : list) {
    if (separator == ' ' && quote == 0 && (c == '\n' || c == '\r' || c == '\t')) c = ' ';
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (depth == 0 && c == separator) {
      flush();
      continue;
    }
    item.push_back(c);
  }
  if (!Trim(item).empty() || (separator != ' ' && !items.empty())) flush();
  return items;
}

}  // namespace

Result<std::string> CsvToJsonLines(const Schema& schema, std::string_view csv) {
  size_t at = 0;
  std::string error;
  std::vector<std::string> header = CsvRecord(csv, at, error);
  for (std::string& name : header) name = Trim(name);
  if (!error.empty() || header.empty() || (header.size() == 1 && header[0].empty())) {
    return MakeError(ErrorCode::kConfig, "CSV line 1: a header row of column names is needed");
  }
  // What each CSV column fills: a field, one element of an array<double> (name[0]) or one key
  // of a map (name.key).
  struct Target {
    int field = -1;
    int element = -1;
    std::string key;
    bool map_key = false;
    bool skip = false;  // pandas' index
    // Every cell is True, False or empty: a column of Python booleans, which the JSON of the
    // same records writes true/false (a string field then reads "true"/"false").
    bool python_bools = true;
  };
  std::vector<Target> columns;
  for (size_t c = 0; c < header.size(); ++c) {
    const std::string& name = header[c];
    Target target;
    // pandas' df.to_csv() writes the index first, in a column without a name ("Unnamed: 0"
    // once read back and written again): not a field, skipped.
    if (c == 0 && (name.empty() || name == "Unnamed: 0") && schema.IndexOf(name) < 0) {
      target.skip = true;
      columns.push_back(std::move(target));
      continue;
    }
    target.field = schema.IndexOf(name);
    const size_t open = name.find('[');
    if (target.field < 0 && open != std::string::npos && name.back() == ']') {
      target.field = schema.IndexOf(name.substr(0, open));
      target.element = std::atoi(name.c_str() + open + 1);
      if (target.field >= 0 && schema.fields[target.field].type != FieldType::kDoubleArray) {
        target.field = -1;
      }
    }
    for (size_t dot = name.rfind('.'); target.field < 0 && dot != std::string::npos && dot > 0;
         dot = name.rfind('.', dot - 1)) {
      const int map = schema.IndexOf(name.substr(0, dot));
      if (map >= 0 && IsMap(schema.fields[map].type)) {
        target.field = map;
        target.key = name.substr(dot + 1);
        target.map_key = true;
      }
    }
    if (target.field < 0) {
      return MakeError(ErrorCode::kConfig,
                       "CSV column '{}' is not a field of the pipeline's schema (array elements "
                       "are written name[0], name[1], ..., a struct's fields name.field, a "
                       "map's values name.key)",
                       name);
    }
    columns.push_back(std::move(target));
  }
  {
    // A first pass over the records finds the columns of Python booleans.
    size_t scan = at;
    std::string scan_error;
    while (scan < csv.size() && scan_error.empty()) {
      std::vector<std::string> cells = CsvRecord(csv, scan, scan_error);
      if (cells.size() != columns.size()) continue;  // reported by the second pass
      for (size_t c = 0; c < cells.size(); ++c) {
        const std::string cell = Trim(cells[c]);
        if (!cell.empty() && !IsPythonBool(cell)) columns[c].python_bools = false;
      }
    }
  }
  std::string out;
  int64_t line = 1;
  while (at < csv.size()) {
    ++line;
    std::vector<std::string> cells = CsvRecord(csv, at, error);
    if (!error.empty()) return MakeError(ErrorCode::kConfig, "CSV line {}: {}", line, error);
    if (cells.size() == 1 && Trim(cells[0]).empty()) continue;
    if (cells.size() != header.size()) {
      return MakeError(ErrorCode::kConfig, "CSV line {}: {} fields, the header has {}", line,
                       cells.size(), header.size());
    }
    std::map<int, std::string> values;                   // field -> JSON value
    std::map<int, std::map<int, std::string>> elements;  // array field -> element -> number
    std::map<int, std::vector<std::pair<std::string, std::string>>> entries;  // map -> key, JSON
    for (size_t c = 0; c < cells.size(); ++c) {
      const Target& target = columns[c];
      if (target.skip) continue;
      const int field = target.field;
      const std::string cell = Trim(cells[c]);
      const Field& f = schema.fields[field];
      auto bad = [&](std::string_view expected) {
        return MakeError(ErrorCode::kConfig, "CSV line {} column '{}': '{}' is not {}", line,
                         header[c], cell, expected);
      };
      if (cell.empty()) continue;  // null
      if (target.element >= 0) {
        if (!IsNumber(cell)) return bad("a number");
        elements[field][target.element] = cell;
        continue;
      }
      if (target.map_key) {
        std::string json;
        if (f.type == FieldType::kDoubleMap) {
          if (!IsNumber(cell)) return bad("a number");
          json = cell;
        } else {
          AppendJsonString(json, cell);
        }
        entries[field].emplace_back(target.key, std::move(json));
        continue;
      }
      std::string json;
      switch (f.type) {
        case FieldType::kString:
          if (target.python_bools) {
            json = cell == "True" ? "true" : "false";
          } else {
            AppendJsonString(json, cell);
          }
          break;
        case FieldType::kDouble:
          if (IsMissing(cell)) continue;
          if (!IsNumber(cell)) return bad("a number");
          json = cell;
          break;
        case FieldType::kLong:
        case FieldType::kInt:
          if (IsMissing(cell)) continue;
          if (!IsNumber(cell)) return bad("a number");
          json = WholeNumber(cell);
          break;
        case FieldType::kBoolean:
          if (cell == "true" || cell == "True") {
            json = "true";
          } else if (cell == "false" || cell == "False") {
            json = "false";
          } else {
            return bad("true or false");
          }
          break;
        case FieldType::kTimestamp:
          if (IsNumber(cell)) {
            json = cell;
          } else {
            AppendJsonString(json, cell);
          }
          break;
        case FieldType::kDoubleArray: {
          json = "[";
          for (const std::string& item : ListItems(cell)) {
            if (!IsNumber(item) && !IsMissing(item)) return bad("a list of numbers");
            if (json.size() > 1) json.push_back(',');
            json += IsMissing(item) ? "null" : item;
          }
          json += "]";
          break;
        }
        case FieldType::kStringArray: {
          json = "[";
          for (const std::string& item : ListItems(cell)) {
            if (json.size() > 1) json.push_back(',');
            AppendJsonString(json, item);
          }
          json += "]";
          break;
        }
        case FieldType::kDoubleMap:
        case FieldType::kStringMap:
          // A whole map in one cell: its JSON object.
          if (cell.front() != '{' || cell.back() != '}') {
            return bad("a JSON object (or give each key a column of its own: name.key)");
          }
          json = cell;
          break;
      }
      values[field] = std::move(json);
    }
    for (const auto& [field, by_index] : elements) {
      std::string json = "[";
      int expected = 0;
      for (const auto& [index, number] : by_index) {
        if (index != expected++) {
          return MakeError(ErrorCode::kConfig, "CSV line {}: {}[{}] is missing", line,
                           schema.fields[field].name, expected - 1);
        }
        if (json.size() > 1) json.push_back(',');
        json += number;
      }
      values[field] = json + "]";
    }
    for (const auto& [field, items] : entries) {
      if (values.count(field) > 0) {
        return MakeError(ErrorCode::kConfig, "CSV line {}: map '{}' is given whole and by key",
                         line, schema.fields[field].name);
      }
      std::string json;
      JsonObject object(json);
      for (const auto& [key, value] : items) object.Raw(key, value);
      object.Close();
      values[field] = std::move(json);
    }
    // A struct's fields go back into their object.
    JsonNode record;
    for (const auto& [field, json] : values) {
      const Field& f = schema.fields[field];
      JsonNode* node = &record;
      if (f.path.empty()) {
        node = &node->Member(f.name);
      } else {
        for (const std::string& key : f.path) node = &node->Member(key);
      }
      node->value = json;
    }
    if (record.members.empty()) {
      out += "{}";
    } else {
      record.Write(out);
    }
    out.push_back('\n');
  }
  return out;
}

std::string WholeNumbersInJsonLines(const Schema& schema, std::string_view text) {
  std::vector<bool> whole(schema.fields.size(), false);
  bool any = false;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const Field& f = schema.fields[i];
    whole[i] = f.path.empty() && (f.type == FieldType::kLong || f.type == FieldType::kInt);
    any = any || whole[i];
  }
  if (!any) return std::string(text);
  simdjson::dom::parser parser;
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    simdjson::dom::object object;
    bool rewrite = false;
    if (parser.parse(simdjson::padded_string(line)).get_object().get(object) == simdjson::SUCCESS) {
      for (auto [key, value] : object) {
        const int field = schema.IndexOf(std::string(key));
        rewrite = rewrite || (field >= 0 && whole[field] && value.is_double());
      }
    }
    if (!rewrite) {
      out += line;
    } else {
      // The record again, its whole floats in integer fields written as integers; anything
      // else (a fraction) is left for the decoder to refuse with the line.
      JsonObject record(out);
      for (auto [key, value] : object) {
        const int field = schema.IndexOf(std::string(key));
        std::string json = simdjson::minify(value);
        if (field >= 0 && whole[field] && value.is_double()) json = WholeNumber(json);
        record.Raw(key, json);
      }
      record.Close();
    }
    out.push_back('\n');
  }
  return out;
}

int RunBaselineBuild(const std::string& pipeline, const std::vector<std::string>& inputs,
                     const std::string& format, const std::string& output) {
  LoadOptions options;
  options.catalog = &ConnectorDeclarations();
  options.value_formats = &ValueFormats();
  // The pipeline's own file baseline may be the very file being built.
  options.read_references = false;
  PipelineResult spec = LoadPipelineFile(pipeline, options);
  if (!spec) {
    std::cerr << FormatProblems(pipeline, spec.error());
    return kExitConfig;
  }
  std::string records;
  for (const std::string& input : inputs) {
    auto text = ReadAll(input);
    if (!text) {
      std::cerr << "driftd baseline build: " << text.error().message() << "\n";
      return kExitIoError;
    }
    const bool csv = format == "csv" || (format == "auto" && (input.ends_with(".csv") ||
                                                              input.ends_with(".CSV")));
    if (csv) {
      auto converted = CsvToJsonLines(spec->schema, *text);
      if (!converted) {
        std::cerr << fmt::format("driftd baseline build: {}: {}\n", input,
                                 converted.error().message());
        return kExitDataError;
      }
      records += *converted;
    } else {
      records += WholeNumbersInJsonLines(spec->schema, *text);
      if (!records.empty() && records.back() != '\n') records.push_back('\n');
    }
  }
  auto built = DriftStage::BuildReferenceStatistics(*spec, records);
  if (!built) {
    std::cerr << "driftd baseline build: " << built.error().message() << "\n";
    return built.error().code() == ErrorCode::kConfig ? kExitDataError : ExitCodeFor(built.error());
  }
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  out << *built;
  out.close();
  if (!out) {
    std::cerr << "driftd baseline build: cannot write " << output << "\n";
    return kExitIoError;
  }
  std::cout << fmt::format("{}: reference statistics of {} for pipeline '{}'\n", output,
                           inputs.size() == 1 ? inputs[0] : fmt::format("{} files", inputs.size()),
                           spec->name);
  return kExitOk;
}

int RunBaselineReset(const HttpAddress& address, const std::string& pipeline,
                     const std::string& model, const std::string& token) {
  httplib::Client client(address.host, address.port);
  client.set_connection_timeout(3, 0);
  client.set_read_timeout(10, 0);
  // The daemon changes state only for a request a web page could not have sent: one with a
  // header of driftd's own (or the token), see cmd/driftd/http_access.h.
  httplib::Headers headers{{std::string(kAdminHeader), "1"}};
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  auto reply = client.Post("/admin/rebaseline", headers,
                           httplib::Params{{"pipeline", pipeline}, {"model", model}});
  if (!reply) {
    std::cerr << fmt::format("driftd baseline reset: no answer from {}:{} ({})\n", address.host,
                             address.port, httplib::to_string(reply.error()));
    return kExitFailure;
  }
  (reply->status / 100 == 2 ? std::cout : std::cerr) << reply->body;
  return reply->status / 100 == 2 ? kExitOk : kExitFailure;
}

}  // namespace driftd
