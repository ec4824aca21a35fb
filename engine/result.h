// Error and Result types shared by every driftd module. Fallible code returns a Result instead of
// throwing across module boundaries.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>
#include <tl/expected.hpp>

namespace driftd {

/// What kind of failure an Error reports; the CLI maps these to exit codes.
enum class ErrorCode {
  kInvalidArgument,  // a caller passed something malformed
  kConfig,           // the pipeline file or an option is wrong
  kIo,               // a file, socket or disk operation failed
  kCorruption,       // persisted data cannot be read back
  kIncompatible,     // a checkpoint cannot serve this pipeline
  kMalformedRecord,  // a record broke the `fail` policy
  kDataLoss,         // source offsets vanished and failOnDataLoss is set
  kExternal,         // a broker or remote service refused or failed
  kUnrecoverable,    // a broker or receiver said this instance must not go on (a fenced Kafka
                     // producer, a webhook's 4xx): retrying cannot help, the query stops
  kCancelled,        // shutdown was requested
  kAborted,          // a scaled-out batch's transaction was aborted (the group rebalanced, say):
                     // the batch is computed again from the committed offsets
  kInternal,         // a bug
};

class [[nodiscard]] Error {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// Prefixes the message with context, e.g. Error.Wrap("opening checkpoint").
  Error Wrap(std::string_view context) const {
    return Error(code_, fmt::format("{}: {}", context, message_));
  }

 private:
  ErrorCode code_;
  std::string message_;
};

/// A value or the Error that stopped it. [[nodiscard]]: a result is looked at, returned, or
/// visibly ignored (IgnoreError). It is a tl::expected (value(), error(), operator bool,
/// map_error, ...), which converts to it.
template <typename T>
class [[nodiscard]] Result : public tl::expected<T, Error> {
 public:
  using Base = tl::expected<T, Error>;
  using Base::Base;
  Result(const Base& other) : Base(other) {}  // NOLINT: a tl::expected is a Result
  Result(Base&& other) : Base(std::move(other)) {}  // NOLINT
};

/// Result of an operation that yields nothing on success.
using Status = Result<void>;

inline tl::unexpected<Error> MakeError(ErrorCode code, std::string message) {
  return tl::unexpected<Error>(Error(code, std::move(message)));
}

template <typename... Args>
tl::unexpected<Error> MakeError(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  return tl::unexpected<Error>(Error(code, fmt::format(format, std::forward<Args>(args)...)));
}

inline Status Ok() { return {}; }

/// Makes ignoring a Status visible at the call site: IgnoreError(sink.Flush());  // best effort
template <typename T>
inline void IgnoreError(const Result<T>&) {}

}  // namespace driftd

/// Returns early from the enclosing function with the error of a failed Result/Status.
#define DRIFTD_TRY(expr)                                         \
  do {                                                           \
    auto driftd_try_status_ = (expr);                            \
    if (!driftd_try_status_) {                                   \
      return ::tl::unexpected(std::move(driftd_try_status_).error()); \
    }                                                            \
  } while (false)
