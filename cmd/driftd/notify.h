// The systemd notification protocol for Type=notify services (sd_notify): READY=1 once the
// queries run, WATCHDOG=1 keep-alives, STATUS= lines, STOPPING=1 on shutdown. Without
// NOTIFY_SOCKET (not started by systemd) every call is a no-op.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace driftd {

class ServiceNotifier {
 public:
  /// Reads NOTIFY_SOCKET and WATCHDOG_USEC (and WATCHDOG_PID, when set, must be this process).
  static ServiceNotifier FromEnvironment();

  bool enabled() const { return enabled_; }
  /// The watchdog timeout systemd expects pings within, if it asked for them.
  std::optional<std::chrono::microseconds> watchdog_timeout() const { return watchdog_; }

  void Ready() const;
  void Watchdog() const;
  void Stopping() const;
  void Reloading() const;
  void Status(std::string_view status) const;

 private:
  void Send(std::string_view message) const;
  bool enabled_ = false;
  std::optional<std::chrono::microseconds> watchdog_;
};

}  // namespace driftd
