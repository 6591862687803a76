#include "job/paths.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "antdt/error.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/posix_file.hpp"
#include "core/option_names.hpp"

namespace antdt::cli {

namespace {

namespace fs = std::filesystem;

// The path with every symbolic link of its existing part resolved, and "." and ".." gone: two
// names of one file give the same canonical path unless they are hard links. A link whose
// target does not exist yet (a dangling link) is followed too: writing through it creates
// that target, so it names the same file as the target's own name.
fs::path canonical_of(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return fs::absolute(path).lexically_normal();
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    fs::path next = fs::weakly_canonical(target.is_absolute() ? target : p.parent_path() / target, ec);
    if (ec) break;
    p = next;
  }
  return p;
}

bool same_file(const std::string& a, const std::string& b) {
  if (canonical_of(a) == canonical_of(b)) return true;
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec) && !ec;  // hard links
}

std::string quoted(const NamedPath& p) { return p.option + " '" + p.path + "'"; }

using detail::write_all;

}  // namespace

void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs,
                   const std::string& checkpoint_dir) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    std::error_code ec;
    if (fs::is_directory(out.path, ec)) {
      throw UsageError(quoted(out) + " is a directory; give a file name in it");
    }
    // The checkpoint directory may not exist yet: it is made when training starts, and the
    // output would only fail after the whole run.
    const auto bare = [](std::string p) {  // "ck/" and "ck" are one directory
      while (p.size() > 1 && p.back() == '/') p.pop_back();
      return p;
    };
    if (!checkpoint_dir.empty() && canonical_of(bare(out.path)) == canonical_of(bare(checkpoint_dir))) {
      throw UsageError(quoted(out) + " is the " + detail::option_name("checkpoint-dir") +
                       ", which training makes a directory; give a file name in it or beside it");
    }
    const fs::path parent = fs::absolute(out.path, ec).parent_path();
    if (!fs::is_directory(parent, ec)) {
      throw UsageError(quoted(out) + ": the directory '" + parent.string() + "' does not exist; create it first");
    }
    if (::access(parent.c_str(), W_OK | X_OK) != 0) {
      throw UsageError(quoted(out) + ": the directory '" + parent.string() + "' is not writable (" +
                       std::strerror(errno) + ")");
    }
    for (const NamedPath& in : inputs) {
      if (!in.path.empty() && same_file(out.path, in.path)) {
        throw UsageError(quoted(out) + " is the same file as " + quoted(in) +
                         "; writing it would destroy that input, so give the output another name");
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (!outputs[j].path.empty() && same_file(out.path, outputs[j].path)) {
        throw UsageError(quoted(out) + " is the same file as " + quoted(outputs[j]) + "; give each output its own");
      }
    }
    if (!checkpoint_dir.empty() && canonical_of(parent.string()) == canonical_of(checkpoint_dir) &&
        is_checkpoint_store_name(fs::path(out.path).filename().string())) {
      throw UsageError(quoted(out) + " names a file of the checkpoint store in " +
                       detail::option_name("checkpoint-dir") + " '" + checkpoint_dir +
                       "'; give the output another name");
    }
  }
}

void check_new_outputs(const std::vector<NamedPath>& outputs, bool overwrite, const std::string& overwrite_option) {
  for (const NamedPath& out : outputs) {
    if (out.path.empty()) continue;
    std::error_code ec;
    const fs::file_status st = fs::status(out.path, ec);  // follows symbolic links
    if (!fs::exists(st)) continue;                        // a dangling link's target is created
    if (!fs::is_regular_file(st)) {
      throw UsageError(quoted(out) + " exists and is not a regular file; give the name of a file to write");
    }
    if (!overwrite) {
      throw UsageError(quoted(out) + " exists; pass " + overwrite_option + " to replace it, or give another name");
    }
  }
}

StagedOutput::StagedOutput(NamedPath output, bool replace)
    : output_(std::move(output)), target_(canonical_of(output_.path).string()), replace_(replace) {
  const fs::path target(target_);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const fs::path tmp = target.parent_path() / ("." + target.filename().string() + "." + std::to_string(::getpid()) +
                                                 "-" + std::to_string(attempt) + ".staged");
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      temp_ = tmp.string();
      return;
    }
    if (errno != EEXIST) break;
  }
  throw WriteError("cannot write " + quoted(output_) + ": cannot create a temporary file beside it (" +
                   std::strerror(errno) + "); nothing was written there");
}

StagedOutput::~StagedOutput() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove(temp_, ignored);
  }
}

void StagedOutput::commit() {
  int rc = 0;
  if (replace_) {
    rc = std::rename(temp_.c_str(), target_.c_str());
  } else {
    // Never replace a file that appeared since the checks: renameat2 with RENAME_NOREPLACE,
    // or, on a file system without it, a hard link (which fails on an existing name).
    rc = ::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      rc = ::link(temp_.c_str(), target_.c_str());
      if (rc == 0) ::unlink(temp_.c_str());
    }
    if (rc != 0 && errno == EEXIST) {
      throw UsageError(quoted(output_) + " appeared while this output was being made; it was left as it is: " +
                       "give another name, or move that file away first");
    }
  }
  if (rc != 0) {
    throw WriteError("cannot write " + quoted(output_) + ": renaming the finished file into place failed (" +
                     std::strerror(errno) + "); nothing was written there");
  }
  committed_ = true;
  // The rename is durable once the directory is synced; a failure here leaves a whole file.
  const int dir = ::open(fs::path(target_).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const NamedPath& output, const std::string& text) {
  const fs::path target = canonical_of(output.path);
  auto fail = [&](const std::string& why) {
    return WriteError("cannot write " + quoted(output) + ": " + why + "; nothing was written there");
  };
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {  // a device or a FIFO: in place
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw fail(std::strerror(errno));
    const bool ok = write_all(fd, text);
    const int err = errno;
    ::close(fd);
    if (!ok) throw fail(std::strerror(err));
    return;
  }
  const fs::path tmp = target.parent_path() / ("." + target.filename().string() + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw fail(std::strerror(errno));
  bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  std::error_code ec;
  if (ok) {
    fs::rename(tmp, target, ec);
    if (ec) {
      ok = false;
      err = ec.value();
    }
  }
  if (!ok) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw fail(std::strerror(err));
  }
  // The rename is durable once the directory is synced; a failure here leaves a whole file.
  const int dir = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void remove_if_empty(const std::string& path) noexcept {
  std::error_code ignored;
  if (std::filesystem::is_regular_file(path, ignored) && std::filesystem::file_size(path, ignored) == 0) {
    std::filesystem::remove(path, ignored);
  }
}

}  // namespace antdt::cli
