// A full disk under the checkpoint and the output: commits fail, the query is not ready and
// retries, and once space is freed it goes on where it stopped, with nothing lost or repeated.
// The disk is a small tmpfs mounted by the test (root only; elsewhere the test says why it
// skips, and fails in CI).
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include "tests/service/service_util.h"
#include "tests/support/test_support.h"

namespace driftd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// A tmpfs of `megabytes` at `path`, unmounted when it goes.
class SmallDisk {
 public:
  SmallDisk(fs::path path, int megabytes) : path_(std::move(path)) {
    fs::create_directories(path_);
    const std::string options = fmt::format("size={}m,mode=0700", megabytes);
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

  // Takes every byte left (writing a filler until the disk says no more).
  void Fill() {
    std::ofstream filler(path_ / "filler", std::ios::app | std::ios::binary);
    const std::string block(64 * 1024, '\0');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
    std::ofstream small(path_ / "filler-tail", std::ios::app | std::ios::binary);
    while (small.put('\0') && small.flush()) {
    }
  }
  void Free() {
    fs::remove(path_ / "filler");
    fs::remove(path_ / "filler-tail");
  }

 private:
  fs::path path_;
  bool mounted_ = false;
  std::string error_;
};

// `per_model` records of each of `models` models, predictions counting up from `first`.
std::string Records(int models, int per_model, int first) {
  std::string out;
  for (int r = 0; r < per_model; ++r) {
    for (int m = 0; m < models; ++m) {
      out += fmt::format("{{\"model_id\":\"model-{}\",\"prediction\":{}}}\n", m, first + r);
    }
  }
  return out;
}

// Each model's last count in the file sink's output; `parts` gets its part files.
std::map<std::string, int64_t> LastCounts(const fs::path& dir, std::vector<std::string>& parts) {
  std::map<std::string, int64_t> counts;
  simdjson::dom::parser parser;
  parts.clear();
  if (!fs::exists(dir)) return counts;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("part-", 0) == 0) parts.push_back(name);
  }
  std::sort(parts.begin(), parts.end());
  for (const std::string& part : parts) {
    for (const std::string& line : SplitLines(ReadFile(dir / part))) {
      simdjson::dom::element row = parser.parse(line);
      counts[std::string(row["model_id"].get_string().value())] = row["count"].get_int64().value();
    }
  }
  return counts;
}

TEST_CASE("a full disk stops the commits and readiness, and once space is freed the query goes "
          "on with nothing lost or repeated",
          "[service][checkpoint][e2e]") {
  TempDir dir("driftd-disk-full");
  SmallDisk disk(dir / "disk", 8);
  if (!disk.mounted()) {
    if (InCi()) FAIL("cannot mount a tmpfs for the full-disk test: " << disk.error());
    WARN("skipped: cannot mount a tmpfs (" << disk.error() << "); run as root");
    return;
  }
  const fs::path disk_dir = dir / "disk";
  constexpr int kModels = 10;
  constexpr int kPerFile = 2000;  // records of each model in each file
  WriteFileAt(dir / "in/part-0.jsonl", Records(kModels, kPerFile, 0));
  WriteFileAt(dir / "pipelines/full.yaml", fmt::format(R"(name: full
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: prediction, type: double}}
source:
  format: file
  options: {{path: {in}, maxFilesPerTrigger: 1}}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction)]
sinks:
  - {{name: stats, format: file, stream: stats, outputMode: update, options: {{path: {disk}/out}}}}
trigger: {{processingTime: 100 milliseconds}}
checkpointLocation: {disk}/checkpoint
)",
                                                        fmt::arg("in", dir / "in"),
                                                        fmt::arg("disk", disk_dir.string())));
  const std::string log = dir / "log.txt";
  auto daemon = ChildProcess::Start({DriftdBinary(), "run", dir / "pipelines", "--http",
                                     "127.0.0.1:0", "--quiet-progress"},
                                    log);
  auto port = WaitForHttpPort(log);
  INFO(ReadFile(log));
  REQUIRE(port);
  std::vector<std::string> parts;
  REQUIRE(WaitFor([&] { return LastCounts(disk_dir / "out", parts).size() == kModels; }, 60s));
  REQUIRE(WaitFor([&] { return HttpGet(*port, "/readyz").status == 200; }, 30s));

  // The disk fills up; three more files come. Commits fail, the query retries (opening the
  // checkpoint again frees what RocksDB had set aside, so the filler is topped up), and it is
  // not ready while it cannot commit.
  disk.Fill();
  for (int f = 1; f <= 3; ++f) {
    WriteFileAt(dir / fmt::format("in/part-{}.jsonl", f), Records(kModels, kPerFile, f * 1000));
  }
  bool unready = false;
  REQUIRE(WaitFor(
      [&] {
        disk.Fill();
        unready = unready || HttpGet(*port, "/readyz").status == 503;
        return unready && ReadFile(log).find("No space left on device") != std::string::npos;
      },
      60s));
  CHECK(LastCounts(disk_dir / "out", parts).at("model-0") < 4 * kPerFile);

  // Space again: every record counted once.
  disk.Free();
  REQUIRE(WaitFor(
      [&] {
        auto counts = LastCounts(disk_dir / "out", parts);
        return counts.size() == kModels && counts["model-0"] == 4 * kPerFile;
      },
      90s));
  const auto counts = LastCounts(disk_dir / "out", parts);
  for (const auto& [model, count] : counts) CHECK(count == 4 * kPerFile);
  CHECK(WaitFor([&] { return HttpGet(*port, "/readyz").status == 200; }, 30s));
  daemon.Signal(SIGTERM);
  auto status = daemon.Wait(30s);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

}  // namespace
}  // namespace driftd::testing
