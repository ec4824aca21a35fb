#include <vector>

#include <catch2/catch.hpp>

#include "engine/drift/alert_state.h"

namespace driftd {
namespace {

constexpr AlertLevel kOk = AlertLevel::kOk;
constexpr AlertLevel kWarn = AlertLevel::kWarn;
constexpr AlertLevel kAlert = AlertLevel::kAlert;
constexpr AlertLevel kResolved = AlertLevel::kResolved;

/// Feeds observations one per minute from `now_ms`; `back` is the monitor's verdict that the
/// series has returned (the same for every observation of the call). Returns the transitions.
std::vector<AlertLevel> Feed(AlertStateMachine& m, const std::vector<AlertLevel>& observed,
                             int64_t& now_ms, const AlertPolicy& policy, bool back = false) {
  std::vector<AlertLevel> out;
  for (AlertLevel o : observed) {
    if (auto t = m.Step(o, false, back, now_ms, policy)) out.push_back(*t);
    now_ms += 60'000;
  }
  return out;
}

TEST_CASE("a single spike does not alert, a sustained one alerts once", "[drift][alert]") {
  AlertPolicy policy;  // hysteresis 2, cooldown 5 minutes
  AlertStateMachine m;
  int64_t now = 0;
  CHECK(Feed(m, {kAlert, kOk, kAlert, kOk}, now, policy).empty());
  CHECK(Feed(m, {kAlert, kAlert, kAlert, kAlert, kAlert}, now, policy) ==
        std::vector<AlertLevel>{kAlert});
  CHECK(m.state() == kAlert);
}

TEST_CASE("an alert resolves on evidence that the series is back, not on low readings",
          "[drift][alert]") {
  AlertPolicy policy;
  AlertStateMachine m;
  int64_t now = 0;
  Feed(m, {kAlert, kAlert}, now, policy);
  REQUIRE(m.state() == kAlert);
  // Readings below WARN, however many, do not resolve it while the evidence says the change is
  // still there (a persistent shift whose single windows dip under a level).
  CHECK(Feed(m, {kWarn, kOk, kOk, kOk, kOk, kOk}, now, policy).empty());
  CHECK(m.state() == kAlert);
  // ALERT never falls back to WARN either.
  CHECK(Feed(m, {kWarn, kWarn, kWarn}, now, policy).empty());
  // The evidence that it is back resolves it at once, and the cooldown starts.
  CHECK(Feed(m, {kOk}, now, policy, /*back=*/true) == std::vector<AlertLevel>{kResolved});
  CHECK(m.cooldown_until_ms() == now - 60'000 + policy.cooldown_ms);
}

TEST_CASE("no new alert within the cooldown after RESOLVED", "[drift][alert]") {
  AlertPolicy policy;
  policy.cooldown_ms = 10 * 60'000;
  AlertStateMachine m;
  int64_t now = 0;
  Feed(m, {kAlert, kAlert}, now, policy);
  Feed(m, {kOk}, now, policy, /*back=*/true);
  REQUIRE(m.state() == kResolved);
  // Drifting again at once: only WARN while cooling down ...
  const auto during = Feed(m, {kAlert, kAlert, kAlert, kAlert, kAlert}, now, policy);
  CHECK(during == std::vector<AlertLevel>{kWarn});
  // ... and the ALERT comes once the cooldown (10 minutes after RESOLVED) has passed.
  const auto after = Feed(m, {kAlert, kAlert, kAlert, kAlert, kAlert, kAlert}, now, policy);
  CHECK(after == std::vector<AlertLevel>{kAlert});
}

TEST_CASE("warnings rise with hysteresis and clear only when the series is back",
          "[drift][alert]") {
  AlertPolicy policy;
  policy.hysteresis = 3;
  AlertStateMachine m;
  int64_t now = 0;
  CHECK(Feed(m, {kWarn, kWarn, kOk, kWarn, kWarn}, now, policy).empty());
  CHECK(Feed(m, {kWarn}, now, policy) == std::vector<AlertLevel>{kWarn});
  CHECK(Feed(m, {kOk, kOk, kOk, kOk}, now, policy).empty());
  CHECK(Feed(m, {kOk}, now, policy, /*back=*/true) == std::vector<AlertLevel>{kOk});
  // WARN then ALERT: WARN readings count towards the warning, ALERT readings towards both.
  CHECK(Feed(m, {kWarn, kAlert, kAlert, kAlert}, now, policy) ==
        std::vector<AlertLevel>{kWarn, kAlert});
}

TEST_CASE("an immediate observation skips hysteresis", "[drift][alert]") {
  AlertPolicy policy;
  AlertStateMachine m;
  CHECK(m.Step(kAlert, true, false, 0, policy) == kAlert);
  CHECK(m.Step(kOk, true, true, 1, policy) == kResolved);
}

TEST_CASE("alert state round-trips through its encoding", "[drift][alert]") {
  AlertPolicy policy;
  AlertStateMachine m;
  int64_t now = 5;
  Feed(m, {kAlert, kAlert}, now, policy);
  Feed(m, {kOk}, now, policy, true);
  Feed(m, {kWarn}, now, policy);
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
