// The columns a source knows of each record beside its value, with the names of Spark's Kafka
// source: key, topic, partition, offset, timestamp, timestampType, headers. A query reads them
// like schema fields (in where, select, groupBy, aggregates, windows, the watermark and drift);
// only those it names are produced, after the decoded columns and before the derived ones
// (QuerySchema), by FillMetadataColumns, which reads the InputChunk and never the value: it
// works the same whatever the value's format.
//
// Thread-safety: pure functions; a MetadataFiller is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "engine/schema.h"

namespace driftd {

class Source;
struct TopicPartition;

enum class MetadataColumn : uint8_t {
  kKey,            // string: the record's key bytes as they are (Spark: binary); null without one
  kTopic,          // string
  kPartition,      // int: the Kafka partition number
  kOffset,         // long
  kTimestamp,      // timestamp: the record's Kafka timestamp; null when it has none
  kTimestampType,  // int: 0 CreateTime, 1 LogAppendTime (Kafka's TimestampType id)
  kHeaders,        // string: JSON [{"key":"k","value":"v"},...] (Spark: array<struct<key,value>>)
};

struct MetadataColumnDef {
  MetadataColumn column;
  std::string_view name;
  FieldType type;
  std::string_view doc;
};

/// Every metadata column, in the order they are appended to a batch.
const std::vector<MetadataColumnDef>& MetadataColumnDefs();
const MetadataColumnDef& DefOf(MetadataColumn column);
std::optional<MetadataColumn> ParseMetadataColumn(std::string_view name);
/// "key, topic, partition, offset, timestamp, timestampType, headers", for messages.
std::string MetadataColumnList();

/// The columns a query's stages and expressions see: the schema's fields, then `metadata`
/// (in the order given). Derived columns come after these.
Schema WithMetadataColumns(const Schema& schema, const std::vector<MetadataColumn>& metadata);

/// Appends one column per entry of `metadata` to `batch`, whose rows were decoded from `chunk`
/// (in the chunk's order, each row's position that of its record, as every decoder does;
/// records without a row were malformed). `source` names the partitions (topic, number).
class MetadataFiller {
 public:
  explicit MetadataFiller(std::vector<MetadataColumn> metadata) : metadata_(std::move(metadata)) {}

  bool empty() const { return metadata_.empty(); }
  void Fill(const InputChunk& chunk, const Source& source, RecordBatch& batch);
  /// As above, with `topic_partition_of` in place of Source::TopicPartitionOf (called at most
  /// once per partition index and chunk): for a thread that must not call the source itself.
  void Fill(const InputChunk& chunk,
            const std::function<std::optional<TopicPartition>(uint32_t)>& topic_partition_of,
            RecordBatch& batch);
  /// Appends the columns all null, for rows that come from no source record (reference
  /// records read from a file).
  void FillNulls(RecordBatch& batch) const;

 private:
  struct Partition {
    bool known = false;
    std::string topic;
    int32_t number = -1;
  };
  const Partition& PartitionOf(
      const std::function<std::optional<TopicPartition>(uint32_t)>& topic_partition_of,
      uint32_t index);

  std::vector<MetadataColumn> metadata_;
  std::vector<size_t> record_of_row_;
  std::vector<Partition> partitions_;
};

}  // namespace driftd
