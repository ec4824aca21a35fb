#include "engine/key_guard.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "engine/expr/projection.h"

namespace driftd {

namespace {

class KeyGuard final : public ValueDecoder {
 public:
  KeyGuard(std::unique_ptr<ValueDecoder> inner, std::vector<int> columns, MalformedSpec spec)
      : inner_(std::move(inner)), columns_(std::move(columns)), spec_(spec) {}

  Status Decode(const InputChunk& chunk, RecordBatch& out, std::vector<DeadLetter>* dead_letters,
                const DescribePosition& describe) override {
    const size_t before = out.num_rows;
    const size_t letters_before = dead_letters != nullptr ? dead_letters->size() : 0;
    DRIFTD_TRY(inner_->Decode(chunk, out, dead_letters, describe));
    const size_t limit = static_cast<size_t>(spec_.max_key_bytes);
    size_t refused = 0;
    for (int column : columns_) {
      const Column& values = out.columns[static_cast<size_t>(column)];
      for (size_t row = before; row < out.num_rows; ++row) {
        if (!values.IsNull(row) && values.String(row).size() > limit) [[unlikely]] {
          if (keep_.empty()) keep_.assign(out.num_rows, 1);
          if (keep_[row] == 0) continue;
          keep_[row] = 0;
          ++refused;
          DRIFTD_TRY(Refuse(chunk, out, row, column, values.String(row).size(), dead_letters,
                            describe));
        }
      }
    }
    if (refused == 0) return Ok();
    if (dead_letters != nullptr && dead_letters->size() > letters_before) {
      InChunkOrder(chunk, *dead_letters, letters_before);
    }
    KeepRows(out, keep_);
    keep_.clear();
    own_.by_reason[static_cast<size_t>(MalformedReason::kTooLarge)] +=
        static_cast<int64_t>(refused);
    return Ok();
  }

  void Project(const std::vector<bool>& used) override { inner_->Project(used); }

  const MalformedCounts& counts() const override {
    merged_ = inner_->counts();
    merged_.Add(own_);
    return merged_;
  }
  void ResetCounts() override {
    inner_->ResetCounts();
    own_ = MalformedCounts{};
  }
  const Schema& schema() const override { return inner_->schema(); }

 private:
  // The chunk's dead letters from `first` on, in the order of their records in the chunk (the
  // inner decoder's come first, this guard's after them).
  static void InChunkOrder(const InputChunk& chunk, std::vector<DeadLetter>& letters,
                           size_t first) {
    std::map<std::pair<uint32_t, int64_t>, size_t> index;
    for (size_t i = 0; i < chunk.size(); ++i) {
      const RecordPosition& position = chunk.records()[i].position;
      index.emplace(std::pair(position.partition, position.offset), i);
    }
    auto order = [&](const DeadLetter& letter) {
      auto it = index.find(std::pair(letter.position.partition, letter.position.offset));
      return it == index.end() ? SIZE_MAX : it->second;
    };
    std::stable_sort(letters.begin() + static_cast<std::ptrdiff_t>(first), letters.end(),
                     [&](const DeadLetter& a, const DeadLetter& b) { return order(a) < order(b); });
  }

  Status Refuse(const InputChunk& chunk, const RecordBatch& out, size_t row, int column,
                size_t size, std::vector<DeadLetter>* dead_letters,
                const DescribePosition& describe) {
    const RecordPosition& position = out.positions[row];
    const std::string detail = fmt::format(
        "field '{}' is a string of {} bytes, over malformed.maxKeyBytes {} (it keys the query's "
        "state and output rows)",
        inner_->schema().fields[static_cast<size_t>(column)].name, size, spec_.max_key_bytes);
    switch (spec_.policy) {
      case MalformedPolicy::kFail:
        return MakeError(ErrorCode::kMalformedRecord, "malformed record at {}: {}",
                         describe ? describe(position)
                                  : fmt::format("partition {} offset {}", position.partition,
                                                position.offset),
                         detail);
      case MalformedPolicy::kDeadLetter:
        if (dead_letters != nullptr) {
          DeadLetter dead;
          dead.reason = MalformedReason::kTooLarge;
          dead.detail = detail;
          dead.position = position;
          dead.position.malformed = false;
          // The record's bytes: rows keep the chunk's order, so the search goes on from the
          // record found last.
          for (size_t i = 0; i < chunk.size(); ++i) {
            const InputChunk::Record& record = chunk.records()[i];
            if (record.position.partition == position.partition &&
                record.position.offset == position.offset) {
              dead.raw = std::string(chunk.record(i));
              dead.truncated = record.cut;
              break;
            }
          }
          dead_letters->push_back(std::move(dead));
        }
        return Ok();
      case MalformedPolicy::kPermissive:
      case MalformedPolicy::kDrop:
        return Ok();
    }
    return Ok();
  }

  std::unique_ptr<ValueDecoder> inner_;
  std::vector<int> columns_;
  MalformedSpec spec_;
  MalformedCounts own_;
  mutable MalformedCounts merged_;
  std::vector<uint8_t> keep_;
};

}  // namespace

std::vector<int> KeyColumns(const PipelineSpec& spec) {
  std::vector<std::string> names = spec.query.group_by;
  if (spec.drift.enabled) {
    if (!spec.drift.model_column.empty()) names.push_back(spec.drift.model_column);
    names.insert(names.end(), spec.drift.segment_by.begin(), spec.drift.segment_by.end());
  }
  std::vector<int> columns;
  for (const std::string& name : names) {
    const int index = spec.schema.IndexOf(name);
    if (index < 0 || spec.schema.fields[static_cast<size_t>(index)].type != FieldType::kString) {
      continue;  // a derived column, or one that is not a string
    }
    if (std::find(columns.begin(), columns.end(), index) == columns.end()) {
      columns.push_back(index);
    }
  }
  return columns;
}

std::unique_ptr<ValueDecoder> GuardKeyLengths(std::unique_ptr<ValueDecoder> decoder,
                                              const PipelineSpec& spec) {
  std::vector<int> columns = KeyColumns(spec);
  if (columns.empty()) return decoder;
  return std::make_unique<KeyGuard>(std::move(decoder), std::move(columns),
                                    spec.source.malformed);
}

}  // namespace driftd
