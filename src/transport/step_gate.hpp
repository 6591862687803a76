// Private: waiting for the other ranks without hanging and without spinning (docs/errors.md,
// "A stalled rank").
//
// Bulk-synchronous training waits for its slowest rank at every step's reduction. Inside a
// blocking MPI or NCCL collective that wait spins a core at 100% and never ends if the rank it
// waits for has stalled (stopped, hung in I/O, swapping). So before the reduction every rank
// passes a StepGate: it tells rank 0 it has arrived and waits, polling with sleeps, for rank
// 0's word (sent to each rank directly, so that a stalled rank cannot hold it from others).
// Rank 0 waits at most the step timeout for the others; if some have not arrived it names
// them and tells every rank to stop. Once a rank passes the gate, every rank has arrived, and
// the reduction that follows waits for nobody.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "antdt/comm.hpp"

namespace antdt::detail {

// Seconds on the steady clock (any fixed origin).
[[nodiscard]] double steady_seconds();

// Polls `requests` with MPI_Testall until all are complete or the steady clock passes
// `deadline` (steady_seconds(); infinity: none). The first 20 ms spin, as a blocking
// collective would (a balanced step's wait is shorter, and a sleep could wake late on a busy
// node); then the rank sleeps between tests, each sleep a twentieth of the time waited so far
// (50 to 200 us): a rank waiting long for a slow one idles, and notices the last arrival at
// most 0.2 ms late. (With 1 ms naps, a static run whose fast ranks waited 26 ms of each 39 ms
// step lost 7.5% to the late wake-ups.)
// Returns false at the deadline with the requests still pending.
[[nodiscard]] bool wait_all(std::span<MPI_Request> requests, double deadline);

// How long a rank other than 0 waits for rank 0's word beyond the timeout: rank 0 should speak
// first, since only it can name the ranks that are missing.
[[nodiscard]] double grace_seconds(double timeout);

class StepGate {
 public:
  using NameRank = std::function<std::string(int rank)>;  // "rank 3 (node n2)"

  // Collective: duplicates `comm` (the gate's messages never meet the step's others).
  // timeout_seconds > 0.
  StepGate(const Communicator& comm, double timeout_seconds, NameRank name);

  // Collective, before the step's reduction: returns once every rank has arrived. Throws
  // StallError on every live rank when some rank has not arrived within the timeout of
  // rank 0's arrival (the message, on rank 0, names the missing ones).
  void pass(std::int64_t step);

  [[nodiscard]] double timeout_seconds() const noexcept { return timeout_; }

 private:
  void pass_root(std::int64_t step);
  void pass_other(std::int64_t step);

  Communicator comm_;
  double timeout_;
  NameRank name_;
  std::int64_t arrival_ = 0;  // this rank's message (non-root); kept until it is sent
  std::int64_t go_ = 0;       // rank 0's word: 1 go on, 0 stop
  std::vector<std::int64_t> arrivals_;
  std::vector<MPI_Request> requests_;
};

// The last resort behind the gate: a blocking collective (MPI_Allreduce, an NCCL all-reduce)
// has no timeout, and a rank that stalls inside one, after every rank passed the gate, would
// hold the others there for good. While armed, a thread watches the clock; past the deadline it
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
