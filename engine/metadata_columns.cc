#include "engine/metadata_columns.h"

#include "engine/json_writer.h"
#include "engine/source.h"

namespace driftd {

const std::vector<MetadataColumnDef>& MetadataColumnDefs() {
  static const std::vector<MetadataColumnDef> defs = {
      {MetadataColumn::kKey, "key", FieldType::kString,
       "The record's key, its bytes as they are (Spark: binary); null for a record without one."},
      {MetadataColumn::kTopic, "topic", FieldType::kString, "The topic the record was read from."},
      {MetadataColumn::kPartition, "partition", FieldType::kInt, "The record's partition number."},
      {MetadataColumn::kOffset, "offset", FieldType::kLong, "The record's offset."},
      {MetadataColumn::kTimestamp, "timestamp", FieldType::kTimestamp,
       "The record's Kafka timestamp; null when it has none."},
      {MetadataColumn::kTimestampType, "timestampType", FieldType::kInt,
       "0: the timestamp is the producer's (CreateTime); 1: the broker's (LogAppendTime)."},
      {MetadataColumn::kHeaders, "headers", FieldType::kString,
       "The record's headers as JSON text, [{\"key\":\"k\",\"value\":\"v\"},...], in the "
       "record's order (duplicates kept, a header without a value has \"value\":null); [] for "
       "none."},
  };
  return defs;
}

const MetadataColumnDef& DefOf(MetadataColumn column) {
  return MetadataColumnDefs()[static_cast<size_t>(column)];
}

std::optional<MetadataColumn> ParseMetadataColumn(std::string_view name) {
  for (const MetadataColumnDef& def : MetadataColumnDefs()) {
    if (def.name == name) return def.column;
  }
  return std::nullopt;
}

std::string MetadataColumnList() {
  std::string list;
  for (const MetadataColumnDef& def : MetadataColumnDefs()) {
    if (!list.empty()) list += ", ";
    list += def.name;
  }
  return list;
}

Schema WithMetadataColumns(const Schema& schema, const std::vector<MetadataColumn>& metadata) {
  Schema columns = schema;
  for (MetadataColumn column : metadata) {
    const MetadataColumnDef& def = DefOf(column);
    columns.fields.push_back({std::string(def.name), def.type, true});
  }
  return columns;
}

const MetadataFiller::Partition& MetadataFiller::PartitionOf(
    const std::function<std::optional<TopicPartition>(uint32_t)>& topic_partition_of,
    uint32_t index) {
  if (index >= partitions_.size()) partitions_.resize(index + 1);
  Partition& partition = partitions_[index];
  if (!partition.known) {
    partition.known = true;
    if (auto named = topic_partition_of(index)) {
      partition.topic = std::move(named->topic);
      partition.number = named->partition;
    }
  }
  return partition;
}

void MetadataFiller::FillNulls(RecordBatch& batch) const {
  for (MetadataColumn which : metadata_) {
    Column& column = batch.columns.emplace_back();
    column.type = DefOf(which).type;
    column.Clear();
    column.valid.assign(batch.num_rows, 0);
    if (column.type == FieldType::kString) {
      column.str_offsets.assign(batch.num_rows + 1, 0);
    } else {
      column.i64.assign(batch.num_rows, 0);
    }
  }
}

void MetadataFiller::Fill(const InputChunk& chunk, const Source& source, RecordBatch& batch) {
  if (metadata_.empty()) return;
  Fill(
      chunk, [&source](uint32_t index) { return source.TopicPartitionOf(index); }, batch);
}

void MetadataFiller::Fill(
    const InputChunk& chunk,
    const std::function<std::optional<TopicPartition>(uint32_t)>& topic_partition_of,
    RecordBatch& batch) {
  if (metadata_.empty()) return;
  const size_t rows = batch.num_rows;
  // Rows follow the chunk's records in order, skipping the malformed ones: match positions.
  const auto& records = chunk.records();
  record_of_row_.resize(rows);
  size_t record = 0;
  for (size_t row = 0; row < rows; ++row) {
    const RecordPosition& at = batch.positions[row];
    while (record < records.size() && (records[record].position.partition != at.partition ||
                                       records[record].position.offset != at.offset)) {
      ++record;
    }
    record_of_row_[row] = record < records.size() ? record : SIZE_MAX;
    if (record < records.size()) ++record;
  }
  // Partition names are looked up once per chunk: a source's partition list may change between
  // batches (new partitions, a rebalance).
  partitions_.clear();

  for (MetadataColumn which : metadata_) {
    Column& column = batch.columns.emplace_back();
    column.type = DefOf(which).type;
    column.Clear();
    column.valid.assign(rows, 1);
    const bool strings = column.type == FieldType::kString;
    if (!strings) column.i64.assign(rows, 0);
    for (size_t row = 0; row < rows; ++row) {
      const size_t r = record_of_row_[row];
      const InputChunk::Record* rec = r == SIZE_MAX ? nullptr : &records[r];
      switch (which) {
        case MetadataColumn::kKey:
          if (rec && rec->has_key) {
            column.str_data.append(chunk.key(r));
          } else {
            column.valid[row] = 0;
          }
          break;
        case MetadataColumn::kTopic: {
          const Partition& partition = PartitionOf(topic_partition_of, batch.positions[row].partition);
          if (partition.number >= 0) {
            column.str_data.append(partition.topic);
          } else {
            column.valid[row] = 0;
          }
          break;
        }
        case MetadataColumn::kPartition: {
          const Partition& partition = PartitionOf(topic_partition_of, batch.positions[row].partition);
          if (partition.number >= 0) {
            column.i64[row] = partition.number;
          } else {
            column.valid[row] = 0;
          }
          break;
        }
        case MetadataColumn::kOffset:
          column.i64[row] = batch.positions[row].offset;
          break;
        case MetadataColumn::kTimestamp:
          if (rec && rec->source_timestamp_us != INT64_MIN) {
            column.i64[row] = rec->source_timestamp_us;
          } else {
            column.valid[row] = 0;
          }
          break;
        case MetadataColumn::kTimestampType:
          if (rec && rec->timestamp_type >= 0) {
            column.i64[row] = rec->timestamp_type;
          } else {
            column.valid[row] = 0;
          }
          break;
        case MetadataColumn::kHeaders: {
          if (!rec) {
            column.valid[row] = 0;
            break;
          }
          std::string& out = column.str_data;
          out.push_back('[');
          bool first = true;
          chunk.ForEachHeader(r, [&](std::string_view name, std::string_view value, bool null) {
            if (!first) out.push_back(',');
            first = false;
            out += "{\"key\":";
            AppendJsonString(out, name);
            out += ",\"value\":";
            if (null) {
              out += "null";
            } else {
              AppendJsonString(out, value);
            }
            out.push_back('}');
          });
          out.push_back(']');
          break;
        }
      }
      if (strings) column.str_offsets.push_back(static_cast<uint32_t>(column.str_data.size()));
    }
  }
}

}  // namespace driftd
