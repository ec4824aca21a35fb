// Rows no sink can take never block delivery. A batch's output is committed to the outbox before
// it is delivered, and delivered until it is: a row over what a sink accepts (a Kafka record
// over the topic's max.message.bytes, say) would fail that delivery on every attempt and every
// restart, and every row after it would wait behind it for good. So before the batch commits,
// each row is measured against the limits its sinks state (Sink::RowLimits): a row over one is
// counted, logged, and copied (cut to fit) to the dead-letter stream with the reason; the sinks
// whose limit it passes still get it, those whose limit it does not skip it. Dead letters are
// themselves cut to fit the dead-letter sinks, so that one huge malformed record costs one
// bounded dead-letter row.
//
// Thread-safety: immutable after construction; the executor's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sink.h"
#include "engine/value_decoder.h"

namespace driftd {

/// `dead`'s dead-letter row (DeadLetterToJson) at `position`, its raw bytes cut (truncated set)
/// so that the row is at most `max_bytes` long.
std::string BoundedDeadLetterJson(DeadLetter dead, std::string_view position, size_t max_bytes);

class OutputLimits {
 public:
  OutputLimits() = default;
  /// `dead_letter_sink`: some sink of the pipeline takes the dead_letter stream.
  OutputLimits(std::vector<RowLimit> limits, bool dead_letter_sink);

  /// The most a dead-letter row may take: the smallest limit of the dead-letter sinks, or
  /// SIZE_MAX.
  size_t dead_letter_limit() const { return dead_letter_limit_; }

  /// Appends the dead-letter rows of `dead_letters`, each cut to fit.
  void AddDeadLetters(const std::vector<DeadLetter>& dead_letters,
                      const DescribePosition& describe, OutputRows& out) const;

  /// Copies every row of `output` that is over a limit of a sink of its stream to the
  /// dead-letter stream (cut to fit; when a sink takes it) and logs the batch's first one;
  /// returns how many there were. The rows stay in their stream for the sinks they fit.
  int64_t SetAsideOversized(BatchOutput& output) const;

  bool empty() const { return limits_.empty(); }

 private:
  std::vector<RowLimit> limits_;
  bool dead_letter_sink_ = false;
  size_t dead_letter_limit_ = SIZE_MAX;
};

}  // namespace driftd
