#include "engine/executor/output_limits.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/log.h"

namespace driftd {

namespace {

// The longest prefix of `text` of at most `size` bytes that does not cut a UTF-8 character.
size_t Utf8Prefix(std::string_view text, size_t size) {
  if (size >= text.size()) return text.size();
  while (size > 0 && (static_cast<unsigned char>(text[size]) & 0xC0) == 0x80) --size;
  return size;
}

}  // namespace

std::string BoundedDeadLetterJson(DeadLetter dead, std::string_view position, size_t max_bytes) {
  std::string row = DeadLetterToJson(dead, position);
  // Each pass removes at least the excess: an escaped or base64 byte takes at least one byte
  // of the row. Only a row whose other fields alone are too long needs more than two.
  for (int pass = 0; row.size() > max_bytes && pass < 8; ++pass) {
    const size_t excess = row.size() - max_bytes;
    const size_t cut = dead.raw.size() > excess + 16 ? dead.raw.size() - excess - 16 : 0;
    dead.raw.resize(Utf8Prefix(dead.raw, cut));
    dead.truncated = true;
    row = DeadLetterToJson(dead, position);
  }
  return row;
}

OutputLimits::OutputLimits(std::vector<RowLimit> limits, bool dead_letter_sink)
    : limits_(std::move(limits)), dead_letter_sink_(dead_letter_sink) {
  for (const RowLimit& limit : limits_) {
    if (limit.stream == StreamKind::kDeadLetter) {
      dead_letter_limit_ = std::min(dead_letter_limit_, limit.max_bytes);
    }
  }
}

void OutputLimits::AddDeadLetters(const std::vector<DeadLetter>& dead_letters,
                                  const DescribePosition& describe, OutputRows& out) const {
  for (const DeadLetter& dead : dead_letters) {
    const std::string position = describe(dead.position);
    if (dead_letter_limit_ == SIZE_MAX) {
      out.Add("", DeadLetterToJson(dead, position));
    } else {
      out.Add("", BoundedDeadLetterJson(dead, position, dead_letter_limit_));
    }
  }
}

int64_t OutputLimits::SetAsideOversized(BatchOutput& output) const {
  int64_t set_aside = 0;
  // (stream, mode) pairs once each: a stream read by two sinks is measured once, against the
  // smaller limit, and named by the sink that has it.
  std::vector<const RowLimit*> tightest;
  for (const RowLimit& limit : limits_) {
    if (limit.stream == StreamKind::kDeadLetter) continue;  // cut to fit when made
    auto same = std::find_if(tightest.begin(), tightest.end(), [&](const RowLimit* other) {
      return other->stream == limit.stream &&
             (limit.stream != StreamKind::kStats || other->mode == limit.mode);
    });
    if (same == tightest.end()) {
      tightest.push_back(&limit);
    } else if (limit.max_bytes < (*same)->max_bytes) {
      *same = &limit;
    }
  }
  for (const RowLimit* limit : tightest) {
    const OutputRows& rows = output.For(limit->stream, limit->mode);
    for (size_t i = 0; i < rows.rows.size(); ++i) {
      if (!OverRowLimit(rows, i, limit->max_bytes)) continue;
      const size_t size = rows.rows[i].size() + (i < rows.keys.size() ? rows.keys[i].size() : 0);
      DeadLetter dead;
      dead.raw = rows.rows[i];
      dead.reason = MalformedReason::kTooLarge;
      dead.detail = fmt::format(
          "an output row of {} bytes (with its key) is over what sink '{}' takes, {} bytes "
          "({}); the sinks it fits still get it",
          size, limit->sink, limit->max_bytes, limit->why);
      const std::string position = fmt::format(
          "batch {} {} stream{} row {}", output.batch_id, ToString(limit->stream),
          limit->stream == StreamKind::kStats ? fmt::format(" ({})", ToString(limit->mode)) : "",
          i);
      if (set_aside == 0) {
        GetLogger("engine")->warn(
            "{}: {}; {}", position, dead.detail,
            dead_letter_sink_ ? "it goes to the dead-letter stream, cut to fit"
                              : "no sink takes the dead_letter stream, so it is only counted "
                                "(rowsOverSinkLimit)");
      }
      if (dead_letter_sink_) {
        output.dead_letters.Add("", BoundedDeadLetterJson(std::move(dead), position,
                                                          dead_letter_limit_));
      }
      ++set_aside;
    }
  }
  return set_aside;
}

}  // namespace driftd
