#include "transport/rma_pool.hpp"

#include "transport/guard.hpp"

#include <algorithm>
#include <exception>

#include "antdt/error.hpp"

namespace antdt::detail {

RmaStepPool::RmaStepPool(const Communicator& comm) : comm_(&comm) {
  const MPI_Aint bytes = comm.is_root() ? static_cast<MPI_Aint>(sizeof(std::int64_t)) : 0;
  ANTDT_CHECK_MPI(MPI_Win_allocate(bytes, sizeof(std::int64_t), MPI_INFO_NULL, comm.get(), &counter_, &window_));
  if (comm.is_root()) *counter_ = 0;
  ANTDT_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_));
  ANTDT_CHECK_MPI(MPI_Barrier(comm.get()));  // the counter is 0 before anyone claims
}

RmaStepPool::~RmaStepPool() {
  if (window_ == MPI_WIN_NULL || std::uncaught_exceptions() > 0 || waits_abandoned()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Win_unlock_all(window_);
  MPI_Win_free(&window_);
}

void RmaStepPool::count(double t0) {
  ++atomics_;
  seconds_ += MPI_Wtime() - t0;
}

std::int64_t RmaStepPool::claim(std::int64_t want, std::int64_t global_batch, std::int64_t& claimed_before) {
  const double t0 = MPI_Wtime();
  ANTDT_CHECK_MPI(MPI_Fetch_and_op(&want, &claimed_before, MPI_INT64_T, 0, 0, MPI_SUM, window_));
  ANTDT_CHECK_MPI(MPI_Win_flush(0, window_));
  count(t0);
  return std::clamp<std::int64_t>(global_batch - claimed_before, 0, want);
}

std::int64_t RmaStepPool::claimed() {
  const double t0 = MPI_Wtime();
  std::int64_t value = 0;
  ANTDT_CHECK_MPI(MPI_Fetch_and_op(nullptr, &value, MPI_INT64_T, 0, 0, MPI_NO_OP, window_));
  ANTDT_CHECK_MPI(MPI_Win_flush(0, window_));
  count(t0);
  return value;
}

void RmaStepPool::reset() {
  if (!comm_->is_root()) return;
  // Every rank has reported, so no claim of this step is in flight; the store must be visible
  // to the atomics of the next step, which come after the replies.
  const std::int64_t zero = 0;
  std::int64_t old = 0;
  ANTDT_CHECK_MPI(MPI_Fetch_and_op(&zero, &old, MPI_INT64_T, 0, 0, MPI_REPLACE, window_));
  ANTDT_CHECK_MPI(MPI_Win_flush(0, window_));
}

}  // namespace antdt::detail
