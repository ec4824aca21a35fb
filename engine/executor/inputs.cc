#include "engine/executor/inputs.h"

#include <map>

#include <fmt/format.h>

namespace driftd {

// Reads each input's range in turn; a chunk never holds records of two inputs.
class QueryInputs::Reader final : public SourceReader {
 public:
  Reader(QueryInputs& inputs, std::vector<std::pair<size_t, std::unique_ptr<SourceReader>>> parts)
      : inputs_(inputs), parts_(std::move(parts)) {}

  Result<bool> Next(InputChunk& chunk, size_t max_bytes) override {
    while (current_ < parts_.size()) {
      auto& [input, reader] = parts_[current_];
      const size_t first = chunk.size();
      auto more = reader->Next(chunk, max_bytes);
      if (!more) return more;
      chunk.MapPartitions(first, [&, in = input](uint32_t local) {
        return inputs_.GlobalIndex(in, local);
      });
      if (!*more) {
        lost_ += reader->lost_records();
        ++current_;
      }
      if (current_ >= parts_.size()) return false;
      if (!chunk.empty()) return true;  // the next input starts a chunk of its own
    }
    return false;
  }

  int64_t lost_records() const override {
    int64_t lost = lost_;
    if (current_ < parts_.size()) lost += parts_[current_].second->lost_records();
    return lost;
  }

 private:
  QueryInputs& inputs_;
  std::vector<std::pair<size_t, std::unique_ptr<SourceReader>>> parts_;
  size_t current_ = 0;
  int64_t lost_ = 0;
};

// A scaled-out query's group with several inputs. The first input's source is the group's
// member (its assignment, the tasks, their changelog); every later input's source shares it
// (Source::ShareGroupOf) and answers for its own partitions. Source partitions are named by
// the query's offsets keys ("<name>/topic-0" for a later input's), task inputs as the first
// input's source names them.
class QueryInputs::Group final : public GroupMember {
 public:
  explicit Group(QueryInputs& inputs) : inputs_(inputs) {}

  Result<GroupAssignment> PollAssignment() override {
    auto assignment = first().PollAssignment();
    if (!assignment) return assignment;
    for (std::string& key : assignment->source) {
      auto owner = OwnerOf(key);
      if (!owner) return tl::unexpected(owner.error());
      key = inputs_.Prefix(*owner) + key;
    }
    return assignment;
  }

  uint32_t task_count() const override { return first().task_count(); }

  std::vector<std::string> SourcePartitions() override {
    std::vector<std::string> all;
    for (size_t input = 0; input < inputs_.size(); ++input) {
      const std::string prefix = inputs_.Prefix(input);
      for (const std::string& key : member(input).SourcePartitions()) {
        owners_[key] = input;
        all.push_back(prefix + key);
      }
    }
    return all;
  }

  std::string TaskInputKey(uint32_t task) const override { return first().TaskInputKey(task); }
  std::optional<uint32_t> TaskOfInputKey(std::string_view key) const override {
    return first().TaskOfInputKey(key);
  }

  Result<std::map<std::string, GroupPosition>> Committed(
      const std::vector<std::string>& keys) override {
    // Each input's keys from its own source (which knows its partitions' starting offsets).
    std::vector<std::vector<std::string>> of(inputs_.size());
    for (const std::string& key : keys) {
      auto [input, rest] = inputs_.Split(key);
      of[input].emplace_back(rest);
    }
    std::map<std::string, GroupPosition> all;
    for (size_t input = 0; input < inputs_.size(); ++input) {
      if (of[input].empty()) continue;
      auto positions = member(input).Committed(of[input]);
      if (!positions) return positions;
      const std::string prefix = inputs_.Prefix(input);
      for (auto& [key, position] : *positions) all[prefix + key] = std::move(position);
    }
    return all;
  }

  Result<int64_t> ReadChangelog(
      uint32_t task, int64_t from,
      const std::function<void(std::string_view, std::optional<std::string_view>)>& visit)
      override {
    return first().ReadChangelog(task, from, visit);
  }

  std::map<uint32_t, int64_t> LastChangelogEnds() override { return first().LastChangelogEnds(); }
  int64_t changelog_deletions_kept_ms() const override {
    return first().changelog_deletions_kept_ms();
  }

 private:
  GroupMember& member(size_t input) const { return *inputs_.inputs_[input].source->group(); }
  GroupMember& first() const { return member(0); }

