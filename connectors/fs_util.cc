#include "connectors/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <system_error>

namespace driftd {

namespace {

tl::unexpected<Error> IoError(std::string_view what, const std::string& path, int error) {
  return MakeError(ErrorCode::kIo, "{} {}: {}", what, path, std::strerror(error));
}

Status WriteAll(int fd, const std::string& path, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return IoError("writing", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return Ok();
}


}  // namespace

Status SyncDirectory(const std::string& directory) {
  UniqueFd fd{::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!fd.valid()) return IoError("opening directory", directory, errno);
  if (::fsync(fd.get()) != 0) return IoError("syncing directory", directory, errno);
  return Ok();
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string JoinPath(std::string_view directory, std::string_view name) {
  std::string path(directory);
  if (!path.empty() && path.back() != '/') path.push_back('/');
  path += name;
  return path;
}

Result<std::vector<DirEntry>> ListRegularFiles(const std::string& directory) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir{::opendir(directory.c_str()), &::closedir};
  if (!dir) return IoError("listing directory", directory, errno);
  std::vector<DirEntry> entries;
  while (true) {
    errno = 0;
    dirent* entry = ::readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return IoError("listing directory", directory, errno);
      break;
    }
    std::string_view name(entry->d_name);
    if (name == "." || name == "..") continue;
    struct stat info {};
    if (::fstatat(::dirfd(dir.get()), entry->d_name, &info, 0) != 0) {
      if (errno == ENOENT) continue;  // removed while listing
      return IoError("inspecting", JoinPath(directory, name), errno);
    }
    if (!S_ISREG(info.st_mode)) continue;
    entries.push_back({std::string(name), static_cast<int64_t>(info.st_size)});
  }
  std::sort(entries.begin(), entries.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return entries;
}

Status CreateDirectories(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return MakeError(ErrorCode::kIo, "creating directory {}: {}", directory, error.message());
  }
  return Ok();
}

Status CreateOwnerOnlyDirectories(const std::string& directory) {
  // Each missing component is made 0700 here rather than by create_directories, whose modes
  // the umask decides; the umask can only take bits away, so chmod sets the exact mode.
  std::string path;
  size_t at = 0;
  while (at <= directory.size()) {
    size_t slash = directory.find('/', at);
    if (slash == std::string::npos) slash = directory.size();
    path = directory.substr(0, slash);
    at = slash + 1;
    if (path.empty() || path == "." || path == "..") continue;
    if (::mkdir(path.c_str(), 0700) == 0) {
      if (::chmod(path.c_str(), 0700) != 0) return IoError("setting the mode of", path, errno);
    } else if (errno != EEXIST) {
      return IoError("creating directory", path, errno);
    }
  }
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) return IoError("inspecting", directory, errno);
  if (!S_ISDIR(info.st_mode)) {
    return MakeError(ErrorCode::kIo, "{} is not a directory", directory);
  }
  return Ok();
}

Result<int64_t> FileSizeOrMissing(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return int64_t{-1};
    return IoError("inspecting", path, errno);
  }
  return static_cast<int64_t>(info.st_size);
}

Result<UniqueFd> OpenForReading(const std::string& path) {
  UniqueFd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd.valid()) return IoError("opening", path, errno);
  return fd;
}

Status ReadAt(const UniqueFd& fd, const std::string& path, int64_t offset, size_t size,
              std::string& out) {
  out.resize(size);
  size_t done = 0;
  DRIFTD_TRY(ReadAt(fd, path, offset, size, out.data(), done));
  out.resize(done);
  return Ok();
}

