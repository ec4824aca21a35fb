// An embedded stand-in for a Kafka cluster, so that `driftd demo` runs Kafka in -> drift ->
// Kafka out with no broker to install: librdkafka's in-process mock cluster, plus the two small
// clients the demo runs beside its pipeline (a producer thread feeding records at a steady rate
// and a reader thread tailing a topic).
//
// For demos only. The mock (librdkafka 2.0.2) acknowledges transactional offset commits without
// storing them, shows aborted transactions to read_committed readers, does not fence a second
// producer with the same transactional.id, keeps only the newest ~5 MiB of each partition and
// has no CreateTopics API (create topics with EmbeddedKafkaCluster::CreateTopic). Exactly-once
// is proven against a real broker (tests/kafka).
//
// Thread-safety: each object is created, stopped and destroyed by one thread; TopicFeeder and
// TopicTail run their own thread, which is the only one that calls their callbacks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "engine/result.h"

namespace driftd {

/// A mock Kafka cluster listening on 127.0.0.1 (ephemeral ports), alive as long as the object.
class EmbeddedKafkaCluster {
 public:
  /// Starts `brokers` mock brokers. Fails (kExternal) if librdkafka cannot create them.
  static Result<std::unique_ptr<EmbeddedKafkaCluster>> Start(int brokers = 1);

  /// Stops the brokers. Clients still connected see the cluster go down, so stop them first.
  ~EmbeddedKafkaCluster();
  EmbeddedKafkaCluster(const EmbeddedKafkaCluster&) = delete;
  EmbeddedKafkaCluster& operator=(const EmbeddedKafkaCluster&) = delete;

  /// "127.0.0.1:PORT[,...]", for kafka.bootstrap.servers.
  const std::string& bootstrap_servers() const { return bootstrap_servers_; }

  /// Creates `topic` with `partitions` partitions (replication factor 1). Fails (kExternal) if
  /// the topic exists or the arguments are out of range.
  Status CreateTopic(const std::string& topic, int partitions);

 private:
  struct Handles;
  explicit EmbeddedKafkaCluster(std::unique_ptr<Handles> handles);

  std::unique_ptr<Handles> handles_;
  std::string bootstrap_servers_;
};

/// One record to produce: make_record fills in its key and value (both cleared before).
using MakeRecordFn = std::function<void(uint64_t n, std::string& key, std::string& value)>;

struct TopicFeederOptions {
  /// Brokers to connect to, host:port,... Required.
  std::string bootstrap_servers;
  /// Topic to write to; it must exist. Required.
  std::string topic;
  /// Records per second, paced on the monotonic clock from Start (a late thread catches up,
  /// so record n is produced about n / records_per_second seconds after Start). Default: 1000.
  int64_t records_per_second = 1000;
  /// Builds record n, for n = 0, 1, 2, ... Required.
  MakeRecordFn make_record;
};

/// A producer thread writing make_record(0), make_record(1), ... to a topic at a steady rate
/// until stopped. Records are keyed, so the producer's partitioner keeps a key on one partition.
class TopicFeeder {
 public:
  static Result<std::unique_ptr<TopicFeeder>> Start(TopicFeederOptions options);
  ~TopicFeeder();  // Stop()
  TopicFeeder(const TopicFeeder&) = delete;
  TopicFeeder& operator=(const TopicFeeder&) = delete;

  /// Stops the thread, waiting up to a second for records in flight. Idempotent.
  void Stop();

  /// Records the cluster acknowledged so far.
  uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }
  /// Records the cluster refused or that timed out so far (each is logged once).
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  struct Client;
  TopicFeeder(TopicFeederOptions options, std::unique_ptr<Client> client);
  void Run();

  TopicFeederOptions options_;
  std::unique_ptr<Client> client_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t> failed_{0};
  std::thread thread_;
};

/// One record read by a TopicTail. The views are valid only during the callback.
struct TailRecord {
  std::string_view topic;
  int32_t partition = 0;
  int64_t offset = 0;
  std::string_view key;
  std::string_view value;
};

struct TopicTailOptions {
  /// Brokers to connect to, host:port,... Required.
  std::string bootstrap_servers;
  /// Topic to read from its first offset, every partition; it must exist. Required.
  std::string topic;
  /// Called for each record (read_committed), in offset order within a partition. Required.
  std::function<void(const TailRecord&)> on_record;
};

/// A consumer thread reading a whole topic from its beginning and passing each record to a
/// callback until stopped. It joins no consumer group (it assigns the partitions itself).
class TopicTail {
 public:
  static Result<std::unique_ptr<TopicTail>> Start(TopicTailOptions options);
  ~TopicTail();  // Stop()
  TopicTail(const TopicTail&) = delete;
  TopicTail& operator=(const TopicTail&) = delete;

  /// Stops the thread. Idempotent.
  void Stop();

  /// Records passed to on_record so far.
  uint64_t records() const { return records_.load(std::memory_order_relaxed); }

 private:
  struct Client;
  TopicTail(TopicTailOptions options, std::unique_ptr<Client> client);
  void Run();

  TopicTailOptions options_;
  std::unique_ptr<Client> client_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> records_{0};
  std::thread thread_;
};

}  // namespace driftd
