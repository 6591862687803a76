// Error policy (docs/errors.md): recoverable conditions throw a subclass of antdt::Error;
// broken invariants are assertions. Every foreign call goes through one checked-call macro
// that stringifies the call, adds file:line and decodes the library's own message.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace antdt {

// The one root of every exception antdt throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // True when every rank of the job throws this error (the same kind, the same message): the
  // ranks agreed on it, so none is left waiting and the job can end without MPI_Abort.
  [[nodiscard]] bool shared() const noexcept { return shared_; }
  // True on a rank that only heard of this error from another rank, which reports it: one line
  // is printed for the job, by the rank that saw it first-hand.
  [[nodiscard]] bool heard() const noexcept { return heard_; }
  void set_shared(bool shared, bool heard) noexcept { shared_ = shared, heard_ = heard; }

 private:
  bool shared_ = false;
  bool heard_ = false;
};

// Bad usage: an invalid option, argument or combination. CLIs exit with code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A file that cannot be used: missing, unreadable, wrong shape or type. The message names
// the file and the data set.
class FileError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be restored: wrong version, truncated, shape mismatch.
class CheckpointError : public FileError {
 public:
  using FileError::FileError;
};

// A rank stalled: it did not reach the step's gradient reduction (or its control exchange)
// within the step timeout (SessionOptions::step_timeout_seconds). Every live rank throws it, so
// none waits forever. first_hand() is true on the rank that saw the stall itself (rank 0 names
// the ranks that did not arrive; a rank that heard nothing from rank 0 names rank 0); false
// on a rank that only heard of it from rank 0, which need not repeat the message. nodes(): the
// stalled ranks' node names, each once, where rank 0 named the ranks that did not arrive; empty
// when they are not known (a rank that heard nothing from rank 0 cannot tell whether rank 0 or
// a rank it waits for stalled), so a healthy node is never among them.
class StallError : public Error {
 public:
  StallError(const std::string& what, bool first_hand, std::vector<std::string> nodes = {})
      : Error(what), nodes_(std::move(nodes)) {
    set_shared(shared(), !first_hand);
  }
  [[nodiscard]] bool first_hand() const noexcept { return !heard(); }
  [[nodiscard]] const std::vector<std::string>& nodes() const noexcept { return nodes_; }

 private:
  std::vector<std::string> nodes_;
};

// A write that failed once it was under way: an output or checkpoint file that could not be
// written, flushed, synced or renamed into place (disk full, read-only, I/O error). What was
// written before (older checkpoints, the input files) is untouched. CLIs exit with code 3.
class WriteError : public FileError {
 public:
  using FileError::FileError;
};

// Training produced a non-finite loss or gradient (NaN or Inf): the run stopped before the
// update and before any checkpoint of it, so the newest checkpoint is the last good state.
// CLIs exit with code 4.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

// A failed MPI call; code() is the MPI error code, what() carries MPI_Error_string.
class MpiError : public Error {
 public:
  MpiError(int code, const std::string& what) : Error(what), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

// A failed CUDA runtime or cuBLAS call.
class CudaError : public Error {
 public:
  CudaError(int code, const std::string& what) : Error(what), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

// A failed NCCL call.
class NcclError : public Error {
 public:
  NcclError(int code, const std::string& what) : Error(what), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

// A device that was asked for but cannot be used.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// The exit codes of antdt's programs and of antdt::run_main (docs/errors.md). Every rank of a
// job exits with the same one for the same cause.
inline constexpr int kExitRuntime = 1;    // an MPI, CUDA or device failure, or a bug
inline constexpr int kExitUsage = 2;      // bad usage or input (options, data, checkpoint, output paths)
inline constexpr int kExitWrite = 3;      // a write under way failed (an output or a checkpoint)
inline constexpr int kExitNonFinite = 4;  // training produced a NaN or Inf (stopped before checkpointing it)
inline constexpr int kExitStalled = 5;    // a rank stalled past the step timeout (every live rank stopped)
// The run stopped for a kill-restart (docs/nd.md): a checkpoint is written and the checkpoint
// directory names the nodes to leave out; resubmit without them, resuming.
inline constexpr int kExitRestart = 75;
// The run stopped on a signal (SIGTERM, SIGINT, SIGUSR1: a time limit, preemption, Ctrl-C)
// after a checkpoint of its last step: requeue, or rerun resuming.
inline constexpr int kExitStopped = 76;

// The exit code of an exception, by the table above.
[[nodiscard]] inline int exit_code_for(const std::exception& e) noexcept {
  if (dynamic_cast<const WriteError*>(&e)) return kExitWrite;
  if (dynamic_cast<const NonFiniteError*>(&e)) return kExitNonFinite;
  if (dynamic_cast<const StallError*>(&e)) return kExitStalled;
  if (dynamic_cast<const UsageError*>(&e) || dynamic_cast<const FileError*>(&e)) return kExitUsage;
  return kExitRuntime;
}

namespace detail {
// Out-of-line throwers keep the macros small. Each decodes `code` with the library's own
// message function. throw_cuda_error aborts instead of throwing for errors that poison the
// CUDA context (illegal address, launch failure...), since no later call can succeed.
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_nccl_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_hdf5_error(const char* call, const char* file, int line);
}  // namespace detail

}  // namespace antdt

// MPI_SUCCESS, cudaSuccess, CUBLAS_STATUS_SUCCESS and ncclSuccess are all 0 by their
// standards, so these macros need none of those headers.
#define ANTDT_CHECK_MPI(call)                                                                           \
  do {                                                                                                  \
    const int antdt_mpi_rc_ = (call);                                                                   \
    if (antdt_mpi_rc_ != 0) ::antdt::detail::throw_mpi_error(antdt_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define ANTDT_CHECK_CUDA(call)                                                                             \
  do {                                                                                                     \
    const int antdt_cuda_rc_ = static_cast<int>(call);                                                     \
    if (antdt_cuda_rc_ != 0) ::antdt::detail::throw_cuda_error(antdt_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define ANTDT_CHECK_CUBLAS(call)                                                                                 \
  do {                                                                                                           \
    const int antdt_cublas_rc_ = static_cast<int>(call);                                                         \
    if (antdt_cublas_rc_ != 0) ::antdt::detail::throw_cublas_error(antdt_cublas_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define ANTDT_CHECK_NCCL(call)                                                                             \
  do {                                                                                                     \
    const int antdt_nccl_rc_ = static_cast<int>(call);                                                     \
    if (antdt_nccl_rc_ != 0) ::antdt::detail::throw_nccl_error(antdt_nccl_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// HDF5 calls return a negative value on failure (herr_t or hid_t).
#define ANTDT_CHECK_HDF5(call)                                                    \
  do {                                                                            \
    if ((call) < 0) ::antdt::detail::throw_hdf5_error(#call, __FILE__, __LINE__); \
  } while (0)

// Invariant checks: always on (cheap), they abort with file:line and the condition.
#define ANTDT_ASSERT(cond, msg)                                                     \
  do {                                                                              \
    if (!(cond)) ::antdt::detail::assertion_failed(#cond, msg, __FILE__, __LINE__); \
  } while (0)

namespace antdt::detail {
[[noreturn]] void assertion_failed(const char* cond, const char* msg, const char* file, int line) noexcept;
}  // namespace antdt::detail
