#include "connectors/dir_watch.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "engine/log.h"

namespace driftd {

namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What changes the listing: a file appearing (created, renamed in), growing or shrinking,
// going (deleted, renamed away), and the directory itself going.
constexpr uint32_t kEvents = IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE |
                             IN_MOVED_FROM | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF |
                             IN_ONLYDIR;

}  // namespace

DirectoryWatch::DirectoryWatch(std::string directory, int64_t relist_interval_ms)
    : directory_(std::move(directory)), relist_interval_ms_(relist_interval_ms) {}

DirectoryWatch::~DirectoryWatch() = default;

Result<std::vector<DirEntry>> DirectoryWatch::Files() {
  std::vector<std::string> changed;
  bool relist = !listed_ || !inotify_fd_.valid() ||
                SteadyMs() - last_listing_ms_ >= relist_interval_ms_;
  if (!relist) {
    auto drained = DrainEvents(changed);
    if (!drained) return tl::unexpected(drained.error());
    relist = !*drained;
  }
  if (relist) {
    DRIFTD_TRY(Relist());
  } else {
    for (const std::string& name : changed) DRIFTD_TRY(Refresh(name));
  }
  std::vector<DirEntry> entries;
  entries.reserve(files_.size());
  for (const auto& [name, size] : files_) entries.push_back({name, size});
  return entries;
}

Status DirectoryWatch::Relist() {
  if (!inotify_fd_.valid()) {
    // The watch is set before the listing, so nothing that happens in between is missed (an
    // event for a file the listing already saw only looks at it again).
    UniqueFd fd{::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)};
    if (fd.valid() && ::inotify_add_watch(fd.get(), directory_.c_str(), kEvents) >= 0) {
      inotify_fd_ = std::move(fd);
    } else if (!listed_) {
      GetLogger("connectors")
          ->info("{}: no inotify watch ({}); the directory is listed at every look", directory_,
                 std::strerror(errno));
    }
  } else {
    std::vector<std::string> ignored;
    auto drained = DrainEvents(ignored);  // the listing below covers them
    if (!drained) return tl::unexpected(drained.error());
  }
  auto listing = ListRegularFiles(directory_);
  if (!listing) return tl::unexpected(listing.error());
  files_.clear();
  for (DirEntry& entry : *listing) files_.emplace(std::move(entry.name), entry.size);
  listed_ = true;
  last_listing_ms_ = SteadyMs();
  ++listings_;
  return Ok();
}

Result<bool> DirectoryWatch::DrainEvents(std::vector<std::string>& changed) {
  events_.resize(64 * 1024);
  bool complete = true;
  while (true) {
    ssize_t got = ::read(inotify_fd_.get(), events_.data(), events_.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return MakeError(ErrorCode::kIo, "watching directory {}: {}", directory_,
                       std::strerror(errno));
    }
    if (got == 0) break;
    for (ssize_t at = 0; at < got;) {
      const auto* event = reinterpret_cast<const inotify_event*>(events_.data() + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      if (event->mask & IN_Q_OVERFLOW) {
        complete = false;
      } else if (event->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
        // The directory went away or moved: watch again from a new listing (which reports a
        // directory that is gone).
        complete = false;
        inotify_fd_ = UniqueFd();
        return complete;
      } else if (event->len > 0) {
        changed.emplace_back(event->name);
      }
    }
  }
  return complete;
}

Status DirectoryWatch::Refresh(const std::string& name) {
  struct stat info {};
  const std::string path = JoinPath(directory_, name);
  if (::stat(path.c_str(), &info) != 0) {
    if (errno != ENOENT) {
      return MakeError(ErrorCode::kIo, "inspecting {}: {}", path, std::strerror(errno));
    }
    files_.erase(name);
    return Ok();
  }
  if (S_ISREG(info.st_mode)) {
    files_[name] = static_cast<int64_t>(info.st_size);
  } else {
    files_.erase(name);
  }
  return Ok();
}

}  // namespace driftd
