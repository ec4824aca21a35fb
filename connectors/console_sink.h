// The `console` sink: Spark-like batch tables on stdout, for development and demos. Not
// exactly-once: output may miss a batch around a crash (recovery treats batches as printed),
// which never affects the data or the other sinks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/sink.h"

namespace driftd {

/// The console sink's options (numRows, truncate, significantDigits), as its bind makes them;
/// the defaults here are the ones its declaration states.
struct ConsoleFormatOptions {
  /// Rows shown per batch; more are summarized as "only showing top N rows". Default: 20.
  int64_t num_rows = 20;
  /// Cut cells longer than 20 characters to 17 + "..." and right-align them, as Spark's
  /// show(). false: full cells, left-aligned. Default: true.
  bool truncate = true;
  /// Significant digits of the doubles shown (a mean of 0.5533022522522524 as 0.5533 with 4);
  /// 0: every digit of the shortest exact form, as Spark prints them. Default: 0 (option
  /// significantDigits).
  int64_t significant_digits = 0;
};

/// The text printed for one batch:
///   -------------------------------------------
///   Batch: 3
///   -------------------------------------------
///   +--------+-----+
///   |model_id|count|
///   +--------+-----+
///   | model-1|   42|
///   +--------+-----+
///   <blank line>
/// Rows are JSON objects; `rows.columns` gives the column order (when empty, the keys of the
/// first row). Strings print raw, null as "null", arrays as [a, b], objects as {a, b}.
std::string FormatConsoleBatch(int64_t batch_id, const OutputRows& rows,
                               const ConsoleFormatOptions& options);

/// A console sink printing the rows of `spec`'s stream and output mode to `out` (borrowed,
/// must outlive the sink).
std::unique_ptr<Sink> NewConsoleSink(const SinkSpec& spec, const ConsoleFormatOptions& options,
                                     std::FILE* out);

}  // namespace driftd
