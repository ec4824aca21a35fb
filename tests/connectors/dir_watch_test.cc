#include "connectors/dir_watch.h"

#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/test_support.h"

namespace driftd {
namespace {

using testing::AppendFile;
using testing::TempDir;
using testing::WriteFile;

// name=size pairs of the watch's view, for readable comparisons.
std::vector<std::string> Seen(DirectoryWatch& watch) {
  auto files = watch.Files();
  REQUIRE(files);
  std::vector<std::string> seen;
  for (const DirEntry& entry : *files) seen.push_back(entry.name + "=" + std::to_string(entry.size));
  return seen;
}

TEST_CASE("a watched directory is listed once and follows files added, grown, renamed and "
          "removed",
          "[file][source][watch]") {
  TempDir dir;
  WriteFile(dir / "a.jsonl", "{}\n");
  std::filesystem::create_directory(dir / "sub");
  DirectoryWatch watch(dir.path().string());
  CHECK(Seen(watch) == std::vector<std::string>{"a.jsonl=3"});
  REQUIRE(watch.watching());

  AppendFile(dir / "a.jsonl", "{}\n");
  WriteFile(dir / ".b.tmp", "{}\n{}\n");
  CHECK(Seen(watch) == std::vector<std::string>{".b.tmp=6", "a.jsonl=6"});
  std::filesystem::rename(dir / ".b.tmp", dir / "b.jsonl");
  CHECK(Seen(watch) == std::vector<std::string>{"a.jsonl=6", "b.jsonl=6"});
  std::filesystem::remove(dir / "a.jsonl");
  WriteFile(dir / "sub/c.jsonl", "{}\n");  // not directly in the directory
  CHECK(Seen(watch) == std::vector<std::string>{"b.jsonl=6"});
  for (int i = 0; i < 100; ++i) CHECK(Seen(watch) == std::vector<std::string>{"b.jsonl=6"});
  CHECK(watch.listings() == 1);
}

TEST_CASE("a watched directory is listed again after its relist interval", "[file][source][watch]") {
  TempDir dir;
  DirectoryWatch watch(dir.path().string(), /*relist_interval_ms=*/0);
  CHECK(Seen(watch).empty());
  WriteFile(dir / "a.jsonl", "{}\n");
  CHECK(Seen(watch) == std::vector<std::string>{"a.jsonl=3"});
  CHECK(watch.listings() == 2);
}

TEST_CASE("a watched directory that goes away is an error naming it, and is watched again when "
          "it is back",
          "[file][source][watch]") {
  TempDir dir;
  const std::string path = dir / "input";
  std::filesystem::create_directory(path);
  WriteFile(dir / "input/a.jsonl", "{}\n");
  DirectoryWatch watch(path);
  CHECK(Seen(watch) == std::vector<std::string>{"a.jsonl=3"});
  std::filesystem::remove_all(path);
  auto gone = watch.Files();
  REQUIRE_FALSE(gone);
  CHECK_THAT(gone.error().message(), Catch::Contains(path));
  std::filesystem::create_directory(path);
  WriteFile(dir / "input/b.jsonl", "{}\n");
  CHECK(Seen(watch) == std::vector<std::string>{"b.jsonl=3"});
  WriteFile(dir / "input/c.jsonl", "{}\n");
  CHECK(Seen(watch) == std::vector<std::string>{"b.jsonl=3", "c.jsonl=3"});
}

}  // namespace
}  // namespace driftd
