// The cap on models: no producer can grow a query's memory, state and metrics without bound.
// Each distinct value of the model column (drift's, else the first groupBy column) costs
// aggregation groups, drift series, state keys and metric lines; one million distinct ids of
// one record each took 5.7 GB and a 404 MB /metrics page. The gate admits models as they come,
// up to query.maxModels (each task its share when scaled out), keeps the admitted names in the
// checkpoint (namespace "models") so that a restart admits the same ones, and hands the rows of
// further models to query.modelOverflow: dropped, or kept under the model "(other)". Either way
// they are counted (progress rowsOverModelCap, driftd_rows_over_model_cap_total) and the first
// one is logged.
//
// Which models are admitted once more arrive than the cap allows depends on the order they
// arrive in; below the cap, every model is, whatever the batching.
//
// Lifecycle: Restore for each persisted entry, then per batch Apply on every chunk (in input
// order) and Finish. The executor's thread (or the sequencing step of a batch on several
// threads), one gate per task.
#pragma once

#include <array>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "engine/batch.h"
#include "engine/executor/stage.h"
#include "engine/pipeline_spec.h"
#include "engine/result.h"
#include "engine/string_hash.h"

namespace driftd {

class ModelGate {
 public:
  /// The model name rows of models over the cap are kept under (modelOverflow: other).
  static constexpr std::string_view kOtherModel = "(other)";

  /// The gate of `spec` for one of `tasks` tasks, or nullptr when the query has no string model
  /// column.
  static std::unique_ptr<ModelGate> Create(const PipelineSpec& spec, uint32_t tasks = 1);

  /// Namespace of the admitted models in the checkpoint; persisted, never changes.
  static constexpr std::string_view kNamespace = "models";

  Status Restore(std::string_view key, std::string_view value);

  /// Admits the new models of `batch` while there is room and drops or renames the rows of the
  /// others (dropping their `times` too, when given). Returns whether any row was dropped or
  /// renamed.
  bool Apply(RecordBatch& batch, RowTimes* times = nullptr);

  /// The batch's newly admitted models (state puts) and counters.
  void Finish(StateChanges& changes, StageProgress& progress);

  int64_t models() const { return static_cast<int64_t>(admitted_.size()); }
  int64_t max_models() const { return max_models_; }

 private:
  ModelGate(int column, int64_t max_models, ModelOverflow overflow, std::string pipeline)
      : column_(column), max_models_(max_models), overflow_(overflow),
        pipeline_(std::move(pipeline)) {}

  const int column_;
  const int64_t max_models_;
  const ModelOverflow overflow_;
  const std::string pipeline_;
  StringSet admitted_;
  std::vector<std::string> fresh_;  // admitted in this batch
  int64_t over_in_batch_ = 0;
  bool warned_ = false;
  // Admitted models seen lately, each in the slot of a cheap hash of its bytes: a row's model
  // is almost always one of them, which spares the set's hash and lookup (rows of a few models
  // interleaved change model at nearly every row). Rows over the cap take the set's way.
  static constexpr size_t kRecentSlots = 64;
  // A name's length and its first and last (up to) eight bytes: for a name of at most 16 bytes
  // they say the whole name.
  struct Sketch {
    uint64_t head = 0;
    uint64_t tail = 0;
    size_t size = SIZE_MAX;  // no name
    bool operator==(const Sketch&) const = default;
  };
  static Sketch SketchOf(std::string_view model) {
    Sketch sketch;
    sketch.size = model.size();
    // Fixed-size loads only (a copy of a variable size is a call to memcpy per row). Two
    // overlapping loads cover every byte of a name of 4 to 16 bytes; three bytes, of 1 to 3.
    const char* p = model.data();
    const size_t n = model.size();
    if (n >= 8) {
      std::memcpy(&sketch.head, p, 8);
      std::memcpy(&sketch.tail, p + n - 8, 8);
    } else if (n >= 4) {
      uint32_t first = 0;
      uint32_t last = 0;
      std::memcpy(&first, p, 4);
      std::memcpy(&last, p + n - 4, 4);
      sketch.head = first | (static_cast<uint64_t>(last) << 32);
    } else if (n > 0) {
      auto byte = [&](size_t i) { return static_cast<uint64_t>(static_cast<uint8_t>(p[i])); };
      sketch.head = byte(0) | (byte(n / 2) << 8) | (byte(n - 1) << 16);
    }
    return sketch;
  }
  static size_t SlotOf(const Sketch& sketch) {
    const uint64_t h = (sketch.head * 0x9E3779B97F4A7C15ull) ^
                       ((sketch.tail + sketch.size) * 0xC2B2AE3D27D4EB4Full);
    return static_cast<size_t>(h >> 58) % kRecentSlots;
  }
  struct Recent {
    Sketch sketch;
    std::string name;  // kept for names longer than 16 bytes
  };
  std::array<Recent, kRecentSlots> recent_;
  std::vector<uint8_t> keep_;
};

}  // namespace driftd
