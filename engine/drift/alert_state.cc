#include "engine/drift/alert_state.h"

#include <algorithm>

#include "engine/drift/codec.h"

namespace driftd {

std::string_view ToString(AlertLevel level) {
  switch (level) {
    case AlertLevel::kOk:
      return "OK";
    case AlertLevel::kWarn:
      return "WARN";
    case AlertLevel::kAlert:
      return "ALERT";
    case AlertLevel::kResolved:
      return "RESOLVED";
  }
  return "UNKNOWN";
}

std::optional<AlertLevel> AlertStateMachine::Step(AlertLevel observed, bool immediate, bool back,
                                                  int64_t now_ms, const AlertPolicy& policy) {
  const int32_t h = std::max(1, policy.hysteresis);
  const bool warn_or_worse = observed == AlertLevel::kWarn || observed == AlertLevel::kAlert;
  const bool alert = observed == AlertLevel::kAlert;
  // Runs saturate at h: only "at least h" matters, and saturation keeps the encoding bounded.
  run_warn_ = warn_or_worse ? std::min(h, immediate ? h : run_warn_ + 1) : 0;
  run_alert_ = alert ? std::min(h, immediate ? h : run_alert_ + 1) : 0;
  run_clear_ = warn_or_worse ? 0 : std::min(h, immediate ? h : run_clear_ + 1);

  const bool cooling = cooldown_until_ms_ != INT64_MIN && now_ms < cooldown_until_ms_;
  const AlertLevel before = state_;
  switch (state_) {
    case AlertLevel::kOk:
    case AlertLevel::kResolved:
      if (run_alert_ >= h && !cooling) {
        state_ = AlertLevel::kAlert;
      } else if (run_warn_ >= h) {
        state_ = AlertLevel::kWarn;
      }
      break;
    case AlertLevel::kWarn:
      if (run_alert_ >= h && !cooling) {
        state_ = AlertLevel::kAlert;
      } else if (back) {
        state_ = AlertLevel::kOk;
      }
      break;
    case AlertLevel::kAlert:
      if (back) {
        state_ = AlertLevel::kResolved;
        cooldown_until_ms_ = now_ms + std::max<int64_t>(0, policy.cooldown_ms);
      }
      break;
  }
  if (state_ == before) return std::nullopt;
  return state_;
}

void AlertStateMachine::Encode(std::string& out) const {
  drift::ByteWriter w(out);
  w.U8(1);  // layout version
  w.U8(static_cast<uint8_t>(state_));
  w.U32(static_cast<uint32_t>(run_warn_));
  w.U32(static_cast<uint32_t>(run_alert_));
  w.U32(static_cast<uint32_t>(run_clear_));
  w.I64(cooldown_until_ms_);
}

Result<AlertStateMachine> AlertStateMachine::Decode(std::string_view bytes) {
  drift::ByteReader r(bytes);
  AlertStateMachine m;
  const uint8_t version = r.U8();
  const uint8_t state = r.U8();
  m.run_warn_ = static_cast<int32_t>(r.U32());
  m.run_alert_ = static_cast<int32_t>(r.U32());
  m.run_clear_ = static_cast<int32_t>(r.U32());
  m.cooldown_until_ms_ = r.I64();
  if (r.failed() || !r.at_end() || version != 1 || state > 3 || m.run_warn_ < 0 ||
      m.run_alert_ < 0 || m.run_clear_ < 0) {
    return MakeError(ErrorCode::kCorruption, "alert state: malformed ({} bytes)", bytes.size());
  }
  m.state_ = static_cast<AlertLevel>(state);
  return m;
}

}  // namespace driftd
