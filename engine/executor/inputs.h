// A query's inputs as one Source. A query reads one or more named inputs (inference logs from
// two topics, or from a topic and a directory; labels that arrive later on their own topic),
// each with its own offsets, partitions and per-partition event-time clock. The executor sees
// them as one source whose offsets, clock partitions and lag carry the input's name: the first
// input's keys as they are (so a checkpoint of a one-input query reads on unchanged), every
// other input's prefixed with "<name>/". Each chunk a reader hands out holds the records of one
// input only, so that each is decoded with its input's schema and value format.
//
// A batch covers every input: its plan is each input's plan, its commit all their end offsets,
// in the checkpoint's one commit; the watermark is the minimum over every clock partition of
// every input that has data (engine/executor/event_clock.h).
//
// Lifecycle and threading: as Source (the executor's thread; the per-index lookups also under
// the executor's source mutex from other threads).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/source.h"

namespace driftd {

class QueryInputs final : public Source {
 public:
  struct Input {
    std::string name;
    std::unique_ptr<Source> source;
  };
  /// `inputs` non-empty; the first one's offsets are not prefixed.
  explicit QueryInputs(std::vector<Input> inputs);
  ~QueryInputs() override;

  size_t size() const { return inputs_.size(); }
  const std::string& name(size_t input) const { return inputs_[input].name; }
  Source& source(size_t input) { return *inputs_[input].source; }

  /// The input a record's partition index (RecordPosition::partition) belongs to.
  size_t InputOf(uint32_t partition_index) const;
  /// The prefix of the input's offsets keys ("" for the first, "<name>/" otherwise).
  std::string Prefix(size_t input) const;
  /// The input whose offsets key this is (its prefix), and the key without it.
  std::pair<size_t, std::string_view> Split(std::string_view key) const;

  Status Start(const SourceOffsets& committed) override;
  Result<SourceOffsets> InitialOffsets() override;
  Result<SourceOffsets> PlanBatch(const SourceOffsets& start) override;
  Status FreezeAvailable() override;
  Result<std::unique_ptr<SourceReader>> Read(const SourceOffsets& start,
                                             const SourceOffsets& end) override;
  void OnCheckpointed(const SourceOffsets& end) override;
  Status OnCommitted(const SourceOffsets& end) override;
  std::vector<PartitionLag> Lag(const SourceOffsets& position) override;
  bool HasIndependentPartitions() const override { return true; }
  std::string PartitionKeyOf(uint32_t partition_index) const override;
  std::string ClockPartitionOf(uint32_t partition_index) const override;
  std::string ClockPartitionOfKey(std::string_view key) const override;
  std::optional<TopicPartition> TopicPartitionOf(uint32_t partition_index) const override;
  std::string DescribePosition(const RecordPosition& position) const override;
  std::string Describe() const override;
  std::vector<SourceSummary> Summaries() const override;
  /// One input: its source's group. Several, scaled out (every one a member of the first's
  /// group, Source::ShareGroupOf): the group as the executor sees it, with every input's
  /// partitions under the input's keys.
  GroupMember* group() override;
  bool IsReplayable() const override;
  bool IsReady() const override;
  bool PlannedBlind() const override;

 private:
  class Reader;
  class Group;
  /// The global index of an input's partition index (given the first time it is asked for).
  uint32_t GlobalIndex(size_t input, uint32_t local);
  std::pair<size_t, uint32_t> LocalIndex(uint32_t global) const;
  /// The offsets of one input, without its prefix.
  SourceOffsets OffsetsOf(size_t input, const SourceOffsets& all) const;
  void AddOffsets(size_t input, const SourceOffsets& offsets, SourceOffsets& all) const;

  std::vector<Input> inputs_;
  /// Global partition index -> (input, the input's own index); and back, per input.
  std::vector<std::pair<size_t, uint32_t>> locals_;
  std::vector<std::vector<uint32_t>> globals_;
  std::unique_ptr<Group> group_;
};

}  // namespace driftd
