// Private: the last resort behind the guarded waits (docs/errors.md, "A stalled rank").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace antdt::detail {

// The last resort behind the guarded waits (guard.hpp): a wait antdt cannot poll (a blocking
// NCCL all-reduce) has no timeout, and a rank that stalls inside one would hold the others
// there for good. While armed, a thread watches the clock; past the deadline it
// writes one line to stderr and ends the process with kStallExitCode (no MPI call: it is not
// the thread MPI was given). The launcher (mpirun; srun --kill-on-bad-exit) then ends the job.
class StallWatchdog {
 public:
  static constexpr int kStallExitCode = 5;

  StallWatchdog(double seconds, int rank);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  void arm(std::int64_t step);  // the reduction of `step` begins
  void disarm();                // it ended
  // How often the watching thread has woken (tests: arming each step must not wake it).
  [[nodiscard]] std::uint64_t wakeups() const;

 private:
  void watch();

  double seconds_;
  int rank_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool armed_ = false, quit_ = false;
  bool idle_ = false;  // the thread waits for an arm() with no deadline
  std::uint64_t wakeups_ = 0;
  std::int64_t step_ = 0;
  double deadline_ = 0.0;
  std::thread thread_;
};

}  // namespace antdt::detail
