// Private: the job's step pool (the Agent's StepPool, adapted in the Session): one 64-bit counter in rank 0's memory,
// claimed with MPI_Fetch_and_op under a passive-target lock_all epoch that lasts the session.
// A claim is one atomic fetch-and-add plus a flush: about half a microsecond between ranks of
// one node (osc sm) and a few microseconds with hardware atomics across nodes (osc ucx or rdma
// on InfiniBand). Where the MPI has no hardware atomics (osc pt2pt over TCP) a claim waits for
// rank 0 to enter MPI, which it does at each of its own micro-chunks (docs/nd.md).
#pragma once

#include <mpi.h>

#include <cstdint>

#include "transport/comm.hpp"

namespace antdt::detail {

class RmaStepPool {
 public:
  // Collective over `comm` (which must outlive the pool).
  explicit RmaStepPool(const Communicator& comm);
  RmaStepPool(const RmaStepPool&) = delete;
  RmaStepPool& operator=(const RmaStepPool&) = delete;
  // Frees the window (collective) unless an exception is unwinding, when a peer may never
  // come: the process is about to end then, and MPI reclaims it.
  ~RmaStepPool();

  // Claims up to `want` of this step's `global_batch` samples; returns how many it got (0: all
  // are claimed) and sets `claimed_before` to what had been claimed before.
  std::int64_t claim(std::int64_t want, std::int64_t global_batch, std::int64_t& claimed_before);
  [[nodiscard]] std::int64_t claimed();
  // Rank 0, between steps (after every rank's report, before the replies): the next step's
  // pool starts empty.
  void reset();

  // This rank's atomics on the counter so far, and the wall time they took.
  [[nodiscard]] std::int64_t atomics() const noexcept { return atomics_; }
  [[nodiscard]] double seconds() const noexcept { return seconds_; }

 private:
  void count(double t0);
  const Communicator* comm_;
  MPI_Win window_ = MPI_WIN_NULL;
  std::int64_t* counter_ = nullptr;  // rank 0's
  std::int64_t atomics_ = 0;
  double seconds_ = 0.0;
};

}  // namespace antdt::detail
