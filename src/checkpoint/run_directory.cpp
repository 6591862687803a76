// One run per checkpoint directory (docs/checkpoint.md): the writer's lock and the run's
// recorded identity.
//
// The lock is flock(2), not fcntl(2): a POSIX record lock is dropped when the process closes
// ANY descriptor of the file (HDF5 or a library could open it), while an flock belongs to the
// one open file description held here. Both are released by the kernel when the process dies,
// which is what makes a lock file safe against kill -9: nothing has to clean it up, and the
// file itself stays (removing it would let a second process lock a new file of the same name
// while the first still holds the old one).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include "antdt/error.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/posix_file.hpp"
#include "checkpoint/store_names.hpp"
#include "core/log.hpp"

namespace fs = std::filesystem;

namespace antdt {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

using detail::write_all;

std::string read_small_file(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string this_host() {
  char host[256] = {};
  return ::gethostname(host, sizeof host - 1) == 0 ? std::string(host) : std::string("unknown host");
}

void fsync_directory(const fs::path& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw WriteError("cannot open directory '" + directory.string() + "' to fsync it: " + errno_text(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw WriteError("fsync of directory '" + directory.string() + "' failed: " + errno_text(saved));
}

bool valid_key(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The lock
// ---------------------------------------------------------------------------------------

CheckpointDirectoryLock::CheckpointDirectoryLock(const std::string& directory) {
  if (directory.empty()) throw UsageError("checkpoint directory must not be empty");
  const fs::path dir(directory);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw FileError("cannot create checkpoint directory '" + directory +
                    "': " + (ec ? ec.message() : std::string("a file of that name is in the way")));
  }
  const fs::path path = dir / detail::kCheckpointLockFile;
  // Held read-only: a descriptor open for writing would keep the file system from being remounted
  // read-only (EBUSY), and the holder line is written through a short-lived second descriptor.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw FileError("checkpoint directory '" + directory + "' is not writable (" + errno_text(errno) +
                    "); give --checkpoint-dir a directory this job can write");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      ::close(fd);
      std::string holder = read_small_file(path);
      if (holder.empty()) holder = "holder unknown";
      throw FileError("checkpoint directory '" + directory + "' is in use by another run (" + holder +
                      "); two runs must not write one directory: give this one its own --checkpoint-dir");
    }
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
      ::close(fd);
      ANTDT_LOG(warn) << "cannot lock checkpoint directory '" << directory << "' (" << errno_text(err)
                      << ": the file system does not support flock); make sure no other run writes it";
      return;
    }
    ::close(fd);
    throw FileError("cannot lock checkpoint directory '" + directory + "': " + errno_text(err));
  }
  // Ours now: record who holds it. This is also the first write into the directory, so a full
  // disk shows here, before any training, and not at the first checkpoint.
  const std::string holder = "host " + this_host() + ", pid " + std::to_string(::getpid()) + "\n";
  const int out = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  bool written = out >= 0 && write_all(out, holder);
  int err = errno;
  if (out >= 0 && ::close(out) != 0 && written) {
    written = false;
    err = errno;
  }
  if (!written) {
    ::close(fd);
    throw FileError("checkpoint directory '" + directory + "' is not writable (" + errno_text(err) +
                    "); give --checkpoint-dir a directory this job can write");
  }
  fd_ = fd;
}

CheckpointDirectoryLock::CheckpointDirectoryLock(CheckpointDirectoryLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

CheckpointDirectoryLock& CheckpointDirectoryLock::operator=(CheckpointDirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CheckpointDirectoryLock::~CheckpointDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

// ---------------------------------------------------------------------------------------
// The run identity
// ---------------------------------------------------------------------------------------

const std::string* RunIdentity::find(const std::string& key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<RunIdentity> read_run_identity(const std::string& directory) {
  const fs::path path = fs::path(directory) / detail::kRunIdentityFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw CheckpointError("run identity '" + path.string() + "' cannot be read");
  RunIdentity identity;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const auto eq = line.find(" = ");
    const std::string key = eq == std::string::npos ? std::string() : line.substr(0, eq);
    if (!valid_key(key)) {
      throw CheckpointError("run identity '" + path.string() + "', line " + std::to_string(number) +
                            ": expected 'key = value'; the file was not written by antdt");
    }
    identity.fields.emplace_back(key, line.substr(eq + 3));
  }
  if (in.bad()) throw CheckpointError("run identity '" + path.string() + "' cannot be read");
  return identity;
}

void write_run_identity(const std::string& directory, const RunIdentity& identity) {
  std::string text;
  for (const auto& [key, value] : identity.fields) {
    if (!valid_key(key)) throw UsageError("run identity key '" + key + "' must be non-empty [a-z0-9_]");
    if (value.find_first_of("\r\n") != std::string::npos) {
      throw UsageError("run identity value of '" + key + "' must be one line");
    }
    text += key + " = " + value + "\n";
  }
  const fs::path dir(directory);
  const fs::path tmp = dir / detail::kRunIdentityTmpFile;
  const fs::path path = dir / detail::kRunIdentityFile;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw WriteError("cannot write run identity '" + tmp.string() + "': " + errno_text(errno));
  const bool written = write_all(fd, text) && ::fsync(fd) == 0;
  const int err = errno;
  const bool closed = ::close(fd) == 0;
  std::error_code ec;
  if (!written || !closed) {
    fs::remove(tmp, ec);
    throw WriteError("cannot write run identity '" + path.string() + "': " + errno_text(written ? errno : err));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw WriteError("cannot rename '" + tmp.string() + "' to '" + path.string() + "': " + ec.message());
  }
  fsync_directory(dir);
}

std::string describe_difference(const RunIdentity& recorded, const RunIdentity& current) {
  std::string out;
  auto add = [&](const std::string& key, const std::string* there, const std::string* here) {
    out += (out.empty() ? "" : "; ") + key + ": " + (there ? *there : std::string("(none)")) + " there, " +
           (here ? *here : std::string("(none)")) + " here";
  };
  for (const auto& [key, value] : recorded.fields) {
    const std::string* mine = current.find(key);
    if (!mine || *mine != value) add(key, &value, mine);
  }
  for (const auto& [key, value] : current.fields) {
    if (!recorded.find(key)) add(key, nullptr, &value);
  }
  return out;
}

}  // namespace antdt
