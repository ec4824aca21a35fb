#include "cmd/driftd/notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <fmt/format.h>

#ifdef DRIFTD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "engine/redact.h"

namespace driftd {

ServiceNotifier ServiceNotifier::FromEnvironment() {
  ServiceNotifier notifier;
  const char* socket = std::getenv("NOTIFY_SOCKET");
  notifier.enabled_ = socket != nullptr && socket[0] != '\0';
#ifdef DRIFTD_HAVE_SYSTEMD
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    notifier.watchdog_ = std::chrono::microseconds(usec);
  }
#else
  const char* usec = std::getenv("WATCHDOG_USEC");
  const char* pid = std::getenv("WATCHDOG_PID");
  bool for_us =
      pid == nullptr || std::strtoll(pid, nullptr, 10) == static_cast<long long>(getpid());
  if (usec != nullptr && for_us) {
    long long value = std::strtoll(usec, nullptr, 10);
    if (value > 0) notifier.watchdog_ = std::chrono::microseconds(value);
  }
#endif
  return notifier;
}

void ServiceNotifier::Ready() const { Send("READY=1"); }
void ServiceNotifier::Watchdog() const { Send("WATCHDOG=1"); }
void ServiceNotifier::Stopping() const { Send("STOPPING=1"); }
void ServiceNotifier::Reloading() const {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  // systemd 253+ wants the reload's monotonic time with RELOADING=1; older ones ignore it.
  Send(fmt::format("RELOADING=1\nMONOTONIC_USEC={}",
                   static_cast<int64_t>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000));
}
void ServiceNotifier::Status(std::string_view status) const {
  // systemctl status prints it: pipeline names and the like pass the secrets' redaction.
  Send(std::string("STATUS=") + Redact(status));
}

void ServiceNotifier::Send(std::string_view message) const {
  if (!enabled_) return;
  std::string text(message);
#ifdef DRIFTD_HAVE_SYSTEMD
  // Failures are not actionable: systemd notices a missing READY=1 or watchdog ping itself.
  (void)sd_notify(0, text.c_str());
#else
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  size_t length = std::strlen(path);
  if (length >= sizeof(address.sun_path)) return;
  std::memcpy(address.sun_path, path, length);
  if (address.sun_path[0] == '@') address.sun_path[0] = '\0';  // abstract namespace
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)sendto(fd, text.data(), text.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&address),
               static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length));
  close(fd);
#endif
}

}  // namespace driftd
