#include "cmd/driftd/config_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace driftd {

Result<std::unique_ptr<ConfigWatch>> ConfigWatch::Create(const std::string& path, bool directory,
                                                         std::chrono::milliseconds quiet) {
  std::unique_ptr<ConfigWatch> watch(new ConfigWatch());
  watch->quiet_ = quiet;
  std::filesystem::path target(path);
  if (directory) {
    watch->watched_ = path;
  } else {
    watch->watched_ = target.has_parent_path() ? target.parent_path().string() : ".";
    watch->file_name_ = target.filename().string();
  }
  watch->fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watch->fd_ < 0) {
    return MakeError(ErrorCode::kIo, "--reload-on-change: inotify_init1: {}", std::strerror(errno));
  }
  // Writes finished, files created, removed or renamed in or out (ConfigMap updates are
  // renames of the "..data" symlink), and changes of mode or owner.
  const uint32_t mask = IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                        IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
  if (inotify_add_watch(watch->fd_, watch->watched_.c_str(), mask) < 0) {
    return MakeError(ErrorCode::kIo, "--reload-on-change: cannot watch {}: {}", watch->watched_,
                     std::strerror(errno));
  }
  return watch;
}

ConfigWatch::~ConfigWatch() {
  if (fd_ >= 0) ::close(fd_);
}

bool ConfigWatch::Poll() {
  alignas(inotify_event) char buffer[8192];
  const auto now = std::chrono::steady_clock::now();
  while (true) {
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      const std::string name = event->len > 0 ? std::string(event->name) : std::string();
      // File mode: the file itself, or a ConfigMap-style swap of what it points to.
      if (!file_name_.empty() && !name.empty() && name != file_name_ && name != "..data") continue;
      pending_ = true;
      last_event_ = now;
    }
  }
  if (pending_ && now - last_event_ >= quiet_) {
    pending_ = false;
    return true;
  }
  return false;
}

}  // namespace driftd
