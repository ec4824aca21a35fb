// A directory's regular files and their sizes, kept current by inotify instead of listing the
// directory at every look: the file source asks for its input files at every batch, and under
// the continuous trigger every few milliseconds, and a listing stats every file in it.
//
// Files() lists the directory once, then applies what inotify reports since the last call:
// only the files named in events are looked at again. A full listing is still made when the
// event queue overflowed, and every `relist_interval_ms` in any case, for file systems whose
// changes inotify does not see (a network file system written from another machine). Without
// inotify (its limits reached), every call lists.
//
// Thread-safety: one thread at a time (the executor's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "connectors/fs_util.h"
#include "engine/result.h"

namespace driftd {

class DirectoryWatch {
 public:
  /// Watches `directory`; nothing is read until the first Files(). Default relist interval:
  /// 10 s.
  explicit DirectoryWatch(std::string directory, int64_t relist_interval_ms = 10'000);
  ~DirectoryWatch();
  DirectoryWatch(const DirectoryWatch&) = delete;
  DirectoryWatch& operator=(const DirectoryWatch&) = delete;

  /// The regular files directly in the directory, sorted by name, as of now.
  Result<std::vector<DirEntry>> Files();

  /// Full listings made so far (the first one included): for tests.
  int64_t listings() const { return listings_; }
  /// Whether inotify watches the directory (false: every Files() lists).
  bool watching() const { return inotify_fd_.valid(); }

 private:
  Status Relist();
  // Reads the pending events; false when a full listing is needed.
  Result<bool> DrainEvents(std::vector<std::string>& changed);
  Status Refresh(const std::string& name);

  std::string directory_;
  int64_t relist_interval_ms_;
  UniqueFd inotify_fd_;
  bool listed_ = false;
  int64_t last_listing_ms_ = 0;
  int64_t listings_ = 0;
  std::map<std::string, int64_t> files_;
  std::vector<char> events_;
};

}  // namespace driftd
