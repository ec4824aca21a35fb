// One readable line per alert of the alerts stream (the rows of AlertEvent::ToJson, see
// engine/drift/README.md): what a person reads in a chat message, a page, Alertmanager's
// `summary` annotation and the demo's console. The JSON stays what sinks deliver; this is its
// caption.
//
// WARN and ALERT name the detector past its threshold and the window against the baseline.
// RESOLVED and OK say that the series is back and show the evidence of the closing window: the
// window against the baseline (its distance in the baseline's standard deviations) and the
// detector of the window that is nearest its warn threshold while below it. A cumulative
// detector (the cusum) or a look-back still remembers the change when the incident ends, so its
// reading is never the one shown as evidence.
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace driftd {

/// The line for the alert row `row_json`, e.g.
///   "ALERT model-2 feature_vector[3]: cusum 90.28 (threshold 88.58), window mean 2.05 over
///    999 values vs baseline mean 0.5795 (stddev 1.019)"
///   "RESOLVED model-2 feature_vector[3] is back: window mean 0.5801 over 1000 values vs
///    baseline mean 0.5795 (stddev 1.019), 0.0006 sd apart; ks 0.021 below its warn threshold
///    0.043 (the incident was raised by cusum)"
/// Numbers have 4 significant digits. A row that is not an alert's JSON gives a line saying so.
std::string AlertLine(std::string_view row_json);

}  // namespace driftd
