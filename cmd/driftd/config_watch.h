// Watches the pipeline file's directory (or the pipeline directory) with inotify, so that
// `driftd run --reload-on-change` re-reads the pipelines when they change, as SIGHUP does:
// an editor's save, a file added or removed, or Kubernetes swapping a mounted ConfigMap (it
// renames a new "..data" symlink into place). Changes are debounced: a burst of events makes
// one reload once the directory has been quiet for a moment.
//
// Lifecycle: Create, then Poll() from the control loop (non-blocking); destruction closes
// the descriptor. One thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/result.h"

namespace driftd {

class ConfigWatch {
 public:
  /// `path`: the pipeline file or directory given to `run`.
  static Result<std::unique_ptr<ConfigWatch>> Create(const std::string& path, bool directory,
                                                     std::chrono::milliseconds quiet);
  ~ConfigWatch();
  ConfigWatch(const ConfigWatch&) = delete;
  ConfigWatch& operator=(const ConfigWatch&) = delete;

  /// Reads pending events; true once a change has been followed by `quiet` without events.
  bool Poll();

 private:
  ConfigWatch() = default;
  int fd_ = -1;
  std::string watched_;
  std::string file_name_;  // file mode: only this name (and ConfigMap's "..data") counts
  std::chrono::milliseconds quiet_{500};
  bool pending_ = false;
  std::chrono::steady_clock::time_point last_event_{};
};

}  // namespace driftd