  // The input whose source partition `key` (as the group names it) is.
  Result<size_t> OwnerOf(const std::string& key) {
    auto known = owners_.find(key);
    if (known == owners_.end()) {
      SourcePartitions();  // a partition new since the last look
      known = owners_.find(key);
    }
    if (known == owners_.end()) {
      return MakeError(ErrorCode::kExternal,
                       "the group assigned partition {}, which no input of the query reads", key);
    }
    return known->second;
  }

  QueryInputs& inputs_;
  std::map<std::string, size_t> owners_;
};

QueryInputs::QueryInputs(std::vector<Input> inputs)
    : inputs_(std::move(inputs)), globals_(inputs_.size()) {}

QueryInputs::~QueryInputs() = default;

std::string QueryInputs::Prefix(size_t input) const {
  return input == 0 ? std::string() : inputs_[input].name + "/";
}

std::pair<size_t, std::string_view> QueryInputs::Split(std::string_view key) const {
  for (size_t input = 1; input < inputs_.size(); ++input) {
    const std::string& name = inputs_[input].name;
    if (key.size() > name.size() && key[name.size()] == '/' && key.starts_with(name)) {
      return {input, key.substr(name.size() + 1)};
    }
  }
  return {0, key};
}

SourceOffsets QueryInputs::OffsetsOf(size_t input, const SourceOffsets& all) const {
  SourceOffsets mine;
  for (const auto& [key, offset] : all) {
    auto [owner, rest] = Split(key);
    if (owner == input) mine.emplace(std::string(rest), offset);
  }
  return mine;
}

void QueryInputs::AddOffsets(size_t input, const SourceOffsets& offsets, SourceOffsets& all) const {
  const std::string prefix = Prefix(input);
  for (const auto& [key, offset] : offsets) all[prefix + key] = offset;
}

uint32_t QueryInputs::GlobalIndex(size_t input, uint32_t local) {
  std::vector<uint32_t>& known = globals_[input];
  if (local >= known.size()) known.resize(local + 1, UINT32_MAX);
  if (known[local] == UINT32_MAX) {
    known[local] = static_cast<uint32_t>(locals_.size());
    locals_.emplace_back(input, local);
  }
  return known[local];
}

std::pair<size_t, uint32_t> QueryInputs::LocalIndex(uint32_t global) const {
  // One input: indexes are the source's own (GlobalIndex is the identity then only for
  // indexes seen in order, so it is not used).
  if (inputs_.size() == 1) return {0, global};
  return global < locals_.size() ? locals_[global] : std::pair<size_t, uint32_t>{0, global};
}

size_t QueryInputs::InputOf(uint32_t partition_index) const {
  return LocalIndex(partition_index).first;
}

Status QueryInputs::Start(const SourceOffsets& committed) {
  for (size_t input = 0; input < inputs_.size(); ++input) {
    DRIFTD_TRY(inputs_[input].source->Start(OffsetsOf(input, committed)).map_error(
        [&](const Error& e) { return e.Wrap(fmt::format("input '{}'", inputs_[input].name)); }));
  }
  return Ok();
}

Result<SourceOffsets> QueryInputs::InitialOffsets() {
  SourceOffsets all;
  for (size_t input = 0; input < inputs_.size(); ++input) {
    auto offsets = inputs_[input].source->InitialOffsets();
    if (!offsets) return tl::unexpected(offsets.error());
    AddOffsets(input, *offsets, all);
  }
  return all;
}

Result<SourceOffsets> QueryInputs::PlanBatch(const SourceOffsets& start) {
  SourceOffsets all;
  for (size_t input = 0; input < inputs_.size(); ++input) {
    auto end = inputs_[input].source->PlanBatch(OffsetsOf(input, start));
    if (!end) return tl::unexpected(end.error());
    AddOffsets(input, *end, all);
  }
  return all;
}

Status QueryInputs::FreezeAvailable() {
  for (Input& input : inputs_) DRIFTD_TRY(input.source->FreezeAvailable());
  return Ok();
}

Result<std::unique_ptr<SourceReader>> QueryInputs::Read(const SourceOffsets& start,
                                                        const SourceOffsets& end) {
  if (inputs_.size() == 1) return inputs_[0].source->Read(start, end);
  std::vector<std::pair<size_t, std::unique_ptr<SourceReader>>> parts;
  for (size_t input = 0; input < inputs_.size(); ++input) {
    SourceOffsets from = OffsetsOf(input, start);
    SourceOffsets to = OffsetsOf(input, end);
    if (from == to) continue;
    auto reader = inputs_[input].source->Read(from, to);
    if (!reader) return tl::unexpected(reader.error());
    parts.emplace_back(input, std::move(*reader));
  }
  return std::unique_ptr<SourceReader>(std::make_unique<Reader>(*this, std::move(parts)));
}

void QueryInputs::OnCheckpointed(const SourceOffsets& end) {
  for (size_t input = 0; input < inputs_.size(); ++input) {
    inputs_[input].source->OnCheckpointed(OffsetsOf(input, end));
  }
}

Status QueryInputs::OnCommitted(const SourceOffsets& end) {
  Status status = Ok();
  for (size_t input = 0; input < inputs_.size(); ++input) {
    Status committed = inputs_[input].source->OnCommitted(OffsetsOf(input, end));
    if (!committed && status) status = committed;
  }
  return status;
}

std::vector<PartitionLag> QueryInputs::Lag(const SourceOffsets& position) {
  std::vector<PartitionLag> all;
  for (size_t input = 0; input < inputs_.size(); ++input) {
    for (PartitionLag lag : inputs_[input].source->Lag(OffsetsOf(input, position))) {
      lag.partition = Prefix(input) + lag.partition;
      all.push_back(std::move(lag));
    }
  }
  return all;
}

std::string QueryInputs::PartitionKeyOf(uint32_t partition_index) const {
  auto [input, local] = LocalIndex(partition_index);
  return Prefix(input) + inputs_[input].source->PartitionKeyOf(local);
}

std::string QueryInputs::ClockPartitionOf(uint32_t partition_index) const {
  auto [input, local] = LocalIndex(partition_index);
  const std::string own = inputs_[input].source->ClockPartitionOf(local);
  // An input that is one stream is one clock partition, named by the input.
  if (input == 0) return own;
  return own.empty() ? inputs_[input].name : Prefix(input) + own;
}

std::string QueryInputs::ClockPartitionOfKey(std::string_view key) const {
  auto [input, rest] = Split(key);
  const std::string own = inputs_[input].source->ClockPartitionOfKey(rest);
  if (input == 0) return own;
  return own.empty() ? inputs_[input].name : Prefix(input) + own;
}

std::optional<TopicPartition> QueryInputs::TopicPartitionOf(uint32_t partition_index) const {
  auto [input, local] = LocalIndex(partition_index);
  return inputs_[input].source->TopicPartitionOf(local);
}

std::string QueryInputs::DescribePosition(const RecordPosition& position) const {
  auto [input, local] = LocalIndex(position.partition);
  RecordPosition own = position;
  own.partition = local;
  const std::string text = inputs_[input].source->DescribePosition(own);
  return inputs_.size() == 1 ? text : fmt::format("input '{}' {}", inputs_[input].name, text);
}

std::string QueryInputs::Describe() const {
  std::string text;
  for (const Input& input : inputs_) {
    if (!text.empty()) text += " + ";
    text += input.source->Describe();
  }
  return text;
}

std::vector<SourceSummary> QueryInputs::Summaries() const {
  std::vector<SourceSummary> summaries;
  for (size_t input = 0; input < inputs_.size(); ++input) {
    summaries.push_back({inputs_[input].name, Prefix(input), inputs_[input].source->Describe()});
  }
  return summaries;
}

GroupMember* QueryInputs::group() {
  if (inputs_.size() == 1) return inputs_[0].source->group();
  for (const Input& input : inputs_) {
    if (input.source->group() == nullptr) return nullptr;
  }
  if (!group_) group_ = std::make_unique<Group>(*this);
  return group_.get();
}

bool QueryInputs::IsReplayable() const {
  for (const Input& input : inputs_) {
    if (!input.source->IsReplayable()) return false;
  }
  return true;
}

bool QueryInputs::IsReady() const {
  for (const Input& input : inputs_) {
    if (!input.source->IsReady()) return false;
  }
  return true;
}

bool QueryInputs::PlannedBlind() const {
  for (const Input& input : inputs_) {
    if (input.source->PlannedBlind()) return true;
  }
  return false;
}

}  // namespace driftd
