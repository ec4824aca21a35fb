// Small POSIX file helpers shared by the file source and the file sink: an owned descriptor,
// sorted directory listings, positional reads and durable atomic writes (temp file, fsync,
// rename, directory fsync). Errors come back as Status with the path named.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace driftd {

/// Owns a file descriptor; closes it on destruction. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

/// A regular file in a directory listing.
struct DirEntry {
  std::string name;  // file name, without the directory
  int64_t size = 0;
};

/// Regular files directly in `directory`, sorted by name. Entries that vanish while listing
/// are skipped.
Result<std::vector<DirEntry>> ListRegularFiles(const std::string& directory);

/// Joins a directory and a file name with one '/'.
std::string JoinPath(std::string_view directory, std::string_view name);

/// Creates `directory` and its parents if missing.
Status CreateDirectories(const std::string& directory);

/// Who may read a file a helper creates. kOwnerOnly: mode 0600 exactly, whatever the umask,
/// also when the file was there already (a sink's files in a checkpoint: dead letters hold
/// rows and errors). kShared: 0644 less the umask (output other programs read).
enum class FileAccess { kShared, kOwnerOnly };

/// Creates `directory` and its missing parents with mode 0700 exactly, whatever the umask
/// (existing ones are left as they are).
Status CreateOwnerOnlyDirectories(const std::string& directory);

/// Size of the file at `path`; -1 if it does not exist.
Result<int64_t> FileSizeOrMissing(const std::string& path);

Result<UniqueFd> OpenForReading(const std::string& path);

/// Reads up to `size` bytes at `offset` into `out` (resized to the bytes read; fewer only at
/// end of file).
Status ReadAt(const UniqueFd& fd, const std::string& path, int64_t offset, size_t size,
              std::string& out);
/// Reads up to `size` bytes at `offset` into out[0, size); `got` is how many (fewer only at end
/// of file).
Status ReadAt(const UniqueFd& fd, const std::string& path, int64_t offset, size_t size,
              char* out, size_t& got);

/// Reads a whole (small) file.
Result<std::string> ReadWholeFile(const std::string& path);

/// Writes `data` to `directory/name` so that readers see either the old file or the complete
/// new one, and the new one survives a crash once this returns: a hidden temp file in the same
/// directory is written and fsynced, renamed over `name`, then the directory is fsynced.
/// With `durable` false nothing is synced: readers still see the old or the whole new file,
/// and a killed process loses nothing (the data is in the OS's cache), but an OS crash or power
/// loss may; the caller then makes it durable later with SyncFile and SyncDirectory.
Status WriteFileAtomically(const std::string& directory, const std::string& name,
                           std::string_view data, bool durable = true,
                           FileAccess access = FileAccess::kShared);
/// WriteFileAtomically of `lines`, each followed by '\n', written in blocks (the lines are not
/// first joined into one string). The bytes written.
Result<int64_t> WriteLinesAtomically(const std::string& directory, const std::string& name,
                                     std::span<const std::string> lines, bool durable = true);

/// fsync of a file, or of a directory (its entries: files created or renamed into it).
Status SyncFile(const std::string& path);
Status SyncDirectory(const std::string& directory);

/// Appends `data` to `path` (created if missing, with its directory) and fsyncs it. With
/// kOwnerOnly, missing directories are created 0700 (CreateOwnerOnlyDirectories).
Status AppendToFile(const std::string& path, std::string_view data,
                    FileAccess access = FileAccess::kShared);

}  // namespace driftd
