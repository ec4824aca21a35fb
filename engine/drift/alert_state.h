// The alert state machine: OK -> WARN -> ALERT -> RESOLVED (-> OK), with hysteresis (a level
// must be observed on consecutive evaluations before the state follows), an exit only on evidence
// that the series is back (the caller's "back" signal, never because a reading dipped under a
// threshold), and a cooldown (no new ALERT for a while after RESOLVED). One drifting series
// therefore yields one incident for as long as the change lasts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/result.h"

namespace driftd {

enum class AlertLevel : uint8_t { kOk = 0, kWarn = 1, kAlert = 2, kResolved = 3 };

/// "OK", "WARN", "ALERT", "RESOLVED".
std::string_view ToString(AlertLevel level);

struct AlertPolicy {
  /// Consecutive evaluations at (or above) a level before the state rises to it. Default: 2.
  int hysteresis = 2;
  /// After RESOLVED, an ALERT observed within this many milliseconds is held back (the state may
  /// still show WARN); it is raised once the cooldown has passed. Default: 5 minutes.
  int64_t cooldown_ms = 5 * 60 * 1000;
};

/// One state machine, e.g. per (model, series). Transitions:
///   OK/RESOLVED --(ALERT seen `hysteresis` times, cooldown over)--> ALERT
///   OK/RESOLVED --(WARN or worse seen `hysteresis` times)--------> WARN
///   WARN -------(ALERT seen `hysteresis` times, cooldown over)---> ALERT
///   WARN -------(back)------------------------------------------> OK
///   ALERT ------(back)------------------------------------------> RESOLVED (cooldown starts)
/// `back` is the caller's verdict that the series has returned (engine/drift/README.md states the
/// monitor's rule: likelihood-ratio evidence per detector family). ALERT does not fall back to
/// WARN: a series in ALERT stays there until it is back.
/// RESOLVED is reported until the next transition and otherwise behaves as OK.
/// A value type; not thread-safe.
class AlertStateMachine {
 public:
  /// Bytes written by Encode().
  static constexpr size_t kEncodedSize = 1 + 1 + 4 * 3 + 8;

  /// Feeds one evaluation whose worst observed level is `observed` (kOk, kWarn or kAlert) at
  /// time `now_ms`. `immediate` skips hysteresis for this observation (a detector that already
  /// integrates evidence, such as the CUSUM, or a roll-up of already filtered states). `back`
  /// lets WARN clear and ALERT resolve. Returns the new state if it changed.
  std::optional<AlertLevel> Step(AlertLevel observed, bool immediate, bool back, int64_t now_ms,
                                 const AlertPolicy& policy);

  AlertLevel state() const { return state_; }
  /// End of the cooldown after the last RESOLVED (INT64_MIN if none).
  int64_t cooldown_until_ms() const { return cooldown_until_ms_; }

  void Encode(std::string& out) const;
  static Result<AlertStateMachine> Decode(std::string_view bytes);
  bool operator==(const AlertStateMachine&) const = default;

 private:
  AlertLevel state_ = AlertLevel::kOk;
  int32_t run_warn_ = 0;   // consecutive evaluations at WARN or above
  int32_t run_alert_ = 0;  // consecutive evaluations at ALERT
  int32_t run_clear_ = 0;  // consecutive evaluations below WARN (kept for the encoding)
  int64_t cooldown_until_ms_ = INT64_MIN;
};

}  // namespace driftd
