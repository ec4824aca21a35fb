#include "cmd/driftd/baseline.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <httplib.h>

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

bool IsNumber(std::string_view s) {
  if (s.empty()) return false;
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && end == s.data() + s.size();
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
// struct, a map).
struct JsonNode {
  std::string value;
  std::vector<std::pair<std::string, JsonNode>> members;

  JsonNode& Member(const std::string& key) {
    for (auto& [name, node] : members) {
      if (name == key) return node;
    }
    return members.emplace_back(key, JsonNode{}).second;
  }
  void Write(std::string& out) const {
    if (members.empty()) {
      out += value;
      return;
    }
    JsonObject object(out);
    for (const auto& [name, node] : members) {
      object.Key(name);
      node.Write(out);
    }
    object.Close();
  }
};

// A cell's list "a;b;c" (or "[a, b, c]", split by commas when there is no ';').
std::vector<std::string> ListItems(std::string list) {
  if (list.size() >= 2 && list.front() == '[' && list.back() == ']') {
    list = list.substr(1, list.size() - 2);
  }
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(list);
  while (std::getline(in, item, list.find(';') != std::string::npos ? ';' : ',')) {
    items.push_back(Trim(item));
  }
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
  };
  std::vector<Target> columns;
  for (const std::string& name : header) {
    Target target;
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
        case FieldType::kString: AppendJsonString(json, cell); break;
        case FieldType::kDouble:
        case FieldType::kLong:
        case FieldType::kInt:
          if (!IsNumber(cell)) return bad("a number");
          json = cell;
          break;
        case FieldType::kBoolean:
          if (cell != "true" && cell != "false") return bad("true or false");
          json = cell;
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
            if (!IsNumber(item)) return bad("a list of numbers");
            if (json.size() > 1) json.push_back(',');
            json += item;
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

int RunBaselineBuild(const std::string& pipeline, const std::vector<std::string>& inputs,
                     const std::string& format, const std::string& output) {
  LoadOptions options;
  options.catalog = &ConnectorDeclarations();
  options.value_formats = &ValueFormats();
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
      records += *text;
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
  httplib::Headers headers;
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
