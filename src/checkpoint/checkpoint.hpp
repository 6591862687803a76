// Checkpoint store: one HDF5 file per checkpoint, written atomically, versioned and
// checksummed (design: docs/checkpoint.md).
//
// A checkpoint is a flat set of named entries (names may contain '/' to form groups). The
// container knows nothing about models or ledgers: the Session decides the names. Replicated
// state is written by ONE rank (rank 0) and may be read by every rank at once. One writer
// per directory at a time; readers never see a checkpoint before its commit() returned.
//
//   CheckpointWriter w(dir, step);
//   w.put_floats("model/params", params);
//   w.put_int64("train/epoch", epoch);
//   w.commit();                                   // <dir>/ckpt-00000042.h5
//
//   if (auto path = find_latest_checkpoint(dir)) {
//     CheckpointReader r(*path);
//     auto params = r.floats("model/params", expected_size);   // throws CheckpointError
//   }
//
// Errors: a checkpoint that cannot be restored (missing, not HDF5, truncated, wrong format
// version, missing or mistyped entry, wrong size, checksum mismatch) throws
// antdt::CheckpointError with one line naming the file and the entry. Bad arguments (an
// invalid name, a name put twice, use after commit) throw antdt::UsageError; failed writes
// throw antdt::WriteError (a FileError).
//
// A directory belongs to one run at a time (docs/checkpoint.md, "One run per directory"): the
// writing rank holds a CheckpointDirectoryLock for the life of the run, and the run's
// identity (data, model shape, seeds) is recorded beside the checkpoints (RunIdentity).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace antdt {

// Bumped whenever the layout changes in a way an older reader would misread. Readers accept
// exactly this version.
inline constexpr std::int64_t kCheckpointFormatVersion = 1;

namespace detail {
struct CheckpointWriterState;
struct CheckpointReaderState;
}  // namespace detail

// Writes one checkpoint. Each put_* writes its entry to a hidden temporary file at once (so
// memory stays at one copy of the caller's data); commit() makes the checkpoint visible
// atomically. Move-only. Not thread-safe.
class CheckpointWriter {
 public:
  // Starts a checkpoint for `step` (>= 0) in `directory` (created if missing). Nothing is
  // visible until commit(). Throws UsageError for a negative step, FileError if the
  // directory or the temporary file cannot be created.
  CheckpointWriter(std::string directory, std::int64_t step);
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  CheckpointWriter(CheckpointWriter&&) noexcept;
  CheckpointWriter& operator=(CheckpointWriter&&) noexcept;
  // Removes an uncommitted temporary file; never throws.
  ~CheckpointWriter();

  // `name`: non-empty components of [A-Za-z0-9_.-] separated by single '/', no leading or
  // trailing '/', no "." or ".." component. Each name may be put once. Throws UsageError on a
  // bad or repeated name, or a name that clashes with a group ("a" and "a/b").
  void put_floats(const std::string& name, std::span<const float> values);
  void put_doubles(const std::string& name, std::span<const double> values);
  void put_int64s(const std::string& name, std::span<const std::int64_t> values);
  void put_uint64s(const std::string& name, std::span<const std::uint64_t> values);
  void put_bytes(const std::string& name, std::span<const std::byte> bytes);
  void put_int64(const std::string& name, std::int64_t value);
  void put_double(const std::string& name, double value);
  void put_string(const std::string& name, const std::string& value);

  // Writes the version and completeness marker, closes and fsyncs <dir>/.ckpt-<step>.h5.tmp,
  // renames it to <dir>/ckpt-<step:08>.h5 (replacing a previous checkpoint of the same
  // step), fsyncs the directory, then applies retention: keeps this checkpoint and the
  // `keep`-1 newest older ones, deletes the rest, deletes checkpoints with a LARGER step (they
  // belong to a run that was abandoned when training resumed from an older one) and stale
  // temporary files. Returns the final path. Throws UsageError if keep < 1 or on a second
  // commit; WriteError on I/O failure (the temporary file is removed, the previous checkpoints
  // are untouched). A failed deletion during retention is logged, not thrown.
  std::string commit(int keep = 3);

  [[nodiscard]] std::int64_t step() const noexcept;

 private:
  std::unique_ptr<detail::CheckpointWriterState> state_;
};

