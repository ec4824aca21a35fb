// An in-memory partitioned source for the executor's tests: each partition an ordered list of
// records, read like the Kafka source (a batch takes at most `max_per_batch` of each partition),
// partition after partition or interleaved, with only a share of each partition there yet.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/source.h"

namespace driftd::testing {

// One input: partitions of records, each partition in its order; a batch takes at most
// `max_per_batch` records of each partition (and `limit` caps what exists yet).
struct Partitions {
  std::string name;
  std::vector<std::vector<std::string>> records;
  std::string Key(size_t p) const { return fmt::format("{}-{}", name, p); }
};

class PartitionReader final : public SourceReader {
 public:
  PartitionReader(const Partitions& data, std::vector<std::pair<int64_t, int64_t>> ranges, bool interleave)
      : data_(data), ranges_(std::move(ranges)), interleave_(interleave) {}
  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override {
    while (chunk.byte_size() < max_bytes) {
      bool any = false;
      for (size_t p = 0; p < ranges_.size(); ++p) {
        auto& [next, end] = ranges_[p];
        if (next >= end) continue;
        any = true;
        const int64_t take = interleave_ ? 1 : end - next;
        for (int64_t i = 0; i < take; ++i, ++next) {
          chunk.Append(data_.records[p][static_cast<size_t>(next)],
                       RecordPosition{static_cast<uint32_t>(p), next});
        }
        if (!interleave_) break;
      }
      if (!any) return false;
    }
    return std::any_of(ranges_.begin(), ranges_.end(),
                       [](const auto& range) { return range.first < range.second; });
  }

 private:
  const Partitions& data_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  bool interleave_;
};

class PartitionedSource final : public Source {
 public:
  PartitionedSource(const Partitions& data, int64_t max_per_batch, bool interleave, double share)
      : data_(data), max_per_batch_(max_per_batch), interleave_(interleave), share_(share) {}
  Status Start(const SourceOffsets&) override { return Ok(); }
  Result<SourceOffsets> InitialOffsets() override {
    SourceOffsets offsets;
    for (size_t p = 0; p < data_.records.size(); ++p) offsets[data_.Key(p)] = 0;
    return offsets;
  }
  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override {
    SourceOffsets end = start;
    for (size_t p = 0; p < data_.records.size(); ++p) {
      const int64_t size = static_cast<int64_t>(
          static_cast<double>(data_.records[p].size()) * share_);
      const int64_t at = start.count(data_.Key(p)) ? start.at(data_.Key(p)) : 0;
      end[data_.Key(p)] = std::min(size, at + max_per_batch_);
    }
    return end;
  }
  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (size_t p = 0; p < data_.records.size(); ++p) {
      ranges.emplace_back(start.count(data_.Key(p)) ? start.at(data_.Key(p)) : 0,
                          end.at(data_.Key(p)));
    }
    return std::unique_ptr<SourceReader>(std::make_unique<PartitionReader>(data_, ranges, interleave_));
  }
  bool HasIndependentPartitions() const override { return true; }
  std::string PartitionKeyOf(uint32_t index) const override { return data_.Key(index); }
  std::string DescribePosition(const RecordPosition& position) const override {
    return fmt::format("{} partition {} offset {}", data_.name, position.partition,
                       position.offset);
  }
  std::string Describe() const override { return data_.name; }

 private:
  const Partitions& data_;
  int64_t max_per_batch_;
  bool interleave_;
  double share_;
};

}  // namespace driftd::testing
