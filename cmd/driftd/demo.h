// `driftd demo`: the built-in demo pipeline (deploy/examples/demo.yaml, embedded at build time)
// and the Kafka it runs against, with no broker to install: an embedded stand-in cluster, a
// feeder writing generated inference logs (with a drift scenario) into the pipeline's input
// topic at a steady rate, and a reader printing the alerts the pipeline wrote, as read back from
// its alerts topic.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "engine/result.h"

namespace driftd {

/// The demo pipeline's YAML.
std::string_view DemoPipelineYaml();

/// The environment variable that the demo pipeline reads its bootstrap servers from.
inline constexpr const char* kDemoBrokersVariable = "DRIFTD_DEMO_BROKERS";

struct DemoOptions {
  /// Inference records per second written to the input topic. Default: 4000.
  int64_t records_per_second = 4000;
  /// Models (model-0 .. model-<n-1>), records being spread evenly over them. Default: 4.
  int models = 4;
  /// Length of each record's feature_vector. Default: 4.
  int features = 4;
  /// Seed of the generator's draws. Default: 7.
  uint64_t seed = 7;
  /// Drift scenarios in the generator's syntax (connectors/inference_generator.h), timed from
  /// the start of the demo. Default: model-2's feature 3 shifts by 2 sigma after 6 s.
  std::string drift = "model-2 feature 3 shifts by 2 sigma after 6 s";
  /// Partitions of the input topic (records are keyed by model). Default: 4.
  int input_partitions = 4;
  /// Where alerts read back from Kafka are printed (borrowed). Default: stdout.
  std::FILE* out = stdout;
};

/// The Kafka side of the demo, from Start until Stop. Created and stopped by one thread; its
/// feeder and reader run on threads of their own.
class DemoKafka {
 public:
  /// Starts the embedded cluster, sets DRIFTD_DEMO_BROKERS to its address (so call it before
  /// other threads read the environment), creates every topic `pipeline_yaml` reads or writes
  /// (its Kafka source's topics, and its Kafka sinks' topics and progress topic), then starts
  /// feeding the source's first topic and printing the records of the alerts sink's topic.
  static Result<std::unique_ptr<DemoKafka>> Start(std::string_view pipeline_yaml,
                                                  const DemoOptions& options);
  ~DemoKafka();  // Stop()
  DemoKafka(const DemoKafka&) = delete;
  DemoKafka& operator=(const DemoKafka&) = delete;

  /// Stops feeding and reading, logs what went through, and stops the cluster. Stop the
  /// pipeline first: its clients would see the cluster disappear. Idempotent.
  void Stop();

  /// The embedded cluster's bootstrap servers.
  const std::string& bootstrap_servers() const;

 private:
  struct Parts;
  explicit DemoKafka(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace driftd