Status ReadAt(const UniqueFd& fd, const std::string& path, int64_t offset, size_t size,
              char* out, size_t& got) {
  got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd.get(), out + got, size - got,
                        static_cast<off_t>(offset + static_cast<int64_t>(got)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("reading", path, errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return Ok();
}

Result<std::string> ReadWholeFile(const std::string& path) {
  auto fd = OpenForReading(path);
  if (!fd) return tl::unexpected(fd.error());
  std::string data;
  std::string block;
  int64_t offset = 0;
  while (true) {
    DRIFTD_TRY(ReadAt(*fd, path, offset, 1 << 16, block));
    if (block.empty()) break;
    data += block;
    offset += static_cast<int64_t>(block.size());
  }
  return data;
}

namespace {

// The exact mode of a file kOwnerOnly asks for (the umask may have left it 0644, or less).
Status RestrictAccess(int fd, const std::string& path, FileAccess access) {
  if (access == FileAccess::kOwnerOnly && ::fchmod(fd, 0600) != 0) {
    return IoError("setting the mode of", path, errno);
  }
  return Ok();
}

/// The temp-file, fsync, rename and directory-fsync protocol of WriteFileAtomically, with the
/// file's bytes written by `write` to the open temp file.
Status ReplaceFileAtomically(const std::string& directory, const std::string& name, bool durable,
                             FileAccess access,
                             const std::function<Status(int fd, const std::string& path)>& write) {
  // Hidden (leading '.') so directory readers and the file source's globs skip it.
  std::string temp_path = JoinPath(directory, "." + name + ".tmp");
  std::string final_path = JoinPath(directory, name);
  {
    UniqueFd fd{::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (!fd.valid()) return IoError("creating", temp_path, errno);
    DRIFTD_TRY(RestrictAccess(fd.get(), temp_path, access));
    DRIFTD_TRY(write(fd.get(), temp_path));
    if (durable && ::fsync(fd.get()) != 0) return IoError("syncing", temp_path, errno);
  }
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    int error = errno;
    ::unlink(temp_path.c_str());
    return IoError("renaming into place", final_path, error);
  }
  return durable ? SyncDirectory(directory) : Ok();
}

}  // namespace

Status WriteFileAtomically(const std::string& directory, const std::string& name,
                           std::string_view data, bool durable, FileAccess access) {
  return ReplaceFileAtomically(directory, name, durable, access,
                               [&](int fd, const std::string& path) {
                                 return WriteAll(fd, path, data);
                               });
}

Result<int64_t> WriteLinesAtomically(const std::string& directory, const std::string& name,
                                     std::span<const std::string> lines, bool durable) {
  int64_t bytes = 0;
  auto write = [&](int fd, const std::string& path) -> Status {
    // Lines go out in blocks of about kBlock bytes: a batch's output is not copied whole.
    constexpr size_t kBlock = 1 << 20;
    std::string block;
    block.reserve(kBlock);
    for (const std::string& line : lines) {
      if (!block.empty() && block.size() + line.size() + 1 > kBlock) {
        DRIFTD_TRY(WriteAll(fd, path, block));
        bytes += static_cast<int64_t>(block.size());
        block.clear();
      }
      block += line;
      block.push_back('\n');
    }
    DRIFTD_TRY(WriteAll(fd, path, block));
    bytes += static_cast<int64_t>(block.size());
    return Ok();
  };
  auto replaced = ReplaceFileAtomically(directory, name, durable, FileAccess::kShared, write);
  if (!replaced) return tl::unexpected(replaced.error());
  return bytes;
}

Status SyncFile(const std::string& path) {
  UniqueFd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd.valid()) return IoError("opening", path, errno);
  if (::fsync(fd.get()) != 0) return IoError("syncing", path, errno);
  return Ok();
}

Status AppendToFile(const std::string& path, std::string_view data, FileAccess access) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string directory = path.substr(0, slash);
    if (access == FileAccess::kOwnerOnly) {
      DRIFTD_TRY(CreateOwnerOnlyDirectories(directory));
    } else {
      DRIFTD_TRY(CreateDirectories(directory));
    }
  }
  UniqueFd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                     access == FileAccess::kOwnerOnly ? 0600 : 0644)};
  if (!fd.valid()) return IoError("opening", path, errno);
  DRIFTD_TRY(RestrictAccess(fd.get(), path, access));
  DRIFTD_TRY(WriteAll(fd.get(), path, data));
  if (::fsync(fd.get()) != 0) return IoError("syncing", path, errno);
  return Ok();
}

}  // namespace driftd
