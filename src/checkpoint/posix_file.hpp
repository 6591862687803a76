// Private: the POSIX file calls the checkpoint store and the job's outputs share.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <span>
#include <string_view>
#include <utility>

namespace antdt::detail {

// Writes all of `bytes` to `fd`, retrying short writes and EINTR; false (errno set, EIO for a
// write that made no progress) on failure.
inline bool write_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

inline bool write_all(int fd, std::string_view text) {
  return write_all(fd, std::as_bytes(std::span(text.data(), text.size())));
}

// An open file descriptor, closed on destruction unless release()d.
class FileDescriptor {
 public:
  FileDescriptor() noexcept = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

}  // namespace antdt::detail
