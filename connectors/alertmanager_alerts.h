// What the webhook sink's `alertmanager` template keeps firing in an Alertmanager, and the
// bodies of its /api/v2/alerts protocol. Alertmanager expects a client to re-send each active
// alert before its endsAt passes (Prometheus re-sends every minute with endsAt a few intervals
// ahead) and takes an alert whose endsAt has passed as resolved: so an alert of a daemon that
// died resolves by itself within the expiry, and one that driftd resolves ends at once.
//
// One alert per (pipeline, model, segment, series) and severity, as Prometheus has one per rule:
// `warning` fires while the series is at WARN or worse, `critical` while it is at ALERT, so an
// escalation adds the critical alert beside the warning (Alertmanager's usual inhibit rule,
// critical over warning with the same labels, shows one) and RESOLVED or OK ends both. A series'
// alerts carry the summary of the alert row that raised them (connectors/alert_text.h); the
// ones that end carry the row that ended them ("... is back: ...").
//
// The set is a function of the alert rows applied, in order; applying a batch's rows again (a
// re-delivery after a crash) changes nothing, so the set is saved with the id of the last batch
// applied and a re-delivered batch simply applies again. Re-sends are part of the receiver's
// protocol, not rows of the alerts stream: they carry nothing new and no batch.
//
// Thread-safety: none; the webhook sink guards it with its delivery mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "engine/result.h"

namespace driftd {

class AlertmanagerAlerts {
 public:
  struct Options {
    /// The `pipeline` label.
    std::string pipeline;
    /// Seconds from a send to the endsAt of each firing alert it carries (the expiry).
    int64_t ends_after_s = 0;
    /// generatorURL of every alert, or empty.
    std::string generator_url;
  };

  explicit AlertmanagerAlerts(Options options) : options_(std::move(options)) {}

  /// Applies one alert row (AlertEvent::ToJson) at wall-clock time `now_us` and returns the
  /// body to POST: a JSON array with the alerts it raises or keeps firing (endsAt `now` +
  /// ends_after_s) and those it ends (endsAt `now`). Empty for a row that is not an alert's.
  std::string Apply(std::string_view row_json, int64_t now_us);

  /// The re-send: every firing alert, each with endsAt `now_us` + ends_after_s; empty when none
  /// fires.
  std::string Resend(int64_t now_us) const;

  /// Alerts firing now.
  size_t size() const { return firing_.size(); }

  /// Whether the set changed since the last call (a batch that changed nothing need not be
  /// saved: applying it again after a crash gives the same set).
  bool TakeChanged() { return std::exchange(changed_, false); }

  /// The set, for a file: {"batch_id": N, "alerts": [{"labels": ..., "annotations": ...,
  /// "startsAt": ...}, ...]}, N the last batch applied.
  std::string Encode(int64_t batch_id) const;
  /// Replaces the set by an Encode'd one and returns its batch id; kCorruption for a text that
  /// is not one.
  Result<int64_t> Decode(std::string_view text);

 private:
  struct Firing {
    std::string series_key;   // the labels but severity, for ending a series' alerts together
    std::string labels;       // JSON object
    std::string annotations;  // JSON object
    int64_t starts_at_us = 0;
  };

  std::string AlertJson(const Firing& alert, int64_t ends_at_us, bool with_start) const;

  Options options_;
  std::map<std::string, Firing> firing_;  // by labels
  bool changed_ = false;
};

}  // namespace driftd
