// The `webhook` sink: HTTP(S) delivery of a stream's rows (typically alerts) to a receiver
// such as an incident tool or a chat bridge, one request per row with an Idempotency-Key.
//
// Delivery is at-least-once on the wire and exactly-once for a receiver that de-duplicates by
// the Idempotency-Key header: an HTTP server cannot be asked whether batch N arrived, so the
// sink keeps a small local delivery log (the last fully delivered batch id, written with temp
// file + fsync + rename) and, after a crash in the middle of a batch, re-sends the whole batch
// with the same keys. Keys are the row's `alert_id` (stable across restarts: the drift engine
// derives it deterministically) or, for rows without one, "<pipeline>-<batch>-<row>".
//
// With `template: alertmanager` the sink also speaks Alertmanager's protocol: a thread of its
// own re-sends the firing alerts (connectors/alertmanager_alerts.h) every
// alertmanagerResendInterval with a short endsAt, outside the batches and their delivery log,
// so re-sends are never rows of the alerts stream; the firing set is saved beside the delivery
// log, so a restart resumes the re-sends where they were.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/result.h"

namespace driftd {

/// The Idempotency-Key of row `row` of batch `batch_id`: its top-level string field
/// `alert_id` if it has one, else "<pipeline>-<batch>-<row>".
std::string WebhookIdempotencyKey(std::string_view pipeline, int64_t batch_id, size_t row,
                                  std::string_view row_json);

/// The last batch id recorded in a webhook delivery log, or nullopt when the log does not
/// exist yet (nothing delivered). A log that exists but cannot be parsed is kCorruption.
Result<std::optional<int64_t>> ReadWebhookDeliveryLog(const std::string& path);

/// Default delivery log of sink `sink_name` in pipeline checkpoint `checkpoint_location`:
/// "<checkpoint>/sinks/webhook-<sink>.delivered".
std::string DefaultWebhookDeliveryLog(std::string_view checkpoint_location,
                                      std::string_view sink_name);

}  // namespace driftd
