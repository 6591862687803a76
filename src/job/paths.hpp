// Output files of the apps: checked before any work starts, written so that a failure is an
// error and never a silently short file (docs/errors.md, "Outputs").
#pragma once

#include <string>
#include <vector>

namespace antdt::cli {

// A path and the option that named it ("--summary-json"), for messages.
struct NamedPath {
  std::string option;
  std::string path;
};

// Checks each output before any work: it is not a directory; its directory exists and is
// writable; it is not the same file as an input (canonical paths, so "./a.h5", "../x/a.h5" and
// a symbolic or hard link to it all count), nor as another output; and it is not a file the
// checkpoint store owns in `checkpoint_dir` (a checkpoint, its lock or run identity). Throws
// UsageError with one line naming the option and the path. Empty paths are skipped.
void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs,
                   const std::string& checkpoint_dir = "");

// Refuses, with a UsageError naming the option and the path, an output that exists already
// (through a symbolic link too) unless `overwrite`, with a message that names
// `overwrite_option`; and, even with it, an existing output that is not a regular file (a
// device, a FIFO), which a file renamed into place would replace. Empty paths are skipped.
void check_new_outputs(const std::vector<NamedPath>& outputs, bool overwrite, const std::string& overwrite_option);

// An output written under a temporary name beside it and renamed into place by commit(), so
// that several outputs are all written before any is put in place. The constructor reserves
// a new hidden name in the target's directory (created empty, exclusively); the destructor
// removes it unless committed. commit() renames it over the target (a symbolic link's target,
// not the link) and syncs the directory; without `replace` it never replaces a file that
// appeared since the checks (UsageError). Failures are WriteError naming the option.
class StagedOutput {
 public:
  StagedOutput(NamedPath output, bool replace);
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;
  ~StagedOutput();

  // Where to write: the temporary, on the target's file system.
  [[nodiscard]] const std::string& path() const noexcept { return temp_; }
  void commit();

 private:
  NamedPath output_;
  std::string target_;
  std::string temp_;
  bool replace_;
  bool committed_ = false;
};

// Writes `text` to `output.path` so that it is there whole or not at all: a temporary file
// beside it, every write checked, fsync, rename over the target (a symbolic link's target),
// fsync of the directory. On failure (a full disk, say) the temporary is removed, an earlier
// file of that name is left as it was, and WriteError names the option and the reason. An
// existing target that is not a regular file (/dev/null, a FIFO) is written in place.
void write_file_atomically(const NamedPath& output, const std::string& text);

// After a failed write to an output streamed as the run goes (metrics, timeline, sample log):
// removes the file if nothing of it reached the disk, so that a full disk leaves no 0-byte
// file that looks like a run's output. A partly written file is kept: its rows are real.
void remove_if_empty(const std::string& path) noexcept;

}  // namespace antdt::cli
