// A checkpoint written by an earlier build (before engine/codec.h: host-order aggregation state,
// commit records with JSON offsets) still opens: the query resumes where it stopped, with the
// same results as a run that never stopped, and its next writes use the codec's layout.
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "engine/checkpoint.h"
#include "state/checkpoint_store.h"
#include "tests/e2e/e2e_util.h"

namespace driftd {
namespace {

namespace fs = std::filesystem;

// The pipeline that wrote tests/e2e/data/checkpoint_main_932ed03 (driftd at commit 932ed03,
// `totalRows: 2000`: batches 0 and 1 of 1,000 rows). Its fingerprint holds no path, so it
// serves from any directory.
std::string Pipeline(const std::string& checkpoint, const std::string& out, int total_rows) {
  return fmt::format(R"yaml(name: upgrade
schema:
  - {{name: model_id, type: string, nullable: false}}
  - {{name: event_time, type: timestamp}}
  - {{name: feature_vector, type: array<double>}}
  - {{name: prediction, type: double}}
  - {{name: ground_truth, type: double}}
source:
  format: rate
  options: {{mode: inference, models: 3, features: 2, seed: 7, totalRows: {}, realTime: false,
            maxRowsPerTrigger: 1000, startTimeMs: 1795000000000}}
query:
  groupBy: [model_id]
  aggregates: [count, mean(prediction), "approx_percentile(prediction, 0.5)", mean(feature_vector)]
sinks:
  - {{format: file, stream: stats, outputMode: update, options: {{path: "{}"}}}}
trigger: {{availableNow: true}}
checkpointLocation: "{}"
)yaml",
                     total_rows, out, checkpoint);
}

TEST_CASE("a checkpoint of the build before the byte codec resumes with the same results and is "
          "rewritten in the codec's layout",
          "[e2e][checkpoint][codec]") {
  testing::TempDir dir("driftd-upgrade");
  const std::string old_checkpoint = dir / "old";
  fs::copy(std::string(DRIFTD_TESTS_DIR) + "/e2e/data/checkpoint_main_932ed03", old_checkpoint);
  fs::permissions(old_checkpoint, fs::perms::owner_all);

  // Two more batches on the old checkpoint, and the same four batches from nothing.
  const std::string resumed_file = dir / "resumed.yaml";
  testing::WriteFile(resumed_file, Pipeline(old_checkpoint, dir / "resumed-out", 4000));
  testing::RunResult resumed = testing::RunDriftd({"run", resumed_file, "--http", "off"});
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const std::string fresh_file = dir / "fresh.yaml";
  testing::WriteFile(fresh_file, Pipeline(dir / "fresh", dir / "fresh-out", 4000));
  testing::RunResult fresh = testing::RunDriftd({"run", fresh_file, "--http", "off"});
  INFO(fresh.output);
  REQUIRE(fresh.exit_code == 0);

  // Update mode: each batch writes every model's row, with what the state holds so far. The
  // resumed run's rows (batches 2 and 3) are the fresh run's last ones: the old state was read
  // exactly, sketches and per-element moments included.
  const std::vector<std::string> resumed_rows = testing::CommittedRows(dir / "resumed-out");
  const std::vector<std::string> fresh_rows = testing::CommittedRows(dir / "fresh-out");
  REQUIRE(fresh_rows.size() == 12);
  REQUIRE(resumed_rows.size() == 6);
  CHECK(resumed_rows == std::vector<std::string>(fresh_rows.end() - 6, fresh_rows.end()));
  CHECK(testing::JsonField(resumed_rows.back(), "count") ==
        testing::JsonField(fresh_rows.back(), "count"));

  // The groups were rewritten in the codec's layout and their old keys deleted; the last
  // commit reads back.
  CheckpointOptions options;
  options.read_only = true;
  auto store = OpenCheckpointStore(old_checkpoint, options);
  REQUIRE(store);
  int groups = 0;
  int old_layout = 0;
  REQUIRE((*store)->ScanState([&](std::string_view encoded, std::string_view value) {
    StateKeyView key;
    REQUIRE(DecodeStateKey(encoded, key));
    if (key.ns != "agg") return;
    ++groups;
    if (key.key.empty() || key.key[0] != 'A' || value.empty() || value[0] != 3) ++old_layout;
  }));
  CHECK(groups == 3);
  CHECK(old_layout == 0);
  auto last = (*store)->LastCommit();
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->batch_id == 3);
  CHECK((*last)->end.at("rate-0") == 4000);
}

}  // namespace
}  // namespace driftd
