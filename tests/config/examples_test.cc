// The example pipelines shipped in deploy/examples must load against the real connectors'
// declarations, and every YAML example in the documentation must be well-formed YAML, so that
// the documentation never shows a file the daemon rejects.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "config/loader.h"
#include "config/yaml_precheck.h"
#include "connectors/registry.h"
#include "tests/config/config_test_util.h"

namespace driftd {
namespace {

// A connector whose declaration is still a placeholder (no options, "not yet available") cannot
// judge an example's options yet.
bool IsPlaceholder(const ConnectorDecl& decl) {
  return decl.options.empty() && decl.passthrough_prefix.empty() &&
         decl.doc.find("not yet available") != std::string::npos;
}

TEST_CASE("every example pipeline in deploy/examples validates against the real connectors",
          "[config][examples]") {
  const std::filesystem::path dir = std::filesystem::path(DRIFTD_SOURCE_DIR) / "deploy/examples";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml" && entry.path().extension() != ".yml") continue;
    INFO(entry.path().string());
    ++files;
    // Environment variables take their defaults, as on a machine with nothing set.
    LoadOptions options;
    options.env = testing::FakeEnv({});
    auto result = LoadPipelineFile(entry.path().string(), options);
    INFO(testing::ProblemText(result));
    REQUIRE(result);  // structure and semantics, without connector options

    bool placeholders = false;
    for (const ConnectorDecl& decl : ConnectorDeclarations()) {
      const bool used =
          (decl.role == ConnectorRole::kSource && decl.format == result->source.format) ||
          std::any_of(result->sinks.begin(), result->sinks.end(), [&](const SinkSpec& s) {
            return decl.role == ConnectorRole::kSink && decl.format == s.format;
          });
      placeholders = placeholders || (used && IsPlaceholder(decl));
    }
    if (placeholders) {
      WARN("connector options not checked yet (placeholder declarations): " << entry.path());
      continue;
    }
    options.catalog = &ConnectorDeclarations();
    auto checked_result = LoadPipelineFile(entry.path().string(), options);
    INFO(testing::ProblemText(checked_result));
    CHECK(checked_result);
  }
  CHECK(files > 0);
}

struct YamlBlock {
  std::string file;
  int line = 0;  // of the opening fence
  std::string text;
};

// The ```yaml fenced blocks of a Markdown file, their fence's indentation removed (a block may
// sit in a list item).
std::vector<YamlBlock> YamlBlocksOf(const std::filesystem::path& path) {
  std::vector<YamlBlock> blocks;
  std::ifstream in(path);
  std::string line;
  int number = 0;
  bool inside = false;
  size_t indent = 0;
  while (std::getline(in, line)) {
    ++number;
    const size_t first = line.find_first_not_of(' ');
    const std::string_view trimmed =
        first == std::string::npos ? std::string_view() : std::string_view(line).substr(first);
    if (!inside) {
      if (trimmed == "```yaml" || trimmed == "```yml") {
        inside = true;
        indent = first;
        blocks.push_back({path.string(), number, ""});
      }
      continue;
    }
    if (trimmed == "```") {
      inside = false;
      continue;
    }
    // Blank lines inside the block may carry less indentation than the fence.
    blocks.back().text += line.substr(std::min({indent, first, line.size()}));
    blocks.back().text += '\n';
  }
  return blocks;
}

TEST_CASE("every YAML example in the documentation is well-formed YAML, ${VAR} values included",
          "[config][examples]") {
  // An unquoted ${VAR:-x} inside {...} is the classic break: YAML reads its braces as structure.
  const std::filesystem::path root(DRIFTD_SOURCE_DIR);
  size_t files = 0, blocks = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(root);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name.starts_with(".") || name.starts_with("build"))) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || it->path().extension() != ".md") continue;
    ++files;
    for (const YamlBlock& block : YamlBlocksOf(it->path())) {
      ++blocks;
      auto checked = config_detail::PrecheckYaml(block.text);
      // The problem's line counts from the block's first line, the one after the fence.
      const int line = block.line + (checked ? 0 : checked.error().mark.line);
      INFO(block.file << ":" << line << ": " << (checked ? "" : checked.error().message) << "\n"
                      << block.text);
      CHECK(checked);
    }
  }
  CHECK(files >= 5);
  CHECK(blocks >= 10);
}

}  // namespace
}  // namespace driftd
