#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/alert_state.h"

namespace driftd {
namespace {

constexpr AlertLevel kOk = AlertLevel::kOk;
constexpr AlertLevel kWarn = AlertLevel::kWarn;
constexpr AlertLevel kAlert = AlertLevel::kAlert;
constexpr AlertLevel kResolved = AlertLevel::kResolved;

/// Feeds observations one per minute from `start_ms`; returns the transitions.
std::vector<AlertLevel> Feed(AlertStateMachine& m, const std::vector<AlertLevel>& observed,
                             int64_t& now_ms, const AlertPolicy& policy) {
  std::vector<AlertLevel> out;
  for (AlertLevel o : observed) {
    if (auto t = m.Step(o, false, now_ms, policy)) out.push_back(*t);
    now_ms += 60'000;
  }
  return out;
}

TEST_CASE("a single spike does not alert; a sustained one alerts once", "[drift][alert]") {
  AlertPolicy policy;  // hysteresis 2, cooldown 5 minutes
  AlertStateMachine m;
  int64_t now = 0;
  CHECK(Feed(m, {kAlert, kOk, kAlert, kOk}, now, policy).empty());
  CHECK(Feed(m, {kAlert, kAlert, kAlert, kAlert, kAlert}, now, policy) ==
        std::vector<AlertLevel>{kAlert});
  CHECK(m.state() == kAlert);
}

TEST_CASE("an alert resolves only after consecutive clean evaluations", "[drift][alert]") {
  AlertPolicy policy;
  AlertStateMachine m;
  int64_t now = 0;
  Feed(m, {kAlert, kAlert}, now, policy);
  REQUIRE(m.state() == kAlert);
  // WARN-level readings keep it open (no fall back to WARN), one clean reading is not enough.
  CHECK(Feed(m, {kWarn, kOk, kWarn}, now, policy).empty());
  CHECK(Feed(m, {kOk}, now, policy).empty());
  CHECK(Feed(m, {kOk}, now, policy) == std::vector<AlertLevel>{kResolved});
  CHECK(m.cooldown_until_ms() == now - 60'000 + policy.cooldown_ms);
}

TEST_CASE("no new alert within the cooldown after RESOLVED", "[drift][alert]") {
  AlertPolicy policy;
  policy.cooldown_ms = 10 * 60'000;
  AlertStateMachine m;
  int64_t now = 0;
  Feed(m, {kAlert, kAlert, kOk, kOk}, now, policy);
  REQUIRE(m.state() == kResolved);
  // Drifting again at once: only WARN while cooling down ...
  const auto during = Feed(m, {kAlert, kAlert, kAlert, kAlert, kAlert}, now, policy);
  CHECK(during == std::vector<AlertLevel>{kWarn});
  // ... and the ALERT comes once the cooldown (10 minutes after RESOLVED) has passed.
  const auto after = Feed(m, {kAlert, kAlert, kAlert, kAlert, kAlert, kAlert}, now, policy);
  CHECK(after == std::vector<AlertLevel>{kAlert});
}

TEST_CASE("warnings rise and clear with hysteresis", "[drift][alert]") {
  AlertPolicy policy;
  policy.hysteresis = 3;
  AlertStateMachine m;
  int64_t now = 0;
  CHECK(Feed(m, {kWarn, kWarn, kOk, kWarn, kWarn}, now, policy).empty());
  CHECK(Feed(m, {kWarn}, now, policy) == std::vector<AlertLevel>{kWarn});
  CHECK(Feed(m, {kOk, kOk, kWarn, kOk, kOk}, now, policy).empty());
  CHECK(Feed(m, {kOk}, now, policy) == std::vector<AlertLevel>{kOk});
  // WARN then ALERT: WARN readings count towards the warning, ALERT readings towards both.
  CHECK(Feed(m, {kWarn, kAlert, kAlert, kAlert}, now, policy) ==
        std::vector<AlertLevel>{kWarn, kAlert});
}

TEST_CASE("an immediate observation skips hysteresis", "[drift][alert]") {
  AlertPolicy policy;
  AlertStateMachine m;
  CHECK(m.Step(kAlert, true, 0, policy) == kAlert);
  CHECK(m.Step(kOk, true, 1, policy) == kResolved);
}

TEST_CASE("alert state round-trips through its encoding", "[drift][alert]") {
  AlertPolicy policy;
  AlertStateMachine m;
  int64_t now = 5;
  Feed(m, {kAlert, kAlert, kOk, kOk, kWarn}, now, policy);
  std::string bytes;
  m.Encode(bytes);
  CHECK(bytes.size() == AlertStateMachine::kEncodedSize);
  auto back = AlertStateMachine::Decode(bytes);
  REQUIRE(back);
  CHECK(*back == m);
  bytes[1] = 7;  // no such state
  CHECK_FALSE(AlertStateMachine::Decode(bytes));
  CHECK(ToString(kResolved) == "RESOLVED");
}

}  // namespace
}  // namespace driftd