// Reads one checkpoint. Opening validates the file: it exists; its raw bytes match the size and
// checksum in its header (checked before HDF5 parses anything; a file from before antdt wrote
// the header has none and skips this); it is HDF5 and not truncated, carries this format
// version and the completeness marker. Every read validates the entry:
// present, a data set, the expected type and shape, and its checksum. Several ranks may read
// the same file at once. Move-only; not thread-safe.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  [[nodiscard]] std::int64_t step() const;
  [[nodiscard]] std::string antdt_version() const;
  [[nodiscard]] std::int64_t format_version() const;
  // True when the file carries antdt's whole-file checksum, which the constructor checked before
  // HDF5 parsed the file; false for a checkpoint written before antdt stored one (read as before).
  [[nodiscard]] bool has_file_checksum() const;

  // True if `name` is a data set (not a group) in this checkpoint.
  [[nodiscard]] bool has(const std::string& name) const;
  // Names of every data set, sorted.
  [[nodiscard]] std::vector<std::string> names() const;

  // expected_count >= 0: the entry must hold exactly that many elements; -1: any size.
  [[nodiscard]] std::vector<float> floats(const std::string& name, std::int64_t expected_count = -1) const;
  [[nodiscard]] std::vector<double> doubles(const std::string& name, std::int64_t expected_count = -1) const;
  [[nodiscard]] std::vector<std::int64_t> int64s(const std::string& name, std::int64_t expected_count = -1) const;
  [[nodiscard]] std::vector<std::uint64_t> uint64s(const std::string& name, std::int64_t expected_count = -1) const;
  [[nodiscard]] std::vector<std::byte> bytes(const std::string& name) const;
  [[nodiscard]] std::int64_t int64(const std::string& name) const;
  [[nodiscard]] double real(const std::string& name) const;
  [[nodiscard]] std::string string(const std::string& name) const;

  // Reads every data set and checks its checksum; throws CheckpointError on the first bad
  // one. Costs one full read of the file. find_latest_checkpoint() calls it.
  void verify() const;

  [[nodiscard]] const std::string& path() const;

 private:
  std::unique_ptr<detail::CheckpointReaderState> state_;
};

// Path of the newest checkpoint in `directory` that is committed and passes
// CheckpointReader::verify(), or std::nullopt if there is none (or no such directory).
// Temporary files (crashed writes) and invalid checkpoints are skipped with a warning naming
// the file and the reason, falling back to the next older one. Throws FileError only if the
// directory exists but cannot be listed. Safe to call on every rank, but each call reads the
// chosen checkpoint in full to verify it: at scale, call it on rank 0 and broadcast the path.
[[nodiscard]] std::optional<std::string> find_latest_checkpoint(const std::string& directory);

// Committed checkpoint files (ckpt-<step>.h5) in `directory`, oldest (smallest step) first.
// Not validated. Empty if the directory does not exist; FileError if it cannot be listed.
[[nodiscard]] std::vector<std::string> list_checkpoints(const std::string& directory);

// Deletes every committed checkpoint and every temporary one in `directory` (a run that was
// told to start over in a directory of another run). WriteError if one cannot be deleted.
void remove_checkpoints(const std::string& directory);

// True for the file names the checkpoint store owns in its directory: ckpt-<step>.h5, the
// temporaries, the lock and the run identity. Other files there are never touched.
[[nodiscard]] bool is_checkpoint_store_name(const std::string& file_name);

// An exclusive lock on a checkpoint directory for the life of this object: flock(2) on
// <directory>/antdt.lock, a file that also records the holder's host and pid for the message a
// second writer gets. The kernel releases the lock when the process ends, however it ends
// (kill -9 included), so a stale lock never blocks a restart. Take it on the one rank that
// writes checkpoints, before reading or writing anything in the directory; the lock file is
// never deleted (deleting it would let two processes lock two different files).
// The constructor creates the directory if missing. It throws FileError, naming the
// directory, when the directory cannot be created or written (read-only, full), and when
// another process holds the lock ("in use by another run: host h, pid p"). On a file system
// without flock (Lustre mounted without -o flock) it logs a warning and holds nothing.
// Move-only; the destructor releases the lock and never throws.
class CheckpointDirectoryLock {
 public:
  explicit CheckpointDirectoryLock(const std::string& directory);
  CheckpointDirectoryLock(const CheckpointDirectoryLock&) = delete;
  CheckpointDirectoryLock& operator=(const CheckpointDirectoryLock&) = delete;
  CheckpointDirectoryLock(CheckpointDirectoryLock&& other) noexcept;
  CheckpointDirectoryLock& operator=(CheckpointDirectoryLock&& other) noexcept;
  ~CheckpointDirectoryLock();

  // False when the file system refused flock (the warning case above).
  [[nodiscard]] bool held() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// What makes checkpoints belong to one run, recorded as <directory>/antdt-run: ordered
// `key = value` lines (keys [a-z0-9_], values one line each). The caller decides the keys; a
// restart compares its own identity with the recorded one before restoring anything.
struct RunIdentity {
  std::vector<std::pair<std::string, std::string>> fields;

  // The value of `key`, or nullptr.
  [[nodiscard]] const std::string* find(const std::string& key) const;
};

// The recorded identity; nullopt when the directory has none (a new directory, or one written
// before antdt recorded identities). CheckpointError, naming the file and line, when the file
// is there but unreadable or malformed.
[[nodiscard]] std::optional<RunIdentity> read_run_identity(const std::string& directory);
// Records `identity` atomically (temporary file, fsync, rename, fsync of the directory).
// UsageError for a bad key or a value with a line break; WriteError when the write fails.
void write_run_identity(const std::string& directory, const RunIdentity& identity);
// The fields whose values differ, or that only one side has, as "key: A there, B here" joined
// by "; ". Empty when the two identities are the same.
[[nodiscard]] std::string describe_difference(const RunIdentity& recorded, const RunIdentity& current);

}  // namespace antdt
