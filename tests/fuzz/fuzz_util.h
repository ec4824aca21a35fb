// Shared by the libFuzzer harnesses: fuzzed bytes as a file path without touching the disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace driftd::fuzz {

/// An anonymous in-memory file (memfd) holding `bytes`, reachable as path(): readers that take
/// a path (pipeline files, reference files) read it as a regular file.
class MemoryFile {
 public:
  explicit MemoryFile(std::string_view bytes) {
    fd_ = memfd_create("driftd-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    size_t written = 0;
    while (written < bytes.size()) {
      ssize_t n = write(fd_, bytes.data() + written, bytes.size() - written);
      if (n <= 0) std::abort();
      written += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace driftd::fuzz
