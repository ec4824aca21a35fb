// Value encoders: how a sink that writes each output row as one message (the Kafka sink) turns
// the row into the message's bytes. A value format (engine/value_decoder.h's ValueFormatDecl)
// that can be written has an encoder factory beside its decoder: `json` writes the row as it is,
// `avro` writes it as Avro binary of a writer schema. config/ checks a sink's `valueFormat` and
// `valueOptions` against the declarations and creates the encoder once at validate, so that a
// schema that does not cover the rows is refused with its line; the sink creates its own.
//
// Output rows travel as JSON objects (OutputRows) and are committed so to the checkpoint's
// outbox; an encoder runs at delivery, from the row, so the outbox format does not depend on
// the sinks' formats, and a batch delivered again after a crash is encoded again to the same
// bytes (encoders are deterministic).
//
// Thread-safety: an encoder is used by one thread at a time (the executor's, through its sink).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/result.h"
#include "engine/row_shape.h"

namespace driftd {

class ValueEncoder {
 public:
  virtual ~ValueEncoder() = default;

  /// Reaches what the encoder needs before its first row: registers the writer schema with a
  /// schema registry (once; a second call after success does nothing). kExternal when the
  /// service cannot be reached or refuses (the sink's Open fails and is tried again later).
  /// Default: nothing to do.
  virtual Status Open() { return Ok(); }

  /// Encodes `row`, one JSON object of the stream's shape, into `out` (replaced). The same row
  /// gives the same bytes. A row that does not fit the writer schema is kConfig, naming the
  /// column and the types (no value is guessed, nothing is written).
  virtual Status Encode(std::string_view row, std::string& out) = 0;

  /// The writer schema's text (Avro JSON), or empty for a format without one (json).
  virtual const std::string& schema_text() const = 0;
};

/// What an encoder is made for.
struct ValueEncoderContext {
  /// The rows the sink writes (StreamRowShape of its stream).
  RowShape rows;
  /// The subject a schema registry files the writer schema under unless the options name one:
  /// "<topic>-value", Confluent's TopicNameStrategy.
  std::string default_subject;
};

}  // namespace driftd
